//! End to end on the real thing: the unmodified torch package (see `torch_package`) trains an
//! MLP with Adam on the simulated GPU (`tests/programs/torch_train.py`) under the shim, and
//! what gpumemprof says must be what PyTorch says: `torch.cuda.memory_stats()` after every
//! step, and PyTorch's own snapshot (`_dump_snapshot`) of the same run.

use std::path::Path;

use gpumemprof_tests::profiled::{analyzer, report, scratch, succeeded};
use gpumemprof_tests::torch_job::{snapshot_json, stat, trace_seconds, Job};
use serde_json::Value;

const STEPS: &str = "4";

/// Our torch-snapshot export of `trace` as it stood at `seconds`, as JSON.
fn our_snapshot_at(trace: &Path, seconds: &str, out: &Path) -> Value {
    succeeded(
        analyzer()
            .args([
                "export",
                "--format",
                "torch-snapshot",
                "-q",
                "-f",
                "--to",
                seconds,
            ])
            .arg(trace)
            .arg("-o")
            .arg(out),
        "gpumemprof export --format torch-snapshot",
    );
    snapshot_json(out)
}

/// A snapshot's segments as (address, total size, blocks as (size, state)), in address
/// order: what both snapshots must agree on.
fn layout(snapshot: &Value) -> Vec<(u64, u64, Vec<(u64, String)>)> {
    let mut segments: Vec<_> = snapshot["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| {
            let blocks = s["blocks"]
                .as_array()
                .expect("blocks")
                .iter()
                .map(|b| {
                    (
                        b["size"].as_u64().expect("block size"),
                        b["state"].as_str().expect("block state").to_owned(),
                    )
                })
                .collect();
            (
                s["address"].as_u64().expect("address"),
                s["total_size"].as_u64().expect("total_size"),
                blocks,
            )
        })
        .collect();
    segments.sort();
    segments
}

/// Bytes of the blocks in `state` (PyTorch's `active_allocated`: its allocated bytes).
fn bytes_in(layout: &[(u64, u64, Vec<(u64, String)>)], state: &str) -> (u64, u64) {
    let blocks = layout.iter().flat_map(|s| &s.2).filter(|b| b.1 == state);
    (blocks.clone().map(|b| b.0).sum(), blocks.count() as u64)
}

#[test]
fn every_step_agrees_with_torch_memory_stats_and_pytorchs_own_snapshot() {
    let dir = scratch("torch_train_agrees");
    let trace = dir.join("train.trace");
    let theirs = dir.join("pytorch.pickle");
    let job = Job::run(
        "torch_train.py",
        &[STEPS, "--snapshot", theirs.to_str().unwrap()],
        &[],
        Some(&trace),
    );
    // After each step, the trace as it stood then: PyTorch's allocated and reserved bytes,
    // its live tensors and its segments.
    let steps: Vec<&Value> = job.events("step").collect();
    assert_eq!(steps.len(), 4);
    for (i, line) in steps.iter().enumerate() {
        let ours = layout(&our_snapshot_at(
            &trace,
            &trace_seconds(&trace, line),
            &dir.join(format!("step{i}.pickle")),
        ));
        let reserved: u64 = ours.iter().map(|s| s.1).sum();
        let (allocated, tensors) = bytes_in(&ours, "active_allocated");
        let step = format!("step {i}");
        assert_eq!(
            allocated,
            stat(line, "allocated_bytes.all.current"),
            "{step}"
        );
        assert_eq!(tensors, stat(line, "allocation.all.current"), "{step}");
        assert_eq!(reserved, stat(line, "reserved_bytes.all.current"), "{step}");
        assert_eq!(
            ours.len() as u64,
            stat(line, "segment.all.current"),
            "{step}"
        );
    }
    // PyTorch's own snapshot, taken after the last step: the same segments at the same
    // addresses, holding the same blocks in the same states.
    let at_dump = job.event("snapshot");
    let ours = our_snapshot_at(
        &trace,
        &trace_seconds(&trace, at_dump),
        &dir.join("ours.pickle"),
    );
    assert_eq!(layout(&ours), layout(&snapshot_json(&theirs)));
    // The whole run: the allocator's peaks, and every tensor it handed out by the last step.
    let last = steps[3];
    let summary = report("summary", &trace, &[]);
    let pytorch = &summary["allocators"][0];
    assert_eq!(pytorch["framework"], "pytorch");
    assert_eq!(
        pytorch["allocated_peak_bytes"].as_u64(),
        Some(stat(last, "allocated_bytes.all.peak"))
    );
    assert_eq!(
        pytorch["reserved_peak_bytes"].as_u64(),
        Some(stat(last, "reserved_bytes.all.peak"))
    );
    assert_eq!(
        pytorch["tensor_allocations"].as_u64(),
        Some(stat(last, "allocation.all.allocated"))
    );
    let tensors = summary["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["kind"] == "tensor")
        .expect("a tensor row");
    assert_eq!(
        tensors["peak_bytes"].as_u64(),
        Some(stat(last, "allocated_bytes.all.peak"))
    );
}
