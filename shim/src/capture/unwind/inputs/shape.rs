//! A shape: the addresses a walk from one start read, as offsets from its stack pointer,
//! and the word that tells its walks from those of another shape of the same start (its
//! fork). See `inputs.rs` for what a shape's key stands for.

use super::super::first::Start;
use super::super::memo;
use crate::capture::words_hash::{hash_words, mix};

/// Words a shape holds; a walk that read more is not kept.
pub(super) const WORDS: usize = memo::WORDS;

/// The addresses an earlier walk read, from its start: each as its distance from the
/// start's stack pointer in words (every address a walk reads lies at or above it), so
/// that a shape is 568 bytes with its fork, not 2 KiB: a lookup reads a quarter of the
/// cache lines for them (two for 55 words, not seven), and a thread's shapes take 142 KiB,
/// not 512 (BENCHMARKS.md, sixteenth).
pub(super) struct Shape {
    /// The rules' epoch; 0: empty.
    pub(super) epoch: u64,
    pub(super) used: u64,
    pub(super) skip: (u64, u64),
    pub(super) ip: u64,
    pub(super) sp: u64,
    /// The stack top of the thread that walked (every address lies below it).
    pub(super) top: u64,
    pub(super) room: u32,
    pub(super) bp_needed: bool,
    /// Whether `fork_val` is known (a walk of this shape has been met since its fork was
    /// set); never without a fork.
    pub(super) fork_known: bool,
    /// Whether this shape has had a fork: it gets one once at most (see `forks_here`).
    pub(super) forked: bool,
    /// The word where this shape's walks part from those of another shape of its start:
    /// its index in `offs` plus one (0: none). See `forks_here`.
    pub(super) fork: u16,
    pub(super) n_words: u32,
    /// A hash of the start, the room, `bp_needed` and the offsets: part of every key of
    /// this shape.
    pub(super) tag: u64,
    /// The word this shape's walks read at `fork`, once known.
    pub(super) fork_val: u64,
    /// The word at `sp + 8 * offs[i]` was read i-th.
    pub(super) offs: [u16; WORDS],
}

/// The key of a walk of the shape tagged `tag` that read `items`, the value of each
/// `value(item)`, with `with` merged and the rbp `bp` (0 where no rule reads it).
#[inline(always)]
pub(super) fn key<T>(tag: u64, with: u64, bp: u64, items: &[T], value: impl Fn(&T) -> u64) -> u64 {
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
    pub(super) fn starts(&self, s: Start, room: usize, top: u64) -> bool {
        self.epoch == s.epoch
            && self.sp == s.sp
            && self.ip == s.ip
            && self.skip == s.skip
            && self.top == top
            && self.room as usize == room
    }

    /// Whether the word this shape's walks read at its fork is there now (or none is
    /// known): only the shapes of a start that pass are asked. Two shapes of one start
    /// read the same addresses up to where they part, and which address a walk reads next
    /// depends on the words it read before, most often the last (a return address that
    /// names the next frame's rule): that word, as the shape's walks read it, tells them
    /// from the other's at one load, where asking a shape costs hashing its words and a
    /// probe into the table (on `varied_sites`, an allocation's and a free's walks share
    /// their start and part at a return address: each capture asked both). A walk of the
    /// shape that reads another word there is not found, but walked, and its `store`
    /// takes the fork away for good (`Shape::seen`): a shape costs one walk again at most.
    ///
    /// # Safety
    /// As `key_now`'s.
    #[inline(always)]
    pub(super) unsafe fn forks_here(&self, sp: u64) -> bool {
        if !self.fork_known {
            return true;
        }
        // SAFETY: an address of this shape's (as in `key_now`).
        unsafe { (sp as *const u64).add(self.fork_offset()).read() == self.fork_val }
    }

    /// The offset in words of the fork's word (a shape with a fork).
    #[inline(always)]
    fn fork_offset(&self) -> usize {
        self.offs[self.fork as usize - 1] as usize
    }

    /// Notes that a walk of this shape was met, whose fork word is `word(index, offset)`:
    /// the fork's word learnt if it was not known, the fork taken away for good if the
    /// walk read another.
    #[inline(always)]
    pub(super) fn seen(&mut self, word: impl FnOnce(usize, usize) -> u64) {
        if self.fork == 0 {
            return;
        }
        let w = word(self.fork as usize - 1, self.fork_offset());
        if !self.fork_known {
            (self.fork_val, self.fork_known) = (w, true);
        } else if w != self.fork_val {
            (self.fork, self.fork_known) = (0, false);
        }
    }

    /// The key of the walk from `s` (which `starts` as this shape), with `with` merged, as
    /// the stack reads now.
    ///
    /// # Safety
    /// The shape is this thread's, and `starts` for `s` on this thread's stack.
    #[inline(always)]
    pub(super) unsafe fn key_now(&self, s: Start, with: u64) -> u64 {
        let offs = &self.offs[..self.n_words as usize];
        let bp = if self.bp_needed { s.bp } else { 0 };
        let sp = s.sp as *const u64;
        // SAFETY: each address was read by this thread's walk from this stack pointer
        // under this stack top: it lies in this thread's stack (the module's note).
        key(self.tag, with, bp, offs, |&o| unsafe {
            sp.add(o as usize).read()
        })
    }

    /// Makes this the shape of a walk from `s` (output room `room`, stack top `top`) that
    /// read `vals` at `offs`, with fork `fork` (see `fork_among`; 0: none).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill(
        &mut self,
        s: Start,
        room: usize,
        top: u64,
        bp_needed: bool,
        offs: &[u16],
        vals: &[u64],
        fork: u16,
    ) {
        (self.fork, self.fork_known, self.forked) = (fork, fork != 0, fork != 0);
        self.fork_val = if fork != 0 {
            vals[fork as usize - 1]
        } else {
            0
        };
        self.offs[..offs.len()].copy_from_slice(offs);
        (self.skip, self.ip, self.sp, self.top) = (s.skip, s.ip, s.sp, top);
        (self.room, self.bp_needed) = (room as u32, bp_needed);
        self.n_words = offs.len() as u32;
        self.epoch = s.epoch;
        let head = [s.epoch, s.skip.0, s.skip.1, s.ip, s.sp, top, room as u64];
        let start = head.iter().fold(0x9E37_79B9_7F4A_7C15, |h, &v| mix(h, v));
        self.tag = key(start, 0, u64::from(bp_needed), offs, |&o| u64::from(o));
    }
}

/// The fork of a new shape of start `s` with offsets `offs`, to be kept in way `new` of
/// `set` (a set's shapes): where it parts from the other shape of its start that shares
/// the most of its addresses (the one whose walks are most like its own). Each other shape
/// of the start that never had a fork gets one where it parts from the new one, its word to
/// be learnt from the next walk of it met (`Shape::seen`).
pub(super) fn fork_among(
    set: &mut [Shape],
    new: usize,
    s: Start,
    room: usize,
    top: u64,
    offs: &[u16],
) -> u16 {
    let mut fork = 0;
    for (j, o) in set.iter_mut().enumerate() {
        if j == new || !o.starts(s, room, top) {
            continue;
        }
        let shared = o.offs[..o.n_words as usize]
            .iter()
            .zip(offs)
            .take_while(|(a, b)| a == b)
            .count() as u16;
        if shared == 0 {
            continue;
        }
        fork = fork.max(shared);
        if !o.forked {
            (o.fork, o.fork_known, o.forked) = (shared, false, true);
        }
    }
    fork
}
