//! A thread's walks by what they read: the stack id of a call path met before, found by
//! one hash of the stack words its walk reads and one probe (of two buckets), however many
//! call paths start at the same place.
//!
//! ```text
//!  capture at (ip, sp), no memo met at its first state, no first-state cache entry
//!   └► the shapes of set hash(ip, sp): an earlier walk's start and the address of every
//!      word it read (as an offset from sp), those whose fork word (where they part from
//!      another shape of the start, `shape.rs`) holds what their walks read there
//!      ─► key = hash(shape, what is merged, rbp where read, the words now at those
//!      addresses) ─► the table (two 5-way buckets a key, up to 8 MiB): the stack id
//!      noted for it
//!   miss: the walk; its shape kept (the set's least recently used replaced), its key
//!      left pending until the caller interns the frames and notes the id (`note`)
//! ```
//!
//! Why it is exact: a walk is a pure function of its start (ip, sp, rbp where a rule reads
//! it), the rules of its epoch and the words it reads, and which word it reads next
//! depends only on those read before (see `memo.rs`). So if the words now at a shape's
//! addresses are those an earlier walk with that shape read, this walk is that walk, and
//! its stack is that walk's. If they are not, this walk may read other addresses, but a
//! key made of the words at these addresses then names no walk of this shape but one that
//! read exactly these words: again the same walk. A key stands for its walk as a stack's
//! hash stands for its frames in `intern`: two walks would have to collide in all 64 bits.
//!
//! Why beside the first-state cache: that cache compares an entry's words one by one, so a
//! set holds 16 call paths of one start; a program whose call paths differ in their outer
//! frames (a step's ops under many callers, `varied_sites`) starts hundreds of them at
//! one stack pointer, and each walked all its frames (BENCHMARKS.md, fourteenth). Here the
//! call paths of one start share a shape or a few, and each is one entry of 12 bytes.
//!
//! A shape's addresses were read by this thread's walk from the same stack pointer, under
//! the same stack top: they lie in its stack, which stays mapped (see `Memo::resume`). A
//! block given back at thread exit forgets its shapes before another thread takes it; its
//! table's entries stay true (ids are the process's, never reused, and a key names a walk
//! whatever thread made it).

use super::first::Start;
use super::memo;
use super::pool::Pool;
use std::mem::MaybeUninit;

use crate::sys::{pages, prefetch};
use shape::{key, Shape, WORDS};

mod shape;
#[cfg(test)]
mod tests;

/// Shapes per thread, in sets of `WAYS` chosen by the start: a start has a shape per
/// frame layout its call paths take (two copies of one function that save a register in
/// different slots make two; `varied_sites` has two a start, at four starts: an allocation
/// and a free at two depths), and starts share sets. 568 bytes each, touched only when
/// used.
const SETS: usize = 32;
const WAYS: usize = 8;
/// Entries of a bucket: 5 (key, id) pairs of 12 bytes, one cache line.
const WAYS_PER_BUCKET: usize = 5;
/// The table's first size in buckets (64 KiB), and its largest (8 MiB): it doubles when it
/// holds `LOAD_X2 / 2` (3.5) keys a bucket on average. A key goes in the emptier of two
/// buckets (`place`): keys met in turn replace each other only where both buckets have
/// their five (on `varied_sites 100000`, 3,109 of 1.8 million captures of a call path met
/// before walked again, against 42,559 with one bucket a key in a table twice as large).
/// A thread that walks few call paths touches little. The 200,000 keys of
/// `varied_sites 100000` fit 4 MiB, where a probe on the machine of BENCHMARKS.md's
/// sixteenth section took 41 to 55 ns, and 133 to 172 into 8 MiB (`tests/bench/latency.c`;
/// the largest size was 4 MiB once before, with one bucket a key and about one key in five
/// lost: fifteenth).
const FIRST_BUCKETS: usize = 1 << 10;
const MAX_BUCKETS: usize = 1 << 17;
const LOAD_X2: usize = 7;
/// Up to this size (256 KiB) the table is taken to stay in the core's cache: its probes
/// are not misses in memory to overlap, and `lookup` hashes a shape only when those
/// before it found nothing (BENCHMARKS.md, fifteenth).
const CACHED_BUCKETS: usize = 1 << 12;
const BUCKET_BYTES: usize = std::mem::size_of::<Bucket>();

/// (key, id) pairs, key 0 empty, the first the most recently stored.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bucket {
    keys: [u64; WAYS_PER_BUCKET],
    /// Ids are below 2^32 (an event's stack id is 32 bits).
    ids: [u32; WAYS_PER_BUCKET],
}

/// One thread's shapes and keys (from `calloc`: all zero is empty).
pub struct Inputs {
    shapes: [Shape; SETS * WAYS],
    clock: u64,
    /// The key of the last walk stored, waiting for its stack id (0: none).
    pending: u64,
    /// The keys the last lookup made and found nothing for, by shape, at `clock`: the walk
    /// that follows reads the same words, and `store` takes its key from here when it keeps
    /// the walk in one of these shapes (a hash of every word fewer a first sight).
    missed: Missed,
    /// Keys stored (not counting those put again).
    stored: usize,
    /// `buckets` buckets; null until the first key.
    table: *mut Bucket,
    buckets: usize,
}

/// What `Inputs::missed` holds: `n` (shape, key) pairs made at lookup `clock`.
#[derive(Clone, Copy)]
struct Missed {
    clock: u64,
    n: usize,
    ways: [usize; WAYS],
    keys: [u64; WAYS],
}

impl Missed {
    /// The key made for shape `i` by the lookup at `clock`, if that lookup made one.
    fn key(&self, clock: u64, i: usize) -> Option<u64> {
        if self.clock != clock {
            return None;
        }
        let j = self.ways[..self.n].iter().position(|&w| w == i)?;
        Some(self.keys[j])
    }
}

/// The shapes of start `(ip, sp)`.
fn set(ip: u64, sp: u64) -> std::ops::Range<usize> {
    let s = (((sp >> 4) ^ ip.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize
        % SETS;
    s * WAYS..(s + 1) * WAYS
}

impl Inputs {
    /// The stack id noted for the walk from `s` (output room `room`, stack top `top`) with
    /// `with` merged, if a shape of its start knows the words it would read.
    ///
    /// Not inlined: the walk's loop, where a loop's capture meets its memo, stays as small
    /// as it was (a call is nothing beside hashing a shape's words).
    ///
    /// # Safety
    /// This thread's block; `s.sp..top` its readable stack.
    #[inline(never)]
    pub unsafe fn lookup(&mut self, s: Start, room: usize, top: u64, with: u64) -> Option<u32> {
        if self.table.is_null() {
            return None;
        }
        self.clock += 1;
        // The shapes of this start whose fork word is there now.
        let mut ways = [0usize; WAYS];
        let mut n = 0;
        for i in set(s.ip, s.sp) {
            let shape = &self.shapes[i];
            // SAFETY: as this function's.
            if shape.starts(s, room, top) && unsafe { shape.forks_here(s.sp) } {
                ways[n] = i;
                n += 1;
            }
        }
        // SAFETY: as this function's.
        let (i, id) = match unsafe { self.probe(&ways[..n], s, with) } {
            Ok(found) => found,
            Err(keys) => {
                self.missed = Missed {
                    clock: self.clock,
                    n,
                    ways,
                    keys,
                };
                return None;
            }
        };
        let shape = &mut self.shapes[i];
        shape.used = self.clock;
        // SAFETY: an address of this shape's (as in `key_now`).
        shape.seen(|_, o| unsafe { (s.sp as *const u64).add(o).read() });
        Some(id)
    }

    /// The first of shapes `ways` (which start as `s`) whose key for the walk from `s` is
    /// noted, and its id; else every shape's key (in the order of `ways`).
    ///
    /// # Safety
    /// As `lookup`'s.
    #[inline(always)]
    unsafe fn probe(
        &self,
        ways: &[usize],
        s: Start,
        with: u64,
    ) -> Result<(usize, u32), [u64; WAYS]> {
        let mut keys = [0u64; WAYS];
        if self.buckets <= CACHED_BUCKETS {
            // A table the core's cache holds: each shape's key probed as soon as it is
            // made, and the shapes after the one that finds it are not hashed.
            for (k, &i) in keys.iter_mut().zip(ways) {
                // SAFETY: as this function's.
                *k = unsafe { self.shapes[i].key_now(s, with) };
                if let Some(id) = self.find(*k) {
                    return Ok((i, id));
                }
            }
            return Err(keys);
        }
        // A larger table: every shape's key first, each bucket asked for as soon as it is
        // known: where several shapes are asked, the probes are misses in memory, and they
        // overlap instead of following each other (BENCHMARKS.md, fourteenth). With one
        // shape too: its two buckets' misses overlap (asked for one after the other, 13
        // instructions fewer a lookup, the pair took 7% longer, BENCHMARKS.md, twenty-sixth).
        for (k, &i) in keys.iter_mut().zip(ways) {
            // SAFETY: as this function's.
            *k = unsafe { self.shapes[i].key_now(s, with) };
            let (a, b) = buckets_of(*k, self.buckets);
            // SAFETY: a table of `buckets` buckets (not null: `lookup`).
            unsafe {
                prefetch::for_read(self.table.add(a));
                prefetch::for_read(self.table.add(b));
            }
        }
        keys.iter()
            .zip(ways)
            .find_map(|(&k, &i)| self.find(k).map(|id| (i, id)))
            .ok_or(keys)
    }

    /// The id noted for `k`, in either of its two buckets.
    #[inline(always)]
    fn find(&self, k: u64) -> Option<u32> {
        if self.table.is_null() {
            return None;
        }
        let (a, b) = buckets_of(k, self.buckets);
        // SAFETY: a table of `buckets` buckets, this thread's.
        let (a, b) = unsafe { (&*self.table.add(a), &*self.table.add(b)) };
        a.find(k).or_else(|| b.find(k))
    }

    /// Keeps the shape of the walk from `s` that `rec` recorded, and leaves its key
    /// pending for `note`; `false` if the walk cannot be kept (too many words).
    pub fn store(
        &mut self,
        s: Start,
        rec: &memo::Record,
        room: usize,
        top: u64,
        with: u64,
    ) -> bool {
        self.pending = 0;
        let Some((read, bp_needed)) = rec.whole() else {
            return false;
        };
        if read.len() > WORDS || room > u32::MAX as usize {
            return false;
        }
        // A word the walk did not compare is recorded as a copy of the one before it
        // (`Record::forget_word`): left out, so that a walk that forgot it and one that
        // joined a memo where it was forgotten have one shape. The offsets and the words
        // apart, each array written from registers. Without a branch a word: each is
        // written at `n`, which moves past it unless it repeats the one before (then the
        // next overwrites it); the distances from the stack pointer are ORed, and
        // `memo::fits` of the OR tells at once whether `memo::offset` accepts each.
        let mut offs = [MaybeUninit::<u16>::uninit(); WORDS];
        let mut vals = [MaybeUninit::<u64>::uninit(); WORDS];
        let mut n = 0;
        // No word lies at the last address (an odd one).
        let mut last = u64::MAX;
        let mut all = 0u64;
        for &(a, v) in read {
            let d = a.wrapping_sub(s.sp);
            all |= d;
            debug_assert!(n < WORDS);
            // SAFETY: `n` is at most the number of pairs before this one, and there are
            // at most `WORDS` (checked above). Unchecked: the bounds check was 2 of the
            // loop's 17 instructions a word (BENCHMARKS.md, twenty-sixth).
            unsafe {
                *offs.get_unchecked_mut(n) = MaybeUninit::new((d >> 3) as u16);
                *vals.get_unchecked_mut(n) = MaybeUninit::new(v);
            }
            n += usize::from(a != last);
            last = a;
        }
        if !memo::fits(all) {
            return false;
        }
        // SAFETY: the first `n` of each were written just above.
        let (offs, vals) = unsafe {
            (
                std::slice::from_raw_parts(offs.as_ptr() as *const u16, n),
                std::slice::from_raw_parts(vals.as_ptr() as *const u64, n),
            )
        };
        // The lookup just before this walk, if there was one (nothing between moved the
        // clock).
        let lookup_clock = self.clock;
        self.clock += 1;
        let now = self.clock;
        let ways = set(s.ip, s.sp);
        let same = |sh: &Shape| {
            sh.starts(s, room, top)
                && sh.bp_needed == bp_needed
                && sh.n_words as usize == n
                && sh.offs[..n] == *offs
        };
        // The shape kept, and whether it is one the lookup before may have hashed (a new
        // shape may take the way of one it hashed: that key is another shape's).
        let (i, kept_before) = match ways.clone().find(|&i| same(&self.shapes[i])) {
            Some(i) => {
                self.shapes[i].seen(|j, _| vals[j]);
                (i, true)
            }
            None => {
                let i = ways
                    .clone()
                    .min_by_key(|&i| match &self.shapes[i] {
                        sh if sh.epoch == 0 => 0,
                        sh => sh.used,
                    })
                    .expect("a set has ways");
                let fork = shape::fork_among(
                    &mut self.shapes[ways.clone()],
                    i - ways.start,
                    s,
                    room,
                    top,
                    offs,
                );
                self.shapes[i].fill(s, room, top, bp_needed, offs, vals, fork);
                (i, false)
            }
        };
        let sh = &mut self.shapes[i];
        sh.used = now;
        let bp = if bp_needed { s.bp } else { 0 };
        let made = || key(sh.tag, with, bp, vals, |&v| v);
        // The lookup that missed hashed these words at these addresses with this shape's
        // tag, `with` and rbp: the same key.
        let missed = self.missed.key(lookup_clock, i).filter(|_| kept_before);
        self.pending = match missed {
            Some(k) => {
                debug_assert_eq!(k, made());
                k
            }
            None => made(),
        };
        true
    }

    /// Notes `id` for the walk `store` last kept (and nothing if none is pending, or for
    /// id 0: no id was given).
    pub fn note(&mut self, id: u32) {
        let k = std::mem::take(&mut self.pending);
        if k == 0 || id == 0 {
            return;
        }
        if (self.table.is_null() || 2 * self.stored >= LOAD_X2 * self.buckets) && !self.grow() {
            return;
        }
        // SAFETY: a table of `buckets` buckets, this thread's.
        if unsafe { place(self.table, self.buckets, k, id) } {
            self.stored += 1;
        }
    }

    /// A table twice as large (the first, if none), holding the old one's keys; `false`
    /// if it is as large as it gets and full enough (the keys go on replacing each
    /// other) or there is no memory for it.
    #[cold]
    fn grow(&mut self) -> bool {
        if self.buckets >= MAX_BUCKETS {
            return !self.table.is_null();
        }
        let buckets = if self.table.is_null() {
            FIRST_BUCKETS
        } else {
            2 * self.buckets
        };
        // Zero bytes are empty entries.
        let Some(t) = pages::zeroed(buckets * BUCKET_BYTES) else {
            return !self.table.is_null();
        };
        let t = t as *mut Bucket;
        if !self.table.is_null() {
            // SAFETY: the old table, this thread's, of `buckets` buckets; then unmapped.
            unsafe {
                for b in std::slice::from_raw_parts(self.table, self.buckets) {
                    // Least recent first, so each bucket keeps its order.
                    for (&k, &id) in b.keys.iter().zip(&b.ids).rev().filter(|e| *e.0 != 0) {
                        place(t, buckets, k, id);
                    }
                }
                pages::give_back(self.table as *mut u8, self.buckets * BUCKET_BYTES);
            }
        }
        self.table = t;
        self.buckets = buckets;
        true
    }

    /// Unmaps the table (a block freed, not kept for another thread).
    fn release(&mut self) {
        if !self.table.is_null() {
            // SAFETY: the table of `buckets` buckets from `pages::zeroed`, used by nobody
            // once its block is given back.
            unsafe { pages::give_back(self.table as *mut u8, self.buckets * BUCKET_BYTES) };
            self.table = std::ptr::null_mut();
        }
    }

    /// Forgets the shapes (a block taken over from an exited thread); the table's keys
    /// stay true for any thread.
    fn clear(&mut self) {
        for sh in self.shapes.iter_mut() {
            sh.epoch = 0;
        }
        self.pending = 0;
        self.missed.n = 0;
    }
}

/// The two buckets key `k` may be in (they may be the same one), from different bits of it.
#[inline(always)]
fn buckets_of(k: u64, buckets: usize) -> (usize, usize) {
    let mask = buckets - 1;
    (
        (k ^ (k >> 29)) as usize & mask,
        (k.rotate_left(32) ^ (k >> 11)) as usize & mask,
    )
}

impl Bucket {
    #[inline(always)]
    fn find(&self, k: u64) -> Option<u32> {
        self.keys.iter().position(|&e| e == k).map(|j| self.ids[j])
    }

    /// Keys held (they are packed at the front).
    fn held(&self) -> usize {
        self.keys.iter().take_while(|&&e| e != 0).count()
    }
}

/// Puts `(k, id)` in table `t` of `buckets` buckets: in the one of its two buckets that
/// holds it already, else in the one that holds fewer keys (the first on a tie), so that
/// a key is dropped only when both are full (see `FIRST_BUCKETS`); whether `k` was not
/// there.
///
/// # Safety
/// `t` is a table of `buckets` buckets, this thread's.
unsafe fn place(t: *mut Bucket, buckets: usize, k: u64, id: u32) -> bool {
    let (a, b) = buckets_of(k, buckets);
    // SAFETY: the caller's; `a == b` is one bucket, taken once.
    let (a, b) = unsafe { (t.add(a), t.add(b)) };
    let into = unsafe {
        if (*a).find(k).is_some() {
            a
        } else if (*b).find(k).is_some() || (*b).held() < (*a).held() {
            b
        } else {
            a
        }
    };
    // SAFETY: as above.
    put(unsafe { &mut *into }, k, id)
}

/// Puts `(k, id)` first in bucket `b`, the others moved down, the least recent dropped;
/// whether `k` was not there.
fn put(b: &mut Bucket, k: u64, id: u32) -> bool {
    let there = b.keys.iter().position(|&e| e == k);
    let at = there.unwrap_or(WAYS_PER_BUCKET - 1);
    b.keys.copy_within(0..at, 1);
    b.ids.copy_within(0..at, 1);
    (b.keys[0], b.ids[0]) = (k, id);
    there.is_none()
}

/// Blocks given back by exited threads.
static FREE: Pool<Inputs> = Pool::new();

/// A block for the calling thread (null if there is no memory for it).
pub fn take() -> *mut Inputs {
    FREE.take(Inputs::clear)
}

/// Gives an exiting thread's block back, for a thread to come (or frees it).
pub fn give_back(block: *mut Inputs) {
    if block == GONE {
        return;
    }
    // SAFETY: a block from `take`, used by nobody after its thread gives it back.
    unsafe { FREE.give_back(block, Inputs::release) };
}

/// A thread's block once the thread has given it back at exit.
pub const GONE: *mut Inputs = std::ptr::dangling_mut();
