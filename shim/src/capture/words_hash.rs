//! 64-bit hashes of runs of words on the capturing thread: a stack's frames (`intern`),
//! a walk's inputs (`unwind/inputs.rs`), Python frames and NVTX names.
//!
//! ```text
//!  items  w0 w1 w2 w3 ...          keys  k0 k1 k2 k3 ...   (fixed, one per position)
//!  NH:    Σ (w0+k0)·(w1+k1) + (w2+k2)·(w3+k3) + ...   mod 2^128   one multiply a pair
//!  then   the seeds and both halves folded by `mix`, `finish`
//! ```
//!
//! Why NH (the inner hash of UMAC, Black et al. 1999): a walk's inputs on a program of
//! many call paths are about 55 words a shape, hashed once or twice per capture, and the
//! hashing loop held most of the lookup's samples (BENCHMARKS.md, fifteenth). A multiply
//! a pair of words, summed, keeps the CPU's multiplier busy without a chain of dependent
//! multiplies; the earlier four chains of `mix` took a multiply a word, each waiting on
//! the last. For
//! two different runs of the same length, NH with random keys collides with probability
//! at most 2^-64 (its `w = 64` bound); the keys here are fixed numbers that nothing in a
//! stack is chosen against, as the earlier hash's constants were. Runs longer than the
//! keys are hashed a block of keys at a time, each block's sum folded in.

/// One round of a sequential hash: `v` folded into `h` (a bijection of `v` for each `h`).
#[inline(always)]
pub fn mix(h: u64, v: u64) -> u64 {
    (h.rotate_left(23) ^ v).wrapping_mul(0xA24B_AED4_963E_E407)
}

/// The last step of a hash: the high bits folded down, and never 0 (0 marks an empty
/// slot in every table keyed by these hashes).
#[inline(always)]
pub fn finish(h: u64) -> u64 {
    (h ^ (h >> 29)) | 1
}

/// Keys per block: a walk's inputs (`memo::WORDS`, 240) fit one.
const KEYS: usize = 256;

/// NH's keys: splitmix64's sequence from a fixed seed.
static NH_KEYS: [u64; KEYS] = {
    let mut k = [0u64; KEYS];
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut i = 0;
    while i < KEYS {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        k[i] = z ^ (z >> 31);
        i += 1;
    }
    k
};

/// One pair's term of NH.
#[inline(always)]
fn nh(a: u64, ka: u64, b: u64, kb: u64) -> u128 {
    (a.wrapping_add(ka) as u128).wrapping_mul(b.wrapping_add(kb) as u128)
}

/// A hash of `value(item)` for each of `items`, never 0, started from `seeds` (which
/// should include the number of items: a run is padded with zeros to an even length).
#[inline(always)]
pub fn hash_words<T>(seeds: [u64; 4], items: &[T], value: impl Fn(&T) -> u64) -> u64 {
    let mut h = mix(mix(seeds[0], seeds[1]), mix(seeds[2], seeds[3]));
    for block in items.chunks(KEYS) {
        // Two sums, so the additions do not wait on each other either.
        let (mut s0, mut s1) = (0u128, 0u128);
        // The quads zipped by value, not through `&mut ChunksExact`: a zip of two
        // `ChunksExact` counts one index to the shorter's length, where the other zip
        // stepped both iterators and tested both ends, and whether the compiler saw
        // through it changed with unrelated code elsewhere in the crate (a build that
        // did not took 27 instructions a quad where 19 do, a sixth more for
        // `Inputs::lookup` on `varied_sites 256`; BENCHMARKS.md, eighteenth).
        let (quads, rest) = block.split_at(block.len() / 4 * 4);
        for (c, k) in quads.chunks_exact(4).zip(NH_KEYS.chunks_exact(4)) {
            s0 = s0.wrapping_add(nh(value(&c[0]), k[0], value(&c[1]), k[1]));
            s1 = s1.wrapping_add(nh(value(&c[2]), k[2], value(&c[3]), k[3]));
        }
        // The last one to three items, the keys after the quads' (a block has at most
        // `KEYS` items, a multiple of four, so they are there).
        let k = &NH_KEYS[quads.len()..];
        for (pair, k) in rest.chunks(2).zip(k.chunks_exact(2)) {
            let b = pair.get(1).map_or(0, &value);
            s0 = s0.wrapping_add(nh(value(&pair[0]), k[0], b, k[1]));
        }
        let s = s0.wrapping_add(s1);
        h = mix(mix(h, s as u64), (s >> 64) as u64);
    }
    finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(words: &[u64]) -> u64 {
        hash_words([words.len() as u64, 1, 2, 3], words, |&w| w)
    }

    #[test]
    fn every_word_and_its_place_count_and_the_hash_is_never_zero() {
        // Runs of 0 to 600 words (past one block of keys): changing any one word, or
        // swapping two neighbours, changes the hash.
        for n in [0usize, 1, 2, 3, 4, 5, 7, 8, 55, 240, 255, 256, 257, 600] {
            let words: Vec<u64> = (0..n as u64).map(|i| 0x5555_0000_1000 + 16 * i).collect();
            let base = h(&words);
            assert_ne!(base, 0);
            assert_eq!(base & 1, 1);
            for i in 0..n {
                let mut w = words.clone();
                w[i] ^= 1 << (i % 64);
                assert_ne!(h(&w), base, "n {n}, word {i}");
                if i + 1 < n {
                    let mut w = words.clone();
                    w.swap(i, i + 1);
                    assert_ne!(h(&w), base, "n {n}, swap {i}");
                }
            }
        }
    }

    #[test]
    fn a_trailing_zero_word_is_told_apart_by_the_length_in_the_seeds() {
        // The odd word is paired with a zero: only the seeds' length tells [a] from [a, 0].
        assert_ne!(h(&[7]), h(&[7, 0]));
        assert_eq!(
            hash_words([9, 1, 2, 3], &[7u64], |&w| w),
            hash_words([9, 1, 2, 3], &[7u64, 0], |&w| w)
        );
    }

    #[test]
    fn paths_that_differ_in_which_of_two_return_addresses_each_level_took_do_not_collide() {
        // varied_sites' shape: 20 levels, each one of two return addresses; 2^16 of the
        // paths, all distinct hashes.
        let (left, right) = (0x5555_5555_1234u64, 0x5555_5555_1290u64);
        let mut seen = std::collections::HashSet::new();
        for site in 0u32..1 << 16 {
            let words: Vec<u64> = (0..20)
                .map(|l| if site >> (l % 16) & 1 == 1 { right } else { left } + l as u64)
                .collect();
            assert!(seen.insert(h(&words)), "site {site}");
        }
    }
}
