//! When NVML is asked before its interval: the device memory live in the events the writer
//! emitted, in time order, and how far its high since the last sample rose above the highest
//! level any earlier sample came after.
//!
//! A rise between two samples would leave NVML's view from before it as the most the process
//! used, so the writer samples again after a rise. Counting the bytes allocated since the last
//! sample instead made every allocation a rise: a job that allocates and frees the same bytes
//! each step (PyTorch without its cache) was sampled every 10 ms on a real GPU, each query a
//! call into the kernel driver as the job's cudaMalloc and cudaFree are, and the job ran 10%
//! slower with the shim (docs/VALIDATION.md).
//!
//! The writer samples some milliseconds after the events it emits, so memory that rises and
//! falls within a step may have fallen again when the sample is taken: then the sample is
//! taken again after twice the wait, a few times, each with its chance to meet the high.
//! A spike shorter than the writer's round (a large buffer allocated and freed at once) is
//! met by chance only, as by any sampler.
//!
//! Kept only where NVML was loaded: an address and a size per live device allocation, as the
//! flight recorder's base keeps.

use super::pending::Pending;
use crate::capture::intern::FxMap;
use gpumemprof_format::{MemKind, FREE_RANGE};

/// NVML is asked again early once the live device memory rose this much above its high at
/// every earlier sample...
const RISE_BYTES: u64 = 16 << 20;
/// ...but at most once per this interval, so that an allocation loop does not turn into an
/// NVML query per round...
const GAP_NS: u64 = 10_000_000;
/// ...and where a sample came after the memory fell again from that high, again after twice
/// the wait, at most this many times for one high (10 to 320 ms, 630 ms in all, past the
/// default interval).
const RETRIES: u32 = 5;

#[derive(Default)]
pub(super) struct LiveHigh {
    /// Live device allocations (and VMM mappings) by address: their bytes.
    live: FxMap<u64, u64>,
    /// Their sum.
    bytes: u64,
    /// The most `bytes` reached since the last sample.
    high: u64,
    /// The most `high` was when any sample was taken.
    mark: u64,
    /// Samples since the high was reached that came after the memory fell from it.
    retries: u32,
}

impl LiveHigh {
    /// One emitted event. Only device memory counts (`MemKind::Device`: allocations and
    /// VMM mappings), as NVML's view is of the device; a failed free frees nothing.
    pub fn apply(&mut self, p: &Pending) {
        match p {
            Pending::Alloc(a) if a.kind == MemKind::Device && a.address != 0 => {
                let before = self.live.insert(a.address, a.size).unwrap_or(0);
                self.bytes = self.bytes.saturating_sub(before).saturating_add(a.size);
                self.high = self.high.max(self.bytes);
            }
            Pending::Free(f) if f.result == 0 && f.kind.space() == 0 => {
                if f.flags & FREE_RANGE != 0 {
                    // An unmapped range releases every mapping that starts in it.
                    let end = f.address.saturating_add(f.size);
                    let mut at = f.address;
                    while at < end {
                        let Some(size) = self.live.remove(&at) else {
                            break;
                        };
                        self.bytes = self.bytes.saturating_sub(size);
                        at = at.saturating_add(size.max(1));
                    }
                } else if let Some(size) = self.live.remove(&f.address) {
                    self.bytes = self.bytes.saturating_sub(size);
                }
            }
            _ => {}
        }
    }

    /// Bytes by which the high since the last sample passed every earlier sample's high.
    fn risen(&self) -> u64 {
        self.high.saturating_sub(self.mark)
    }

    /// When NVML is due again early (ns, `clock::now_ns`'s), after the sample at
    /// `last_sample`: None while the memory did not rise.
    pub fn due(&self, last_sample: u64) -> Option<u64> {
        (self.risen() >= RISE_BYTES).then(|| last_sample.saturating_add(GAP_NS << self.retries))
    }

    /// A sample was taken: later rises count from the highest level seen so far, unless the
    /// memory rose and had fallen again when it was taken (`RETRIES`).
    pub fn sampled(&mut self) {
        let missed =
            self.risen() >= RISE_BYTES && self.bytes.saturating_add(RISE_BYTES) <= self.high;
        if missed && self.retries < RETRIES {
            self.retries += 1;
            return;
        }
        self.retries = 0;
        self.mark = self.mark.max(self.high);
        self.high = self.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::pending::made::{alloc, alloc_of, failed_free, free};

    const MIB: u64 = 1 << 20;
    const MS: u64 = 1_000_000;

    /// PyTorch without its cache: 48 MiB allocated and freed 100 times, each sample taken
    /// while it is live, rises once.
    #[test]
    fn memory_that_churns_at_one_level_rises_once() {
        let mut l = LiveHigh::default();
        assert_eq!(l.due(0), None);
        l.apply(&alloc(0, 0x1000, 48 * MIB));
        assert_eq!((l.risen(), l.due(0)), (48 * MIB, Some(10 * MS)));
        l.sampled();
        for _ in 0..100 {
            l.apply(&free(0, 0x1000, 0, 0));
            l.apply(&alloc(0, 0x1000, 48 * MIB));
            assert_eq!((l.risen(), l.due(0)), (0, None));
        }
        // A new high counts from the old one: 48 + 20 MiB is 20 MiB above it; 15 MiB is
        // not enough.
        l.apply(&alloc(0, 0x9000_0000, 15 * MIB));
        assert_eq!((l.risen(), l.due(0)), (15 * MIB, None));
        l.apply(&alloc(0, 0xa000_0000, 5 * MIB));
        assert_eq!((l.risen(), l.due(7 * MS)), (20 * MIB, Some(17 * MS)));
    }

    /// A high the memory had fallen from when the sample was taken is sampled again after
    /// 20, 40, 80, 160 and 320 ms, then given up; the next high starts from 10 ms again.
    #[test]
    fn a_high_the_sample_missed_is_sampled_again_five_times_later_and_later() {
        let mut l = LiveHigh::default();
        l.apply(&alloc(0, 0x1000, 30 * MIB));
        l.apply(&free(0, 0x1000, 0, 0));
        assert_eq!(l.due(0), Some(10 * MS));
        for wait in [20, 40, 80, 160, 320] {
            l.sampled();
            assert_eq!(l.due(0), Some(wait * MS));
        }
        l.sampled();
        assert_eq!((l.risen(), l.due(0), l.mark), (0, None, 30 * MIB));
        l.apply(&alloc(0, 0x1000, 30 * MIB));
        assert_eq!(l.due(0), None);
        l.apply(&alloc(0, 0x9000_0000, 16 * MIB));
        assert_eq!(l.due(0), Some(10 * MS));
    }

    /// A sample that met the memory within 16 MiB of its high took it: no more early ones.
    #[test]
    fn a_sample_taken_near_the_high_is_not_taken_again() {
        let mut l = LiveHigh::default();
        l.apply(&alloc(0, 0x1000, 30 * MIB));
        l.apply(&alloc(0, 0x9000_0000, 8 * MIB));
        l.apply(&free(0, 0x9000_0000, 0, 0));
        l.sampled();
        assert_eq!((l.due(0), l.mark, l.high), (None, 38 * MIB, 30 * MIB));
    }

    /// Only device memory counts; a failed free frees nothing; an unmapped range releases
    /// each mapping in it (expandable segments' pages).
    #[test]
    fn device_memory_and_unmapped_ranges_count_as_the_hooks_record_them() {
        let mut l = LiveHigh::default();
        l.apply(&alloc_of(MemKind::PinnedHost, 0, 0x1000, 8 * MIB));
        l.apply(&alloc_of(MemKind::Managed, 0, 0x2000, 8 * MIB));
        l.apply(&alloc_of(MemKind::VmmHandle, 0, 0x3000, 8 * MIB));
        assert_eq!((l.bytes, l.risen()), (0, 0));
        let page = 2 * MIB;
        for i in 0..3 {
            l.apply(&alloc(0, 0x7000_0000 + i * page, page));
        }
        l.apply(&failed_free(1, 0, 0x7000_0000));
        assert_eq!(l.bytes, 6 * MIB);
        l.apply(&free(0, 0x7000_0000, FREE_RANGE, 2 * page));
        assert_eq!(l.bytes, 2 * MIB);
        assert_eq!(l.risen(), 6 * MIB);
        l.sampled();
        assert_eq!((l.mark, l.high), (6 * MIB, 2 * MIB));
    }
}
