//! Node names: what the console shows beside the INT node IDs that reports carry (a switch ID
//! means little to an operator who knows the fabric as `leaf3` and `spine1`). Loaded from a
//! topology file (`intscope collect --topology FILE`, or `topology` in the config file), or set
//! by the program that built the fabric (`intscope demo`, `intscope lab`).
//!
//! Formats, told apart by their content:
//! - **ONOS network configuration** (JSON, as SD-Fabric / fabric-tna deployments keep it): each
//!   entry of `devices` whose `segmentrouting.ipv4NodeSid` is set names that node ID (fabric-tna
//!   programs a switch's node SID as its INT switch ID), by `basic.name`, else
//!   `segmentrouting.name`, else the device key without its `device:` scheme.
//! - **A node list** (JSON): `{"nodes": [{"id": 101, "name": "spine1"}, ...]}`, `switch_id` for
//!   `id` also read (the form topology exports of INT analytics products take).
//! - **TOML**: `[[node]]` tables with `id` and `name`.
//!
//! Bounds: at most [`MAX_NAMES`] names of at most [`MAX_NAME_LEN`] bytes, printable and without
//! control characters (a name is shown in HTML and in terminals); a file beyond them, or one
//! naming an ID twice, is refused with the reason.

use std::collections::BTreeMap;
use std::path::Path;

/// Most node names a collector keeps.
pub const MAX_NAMES: usize = 65_536;

/// Longest node name, bytes.
pub const MAX_NAME_LEN: usize = 64;

/// Largest topology file read, bytes.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Names by INT node ID.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct NodeNames(BTreeMap<u32, String>);

/// Why a topology file gives no names.
#[derive(Debug, thiserror::Error)]
pub enum NamesError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is none of the formats, or breaks a bound.
    #[error("{0}")]
    Invalid(String),
}

impl NodeNames {
    /// Names from `(id, name)` pairs, checked against the bounds.
    pub fn from_pairs(
        pairs: impl IntoIterator<Item = (u32, String)>,
    ) -> Result<NodeNames, NamesError> {
        let mut names = BTreeMap::new();
        for (id, name) in pairs {
            if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(|c| c.is_control())
            {
                return Err(NamesError::Invalid(format!(
                    "node {id}: the name {name:?} is not 1 to {MAX_NAME_LEN} bytes of printable text"
                )));
            }
            if names.insert(id, name).is_some() {
                return Err(NamesError::Invalid(format!("node {id} is named twice")));
            }
            if names.len() > MAX_NAMES {
                return Err(NamesError::Invalid(format!(
                    "more than {MAX_NAMES} node names"
                )));
            }
        }
        Ok(NodeNames(names))
    }

    /// Reads a topology file (see the module's formats).
    pub fn load(path: &Path) -> Result<NodeNames, NamesError> {
        let io = |source| NamesError::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_FILE_BYTES {
            return Err(NamesError::Invalid(format!(
                "{}: {len} bytes, more than the {MAX_FILE_BYTES} a topology file may have",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        Self::parse(&text).map_err(|e| NamesError::Invalid(format!("{}: {e}", path.display())))
    }

    /// Reads a topology file's text.
    pub fn parse(text: &str) -> Result<NodeNames, NamesError> {
        if text.trim_start().starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| NamesError::Invalid(format!("not JSON: {e}")))?;
            if let Some(devices) = v.get("devices").and_then(|d| d.as_object()) {
                return Self::from_pairs(devices.iter().filter_map(|(key, d)| {
                    let sr = d.get("segmentrouting")?;
                    let id = u32::try_from(sr.get("ipv4NodeSid")?.as_u64()?).ok()?;
                    let name = d
                        .pointer("/basic/name")
                        .or_else(|| sr.get("name"))
                        .and_then(|n| n.as_str())
                        .unwrap_or_else(|| key.strip_prefix("device:").unwrap_or(key));
                    Some((id, name.to_string()))
                }));
            }
            if let Some(nodes) = v.get("nodes").and_then(|n| n.as_array()) {
                let pairs = nodes
                    .iter()
                    .map(|n| {
                        let id = n
                            .get("id")
                            .or_else(|| n.get("switch_id"))
                            .and_then(|i| i.as_u64())
                            .and_then(|i| u32::try_from(i).ok());
                        let name = n.get("name").and_then(|s| s.as_str());
                        match (id, name) {
                            (Some(id), Some(name)) => Ok((id, name.to_string())),
                            _ => Err(NamesError::Invalid(format!(
                                "a node without a 32-bit `id` (or `switch_id`) and a `name`: {n}"
                            ))),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                return Self::from_pairs(pairs);
            }
            return Err(NamesError::Invalid(
                "JSON with neither `devices` (ONOS network configuration) nor `nodes`".into(),
            ));
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Named {
            id: u32,
            name: String,
        }
        #[derive(serde::Deserialize)]
        struct Nodes {
            #[serde(default)]
            node: Vec<Named>,
        }
        let nodes: Nodes = toml::from_str(text)
            .map_err(|e| NamesError::Invalid(format!("neither JSON nor TOML `[[node]]`: {e}")))?;
        if nodes.node.is_empty() {
            return Err(NamesError::Invalid(
                "no `[[node]]` table with `id` and `name`".into(),
            ));
        }
        Self::from_pairs(nodes.node.into_iter().map(|n| (n.id, n.name)))
    }

    /// The name of node `id`.
    pub fn get(&self, id: u32) -> Option<&str> {
        self.0.get(&id).map(String::as_str)
    }

    /// How many nodes are named.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no node is named.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_onos_netcfg_names_devices_by_node_sid() {
        let names = NodeNames::parse(
            r#"{"devices": {
                "device:leaf1": {"segmentrouting": {"ipv4NodeSid": 101, "name": "sr-leaf1"},
                                 "basic": {"name": "leaf-1"}},
                "device:spine1": {"segmentrouting": {"ipv4NodeSid": 201, "name": "spine-1"}},
                "device:spine2": {"segmentrouting": {"ipv4NodeSid": 202}},
                "device:host-facing": {"basic": {"name": "no SID, no INT ID"}}
            }, "apps": {}}"#,
        )
        .unwrap();
        assert_eq!(names.get(101), Some("leaf-1"));
        assert_eq!(names.get(201), Some("spine-1"));
        assert_eq!(names.get(202), Some("spine2"));
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn a_node_list_and_toml_tables_name_ids() {
        let json = NodeNames::parse(
            r#"{"nodes": [{"id": 1, "name": "a"}, {"switch_id": 2, "name": "b"}]}"#,
        )
        .unwrap();
        let toml =
            NodeNames::parse("[[node]]\nid = 1\nname = \"a\"\n\n[[node]]\nid = 2\nname = \"b\"\n")
                .unwrap();
        assert_eq!(json, toml);
        assert_eq!(toml.get(2), Some("b"));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let err = |text: &str| NodeNames::parse(text).unwrap_err().to_string();
        assert!(
            err(r#"{"nodes": [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]}"#)
                .contains("named twice")
        );
        assert!(err(r#"{"nodes": [{"id": 1, "name": "a\u001b[31m"}]}"#).contains("printable"));
        assert!(
            err(&format!(
                r#"{{"nodes": [{{"id": 1, "name": "{}"}}]}}"#,
                "x".repeat(65)
            ))
            .contains("printable")
        );
        assert!(err(r#"{"nodes": [{"id": 4294967296, "name": "a"}]}"#).contains("32-bit"));
        assert!(err(r#"{"links": []}"#).contains("neither"));
        assert!(err("[topology]\nleaves = 2\n").contains("[[node]]"));
        assert!(err("{ not json").contains("not JSON"));
        let many: String = (0..=MAX_NAMES)
            .map(|i| format!("[[node]]\nid = {i}\nname = \"n{i}\"\n"))
            .collect();
        assert!(err(&many).contains("more than"));
    }
}
