//! Leaks at a normal Python exit. When a Python program's own code has finished, the
//! interpreter tears down its modules, and with them every tensor a module-level name still
//! holds: a list that keeps one activation per step, the commonest leak, is freed by
//! `Py_FinalizeEx` and would not be live at the end of the trace. Such memory is leaked all
//! the same (the program held it until it ended); what tells it apart from memory the program
//! freed itself is the stack of its free, which runs inside the interpreter's teardown.
//!
//! ```text
//!  ... step 8 frees ... │ main() returns: its locals freed │ Py_FinalizeEx: module globals freed
//!  ◄── program ───────────────────────────────────────────►│◄── teardown (freed at exit) ───────►
//!                                                teardown.start_ns
//! ```
//!
//! The replay keeps the allocations released since the last one made, with their frees'
//! stacks (`Replay::keeping_exit`; teardown allocates nothing, so it is all in there; memory:
//! the frees of one step at most, or what was live); `Teardown::find` then symbolizes those
//! stacks and finds the first free made by the interpreter's teardown. Everything released from then on was
//! freed at exit. Without Python (or without frees in teardown) there is none.

use crate::fasthash::FastMap;
use crate::replay::{LiveAlloc, Released};
use crate::symbolize::Symbolizer;

/// The interpreter's teardown, as the trace shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teardown {
    /// When its first free was made (ns since the trace started): the program's own code
    /// had finished.
    pub start_ns: u64,
    /// The teardown function its first free's stack names (`Py_FinalizeEx`).
    pub function: String,
    /// What it freed (every allocation released from `start_ns` on), in trace order.
    pub freed: Vec<LiveAlloc>,
}

impl Teardown {
    /// The teardown in `tail` (`Replayed::exit_tail`), if any free in it was made by the
    /// interpreter's teardown.
    pub fn find(tail: &[Released], sym: &mut Symbolizer) -> Option<Teardown> {
        let mut seen: FastMap<u64, Option<String>> = FastMap::default();
        let first = tail.iter().enumerate().find_map(|(i, r)| {
            seen.entry(r.free_stack)
                .or_insert_with(|| teardown_function(sym, r.free_stack))
                .clone()
                .map(|f| (i, f))
        })?;
        let (i, function) = first;
        Some(Teardown {
            start_ns: tail[i].time_ns,
            function,
            freed: tail[i..].iter().map(|r| r.alloc).collect(),
        })
    }
}

/// The teardown function in stack `id`'s native frames, if one is there: the outermost
/// (`Py_FinalizeEx`, which users know, rather than the helper it called).
fn teardown_function(sym: &mut Symbolizer, id: u64) -> Option<String> {
    if id == 0 {
        return None;
    }
    sym.functions(id)
        .into_iter()
        .rev()
        .find(|f| crate::glue::tears_down(f))
}

#[cfg(test)]
mod tests {
    use crate::replay::Replay;
    use gpumemprof_format::{MemKind, Record};

    /// A tensor event of thread 1 (`replay::tests::tensor`).
    fn tensor(time_ns: u64, address: u64, delta: i64, stack: u64) -> Record {
        crate::replay::tests::tensor(time_ns, 1, address, delta, stack)
    }

    /// The replay keeps what was released after the last allocation, each with its free's
    /// stack and time; an allocation starts it over.
    #[test]
    fn the_exit_tail_is_what_was_freed_since_the_last_allocation() {
        let mut r = Replay::keeping_exit();
        for rec in [
            tensor(1, 0x10, 512, 7),
            tensor(2, 0x10, -512, 3),
            tensor(3, 0x20, 512, 7),
            tensor(4, 0x30, 512, 7),
            tensor(5, 0x20, -512, 4),
            tensor(6, 0x30, -512, 5),
        ] {
            r.record(rec);
        }
        let tail = r.finish().exit_tail;
        let kept: Vec<(u64, u64, u64, MemKind)> = tail
            .iter()
            .map(|x| (x.alloc.address, x.free_stack, x.time_ns, x.alloc.kind))
            .collect();
        assert_eq!(
            kept,
            vec![(0x20, 4, 5, MemKind::Tensor), (0x30, 5, 6, MemKind::Tensor)]
        );
        assert!(Replay::new().finish().exit_tail.is_empty());
    }
}
