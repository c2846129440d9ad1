//! A fast hasher for the replay's maps keyed by a `u64` (addresses, stack ids): std's
//! SipHash took 13% of `gpumemprof summary` (BENCHMARKS.md, "Analyzer"). The key is
//! mixed with one folded 64x64->128 multiply (foldhash's core) under a per-process random
//! seed, so a crafted trace cannot aim its addresses at one bucket without knowing it.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A `HashMap` with the fast hasher.
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// An odd constant with well-spread bits (the fractional part of pi).
const MULTIPLIER: u64 = 0x243F_6A88_85A3_08D3;

/// The product's high and low halves folded together: every key bit reaches every output
/// bit, the low ones (zero in aligned addresses) and the high ones (hashbrown's tags).
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// Builds `FastHasher`s with this process's seed.
#[derive(Debug, Clone, Copy)]
pub struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed = *SEED.get_or_init(|| RandomState::new().hash_one(0x5eed_u64) | 1);
        FastState { seed }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    #[inline(always)]
    fn build_hasher(&self) -> FastHasher {
        FastHasher { state: self.seed }
    }
}

/// One multiply per `u64` written; other writes go through it 8 bytes at a time.
#[derive(Debug, Clone, Copy)]
pub struct FastHasher {
    state: u64,
}

impl Hasher for FastHasher {
    #[inline(always)]
    fn write_u64(&mut self, v: u64) {
        self.state = fold_mul(self.state ^ v, MULTIPLIER);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        self.write_u64(bytes.len() as u64);
    }

    #[inline(always)]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v.into());
    }

    // The narrow integers of tuple keys (a device, a kind's discriminant) as one word
    // each, not through `write`'s byte loop.
    #[inline(always)]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v.into());
    }

    #[inline(always)]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v.into());
    }

    #[inline(always)]
    fn write_i32(&mut self, v: i32) {
        self.write_u64(v as u32 as u64);
    }

    #[inline(always)]
    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }

    #[inline(always)]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Aligned addresses (the usual keys) spread over the low bits (bucket index) and the
    /// top 7 bits (hashbrown's tag) alike.
    #[test]
    fn aligned_addresses_spread_over_low_and_high_bits() {
        let s = FastState::default();
        let (mut low, mut high) = ([0u32; 256], [0u32; 128]);
        for i in 0..65_536u64 {
            let h = s.hash_one(0x7f00_0000_0000 + i * 512);
            low[(h & 255) as usize] += 1;
            high[(h >> 57) as usize] += 1;
        }
        // 256 and 512 per bucket on average: none may be far off.
        assert!(low.iter().all(|&n| (128..=384).contains(&n)), "{low:?}");
        assert!(high.iter().all(|&n| (256..=768).contains(&n)), "{high:?}");
    }

    #[test]
    fn a_map_works_and_byte_writes_hash_by_content() {
        let mut m: FastMap<u64, u64> = FastMap::default();
        for i in 0..1000 {
            m.insert(i * 4096, i);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m[&(999 * 4096)], 999);
        let s = FastState::default();
        assert_eq!(s.hash_one("abc"), s.hash_one(String::from("abc")));
        assert_ne!(s.hash_one("abc"), s.hash_one("abd"));
    }

    /// The snapshot's and the OOM scan's tuple keys (a device, a kind, a thread, a stack):
    /// each narrow field counts, each in its place.
    #[test]
    fn tuple_keys_of_narrow_integers_hash_by_every_field() {
        let s = FastState::default();
        let key = |device: i32, kind: u8, class: u16, stack: u64| {
            s.hash_one((device, kind, class, stack))
        };
        let base = key(0, 1, 2, 3);
        assert_eq!(base, key(0, 1, 2, 3));
        for other in [
            key(-1, 1, 2, 3),
            key(0, 2, 2, 3),
            key(0, 1, 3, 3),
            key(0, 1, 2, 4),
        ] {
            assert_ne!(base, other);
        }
        // Fields in other places: (1, 0) is not (0, 1).
        assert_ne!(key(1, 0, 2, 3), key(0, 1, 2, 3));
    }
}
