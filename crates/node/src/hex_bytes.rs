//! Bytes written in configuration files as hex strings.

/// Bytes written in a configuration file as a hex string (`"0x0a0b0c0d"` or `"0a 0b 0c 0d"`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HexBytes(pub Vec<u8>);

impl serde::Serialize for HexBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(&self.0))
    }
}

impl<'de> serde::Deserialize<'de> for HexBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let digits: String = text
            .trim_start_matches("0x")
            .chars()
            .filter(|c| !c.is_whitespace() && *c != ':')
            .collect();
        hex::decode(&digits)
            .map(HexBytes)
            .map_err(|e| serde::de::Error::custom(format!("{text:?}: {e}")))
    }
}
