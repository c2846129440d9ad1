//! Per-thread memos of the last stacks walked, so that a loop's allocations compare
//! their stack with the last one instead of unwinding it again.
//!
//! ```text
//!  a walk's states:  s0 (registers at the capture)  s1  s2 ... sn    each (sp, rbp, ra)
//!                    plus every stack word the walk read after each state
//!  a new walk reaches a state with the sp, ra (and rbp, where a later rule reads it)
//!  of a remembered state sk, and every word read after sk still holds its value
//!      ⇒ the rest of the walk is s(k+1) ... sn: their return addresses are copied
//! ```
//!
//! The walk is a pure function of the register state, the stack words it reads and the
//! rules (fixed within an epoch). If the state at a frame and every word read above it
//! are unchanged, walking on reproduces the remembered frames, so they are copied: a
//! comparison of independent loads in place of a chain of dependent ones (rule lookup,
//! CFA, return address, next rule). Usually the very first state matches (the same
//! hook called from the same place), and no rule is looked up at all.
//!
//! Only what the walk depends on is compared: an rbp value that no later rule reads
//! (code without frame pointers keeps loop counters in rbp, saved by the callee and
//! restored by the unwinder only to be overwritten a frame later) is neither compared
//! at its state nor kept as a word; otherwise a loop's own counter would make every
//! memo stale.

use std::cell::Cell;
use std::mem::MaybeUninit;

/// States remembered: the default 64 program frames, the shim's frames and the first
/// state. A longer walk is not remembered (it is walked in full every time).
pub const STATES: usize = 80;
/// Words read per step at most: the return address, rbp (from its save slot or through
/// the stack-realignment pointer) and the realignment pointer itself.
pub const WORDS: usize = 3 * STATES;
/// Memos per thread: an allocation and its free come from different hooks (different
/// shim frames), and each keeps its own.
pub const SLOTS: usize = 2;
/// A memo that missed this many comparisons in a row at a walk's first state is *cold*:
/// compared there only one capture in `RETRY` (a program of many call paths, whose
/// captures the first-state cache or the walks' inputs answer without a walk, so the memo
/// is never stored again and only costs its comparison: 14 ns a capture on 256 paths,
/// BENCHMARKS.md, fifteenth). A hit makes it warm again, as does a walk stored in it.
pub const COLD: u8 = 8;
pub const RETRY: u64 = 64;

/// The offset in words of `addr` from `sp`, if it is a whole number of words at or above
/// `sp` that a `u16` holds: how a first-state entry and a shape keep the addresses a walk
/// from `sp` read (every one lies at or above it).
#[inline(always)]
pub fn offset(sp: u64, addr: u64) -> Option<u16> {
    // Below `sp`, the difference wraps past the largest offset.
    let d = addr.wrapping_sub(sp);
    fits(d).then_some((d >> 3) as u16)
}

/// Whether distance `d` from `sp` is one `offset` accepts: a whole number of words below
/// 2^16 words. Of several distances ORed together, whether each is (the bits it tests
/// are set in the OR if and only if they are in one of them).
#[inline(always)]
pub fn fits(d: u64) -> bool {
    d & 7 == 0 && d >> 19 == 0
}

/// One remembered walk (thread-local, const-initialised, no Drop).
pub struct Memo {
    /// The rules' epoch it was walked in; 0: empty.
    epoch: Cell<u64>,
    /// The shim's address range it skipped.
    skip: Cell<(u64, u64)>,
    /// When it was last stored or used (for replacement).
    used: Cell<u64>,
    /// Comparisons at a walk's first state missed in a row (up to `COLD`).
    misses: Cell<u8>,
    n: Cell<usize>,
    /// The first state whose return address was recorded (the rest follow it).
    first_emitted: Cell<usize>,
    /// It stopped because the output was full (states beyond it were not walked).
    full: Cell<bool>,
    sp: [Cell<u64>; STATES],
    bp: [Cell<u64>; STATES],
    ra: [Cell<u64>; STATES],
    /// Whether a later rule reads the rbp of state i (else it is not compared).
    bp_needed: [Cell<bool>; STATES],
    /// Whether the walk had left the shim at state i.
    in_program: [Cell<bool>; STATES],
    /// Where the words read after state i start in `words`.
    first_word: [Cell<u16>; STATES],
    n_words: Cell<usize>,
    /// (address, value) of every stack word the walk read, in order.
    words: [Cell<(u64, u64)>; WORDS],
    /// The interned id of this memo's frames as a walk met at its first state outputs
    /// them; none until the caller notes one (`set_stack_id`), and again whenever the
    /// memo is stored anew or forgotten.
    stack: Cell<Noted>,
}

/// A stack id noted for a memo's (or a first-state cache entry's) frames: the id of its
/// first `frames` frames together with what the caller merged into them, which it names by
/// `with` (the Python frames' fingerprint; 0: nothing). `id` 0: nothing noted.
#[derive(Clone, Copy)]
pub struct Noted {
    frames: u32,
    id: u32,
    with: u64,
}

impl Noted {
    pub const NONE: Noted = Noted {
        frames: 0,
        id: 0,
        with: 0,
    };

    pub fn new(frames: usize, id: u32, with: u64) -> Noted {
        match u32::try_from(frames) {
            Ok(frames) => Noted { frames, id, with },
            Err(_) => Noted::NONE,
        }
    }

    /// The id, if one was noted for `frames` frames with `with`.
    #[inline(always)]
    pub fn id(self, frames: usize, with: u64) -> Option<u32> {
        (self.id != 0 && self.frames as usize == frames && self.with == with).then_some(self.id)
    }
}

/// What comparing the walk with a memo at one state found.
pub enum Resume {
    /// The stack from here on is the remembered one: the walk is complete (frames).
    Done(usize),
    /// Not the remembered state (the walk goes on, and may meet a later one).
    Differs,
    /// The remembered state, but a word read after it changed: the memo can only be
    /// met again from this state on (the words after it are all unchanged).
    Stale(usize),
}

/// The state a walk is in, as compared with the memos.
#[derive(Clone, Copy)]
pub struct State {
    pub sp: u64,
    pub bp: u64,
    /// The return address (for the first state, the instruction pointer + 1).
    pub ra: u64,
    pub in_program: bool,
}

impl Memo {
    pub const fn new() -> Memo {
        Memo {
            epoch: Cell::new(0),
            skip: Cell::new((0, 0)),
            used: Cell::new(0),
            misses: Cell::new(0),
            n: Cell::new(0),
            first_emitted: Cell::new(0),
            full: Cell::new(false),
            sp: [const { Cell::new(0) }; STATES],
            bp: [const { Cell::new(0) }; STATES],
            ra: [const { Cell::new(0) }; STATES],
            bp_needed: [const { Cell::new(false) }; STATES],
            in_program: [const { Cell::new(false) }; STATES],
            first_word: [const { Cell::new(0) }; STATES],
            n_words: Cell::new(0),
            words: [const { Cell::new((0, 0)) }; WORDS],
            stack: Cell::new(Noted::NONE),
        }
    }

    /// The stack id set for a walk that met this memo at its first state and output
    /// `frames` frames, with `with` merged in; `None` if none was set since the memo was
    /// stored, or for other frames or another `with`.
    #[inline(always)]
    pub fn stack_id(&self, frames: usize, with: u64) -> Option<u32> {
        self.stack.get().id(frames, with)
    }

    /// Notes the id the frames of such a walk, with `with`, were interned as.
    #[inline(always)]
    pub fn set_stack_id(&self, frames: usize, id: u32, with: u64) {
        self.stack.set(Noted::new(frames, id, with));
    }

    /// States remembered for this epoch and shim range (0 if none).
    #[inline(always)]
    pub fn len(&self, epoch: u64, skip: (u64, u64)) -> usize {
        if self.epoch.get() == epoch && self.skip.get() == skip {
            self.n.get()
        } else {
            0
        }
    }

    #[inline(always)]
    pub fn sp(&self, k: usize) -> u64 {
        self.sp[k].get()
    }

    #[inline(always)]
    pub fn used(&self) -> u64 {
        self.used.get()
    }

    #[inline(always)]
    pub fn full(&self) -> bool {
        self.full.get()
    }

    /// If the walk is at remembered state `k` and every word read after it is
    /// unchanged, copies the frames recorded after `k` to `out[m..]`; not if the walk met
    /// the memo at its first state with an id noted for those frames with `id_with`
    /// merged (`stack_id`): the caller takes that id instead.
    ///
    /// A word may lie below this walk's stack pointer (a walk from deeper down read it):
    /// it is read all the same. It lies in this thread's stack, which an earlier read
    /// found mapped, and a stack's mapping never shrinks (the main thread's grows down,
    /// a thread's is mapped whole for its life). If it holds its old value, the rest of
    /// the walk is the old one's, as libgcc would find it (it follows the same rules
    /// without bounds); until 2026-11-26 such a memo was not used, at the cost of the
    /// lowest address after each state kept and compared (BENCHMARKS.md, tenth).
    ///
    /// # Safety
    /// The words were read by a walk of this thread, on its own stack, and `k` is
    /// below `len`.
    #[inline(always)]
    pub unsafe fn resume(
        &self,
        k: usize,
        s: State,
        out: &mut [MaybeUninit<u64>],
        m: usize,
        now: u64,
        id_with: Option<u64>,
    ) -> Resume {
        if self.ra[k].get() != s.ra
            || self.in_program[k].get() != s.in_program
            || (self.bp_needed[k].get() && self.bp[k].get() != s.bp)
        {
            return Resume::Differs;
        }
        let n = self.n.get();
        let from = (k + 1).max(self.first_emitted.get());
        let rest = n - from.min(n);
        let room = out.len() - m;
        if self.full.get() && rest < room {
            // The last walk stopped early: the frames this one has room for are unknown.
            return Resume::Differs;
        }
        // Four words at a time without a branch (independent loads the CPU overlaps),
        // then a stop at the first group with a change: the innermost words are the
        // likeliest to differ (another call site), and the rest need not be read.
        let first = self.first_word[k].get() as usize;
        let words = &self.words[first..self.n_words.get()];
        let differs = |w: &Cell<(u64, u64)>| {
            let (a, v) = w.get();
            (a as *const u64).read() ^ v
        };
        let mut chunks = words.chunks_exact(4);
        let mut done = 0;
        for c in &mut chunks {
            if differs(&c[0]) | differs(&c[1]) | differs(&c[2]) | differs(&c[3]) != 0 {
                return Resume::Stale(self.after_change(k, first + done + 3));
            }
            done += 4;
        }
        for w in chunks.remainder() {
            if differs(w) != 0 {
                return Resume::Stale(self.after_change(k, first + done));
            }
            done += 1;
        }
        let take = rest.min(room);
        let noted = id_with.is_some_and(|w| k == 0 && m == 0 && self.stack_id(take, w).is_some());
        if !noted {
            for (o, r) in out[m..m + take].iter_mut().zip(&self.ra[from..from + take]) {
                *o = MaybeUninit::new(r.get());
            }
        }
        // Only a walk met at the memo's first state counts as a use: one met further in
        // (a different call path joining it at a common caller) must not keep the memo
        // from being replaced by that path's own walk (see `Memos::remember`).
        if k == 0 {
            self.used.set(now);
        }
        Resume::Done(m + take)
    }

    /// The first state after `k` whose words all come after word `changed` (`n` if
    /// none): the stack changed below it (another call site, a different frame), and
    /// it may still be met; its own words are compared then.
    #[cold]
    #[inline(never)]
    fn after_change(&self, k: usize, changed: usize) -> usize {
        (k + 1..self.n.get())
            .find(|&s| self.first_word[s].get() as usize > changed)
            .unwrap_or(self.n.get())
    }

    /// Comparisons at a walk's first state missed in a row (tests).
    #[cfg(test)]
    pub fn misses(&self) -> u8 {
        self.misses.get()
    }

    /// Forgets the walk (benchmarks: the cost of a walk that cannot use it).
    #[cfg(test)]
    pub fn forget(&self) {
        self.epoch.set(0);
        self.stack.set(Noted::NONE);
    }

    /// Remembers a complete walk.
    pub fn store(&self, rec: &Record, epoch: u64, skip: (u64, u64), full: bool, now: u64) {
        self.epoch.set(0);
        self.stack.set(Noted::NONE);
        if rec.overflow {
            return;
        }
        let n = rec.n;
        // Array by array, each a block copy: field by field, a state at a time, storing
        // and joining walks took 15% of the samples of 100,000 call paths in turn, and
        // 8% so (BENCHMARKS.md, twelfth).
        // SAFETY: the record initialised its first `n` states and `words` words.
        unsafe {
            set_all(&self.words, inited(&rec.words_, rec.words));
            set_all(&self.sp, inited(&rec.sp, n));
            set_all(&self.bp, inited(&rec.bp, n));
            set_all(&self.ra, inited(&rec.ra, n));
            set_all(&self.bp_needed, inited(&rec.bp_needed, n));
            set_all(&self.first_word, inited(&rec.first_word, n));
            set_all(&self.in_program, inited(&rec.in_program, n));
        }
        // The first state in the program after the first one (the frames start there).
        let first_emitted = (1..n).find(|&i| self.in_program[i].get()).unwrap_or(n);
        self.n.set(n);
        self.n_words.set(rec.words);
        self.first_emitted.set(first_emitted);
        self.full.set(full);
        self.skip.set(skip);
        self.used.set(now);
        self.misses.set(0);
        self.epoch.set(epoch);
    }

    /// Whether a walk's first state skips this memo now (the walk's clock `now`): it is
    /// cold, and this is not one of its retries.
    #[inline(always)]
    pub fn skipped_at_first(&self, now: u64) -> bool {
        self.misses.get() >= COLD && !now.is_multiple_of(RETRY)
    }

    /// Counts a comparison at a walk's first state: met, or missed.
    #[inline(always)]
    pub fn compared_at_first(&self, met: bool) {
        let m = self.misses.get();
        // A loop's memo is met at every capture: its count stays 0, written never.
        let next = if met { 0 } else { (m + 1).min(COLD) };
        if next != m {
            self.misses.set(next);
        }
    }
}

/// The walk in progress, recorded on the stack (uninitialised until written).
pub struct Record {
    n: usize,
    words: usize,
    /// More states or words than a memo holds: nothing is remembered.
    overflow: bool,
    // One array per field: written a field at a time from registers, never copied as a
    // struct (a wide load of narrow stores stalls store forwarding).
    sp: [MaybeUninit<u64>; STATES],
    bp: [MaybeUninit<u64>; STATES],
    ra: [MaybeUninit<u64>; STATES],
    in_program: [MaybeUninit<bool>; STATES],
    bp_needed: [MaybeUninit<bool>; STATES],
    first_word: [MaybeUninit<u16>; STATES],
    words_: [MaybeUninit<(u64, u64)>; WORDS],
}

impl Record {
    #[inline(always)]
    pub fn new() -> Record {
        Record {
            n: 0,
            words: 0,
            overflow: false,
            sp: [MaybeUninit::uninit(); STATES],
            bp: [MaybeUninit::uninit(); STATES],
            ra: [MaybeUninit::uninit(); STATES],
            in_program: [MaybeUninit::uninit(); STATES],
            bp_needed: [MaybeUninit::uninit(); STATES],
            first_word: [MaybeUninit::uninit(); STATES],
            words_: [MaybeUninit::uninit(); WORDS],
        }
    }

    /// A state of the walk (the first, or the one after a step).
    #[inline(always)]
    pub fn state(&mut self, s: State) {
        let i = self.n;
        if i >= STATES {
            self.overflow = true;
            return;
        }
        self.sp[i] = MaybeUninit::new(s.sp);
        self.bp[i] = MaybeUninit::new(s.bp);
        self.ra[i] = MaybeUninit::new(s.ra);
        self.in_program[i] = MaybeUninit::new(s.in_program);
        self.bp_needed[i] = MaybeUninit::new(false);
        self.first_word[i] = MaybeUninit::new(self.words as u16);
        self.n = i + 1;
    }

    /// States recorded so far.
    #[inline(always)]
    pub fn states(&self) -> usize {
        self.n
    }

    /// Words recorded so far (the index the next one gets).
    #[inline(always)]
    pub fn words(&self) -> usize {
        self.words
    }

    /// A rule read rbp: the states from `from` on hold the value it read.
    #[inline(always)]
    pub fn bp_read(&mut self, from: usize) {
        let end = self.n.min(STATES);
        // Most often the one state since the rbp was last read (a frame that saves rbp
        // under one whose rule reads it): stored at once, where the loop became a call of
        // `memset` (6.75 a first sight on `varied_sites`, BENCHMARKS.md, twenty-sixth).
        if from + 1 == end {
            self.bp_needed[from] = MaybeUninit::new(true);
            return;
        }
        for i in from..end {
            self.bp_needed[i] = MaybeUninit::new(true);
        }
    }

    /// Word `i`, an rbp value no rule read, is not to be compared: it becomes a copy of
    /// the word before it (the same step's return address, compared anyway).
    #[inline(always)]
    pub fn forget_word(&mut self, i: usize) {
        if i > 0 && i < self.words {
            self.words_[i] = self.words_[i - 1];
        }
    }

    /// Completes a walk that met `src`'s state `k` as its state `s` (not yet recorded)
    /// with `src`'s states and words from there on, so that the next walk from the same
    /// place meets the result at its first state. `bp_word`/`bp_since` are the walk's
    /// pending rbp word and the first state holding the current rbp.
    #[cold]
    pub fn join(
        &mut self,
        s: State,
        src: &Memo,
        k: usize,
        bp_word: Option<usize>,
        bp_since: usize,
    ) {
        let needed = src.bp_needed[k].get();
        if needed {
            self.bp_read(bp_since);
        } else if let Some(i) = bp_word {
            self.forget_word(i);
        }
        let base = self.words;
        let src_first = src.first_word[k].get() as usize;
        self.state(s);
        if let Some(i) = self.n.checked_sub(1) {
            self.bp_needed[i] = MaybeUninit::new(needed);
        }
        // Array by array, as `Memo::store` does.
        let words = &src.words[src_first.min(src.n_words.get())..src.n_words.get()];
        let states = k + 1..src.n.get().max(k + 1);
        let (j, len) = (self.n, states.len());
        if base + words.len() > WORDS || j + len > STATES {
            self.overflow = true;
            return;
        }
        take_all(&mut self.words_[base..base + words.len()], words);
        take_all(&mut self.sp[j..j + len], &src.sp[states.clone()]);
        take_all(&mut self.bp[j..j + len], &src.bp[states.clone()]);
        take_all(&mut self.ra[j..j + len], &src.ra[states.clone()]);
        take_all(
            &mut self.in_program[j..j + len],
            &src.in_program[states.clone()],
        );
        take_all(
            &mut self.bp_needed[j..j + len],
            &src.bp_needed[states.clone()],
        );
        for (d, f) in self.first_word[j..j + len]
            .iter_mut()
            .zip(&src.first_word[states])
        {
            *d = MaybeUninit::new((base + (f.get() as usize - src_first)) as u16);
        }
        self.words = base + words.len();
        self.n = j + len;
    }

    /// Every word the walk read and whether its first state's rbp matters, once it is
    /// whole (`None` if it overflowed or recorded nothing).
    pub fn whole(&self) -> Option<(&[(u64, u64)], bool)> {
        if self.overflow || self.n == 0 {
            return None;
        }
        // SAFETY: the record initialised its first `n` states and `words` words.
        unsafe {
            let words =
                std::slice::from_raw_parts(self.words_.as_ptr() as *const (u64, u64), self.words);
            Some((words, self.bp_needed[0].assume_init()))
        }
    }

    /// A stack word the walk read.
    #[inline(always)]
    pub fn word(&mut self, addr: u64, val: u64) {
        let i = self.words;
        if i >= WORDS {
            self.overflow = true;
            return;
        }
        self.words_[i] = MaybeUninit::new((addr, val));
        self.words = i + 1;
    }
}

/// Sets `dst`'s first cells to `src`'s values, in order.
#[inline(always)]
fn set_all<T: Copy>(dst: &[Cell<T>], src: impl Iterator<Item = T>) {
    for (d, v) in dst.iter().zip(src) {
        d.set(v);
    }
}

/// The first `n` values of `r`.
///
/// # Safety
/// They are initialised.
#[inline(always)]
unsafe fn inited<T: Copy>(r: &[MaybeUninit<T>], n: usize) -> impl Iterator<Item = T> + '_ {
    // SAFETY: the caller's.
    r[..n].iter().map(|v| unsafe { v.assume_init() })
}

/// Copies the values of `src` into `dst` (of the same length).
#[inline(always)]
fn take_all<T: Copy>(dst: &mut [MaybeUninit<T>], src: &[Cell<T>]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = MaybeUninit::new(s.get());
    }
}

#[cfg(test)]
impl Record {
    /// A walk from `sp` that stopped at its first state, having read the words `read`
    /// ((address, value) pairs in order): what a shape or a first-state entry is made from.
    pub fn of_words(sp: u64, read: &[(u64, u64)]) -> Record {
        let mut rec = Record::new();
        rec.state(State {
            sp,
            bp: 0,
            ra: 0x40_1001,
            in_program: true,
        });
        for &(a, v) in read {
            rec.word(a, v);
        }
        rec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_missed_eight_times_at_the_first_state_is_compared_there_one_capture_in_64() {
        let m = Memo::new();
        for _ in 0..COLD - 1 {
            m.compared_at_first(false);
        }
        // Seven misses: still compared at every capture.
        assert!((1..=RETRY).all(|now| !m.skipped_at_first(now)));
        m.compared_at_first(false);
        // Eight: skipped but at captures 64, 128, ... (the walk's clock).
        let compared: Vec<u64> = (1..=3 * RETRY)
            .filter(|&now| !m.skipped_at_first(now))
            .collect();
        assert_eq!(compared, [64, 128, 192]);
        // More misses keep it cold, without overflowing the count.
        for _ in 0..300 {
            m.compared_at_first(false);
        }
        assert!(m.skipped_at_first(65));
        // A retry that meets it makes it warm again.
        m.compared_at_first(true);
        assert!(!m.skipped_at_first(65));
        // So does a walk stored in it.
        for _ in 0..COLD {
            m.compared_at_first(false);
        }
        assert!(m.skipped_at_first(65));
        let mut rec = Record::new();
        rec.state(State {
            sp: 0x1000,
            bp: 0,
            ra: 0x5000,
            in_program: true,
        });
        m.store(&rec, 1, (0, 0), false, 7);
        assert!(!m.skipped_at_first(65));
    }

    #[test]
    fn a_read_of_rbp_marks_every_state_since_it_was_saved_one_or_many() {
        let mut rec = Record::new();
        let state = |rec: &mut Record, i: u64| {
            rec.state(State {
                sp: 0x1000 + 16 * i,
                bp: 0,
                ra: 0x5000 + i,
                in_program: true,
            })
        };
        for i in 0..5 {
            state(&mut rec, i);
        }
        // The one state since rbp was saved (the usual case), then three, then none.
        rec.bp_read(4);
        let marked = |rec: &Record| {
            // SAFETY: each of the five states was recorded, so its flag initialised.
            (0..5)
                .map(|i| unsafe { rec.bp_needed[i].assume_init() })
                .collect::<Vec<_>>()
        };
        assert_eq!(marked(&rec), [false, false, false, false, true]);
        rec.bp_read(1);
        assert_eq!(marked(&rec), [false, true, true, true, true]);
        rec.bp_read(5);
        assert_eq!(marked(&rec), [false, true, true, true, true]);
    }
}
