//! A 64-bit fingerprint of a thread's Python frames, noted beside the stack id of a native
//! memo or first-state cache entry (`unwind::set_memo_stack_id`): an event whose native
//! walk met that memo or entry (the same native frames as last time) and whose Python
//! frames have the noted fingerprint has the same merged stack, and reuses its id instead
//! of merging and interning 40-odd words again.
//!
//! The fingerprint stands for the frames as the stack table's hash stands for a stack
//! (`intern.rs`): two different sets of Python frames would have to collide in all 64
//! bits. No Python frames (a native-only stack) is 0, what a native-only id is noted with.

use super::Frames;
use crate::capture::intern;
use crate::capture::words_hash;

/// The fingerprint of `f`: 0 for no frames, else never 0.
#[inline]
pub fn of(f: &Frames) -> u64 {
    let (words, ends) = (f.words(), f.ends());
    if words.is_empty() && ends.is_empty() {
        return 0;
    }
    let mut h = intern::hash(words) ^ (ends.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for c in ends.chunks(8) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        h = words_hash::mix(h, u64::from_le_bytes(b));
    }
    words_hash::finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same frames, the same fingerprint; another word, line or split into evaluator
    /// calls, another; no frames, 0.
    #[test]
    fn frames_and_their_calls_make_the_fingerprint() {
        let line = |code: u64, line: u64| 1 << 63 | code << 24 | line;
        let step = Frames::of_calls(&[&[line(3, 40), line(2, 7)], &[line(1, 12)]]);
        let same = Frames::of_calls(&[&[line(3, 40), line(2, 7)], &[line(1, 12)]]);
        let other_line = Frames::of_calls(&[&[line(3, 41), line(2, 7)], &[line(1, 12)]]);
        let one_call = Frames::of_calls(&[&[line(3, 40), line(2, 7), line(1, 12)]]);
        assert_eq!(of(&Frames::new()), 0);
        assert_eq!(of(&step), of(&same));
        assert_ne!(of(&step), 0);
        assert_ne!(of(&step), of(&other_line));
        assert_ne!(of(&step), of(&one_call));
        assert_ne!(of(&one_call), 0);
    }
}
