//! End to end on the real thing: the Python package's `gpumemprof.scope`, `live()` and
//! `peak()` (python/gpumemprof/_api.py, through the shim's C API) in a program of the
//! unmodified torch package (see `torch_package`): the figures equal PyTorch's own
//! (`torch.cuda.memory_allocated()`, `max_memory_allocated()` since the scope began), the
//! scopes are ranges every range report shows, and without the shim the same program runs
//! with no figures and no error.

use gpumemprof_tests::profiled::{report, scratch};
use gpumemprof_tests::repo_root;
use gpumemprof_tests::torch_job::Job;
use gpumemprof_tests::torch_package::package;
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// The checkout's Python package importable beside the torch package.
fn pythonpath() -> String {
    format!(
        "{}:{}",
        package().site.display(),
        repo_root().join("python").display()
    )
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn scopes_and_figures_agree_with_pytorch_and_show_as_ranges() {
    let dir = scratch("torch_scope");
    let trace = dir.join("scope.trace");
    let path = pythonpath();
    let job = Job::run(
        "torch_scope.py",
        &[],
        &[("PYTHONPATH", &path)],
        Some(&trace),
    );
    // Inside "forward": 4 MiB kept, 8 + 12 made, 8 freed.
    let inside = job.event("inside");
    let (ours, torch) = (&inside["ours"], &inside["torch"]);
    assert_eq!(n(&ours["live"]["tensors"]), n(&torch["allocated"]));
    assert_eq!(n(&ours["live"]["tensors"]), 16 * MIB);
    assert_eq!(n(&ours["live"]["device"]), n(&torch["reserved"]));
    assert_eq!(
        n(&ours["peak"]["scope_tensors"]),
        n(&torch["max_allocated_since_scope"])
    );
    assert_eq!(n(&ours["peak"]["scope_tensors"]), 24 * MIB);
    // The process's peak is not reset by PyTorch's reset: 24 MiB, at least what it had.
    assert_eq!(n(&ours["peak"]["tensors"]), 24 * MIB);
    assert_eq!(n(&ours["peak"]["device"]), 32 * MIB);
    assert!(n(&ours["peak"]["tensors"]) >= n(&torch["max_allocated_before_scope"]));
    // Out of the scope: the scope's peak is the process's again.
    let after = job.event("after");
    assert_eq!(n(&after["ours"]["live"]["tensors"]), 4 * MIB);
    assert_eq!(n(&after["ours"]["peak"]["scope_tensors"]), 24 * MIB);
    // The decorated function is a scope too: 4 MiB kept and its 2 MiB.
    let step = job.event("step");
    assert_eq!(n(&step["ours"]["peak"]["scope_tensors"]), 6 * MIB);
    assert_eq!(
        n(&step["ours"]["peak"]["scope_tensors"]),
        n(&step["torch"]["max_allocated"])
    );
    // Both scopes are NVTX ranges of the trace; "forward" made the 12 MiB segment (range
    // reports count memory from CUDA: "step" took its 2 MiB from PyTorch's cache).
    let summary = report("summary", &trace, &["--by", "range"]);
    let by_range = &summary["by_range"];
    assert_eq!(
        (n(&by_range["nvtx"]["pushes"]), n(&by_range["nvtx"]["pops"])),
        (2, 2)
    );
    let forward = (by_range["ranges"].as_array().unwrap().iter())
        .find(|r| r["range"] == "forward")
        .unwrap_or_else(|| panic!("no range forward in {by_range}"));
    assert_eq!(n(&forward["bytes_allocated"]), 12 * MIB);
    // A budget on the scope, as CI gates one.
    let over = gpumemprof_tests::profiled::analyzer()
        .args(["summary", "-q", "--max-range-peak", "forward=8MiB"])
        .arg(&trace)
        .output()
        .expect("run gpumemprof");
    assert_eq!(over.status.code(), Some(4));
}

#[test]
fn without_the_shim_scopes_do_nothing_and_there_are_no_figures() {
    let path = pythonpath();
    let job = Job::run("torch_scope.py", &[], &[("PYTHONPATH", &path)], None);
    for event in ["inside", "after", "step"] {
        let line = job.event(event);
        assert_eq!(line["ours"]["live"], Value::Null, "{event}");
        assert_eq!(line["ours"]["peak"], Value::Null, "{event}");
    }
    assert_eq!(n(&job.event("inside")["torch"]["allocated"]), 16 * MIB);
}
