//! The process's stack ids by stack hash, read without a lock: a flat table of
//! (hash, id) pairs, 16 bytes a slot, so that a stack met again costs one cache line.
//!
//! ```text
//!  lookup(h): the table now published ─► slot (h >> 32) & mask, then the next ones
//!             a slot with key h: its id   a slot with key 0: not in this table
//!  insert (the caller holds intern's lock): into the published table, or into a
//!             table twice as large filled from it and published in its place
//! ```
//!
//! Why not a `HashMap` under the lock: with 200,000 stacks met in turn (a program's call
//! paths, `varied_sites`), a lookup read the map's control bytes and then its bucket, 28%
//! of the profile, 80% of it waiting on the bucket (BENCHMARKS.md, tenth), and every
//! lookup took the lock. Here a lookup reads one slot (rarely the next), the table's pages
//! are huge pages where the kernel allows them (`madvise`), and only a new stack locks.
//!
//! A slot is written id first, key last (release); a reader that sees the key sees its id.
//! A grown table is filled completely before it is published, and the tables it replaced
//! stay mapped (a reader may still be reading one): at most the size of the last, since
//! sizes double. A reader that misses in an old table takes the locked path, which looks
//! in the published one. Keys are never 0 (`intern::hash` sets the low bit).
//!
//! The shim inserts only under intern's table lock, which `fork` takes first
//! (`intern::lock_for_fork`): a child never inherits `INSERT` held, nor a table half
//! grown.

use crate::sys::{pages, prefetch};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Slots of the first table (64 KiB); a table holds at most half its slots.
const FIRST_SLOTS: usize = 4096;
/// Slots from which `prefetch` asks for a slot (1 MiB: past what a core's own cache
/// holds; on the development machine a random load into 1 MiB took 7 ns, into 8 MiB
/// 29 to 76, BENCHMARKS.md).
const PREFETCH_FROM: usize = 1 << 16;

struct Table {
    /// Slots - 1 (a power of two).
    mask: usize,
    /// Keys in use.
    len: usize,
    /// `2 * (mask + 1)` words: each slot's key, then its id.
    words: *const AtomicU64,
}

/// The published table (null until the first insert).
static CURRENT: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());

#[inline(always)]
fn first_slot(h: u64, mask: usize) -> usize {
    // The high half: the threads' caches index by the low bits.
    ((h >> 32) as usize ^ (h as usize).rotate_left(7)) & mask
}

/// The id stored for key `h`, if the published table has one.
#[inline(always)]
pub fn lookup(h: u64) -> Option<u64> {
    let t = CURRENT.load(Ordering::Acquire);
    if t.is_null() {
        return None;
    }
    // SAFETY: a published table is never unmapped or changed but for slots going from
    // empty to filled (key written last, with release).
    unsafe { find(&*t, h) }
}

/// Asks for the slot where the lookup of key `key` starts to be brought into the cache,
/// when the table is large enough (`PREFETCH_FROM`) for that slot to be a miss in memory;
/// a smaller table's slot is near at hand.
#[inline(always)]
pub fn prefetch(key: u64) {
    let t = CURRENT.load(Ordering::Acquire);
    if !t.is_null() {
        // SAFETY: a published table is live.
        unsafe { prefetch_in(&*t, key) }
    }
}

/// # Safety
/// `t` is a live table.
#[inline(always)]
unsafe fn prefetch_in(t: &Table, key: u64) {
    if t.mask + 1 >= PREFETCH_FROM {
        prefetch::for_read(t.words.add(2 * first_slot(key, t.mask)));
    }
}

/// # Safety
/// `t` is a live table.
#[inline(always)]
unsafe fn find(t: &Table, h: u64) -> Option<u64> {
    let mut i = first_slot(h, t.mask);
    loop {
        let slot = t.words.add(2 * i);
        match (*slot).load(Ordering::Acquire) {
            0 => return None,
            k if k == h => return Some((*slot.add(1)).load(Ordering::Relaxed)),
            _ => i = (i + 1) & t.mask,
        }
    }
}

/// Serialises inserts (only a new stack takes it; intern takes it under its own lock).
static INSERT: Mutex<()> = Mutex::new(());

/// Stores `id` for the new key `h` (not 0, not yet stored). `false`: no memory for a
/// larger table (the key is not stored; a later lookup misses and the caller inserts it
/// again).
pub fn insert(h: u64, id: u64) -> bool {
    let _one = INSERT.lock();
    let mut t = CURRENT.load(Ordering::Acquire);
    // SAFETY: inserts are serialised by `INSERT`; `t` is live (never unmapped).
    unsafe {
        if t.is_null() || 2 * ((*t).len + 1) > (*t).mask + 1 {
            let slots = if t.is_null() {
                FIRST_SLOTS
            } else {
                2 * ((*t).mask + 1)
            };
            let Some(grown) = new_table(slots) else {
                return false;
            };
            if !t.is_null() {
                for i in 0..=(*t).mask {
                    let k = (*(*t).words.add(2 * i)).load(Ordering::Relaxed);
                    if k != 0 {
                        put(
                            &mut *grown,
                            k,
                            (*(*t).words.add(2 * i + 1)).load(Ordering::Relaxed),
                        );
                    }
                }
            }
            CURRENT.store(grown, Ordering::Release);
            t = grown;
        }
        put(&mut *t, h, id);
    }
    true
}

/// # Safety
/// `t` is live, has a free slot, and the caller holds `INSERT` (or owns `t` alone).
unsafe fn put(t: &mut Table, h: u64, id: u64) {
    let mut i = first_slot(h, t.mask);
    while (*t.words.add(2 * i)).load(Ordering::Relaxed) != 0 {
        i = (i + 1) & t.mask;
    }
    (*t.words.add(2 * i + 1)).store(id, Ordering::Relaxed);
    (*t.words.add(2 * i)).store(h, Ordering::Release);
    t.len += 1;
}

/// A zeroed table of `slots` slots (a power of two), mapped apart from the heap, on huge
/// pages from 2 MiB (`pages::zeroed`); `None` without memory for it. Never unmapped (see
/// the module's note).
fn new_table(slots: usize) -> Option<*mut Table> {
    let words = pages::zeroed(slots.checked_mul(16)?)?;
    Some(Box::into_raw(Box::new(Table {
        mask: slots - 1,
        len: 0,
        words: words as *const AtomicU64,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_keeps_its_id_through_the_tables_growth() {
        // Keys of this test's own (odd, high bit set), beyond any stack hash a test
        // inserts elsewhere, many enough to grow the table from 4,096 slots to 65,536.
        let key = |i: u64| (0xA5A5_0000_0000_0001 | (i << 1)) ^ (i << 40);
        for i in 0..20_000u64 {
            assert_eq!(lookup(key(i)), None);
            assert!(insert(key(i), 1_000_000 + i));
        }
        for i in 0..20_000u64 {
            assert_eq!(lookup(key(i)), Some(1_000_000 + i), "key {i}");
        }
        // SAFETY: published, live.
        let slots = unsafe { (*CURRENT.load(Ordering::Acquire)).mask + 1 };
        assert!(slots >= 65_536, "{slots} slots");
    }

    #[test]
    fn keys_sharing_a_first_slot_are_each_found_in_turn() {
        // A private table of 8 slots; bits 40 and 41 of a key change neither half's
        // low three bits, so these four keys start at one slot and fill four in a row.
        let t = new_table(8).unwrap();
        let a = 0x7777_0000_0000_0003u64;
        let keys = [a, a ^ (1 << 40), a ^ (1 << 41), a ^ (3 << 40)];
        // SAFETY: our own live table; this test is its only user.
        unsafe {
            let t = &mut *t;
            for (i, &k) in keys.iter().enumerate() {
                assert_eq!(first_slot(k, t.mask), first_slot(a, t.mask));
                assert_eq!(find(t, k), None);
                put(t, k, 20 + i as u64);
            }
            for (i, &k) in keys.iter().enumerate() {
                assert_eq!(find(t, k), Some(20 + i as u64));
            }
            assert_eq!(find(t, a ^ (1 << 42)), None);
            assert_eq!(t.len, 4);
        }
    }
}
