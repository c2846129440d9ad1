//! Expandable segments (`expandable_segments:True`) in the allocator model: one range of
//! address space per pool, mapped page by page as blocks need it and unmapped when its
//! pages lie wholly inside free blocks (`ExpandableSegment`, `find_expandable_block`,
//! `map_block`, `try_allocate_expandable_block`, `unmap_block` and
//! `release_expandable_segment` in c10/cuda/CUDACachingAllocator.cpp).

use super::allocator::{Allocator, Block, Id, Segment, SMALL};
use crate::torch_conf::SMALL_BUFFER;

/// Address space of a segment when the device size is unknown.
const UNKNOWN_DEVICE_SPACE: u64 = 1 << 40;

impl Allocator {
    /// `find_expandable_block`: the lowest unmapped range (with the free block just
    /// before it) that has room for `size`; a new segment when none has.
    fn find_expandable_block(&mut self, size: u64, pool: usize, proposed: Option<u64>) -> Id {
        let allocatable = |a: &Allocator, id: Option<Id>| id.filter(|&i| !a.block(i).allocated);
        let ranges: Vec<Id> = self.unmapped[pool].iter().map(|k| k.1).collect();
        for id in ranges {
            let mut c = id;
            if let Some(p) = allocatable(self, self.block(id).prev) {
                c = p;
            }
            let (mut bytes, mut b) = (0u64, Some(c));
            while bytes < size {
                let Some(i) = allocatable(self, b) else { break };
                bytes += self.block(i).size;
                b = self.block(i).next;
            }
            if bytes >= size {
                return c;
            }
        }
        // `getReservedVirtualMemorySize`: the device's memory and an eighth, in pages.
        let page = if pool == SMALL {
            SMALL_BUFFER
        } else {
            self.conf.large_segment_size
        };
        let space = self
            .device
            .capacity
            .map_or(UNKNOWN_DEVICE_SPACE, |c| c.saturating_add(c / 8));
        let span = space.div_ceil(page).saturating_mul(page);
        let base = self.place(span, proposed);
        self.expandable.push(Some(Segment { base, page }));
        let id = self.new_block(Block {
            addr: base,
            size: span,
            allocated: false,
            mapped: false,
            prev: None,
            next: None,
            pool,
            es: Some(self.expandable.len() - 1),
            gc_base: 0,
        });
        self.unmapped[pool].insert((base, id));
        id
    }

    fn segment_of(&self, id: Id) -> Segment {
        let es = self.block(id).es.expect("a block of an expandable segment");
        self.expandable[es].expect("a live expandable segment")
    }

    /// `map_block`: maps the pages that cover the first `size` bytes of the unmapped range
    /// `id` (all or nothing: each `cuMemCreate` needs a free page), which then merges with
    /// free mapped neighbours and joins the pool.
    fn map_block(&mut self, id: Id, size: u64) -> bool {
        let seg = self.segment_of(id);
        let b = self.block(id).clone();
        let start = (b.addr - seg.base) / seg.page;
        let end = (b.addr.saturating_add(size) - seg.base).div_ceil(seg.page);
        let mapped = (end - start) * seg.page;
        if !self.device_fits(mapped) {
            return false;
        }
        self.unmapped[b.pool].remove(&(b.addr, id));
        self.block_mut(id).mapped = true;
        if mapped < b.size {
            let rest = self.split_off(id, mapped, false);
            self.unmapped[b.pool].insert((b.addr + mapped, rest));
        }
        let (prev, next) = (self.block(id).prev, self.block(id).next);
        self.try_merge_blocks(id, prev);
        self.try_merge_blocks(id, next);
        self.insert_free(id);
        self.note_reserved(mapped);
        true
    }

    /// `try_allocate_expandable_block`: maps what the request lacks, growing the free block
    /// before the unmapped range when there is one.
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        size: u64,
        pool: usize,
        proposed: Option<u64>,
    ) -> Option<Id> {
        let mut c = self.find_expandable_block(size, pool, proposed);
        if !self.block(c).mapped {
            let want = self.block(c).size.min(size);
            if !self.map_block(c, want) {
                return None;
            }
        }
        while self.block(c).size < size {
            let remaining = size - self.block(c).size;
            // A new segment smaller than the request (larger than the device): no room.
            let next = self.block(c).next?;
            let want = self.block(next).size.min(remaining);
            if !self.map_block(next, want) {
                return None;
            }
            c = next;
        }
        self.remove_free(c);
        Some(c)
    }

    /// `unmap_block`: the pages wholly inside the free block `id` go back to the device;
    /// what is left of the block either side stays mapped and free.
    pub(super) fn unmap_block(&mut self, id: Id) {
        let seg = self.segment_of(id);
        let b = self.block(id).clone();
        let first = (b.addr - seg.base).div_ceil(seg.page);
        let end = (b.addr.saturating_add(b.size) - seg.base) / seg.page;
        if first >= end {
            return;
        }
        let (from, to) = (seg.base + first * seg.page, seg.base + end * seg.page);
        self.remove_free(id);
        if from > b.addr {
            let before = self.new_block(Block {
                addr: b.addr,
                size: from - b.addr,
                prev: b.prev,
                next: Some(id),
                ..b.clone()
            });
            if let Some(p) = b.prev {
                self.block_mut(p).next = Some(before);
            }
            self.block_mut(id).prev = Some(before);
            self.insert_free(before);
        }
        if to < b.addr + b.size {
            let after = self.split_off(id, to - b.addr, true);
            self.insert_free(after);
        }
        let block = self.block_mut(id);
        block.addr = from;
        block.size = to - from;
        block.mapped = false;
        let (prev, next) = (block.prev, block.next);
        self.try_merge_blocks(id, prev);
        self.try_merge_blocks(id, next);
        let block = self.block(id);
        let key = (block.addr, id);
        let (pool, whole) = (block.pool, block.prev.is_none() && block.next.is_none());
        self.unmapped[pool].insert(key);
        self.reserved -= to - from;
        self.counters.device_frees += 1;
        if whole {
            self.release_expandable_segment(id);
        }
    }

    /// `release_expandable_segment`: a segment with nothing mapped gives back its address
    /// space.
    fn release_expandable_segment(&mut self, id: Id) {
        let b = self.block(id).clone();
        self.unmapped[b.pool].remove(&(b.addr, id));
        if let Some(es) = b.es {
            if let Some(seg) = self.expandable[es].take() {
                self.segments.remove(&seg.base);
            }
        }
        self.drop_block(id);
    }
}
