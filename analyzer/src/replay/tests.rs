//! The replay's tests: counts, peaks, address reuse, VMM ranges, NVML, hostile input.
use super::tally::{DenseTally, Slot, StackTally, DENSE_STACK_IDS};
use super::*;
use gpumemprof_format::Stats;
use gpumemprof_format::{Alloc, AllocFailed, Free, MemKind, Sample, FREE_RANGE};

/// An allocation of thread 1 (API 0), for the replay's tests and the other modules' that
/// feed it records.
pub(crate) fn alloc(
    t: u64,
    device: i32,
    kind: MemKind,
    address: u64,
    size: u64,
    stack: u64,
) -> Record {
    Record::Alloc(Alloc {
        time_ns: t,
        tid: 1,
        api: 0,
        kind,
        device,
        address,
        size,
        stream: 0,
        pool: 0,
        stack,
    })
}

fn free_r(t: u64, address: u64, result: u32) -> Record {
    Record::Free(Free {
        time_ns: t,
        tid: 1,
        api: 1,
        address,
        stream: 0,
        stack: 0,
        result,
        flags: 0,
        kind: MemKind::Device,
        size: 0,
    })
}

/// A successful free of thread 1 (API 1).
pub(crate) fn free(t: u64, address: u64) -> Record {
    free_r(t, address, 0)
}

fn run(records: Vec<Record>) -> Replayed {
    let mut r = Replay::new();
    for rec in records {
        r.record(rec);
    }
    r.finish()
}

fn sorted(mut sites: Vec<Site>) -> Vec<Site> {
    sites.sort_by_key(|s| s.stack);
    sites
}

const D: MemKind = MemKind::Device;

/// The per-allocation memory the README states.
#[test]
fn a_live_allocation_slot_is_32_bytes() {
    assert_eq!(std::mem::size_of::<Slot>(), 32);
    assert_eq!(std::mem::size_of::<(u64, Slot)>(), 40);
}

/// The per-stack memory the README states: 24 bytes per dense stack id (plus a `u32`
/// in the live list while the stack holds memory).
#[test]
fn a_dense_stack_tally_is_24_bytes() {
    assert_eq!(std::mem::size_of::<DenseTally>(), 24);
}

#[test]
fn counts_allocations_frees_and_live_bytes() {
    let r = run(vec![
        alloc(10, 0, D, 0x1000, 100, 1),
        alloc(20, 0, D, 0x2000, 50, 2),
        free(30, 0x1000),
    ]);
    assert_eq!(r.rows.len(), 1);
    let c = r.rows[0].counters;
    assert_eq!((c.allocations, c.frees), (2, 1));
    assert_eq!((c.bytes_allocated, c.bytes_freed), (150, 100));
    assert_eq!((c.live_bytes, c.live_allocations), (50, 1));
    assert_eq!((c.peak_bytes, c.peak_time_ns), (150, 20));
    assert_eq!(r.totals, c);
    assert_eq!(r.live.len(), 1);
    assert_eq!(r.live[0].address, 0x2000);
    assert_eq!(r.pipeline.duration_ns, 30);
}

#[test]
fn peak_snapshot_is_taken_at_the_high_water_mark_not_later() {
    // live: 100, 300 (peak, stacks 1+2), 100, 250 (lower local max, stack 3), 250.
    let r = run(vec![
        alloc(1, 0, D, 0xa, 100, 1),
        alloc(2, 0, D, 0xb, 200, 2),
        free(3, 0xb),
        alloc(4, 0, D, 0xc, 150, 3),
        alloc(5, 0, D, 0xd, 1, 0),
        free(6, 0xd),
    ]);
    let row = &r.rows[0];
    assert_eq!(
        (row.counters.peak_bytes, row.counters.peak_time_ns),
        (300, 2)
    );
    assert_eq!(
        sorted(row.peak_sites.clone()),
        vec![
            Site {
                stack: 1,
                bytes: 100,
                count: 1
            },
            Site {
                stack: 2,
                bytes: 200,
                count: 1
            }
        ]
    );
    assert_eq!(row.counters.live_bytes, 250);
}

/// Stack ids counted in the dense vector and in the map give the same sites; a stack
/// whose allocations were all freed is not a site.
#[test]
fn peak_sites_count_small_and_large_stack_ids_alike() {
    let big = DENSE_STACK_IDS + 5;
    let r = run(vec![
        alloc(1, 0, D, 0xa, 100, 3),
        alloc(2, 0, D, 0xb, 10, 9),
        free(3, 0xb),
        alloc(4, 0, D, 0xc, 40, big),
        alloc(5, 0, D, 0xd, 60, big),
        alloc(6, 0, D, 0xe, 7, 3),
        free(7, 0xc),
    ]);
    let site = |stack, bytes, count| Site {
        stack,
        bytes,
        count,
    };
    let row = &r.rows[0];
    assert_eq!(
        (row.counters.peak_bytes, row.counters.peak_time_ns),
        (207, 6)
    );
    assert_eq!(
        sorted(row.peak_sites.clone()),
        vec![site(3, 107, 2), site(big, 100, 2)]
    );
}

/// The list of live dense ids follows adds and removes in any order, so a snapshot
/// names exactly the stacks with live allocations.
#[test]
fn the_live_stack_list_follows_adds_and_removes() {
    let mut t = StackTally::default();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut counts = [0u64; 40];
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let stack = x % 40;
        if x & (1 << 40) != 0 {
            t.add(stack, 10);
            counts[stack as usize] += 1;
        } else {
            t.remove(stack, 10);
            counts[stack as usize] = counts[stack as usize].saturating_sub(1);
        }
        let mut got: Vec<(u64, u64)> = t.sites().map(|s| (s.stack, s.count)).collect();
        got.sort_unstable();
        let want: Vec<(u64, u64)> = (0..40)
            .filter(|&s| counts[s as usize] > 0)
            .map(|s| (s, counts[s as usize]))
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn peak_still_rising_at_the_end_is_snapshotted_at_finish() {
    let r = run(vec![
        alloc(1, 0, D, 0xa, 100, 7),
        alloc(2, 0, D, 0xb, 100, 7),
    ]);
    assert_eq!(
        r.rows[0].peak_sites,
        vec![Site {
            stack: 7,
            bytes: 200,
            count: 2
        }]
    );
}

#[test]
fn equal_later_peak_keeps_the_first_time_and_snapshot() {
    let r = run(vec![
        alloc(1, 0, D, 0xa, 100, 1),
        free(2, 0xa),
        alloc(3, 0, D, 0xb, 100, 2),
    ]);
    let row = &r.rows[0];
    assert_eq!(
        (row.counters.peak_bytes, row.counters.peak_time_ns),
        (100, 1)
    );
    assert_eq!(
        row.peak_sites,
        vec![Site {
            stack: 1,
            bytes: 100,
            count: 1
        }]
    );
}

#[test]
fn rows_are_per_device_and_kind_and_totals_peak_is_combined() {
    // Device 0 peaks at t=1, device 1 at t=3; combined live never exceeds 150.
    let r = run(vec![
        alloc(1, 1, D, 0xa, 100, 1),
        free(2, 0xa),
        alloc(3, 0, MemKind::Managed, 0xb, 90, 1),
        alloc(4, 0, D, 0xc, 60, 1),
    ]);
    let keys: Vec<_> = r.rows.iter().map(|r| (r.device, r.kind)).collect();
    assert_eq!(keys, vec![(0, D), (0, MemKind::Managed), (1, D)]);
    assert_eq!((r.totals.peak_bytes, r.totals.peak_time_ns), (150, 4));
    assert_eq!(r.totals.allocations, 3);
    assert_eq!(r.totals.live_bytes, 150);
}

#[test]
fn out_of_order_reuse_frees_the_earlier_allocation() {
    // A@1 and B@3 share an address; B's alloc arrives before A's free@2.
    let r = run(vec![
        alloc(1, 0, D, 0xa, 10, 1),
        alloc(3, 0, D, 0xa, 20, 2),
        free(2, 0xa),
    ]);
    assert_eq!(r.live.len(), 1);
    assert_eq!(
        (r.live[0].time_ns, r.live[0].size, r.live[0].stack),
        (3, 20, 2)
    );
    assert_eq!(r.rows[0].counters.live_bytes, 20);
    assert_eq!(r.unknown_frees, 0);
}

#[test]
fn free_before_every_allocation_at_its_address_takes_the_oldest() {
    let r = run(vec![
        alloc(5, 0, D, 0xa, 10, 1),
        alloc(7, 0, D, 0xa, 20, 2),
        alloc(6, 0, D, 0xa, 30, 3),
        free(1, 0xa),
    ]);
    let mut left: Vec<_> = r.live.iter().map(|a| a.time_ns).collect();
    left.sort();
    assert_eq!(left, vec![6, 7]);
}

#[test]
fn unknown_failed_and_null_frees() {
    let r = run(vec![
        alloc(1, 0, D, 0xa, 10, 1),
        free_r(2, 0xa, 1),
        free(3, 0xdead),
        free(4, 0),
        free_r(5, 0, 3),
    ]);
    assert_eq!((r.unknown_frees, r.failed_frees), (1, 1));
    assert_eq!(r.rows[0].counters.frees, 0);
    assert_eq!(r.live.len(), 1);
}

#[test]
fn failed_allocations_are_counted_and_the_first_ones_kept() {
    let mut recs = Vec::new();
    for i in 0..(MAX_KEPT_FAILURES as u64 + 5) {
        recs.push(Record::AllocFailed(AllocFailed {
            time_ns: i,
            tid: 1,
            api: 0,
            kind: D,
            device: 1,
            size: 1 << 40,
            stream: 0,
            pool: 0,
            stack: 0,
            result: 2,
            mem_free: 0,
            mem_total: 0,
        }));
    }
    let r = run(recs);
    assert_eq!(r.totals.failed_allocations, MAX_KEPT_FAILURES as u64 + 5);
    assert_eq!(
        r.rows[0].counters.failed_allocations,
        MAX_KEPT_FAILURES as u64 + 5
    );
    assert_eq!(r.failures.len(), MAX_KEPT_FAILURES);
    assert_eq!(r.failures[0].result, 2);
}

#[test]
fn stacks_modules_and_pipeline() {
    let stats = Stats {
        time_ns: 50,
        events: 3,
        queue_waits: 1,
        dropped: 0,
    };
    let r = run(vec![
        Record::Stack {
            id: 4,
            frames: vec![0x10, 0x20],
        },
        alloc(9, 0, D, 0xa, 1, 4),
        alloc(12, 0, D, 0xb, 1, 4),
        Record::Stats(stats),
        Record::Unknown { kind: 99, len: 3 },
    ]);
    assert_eq!(r.stacks[&4].frames, vec![0x10, 0x20]);
    assert_eq!(r.stacks[&4].first_use_ns, Some(9));
    assert!(!r.pipeline.complete);
    assert_eq!((r.pipeline.events, r.pipeline.queue_waits), (3, 1));
    assert_eq!(r.pipeline.unknown_records, 1);
    assert_eq!(r.pipeline.duration_ns, 50);
    let r = run(vec![Record::End(Stats {
        time_ns: 60,
        ..stats
    })]);
    assert!(r.pipeline.complete);
    assert_eq!(r.pipeline.duration_ns, 60);
}

#[test]
fn hostile_sizes_saturate_instead_of_panicking() {
    let r = run(vec![
        alloc(1, 0, D, 0xa, u64::MAX, 1),
        alloc(2, 0, D, 0xb, u64::MAX, 1),
        free(3, 0xa),
        free(4, 0xb),
    ]);
    assert_eq!(r.rows[0].counters.live_bytes, 0);
    assert_eq!(r.rows[0].counters.peak_bytes, u64::MAX);
}

fn free_kind(t: u64, kind: MemKind, address: u64, flags: u8, size: u64) -> Record {
    Record::Free(Free {
        time_ns: t,
        tid: 1,
        api: 1,
        address,
        stream: 0,
        stack: 0,
        result: 0,
        flags,
        kind,
        size,
    })
}

/// The expandable-segments pattern: reserve 64 MiB, create and map four 2 MiB
/// handles end to end, unmap the last two with one call, release their handles.
#[test]
fn vmm_mappings_count_once_and_one_unmap_releases_adjacent_mappings() {
    const MIB: u64 = 1 << 20;
    let base = 0x7100_0000_0000u64;
    let mut recs = vec![alloc(1, 0, MemKind::AddressReservation, base, 64 * MIB, 9)];
    for i in 0..4u64 {
        recs.push(alloc(
            2 + i,
            0,
            MemKind::VmmHandle,
            0x4a00_0000 + i,
            2 * MIB,
            8,
        ));
        recs.push(alloc(2 + i, 0, D, base + i * 2 * MIB, 2 * MIB, 7));
    }
    recs.push(free_kind(10, D, base + 4 * MIB, FREE_RANGE, 4 * MIB));
    recs.push(free_kind(11, MemKind::VmmHandle, 0x4a00_0002, 0, 0));
    recs.push(free_kind(11, MemKind::VmmHandle, 0x4a00_0003, 0, 0));
    let r = run(recs);
    let row = |kind| r.rows.iter().find(|row| row.kind == kind).unwrap().counters;
    let device = row(D);
    assert_eq!((device.allocations, device.frees), (4, 2));
    assert_eq!((device.peak_bytes, device.live_bytes), (8 * MIB, 4 * MIB));
    assert_eq!(row(MemKind::VmmHandle).live_bytes, 4 * MIB);
    assert_eq!(row(MemKind::AddressReservation).live_bytes, 64 * MIB);
    // Only the mappings are memory.
    assert_eq!(
        (r.totals.peak_bytes, r.totals.live_bytes),
        (8 * MIB, 4 * MIB)
    );
    assert_eq!(r.totals.allocations, 4);
    assert_eq!(r.unknown_frees, 0);
    // The reservation shares its address with the first mapping, in its own space.
    assert_eq!(r.live.iter().filter(|a| a.address == base).count(), 2);
}

#[test]
fn a_range_free_of_nothing_live_is_one_unknown_free() {
    let r = run(vec![free_kind(1, D, 0x1000, FREE_RANGE, 4096)]);
    assert_eq!(r.unknown_frees, 1);
}

/// An NVML sample of device 0 at `t`: the process (the only one on the device) uses `used`
/// bytes; NVML answered within `query_ns`.
fn nvml_sample(t: u64, used: u64, query_ns: u64) -> Record {
    Record::Sample(Sample {
        time_ns: t,
        device: 0,
        process_used: used,
        device_used: used,
        device_total: 1 << 30,
        query_ns,
    })
}

#[test]
fn nvml_samples_are_set_against_tracked_device_bytes() {
    let sample = |t, used| nvml_sample(t, used, 0);
    let r = run(vec![
        sample(1, 64),
        // NVML already sees the 100 bytes whose allocation is stamped at 2.
        sample(2, 164),
        alloc(2, 0, D, 0x1000, 100, 1),
        alloc(3, 0, MemKind::Managed, 0x9000, 50, 1),
        sample(4, 164),
        free(5, 0x1000),
        sample(6, 64),
    ]);
    assert_eq!(r.nvml.len(), 1);
    let d = r.nvml[0];
    assert_eq!(d.samples, 4);
    // The sample at 2 is set against the allocation stamped at 2 too: an allocation's
    // stamp is when its call returned, after the driver counted it.
    assert_eq!((d.peak.time_ns, d.peak.process_used), (2, 164));
    assert_eq!((d.tracked_at_peak, d.untracked_at_peak()), (100, 64));
    assert_eq!(
        (d.last.time_ns, d.tracked_at_last, d.untracked_at_last()),
        (6, 0, 64)
    );
}

/// NVML answered for a moment in its query's window (`query_ns`): a 300-byte buffer
/// allocated and freed inside it may be in NVML's figure, so the sample is set against the
/// most the hooks tracked in the window, and nothing beyond the 64-byte context is
/// called untracked. An allocation after the window does not count.
#[test]
fn an_nvml_sample_is_set_against_the_most_tracked_while_nvml_answered() {
    let sample = nvml_sample;
    let r = run(vec![
        alloc(1, 0, D, 0x1000, 100, 1),
        sample(10, 464, 20),
        alloc(15, 0, D, 0x2000, 300, 1),
        free(18, 0x2000),
        alloc(31, 0, D, 0x3000, 500, 1),
        free(32, 0x3000),
        sample(40, 164, 0),
    ]);
    let d = r.nvml[0];
    assert_eq!(d.samples, 2);
    assert_eq!(
        (d.peak.time_ns, d.tracked_at_peak, d.untracked_at_peak()),
        (10, 400, 64)
    );
    assert_eq!((d.last.time_ns, d.tracked_at_last), (40, 100));

    // A window of a damaged length is held open for a second at most.
    let r = run(vec![
        alloc(1, 0, D, 0x1000, 100, 1),
        sample(10, 464, u64::MAX),
        alloc(1_000_000_010, 0, D, 0x2000, 300, 1),
        alloc(1_000_000_011, 0, D, 0x3000, 500, 1),
    ]);
    assert_eq!(r.nvml[0].tracked_at_peak, 400);

    // The same samples written before `query_ns` (0): the window is the stamp alone.
    let r = run(vec![
        alloc(1, 0, D, 0x1000, 100, 1),
        sample(10, 464, 0),
        alloc(15, 0, D, 0x2000, 300, 1),
        free(18, 0x2000),
    ]);
    assert_eq!(
        (r.nvml[0].tracked_at_peak, r.nvml[0].untracked_at_peak()),
        (100, 364)
    );
}

/// A PyTorch tensor event of `tid` on device 0 at `time_ns` (the allocator's totals are
/// left 0: the replay's tests and the other modules' that feed it tensors read none).
pub(crate) fn tensor(time_ns: u64, tid: u32, address: u64, delta: i64, stack: u64) -> Record {
    Record::Tensor(gpumemprof_format::Tensor {
        time_ns,
        tid,
        framework: gpumemprof_format::FRAMEWORK_PYTORCH,
        device: 0,
        address,
        delta,
        allocated: 0,
        reserved: 0,
        stack,
    })
}

#[test]
fn fates_copy_the_tensors_live_at_the_peak_and_write_their_frees_beside_them() {
    use super::fates::{Freed, Lifetime};
    let mut r = Replay::new();
    // Run 0 (thread 1): A and B make the peak; run 1 (thread 2) frees A; run 2 (thread 1)
    // makes C at A's address and frees it (below the peak: not in the copy).
    for record in [
        tensor(1, 1, 0xa, 1024, 7),
        tensor(2, 1, 0xb, 512, 8),
        tensor(3, 2, 0xa, -1024, 9),
        tensor(4, 1, 0xa, 256, 7),
        tensor(5, 1, 0xa, -256, 7),
    ] {
        r.record(record);
    }
    let f = r.finish().fates;
    assert_eq!((f.runs, f.runs_made), (vec![1, 2, 1], 3));
    assert_eq!(f.thread_stacks, vec![(1, vec![7, 8]), (2, vec![9])]);
    let (device, mut lives) = f.at_peak.into_iter().next().expect("a peak copy");
    lives.sort_by_key(|l| l.size);
    let life = |address, time_ns, size, stack, run, freed| Lifetime {
        address,
        time_ns,
        size,
        device: 0,
        stack,
        tid: 1,
        run,
        freed,
    };
    assert_eq!(device, 0);
    let freed_a = Freed {
        stack: 9,
        tid: 2,
        run: 1,
    };
    assert_eq!(
        lives,
        vec![
            life(0xb, 2, 512, 8, 0, None),
            life(0xa, 1, 1024, 7, 0, Some(freed_a))
        ]
    );
    assert_eq!(f.at_end, vec![life(0xb, 2, 512, 8, 0, None)]);
    // Freed after the last tensor was made (at 4): C, by thread 1 in run 2.
    let freed_c = Freed {
        stack: 7,
        tid: 1,
        run: 2,
    };
    assert_eq!(
        f.freed_at_exit,
        vec![life(0xa, 4, 256, 7, 2, Some(freed_c))]
    );
}

/// NVML counts a VMM handle's physical memory once it is created, mapped or not: the
/// comparison counts handles and leaves their mappings out, so created-but-unmapped
/// handles are tracked and a mapped one is not counted twice.
#[test]
fn nvml_counts_each_vmm_handle_once_mapped_or_not() {
    const MIB: u64 = 1 << 20;
    let header = serde_json::json!({"apis": [
        {"id": 20, "name": "cuMemCreate"}, {"id": 21, "name": "cuMemMap"},
    ]});
    let mut r = Replay::new().of_header(&header);
    let sample = |t: u64, used: u64| nvml_sample(t, used, 0);
    let mapping = |t: u64, address: u64| {
        Record::Alloc(Alloc {
            api: 21,
            ..match alloc(t, 0, MemKind::Device, address, 2 * MIB, 0) {
                Record::Alloc(a) => a,
                _ => unreachable!(),
            }
        })
    };
    // Two 2 MiB handles created, one mapped; a cudaMalloc of 1 MiB beside them.
    r.record(alloc(1, 0, MemKind::VmmHandle, 0x1, 2 * MIB, 0));
    r.record(alloc(2, 0, MemKind::VmmHandle, 0x2, 2 * MIB, 0));
    r.record(mapping(3, 0x7000_0000));
    r.record(alloc(4, 0, MemKind::Device, 0x9000_0000, MIB, 0));
    r.record(sample(5, 5 * MIB));
    // The mapping is unmapped: the handles still hold their memory.
    r.record(free_kind(
        6,
        MemKind::Device,
        0x7000_0000,
        FREE_RANGE,
        2 * MIB,
    ));
    r.record(sample(7, 5 * MIB));
    let nvml = r.finish().nvml;
    assert_eq!(
        (nvml[0].tracked_at_peak, nvml[0].untracked_at_peak()),
        (5 * MIB, 0)
    );
    assert_eq!(
        (nvml[0].tracked_at_last, nvml[0].untracked_at_last()),
        (5 * MIB, 0)
    );
}
