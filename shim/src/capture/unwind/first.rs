//! The first-state cache: a thread's last walks by the stack pointer they started at, so
//! that each of a program's many call paths (a training step allocates from a hundred and
//! more, in turn) is met at its first state, where the two memos (`memo.rs`) hold only
//! the last two walks.
//!
//! ```text
//!  capture at sp ─► the 16 entries of set hash(sp): one with the same ip, sp, rbp (where a
//!                   rule reads it), epoch, shim range and output room, whose every stack
//!                   word read still holds its value?  ─► its frames, no rule looked up
//!                   else the walk (memos first), stored in the set's least recently used
//! ```
//!
//! Sets of several entries, because call paths of one depth share a stack pointer (the
//! ops of a model's layers, called from one loop): they differ in their words, and the
//! innermost words, compared first, differ at once. 16 ways: with 8, two stack pointers
//! that ASLR happened to put in one set made 14 call paths thrash it in some runs.
//!
//! A walk is a pure function of the registers at its start, the stack words it reads and
//! the rules of its epoch (see `memo.rs`): when they are all the same, so are its frames.
//! The words' addresses lie between the start's stack pointer and the top of the stack of
//! the thread that walked; an entry is only read by that thread (a cache taken over from
//! an exited thread is emptied first).
//!
//! A thread gets its cache (760 KiB of address space, calloc'ed: only the entries
//! used are touched) at its `AFTER`th capture, so short-lived threads never pay for one;
//! an exiting thread gives it back for the next (`give_back`, from the ring's thread-exit
//! destructor).

use std::mem::MaybeUninit;

use super::memo;

/// Entries per thread, in sets of `WAYS` chosen by the start's stack pointer.
const ENTRIES: usize = 256;
const WAYS: usize = 16;
const SETS: usize = ENTRIES / WAYS;
/// Frames an entry holds (the capture buffer's size, `config::MAX_STACK_DEPTH`).
const FRAMES: usize = crate::sys::config::MAX_STACK_DEPTH;
/// Words an entry holds; a walk that read more is not kept.
const WORDS: usize = 192;
/// Captures a thread makes before it gets a cache.
pub const AFTER: u32 = 256;

/// The header first, then what a lookup compares, then the frames (copied only where no
/// stack id is noted).
#[repr(C)]
struct Entry {
    /// 0: empty.
    epoch: u64,
    /// When it was last met or stored (the cache's clock).
    used: u64,
    skip: (u64, u64),
    ip: u64,
    sp: u64,
    bp: u64,
    bp_needed: bool,
    room: u32,
    n: u32,
    /// The stack id these frames were interned as, as a memo keeps it (`Memo::stack_id`);
    /// none until noted, and again when the entry is stored anew.
    stack: memo::Noted,
    n_words: u32,
    /// The walk read `vals[i]` at `sp + 8 * offs[i]`, i-th: ten bytes a word where an
    /// address and its word took sixteen, so that a lookup reads 37% fewer cache lines of
    /// them (on a real PyTorch step the entries' lines were about half the captures'
    /// misses in the first cache level; BENCHMARKS.md, eighteenth).
    offs: [u16; WORDS],
    vals: [u64; WORDS],
    frames: [u64; FRAMES],
}

pub struct Cache {
    entries: [Entry; ENTRIES],
    clock: u64,
    /// Lookups and hits in the current window of `WINDOW` lookups, and the captures it
    /// still sits out (`active`).
    tries: u32,
    hits: u32,
    off: u32,
    /// Poor windows in a row (each rest twice the last, up to `REST << LONGEST`).
    rests: u32,
}

/// Lookups per window; a window with fewer than one hit in `POOR` turns the cache off for
/// `REST` captures (more call paths of one depth in turn than a set holds: every lookup
/// missed and every walk was stored for nothing, a third slower than without the cache).
/// One in two: what it misses, the walks by their inputs (`inputs.rs`) find at the cost
/// of one hash, where a lookup here compares each entry of the set word by word, and on
/// 256 call paths from one start (`varied_sites 256`, one hit in 12) a cache left on at
/// one in 16 took twice as long in three runs of eight (BENCHMARKS.md, fourteenth).
/// Each poor window in a row doubles the rest, up to 16 times `REST` (262,144 captures): a
/// window costs each lookup a scan of its set and each miss a stored walk, and where the
/// cache keeps missing (many call paths of one start) a window at every `REST` is 6% of the
/// captures, at the longest rest 0.4% (on `varied_sites 256` no difference showed within
/// the runs' spread; BENCHMARKS.md, fourteenth).
const WINDOW: u32 = 1024;
const POOR: u32 = 2;
const REST: u32 = 16 * 1024;
const LONGEST: u32 = 4;

/// The entries of the set of stack pointer `sp`.
fn set(sp: u64) -> std::ops::Range<usize> {
    let s = ((sp >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SETS;
    s * WAYS..(s + 1) * WAYS
}

/// Where a walk starts, and what it is for.
#[derive(Clone, Copy)]
pub struct Start {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub epoch: u64,
    pub skip: (u64, u64),
}

impl Cache {
    /// The frames of the walk from `s`, if an entry of its set is that walk's and every
    /// word it read still holds its value: copied to `out` (not if the entry has a stack
    /// id noted for them with `with` merged: that id is given, and the caller takes it);
    /// their count, the entry and the id.
    ///
    /// Not inlined: how the comparison in `Entry::meets` is compiled then depends on no
    /// caller (inlined into a walk set up otherwise, its zip of quads was no longer seen
    /// through, and it took twice its instructions on a real step; BENCHMARKS.md,
    /// twenty-third).
    ///
    /// # Safety
    /// The cache is this thread's, and `s.sp..top` its readable stack.
    #[inline(never)]
    pub unsafe fn lookup(
        &mut self,
        s: Start,
        out: &mut [MaybeUninit<u64>],
        with: Option<u64>,
    ) -> Option<(usize, usize, Option<u32>)> {
        self.clock += 1;
        let now = self.clock;
        self.tries += 1;
        if self.tries == WINDOW {
            if self.hits * POOR < self.tries {
                self.off = REST << self.rests.min(LONGEST);
                self.rests = self.rests.saturating_add(1);
            } else {
                self.rests = 0;
            }
            self.tries = 0;
            self.hits = 0;
        }
        let ways = set(s.sp);
        let first = ways.start;
        for (i, e) in self.entries[ways].iter_mut().enumerate() {
            // SAFETY: as this function's.
            if let Some((n, id)) = unsafe { e.meets(s, out, with) } {
                e.used = now;
                self.hits += 1;
                return Some((n, first + i, id));
            }
        }
        None
    }

    /// Whether the cache is used for this capture: not while it sits out a rest after a
    /// window of lookups that almost all missed.
    #[inline(always)]
    pub fn active(&mut self) -> bool {
        if self.off == 0 {
            return true;
        }
        self.off -= 1;
        false
    }

    /// Notes the id entry `i`'s frames (`frames` of them), with `with`, were interned as.
    pub fn set_stack_id(&mut self, i: usize, frames: usize, id: u32, with: u64) {
        if let Some(e) = self.entries.get_mut(i) {
            e.stack = memo::Noted::new(frames, id, with);
        }
    }

    /// Keeps the walk from `s` that `rec` recorded and that output `out[..n]`.
    pub fn store(&mut self, s: Start, rec: &memo::Record, out: &[MaybeUninit<u64>], n: usize) {
        let Some((words, bp_needed)) = rec.whole() else {
            return;
        };
        if words.len() > WORDS || n > FRAMES || out.len() > u32::MAX as usize {
            return;
        }
        self.clock += 1;
        let now = self.clock;
        let ways = &mut self.entries[set(s.sp)];
        let e = (ways.iter_mut())
            .min_by_key(|e| if e.epoch == 0 { 0 } else { e.used })
            .expect("a set has entries");
        for ((o, v), &(a, w)) in e.offs.iter_mut().zip(&mut e.vals).zip(words) {
            // A word 512 KiB or more above the start: the walk is not kept (the entry
            // chosen for it is left empty).
            let Some(off) = memo::offset(s.sp, a) else {
                e.epoch = 0;
                return;
            };
            (*o, *v) = (off, w);
        }
        e.used = now;
        e.stack = memo::Noted::NONE;
        for (d, f) in e.frames.iter_mut().zip(&out[..n]) {
            // SAFETY: the walk initialised the first `n` frames.
            *d = unsafe { f.assume_init() };
        }
        e.n_words = words.len() as u32;
        e.n = n as u32;
        e.room = out.len() as u32;
        e.ip = s.ip;
        e.sp = s.sp;
        e.bp = s.bp;
        e.bp_needed = bp_needed;
        e.skip = s.skip;
        e.epoch = s.epoch;
    }

    fn clear(&mut self) {
        for e in self.entries.iter_mut() {
            e.epoch = 0;
        }
        (self.tries, self.hits, self.off, self.rests) = (0, 0, 0, 0);
    }
}

impl Entry {
    /// `Cache::lookup` for this entry.
    ///
    /// # Safety
    /// As `Cache::lookup`'s.
    #[inline(always)]
    unsafe fn meets(
        &self,
        s: Start,
        out: &mut [MaybeUninit<u64>],
        with: Option<u64>,
    ) -> Option<(usize, Option<u32>)> {
        if self.epoch != s.epoch
            || self.sp != s.sp
            || self.ip != s.ip
            || self.skip != s.skip
            || self.room as usize != out.len()
            || (self.bp_needed && self.bp != s.bp)
        {
            return None;
        }
        // Four words at a time without a branch, as `Memo::resume` compares them; the
        // innermost first, where another call path differs. The quads are zipped by value,
        // as NH's are (`words_hash.rs`: a zip through `&mut ChunksExact` is the form the
        // compiler once stopped seeing through).
        let k = self.n_words as usize;
        let quads = k / 4 * 4;
        let (offs, vals) = (&self.offs[..k], &self.vals[..k]);
        let sp = s.sp as *const u64;
        // SAFETY: the words were read by this thread's walk from this stack pointer: they
        // lie in its stack, above it.
        let differs = |o: u16, v: u64| unsafe { sp.add(o as usize).read() } ^ v;
        for (o, v) in offs[..quads]
            .chunks_exact(4)
            .zip(vals[..quads].chunks_exact(4))
        {
            let d = differs(o[0], v[0])
                | differs(o[1], v[1])
                | differs(o[2], v[2])
                | differs(o[3], v[3]);
            if d != 0 {
                return None;
            }
        }
        if (offs[quads..].iter().zip(&vals[quads..])).any(|(&o, &v)| differs(o, v) != 0) {
            return None;
        }
        let n = self.n as usize;
        if let Some(id) = with.and_then(|w| self.stack.id(n, w)) {
            return Some((n, Some(id)));
        }
        for (o, f) in out[..n].iter_mut().zip(&self.frames[..n]) {
            *o = MaybeUninit::new(*f);
        }
        Some((n, None))
    }
}

/// Caches given back by exited threads, for threads to come.
static FREE: super::pool::Pool<Cache> = super::pool::Pool::new();

/// A cache for the calling thread: an exited thread's, emptied, else a new one (null if
/// there is no memory for it). All-zero bytes are a valid `Cache`: every entry empty
/// (epoch 0).
pub fn take() -> *mut Cache {
    FREE.take(Cache::clear)
}

/// Gives an exiting thread's cache back, for a thread to come (or frees it).
pub fn give_back(cache: *mut Cache) {
    if cache == GONE {
        return;
    }
    // SAFETY: a cache from `take`, used by nobody after its thread gives it back.
    unsafe { FREE.give_back(cache, |_| ()) };
}

/// A thread's cache once the thread has given it back at exit: captures made during the
/// rest of its teardown do without (a cache taken then would never be given back).
pub const GONE: *mut Cache = std::ptr::dangling_mut();

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk kept as offsets from its start and its words: met while every word it read
    /// holds its value (in the whole groups of four and in the rest), missed when one
    /// changed; a walk that read a word 512 KiB or more above its start is not kept.
    #[test]
    fn an_entry_is_met_while_its_words_hold_and_a_walk_reading_too_far_up_is_not_kept() {
        let c = take();
        // SAFETY: a cache of this test's own.
        let c = unsafe { &mut *c };
        c.clear();
        let mut stack = Box::new([0u64; 16]);
        let sp = stack.as_ptr() as u64;
        let s = Start {
            ip: 0x40_1000,
            sp,
            bp: 0,
            epoch: 1,
            skip: (0, 0),
        };
        let record = |read: &[(u64, u64)]| memo::Record::of_words(sp, read);
        // Six words: a group of four and a rest of two.
        let read: Vec<(u64, u64)> = [0u64, 1, 3, 4, 9, 15]
            .iter()
            .map(|&o| (sp + 8 * o, 0x1000 + o))
            .collect();
        for &(a, v) in &read {
            stack[((a - sp) / 8) as usize] = v;
        }
        let frames = [MaybeUninit::new(0x40_2000u64), MaybeUninit::new(0x40_3000)];
        let mut out = [MaybeUninit::new(0u64); 2];
        c.store(s, &record(&read), &frames, 2);
        // SAFETY: every word the entry compares lies in `stack`.
        let mut lookup = |stack: &[u64; 16]| {
            std::hint::black_box(stack);
            unsafe { c.lookup(s, &mut out, None) }.map(|(n, _, _)| n)
        };
        assert_eq!(lookup(&stack), Some(2));
        for o in [15, 1] {
            stack[o] ^= 1;
            assert_eq!(lookup(&stack), None, "word {o} changed");
            stack[o] ^= 1;
        }
        assert_eq!(lookup(&stack), Some(2));
        let kept = |c: &Cache| c.entries[set(sp)].iter().filter(|e| e.epoch != 0).count();
        assert_eq!(kept(c), 1);
        let far = [(sp, 0x1000), (sp + 8 * 65_536, 7)];
        c.store(s, &record(&far), &frames, 2);
        assert_eq!(kept(c), 1);
        c.clear();
        give_back(c);
    }

    /// Windows of lookups that all miss (an empty cache), then the captures each rest
    /// lasts: the rests double while the windows stay poor, up to 16 times the first.
    #[test]
    fn each_poor_window_in_a_row_rests_twice_as_long_up_to_sixteen_times() {
        let c = take();
        // SAFETY: a cache of this test's own.
        let c = unsafe { &mut *c };
        let s = Start {
            ip: 0x1000,
            sp: 0x7000_0000,
            bp: 0,
            epoch: 1,
            skip: (0, 0),
        };
        let mut out = [MaybeUninit::new(0u64); 4];
        let mut rests = Vec::new();
        for _ in 0..7 {
            // A window: `WINDOW` lookups, the last of which finds it poor.
            for _ in 0..WINDOW {
                assert!(c.active());
                // SAFETY: an empty cache reads no stack word.
                assert_eq!(unsafe { c.lookup(s, &mut out, None) }, None);
            }
            let mut rest = 0;
            while !c.active() {
                rest += 1;
            }
            rests.push(rest / REST);
        }
        assert_eq!(rests, [1, 2, 4, 8, 16, 16, 16]);
        give_back(c);
    }
}
