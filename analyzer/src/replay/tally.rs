//! The replay's bookkeeping per address and per stack: the slot of live allocations at
//! an address, live bytes per stack (dense ids in a vector, the rest in a map), and each
//! (device, kind) row's counters with its peak snapshot.

use super::model::{Counters, LiveAlloc, Site};
use crate::fasthash::FastMap;
use gpumemprof_format::MemKind;
use std::collections::hash_map::Entry;

/// Live allocations at one address: almost always one. Several only around address
/// reuse whose events arrived out of order from different threads.
#[derive(Debug)]
pub(super) enum Slot {
    One(Held),
    Many(Vec<LiveAlloc>),
}

/// A live allocation as its address's slot keeps it: `LiveAlloc` less the address, which
/// is the key. A slot is 32 bytes (the variant tag fits in `kind`'s spare values), a map
/// entry 40: the analyzer's memory is mostly these (see README, "Limits").
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub(super) time_ns: u64,
    pub(super) size: u64,
    pub(super) stack: u64,
    pub(super) device: i32,
    pub(super) kind: MemKind,
}

impl Held {
    pub(super) fn of(a: &LiveAlloc) -> Held {
        Held {
            time_ns: a.time_ns,
            size: a.size,
            stack: a.stack,
            device: a.device,
            kind: a.kind,
        }
    }

    pub(super) fn at(self, address: u64) -> LiveAlloc {
        LiveAlloc {
            address,
            time_ns: self.time_ns,
            size: self.size,
            stack: self.stack,
            device: self.device,
            kind: self.kind,
        }
    }
}

/// Stack ids below this are counted in a vector indexed by id: the shim numbers stacks
/// from 1 up, so the usual ids are small and dense, and indexing is cheaper than hashing
/// (BENCHMARKS.md, "fourth session"). Larger ids go to a map. The bound keeps a hostile
/// trace's vector at 1 MiB per row.
pub(super) const DENSE_STACK_IDS: u64 = 1 << 16;

/// Live bytes and allocations per stack (a `Site` less its stack). A stack is live when
/// its count is not zero; the live ones among the dense ids are also listed, so that a
/// peak snapshot visits only them, never every id up to the largest.
#[derive(Debug, Default)]
pub(super) struct StackTally {
    pub(super) dense: Vec<DenseTally>,
    /// The dense ids whose count is not zero, in no particular order.
    pub(super) live: Vec<u32>,
    pub(super) sparse: FastMap<u64, (u64, u64)>,
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct DenseTally {
    pub(super) bytes: u64,
    pub(super) count: u64,
    /// Where the id stands in `live` while its count is not zero.
    pub(super) at: u32,
}

impl StackTally {
    #[inline]
    pub(super) fn add(&mut self, stack: u64, size: u64) {
        if stack >= DENSE_STACK_IDS {
            let (bytes, count) = self.sparse.entry(stack).or_default();
            *bytes = bytes.saturating_add(size);
            *count += 1;
            return;
        }
        let i = stack as usize;
        if i >= self.dense.len() {
            let len = (i + 1).next_power_of_two().max(256);
            let len = len.min(DENSE_STACK_IDS as usize);
            self.dense.resize(len, DenseTally::default());
        }
        let t = &mut self.dense[i];
        if t.count == 0 {
            t.at = self.live.len() as u32;
            self.live.push(stack as u32);
        }
        t.bytes = t.bytes.saturating_add(size);
        t.count += 1;
    }

    #[inline]
    pub(super) fn remove(&mut self, stack: u64, size: u64) {
        if stack >= DENSE_STACK_IDS {
            if let Entry::Occupied(mut e) = self.sparse.entry(stack) {
                let (bytes, count) = e.get_mut();
                *bytes = bytes.saturating_sub(size);
                *count = count.saturating_sub(1);
                if *count == 0 {
                    e.remove();
                }
            }
            return;
        }
        let Some(t) = self.dense.get_mut(stack as usize) else {
            return;
        };
        if t.count == 0 {
            return;
        }
        t.bytes = t.bytes.saturating_sub(size);
        t.count -= 1;
        if t.count == 0 {
            let at = t.at as usize;
            self.live.swap_remove(at);
            if let Some(&moved) = self.live.get(at) {
                self.dense[moved as usize].at = at as u32;
            }
        }
    }

    /// The live stacks, in no particular order.
    pub(super) fn sites(&self) -> impl Iterator<Item = Site> + '_ {
        let dense = self.live.iter().map(|&stack| {
            let t = self.dense[stack as usize];
            (u64::from(stack), t.bytes, t.count)
        });
        let sparse = self
            .sparse
            .iter()
            .map(|(&s, &(bytes, count))| (s, bytes, count));
        dense.chain(sparse).map(|(stack, bytes, count)| Site {
            stack,
            bytes,
            count,
        })
    }
}

#[derive(Debug, Default)]
pub(super) struct RowState {
    pub(super) counters: Counters,
    pub(super) live_by_stack: StackTally,
    /// An allocation made a new high-water mark and no free has followed yet.
    pub(super) peak_pending: bool,
    pub(super) peak_sites: Vec<Site>,
}

impl RowState {
    pub(super) fn snapshot_peak(&mut self) {
        self.peak_sites.clear();
        self.peak_sites.extend(self.live_by_stack.sites());
        self.peak_pending = false;
    }
}
