//! A model of PyTorch's CUDA caching allocator on one device and one stream
//! (`DeviceCachingAllocator` in c10/cuda/CUDACachingAllocator.cpp; every function below
//! names the one it models, and ../shared/PYTORCH_ALLOCATOR.md gives the policy with its
//! sources): rounding, the small and large pools, best fit, the `max_split_size` rules,
//! splitting and merging, new segments, the release-and-retry order before an
//! out-of-memory error, and garbage collection. Expandable segments are in `expandable`.
//!
//! Blocks live in one arena and link to their neighbours in the segment; the free ones
//! sit in a pool ordered as PyTorch's `std::set` orders them, by (size, address).

use std::collections::BTreeSet;

use crate::torch_conf::{AllocConf, MIN_BLOCK_SIZE, SMALL_SIZE};

/// A block's index in the arena.
pub type Id = u32;

/// `BlockPool`s: small (requests of at most 1 MiB) and large.
pub const SMALL: usize = 0;
pub const LARGE: usize = 1;

#[derive(Debug, Clone)]
pub(super) struct Block {
    pub addr: u64,
    pub size: u64,
    pub allocated: bool,
    /// Backed by memory: always, except the unmapped ranges of an expandable segment.
    pub mapped: bool,
    pub prev: Option<Id>,
    pub next: Option<Id>,
    pub pool: usize,
    /// Index of its expandable segment (`None`: a segment of its own from cudaMalloc).
    pub es: Option<usize>,
    /// The pool's `get_free_blocks_call_count` when it was last put in the pool.
    pub gc_base: u64,
}

/// One expandable segment (`expandable`): where its address range starts, and its page.
#[derive(Debug, Clone, Copy)]
pub struct Segment {
    pub base: u64,
    pub page: u64,
}

/// The device as the model sees it: how much memory a new segment may take.
#[derive(Debug, Clone, Copy)]
pub struct Device {
    /// Total memory (`None`: unknown, never full).
    pub capacity: Option<u64>,
    /// Memory taken by others than this allocator (the CUDA context, libraries, other
    /// processes): what the trace showed at its out-of-memory error, else 0.
    pub other: u64,
}

/// What a replay under one configuration counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// Allocated bytes when reserved first reached its peak.
    pub allocated_at_peak_reserved: u64,
    /// cudaMalloc calls and expandable-segment maps that succeeded.
    pub device_allocs: u64,
    /// cudaFree calls and unmaps: each synchronizes the device.
    pub device_frees: u64,
    /// Allocations that freed the cache and tried again (`num_alloc_retries`).
    pub retries: u64,
}

/// The allocator.
#[derive(Clone)]
pub struct Allocator {
    pub conf: AllocConf,
    pub device: Device,
    pub(super) blocks: Vec<Block>,
    spare: Vec<Id>,
    /// Free mapped blocks by (size, address).
    pub(super) pools: [BTreeSet<(u64, u64, Id)>; 2],
    /// Unmapped ranges of expandable segments by address.
    pub(super) unmapped: [BTreeSet<(u64, Id)>; 2],
    gc_calls: [u64; 2],
    /// `total_allocated_memory`, PyTorch's `reserved_bytes`.
    pub reserved: u64,
    /// PyTorch's `allocated_bytes`.
    pub allocated: u64,
    pub counters: Counters,
    /// Where the next segment goes when no address is proposed.
    next_address: u64,
    /// Live segments by base address, and their sizes (for placing a proposed address).
    pub(super) segments: std::collections::BTreeMap<u64, u64>,
    /// Expandable segments, by the index their blocks carry (`None` once released).
    pub(super) expandable: Vec<Option<Segment>>,
}

/// Where the model puts segments no address was proposed for: far above any real one.
const FIRST_MODEL_ADDRESS: u64 = 1 << 52;
/// Segment alignment (cudaMalloc's is at least this).
const SEGMENT_ALIGN: u64 = 2 << 20;
/// No device has this much (1 PiB): a larger request is out of memory at once, and the
/// model's addresses stay far from overflowing.
const MAX_REQUEST: u64 = 1 << 50;

impl Allocator {
    pub fn new(conf: AllocConf, device: Device) -> Allocator {
        Allocator {
            conf,
            device,
            blocks: Vec::new(),
            spare: Vec::new(),
            pools: [BTreeSet::new(), BTreeSet::new()],
            unmapped: [BTreeSet::new(), BTreeSet::new()],
            gc_calls: [0; 2],
            reserved: 0,
            allocated: 0,
            counters: Counters::default(),
            next_address: FIRST_MODEL_ADDRESS,
            segments: Default::default(),
            expandable: Vec::new(),
        }
    }

    pub(super) fn block(&self, id: Id) -> &Block {
        &self.blocks[id as usize]
    }

    pub(super) fn block_mut(&mut self, id: Id) -> &mut Block {
        &mut self.blocks[id as usize]
    }

    pub(super) fn new_block(&mut self, b: Block) -> Id {
        match self.spare.pop() {
            Some(id) => {
                self.blocks[id as usize] = b;
                id
            }
            None => {
                self.blocks.push(b);
                (self.blocks.len() - 1) as Id
            }
        }
    }

    pub(super) fn drop_block(&mut self, id: Id) {
        self.spare.push(id);
    }

    /// `insert_into_blocks`: a free mapped block goes back into its pool.
    pub(super) fn insert_free(&mut self, id: Id) {
        let pool = self.block(id).pool;
        let base = self.gc_calls[pool];
        let b = self.block_mut(id);
        b.gc_base = base;
        let key = (b.size, b.addr, id);
        self.pools[pool].insert(key);
    }

    pub(super) fn remove_free(&mut self, id: Id) {
        let b = self.block(id);
        let key = (b.size, b.addr, id);
        let pool = b.pool;
        self.pools[pool].remove(&key);
    }

    /// Whether `bytes` more of device memory can be had now (cudaMalloc or cuMemCreate
    /// would succeed).
    pub(super) fn device_fits(&self, bytes: u64) -> bool {
        match self.device.capacity {
            None => true,
            Some(c) => {
                (self.device.other)
                    .saturating_add(self.reserved)
                    .saturating_add(bytes)
                    <= c
            }
        }
    }

    /// `allowed_memory_maximum`: set by a memory fraction below 1 of a known device.
    fn memory_cap(&self) -> Option<u64> {
        let f = self.conf.per_process_memory_fraction;
        (f < 1.0)
            .then_some(self.device.capacity)
            .flatten()
            .map(|c| (c as f64 * f) as u64)
    }

    pub(super) fn note_reserved(&mut self, added: u64) {
        self.reserved += added;
        self.counters.device_allocs += 1;
    }

    /// After each request, placed or not (a refused one may still have mapped pages).
    fn note_peaks(&mut self) {
        let c = &mut self.counters;
        c.peak_allocated = c.peak_allocated.max(self.allocated);
        if self.reserved > c.peak_reserved {
            c.peak_reserved = self.reserved;
            c.allocated_at_peak_reserved = self.allocated;
        }
    }

    /// An address for a new segment of `size`: `proposed` (where the job's own allocator
    /// put it) when no live segment overlaps it, else the model's own.
    pub(super) fn place(&mut self, size: u64, proposed: Option<u64>) -> u64 {
        if let Some(a) = proposed.filter(|&a| a != 0 && a < FIRST_MODEL_ADDRESS) {
            let below = self.segments.range(..=a).next_back();
            let clear_below = below.is_none_or(|(&s, &n)| s.saturating_add(n) <= a);
            let clear_above =
                (self.segments.range(a..).next()).is_none_or(|(&s, _)| a.saturating_add(size) <= s);
            if clear_below && clear_above {
                self.segments.insert(a, size);
                return a;
            }
        }
        let a = self.next_address;
        let span = size
            .div_ceil(SEGMENT_ALIGN)
            .max(1)
            .saturating_mul(SEGMENT_ALIGN);
        self.next_address = self.next_address.saturating_add(span);
        self.segments.insert(a, size);
        a
    }

    /// `DeviceCachingAllocator::malloc` for a block of `size` bytes: the block, or `None`
    /// for PyTorch's out-of-memory error. `proposed` is where the job's allocator put the
    /// block, used for a new segment's address.
    pub fn malloc(&mut self, size: u64, proposed: Option<u64>) -> Option<Id> {
        let size = self.conf.round_size(size);
        if size > MAX_REQUEST {
            return None;
        }
        let pool = if size <= SMALL_SIZE { SMALL } else { LARGE };
        let alloc_size = self.conf.allocation_size(size);
        let mut found = self.get_free_block(size, pool);
        if found.is_none() {
            if self.memory_cap().is_some() && self.conf.garbage_collection_threshold > 0.0 {
                self.garbage_collect_cached_blocks();
            }
            found = self
                .alloc_block(size, alloc_size, pool, proposed)
                .or_else(|| {
                    self.release_available_cached_blocks(size, pool)
                        .then(|| self.alloc_block(size, alloc_size, pool, proposed))
                        .flatten()
                })
                .or_else(|| {
                    self.release_cached_blocks();
                    self.counters.retries += 1;
                    self.alloc_block(size, alloc_size, pool, proposed)
                });
        }
        if let Some(id) = found {
            self.alloc_found_block(id, size);
        }
        self.note_peaks();
        found
    }

    /// `get_free_block`: the smallest free block of at least `size`, lowest address first,
    /// unless the `max_split_size` rules refuse it.
    fn get_free_block(&mut self, size: u64, pool: usize) -> Option<Id> {
        if self.memory_cap().is_some() && self.conf.garbage_collection_threshold > 0.0 {
            self.gc_calls[pool] += 1;
        }
        let mut candidates = self.pools[pool].range((size, 0, 0)..).map(|k| k.2);
        let mut it = candidates.next()?;
        if self.block(it).es.is_some() {
            if self.conf.expandable_segments {
                // Best fit by the size a block can grow to (its unmapped tail counted).
                for next in candidates {
                    if self.block(it).es.is_none()
                        || self.expandable_size(next) >= self.expandable_size(it)
                    {
                        break;
                    }
                    it = next;
                }
            } else {
                // Expandable segments turned off: their blocks are not used.
                it = std::iter::once(it)
                    .chain(candidates)
                    .find(|&c| self.block(c).es.is_none())?;
            }
        }
        let (block, max_split) = (self.block(it).size, self.conf.max_split_size);
        if size < max_split && block >= max_split {
            return None;
        }
        if size >= max_split && block >= size.saturating_add(self.conf.non_split_rounding()) {
            return None;
        }
        self.remove_free(it);
        Some(it)
    }

    fn expandable_size(&self, id: Id) -> u64 {
        let b = self.block(id);
        let tail = (b.next)
            .map(|n| self.block(n))
            .filter(|n| !n.mapped)
            .map_or(0, |n| n.size);
        b.size + tail
    }

    /// `alloc_block`: a new segment (or, with expandable segments, mapped pages) for a
    /// block of `size`; `None` when the device (or the memory fraction) has no room.
    fn alloc_block(
        &mut self,
        size: u64,
        alloc_size: u64,
        pool: usize,
        proposed: Option<u64>,
    ) -> Option<Id> {
        if self
            .memory_cap()
            .is_some_and(|cap| self.reserved + alloc_size > cap)
        {
            return None;
        }
        if self.conf.expandable_segments {
            return self.try_allocate_expandable_block(size, pool, proposed);
        }
        if !self.device_fits(alloc_size) {
            return None;
        }
        let addr = self.place(alloc_size, proposed);
        let id = self.new_block(Block {
            addr,
            size: alloc_size,
            allocated: false,
            mapped: true,
            prev: None,
            next: None,
            pool,
            es: None,
            gc_base: 0,
        });
        self.note_reserved(alloc_size);
        Some(id)
    }

    /// `should_split` and `alloc_found_block`: the front of the block, split off when the
    /// rest is worth keeping, is handed out.
    fn alloc_found_block(&mut self, id: Id, size: u64) {
        let b = self.block(id).clone();
        let remaining = b.size - size;
        let split = if b.pool == SMALL || self.conf.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.conf.max_split_size && remaining > SMALL_SIZE
        };
        if split {
            let rest = self.split_off(id, size, true);
            self.insert_free(rest);
        }
        self.block_mut(id).allocated = true;
        self.allocated += self.block(id).size;
    }

    /// Cuts block `id` after its first `keep` bytes: the rest becomes a block of its own
    /// (`mapped` as given, free, in no pool yet), right after it in the segment.
    pub(super) fn split_off(&mut self, id: Id, keep: u64, mapped: bool) -> Id {
        let b = self.block(id).clone();
        let rest = self.new_block(Block {
            addr: b.addr + keep,
            size: b.size - keep,
            allocated: false,
            mapped,
            prev: Some(id),
            next: b.next,
            pool: b.pool,
            es: b.es,
            gc_base: 0,
        });
        if let Some(n) = b.next {
            self.block_mut(n).prev = Some(rest);
        }
        let block = self.block_mut(id);
        block.next = Some(rest);
        block.size = keep;
        rest
    }

    /// `free` and `free_block`: the block merges with free neighbours and goes back to its
    /// pool; no memory goes back to the device.
    pub fn free(&mut self, id: Id) {
        let size = self.block(id).size;
        self.allocated -= size;
        self.block_mut(id).allocated = false;
        let (prev, next) = (self.block(id).prev, self.block(id).next);
        self.try_merge_blocks(id, prev);
        self.try_merge_blocks(id, next);
        self.insert_free(id);
    }

    /// `try_merge_blocks`: `src`, a neighbour of `dst`, joins it when it is free and in the
    /// same mapped state. `dst` is in no pool while this runs.
    pub(super) fn try_merge_blocks(&mut self, dst: Id, src: Option<Id>) {
        let Some(src) = src else { return };
        let s = self.block(src).clone();
        if s.allocated || s.mapped != self.block(dst).mapped {
            return;
        }
        if s.mapped {
            self.remove_free(src);
        } else {
            self.unmapped[s.pool].remove(&(s.addr, src));
        }
        if self.block(dst).prev == Some(src) {
            if let Some(p) = s.prev {
                self.block_mut(p).next = Some(dst);
            }
            let d = self.block_mut(dst);
            d.addr = s.addr;
            d.prev = s.prev;
        } else {
            if let Some(n) = s.next {
                self.block_mut(n).prev = Some(dst);
            }
            self.block_mut(dst).next = s.next;
        }
        self.block_mut(dst).size += s.size;
        self.drop_block(src);
    }

    /// `release_block`: a whole free segment goes back to the device (cudaFree).
    fn release_block(&mut self, id: Id) {
        self.remove_free(id);
        let b = self.block(id);
        let (addr, size) = (b.addr, b.size);
        self.segments.remove(&addr);
        self.reserved -= size;
        self.counters.device_frees += 1;
        self.drop_block(id);
    }

    /// `release_available_cached_blocks` (first retry; only with `max_split_size`): the
    /// smallest oversize free block that covers the request, else the largest ones until
    /// they add up to it.
    fn release_available_cached_blocks(&mut self, size: u64, pool: usize) -> bool {
        let max_split = self.conf.max_split_size;
        if max_split == u64::MAX {
            return false;
        }
        let key = size.max(max_split);
        let whole = (self.pools[pool].range((key, 0, 0)..))
            .map(|k| k.2)
            .find(|&id| self.block(id).es.is_none());
        if let Some(id) = whole {
            self.release_block(id);
            return true;
        }
        let mut released = 0;
        let largest: Vec<Id> = self.pools[pool].iter().rev().map(|k| k.2).collect();
        for id in largest {
            if released >= key || self.block(id).size < max_split {
                break;
            }
            if self.block(id).es.is_none() {
                released += self.block(id).size;
                self.release_block(id);
            }
        }
        released >= key
    }

    /// `release_cached_blocks` (second retry, and `torch.cuda.empty_cache()`): every free
    /// block that is a whole segment goes back, and expandable segments unmap the pages
    /// that lie wholly inside free blocks.
    pub fn release_cached_blocks(&mut self) {
        for pool in [LARGE, SMALL] {
            let free: Vec<Id> = self.pools[pool].iter().map(|k| k.2).collect();
            let mut to_unmap = Vec::new();
            for id in free {
                let b = self.block(id);
                if b.es.is_some() {
                    to_unmap.push(id);
                } else if b.prev.is_none() && b.next.is_none() {
                    self.release_block(id);
                }
            }
            for id in to_unmap {
                self.unmap_block(id);
            }
        }
    }

    /// `garbage_collect_cached_blocks`: above the threshold of the memory fraction, whole
    /// free segments of the large pool at least as old as the average go back, pass after
    /// pass, until the excess is reclaimed.
    fn garbage_collect_cached_blocks(&mut self) {
        let Some(cap) = self.memory_cap() else { return };
        let threshold = (self.conf.garbage_collection_threshold * cap as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let calls = self.gc_calls[LARGE];
        let age = |a: &Allocator, id: Id| (calls - a.block(id).gc_base) as f64;
        let freeable = |a: &Allocator| -> Vec<Id> {
            (a.pools[LARGE].iter().map(|k| k.2))
                .filter(|&id| {
                    let b = a.block(id);
                    b.prev.is_none() && b.next.is_none() && b.es.is_none()
                })
                .collect()
        };
        let mut candidates = freeable(self);
        let mut total_age: f64 = candidates.iter().map(|&id| age(self, id)).sum();
        let mut reclaimed = 0;
        while reclaimed < target && !candidates.is_empty() {
            let threshold_age = total_age / candidates.len() as f64;
            let mut freed = false;
            for id in std::mem::take(&mut candidates) {
                let a = age(self, id);
                if a >= threshold_age {
                    freed = true;
                    reclaimed += self.block(id).size;
                    total_age -= a;
                    self.release_block(id);
                } else {
                    candidates.push(id);
                }
            }
            if !freed {
                break;
            }
        }
    }
}
