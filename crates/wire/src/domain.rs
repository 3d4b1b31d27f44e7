//! Registry of domain-specific metadata (INT v2.1 §"INT-MD Metadata Header Format" and
//! §"INT-MX Header Format", *Domain Specific ID* / *DS Instruction*).
//!
//! The spec leaves each domain's DS Instruction bits to the operator. A bit's definition gives
//! its size and how nodes treat it: *mode* (export: every node adds/reports it; source-inserted:
//! only the source writes it), *reporting* (all nodes, sink, none) and *mutability* (source-only,
//! cumulative). The file format is `shared/spec/domains.example.toml`: one `[[domain]]` with `id`
//! and `name`, one `[[domain.metadata]]` per bit with `bit` (0 = MSB), `name`, `size` (bytes, a
//! multiple of 4), `mode`, `reporting`, `mutability`.
//!
//! Without a definition the decoder still delimits domain bytes (from Hop ML and the shim length)
//! and shows them raw.

use std::collections::BTreeMap;

/// DS Instruction mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every node adds (INT-MD) or reports (INT-MX) this metadata.
    Export,
    /// Only the source inserts it (INT-MD 'source-only'; INT-MX header metadata).
    SourceInserted,
}

/// Which nodes report source-inserted metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reporting {
    /// Every node (source, transit, sink).
    All,
    /// Only the sink.
    Sink,
    /// Nobody: it is for other nodes.
    None,
}

/// Whether transit/sink nodes may change source-inserted metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutability {
    /// Only the source writes it.
    SourceOnly,
    /// Transit and sink nodes may update it.
    Cumulative,
}

/// One DS Instruction bit's definition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataDef {
    /// Bit number, 0 = MSB.
    pub bit: u8,
    /// Name used in output (JSON key).
    pub name: String,
    /// Size in bytes, a multiple of 4.
    pub size: u16,
    /// Export or source-inserted.
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// Reporting requirement of source-inserted metadata.
    #[serde(default = "default_reporting")]
    pub reporting: Reporting,
    /// Mutability of source-inserted metadata.
    #[serde(default = "default_mutability")]
    pub mutability: Mutability,
}

fn default_mode() -> Mode {
    Mode::Export
}
fn default_reporting() -> Reporting {
    Reporting::All
}
fn default_mutability() -> Mutability {
    Mutability::SourceOnly
}

/// One domain: its ID, name and bit definitions (sorted by bit).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Domain {
    /// Domain Specific ID (1..=0xFFFF; 0 is the default domain with all bits reserved).
    pub id: u16,
    /// Human-readable name.
    pub name: String,
    /// Bit definitions.
    #[serde(default)]
    pub metadata: Vec<MetadataDef>,
}

impl Domain {
    fn defs(&self, bits: u16, mode: Mode) -> impl Iterator<Item = &MetadataDef> {
        self.metadata
            .iter()
            .filter(move |m| bits & (0x8000 >> m.bit) != 0 && m.mode == mode)
    }

    /// `Some(bytes)` of `mode` metadata `bits` requests, or `None` if a set bit is undefined.
    pub fn len_of(&self, bits: u16, mode: Mode) -> Option<usize> {
        let defined: u16 = self
            .metadata
            .iter()
            .map(|m| 0x8000u16 >> m.bit)
            .fold(0, |a, b| a | b);
        if bits & !defined != 0 {
            return None;
        }
        Some(self.defs(bits, mode).map(|m| usize::from(m.size)).sum())
    }

    /// Splits `bytes` into the named `mode` metadata of `bits`, in bit order. Bytes beyond the
    /// definitions are returned as the last item under the name `"unparsed"`.
    pub fn split<'a>(&'a self, bits: u16, mode: Mode, bytes: &'a [u8]) -> Vec<(&'a str, &'a [u8])> {
        let mut out = Vec::new();
        let mut at = 0;
        for m in self.defs(bits, mode) {
            let end = at + usize::from(m.size);
            if end > bytes.len() {
                break;
            }
            out.push((m.name.as_str(), &bytes[at..end]));
            at = end;
        }
        if at < bytes.len() {
            out.push(("unparsed", &bytes[at..]));
        }
        out
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryFile {
    #[serde(default)]
    domain: Vec<Domain>,
}

/// A registry problem, naming the config key.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The TOML does not parse or has unknown keys.
    #[error("domain registry: {0}")]
    Toml(#[from] toml::de::Error),
    /// A definition is inconsistent.
    #[error("domain registry: domain 0x{id:04x}: {problem}")]
    Invalid {
        /// The domain.
        id: u16,
        /// What is wrong, naming the key.
        problem: String,
    },
}

/// All known domains, by ID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    domains: BTreeMap<u16, Domain>,
}

impl Registry {
    /// Parses and validates a registry in the `domains.example.toml` format.
    pub fn from_toml(text: &str) -> Result<Self, RegistryError> {
        let file: RegistryFile = toml::from_str(text)?;
        let mut domains = BTreeMap::new();
        for mut d in file.domain {
            let id = d.id;
            let bad = |problem: String| RegistryError::Invalid { id, problem };
            if id == 0 {
                return Err(bad(
                    "id 0 is the default domain; its DS bits are reserved".into()
                ));
            }
            let mut seen = 0u16;
            for m in &d.metadata {
                if m.bit > 15 {
                    return Err(bad(format!(
                        "metadata '{}': bit = {} (expected 0..=15)",
                        m.name, m.bit
                    )));
                }
                if m.size == 0 || m.size % 4 != 0 {
                    return Err(bad(format!(
                        "metadata '{}': size = {} (expected a multiple of 4)",
                        m.name, m.size
                    )));
                }
                let b = 0x8000u16 >> m.bit;
                if seen & b != 0 {
                    return Err(bad(format!(
                        "metadata '{}': bit {} defined twice",
                        m.name, m.bit
                    )));
                }
                seen |= b;
            }
            d.metadata.sort_by_key(|m| m.bit);
            if domains.insert(id, d).is_some() {
                return Err(bad("defined twice".into()));
            }
        }
        Ok(Registry { domains })
    }

    /// The domain with this ID.
    pub fn get(&self, id: u16) -> Option<&Domain> {
        self.domains.get(&id)
    }

    /// Adds or replaces a domain (programmatic use; no validation beyond sorting).
    pub fn insert(&mut self, mut d: Domain) {
        d.metadata.sort_by_key(|m| m.bit);
        self.domains.insert(d.id, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../examples/domains.toml");

    #[test]
    fn example_registry_loads() {
        let r = Registry::from_toml(EXAMPLE).unwrap();
        let d = r.get(0xabcd).unwrap();
        assert_eq!(d.len_of(0xc000, Mode::SourceInserted), Some(8));
        assert_eq!(d.len_of(0xc000, Mode::Export), Some(0));
        assert_eq!(d.len_of(0x2000, Mode::Export), None);
        let ts = r.get(0x5453).unwrap();
        assert_eq!(ts.len_of(0x8000, Mode::SourceInserted), Some(8));
    }

    #[test]
    fn invalid_size_names_the_key() {
        let e = Registry::from_toml(
            "[[domain]]\nid = 5\nname = 'x'\n[[domain.metadata]]\nbit = 1\nname = 'y'\nsize = 6\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("size = 6"), "{e}");
    }
}
