//! The Python frames that went with each native memo's stack id, per thread: a loop's
//! event whose native walk met its memo (the same native frames as last time) and whose
//! Python frames are the ones noted here has the same merged stack, and reuses its id
//! instead of merging and interning 40-odd words again.
//!
//! The caller keeps the pairing: whenever it notes an id for native memo `slot`, it notes
//! the Python frames of that event here too (none, for a native-only stack).

use std::cell::Cell;

use super::{Frames, MAX_PY_FRAMES};
use crate::capture::unwind::MEMO_SLOTS as SLOTS;

struct Noted {
    /// Words and ends noted (0 and 0: a stack with no Python frames).
    n: Cell<usize>,
    calls: Cell<usize>,
    words: [Cell<u64>; MAX_PY_FRAMES],
    ends: [Cell<u8>; MAX_PY_FRAMES],
}

thread_local! {
    static NOTED: [Noted; SLOTS] = const {
        [const {
            Noted {
                n: Cell::new(0),
                calls: Cell::new(0),
                words: [const { Cell::new(0) }; MAX_PY_FRAMES],
                ends: [const { Cell::new(0) }; MAX_PY_FRAMES],
            }
        }; SLOTS]
    };
}

/// Whether `f` are the Python frames noted for native memo `slot`.
#[inline]
pub fn same(slot: usize, f: &Frames) -> bool {
    let (words, ends) = (f.words(), f.ends());
    NOTED.with(|noted| {
        let Some(m) = noted.get(slot) else {
            return false;
        };
        m.n.get() == words.len()
            && m.calls.get() == ends.len()
            && words.iter().zip(&m.words).all(|(w, c)| *w == c.get())
            && ends.iter().zip(&m.ends).all(|(e, c)| *e == c.get())
    })
}

/// Notes `f` as the Python frames of the stack id just noted for native memo `slot`.
#[inline]
pub fn note(slot: usize, f: &Frames) {
    let (words, ends) = (f.words(), f.ends());
    NOTED.with(|noted| {
        let Some(m) = noted.get(slot) else {
            return;
        };
        m.n.set(words.len());
        m.calls.set(ends.len());
        for (w, c) in words.iter().zip(&m.words) {
            c.set(*w);
        }
        for (e, c) in ends.iter().zip(&m.ends) {
            c.set(*e);
        }
    });
}
