//! Where interned stacks keep their frames: large chunks, never freed, that each new
//! stack's frames are copied into under the intern table's lock (a stack id is never
//! reused, so its frames live as long as the process).
//!
//! Why not an allocation a stack: on 100,000 call paths in turn, `malloc` and the two
//! reference counts of an `Arc<[u64]>` took about 200 of the 7,000 instructions of a
//! first sight (BENCHMARKS.md, twenty-sixth); a copy into a chunk is a bounds check and
//! the copy.

use crate::sys::pages;

/// Words a chunk holds (256 KiB, mapped: only the pages filled take memory, and none is
/// zeroed by hand): thousands of stacks; at least the longest one (`MAX_STACK_DEPTH`
/// native frames merged with `MAX_PY_FRAMES` Python ones).
const CHUNK: usize = 32768;

/// The chunk being filled: the part of it not yet given out.
pub struct Arena {
    rest: &'static mut [u64],
}

impl Arena {
    pub const fn new() -> Arena {
        Arena { rest: &mut [] }
    }

    /// A copy of `frames` that lives as long as the process; `None` if a new chunk was
    /// needed and there is no memory for it (or `frames` is longer than a chunk).
    pub fn keep(&mut self, frames: &[u64]) -> Option<&'static [u64]> {
        if frames.len() > self.rest.len() {
            self.rest = new_chunk(frames.len())?;
        }
        let (piece, rest) = std::mem::take(&mut self.rest).split_at_mut(frames.len());
        piece.copy_from_slice(frames);
        self.rest = rest;
        Some(piece)
    }
}

/// A new chunk of `CHUNK` words, never unmapped (what is left of the one before is not
/// used); `None` if `at_least` is more, or there is no memory for it.
#[cold]
fn new_chunk(at_least: usize) -> Option<&'static mut [u64]> {
    if at_least > CHUNK {
        return None;
    }
    let p = pages::zeroed(CHUNK * 8)? as *mut u64;
    // SAFETY: a mapping of our own of `CHUNK` zeroed, aligned words, never unmapped, and
    // given out only once (here).
    Some(unsafe { std::slice::from_raw_parts_mut(p, CHUNK) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stack_is_a_copy_of_its_own_and_a_full_chunk_starts_another() {
        let mut a = Arena::new();
        // 32768 words: 2047 stacks of 16, then one of 17 does not fit the 16 words left.
        let kept: Vec<&[u64]> = (0..2047u64)
            .map(|i| a.keep(&[i; 16]).expect("memory"))
            .collect();
        assert_eq!(a.rest.len(), 16);
        let long = a.keep(&[7; 17]).expect("memory");
        assert_eq!(long, &[7; 17]);
        assert_eq!(a.rest.len(), CHUNK - 17);
        for (i, k) in kept.iter().enumerate() {
            assert_eq!(*k, &[i as u64; 16]);
        }
        // Not in the chunk it would have overflowed.
        let first = kept[0].as_ptr() as usize;
        let at = long.as_ptr() as usize;
        assert!(at < first || at >= first + CHUNK * 8);
        assert_eq!(a.keep(&[]), Some(&[][..]));
    }

    #[test]
    fn a_stack_longer_than_a_chunk_is_not_kept() {
        let mut a = Arena::new();
        assert_eq!(a.keep(&vec![1; CHUNK + 1]), None);
        assert_eq!(a.keep(&vec![2; CHUNK]).map(<[u64]>::len), Some(CHUNK));
    }
}
