//! Stack interning on the allocating thread, so an event carries a stack id instead of
//! its frames (a ring slot is 64 bytes, not 1 KiB).
//!
//! ```text
//!  frames ─► 64-bit hash ─► this thread's direct-mapped cache (512 slots, no lock)
//!                               hit: the id                (the common case: loops repeat)
//!                               miss: the process's ids by hash (`id_table.rs`, no lock)
//!                               not there: the table's lock, a new id; new stacks also
//!                                     queued in `fresh` (the frames shared) for the
//!                                     writer, who writes each definition before any
//!                                     event that uses it
//! ```
//!
//! A thread inserts a stack into the global table before it pushes the event that uses
//! it, and the writer takes `fresh` definitions after it has popped a batch of events; so
//! every id in that batch is defined first. Ids are never reused. The key, in the cache
//! and in the table alike, is the stack's 64-bit hash (length included): two different
//! stacks would have to collide in all 64 bits to share an id (for a million stacks, about
//! one chance in 37 million).
//!
//! Python code objects (what Python frames in a stack name) are interned in the same
//! table, under the same lock, so the writer takes new codes and new stacks together and
//! writes the codes first: a stack never refers to an undefined code.

use super::words_hash::hash_words;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use gpumemprof_format::{PyCode, PY_MAX_CODE_ID};

use super::frames_arena::Arena;
use super::id_table;

/// Per-thread cache slots (a power of two): 8 KiB of TLS per thread, more distinct
/// allocation stacks than a training loop's hot path has.
const SLOTS: usize = 512;

thread_local! {
    /// (hash, id) pairs; hash 0 marks an empty slot. Const-initialised, no Drop.
    static CACHE: [Cell<(u64, u64)>; SLOTS] = const { [const { Cell::new((0, 0)) }; SLOTS] };
}

/// FxHash-style hasher for the global table (keys are already well-mixed addresses).
#[derive(Default)]
pub struct FxHasher(u64);
impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Eight bytes a round (a `[u64]` or a string hashes as its bytes), the rest padded.
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}
pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A Python code object as the shim tells them apart: its address, the addresses of its
/// file and function name strings, and its first line. A code object freed and another
/// allocated at its address would have to reuse both strings' addresses too.
pub type CodeKey = [usize; 4];

/// A stack's frames, shared by the table and the writer's queue: a copy in the arena,
/// kept as long as the process.
pub type Frames = &'static [u64];

struct Table {
    /// Every stack defined so far, id `i + 1` at `i` (a forked child writes them all
    /// again; a lookup never reads them: the ids by hash are `id_table`'s).
    defined: Vec<Frames>,
    /// Defined but not yet written by the writer.
    fresh: Vec<(u64, Frames)>,
    codes: FxMap<CodeKey, u64>,
    /// Every code defined so far (a forked child writes them all again).
    code_defs: Vec<PyCode>,
    /// Codes defined but not yet written (indices into `code_defs`).
    fresh_codes: usize,
    /// Where the frames of `defined` are.
    arena: Arena,
}

static TABLE: Lazy<Mutex<Table>> = Lazy::new(|| {
    Mutex::new(Table {
        defined: Vec::new(),
        fresh: Vec::new(),
        codes: FxMap::default(),
        code_defs: Vec::new(),
        fresh_codes: 0,
        arena: Arena::new(),
    })
});

/// The id of a Python code object (from 1), defining it on first sight with the names
/// `describe` reads (called under the table's lock, only on a miss). `None` once every
/// id a frame word can carry is taken.
pub fn intern_code(key: CodeKey, describe: impl FnOnce() -> (String, String, u32)) -> Option<u64> {
    let mut t = TABLE.lock();
    if let Some(&id) = t.codes.get(&key) {
        return Some(id);
    }
    let id = t.code_defs.len() as u64 + 1;
    if id > PY_MAX_CODE_ID {
        return None;
    }
    let (filename, name, first_line) = describe();
    t.codes.insert(key, id);
    t.code_defs.push(PyCode {
        id,
        first_line,
        filename,
        name,
    });
    Some(id)
}

/// 64-bit hash of a stack, never 0 (0 marks an empty cache slot).
#[inline]
pub fn hash(frames: &[u64]) -> u64 {
    let seeds = [
        (frames.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
    ];
    hash_words(seeds, frames, |&f| f)
}

/// Asks for what `intern(frames)` will read from the process's table of ids, if that is
/// large enough to miss the cache (`id_table::prefetch`), so that it arrives while the
/// caller does other work: on 100,000 call paths in turn, a capture waited about 115 ns
/// for it (BENCHMARKS.md, twelfth). Gives the frames' hash, for `intern_hashed`.
#[inline(never)]
pub fn prefetch(frames: &[u64]) -> u64 {
    let h = hash(frames);
    id_table::prefetch(h);
    h
}

/// The id of this stack (0 for an empty stack, or once 2^32 - 1 ids are taken),
/// defining it on first sight.
#[inline]
pub fn intern(frames: &[u64]) -> u32 {
    intern_hashed(frames, 0)
}

/// `intern`, given the frames' hash `known` if it is (else 0): a walk's frames hashed by
/// `prefetch` are not hashed again (BENCHMARKS.md, twenty-sixth).
#[inline]
pub fn intern_hashed(frames: &[u64], known: u64) -> u32 {
    if frames.is_empty() {
        return 0;
    }
    let h = if known != 0 { known } else { hash(frames) };
    debug_assert_eq!(h, hash(frames), "a hash given for other frames");
    let slot = (h as usize) & (SLOTS - 1);
    if let Ok(Some(id)) = CACHE.try_with(|c| {
        let (k, id) = c[slot].get();
        (k == h).then_some(id)
    }) {
        return id as u32;
    }
    let id = match id_table::lookup(h) {
        Some(id) => id,
        None => intern_slow(frames, h),
    };
    if id != 0 {
        let _ = CACHE.try_with(|c| c[slot].set((h, id)));
    }
    id as u32
}

/// The global table's id for `frames`, whose `hash` is `h`, defining it if new.
#[cold]
fn intern_slow(frames: &[u64], h: u64) -> u64 {
    let mut t = TABLE.lock();
    if let Some(id) = id_table::lookup(h) {
        return id; // defined by another thread since this one looked
    }
    let id = t.defined.len() as u64 + 1;
    if id > u32::MAX as u64 {
        return 0; // an event's stack id is 32 bits
    }
    // The frames kept before the id is published: a thread that finds the id finds its
    // definition too. Without memory for them (or for the ids), no id.
    let Some(kept) = t.arena.keep(frames) else {
        return 0;
    };
    if !id_table::insert(h, id) {
        return 0;
    }
    t.defined.push(kept);
    t.fresh.push((id, kept));
    id
}

/// The frames stack `id` was defined with (`None`: no such id); takes the table's lock
/// (`GPUMEMPROF_UNWIND=check` only).
pub fn frames_of(id: u32) -> Option<Frames> {
    let i = (id as usize).checked_sub(1)?;
    TABLE.lock().defined.get(i).copied()
}

/// Moves every stack defined since the last call into `out`, and copies every Python
/// code defined since then into `codes` (the writer writes the codes first).
pub fn take_fresh(out: &mut Vec<(u64, Frames)>, codes: &mut Vec<PyCode>) {
    let mut t = TABLE.lock();
    if !t.fresh.is_empty() {
        out.append(&mut t.fresh);
    }
    if t.fresh_codes < t.code_defs.len() {
        codes.extend_from_slice(&t.code_defs[t.fresh_codes..]);
        t.fresh_codes = t.code_defs.len();
    }
}

/// Before `fork`: hold the table's lock so the child never inherits it mid-change.
pub fn lock_for_fork() {
    std::mem::forget(TABLE.lock());
}

/// After `fork`, in the parent.
///
/// # Safety
/// Only after `lock_for_fork` on this thread.
pub unsafe fn unlock_after_fork() {
    TABLE.force_unlock();
}

/// After `fork`, in a child that records into its own trace: every stack known so far
/// is queued again, so the child's trace defines the ids its threads' caches hand out.
///
/// # Safety
/// Only after `lock_for_fork` on this thread (the child's only thread).
pub unsafe fn child_after_fork() {
    // SAFETY: the lock is held (taken before fork), so this thread has the table.
    let t = &mut *TABLE.data_ptr();
    t.fresh = (1..).zip(t.defined.iter().copied()).collect();
    t.fresh_codes = 0;
    TABLE.force_unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `take_fresh` takes every thread's fresh definitions: tests that call it run one at a
    /// time, or one takes the definitions the other waits for.
    static TAKING: Mutex<()> = Mutex::new(());

    #[test]
    fn same_stack_same_id_across_threads_and_each_defined_once() {
        let _one_at_a_time = TAKING.lock();
        let a = [0x1000u64, 0x2000, 0x3000];
        let b = [0x1000u64, 0x2000];
        let ia = intern(&a);
        let ib = intern(&b);
        assert_ne!(ia, ib);
        assert_eq!(intern(&a), ia);
        let from_thread = std::thread::spawn(move || intern(&a)).join().unwrap();
        assert_eq!(from_thread, ia);
        let mut fresh = Vec::new();
        take_fresh(&mut fresh, &mut Vec::new());
        let defs: Vec<_> = fresh
            .iter()
            .filter(|(id, _)| *id == ia as u64 || *id == ib as u64)
            .collect();
        assert_eq!(defs.len(), 2);
        assert_eq!(intern(&[]), 0);
    }

    #[test]
    fn a_stack_interned_with_the_hash_its_prefetch_gave_gets_the_id_it_gets_without() {
        let _one_at_a_time = TAKING.lock();
        // Frames of this test's own: defined through the hash, then met without it, and
        // the other way round.
        let a = [0x7E58_0000_1000u64, 0x7E58_0000_2000];
        let b = [0x7E58_0000_3000u64];
        let ia = intern_hashed(&a, prefetch(&a));
        assert_ne!(ia, 0);
        assert_eq!(intern(&a), ia);
        let ib = intern(&b);
        assert_eq!(intern_hashed(&b, prefetch(&b)), ib);
        assert_ne!(ia, ib);
        assert_eq!(prefetch(&a), hash(&a));
        assert_eq!(frames_of(ia), Some(&a[..]));
    }

    #[test]
    fn threads_interning_at_once_while_the_ids_table_grows_agree_on_every_id() {
        let _one_at_a_time = TAKING.lock();
        // 3,000 stacks of this test's own (frames no other test uses), met by 6 threads in
        // different orders at once: the table grows from its first size under them.
        let stack = |i: u64| {
            [
                0x7E57_0000_0000 + i,
                0x7E57_1000_0000 + i * 7,
                0x7E57_2000_0000,
            ]
        };
        let n = 3_000u64;
        let ids: Vec<Vec<u32>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..6u64)
                .map(|t| {
                    s.spawn(move || {
                        let mut got = vec![0u32; n as usize];
                        for k in 0..n {
                            // A permutation of 0..n of its own (each step coprime with n).
                            let i = (k * [1, 7, 11, 13, 17, 19][t as usize] + t * 101) % n;
                            got[i as usize] = intern(&stack(i));
                        }
                        got
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for t in 1..ids.len() {
            assert_eq!(ids[t], ids[0], "thread {t}");
        }
        let distinct: std::collections::HashSet<u32> = ids[0].iter().copied().collect();
        assert_eq!(distinct.len(), n as usize);
        assert!(!distinct.contains(&0));
        // Each defined once, with its own frames.
        let mut fresh = Vec::new();
        take_fresh(&mut fresh, &mut Vec::new());
        let mine: Vec<_> = fresh
            .iter()
            .filter(|(id, _)| distinct.contains(&(*id as u32)))
            .collect();
        assert_eq!(mine.len(), n as usize);
        for (id, frames) in mine {
            let i = ids[0].iter().position(|x| *x as u64 == *id).unwrap() as u64;
            assert_eq!(&frames[..], &stack(i)[..]);
        }
    }

    #[test]
    fn a_code_is_defined_once_and_taken_once() {
        let _one_at_a_time = TAKING.lock();
        let key = [0x1000, 0x2000, 0x3000, 7];
        let a = intern_code(key, || ("train.py".into(), "step".into(), 7)).unwrap();
        let b = intern_code(key, || panic!("described twice")).unwrap();
        assert_eq!(a, b);
        let other = intern_code([0x1000, 0x2000, 0x3000, 8], || {
            ("t.py".into(), "f".into(), 8)
        });
        assert_ne!(other, Some(a));
        let (mut stacks, mut codes) = (Vec::new(), Vec::new());
        take_fresh(&mut stacks, &mut codes);
        assert!(codes
            .iter()
            .any(|c| c.id == a && c.name == "step" && c.first_line == 7));
        let mut again = Vec::new();
        take_fresh(&mut stacks, &mut again);
        assert!(again.iter().all(|c| c.id != a));
    }
}
