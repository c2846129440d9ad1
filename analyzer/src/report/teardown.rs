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
//! `ExitTail` watches the replay and keeps the allocations released since the last one
//! made (teardown allocates nothing, so it is all in there; memory: the frees of one step at
//! most, or what was live); `Teardown::find` then symbolizes their frees' stacks and finds
//! the first free made by the interpreter's teardown. Everything released from then on was
//! freed at exit. Without Python (or without frees in teardown) there is none.

use gpumemprof_format::Record;

use crate::fasthash::FastMap;
use crate::observe::Observer;
use crate::replay::{LiveAlloc, LiveChange};
use crate::symbolize::Symbolizer;

/// CPython's functions that tear the interpreter down (3.9 to 3.13).
const TEARDOWN_FUNCTIONS: &[&str] = &[
    "Py_FinalizeEx",
    "Py_Finalize",
    "_Py_Finalize",
    "Py_EndInterpreter",
    "finalize_modules",
    "_PyImport_Cleanup",
];

/// An allocation released, with the stack of the free that released it.
#[derive(Debug, Clone, Copy)]
struct Released {
    alloc: LiveAlloc,
    free_stack: u64,
    time_ns: u64,
}

/// Watches a replay: the allocations released since the last allocation was made.
#[derive(Debug, Default)]
pub struct ExitTail {
    /// The stack of the free record being applied.
    free_stack: u64,
    tail: Vec<Released>,
}

impl Observer for ExitTail {
    fn record(&mut self, record: &Record) {
        self.free_stack = match record {
            Record::Free(f) => f.stack,
            Record::Tensor(t) if t.delta < 0 => t.stack,
            _ => 0,
        };
    }

    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]) {
        for c in changes {
            match c {
                LiveChange::Added(_) => self.tail.clear(),
                LiveChange::Released(a) => self.tail.push(Released {
                    alloc: *a,
                    free_stack: self.free_stack,
                    time_ns,
                }),
            }
        }
    }
}

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
    /// The teardown in `tail`, if any free in it was made by the interpreter's teardown.
    pub fn find(tail: &ExitTail, sym: &mut Symbolizer) -> Option<Teardown> {
        let mut seen: FastMap<u64, Option<String>> = FastMap::default();
        let first = tail.tail.iter().enumerate().find_map(|(i, r)| {
            seen.entry(r.free_stack)
                .or_insert_with(|| teardown_function(sym, r.free_stack))
                .clone()
                .map(|f| (i, f))
        })?;
        let (i, function) = first;
        Some(Teardown {
            start_ns: tail.tail[i].time_ns,
            function,
            freed: tail.tail[i..].iter().map(|r| r.alloc).collect(),
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
        .find(|f| TEARDOWN_FUNCTIONS.contains(&f.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumemprof_format::{MemKind, Tensor};

    fn alloc(address: u64) -> LiveAlloc {
        LiveAlloc {
            address,
            time_ns: 1,
            size: 512,
            stack: 7,
            device: 0,
            kind: MemKind::Tensor,
        }
    }

    fn free_record(stack: u64) -> Record {
        Record::Tensor(Tensor {
            time_ns: 5,
            tid: 1,
            framework: 1,
            device: 0,
            address: 0,
            delta: -512,
            allocated: 0,
            reserved: 0,
            stack,
        })
    }

    /// The tail keeps what was released after the last allocation, each with its free's
    /// stack; an allocation starts it over.
    #[test]
    fn the_tail_is_what_was_freed_since_the_last_allocation() {
        let mut t = ExitTail::default();
        t.record(&free_record(3));
        t.changes(5, &[LiveChange::Released(alloc(0x10))]);
        t.record(&Record::Stack {
            id: 9,
            frames: vec![],
        });
        t.changes(6, &[LiveChange::Added(alloc(0x20))]);
        assert!(t.tail.is_empty());
        t.record(&free_record(4));
        t.changes(7, &[LiveChange::Released(alloc(0x20))]);
        t.record(&free_record(5));
        t.changes(8, &[LiveChange::Released(alloc(0x30))]);
        let kept: Vec<(u64, u64, u64)> = t
            .tail
            .iter()
            .map(|r| (r.alloc.address, r.free_stack, r.time_ns))
            .collect();
        assert_eq!(kept, vec![(0x20, 4, 7), (0x30, 5, 8)]);
    }
}
