//! The allocator model on synthetic request streams with known answers, one rule each
//! (the numbers follow from the policy in ../shared/PYTORCH_ALLOCATOR.md).

use super::allocator::{Allocator, Device};
use crate::torch_conf::AllocConf;

const MIB: u64 = 1 << 20;

/// An allocator under `conf` (PyTorch's syntax) on a device of `capacity` MiB.
fn model(conf: &str, capacity_mib: Option<u64>) -> Allocator {
    let mut c = AllocConf::default();
    c.apply(conf).unwrap();
    Allocator::new(
        c,
        Device {
            capacity: capacity_mib.map(|m| m * MIB),
            other: 0,
        },
    )
}

fn figures(a: &Allocator) -> (u64, u64) {
    (a.allocated, a.reserved)
}

#[test]
fn small_requests_share_a_2_mib_segment_rounded_to_512_bytes() {
    let mut a = model("", None);
    a.malloc(1000, None).unwrap();
    a.malloc(1, None).unwrap();
    assert_eq!(figures(&a), (1024 + 512, 2 * MIB));
    assert_eq!(a.counters.device_allocs, 1);
}

#[test]
fn large_blocks_split_only_past_1_mib_of_remainder() {
    let mut a = model("", None);
    // 5 MiB in a new 20 MiB segment: 15 MiB left, split off.
    let first = a.malloc(5 * MIB, None).unwrap();
    assert_eq!(figures(&a), (5 * MIB, 20 * MIB));
    a.free(first);
    // The whole 20 MiB again (merged); 19.5 MiB leaves 0.5 MiB: handed out unsplit.
    a.malloc(19 * MIB + MIB / 2, None).unwrap();
    assert_eq!(figures(&a), (20 * MIB, 20 * MIB));
}

#[test]
fn best_fit_takes_the_smallest_block_that_is_large_enough() {
    let mut a = model("", None);
    // One 20 MiB segment cut into 8, 4 and 8 MiB; free the two 8s... and a 12 MiB piece.
    let x = a.malloc(8 * MIB, None).unwrap();
    let _keep = a.malloc(4 * MIB, None).unwrap();
    let y = a.malloc(3 * MIB, None).unwrap();
    let _keep2 = a.malloc(5 * MIB, None).unwrap();
    a.free(x); // 8 MiB free at the front
    a.free(y); // 3 MiB free in the middle
               // 2 MiB: the 3 MiB block (smallest that fits), split? remainder 1 MiB is not > 1 MiB.
    a.malloc(2 * MIB, None).unwrap();
    assert_eq!(figures(&a), (4 * MIB + 3 * MIB + 5 * MIB, 20 * MIB));
}

#[test]
fn max_split_size_keeps_oversize_blocks_for_oversize_requests() {
    let mut a = model("max_split_size_mb:128", None);
    let big = a.malloc(200 * MIB, None).unwrap();
    a.free(big);
    // (a) A small request never takes the oversize block: a new segment.
    a.malloc(30 * MIB, None).unwrap();
    assert_eq!(figures(&a), (30 * MIB, 230 * MIB));
    // (b) 150 MiB may not take a block 20 MiB or more larger than itself.
    a.malloc(150 * MIB, None).unwrap();
    assert_eq!(figures(&a), (180 * MIB, 380 * MIB));
    // 190 MiB takes the 200 MiB block whole: oversize blocks are never split.
    a.malloc(190 * MIB, None).unwrap();
    assert_eq!(figures(&a), (380 * MIB, 380 * MIB));
}

#[test]
fn out_of_room_it_frees_whole_cached_segments_and_tries_again() {
    let mut a = model("", Some(100));
    let blocks: Vec<_> = (0..4).map(|_| a.malloc(20 * MIB, None).unwrap()).collect();
    a.free(blocks[0]);
    a.free(blocks[1]);
    // 60 MiB: no free block, 20 MiB of the device free; emptying the cache gives 40 more.
    a.malloc(60 * MIB, None).unwrap();
    assert_eq!(figures(&a), (100 * MIB, 100 * MIB));
    assert_eq!((a.counters.retries, a.counters.device_frees), (1, 2));
    // Nothing left to give back: PyTorch's out-of-memory error.
    assert!(a.malloc(20 * MIB, None).is_none());
    assert_eq!(a.counters.peak_reserved, 100 * MIB);
}

#[test]
fn a_split_segment_stays_and_that_is_fragmentation() {
    let mut a = model("", Some(100));
    // Ten 8 MiB blocks, two to each 20 MiB segment; every second one freed, so each
    // segment holds 8 MiB live and 12 MiB cached in two pieces.
    let blocks: Vec<_> = (0..10).map(|_| a.malloc(8 * MIB, None).unwrap()).collect();
    for x in blocks.iter().step_by(2) {
        a.free(*x);
    }
    assert_eq!(figures(&a), (40 * MIB, 100 * MIB));
    // 40 MiB would fit in what is reserved but unallocated, not in one piece.
    assert!(a.malloc(40 * MIB, None).is_none());
    assert_eq!(a.counters.device_frees, 0);
}

#[test]
fn max_split_size_frees_oversize_cached_blocks_before_the_whole_cache() {
    let mut a = model("max_split_size_mb:64", Some(300));
    let x = a.malloc(100 * MIB, None).unwrap();
    let y = a.malloc(150 * MIB, None).unwrap();
    a.free(x);
    a.free(y);
    // 120 MiB: the 150 MiB block is too large to take (>= 120 + 20), and the device has
    // 50 MiB: the smallest oversize block of at least 120 MiB goes back, then a segment.
    a.malloc(120 * MIB, None).unwrap();
    assert_eq!(figures(&a), (120 * MIB, 220 * MIB));
    assert_eq!((a.counters.device_frees, a.counters.retries), (1, 0));
}

#[test]
fn expandable_segments_map_pages_and_give_back_the_free_ones() {
    let mut a = model("expandable_segments:True", Some(100));
    // 21 MiB maps two 20 MiB pages; the 19 MiB after it stays mapped and free.
    let x = a.malloc(21 * MIB, None).unwrap();
    assert_eq!(figures(&a), (21 * MIB, 40 * MIB));
    // 18 MiB takes the free 19 MiB's front: nothing new is mapped.
    let y = a.malloc(18 * MIB, None).unwrap();
    assert_eq!(figures(&a), (39 * MIB, 40 * MIB));
    a.free(x);
    // 70 MiB: mapping the 80 MiB of pages after the free 1 MiB tail would pass 100 MiB,
    // so the cache is emptied first: page 0, wholly inside the freed 21 MiB, is unmapped;
    // then the tail grows by 69 MiB (four pages).
    a.malloc(70 * MIB, None).unwrap();
    assert_eq!(figures(&a), (88 * MIB, 100 * MIB));
    assert_eq!((a.counters.device_frees, a.counters.retries), (1, 1));
    a.free(y);
    // 30 MiB: 19 MiB free between two live blocks and 11 MiB at the end, but no page lies
    // wholly inside either, so nothing can be unmapped: out of memory.
    assert!(a.malloc(30 * MIB, None).is_none());
    assert_eq!(figures(&a), (70 * MIB, 100 * MIB));
    assert_eq!(a.counters.device_frees, 1);
}

#[test]
fn garbage_collection_acts_only_under_a_memory_fraction() {
    // Without a fraction the threshold does nothing: the cached segment stays.
    let mut a = model("garbage_collection_threshold:0.5", Some(100));
    let x = a.malloc(40 * MIB, None).unwrap();
    a.free(x);
    a.malloc(50 * MIB, None).unwrap();
    assert_eq!(figures(&a), (50 * MIB, 90 * MIB));
    // Under a cap of 80 MiB, above 40 MiB reserved the old free segment goes first.
    let mut a = model(
        "garbage_collection_threshold:0.5,per_process_memory_fraction:0.8",
        Some(100),
    );
    let x = a.malloc(50 * MIB, None).unwrap();
    a.free(x);
    a.malloc(60 * MIB, None).unwrap();
    assert_eq!(figures(&a), (60 * MIB, 60 * MIB));
    assert_eq!((a.counters.device_frees, a.counters.retries), (1, 0));
}

#[test]
fn a_memory_fraction_caps_what_is_reserved() {
    let mut a = model("per_process_memory_fraction:0.5", Some(100));
    a.malloc(40 * MIB, None).unwrap();
    assert!(a.malloc(20 * MIB, None).is_none());
    assert_eq!(figures(&a), (40 * MIB, 40 * MIB));
}

#[test]
fn a_segment_goes_where_the_job_put_it_unless_the_model_has_memory_there() {
    let mut a = model("", None);
    let at = 0x7f00_0000_0000;
    let x = a.malloc(4 * MIB, Some(at)).unwrap();
    assert_eq!(a.blocks[x as usize].addr, at);
    // The same address again overlaps the live segment: the model picks its own.
    let y = a.malloc(30 * MIB, Some(at)).unwrap();
    assert_ne!(a.blocks[y as usize].addr, at);
}

mod pass {
    use gpumemprof_format::{MemKind, Record, Tensor};

    use super::MIB;
    use crate::replay::tests::{alloc, free};
    use crate::torch_conf::AllocConf;
    use crate::whatif::replay::{Scenario, WhatIf};
    use crate::whatif::Device;

    /// A PyTorch tensor event with the allocator's totals after it.
    fn tensor(address: u64, delta: i64, allocated: u64, reserved: u64) -> Record {
        match crate::replay::tests::tensor(0, 1, address, delta, 0) {
            Record::Tensor(t) => Record::Tensor(Tensor {
                allocated,
                reserved,
                ..t
            }),
            _ => unreachable!("a tensor record"),
        }
    }

    fn segment(address: u64, size: u64) -> Record {
        alloc(0, 0, MemKind::Device, address, size, 0)
    }

    fn cuda_free(address: u64) -> Record {
        free(0, address)
    }

    #[test]
    fn the_jobs_empty_cache_is_inferred_and_every_run_follows_it() {
        let es = Scenario {
            conf: AllocConf::parse("expandable_segments:True"),
            scale: 1.0,
            device_memory: None,
        };
        let device = Device {
            capacity: Some(1 << 30),
            other: 0,
        };
        let mut pass = WhatIf::new(AllocConf::default(), vec![es], vec![(0, device)]);
        let (s1, s2) = (0x1000_0000, 0x4000_0000);
        let job = [
            segment(s1, 20 * MIB),
            tensor(s1, 5 << 20, 5 * MIB, 20 * MIB),
            segment(s2, 30 * MIB),
            tensor(s2, 30 << 20, 35 * MIB, 50 * MIB),
            tensor(s2, -(30 << 20), 5 * MIB, 50 * MIB),
            // torch.cuda.empty_cache(): the 30 MiB segment goes back.
            cuda_free(s2),
            // Without it the model would have kept 50 MiB reserved here.
            tensor(s1 + 5 * MIB, 5 << 20, 10 * MIB, 20 * MIB),
        ];
        for r in &job {
            pass.record(r);
        }
        let results = pass.finish();
        let f = &results[0].fidelity;
        assert_eq!(
            (
                f.events,
                f.reserved_matched,
                f.allocated_matched,
                f.empty_cache_calls
            ),
            (4, 4, 4, 1)
        );
        // With expandable segments: 40 MiB mapped for 35 MiB, then the empty_cache unmaps
        // the 20 MiB page the freed 30 MiB block wholly covers.
        let c = &results[0].outcomes[1].counters;
        assert_eq!((c.peak_reserved, c.device_frees), (40 * MIB, 1));
    }
}
