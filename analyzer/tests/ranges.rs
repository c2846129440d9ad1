//! NVTX range attribution in the replay (`ranges.rs`), on hand-made record streams: each
//! test names a situation a real program produces (nesting per thread and domain, a range
//! started on one thread and ended on another, a pop too many, a peak before the first
//! range) and checks the exact bytes per range.

use gpumemprof_analyzer::replay::ranges::{Group, NvtxCounts, RangesResult, MAX_OPEN};
use gpumemprof_analyzer::replay::{Replay, Replayed};
use gpumemprof_format::{Alloc, Free, Nvtx, NvtxOp, Record};

#[path = "checks/synth.rs"]
mod synth;

fn alloc(t: u64, tid: u32, address: u64, size: u64) -> Record {
    Record::Alloc(Alloc {
        tid,
        api: 1,
        ..synth::alloc_of(t, address, size, 0)
    })
}

fn free(t: u64, tid: u32, address: u64) -> Record {
    Record::Free(Free {
        tid,
        api: 2,
        ..synth::free_of(t, address)
    })
}

fn nvtx(t: u64, tid: u32, op: NvtxOp, domain: u64, name: u64, range: u64) -> Record {
    Record::Nvtx(Nvtx {
        time_ns: t,
        tid,
        op,
        domain,
        name,
        range,
    })
}

fn push(t: u64, tid: u32, name: u64) -> Record {
    nvtx(t, tid, NvtxOp::Push, 0, name, 0)
}

fn pop(t: u64, tid: u32) -> Record {
    nvtx(t, tid, NvtxOp::Pop, 0, 0, 0)
}

fn string(id: u64, text: &str) -> Record {
    Record::NvtxString {
        id,
        text: text.into(),
    }
}

/// Strings 1..: "A", "B", "C", "trainer" (as a domain).
fn strings() -> Vec<Record> {
    vec![
        string(1, "A"),
        string(2, "B"),
        string(3, "C"),
        string(4, "trainer"),
    ]
}

fn replay(records: Vec<Record>) -> Replayed {
    let mut r = Replay::new();
    for rec in records {
        r.record(rec);
    }
    r.finish()
}

fn ranges(records: Vec<Record>) -> RangesResult {
    replay(records).ranges.expect("the trace has NVTX records")
}

/// (name, domain) → (live bytes at the end, peak bytes, bytes allocated).
fn bytes(res: &RangesResult) -> Vec<(String, Option<String>, u64, u64, u64)> {
    res.groups
        .iter()
        .map(|g: &Group| {
            (
                g.name.clone(),
                g.domain.clone(),
                g.counts.live_bytes,
                g.counts.peak_bytes,
                g.counts.bytes_allocated,
            )
        })
        .collect()
}

fn row(
    name: &str,
    domain: Option<&str>,
    live: u64,
    peak: u64,
    allocated: u64,
) -> (String, Option<String>, u64, u64, u64) {
    (
        name.into(),
        domain.map(str::to_owned),
        live,
        peak,
        allocated,
    )
}

#[test]
fn pushed_ranges_nest_per_thread_and_other_threads_are_not_in_them() {
    let mut recs = strings();
    recs.extend([
        push(1, 10, 1),         // thread 10: A
        alloc(2, 11, 0x100, 7), // thread 11 has nothing open
        alloc(3, 10, 0x200, 8), // A
        push(4, 10, 2),         // thread 10: A > B
        alloc(5, 10, 0x300, 4), // B (innermost)
        pop(6, 10),             // closes B
        alloc(7, 10, 0x400, 2), // A again
        pop(8, 10),             // closes A
        alloc(9, 10, 0x500, 1), // nothing open
    ]);
    let res = ranges(recs);
    assert_eq!(
        bytes(&res),
        vec![
            row("<no range>", None, 8, 8, 8),
            row("A", None, 10, 10, 10),
            row("B", None, 4, 4, 4),
        ]
    );
    assert_eq!(
        res.nvtx,
        NvtxCounts {
            pushes: 2,
            pops: 2,
            ..NvtxCounts::default()
        }
    );
}

/// A pop closes the innermost pushed range of its own domain, even under another
/// domain's range; the innermost open range stays the allocations' range.
#[test]
fn a_pop_closes_the_innermost_range_of_its_domain() {
    let mut recs = strings();
    recs.extend([
        push(1, 10, 1),                     // A (default domain)
        nvtx(2, 10, NvtxOp::Push, 4, 2, 0), // B in domain "trainer"
        pop(3, 10),                         // closes A, not B
        alloc(4, 10, 0x100, 5),             // B
        nvtx(5, 10, NvtxOp::Pop, 4, 0, 0),  // closes B
        alloc(6, 10, 0x200, 3),             // nothing open
    ]);
    assert_eq!(
        bytes(&ranges(recs)),
        vec![
            row("<no range>", None, 3, 3, 3),
            row("B", Some("trainer"), 5, 5, 5),
        ]
    );
}

/// A start/end range belongs to the thread that started it; another thread may end it.
#[test]
fn a_started_range_claims_only_its_own_threads_allocations_until_any_thread_ends_it() {
    let mut recs = strings();
    recs.extend([
        nvtx(1, 10, NvtxOp::Start, 0, 3, 77), // C, started by thread 10
        alloc(2, 11, 0x100, 1),               // thread 11: not in C
        alloc(3, 10, 0x200, 2),               // C
        push(4, 10, 1),                       // A opens inside C
        alloc(5, 10, 0x300, 4),               // A (innermost)
        nvtx(6, 11, NvtxOp::End, 0, 0, 77),   // thread 11 ends C
        alloc(7, 10, 0x400, 8),               // still A
        pop(8, 10),
        alloc(9, 10, 0x500, 16), // nothing open
    ]);
    let res = ranges(recs);
    assert_eq!(
        bytes(&res),
        vec![
            row("<no range>", None, 17, 17, 17),
            row("C", None, 2, 2, 2),
            row("A", None, 12, 12, 12),
        ]
    );
    assert_eq!(
        (res.nvtx.starts, res.nvtx.ends, res.nvtx.unmatched),
        (1, 1, 0)
    );
}

#[test]
fn a_pop_or_end_with_nothing_open_changes_nothing_and_is_counted() {
    let mut recs = strings();
    recs.extend([
        pop(1, 10),                        // nothing pushed
        nvtx(2, 10, NvtxOp::End, 0, 0, 5), // never started
        push(3, 10, 1),
        nvtx(4, 10, NvtxOp::Pop, 4, 0, 0), // nothing of domain 4 open: A stays
        alloc(5, 10, 0x100, 9),
        nvtx(6, 10, NvtxOp::Mark, 0, 2, 0),
        nvtx(7, 10, NvtxOp::Other(200), 0, 0, 0), // a newer shim's operation
    ]);
    let res = ranges(recs);
    assert_eq!(
        bytes(&res),
        vec![row("<no range>", None, 0, 0, 0), row("A", None, 9, 9, 9)]
    );
    assert_eq!(
        res.nvtx,
        NvtxCounts {
            pushes: 1,
            pops: 2,
            ends: 1,
            marks: 1,
            unmatched: 3,
            ..NvtxCounts::default()
        }
    );
}

/// The peak of all memory, by range: the state at the first free after the high-water
/// mark; a free credits the range that allocated, whichever thread frees and whatever is
/// open then.
#[test]
fn the_peak_and_the_frees_are_credited_to_the_allocating_range() {
    let mut recs = strings();
    recs.extend([
        push(1, 10, 1),
        alloc(2, 10, 0x100, 100), // A
        pop(3, 10),
        push(4, 11, 2),
        alloc(5, 11, 0x200, 50), // B
        free(6, 11, 0x100),      // A's, freed by thread 11 inside B
        alloc(7, 11, 0x300, 20), // B: 70 live, below the peak of 150
        pop(8, 11),
    ]);
    let res = ranges(recs);
    assert_eq!(
        bytes(&res),
        vec![
            row("<no range>", None, 0, 0, 0),
            row("A", None, 0, 100, 100),
            row("B", None, 70, 50, 70),
        ]
    );
    let a = &res.groups[1].counts;
    assert_eq!((a.frees, a.bytes_freed, a.peak_allocations), (1, 100, 1));
}

/// Allocations before the trace's first NVTX record are `<no range>`, also at a peak that
/// was already past.
#[test]
fn memory_before_the_first_nvtx_record_is_no_range_also_at_an_earlier_peak() {
    let mut recs = vec![
        alloc(1, 10, 0x100, 200),
        alloc(2, 10, 0x200, 10),
        free(3, 10, 0x100), // the peak (210, 2 allocations) is past
    ];
    recs.extend(strings());
    recs.extend([push(4, 10, 1), alloc(5, 10, 0x300, 50), free(6, 10, 0x200)]);
    let r = replay(recs);
    let res = r.ranges.clone().unwrap();
    assert_eq!(
        bytes(&res),
        vec![
            row("<no range>", None, 0, 210, 210),
            row("A", None, 50, 0, 50)
        ]
    );
    assert_eq!(res.groups[0].counts.peak_allocations, 2);
    assert_eq!(r.totals.peak_bytes, 210);

    // Still at the peak when the first NVTX record arrives: the first free copies it.
    let mut recs = vec![alloc(1, 10, 0x100, 200)];
    recs.extend(strings());
    recs.extend([push(2, 10, 1), alloc(3, 10, 0x200, 5), free(4, 10, 0x100)]);
    let res = ranges(recs);
    assert_eq!(
        bytes(&res),
        vec![
            row("<no range>", None, 0, 200, 200),
            row("A", None, 5, 5, 5)
        ]
    );
}

#[test]
fn names_missing_or_unknown_are_labelled_and_equal_names_are_one_group() {
    let recs = vec![
        string(1, "step"),
        string(2, "step"), // the same text under a second id (a forked child's trace)
        push(1, 10, 0),    // no message
        alloc(2, 10, 0x100, 1),
        push(3, 10, 9), // id 9 is never defined
        alloc(4, 10, 0x200, 2),
        push(5, 10, 1),
        alloc(6, 10, 0x300, 4),
        push(7, 10, 2),
        alloc(8, 10, 0x400, 8),
        string(3, ""), // an empty message is no message
        push(9, 10, 3),
        alloc(10, 10, 0x500, 16),
    ];
    assert_eq!(
        bytes(&ranges(recs)),
        vec![
            row("<no range>", None, 0, 0, 0),
            row("<unnamed>", None, 17, 17, 17),
            row("<string 9>", None, 2, 2, 2),
            row("step", None, 12, 12, 12),
        ]
    );
}

#[test]
fn a_trace_without_nvtx_keeps_no_range_state() {
    let r = replay(vec![alloc(1, 10, 0x100, 5)]);
    assert!(r.ranges.is_none());
}

/// Past `MAX_OPEN` open ranges a push opens nothing, and the pops that match those pushes
/// close nothing real: the ranges opened before stay attributed correctly.
#[test]
fn pushes_past_the_open_limit_are_skipped_and_their_pops_too() {
    let mut recs = strings();
    recs.push(push(1, 10, 1)); // A
    for i in 0..MAX_OPEN as u64 + 9 {
        recs.push(push(2 + i, 10, 2)); // B, the last 10 skipped
    }
    let t = 2 + MAX_OPEN as u64 + 9;
    for i in 0..MAX_OPEN as u64 + 9 {
        recs.push(pop(t + i, 10));
    }
    recs.push(alloc(t * 3, 10, 0x100, 6)); // A is innermost again
    recs.push(pop(t * 3 + 1, 10));
    recs.push(alloc(t * 3 + 2, 10, 0x200, 1));
    let res = ranges(recs);
    assert_eq!(
        bytes(&res),
        vec![row("<no range>", None, 1, 1, 1), row("A", None, 6, 6, 6)]
    );
    assert_eq!(res.nvtx.unmatched, 0);
}
