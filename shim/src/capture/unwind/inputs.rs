//! A thread's walks by what they read: the stack id of a call path met before, found by
//! one hash of the stack words its walk reads and one probe (of two buckets), however many
//! call paths start at the same place.
//!
//! ```text
//!  capture at (ip, sp), no memo met at its first state, no first-state cache entry
//!   └► the shapes of set hash(ip, sp): an earlier walk's start and the address of every
//!      word it read (as an offset from sp) ─► key = hash(shape, what is merged, rbp
//!      where read, the words now at those addresses) ─► the table (two 5-way buckets a
//!      key, up to 8 MiB): the stack id noted for it
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

use crate::capture::words_hash::{hash_words, mix};
use crate::sys::{pages, prefetch};

/// Shapes per thread, in sets of `WAYS` chosen by the start: a start has a shape per
/// frame layout its call paths take (two copies of one function that save a register in
/// different slots make two; `varied_sites` has two a start, at four starts: an allocation
/// and a free at two depths), and starts share sets. 560 bytes each, touched only when
/// used.
const SETS: usize = 32;
const WAYS: usize = 8;
/// Words a shape holds; a walk that read more is not kept.
const WORDS: usize = memo::WORDS;
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

/// The addresses an earlier walk read, from its start: each as its distance from the
/// start's stack pointer in words (every address a walk reads lies at or above it), so
/// that a shape is 560 bytes, not 2 KiB: a lookup reads a quarter of the cache lines for
/// them (two for 55 words, not seven), and a thread's shapes take 140 KiB, not 512
/// (BENCHMARKS.md, sixteenth).
struct Shape {
    /// The rules' epoch; 0: empty.
    epoch: u64,
    used: u64,
    skip: (u64, u64),
    ip: u64,
    sp: u64,
    /// The stack top of the thread that walked (every address lies below it).
    top: u64,
    room: u32,
    bp_needed: bool,
    n_words: u32,
    /// A hash of all the above and the offsets: part of every key of this shape.
    tag: u64,
    /// The word at `sp + 8 * offs[i]` was read i-th.
    offs: [u16; WORDS],
}

/// The offset in words of `addr` from `sp`, if it is a whole number of words at or above
/// `sp` that a `u16` holds.
#[inline(always)]
fn offset(sp: u64, addr: u64) -> Option<u16> {
    let d = addr.checked_sub(sp)?;
    if d % 8 != 0 {
        return None;
    }
    u16::try_from(d / 8).ok()
}

/// One thread's shapes and keys (from `calloc`: all zero is empty).
pub struct Inputs {
    shapes: [Shape; SETS * WAYS],
    clock: u64,
    /// The key of the last walk stored, waiting for its stack id (0: none).
    pending: u64,
    /// Keys stored (not counting those put again).
    stored: usize,
    /// `buckets` buckets; null until the first key.
    table: *mut Bucket,
    buckets: usize,
}

/// The shapes of start `(ip, sp)`.
fn set(ip: u64, sp: u64) -> std::ops::Range<usize> {
    let s = (((sp >> 4) ^ ip.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize
        % SETS;
    s * WAYS..(s + 1) * WAYS
}

/// The key of a walk of the shape tagged `tag` that read `items`, the value of each
/// `value(item)`, with `with` merged and the rbp `bp` (0 where no rule reads it).
#[inline(always)]
fn key<T>(tag: u64, with: u64, bp: u64, items: &[T], value: impl Fn(&T) -> u64) -> u64 {
    let seeds = [
        tag,
        mix(with, 0x243F_6A88_85A3_08D3),
        bp,
        items.len() as u64,
    ];
    hash_words(seeds, items, value)
}

impl Shape {
    /// Whether a walk from `s` with output room `room` on a stack that ends at `top`
    /// starts as this shape's did.
    #[inline(always)]
    fn starts(&self, s: Start, room: usize, top: u64) -> bool {
        self.epoch == s.epoch
            && self.sp == s.sp
            && self.ip == s.ip
            && self.skip == s.skip
            && self.top == top
            && self.room as usize == room
    }

    /// The key of the walk from `s` (which `starts` as this shape), with `with` merged, as
    /// the stack reads now.
    ///
    /// # Safety
    /// The shape is this thread's, and `starts` for `s` on this thread's stack.
    #[inline(always)]
    unsafe fn key_now(&self, s: Start, with: u64) -> u64 {
        let offs = &self.offs[..self.n_words as usize];
        let bp = if self.bp_needed { s.bp } else { 0 };
        let sp = s.sp as *const u64;
        // SAFETY: each address was read by this thread's walk from this stack pointer
        // under this stack top: it lies in this thread's stack (the module's note).
        key(self.tag, with, bp, offs, |&o| unsafe {
            sp.add(o as usize).read()
        })
    }
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
        if self.buckets <= CACHED_BUCKETS {
            // A table the core's cache holds: each shape's key probed as soon as it is
            // made, and the shapes after the one that finds it are not hashed.
            for i in set(s.ip, s.sp) {
                let shape = &self.shapes[i];
                if shape.starts(s, room, top) {
                    // SAFETY: as this function's.
                    if let Some(id) = self.find(unsafe { shape.key_now(s, with) }) {
                        self.shapes[i].used = self.clock;
                        return Some(id);
                    }
                }
            }
            return None;
        }
        // A larger table: every shape of this start's key first, each bucket asked for as
        // soon as it is known: where a start has several shapes, the probes are misses in
        // memory, and they overlap instead of following each other (BENCHMARKS.md,
        // fourteenth).
        let mut keys = [(0usize, 0u64); WAYS];
        let mut n = 0;
        for i in set(s.ip, s.sp) {
            let shape = &self.shapes[i];
            if shape.starts(s, room, top) {
                // SAFETY: as this function's.
                let k = unsafe { shape.key_now(s, with) };
                let (a, b) = buckets_of(k, self.buckets);
                // SAFETY: a table of `buckets` buckets (not null, above).
                unsafe {
                    prefetch::for_read(self.table.add(a));
                    prefetch::for_read(self.table.add(b));
                }
                keys[n] = (i, k);
                n += 1;
            }
        }
        for &(i, k) in &keys[..n] {
            if let Some(id) = self.find(k) {
                self.shapes[i].used = self.clock;
                return Some(id);
            }
        }
        None
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
        // apart, each array written from registers.
        let mut offs = [MaybeUninit::<u16>::uninit(); WORDS];
        let mut vals = [MaybeUninit::<u64>::uninit(); WORDS];
        let mut n = 0;
        let mut last = None;
        for &(a, v) in read {
            if last == Some(a) {
                continue;
            }
            last = Some(a);
            let Some(o) = offset(s.sp, a) else {
                return false;
            };
            offs[n] = MaybeUninit::new(o);
            vals[n] = MaybeUninit::new(v);
            n += 1;
        }
        // SAFETY: the first `n` of each were written just above.
        let (offs, vals) = unsafe {
            (
                std::slice::from_raw_parts(offs.as_ptr() as *const u16, n),
                std::slice::from_raw_parts(vals.as_ptr() as *const u64, n),
            )
        };
        self.clock += 1;
        let now = self.clock;
        let ways = set(s.ip, s.sp);
        let same = |sh: &Shape| {
            sh.starts(s, room, top)
                && sh.bp_needed == bp_needed
                && sh.n_words as usize == n
                && sh.offs[..n] == *offs
        };
        let i = match ways.clone().find(|&i| same(&self.shapes[i])) {
            Some(i) => i,
            None => {
                let i = ways
                    .min_by_key(|&i| match &self.shapes[i] {
                        sh if sh.epoch == 0 => 0,
                        sh => sh.used,
                    })
                    .expect("a set has ways");
                let sh = &mut self.shapes[i];
                sh.offs[..n].copy_from_slice(offs);
                (sh.skip, sh.ip, sh.sp, sh.top) = (s.skip, s.ip, s.sp, top);
                (sh.room, sh.bp_needed, sh.n_words) = (room as u32, bp_needed, n as u32);
                sh.epoch = s.epoch;
                let head = [s.epoch, s.skip.0, s.skip.1, s.ip, s.sp, top, room as u64];
                let start = head.iter().fold(0x9E37_79B9_7F4A_7C15, |h, &v| mix(h, v));
                sh.tag = key(start, 0, u64::from(bp_needed), offs, |&o| u64::from(o));
                i
            }
        };
        let sh = &mut self.shapes[i];
        sh.used = now;
        let bp = if bp_needed { s.bp } else { 0 };
        self.pending = key(sh.tag, with, bp, vals, |&v| v);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A block with no table, whatever another test left in the pool.
    fn empty() -> &'static mut Inputs {
        // SAFETY: a block of the calling test's own, from the pool.
        let i = unsafe { &mut *take() };
        i.release();
        (i.buckets, i.stored) = (0, 0);
        i
    }

    /// Notes `id` for key `k` as `note` does after a walk (`store` leaves it pending).
    fn noted(i: &mut Inputs, k: u64, id: u32) {
        i.pending = k;
        i.note(id);
    }

    #[test]
    fn every_key_noted_is_found_as_the_table_grows() {
        let i = empty();
        // 40,000 keys that share a first bucket by four at most while the table has room
        // for them (1, 2, 3, ...: the low bits pick it), the table growing from 1,024
        // buckets to 16,384 as it fills (at 3.5 keys a bucket): every key kept through each
        // growth.
        let key = |n: u64| n + 1;
        for n in 0..40_000u64 {
            assert_eq!(i.find(key(n)), None);
            noted(i, key(n), n as u32 + 1);
        }
        assert_eq!(i.buckets, 16_384);
        let found = (0..40_000u64)
            .filter(|&n| i.find(key(n)) == Some(n as u32 + 1))
            .count();
        assert_eq!(found, 40_000);
        // Nothing noted without a pending key, nor for id 0.
        i.note(9);
        noted(i, key(40_000), 0);
        assert_eq!(i.find(key(40_000)), None);
        give_back(i);
    }

    #[test]
    fn a_bucket_keeps_its_five_most_recent_keys_in_one_cache_line() {
        let mut b = Bucket {
            keys: [0; WAYS_PER_BUCKET],
            ids: [0; WAYS_PER_BUCKET],
        };
        for k in 1..=6u64 {
            assert!(put(&mut b, k, 10 * k as u32));
        }
        assert_eq!((b.keys, b.ids), ([6, 5, 4, 3, 2], [60, 50, 40, 30, 20]));
        // One put again moves to the front, and is not counted as new.
        assert!(!put(&mut b, 3, 30));
        assert_eq!((b.keys, b.ids), ([3, 6, 5, 4, 2], [30, 60, 50, 40, 20]));
        assert_eq!(BUCKET_BYTES, 64);
    }

    #[test]
    fn keys_that_share_a_first_bucket_spread_to_their_second() {
        let i = empty();
        // Seven keys below 2^32 whose low ten bits are 5 (first bucket 5 of 1,024) and whose
        // bits 11 on differ (second buckets 1 to 7): all seven are found, where one bucket
        // a key keeps five.
        let key = |j: u64| 5 + 2048 * (j + 1);
        for j in 0..7 {
            assert_eq!(buckets_of(key(j), 1024), (5, j as usize + 1));
            noted(i, key(j), j as u32 + 1);
        }
        assert_eq!(i.buckets, 1024);
        let found: Vec<_> = (0..7).map(|j| i.find(key(j))).collect();
        assert_eq!(found, (1..=7).map(Some).collect::<Vec<_>>());
        // Each went to the emptier of its two: the first key to bucket 5 (a tie), the next
        // three to their empty second buckets, the fifth (second bucket 5 too) to bucket 5,
        // the last two to their second buckets.
        // SAFETY: the table of 1,024 buckets noted into above.
        let held = |b: usize| unsafe { (*i.table.add(b)).held() };
        assert_eq!(
            (0..9).map(held).collect::<Vec<_>>(),
            [0, 0, 1, 1, 1, 2, 1, 1, 0]
        );
        give_back(i);
    }

    #[test]
    fn a_shape_keeps_its_addresses_as_word_offsets_from_the_start() {
        // Offsets, not addresses: a set's eight shapes in 4.4 KiB, not 16.
        assert_eq!(std::mem::size_of::<Shape>(), 560);
        let sp = 0x7ffc_0000_1000u64;
        assert_eq!(offset(sp, sp), Some(0));
        assert_eq!(offset(sp, sp + 8 * 65_535), Some(65_535));
        // Below the start, between words, or past what a u16 holds: no shape is kept.
        assert_eq!(offset(sp, sp - 8), None);
        assert_eq!(offset(sp, sp + 12), None);
        assert_eq!(offset(sp, sp + 8 * 65_536), None);
    }
}
