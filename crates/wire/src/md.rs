//! INT-MD metadata header (INT v2.1 §"INT-MD Metadata Header Format").
//!
//! ```text
//! |Ver=2|D|E|M| Reserved (12) | Hop ML (5) | Remaining Hop Cnt (8) |
//! | Instruction Bitmap (16)       | Domain Specific ID (16)          |
//! | DS Instruction (16)           | DS Flags (16)                    |
//! | INT metadata stack: each hop inserts Hop ML * 4 bytes, newest first |
//! ```

use crate::error::{Layer, Result, array, check_len};
use crate::field::{be16, be32, put16, put32};

/// Size of the INT-MD metadata header.
pub const MD_HEADER_LEN: usize = 12;

/// Checked view of an INT-MD metadata header (the stack follows it).
#[derive(Debug, Clone, Copy)]
pub struct MdHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MdHeader<T> {
    /// Wraps `buffer` after checking it holds the 12-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::IntMd, buffer.as_ref(), MD_HEADER_LEN)?;
        Ok(MdHeader { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Ver (4 bits): 2 for INT v2.x.
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// D: the sink must discard the packet after extracting metadata.
    pub fn d(&self) -> bool {
        self.b()[0] & 0x08 != 0
    }
    /// E: max hop count exceeded.
    pub fn e(&self) -> bool {
        self.b()[0] & 0x04 != 0
    }
    /// M: MTU exceeded.
    pub fn m(&self) -> bool {
        self.b()[0] & 0x02 != 0
    }
    /// The 12 reserved bits.
    pub fn reserved(&self) -> u16 {
        ((be32(self.b(), 0) >> 13) & 0x0fff) as u16
    }
    /// Hop ML: per-hop metadata length in words (5 bits).
    pub fn hop_ml(&self) -> u8 {
        self.b()[2] & 0x1f
    }
    /// Remaining Hop Count.
    pub fn remaining_hop_count(&self) -> u8 {
        self.b()[3]
    }
    /// Instruction Bitmap.
    pub fn instructions(&self) -> u16 {
        be16(self.b(), 4)
    }
    /// Domain Specific ID.
    pub fn ds_id(&self) -> u16 {
        be16(self.b(), 6)
    }
    /// DS Instruction.
    pub fn ds_instruction(&self) -> u16 {
        be16(self.b(), 8)
    }
    /// DS Flags.
    pub fn ds_flags(&self) -> u16 {
        be16(self.b(), 10)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MdHeader<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets or clears E.
    pub fn set_e(&mut self, on: bool) {
        let b = self.bm();
        b[0] = (b[0] & !0x04) | (u8::from(on) << 2);
    }
    /// Sets or clears M.
    pub fn set_m(&mut self, on: bool) {
        let b = self.bm();
        b[0] = (b[0] & !0x02) | (u8::from(on) << 1);
    }
    /// Sets Remaining Hop Count.
    pub fn set_remaining_hop_count(&mut self, v: u8) {
        self.bm()[3] = v;
    }
    /// Sets DS Flags.
    pub fn set_ds_flags(&mut self, v: u16) {
        put16(self.bm(), 10, v);
    }
}

/// Owned INT-MD metadata header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MdHeaderRepr {
    /// Ver (4 bits).
    pub version: u8,
    /// D bit.
    pub d: bool,
    /// E bit.
    pub e: bool,
    /// M bit.
    pub m: bool,
    /// Reserved (12 bits), carried unchanged.
    pub reserved: u16,
    /// Hop ML (5 bits).
    pub hop_ml: u8,
    /// Remaining Hop Count.
    pub remaining_hop_count: u8,
    /// Instruction Bitmap.
    pub instructions: u16,
    /// Domain Specific ID.
    pub ds_id: u16,
    /// DS Instruction.
    pub ds_instruction: u16,
    /// DS Flags.
    pub ds_flags: u16,
}

impl MdHeaderRepr {
    /// Reads the fields of a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &MdHeader<T>) -> Self {
        // `new_checked` guaranteed the length; `from_bytes` reads with constant indices.
        match array::<MD_HEADER_LEN>(Layer::IntMd, v.buffer.as_ref()) {
            Ok(b) => Self::from_bytes(b),
            Err(_) => Self::default(),
        }
    }

    /// Reads the header from its 12 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; MD_HEADER_LEN]) -> Self {
        let w0 = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        MdHeaderRepr {
            version: b[0] >> 4,
            d: b[0] & 0x08 != 0,
            e: b[0] & 0x04 != 0,
            m: b[0] & 0x02 != 0,
            reserved: ((w0 >> 13) & 0x0fff) as u16,
            hop_ml: b[2] & 0x1f,
            remaining_hop_count: b[3],
            instructions: u16::from_be_bytes([b[4], b[5]]),
            ds_id: u16::from_be_bytes([b[6], b[7]]),
            ds_instruction: u16::from_be_bytes([b[8], b[9]]),
            ds_flags: u16::from_be_bytes([b[10], b[11]]),
        }
    }

    /// Writes the header into the first 12 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        let w0 = (u32::from(self.version & 0xf) << 28)
            | (u32::from(self.d) << 27)
            | (u32::from(self.e) << 26)
            | (u32::from(self.m) << 25)
            | (u32::from(self.reserved & 0x0fff) << 13)
            | (u32::from(self.hop_ml & 0x1f) << 8)
            | u32::from(self.remaining_hop_count);
        put32(buf, 0, w0);
        put16(buf, 4, self.instructions);
        put16(buf, 6, self.ds_id);
        put16(buf, 8, self.ds_instruction);
        put16(buf, 10, self.ds_flags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_header() {
        // INT v2.1 §"Example with INT-MD over TCP": Ver=2, HopML=2, RHC=6, bitmap bits 0 and 3.
        let bytes = [0x20, 0x00, 0x02, 0x06, 0x90, 0x00, 0, 0, 0, 0, 0, 0];
        let r = MdHeaderRepr::parse(&MdHeader::new_checked(&bytes[..]).unwrap());
        assert_eq!(
            (r.version, r.hop_ml, r.remaining_hop_count, r.instructions),
            (2, 2, 6, 0x9000)
        );
        let mut out = [0xa5; 12];
        r.emit(&mut out);
        assert_eq!(out, bytes);
    }
}
