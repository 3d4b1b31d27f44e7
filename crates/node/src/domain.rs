//! The INT domains a node knows (INT v2.1 §"INT-MD Metadata Header Format" and §"INT-MX Header
//! Format", *Domain Specific ID*: "If the Domain Specific ID matches any Domain ID known to this
//! node, then additional processing of the Domain Specific Flags (DS Flags) and Domain Specific
//! Instruction (DS Instruction) is required"): the bit definitions in the registry's format
//! (`shared/spec/domains.example.toml`), this node's values of the domain's export metadata, and
//! the DS Flags it sets.

use std::collections::BTreeMap;

use intscope_wire::domain::{MetadataDef, Mode, Reporting};

use crate::hex_bytes::HexBytes;

/// A domain this node knows (`[[domains]]` in the node configuration).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct KnownDomain {
    /// Domain Specific ID (1..=0xFFFF; 0 is the default domain, whose DS bits are reserved).
    pub id: u16,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// One definition per DS Instruction bit, as in the domain registry.
    #[serde(default)]
    pub metadata: Vec<MetadataDef>,
    /// This node's values of the domain's export metadata, by metadata name (hex, the
    /// definition's size). An export bit without a value is unavailable: all ones in INT-MD
    /// metadata, its DSMdBits bit cleared in reports.
    #[serde(default)]
    pub values: BTreeMap<String, HexBytes>,
    /// DS Flags bits this node sets in the domain's INT-MD and INT-MX headers it forwards
    /// (INT v2.1: transit hops "can set ... DS Flags"; a source ORs them into its entry's).
    #[serde(default)]
    pub set_ds_flags: u16,
}

/// A `[[domains]]` entry that cannot be used, naming what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("domains[0x{id:04x}]: {problem}")]
pub struct DomainError {
    /// The domain's ID.
    pub id: u16,
    /// What is wrong.
    pub problem: String,
}

impl KnownDomain {
    /// Checks what serde cannot: an ID other than 0, bits 0–15 each defined once with a size of
    /// a multiple of 4, values of the defined sizes for export metadata.
    pub fn validate(&self) -> Result<(), DomainError> {
        let bad = |problem: String| DomainError {
            id: self.id,
            problem,
        };
        if self.id == 0 {
            return Err(bad(
                "id 0 is the default domain; its DS bits are reserved".into()
            ));
        }
        let mut seen = 0u16;
        for m in &self.metadata {
            let bit = 0x8000u16.checked_shr(u32::from(m.bit)).unwrap_or(0);
            if m.bit > 15 || seen & bit != 0 {
                return Err(bad(format!(
                    "metadata {:?}: bit {} out of 0..=15 or defined twice",
                    m.name, m.bit
                )));
            }
            seen |= bit;
            if m.size == 0 || !m.size.is_multiple_of(4) {
                return Err(bad(format!(
                    "metadata {:?}: size {} is not a multiple of 4",
                    m.name, m.size
                )));
            }
        }
        for (name, v) in &self.values {
            let Some(m) = self.metadata.iter().find(|m| &m.name == name) else {
                return Err(bad(format!("values.{name}: no metadata of that name")));
            };
            if m.mode != Mode::Export || v.0.len() != usize::from(m.size) {
                return Err(bad(format!(
                    "values.{name}: {} bytes for {:?} metadata of {} bytes (export metadata only)",
                    v.0.len(),
                    m.mode,
                    m.size
                )));
            }
        }
        Ok(())
    }
}

/// A known domain ready for the packet path: definitions sorted by bit with their values.
#[derive(Debug, Clone)]
pub struct Domain {
    /// Domain Specific ID.
    pub id: u16,
    defs: Vec<(MetadataDef, Option<Vec<u8>>)>,
    /// DS Flags this node sets in the domain's headers.
    pub set_ds_flags: u16,
}

/// The domain-specific part of a report (Report v2.0 §"Individual Report Main Contents").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DsReport {
    /// Domain Specific ID.
    pub(crate) id: u16,
    /// DSMdBits: the metadata included.
    pub(crate) bits: u16,
    /// DSMdstatus: the packet's DS Flags as this node leaves them.
    pub(crate) status: u16,
    /// The metadata, in bit order.
    pub(crate) md: Vec<u8>,
}

/// The domain `id` names among `domains` (the default domain 0 is no domain).
pub(crate) fn find(domains: &[Domain], id: u16) -> Option<&Domain> {
    if id == 0 {
        return None;
    }
    domains.iter().find(|d| d.id == id)
}

fn bit(m: &MetadataDef) -> u16 {
    0x8000 >> m.bit
}

impl Domain {
    /// The domain as `k` configures it.
    pub fn of(k: &KnownDomain) -> Self {
        let mut defs: Vec<(MetadataDef, Option<Vec<u8>>)> = k
            .metadata
            .iter()
            .map(|m| (m.clone(), k.values.get(&m.name).map(|v| v.0.clone())))
            .collect();
        defs.sort_by_key(|(m, _)| m.bit);
        Domain {
            id: k.id,
            defs,
            set_ds_flags: k.set_ds_flags,
        }
    }

    fn defined(&self) -> u16 {
        self.defs.iter().fold(0, |a, (m, _)| a | bit(m))
    }

    /// Bytes of the `mode` metadata `bits` asks for; `None` when a set bit is not defined.
    pub(crate) fn len_of(&self, bits: u16, mode: Mode) -> Option<usize> {
        if bits & !self.defined() != 0 {
            return None;
        }
        Some(
            self.defs
                .iter()
                .filter(|(m, _)| bits & bit(m) != 0 && m.mode == mode)
                .map(|(m, _)| usize::from(m.size))
                .sum(),
        )
    }

    /// Writes this node's export metadata for `bits` into `out` in bit order (all ones where it
    /// has no value); `false`, writing nothing, when a bit is undefined or the sizes do not add
    /// up to `out`'s length.
    pub(crate) fn fill_export(&self, bits: u16, out: &mut [u8]) -> bool {
        if self.len_of(bits, Mode::Export) != Some(out.len()) {
            return false;
        }
        let mut at = 0;
        for (m, value) in &self.defs {
            if bits & bit(m) == 0 || m.mode != Mode::Export {
                continue;
            }
            let end = at + usize::from(m.size);
            match value {
                Some(v) => out[at..end].copy_from_slice(v),
                None => out[at..end].fill(0xff),
            }
            at = end;
        }
        true
    }

    /// Every DS Instruction made of the bits this domain defines, with the export metadata a
    /// transit hop pushes for it ([`KnownDomain::values`], all ones where none); `None` when
    /// there would be more than `max` (2 to the number of defined bits). A DS Instruction with
    /// an undefined bit set is not among them: its domain is unknown to the packet.
    pub fn export_table(&self, max: usize) -> Option<Vec<(u16, Vec<u8>)>> {
        let defined = self.defined();
        if 1usize.checked_shl(defined.count_ones())? > max {
            return None;
        }
        // Every subset of the defined bits, the empty one first.
        let mut out = Vec::new();
        let mut bits: u16 = 0;
        loop {
            let len = self.len_of(bits, Mode::Export)?;
            let mut md = vec![0u8; len];
            self.fill_export(bits, &mut md);
            out.push((bits, md));
            bits = bits.wrapping_sub(defined) & defined;
            if bits == 0 {
                return Some(out);
            }
        }
    }

    /// What this node reports of the domain for a packet with `ds_instruction` and (after this
    /// node) `ds_flags`: its export metadata with a value, and the source-inserted metadata of
    /// an INT-MX header (`mx_body`) whose reporting requirement is all nodes, or the sink at a
    /// sink (INT v2.1 §"INT-MX Header Format", option b: copied into the Variable Optional
    /// Domain Specific Metadata, DSMdBits kept set). Everything else has its bit cleared.
    pub(crate) fn report(
        &self,
        ds_instruction: u16,
        ds_flags: u16,
        mx_body: Option<&[u8]>,
        at_sink: bool,
    ) -> DsReport {
        let mut r = DsReport {
            id: self.id,
            bits: 0,
            status: ds_flags,
            md: Vec::new(),
        };
        let mut inserted_at = 0;
        for (m, value) in &self.defs {
            if ds_instruction & bit(m) == 0 {
                continue;
            }
            let size = usize::from(m.size);
            let bytes = match m.mode {
                Mode::Export => value.as_deref(),
                Mode::SourceInserted => {
                    let from = inserted_at;
                    inserted_at += size;
                    let wanted = match m.reporting {
                        Reporting::All => true,
                        Reporting::Sink => at_sink,
                        Reporting::None => false,
                    };
                    mx_body
                        .filter(|_| wanted)
                        .and_then(|b| b.get(from..from + size))
                }
            };
            if let Some(b) = bytes {
                r.bits |= bit(m);
                r.md.extend_from_slice(b);
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_table_has_every_combination_of_the_defined_bits() {
        let k: KnownDomain = toml::from_str(
            r#"
            id = 0xABCD
            values = { delay = "0000002a" }
            [[metadata]]
            bit = 2
            name = "delay"
            size = 4
            [[metadata]]
            bit = 3
            name = "tag"
            size = 4
            mode = "source-inserted"
            [[metadata]]
            bit = 5
            name = "path"
            size = 8
            "#,
        )
        .unwrap();
        let table = Domain::of(&k).export_table(8).unwrap();
        assert_eq!(table.len(), 8);
        let of = |bits: u16| table.iter().find(|(b, _)| *b == bits).unwrap().1.clone();
        assert_eq!(of(0), Vec::<u8>::new());
        assert_eq!(of(0x2000), vec![0, 0, 0, 0x2a]);
        assert_eq!(
            of(0x1000),
            Vec::<u8>::new(),
            "source-inserted: no export bytes"
        );
        assert_eq!(of(0x2400), [vec![0, 0, 0, 0x2a], vec![0xff; 8]].concat());
        assert!(table.iter().all(|(b, _)| b & !0x3400 == 0));
        assert_eq!(Domain::of(&k).export_table(7), None, "past the bound");
    }
}
