//! INT-MX header (INT v2.1 §"INT-MX Header Format").
//!
//! ```text
//! |Ver=2|D| Reserved (27)                                          |
//! | Instruction Bitmap (16)       | Domain Specific ID (16)          |
//! | DS Instruction (16)           | DS Flags (16)                    |
//! | Optional domain-specific 'source-inserted' metadata             |
//! ```

use crate::error::{Layer, Result, array, check_len};
use crate::field::{be16, be32, put16, put32};

/// Size of the INT-MX header (source-inserted metadata excluded).
pub const MX_HEADER_LEN: usize = 12;

/// Checked view of an INT-MX header.
#[derive(Debug, Clone, Copy)]
pub struct MxHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MxHeader<T> {
    /// Wraps `buffer` after checking it holds the 12-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::IntMx, buffer.as_ref(), MX_HEADER_LEN)?;
        Ok(MxHeader { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Ver (4 bits).
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// D: the sink must discard the packet after reporting.
    pub fn d(&self) -> bool {
        self.b()[0] & 0x08 != 0
    }
    /// The 27 reserved bits.
    pub fn reserved(&self) -> u32 {
        be32(self.b(), 0) & 0x07ff_ffff
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

/// Owned INT-MX header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MxHeaderRepr {
    /// Ver (4 bits).
    pub version: u8,
    /// D bit.
    pub d: bool,
    /// Reserved (27 bits), carried unchanged.
    pub reserved: u32,
    /// Instruction Bitmap.
    pub instructions: u16,
    /// Domain Specific ID.
    pub ds_id: u16,
    /// DS Instruction.
    pub ds_instruction: u16,
    /// DS Flags.
    pub ds_flags: u16,
}

impl MxHeaderRepr {
    /// Reads the fields of a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &MxHeader<T>) -> Self {
        match array::<MX_HEADER_LEN>(Layer::IntMx, v.buffer.as_ref()) {
            Ok(b) => Self::from_bytes(b),
            Err(_) => Self::default(),
        }
    }

    /// Reads the header from its 12 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; MX_HEADER_LEN]) -> Self {
        MxHeaderRepr {
            version: b[0] >> 4,
            d: b[0] & 0x08 != 0,
            reserved: u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x07ff_ffff,
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
            | (self.reserved & 0x07ff_ffff);
        put32(buf, 0, w0);
        put16(buf, 4, self.instructions);
        put16(buf, 6, self.ds_id);
        put16(buf, 8, self.ds_instruction);
        put16(buf, 10, self.ds_flags);
    }
}
