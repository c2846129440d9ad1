//! End to end on the real thing: `gpumemprof whatif` replays one recorded run of the
//! unmodified torch package (see `torch_package`) under other allocator configurations and
//! device sizes, and each prediction must equal what PyTorch itself measured when the
//! same program really ran that way, to the byte (`torch.cuda.memory_stats()`): a
//! fragmentation out-of-memory that expandable segments avoid
//! (`tests/programs/torch_oom.py`), and a training loop (`tests/programs/torch_train.py`)
//! under several configurations and on smaller devices.

use std::path::Path;

use gpumemprof_tests::profiled::{report_text, scratch};
use gpumemprof_tests::source_line_of;
use gpumemprof_tests::torch_job::{stat, Job};
use serde_json::Value;

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

const MIB: u64 = 1 << 20;
const ES: &str = "expandable_segments:True";

/// `gpumemprof whatif TRACE --json EXTRA...`, checked against docs/schemas/whatif.schema.json.
fn report(cmd: &str, trace: &Path, extra: &[&str]) -> Value {
    let v = gpumemprof_tests::profiled::report(cmd, trace, extra);
    schema::assert_valid(cmd, &v);
    v
}

/// PyTorch's allocated and reserved peaks on a line of a program's.
fn peaks(line: &Value) -> (u64, u64) {
    (
        stat(line, "allocated_bytes.all.peak"),
        stat(line, "reserved_bytes.all.peak"),
    )
}

/// A prediction's allocated and reserved peaks.
fn predicted(r: &Value) -> (u64, u64) {
    let get = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("no {k} in {r}"));
    (get("peak_allocated_bytes"), get("peak_reserved_bytes"))
}

/// Replaying the job's own policy reproduced it, event for event.
fn faithful(r: &Value, events: u64, ooms: u64) {
    let f = &r["fidelity"];
    assert_eq!(f["matched"], true, "{f}");
    assert_eq!(
        (
            &f["tensor_events"],
            &f["reserved_matched"],
            &f["allocated_matched"],
            &f["out_of_memory_errors"],
            &f["out_of_memory_matched"]
        ),
        (
            &Value::from(events),
            &Value::from(events),
            &Value::from(events),
            &Value::from(ooms),
            &Value::from(ooms)
        )
    );
}

#[test]
fn a_fragmentation_oom_is_replayed_and_expandable_segments_would_have_fitted() {
    let dir = scratch("torch_whatif_oom");
    let trace = dir.join("default.trace");
    let job = Job::run_exiting("torch_oom.py", &["256"], &[], Some(&trace), 1);
    // The job's own policy, replayed: the same out-of-memory error at the same line.
    let own = report("whatif", &trace, &[]);
    // 96 allocations and 48 frees of the fill, the kept half freed at exit: 192.
    faithful(&own, 192, 1);
    assert_eq!(own["fits"], false);
    assert_eq!(own["job_configuration"], "");
    let oom = &own["first_oom"];
    assert_eq!(oom["size_bytes"], 256 * MIB);
    assert_eq!(oom["tried_to_allocate_bytes"], 256 * MIB);
    assert_eq!(oom["as_recorded"], true);
    assert_eq!(oom["site"]["file"], "tests/programs/torch_oom.py");
    assert_eq!(
        oom["site"]["line"],
        source_line_of("tests/programs/torch_oom.py", "# REQUEST")
    );
    let before = job.event("before");
    assert_eq!(predicted(&own), peaks(before));

    // With expandable segments: what the real run with them measured.
    let real = Job::run(
        "torch_oom.py",
        &["256"],
        &[("PYTORCH_CUDA_ALLOC_CONF", ES)],
        None,
    );
    let fitted = real.event("fitted");
    let es = report("whatif", &trace, &["--set", ES]);
    assert_eq!(es["configuration"], ES);
    assert_eq!(es["fits"], true);
    assert_eq!(es["first_oom"], Value::Null);
    assert_eq!(predicted(&es), peaks(fitted));
    assert_eq!(es["peak_reserved_bytes"], 1020 * MIB);
    // Beside it, the job's own policy as replayed.
    assert_eq!(es["job"]["fits"], false);
    let text = report_text("whatif", &trace, &["--set", ES]);
    assert!(
        text.contains("What if: with expandable_segments:True (the job ran with PyTorch's default allocator configuration)")
            && text.contains("  fits                      no: out of memory, as the job was   yes\n")
            && text.contains(&format!(
                "  the job's policy ran out of memory asking for 256.0 MiB (tried to allocate \
                 256.0 MiB) from main at tests/programs/torch_oom.py:{}\n",
                source_line_of("tests/programs/torch_oom.py", "# REQUEST")
            ))
            && text.contains(
                "Fidelity: replaying the job's own policy reproduced reserved and allocated at all 192 tensor events, and the job's 1 out-of-memory error at the same request."
            ),
        "{text}"
    );

    // And back: the expandable run's trace, replayed without them on the same 1 GiB device,
    // runs out of memory where the default run did. (That run had no out-of-memory error
    // and the tests sample no NVML, so its trace does not know the device's size: without
    // --device-memory nothing is ever out of memory, and a note says so.)
    let es_trace = dir.join("expandable.trace");
    Job::run(
        "torch_oom.py",
        &["256"],
        &[("PYTORCH_CUDA_ALLOC_CONF", ES)],
        Some(&es_trace),
    );
    let off = ["--set", "expandable_segments:False"];
    let unknown = report("whatif", &es_trace, &off);
    assert_eq!(unknown["devices"][0]["device_memory_bytes"], Value::Null);
    assert_eq!(unknown["fits"], true);
    assert!(unknown["notes"]
        .to_string()
        .contains("give it with --device-memory"));
    let back = report(
        "whatif",
        &es_trace,
        &[off[0], off[1], "--device-memory", "1GiB"],
    );
    faithful(&back, 194, 0);
    assert_eq!(back["job_configuration"], ES);
    assert_eq!(back["configuration"], "");
    assert_eq!(back["fits"], false);
    assert_eq!(back["first_oom"]["size_bytes"], 256 * MIB);
    assert_eq!(back["first_oom"]["as_recorded"], false);
    assert_eq!(predicted(&back), peaks(before));
}

#[test]
fn a_training_loops_peaks_under_other_configurations_and_devices_are_predicted_from_one_run() {
    let dir = scratch("torch_whatif_train");
    let trace = dir.join("train.trace");
    let recorded = Job::run("torch_train.py", &["4"], &[], Some(&trace));
    let own = report("whatif", &trace, &[]);
    faithful(&own, 342, 0);
    assert_eq!(predicted(&own), peaks(recorded.event("end")));
    // Each configuration, run for real, against the prediction from the one trace.
    for conf in [ES, "max_split_size_mb:64", "roundup_power2_divisions:4"] {
        let real = Job::run(
            "torch_train.py",
            &["4"],
            &[("PYTORCH_CUDA_ALLOC_CONF", conf)],
            None,
        );
        let r = report("whatif", &trace, &["--set", conf]);
        assert_eq!(predicted(&r), peaks(real.event("end")), "{conf}");
    }
    // Expandable segments map 20 MiB pages: 50 MiB where the default reserved 42 MiB.
    let es = report("whatif", &trace, &["--set", ES]);
    assert_eq!(es["peak_reserved_bytes"], 50 * MIB);
    // On a device of 40 MiB it still fits, emptying its cache 7 times on the way, as the
    // real run on such a device did.
    let capacity = (40 * MIB).to_string();
    let small = [("SIMCUDA_CAPACITY", capacity.as_str())];
    let real = Job::run("torch_train.py", &["4"], &small, None);
    let r = report("whatif", &trace, &["--device-memory", "40MiB"]);
    assert_eq!(r["fits"], true);
    assert_eq!(predicted(&r), peaks(real.event("end")));
    assert_eq!(
        r["alloc_retries"].as_u64(),
        Some(stat(real.event("end"), "num_alloc_retries"))
    );
    assert_eq!(r["alloc_retries"], 7);
    // On 36 MiB it does not: cuBLAS's 32 MiB workspace is the request PyTorch refused.
    let capacity = (36 * MIB).to_string();
    let tiny = [("SIMCUDA_CAPACITY", capacity.as_str())];
    let real = Job::run_exiting("torch_train.py", &["4"], &tiny, None, 1);
    assert!(
        real.stderr()
            .contains("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB."),
        "{}",
        real.stderr()
    );
    let r = report("whatif", &trace, &["--device-memory", "36MiB"]);
    assert_eq!(r["fits"], false);
    assert_eq!(r["first_oom"]["tried_to_allocate_bytes"], 32 * MIB);
    assert_eq!(r["first_oom"]["as_recorded"], false);
}
