//! The flight recorder (`GPUMEMPROF_MODE=oom`): nothing is written until an allocation
//! fails with out-of-memory; then one self-contained trace holds the allocations live at
//! that moment and the last N events, and recording goes on normally.
//!
//! ```text
//!  events ─► ring (last N) ──evicted──► base: live allocations (and framework tensors)
//!                                           before the ring's first event
//!  on OOM:  file := header, modules, every stack, the base (in time order),
//!                   then the ring's events in order
//! ```
//!
//! Replaying the dump gives exactly the live state at the failure: the base is the state
//! before the ring, and the ring is the events since. Memory: the ring (N events), one
//! record per live allocation, every distinct stack and module seen.

use super::pending::{Pending, PendingTensor};
use crate::capture::intern::{self, FxMap};
use gpumemprof_format::{Alloc, Module, FREE_RANGE};
use std::collections::VecDeque;

pub struct Recorder {
    ring: VecDeque<Pending>,
    capacity: usize,
    /// Live allocations before the ring's first event, per address space
    /// (`MemKind::space`).
    base: [FxMap<u64, Alloc>; 3],
    /// Framework tensors live before the ring's first event, by address.
    tensors: FxMap<u64, PendingTensor>,
    pub stacks: Vec<(u64, intern::Frames)>,
    /// Python code objects the stacks name (written before them).
    pub codes: Vec<gpumemprof_format::PyCode>,
    pub modules: Vec<Module>,
    /// The trace's header, written when the file is created (its `path` set then).
    pub header: serde_json::Value,
    /// The output path wanted (placeholders expanded).
    pub wanted: String,
}

impl Recorder {
    pub fn new(capacity: usize, header: serde_json::Value, wanted: String) -> Recorder {
        Recorder {
            ring: VecDeque::with_capacity(capacity.min(1 << 16)),
            capacity,
            base: Default::default(),
            tensors: FxMap::default(),
            stacks: Vec::new(),
            codes: Vec::new(),
            modules: Vec::new(),
            header,
            wanted,
        }
    }

    pub fn push(&mut self, p: Pending) {
        if self.ring.len() >= self.capacity {
            if let Some(old) = self.ring.pop_front() {
                self.apply(old);
            }
        }
        self.ring.push_back(p);
    }

    fn apply(&mut self, p: Pending) {
        apply(&mut self.base, &mut self.tensors, &p);
    }

    /// What the dump replays to, counted: allocations of memory and framework tensors live
    /// after the ring's last event (the base alone is only what was live before the ring).
    pub fn live_at_end(&self) -> (usize, usize) {
        let (mut base, mut tensors) = (self.base.clone(), self.tensors.clone());
        for p in &self.ring {
            apply(&mut base, &mut tensors, p);
        }
        let memory = (base.iter().flat_map(|m| m.values()))
            .filter(|a| a.kind.is_memory())
            .count();
        (memory, tensors.len())
    }

    /// What to write, in order: the base (allocations and tensors) sorted by time, then
    /// the ring.
    pub fn take_dump(&mut self) -> (Vec<Pending>, Vec<Pending>) {
        let mut base: Vec<Pending> = self
            .base
            .iter_mut()
            .flat_map(|m| m.drain().map(|(_, a)| Pending::Alloc(a)))
            .chain(self.tensors.drain().map(|(_, t)| Pending::Tensor(t)))
            .collect();
        base.sort_by_key(Pending::time);
        (base, self.ring.drain(..).collect())
    }
}

/// One event applied to the live allocations and tensors.
fn apply(base: &mut [FxMap<u64, Alloc>; 3], tensors: &mut FxMap<u64, PendingTensor>, p: &Pending) {
    match p {
        Pending::Alloc(a) if a.address != 0 => {
            base[a.kind.space()].insert(a.address, *a);
        }
        Pending::Free(f) => {
            let live = &mut base[f.kind.space()];
            if f.flags & FREE_RANGE != 0 {
                let end = f.address.saturating_add(f.size);
                let mut at = f.address;
                while at < end {
                    let Some(a) = live.remove(&at) else { break };
                    at = at.saturating_add(a.size.max(1));
                }
            } else {
                live.remove(&f.address);
            }
        }
        Pending::Tensor(t) if t.delta > 0 => {
            tensors.insert(t.address, *t);
        }
        Pending::Tensor(t) => {
            tensors.remove(&t.address);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::pending::made::{alloc, free};

    fn address(p: &Pending) -> u64 {
        match p {
            Pending::Alloc(a) => a.address,
            Pending::Tensor(t) => t.address,
            _ => panic!("the base holds allocations and tensors only"),
        }
    }

    fn tensor(t: u64, address: u64, delta: i64) -> Pending {
        Pending::Tensor(PendingTensor {
            time_ns: t,
            tid: 1,
            framework: gpumemprof_format::FRAMEWORK_PYTORCH,
            device: 0,
            address,
            delta,
            allocated: 0,
            reserved: 0,
            stack: 0,
        })
    }

    /// A training loop's tensors live at an out-of-memory failure long after they were
    /// made (the ring has moved on): they are in the dump, in time order with the segments.
    #[test]
    fn tensors_pushed_out_of_the_ring_stay_live_in_the_base() {
        let mut r = Recorder::new(2, serde_json::json!({}), String::new());
        r.push(alloc(1, 0x1000, 20 << 20)); // the segment
        r.push(tensor(2, 0x1000, 3 << 20)); // kept
        r.push(tensor(3, 0x1300000, 1 << 20)); // dropped below
        r.push(tensor(4, 0x1300000, -(1 << 20)));
        r.push(tensor(5, 0x1400000, 1 << 20)); // still in the ring
        r.push(alloc(6, 0x9000, 10));
        let (base, ring) = r.take_dump();
        assert!(matches!(base[0], Pending::Alloc(_)) && matches!(base[1], Pending::Tensor(_)));
        let base: Vec<(u64, u64)> = base.iter().map(|p| (p.time(), address(p))).collect();
        assert_eq!(base, vec![(1, 0x1000), (2, 0x1000)]);
        assert_eq!(ring.len(), 2);
    }

    #[test]
    fn evicted_events_become_the_base_and_the_ring_keeps_the_last_n() {
        let mut r = Recorder::new(4, serde_json::json!({}), String::new());
        for i in 0..10u64 {
            r.push(alloc(i, 0x1000 * (i + 1), 100));
        }
        // Free 0x1000 and 0x2000 (in the base by now), and a range over 0x3000..0x5000.
        r.push(free(10, 0x1000, 0, 0));
        r.push(free(11, 0x2000, 0, 0));
        r.push(free(12, 0x3000, FREE_RANGE, 0x2000));
        let (base, ring) = r.take_dump();
        // Ring: the last 4 events (the allocation at t=9 and the three frees); base: the
        // allocations pushed out of the ring (t=0..8); the frees are still in the ring.
        assert_eq!(ring.len(), 4);
        let base_addrs: Vec<u64> = base.iter().map(address).collect();
        assert_eq!(
            base_addrs,
            vec![0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000, 0x9000]
        );
        // Replaying base + ring gives the live state: 10 allocations minus 4 freed.
        let mut live: std::collections::BTreeSet<u64> = base_addrs.into_iter().collect();
        for p in ring {
            match p {
                Pending::Alloc(a) => {
                    live.insert(a.address);
                }
                Pending::Free(f) if f.flags & FREE_RANGE != 0 => {
                    live.retain(|&a| a < f.address || a >= f.address + f.size);
                }
                Pending::Free(f) => {
                    live.remove(&f.address);
                }
                _ => {}
            }
        }
        assert_eq!(live.len(), 6);
    }

    #[test]
    fn frees_pushed_out_of_the_ring_release_base_allocations() {
        let mut r = Recorder::new(2, serde_json::json!({}), String::new());
        r.push(alloc(1, 0x1000, 10));
        r.push(alloc(2, 0x2000, 10));
        r.push(free(3, 0x1000, 0, 0));
        r.push(alloc(4, 0x3000, 10));
        r.push(alloc(5, 0x4000, 10)); // evicts the free of 0x1000
        let (base, ring) = r.take_dump();
        let addrs: Vec<u64> = base.iter().map(address).collect();
        assert_eq!(addrs, vec![0x2000]);
        assert_eq!(ring.len(), 2);
    }
}
