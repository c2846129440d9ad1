//! End to end on the real thing: the unmodified torch package (see `torch_package`) dies of
//! `torch.OutOfMemoryError` on a simulated GPU of 1 GiB (`tests/programs/torch_oom.py`:
//! 48 live tensors of 8 MiB in 24 segments of 20 MiB, then a request too large for what is
//! left), and `gpumemprof oom` tells it in PyTorch's terms: one error (the allocator's
//! refusal, with its two failed CUDA calls as its attempts), PyTorch's own message word for
//! word, and PyTorch's own figures.

use std::path::Path;

use gpumemprof_tests::profiled::{analyzer, report_text, scratch, succeeded};
use gpumemprof_tests::source_line_of;
use gpumemprof_tests::torch_job::{stat, Job};
use serde_json::{json, Value};

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

const MIB: u64 = 1 << 20;

/// `gpumemprof CMD TRACE --json EXTRA...`; `oom`'s checked against its schema.
fn report(cmd: &str, trace: &Path, extra: &[&str]) -> Value {
    let v = gpumemprof_tests::profiled::report(cmd, trace, extra);
    if cmd == "oom" {
        schema::assert_valid("oom", &v);
    }
    v
}
const SCRIPT: &str = "tests/programs/torch_oom.py";

/// What PyTorch's `OutOfMemoryError` said, from the traceback's last line, after
/// "CUDA out of memory. ".
fn pytorchs_message(job: &Job) -> String {
    let stderr = job.stderr();
    let line = stderr
        .lines()
        .rfind(|l| l.starts_with("torch.OutOfMemoryError: "))
        .unwrap_or_else(|| panic!("no OutOfMemoryError in:\n{stderr}"));
    line.strip_prefix("torch.OutOfMemoryError: CUDA out of memory. ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned()
}

/// The job under the shim with NVML sampled (its process memory is in PyTorch's message).
fn dies_of_oom(test: &str, request_mib: &str, env: &[(&str, &str)]) -> (Job, std::path::PathBuf) {
    let dir = scratch(test);
    let trace = dir.join("oom.trace");
    let mut env = env.to_vec();
    env.push(("GPUMEMPROF_NVML_MS", "500"));
    let job = Job::run_exiting("torch_oom.py", &[request_mib], &env, Some(&trace), 1);
    (job, trace)
}

/// The checks both allocator modes share: one error, PyTorch's message and figures.
fn one_error_in_pytorchs_words(job: &Job, trace: &Path, attempts_api: &str) -> Value {
    assert!(
        job.stderr()
            .contains("1 allocation failed for lack of memory: see why with: gpumemprof oom"),
        "{}",
        job.stderr()
    );
    let oom = report("oom", trace, &[]);
    assert_eq!(oom["failure_counts"]["out_of_memory"], 1);
    let f = &oom["failure"];
    assert_eq!(
        (&f["api"], &f["kind"], &f["outcome"]),
        (
            &Value::from("c10::reportOutOfMemoryToProfiler"),
            &Value::from("tensor"),
            &Value::from("final")
        )
    );
    assert_eq!((&f["stream"], &f["pool"]), (&Value::Null, &Value::Null));
    assert_eq!(f["attempts"]["count"], 2);
    assert_eq!(f["attempts"]["api"], attempts_api);
    assert_eq!(f["site"]["function"], "main");
    assert_eq!(f["site"]["file"], SCRIPT);
    assert_eq!(f["site"]["line"], source_line_of(SCRIPT, "# REQUEST"));
    let t = &oom["pytorch"];
    assert_eq!(t["message"].as_str(), Some(pytorchs_message(job).as_str()));
    // Worded as the package the job ran, read from its version.py.
    let version_py = std::fs::read_to_string(
        gpumemprof_tests::torch_package::package()
            .site
            .join("torch/version.py"),
    )
    .expect("torch/version.py");
    assert!(
        version_py.contains(&format!(
            "__version__ = '{}'",
            t["torch_version"].as_str().expect("torch_version")
        )),
        "{version_py}"
    );
    // PyTorch's figures just before the request.
    let before = job.event("before");
    assert_eq!(
        t["allocated_bytes"].as_u64(),
        Some(stat(before, "allocated_bytes.all.current"))
    );
    assert_eq!(
        t["tensors"].as_u64(),
        Some(stat(before, "allocation.all.current"))
    );
    assert_eq!(oom["nvml"]["at_failure"], true);
    let summary = report("summary", trace, &[]);
    assert_eq!(summary["out_of_memory_errors"], 1);
    assert_eq!(summary["failed_allocations"], 3);
    let analyze = report("analyze", trace, &[]);
    let finding = analyze["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|x| x["heuristic"] == "out_of_memory")
        .expect("an out_of_memory finding");
    assert_eq!(finding["count"], 1);
    oom
}

#[test]
fn a_fragmentation_oom_is_one_error_with_pytorchs_own_message() {
    let (job, trace) = dies_of_oom("torch_oom_default", "256", &[]);
    let oom = one_error_in_pytorchs_words(&job, &trace, "cudaMalloc");
    // Every segment holds a live tensor: freeing the cache gave nothing back.
    let before = job.event("before");
    assert_eq!(
        oom["pytorch"]["reserved_bytes"].as_u64(),
        Some(stat(before, "reserved_bytes.all.current"))
    );
    assert_eq!(oom["failure"]["attempts"]["size"], 256 * MIB);
    assert_eq!(oom["pytorch"]["tried_to_allocate_bytes"], 256 * MIB);
    // 576 MiB reserved but unallocated and 64 MiB free: enough, but in 4 MiB pieces.
    assert_eq!(oom["cause"], "fragmentation");
    assert!(oom["hint"]
        .as_str()
        .unwrap()
        .contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
    let text = report_text("oom", &trace, &[]);
    assert!(
        text.contains(&format!(
            "PyTorch's error: CUDA out of memory. {}",
            pytorchs_message(&job)
        )) && text.contains("before it, on this thread: 2 cudaMalloc calls of 256.0 MiB failed")
            && text.contains("failure 1 of 1 out of memory"),
        "{text}"
    );
    // Each one-line site names the op that made its tensors before the user's line: the 48
    // activations kept, 8 MiB each, made by `torch.empty` in `fill`'s list comprehension.
    let fill = gpumemprof_tests::source_line_of("tests/programs/torch_oom.py", "# FILL");
    assert!(
        text.contains(&format!(
            "  tensors #1 384.0 MiB (402653184 B) in 48 tensors of aten::empty_memory_format \
             from fill.<locals>.<listcomp> at tests/programs/torch_oom.py:{fill} (stack "
        )) && text.contains(&format!(
            "   384.0 MiB  48 tensors  aten::empty_memory_format < fill.<locals>.<listcomp> \
             (torch_oom.py:{fill}) < fill (torch_oom.py:{fill}) < main"
        )),
        "{text}"
    );
    // Kinds at the allocated peak, in `fill`: the 48 activations it dropped are
    // temporaries; the 48 kept, freed only by the interpreter's teardown after the error,
    // were held to the end: "other" (no backward pass ran), not temporaries.
    let summary = report("summary", &trace, &[]);
    let kinds: Vec<(String, u64, u64)> = (summary["allocators"][0]["kinds_at_peak"]
        .as_array()
        .expect("kinds"))
    .iter()
    .filter(|k| k["bytes"] != 0)
    .map(|k| {
        (
            k["kind"].as_str().unwrap().to_owned(),
            k["bytes"].as_u64().unwrap(),
            k["tensors"].as_u64().unwrap(),
        )
    })
    .collect();
    assert_eq!(
        kinds,
        [
            ("temporaries".to_owned(), 384 * MIB, 48),
            ("other".to_owned(), 384 * MIB, 48)
        ]
    );
    // `track`: one critical alert for the one error, PyTorch's refusal of the block, not
    // one per failed cudaMalloc before it.
    let t = report("track", &trace, &[]);
    let ooms: Vec<(&Value, &Value)> = (t["alerts"].as_array().unwrap().iter())
        .filter(|a| a["cause"] == "out_of_memory")
        .map(|a| (&a["level"], &a["requested_bytes"]))
        .collect();
    assert_eq!(ooms, [(&json!("critical"), &json!(256 * MIB))]);
    // What would have avoided it: expandable segments, at the reserved peak a real run
    // with them reaches (tests/e2e_torch_whatif.rs runs it: 1020 MiB); no max_split_size.
    let r = &oom["remedies"];
    let tried: Vec<(&Value, &Value, &Value)> = (r["tried"].as_array().unwrap().iter())
        .map(|t| (&t["set"], &t["avoids"], &t["peak_reserved_bytes"]))
        .collect();
    assert_eq!(
        tried,
        [
            (
                &json!("expandable_segments:True"),
                &json!(true),
                &json!(1020 * MIB)
            ),
            (
                &json!("max_split_size_mb:128"),
                &json!(false),
                &json!(960 * MIB)
            ),
            (
                &json!("max_split_size_mb:256"),
                &json!(false),
                &json!(960 * MIB)
            ),
            (
                &json!("max_split_size_mb:512"),
                &json!(false),
                &json!(960 * MIB)
            ),
            (
                &json!("garbage_collection_threshold:0.8,per_process_memory_fraction:0.99"),
                &json!(false),
                &json!(960 * MIB)
            ),
        ]
    );
    assert_eq!(
        (
            &r["fidelity_matched"],
            &r["request_bytes"],
            &r["live_tensor_bytes"],
            &r["exceeds_by_bytes"]
        ),
        (
            &json!(true),
            &json!(256 * MIB),
            &json!(384 * MIB),
            &Value::Null
        )
    );
    let avoided = "Would have avoided this out-of-memory error: expandable_segments:True \
                   (reserved peak 1020.0 MiB, 0 device synchronizations).";
    assert!(r["verdict"].as_str().unwrap().starts_with(avoided), "{r}");
    assert!(text.contains(avoided), "{text}");
    // The HTML report says it under the verdict.
    let html = dir_of(&trace).join("oom.html");
    succeeded(
        analyzer()
            .arg("report")
            .arg(&trace)
            .arg("-o")
            .arg(&html)
            .arg("-f")
            .arg("-q"),
        "gpumemprof report",
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(avoided), "no remedies in the HTML report");
}

fn dir_of(trace: &Path) -> &Path {
    trace.parent().expect("the trace's folder")
}

#[test]
fn with_expandable_segments_the_same_request_fits_and_a_larger_one_is_one_error() {
    let es = [("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")];
    // The 256 MiB that did not fit above: the unused pages are given back, and it fits.
    let dir = scratch("torch_oom_expandable_fits");
    let trace = dir.join("fits.trace");
    let job = Job::run("torch_oom.py", &["256"], &es, Some(&trace));
    let fitted = job.event("fitted");
    assert_eq!(stat(fitted, "num_ooms"), 0);
    let summary = report("summary", &trace, &[]);
    assert_eq!(summary["out_of_memory_errors"], 0);
    assert_eq!(
        summary["allocators"][0]["reserved_peak_bytes"].as_u64(),
        Some(stat(fitted, "reserved_bytes.all.current"))
    );
    // 700 MiB does not fit with 384 MiB live: PyTorch's expandable-segments wording, and
    // the failed cuMemCreate calls are its attempts, not errors of their own.
    let (job, trace) = dies_of_oom("torch_oom_expandable", "700", &es);
    let oom = one_error_in_pytorchs_words(&job, &trace, "cuMemCreate");
    let message = oom["pytorch"]["message"].as_str().unwrap();
    assert!(
        message.contains("expandable_segments is enabled."),
        "{message}"
    );
    // Freeing its cache before the refusal unmapped 20 MiB of the 780 MiB reserved before
    // the request: the refusal's own figure, which its message gives.
    assert_eq!(
        stat(job.event("before"), "reserved_bytes.all.current"),
        780 * MIB
    );
    assert_eq!(oom["pytorch"]["reserved_bytes"], 760 * MIB);
    assert!(
        message.contains("this process has 760.00 MiB memory in use"),
        "{message}"
    );
    assert_eq!(oom["cause"], "live_data");
    assert_eq!(oom["failure_counts"]["kept"], 1);
    // No allocator setting fits 384 MiB of live tensors and 700 MiB more in 1 GiB.
    let r = &oom["remedies"];
    assert_eq!(r["job_configuration"], "expandable_segments:True");
    assert_eq!(r["tried"].as_array().unwrap().len(), 4);
    assert!(r["tried"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["avoids"] == false));
    assert_eq!(
        (
            &r["live_tensor_bytes"],
            &r["available_bytes"],
            &r["exceeds_by_bytes"]
        ),
        (&json!(384 * MIB), &json!(1024 * MIB), &json!(60 * MIB))
    );
    assert!(
        r["verdict"].as_str().unwrap().contains(
            "would have avoided it: the live tensors and the 700.0 MiB request need 1.1 GiB, \
             60.0 MiB more than the 1.0 GiB the device had for PyTorch"
        ),
        "{r}"
    );
    // At the failure NVML saw the 760 MiB mapped and the 260 MiB of handles PyTorch had
    // created for the request but not mapped yet: the hooks recorded those handles too, so
    // nothing is "not seen by the hooks".
    let summary = report("summary", &trace, &[]);
    let nvml = &summary["nvml"][0];
    assert_eq!(
        (
            &nvml["peak_used_bytes"],
            &nvml["tracked_at_peak_bytes"],
            &nvml["untracked_at_peak_bytes"]
        ),
        (&json!(1020 * MIB), &json!(1020 * MIB), &json!(0))
    );
}
