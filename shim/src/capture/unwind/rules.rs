//! The cache of unwind rules: for each code address seen on a stack, how to find the
//! caller's frame, in one 64-bit word.
//!
//! ```text
//!  lookup address (return address - 1) ─► bucket (hash, 4 ways, one cache line)
//!      key  = address | epoch << 48      (0: empty)
//!      rule = kind | CFA base | CFA offset | where the caller's rbp is saved
//! ```
//!
//! Readers take no lock: an entry is written key=0, rule, key (under the slow path's
//! lock, so there is one writer at a time), and a reader accepts a rule only if it read
//! the same non-zero key before and after it (a per-entry seqlock whose sequence is the
//! key). The epoch in the key retires every entry at once when the loader unmaps an
//! object (a later object may reuse its addresses).

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// What a rule says about a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The caller's frame: CFA = base + `cfa_off`; the return address is at CFA - 8;
    /// the caller's rbp is found as `rbp` says, `rbp_off` its offset.
    Step {
        base: Base,
        cfa_off: i32,
        rbp: Saved,
        rbp_off: i16,
    },
    /// The return address is undefined (`_start`, a thread's first frame): the stack
    /// ends here, after this frame.
    End,
    /// Anything the fast path does not handle (no unwind info, a DWARF expression other
    /// than the stack-realignment one, a signal frame): the whole stack goes to the slow
    /// unwinder, which handles it.
    Unsupported,
}

/// The register (or memory) the CFA is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    Rsp = 0,
    Rbp = 1,
    /// CFA = *(rbp + off) + 0: gcc's rule in a function that realigns its stack
    /// (`DW_OP_breg6 off; DW_OP_deref`); `cfa_off` is `off` then.
    DerefRbp = 2,
}

/// Where the caller's rbp is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saved {
    /// Not saved: the callee left rbp alone.
    Same = 0,
    /// At CFA + off (`DW_CFA_offset`: pushed in the prologue).
    AtCfa = 1,
    /// At rbp + off, this frame's rbp (`DW_CFA_expression: DW_OP_breg6 off`, gcc's
    /// stack-realigning prologue).
    AtRbp = 2,
}

// The word, for the walk to decode without building a `Rule` (bits 0-1 kind, 2-3 base,
// 4-5 rbp rule, 16-47 CFA offset, 48-63 rbp offset).
pub const KIND_MASK: u64 = 3;
pub const KIND_STEP: u64 = 1;
pub const KIND_END: u64 = 2;
const KIND_UNSUPPORTED: u64 = 3;
pub const BASE_RSP: u64 = Base::Rsp as u64;
pub const BASE_RBP: u64 = Base::Rbp as u64;
pub const RBP_SAME: u64 = Saved::Same as u64;
pub const RBP_AT_CFA: u64 = Saved::AtCfa as u64;
pub const RBP_AT_RBP: u64 = Saved::AtRbp as u64;

/// A step rule's CFA base (`Base as u64`).
#[inline(always)]
pub fn base(w: u64) -> u64 {
    (w >> 2) & 3
}
/// A step rule's CFA offset, sign-extended (to add with wrapping).
#[inline(always)]
pub fn cfa_off(w: u64) -> u64 {
    (w >> 16) as u32 as i32 as i64 as u64
}
/// A step rule's rbp rule (`Saved as u64`).
#[inline(always)]
pub fn rbp_saved(w: u64) -> u64 {
    (w >> 4) & 3
}
/// A step rule's rbp offset, sign-extended.
#[inline(always)]
pub fn rbp_off(w: u64) -> u64 {
    (w >> 48) as u16 as i16 as i64 as u64
}

impl Rule {
    #[inline]
    pub fn pack(self) -> u64 {
        match self {
            Rule::Step {
                base,
                cfa_off,
                rbp,
                rbp_off,
            } => {
                KIND_STEP
                    | (base as u64) << 2
                    | (rbp as u64) << 4
                    | (cfa_off as u32 as u64) << 16
                    | (rbp_off as u16 as u64) << 48
            }
            Rule::End => KIND_END,
            Rule::Unsupported => KIND_UNSUPPORTED,
        }
    }

    /// The rule a word holds (the walk decodes words directly; tests use this).
    #[cfg(test)]
    pub fn unpack(w: u64) -> Rule {
        match w & 3 {
            KIND_STEP => Rule::Step {
                base: match (w >> 2) & 3 {
                    0 => Base::Rsp,
                    1 => Base::Rbp,
                    _ => Base::DerefRbp,
                },
                rbp: match (w >> 4) & 3 {
                    0 => Saved::Same,
                    1 => Saved::AtCfa,
                    _ => Saved::AtRbp,
                },
                cfa_off: (w >> 16) as u32 as i32,
                rbp_off: (w >> 48) as u16 as i16,
            },
            KIND_END => Rule::End,
            _ => Rule::Unsupported,
        }
    }
}

/// Ways per bucket: 4 entries of 16 bytes fill one 64-byte cache line.
const WAYS: usize = 4;
/// Buckets (a power of two): 16,384 cached addresses, 256 KiB of zeroed memory, far
/// more distinct return addresses than a program's allocation paths pass through.
const BUCKETS: usize = 4096;
/// Addresses above this (5-level paging) are not cached: the key keeps 48 bits.
pub const MAX_ADDRESS: u64 = (1 << 48) - 1;
/// The epoch lives in the key's top 16 bits and never is 0.
const EPOCH_MASK: u64 = 0xFFFF;

struct Entry {
    key: AtomicU64,
    rule: AtomicU64,
}

#[repr(align(64))]
struct Bucket([Entry; WAYS]);

static TABLE: [Bucket; BUCKETS] = [const {
    Bucket(
        [const {
            Entry {
                key: AtomicU64::new(0),
                rule: AtomicU64::new(0),
            }
        }; WAYS],
    )
}; BUCKETS];

/// Round-robin victim per bucket is not worth the state: the way is chosen from the
/// address's hash bits (different addresses of one bucket land on different ways).
#[inline(always)]
fn hash(addr: u64) -> u64 {
    addr.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline(always)]
fn bucket_of(h: u64) -> &'static Bucket {
    &TABLE[(h >> 52) as usize & (BUCKETS - 1)]
}

/// The key an address has in `epoch`.
#[inline(always)]
pub fn key(addr: u64, epoch: u64) -> u64 {
    addr | (epoch & EPOCH_MASK) << 48
}

/// The cached rule word for `key` (as made by `key`), if any. No lock, no write.
#[inline(always)]
pub fn get(addr: u64, key: u64) -> Option<u64> {
    let b = bucket_of(hash(addr));
    for e in &b.0 {
        if e.key.load(Ordering::Acquire) == key {
            let r = e.rule.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if e.key.load(Ordering::Relaxed) == key {
                return Some(r);
            }
        }
    }
    None
}

/// Stores a rule. Callers hold the slow path's lock: one writer at a time.
pub fn insert(addr: u64, key: u64, rule: u64) {
    let h = hash(addr);
    let b = bucket_of(h);
    // An empty or stale way if there is one, else the way the hash picks.
    let epoch_bits = key >> 48;
    let way =
        b.0.iter()
            .position(|e| e.key.load(Ordering::Relaxed) >> 48 != epoch_bits)
            .unwrap_or((h >> 20) as usize % WAYS);
    let e = &b.0[way];
    e.key.store(0, Ordering::Relaxed);
    fence(Ordering::Release);
    e.rule.store(rule, Ordering::Relaxed);
    e.key.store(key, Ordering::Release);
}

/// Empties the table (when the 16-bit epoch wraps). Callers hold the slow path's lock.
pub fn clear() {
    for b in TABLE.iter() {
        for e in &b.0 {
            e.key.store(0, Ordering::Release);
        }
    }
}

/// The next epoch after `e` that a key can carry (never 0 in its low 16 bits).
pub fn next_epoch(e: u64) -> u64 {
    let n = e.wrapping_add(1);
    if n & EPOCH_MASK == 0 {
        n + 1
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_round_trip_through_their_word() {
        for r in [
            Rule::Step {
                base: Base::Rsp,
                cfa_off: 8,
                rbp: Saved::Same,
                rbp_off: 0,
            },
            Rule::Step {
                base: Base::Rbp,
                cfa_off: 16,
                rbp: Saved::AtCfa,
                rbp_off: -16,
            },
            Rule::Step {
                base: Base::DerefRbp,
                cfa_off: -16,
                rbp: Saved::AtRbp,
                rbp_off: 0,
            },
            Rule::Step {
                base: Base::Rsp,
                cfa_off: i32::MAX,
                rbp: Saved::AtRbp,
                rbp_off: i16::MIN,
            },
            Rule::End,
            Rule::Unsupported,
        ] {
            let w = r.pack();
            assert_eq!(Rule::unpack(w), r);
            assert_ne!(w, 0);
            if let Rule::Step {
                base,
                cfa_off,
                rbp,
                rbp_off,
            } = r
            {
                assert_eq!(w & KIND_MASK, KIND_STEP);
                assert_eq!(self::base(w), base as u64);
                assert_eq!(self::cfa_off(w), cfa_off as i64 as u64);
                assert_eq!(rbp_saved(w), rbp as u64);
                assert_eq!(self::rbp_off(w), rbp_off as i64 as u64);
            }
        }
    }

    #[test]
    fn entries_are_found_by_address_and_epoch_only() {
        let a = 0x7f00_1234_5678u64;
        insert(a, key(a, 7), 42);
        assert_eq!(get(a, key(a, 7)), Some(42));
        assert_eq!(get(a, key(a, 8)), None);
        assert_eq!(get(a + 1, key(a + 1, 7)), None);
        // Five addresses of one bucket: four ways, every lookup still exact.
        let same: Vec<u64> = (0..1u64 << 24)
            .map(|i| a + i)
            .filter(|&x| std::ptr::eq(bucket_of(hash(x)), bucket_of(hash(a))))
            .take(5)
            .collect();
        for (i, &x) in same.iter().enumerate() {
            insert(x, key(x, 9), i as u64 + 100);
        }
        for (i, &x) in same.iter().enumerate() {
            if let Some(r) = get(x, key(x, 9)) {
                assert_eq!(r, i as u64 + 100);
            }
        }
        assert_eq!(next_epoch(0xFFFF), 0x1_0001);
    }
}
