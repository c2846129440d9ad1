//! LEB128 varints and zigzag: the integer encoding of every record payload.
//! Encoding appends to a `Vec` and cannot fail; decoding reads through a [`Cursor`] over
//! an untrusted byte slice and reports truncation or overflow as an error, never a panic.

use std::fmt;

/// Appends `v` as an unsigned LEB128 varint (1 to 10 bytes).
#[inline]
pub fn put_u64(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Maps signed to unsigned so that small magnitudes of either sign stay short.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes ended in the middle of a value.
    Truncated,
    /// A varint longer than 10 bytes or not fitting in u64.
    Overflow,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("payload ends in the middle of a field"),
            DecodeError::Overflow => {
                f.write_str("malformed varint (longer than 10 bytes or overflows u64)")
            }
        }
    }
}

/// The value and length of the varint at the start of `word` (8 bytes, little-endian),
/// given `ends = !word & 0x8080_8080_8080_8080` is not zero (it ends within them).
#[inline(always)]
fn squeeze(word: u64, ends: u64) -> (u64, usize) {
    // Bits of the varint's bytes: up to and including its last byte's high bit.
    let x = word & (ends ^ (ends - 1)) & 0x7f7f_7f7f_7f7f_7f7f;
    // Squeeze out the continuation bits: 7-bit groups, then 14, then 28.
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
    (x, (ends.trailing_zeros() / 8 + 1) as usize)
}

/// The first `N` varints of a payload (its first `len` bytes of `data`), if each is at
/// most 8 bytes long, has 8 bytes of `data` from its start (bytes past `len` are looked at,
/// never used), and all of them end within `len`; otherwise `None`, and the caller decodes
/// carefully with a `Cursor` (which names the field at fault). The fast path of an event
/// record: no branch per field but the bounds checks, which never fail inside a block.
#[inline(always)]
pub fn leading<const N: usize>(data: &[u8], len: usize) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    let mut pos = 0usize;
    for v in out.iter_mut() {
        let word = u64::from_le_bytes(*data.get(pos..)?.first_chunk::<8>()?);
        // One or two bytes (most fields of an event; each field mostly keeps its length
        // from one record to the next, so these branches predict well): no squeezing.
        if word & 0x80 == 0 {
            *v = word & 0x7f;
            pos += 1;
            continue;
        }
        if word & 0x8000 == 0 {
            *v = (word & 0x7f) | ((word >> 1) & 0x3f80);
            pos += 2;
            continue;
        }
        let ends = !word & 0x8080_8080_8080_8080;
        if ends == 0 {
            return None;
        }
        let (x, n) = squeeze(word, ends);
        *v = x;
        pos += n;
    }
    (pos <= len).then_some(out)
}

/// The varint at `data[*pos..]`, if it is at most 8 bytes long and `data` has 8 bytes
/// from `*pos` (bytes past the payload are looked at, never used: the caller checks that
/// `*pos` ends within the payload); advances `*pos`. `None` sends the caller to the
/// careful `Cursor`. The packed records' fast path (`leading` for fields that come and
/// go with a mask).
#[inline(always)]
pub fn quick(data: &[u8], pos: &mut usize) -> Option<u64> {
    let word = u64::from_le_bytes(*data.get(*pos..)?.first_chunk::<8>()?);
    // No branch on the length (a packed record's address delta and size vary in length
    // from one record to the next): measured as fast as `leading`'s one- and two-byte
    // shortcuts on the benchmark trace, and simpler.
    let ends = !word & 0x8080_8080_8080_8080;
    if ends == 0 {
        return None;
    }
    let (x, n) = squeeze(word, ends);
    *pos += n;
    Some(x)
}

/// A read position in an untrusted byte slice.
pub struct Cursor<'a> {
    /// Bytes that may be looked at: the first `end` are read, the rest only peeked at.
    data: &'a [u8],
    end: usize,
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[cfg(test)]
    pub fn new(data: &'a [u8]) -> Self {
        Cursor {
            data,
            end: data.len(),
            pos: 0,
        }
    }

    /// Reads the first `len` bytes of `data` (at most all of them). Bytes past `len` are
    /// never returned, but a varint may load 8 bytes at once through them (the bytes of
    /// a record's payload followed by the rest of its block), which is faster than a
    /// careful byte loop near the end.
    #[inline(always)]
    pub fn within(data: &'a [u8], len: usize) -> Self {
        Cursor {
            data,
            end: len.min(data.len()),
            pos: 0,
        }
    }

    /// Bytes consumed so far.
    #[inline(always)]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    #[inline(always)]
    pub fn remaining(&self) -> usize {
        self.end - self.pos
    }

    #[inline(always)]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        if self.pos >= self.end {
            return Err(DecodeError::Truncated);
        }
        let b = *self.data.get(self.pos).ok_or(DecodeError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads one unsigned LEB128 varint.
    #[inline(always)]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        // Most fields of an event (tid, api, kind, device, stream, flags) fit one byte.
        match self.data.get(self.pos) {
            Some(&b) if b < 0x80 && self.pos < self.end => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => self.u64_long(),
        }
    }

    /// A varint of two bytes or more, or one at the end of the data.
    #[inline(always)]
    fn u64_long(&mut self) -> Result<u64, DecodeError> {
        // With 8 bytes left to look at (all but a block's last few fields), decode without
        // a branch per byte: a varint's length varies from field to field and record to
        // record, so a byte loop mispredicts its exit.
        let Some(eight) = self.data.get(self.pos..).and_then(|r| r.first_chunk::<8>()) else {
            return self.u64_checked();
        };
        let word = u64::from_le_bytes(*eight);
        // The high bit of each byte is "more follows": the first clear one ends the varint.
        let ends = !word & 0x8080_8080_8080_8080;
        if ends == 0 {
            return self.u64_checked(); // 9 or 10 bytes (values of 2^56 and more), or bad
        }
        let (x, len) = squeeze(word, ends);
        if len > self.remaining() {
            return Err(DecodeError::Truncated); // it ends past what may be read
        }
        self.pos += len;
        Ok(x)
    }

    /// `u64` one checked byte at a time: the last bytes of the data, and varints longer
    /// than 8 bytes.
    #[inline(never)]
    fn u64_checked(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                return Err(DecodeError::Overflow);
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Overflow) // unreachable: the 10th byte either ended or failed above
    }

    /// Reads a zigzag-encoded signed varint.
    #[inline(always)]
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        self.u64().map(unzigzag)
    }

    /// Takes the next `n` bytes (checked against what is left before slicing).
    #[inline(always)]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = self
            .data
            .get(self.pos..self.pos + n)
            .ok_or(DecodeError::Truncated)?;
        self.pos += n;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        put_u64(&mut b, v);
        b
    }

    #[test]
    fn round_trip_and_lengths() {
        for (v, len) in [
            (0, 1),
            (127, 1),
            (128, 2),
            (16383, 2),
            (16384, 3),
            (u64::MAX, 10),
        ] {
            let b = enc(v);
            assert_eq!(b.len(), len, "{v}");
            let mut c = Cursor::new(&b);
            assert_eq!(c.u64(), Ok(v));
            assert_eq!(c.remaining(), 0);
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x >> (x % 64);
            assert_eq!(Cursor::new(&enc(v)).u64(), Ok(v));
        }
    }

    #[test]
    fn zigzag_round_trip() {
        for v in [0, 1, -1, 2, -2, i64::MAX, i64::MIN, 12345, -98765] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(zigzag(i64::MIN), u64::MAX);
    }

    #[test]
    fn truncation_and_overflow() {
        let b = enc(u64::MAX);
        for cut in 0..b.len() {
            assert_eq!(Cursor::new(&b[..cut]).u64(), Err(DecodeError::Truncated));
        }
        // 10th byte carrying more than bit 63.
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert_eq!(Cursor::new(&over).u64(), Err(DecodeError::Overflow));
        // 11-byte varint.
        let mut long = vec![0x80; 10];
        long.push(0x00);
        assert_eq!(Cursor::new(&long).u64(), Err(DecodeError::Overflow));
        // Non-canonical but in range is accepted.
        assert_eq!(Cursor::new(&[0x80, 0x00]).u64(), Ok(0));
    }

    /// Varints with at least 8 bytes after them take the fast path; they must decode
    /// exactly like the checked one, errors included.
    #[test]
    fn fast_path_matches_checked_path() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = if i < 64 { 1u64 << i } else { x >> (x % 64) };
            let mut b = enc(v);
            let len = b.len();
            b.extend_from_slice(&[0xff; 12]);
            let mut c = Cursor::new(&b);
            assert_eq!(c.u64(), Ok(v));
            assert_eq!(c.pos(), len);
        }
        let padded = |mut v: Vec<u8>| {
            v.extend_from_slice(&[0u8; 10]);
            v
        };
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert_eq!(Cursor::new(&padded(over)).u64(), Err(DecodeError::Overflow));
        let long = padded(vec![0x80; 11]);
        assert_eq!(Cursor::new(&long).u64(), Err(DecodeError::Overflow));
        assert_eq!(Cursor::new(&padded(vec![0x80, 0x00])).u64(), Ok(0));
        let mut max = enc(u64::MAX);
        max.push(7);
        let mut c = Cursor::new(&max);
        assert_eq!((c.u64(), c.u8()), (Ok(u64::MAX), Ok(7)));
    }

    /// `leading` gives exactly what a `Cursor` reads, or `None`.
    #[test]
    fn leading_matches_the_cursor() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 0..5_000 {
            let mut data = Vec::new();
            let mut want = [0u64; 4];
            for w in want.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *w = x >> (x % 64);
                put_u64(&mut data, *w);
            }
            let len = data.len();
            let short = len - 1 - (x % 3) as usize; // the last field cut
            data.extend_from_slice(&[0x80; 8]); // what follows the payload
            let fits = want.iter().all(|&v| v < 1 << 56);
            let got = leading::<4>(&data, len);
            assert_eq!(got, fits.then_some(want), "round {round}");
            assert_eq!(leading::<4>(&data, short), None, "round {round}");
            let mut c = Cursor::within(&data, len);
            assert_eq!(want.map(|_| c.u64().unwrap()), want);
        }
        // Not enough bytes to look at: the careful path decides.
        assert_eq!(leading::<1>(&[1, 2, 3], 3), None);
        assert_eq!(leading::<1>(&[5, 0, 0, 0, 0, 0, 0, 0], 1), Some([5]));
        assert_eq!(leading::<2>(&[5, 0, 0, 0, 0, 0, 0, 0, 0], 1), None);
    }

    /// A cursor `within` a longer slice reads only its part, whatever follows it.
    #[test]
    fn within_never_reads_past_its_end() {
        for v in [0, 1, 127, 128, 300, 1 << 40, u64::MAX] {
            let b = enc(v);
            for follow in [&[][..], &[0x00; 12], &[0xff; 12], &[0x81, 0x01]] {
                let mut data = b.clone();
                data.extend_from_slice(follow);
                let mut c = Cursor::within(&data, b.len());
                assert_eq!(c.u64(), Ok(v), "{v} then {follow:?}");
                assert_eq!(c.remaining(), 0);
                assert_eq!(c.u64(), Err(DecodeError::Truncated));
                assert_eq!(c.u8(), Err(DecodeError::Truncated));
                assert_eq!(c.bytes(1), Err(DecodeError::Truncated));
                for cut in 0..b.len() {
                    let mut c = Cursor::within(&data, cut);
                    assert_eq!(c.u64(), Err(DecodeError::Truncated), "{v} cut at {cut}");
                }
            }
        }
        let data = [5u8, 6, 7, 8];
        let mut c = Cursor::within(&data, 2);
        assert_eq!(c.bytes(2), Ok(&data[..2]));
        assert_eq!(Cursor::within(&data, 99).remaining(), 4);
    }

    #[test]
    fn bytes_checks_length() {
        let data = [1u8, 2, 3];
        let mut c = Cursor::new(&data);
        assert_eq!(c.bytes(usize::MAX), Err(DecodeError::Truncated));
        assert_eq!(c.bytes(2), Ok(&data[..2]));
        assert_eq!(c.pos(), 2);
        assert_eq!(c.bytes(2), Err(DecodeError::Truncated));
        assert_eq!(c.u8(), Ok(3));
        assert_eq!(c.u8(), Err(DecodeError::Truncated));
    }
}
