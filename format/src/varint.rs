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

/// A read position in an untrusted byte slice.
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.data.get(self.pos).ok_or(DecodeError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads one unsigned LEB128 varint.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            // The 10th byte holds bit 63 only: anything more overflows (or runs on).
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
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        self.u64().map(unzigzag)
    }

    /// Takes the next `n` bytes (checked against what is left before slicing).
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = &self.data[self.pos..self.pos + n];
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
