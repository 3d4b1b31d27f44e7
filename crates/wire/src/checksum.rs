//! Internet checksums: full computation (RFC 1071), incremental update (RFC 1624) and the INT
//! Checksum Complement.
//!
//! INT v2.1 §"Checksum Update": nodes that insert or remove INT bytes behind an L4 checksum must
//! either update the checksum (incrementally, so corruption upstream stays detectable) or, when the
//! instruction bitmap requests it (bit 15), write a Checksum Complement that keeps the existing L4
//! checksum valid. Zero UDP checksums stay zero (RFC 768 / RFC 6936).
//!
//! Written by hand: etherparse computes whole-header checksums but has no RFC 1624 update and no
//! notion of a complement word; these are a few lines each and sit on the node's per-packet path.

/// One's-complement sum of `data` (big-endian 16-bit words, odd byte padded), folded to 16 bits,
/// added to `initial`.
pub fn ones_complement_sum(initial: u32, data: &[u8]) -> u16 {
    // Four bytes at a time: 2^16 ≡ 1 (mod 0xFFFF), so a sum of big-endian 32-bit words folds to
    // the same value as the sum of their 16-bit halves (RFC 1071 §2(C)); a u64 cannot overflow
    // below 2^32 words.
    let mut sum = u64::from(initial);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let mut pairs = words.remainder().chunks_exact(2);
    for c in &mut pairs {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(u16::from_be_bytes([*last, 0]));
    }
    fold(sum)
}

#[inline]
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Internet checksum (RFC 1071) of `data`: the complement of the one's-complement sum.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !ones_complement_sum(0, data)
}

/// Sum of the IPv4 pseudo header (RFC 768 / RFC 793) for an L4 segment of `l4_len` bytes.
pub fn ipv4_pseudo_header_sum(src: [u8; 4], dst: [u8; 4], protocol: u8, l4_len: u16) -> u32 {
    let mut b = [0u8; 12];
    b[0..4].copy_from_slice(&src);
    b[4..8].copy_from_slice(&dst);
    b[9] = protocol;
    b[10..12].copy_from_slice(&l4_len.to_be_bytes());
    u32::from(ones_complement_sum(0, &b))
}

/// Sum of the IPv6 pseudo header (RFC 8200 §8.1) for an L4 segment of `l4_len` bytes.
pub fn ipv6_pseudo_header_sum(src: [u8; 16], dst: [u8; 16], next_header: u8, l4_len: u32) -> u32 {
    let mut b = [0u8; 40];
    b[0..16].copy_from_slice(&src);
    b[16..32].copy_from_slice(&dst);
    b[32..36].copy_from_slice(&l4_len.to_be_bytes());
    b[39] = next_header;
    u32::from(ones_complement_sum(0, &b))
}

/// Full L4 checksum of `segment` (its checksum field must be zero) given a pseudo-header sum.
/// A UDP result of 0 must be sent as 0xFFFF (RFC 768); use [`udp_wire_checksum`] for that.
pub fn l4_checksum(pseudo_sum: u32, segment: &[u8]) -> u16 {
    !ones_complement_sum(pseudo_sum, segment)
}

/// A computed UDP checksum as it goes on the wire: 0 is transmitted as 0xFFFF (RFC 768).
pub fn udp_wire_checksum(computed: u16) -> u16 {
    if computed == 0 { 0xffff } else { computed }
}

/// Incremental checksum update (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`) when the 16-bit
/// words `old` of the covered data are replaced by `new` (same length, 16-bit aligned).
pub fn update(checksum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len() % 2, 0);
    let mut sum = u64::from(!checksum);
    sum += u64::from(!ones_complement_sum(0, old));
    sum += u64::from(ones_complement_sum(0, new));
    !fold(sum)
}

/// Incremental update when 16-bit-aligned bytes `inserted` are added to the covered data and one
/// covered length field goes from `old_len` to `new_len` (call [`update`] for a second one).
pub fn update_insert(checksum: u16, inserted: &[u8], old_len: u16, new_len: u16) -> u16 {
    let mut sum = u64::from(!checksum);
    sum += u64::from(ones_complement_sum(0, inserted));
    sum += u64::from(!old_len);
    sum += u64::from(new_len);
    !fold(sum)
}

/// Incremental update when 16-bit-aligned bytes `removed` leave the covered data.
pub fn update_remove(checksum: u16, removed: &[u8], old_len: u16, new_len: u16) -> u16 {
    let mut sum = u64::from(!checksum);
    sum += u64::from(!ones_complement_sum(0, removed));
    sum += u64::from(!old_len);
    sum += u64::from(new_len);
    !fold(sum)
}

/// Incremental update when a 16-bit-aligned region of the covered data is replaced by another of
/// possibly different length (an INT block growing at a transit hop, or removed at the sink): the
/// bytes after it shift by a multiple of 2, so their sum is unchanged. Length fields are separate
/// ([`update`]). A checksum of 0 stays 0 (UDP "no checksum", RFC 768 / RFC 6936).
pub fn replace(checksum: u16, old: &[u8], new: &[u8]) -> u16 {
    if checksum == 0 {
        return 0;
    }
    let mut sum = u64::from(!checksum);
    sum += u64::from(!ones_complement_sum(0, old));
    sum += u64::from(ones_complement_sum(0, new));
    !fold(sum)
}

/// INT Checksum Complement (INT v2.1 §"Checksum Update", instruction bit 15): the value for the
/// complement word that keeps the L4 checksum at `kept` after INT bytes were inserted or changed,
/// given `updated`, the checksum an RFC 1624 field update computes for the new bytes with the
/// complement word still all ones.
///
/// All ones add nothing to a one's-complement sum (0xFFFF is negative zero), so the word only has
/// to add the difference between the two sums, `!kept - !updated`, which one 16-bit half carries.
/// The other half is 0, so the result is never the reserved all-ones "not used" value.
pub fn checksum_complement(kept: u16, updated: u16) -> u32 {
    u32::from(fold(u64::from(!kept) + u64::from(updated))) << 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(ones_complement_sum(0, &d), 0xddf2);
        assert_eq!(internet_checksum(&d), !0xddf2);
    }

    #[test]
    fn incremental_update_matches_recompute() {
        let mut d = vec![
            0x45u8, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0, 0,
        ];
        let c = internet_checksum(&d);
        let old = [d[8], d[9]];
        d[8] = 0x3f; // TTL decrement
        let c2 = update(c, &old, &[d[8], d[9]]);
        assert_eq!(c2, internet_checksum(&d));
    }

    #[test]
    fn replace_matches_recompute() {
        let pseudo = 0x2222u32;
        let before = [0x11u8, 0x22, 0xaa, 0xbb, 0xcc, 0xdd, 0x33, 0x44];
        let c = l4_checksum(pseudo, &before);
        // Replace the 4-byte region [2..6) by 8 bytes.
        let after = [0x11u8, 0x22, 1, 2, 3, 4, 5, 6, 7, 8, 0x33, 0x44];
        let c2 = replace(c, &before[2..6], &after[2..10]);
        assert_eq!(c2, l4_checksum(pseudo, &after));
        assert_eq!(
            replace(0, &before, &after),
            0,
            "zero UDP checksums stay zero"
        );
    }

    #[test]
    fn complement_keeps_checksum_valid() {
        // A segment and its checksum; then 8 bytes and a complement word are inserted and the
        // length (pseudo-header) grows.
        let seg = [0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0];
        let old_len = seg.len() as u16;
        let new_len = old_len + 12;
        let csum = l4_checksum(0x1234 + u32::from(old_len), &seg);
        let inserted = [
            0xaau8, 0xbb, 0xcc, 0xdd, 0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xff,
        ];
        let updated = update(
            replace(csum, &[], &inserted),
            &old_len.to_be_bytes(),
            &new_len.to_be_bytes(),
        );
        let comp = checksum_complement(csum, updated);
        let mut new_seg = seg.to_vec();
        new_seg.extend_from_slice(&inserted[..8]);
        new_seg.extend_from_slice(&comp.to_be_bytes());
        // The old checksum verifies the new segment: the sum over pseudo-header, segment and
        // checksum is 0xFFFF.
        let total = ones_complement_sum(0x1234 + u32::from(new_len) + u32::from(csum), &new_seg);
        assert_eq!(total, 0xffff);
        assert_ne!(comp, u32::MAX);
    }
}
