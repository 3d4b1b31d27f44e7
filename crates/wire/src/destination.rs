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
//! Panic contract: after [`Destination::new_checked`] (or [`Destination::new_for_emit`])
//! succeeds no accessor or setter panics; [`DestinationRepr::emit`] writes into a view and
//! returns an error, writing nothing, when the view does not hold
//! [`DestinationRepr::buffer_len`] bytes.

use crate::error::{Error, Field, Layer, Result, check_len};
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
                Field::Type,
                "2 (Destination)",
                u64::from(b[field::TYPE_NPT] >> 4),
            ));
        }
        let len = SHIM_LEN + usize::from(b[field::LENGTH]) * 4;
        if b.len() < len {
            return Err(Error::bad_length(
                Layer::IntShim,
                0,
                Field::Length,
                len,
                b.len(),
            ));
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

impl Destination<&mut [u8]> {
    /// Wraps `buffer` to emit a [`DestinationRepr`] into: checks it holds the shim and writes
    /// Type 2 with an empty body, so the view's invariant holds before the Repr fills it.
    pub fn new_for_emit(buffer: &mut [u8]) -> Result<Destination<&mut [u8]>> {
        check_len(Layer::IntShim, buffer, SHIM_LEN)?;
        buffer[field::TYPE_NPT] = DESTINATION_TYPE << 4;
        buffer[field::LENGTH] = 0;
        Ok(Destination { buffer })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Destination<T> {
    /// Sets the shim's last 16 bits.
    pub fn set_content(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CONTENT, v);
    }

    /// Sets NPT (the low 2 bits of `npt`).
    pub fn set_npt(&mut self, npt: u8) {
        let b = self.buffer.as_mut();
        b[field::TYPE_NPT] = (b[field::TYPE_NPT] & 0xf3) | ((npt & 0x3) << 2);
    }

    /// Sets the body to `body`, Length with it; an error, writing nothing, when `body` is not
    /// whole words of at most [`MAX_BODY_LEN`] bytes or the buffer does not hold it.
    pub fn set_body(&mut self, body: &[u8]) -> Result<()> {
        if !body.len().is_multiple_of(4) || body.len() > MAX_BODY_LEN {
            return Err(Error::bad_length(
                Layer::IntShim,
                0,
                Field::Length,
                body.len(),
                MAX_BODY_LEN,
            ));
        }
        check_len(Layer::IntShim, self.b(), SHIM_LEN + body.len())?;
        let b = self.buffer.as_mut();
        b[field::LENGTH] = (body.len() / 4) as u8;
        b[SHIM_LEN..SHIM_LEN + body.len()].copy_from_slice(body);
        Ok(())
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

    /// Writes the header into a view; an error, writing nothing, when the view does not hold
    /// [`Self::buffer_len`] bytes or the body is not whole words of at most [`MAX_BODY_LEN`]
    /// bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Destination<T>) -> Result<()> {
        v.set_body(&self.body)?;
        v.set_npt(self.npt);
        v.set_content(self.content);
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
        let mut v = Destination::new_for_emit(&mut out[..]).unwrap();
        repr().emit(&mut v).unwrap();
        assert_eq!(out, BYTES);
        let mut short = [0xa5u8; 11];
        let mut v = Destination::new_for_emit(&mut short[..]).unwrap();
        assert!(
            repr().emit(&mut v).is_err(),
            "too short: an error, no panic"
        );
        assert_eq!(
            &short[..4],
            &[0x20, 0, 0xa5, 0xa5],
            "the error wrote nothing"
        );
        assert!(Destination::new_for_emit(&mut [0u8; 3][..]).is_err());
        let odd = DestinationRepr {
            body: vec![1, 2, 3],
            ..repr()
        };
        let mut b = [0u8; 16];
        assert!(
            odd.emit(&mut Destination::new_for_emit(&mut b[..]).unwrap())
                .is_err()
        );
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
