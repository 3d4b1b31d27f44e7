//! The INT Destination header (INT v2.1 §"INT Header Types", *Destination-type, INT Header type
//! 2*): "Destination headers must only be consumed by the INT Sink. Intermediate nodes must
//! ignore Destination headers", and "When Destination-type and MD-type or MX-type headers are
//! present, the MD-type header or MX-type header must precede the Destination-type header".
//!
//! The spec defines no format for its contents yet ("will be defined in a future revision"), so
//! the header is carried as a TCP/UDP shim of type 2 whose Length counts the opaque words that
//! follow it (as for MD and MX), right after the MD or MX block; NPT and the shim's last 16 bits
//! repeat the preceding shim's, so either shim restores the packet.
//!
//! Panic contract: after [`Destination::new_checked`] succeeds no accessor panics;
//! [`DestinationRepr::emit`] never panics into a buffer of [`DestinationRepr::buffer_len`] bytes
//! (it returns an error for a shorter one).

use crate::error::{Error, Layer, Result, check_len};
use crate::field::{be16, put16};
use crate::shim::SHIM_LEN;

/// The INT header type of a Destination header.
pub const DESTINATION_TYPE: u8 = 2;

/// The longest body: the shim's 8-bit Length of 4-byte words.
pub const MAX_BODY_LEN: usize = 255 * 4;

mod field {
    /// Type (4 bits), NPT (2), reserved (2).
    pub const TYPE_NPT: usize = 0;
    /// Length in 4-byte words after the shim.
    pub const LENGTH: usize = 1;
    /// UDP port, IP protocol or DSCP, as the preceding shim.
    pub const CONTENT: usize = 2;
}

/// A checked view of a Destination header: shim and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Destination<T> {
    /// Wraps `buffer` after checking it starts with a type-2 shim whose body it holds.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        check_len(Layer::IntShim, b, SHIM_LEN)?;
        if b[field::TYPE_NPT] >> 4 != DESTINATION_TYPE {
            return Err(Error::bad_value(
                Layer::IntShim,
                0,
                "Type",
                "2 (Destination)",
                u64::from(b[field::TYPE_NPT] >> 4),
            ));
        }
        let len = SHIM_LEN + usize::from(b[field::LENGTH]) * 4;
        if b.len() < len {
            return Err(Error::bad_length(Layer::IntShim, 0, "Length", len, b.len()));
        }
        Ok(Destination { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Next Protocol Type (2 bits), as the preceding shim's.
    pub fn npt(&self) -> u8 {
        (self.b()[field::TYPE_NPT] >> 2) & 0x3
    }

    /// The shim's last 16 bits (UDP port, IP protocol or DSCP), as the preceding shim's.
    pub fn content(&self) -> u16 {
        be16(self.b(), field::CONTENT)
    }

    /// The opaque body.
    pub fn body(&self) -> &[u8] {
        &self.b()[SHIM_LEN..self.total_len()]
    }

    /// Bytes of the header: shim and body.
    pub fn total_len(&self) -> usize {
        SHIM_LEN + usize::from(self.b()[field::LENGTH]) * 4
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Destination<T> {
    /// Sets the shim's last 16 bits.
    pub fn set_content(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CONTENT, v);
    }
}

/// A Destination header's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestinationRepr {
    /// Next Protocol Type (2 bits).
    pub npt: u8,
    /// UDP port, IP protocol or DSCP.
    pub content: u16,
    /// The opaque body, a multiple of 4 bytes, at most [`MAX_BODY_LEN`].
    pub body: Vec<u8>,
}

impl DestinationRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Destination<T>) -> Self {
        DestinationRepr {
            npt: v.npt(),
            content: v.content(),
            body: v.body().to_vec(),
        }
    }

    /// Bytes [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        SHIM_LEN + self.body.len()
    }

    /// Writes the header into the first [`Self::buffer_len`] bytes of `out`; an error when `out`
    /// is shorter or the body is not whole words of at most [`MAX_BODY_LEN`] bytes.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        if !self.body.len().is_multiple_of(4) || self.body.len() > MAX_BODY_LEN {
            return Err(Error::bad_length(
                Layer::IntShim,
                0,
                "Length",
                self.body.len(),
                MAX_BODY_LEN,
            ));
        }
        check_len(Layer::IntShim, out, self.buffer_len())?;
        out[field::TYPE_NPT] = (DESTINATION_TYPE << 4) | ((self.npt & 0x3) << 2);
        out[field::LENGTH] = (self.body.len() / 4) as u8;
        put16(out, field::CONTENT, self.content);
        out[SHIM_LEN..self.buffer_len()].copy_from_slice(&self.body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Type 2, NPT 1, Length 2, the original UDP port 5001; a sequence number and a TTL word.
    const BYTES: [u8; 12] = [0x24, 0x02, 0x13, 0x89, 0, 0, 0, 7, 64, 0, 0, 0];

    fn repr() -> DestinationRepr {
        DestinationRepr {
            npt: 1,
            content: 5001,
            body: vec![0, 0, 0, 7, 64, 0, 0, 0],
        }
    }

    #[test]
    fn test_deconstruct() {
        let v = Destination::new_checked(&BYTES[..]).unwrap();
        assert_eq!((v.npt(), v.content(), v.total_len()), (1, 5001, 12));
        assert_eq!(v.body(), &BYTES[4..]);
        assert_eq!(DestinationRepr::parse(&v), repr());
    }

    #[test]
    fn test_emit() {
        let mut out = [0xa5u8; 12];
        assert_eq!(repr().buffer_len(), 12);
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
        let mut short = [0u8; 11];
        assert!(
            repr().emit(&mut short).is_err(),
            "too short: an error, no panic"
        );
        let odd = DestinationRepr {
            body: vec![1, 2, 3],
            ..repr()
        };
        assert!(odd.emit(&mut [0u8; 16]).is_err());
    }

    #[test]
    fn bad_headers_are_errors() {
        assert!(Destination::new_checked(&BYTES[..3]).is_err());
        assert!(
            Destination::new_checked(&BYTES[..11]).is_err(),
            "body cut short"
        );
        let mut md = BYTES;
        md[0] = 0x14;
        assert!(Destination::new_checked(&md[..]).is_err(), "type 1 is MD");
    }

    #[test]
    fn set_content() {
        let mut b = BYTES;
        Destination::new_checked(&mut b[..])
            .unwrap()
            .set_content(17);
        assert_eq!(&b[2..4], &[0, 17]);
    }
}
