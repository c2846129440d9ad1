//! End to end on the real thing: the unmodified torch package (see `torch_package`) trains an
//! MLP with Adam on the simulated GPU (`tests/programs/torch_train.py`) under the shim, and
//! what gpumemprof says must be what PyTorch says: `torch.cuda.memory_stats()` after every
//! step, and PyTorch's own snapshot (`_dump_snapshot`) of the same run; and what it shows
//! must read in PyTorch's terms: the leak a normal exit hides, stacks of ops and lines.

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

/// The function names of a report's frames, with their files where they have one.
fn frames(group: &Value) -> Vec<String> {
    group["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| {
            match (
                f["function"].as_str(),
                f["file"].as_str(),
                f["line"].as_u64(),
            ) {
                (Some(name), Some(file), Some(line)) => format!("{name} at {file}:{line}"),
                (Some(name), _, _) => name.to_owned(),
                _ => format!("{f}"),
            }
        })
        .collect()
}

/// The leak the loop has (one activation per step kept in a module-level list) is freed by
/// the interpreter's teardown at exit: `leaks` still lists it, and only it, at the line that
/// made the activation, read as a PyTorch user reads a stack.
#[test]
fn leaks_at_a_normal_exit_are_what_the_program_kept_until_its_end() {
    let dir = scratch("torch_train_leaks");
    let trace = dir.join("train.trace");
    let job = Job::run("torch_train.py", &[STEPS], &[], Some(&trace));
    let leaks = report("leaks", &trace, &[]);
    // 4 steps: 4 outputs of 64 x 128 float32, 32 KiB each.
    assert_eq!(leaks["total_count"], 4);
    assert_eq!(leaks["total_bytes"], 4 * 32768);
    assert_eq!(leaks["level"], "tensors");
    let teardown = &leaks["teardown"];
    assert_eq!(teardown["function"], "Py_FinalizeEx");
    assert_eq!(teardown["freed_count"], 4);
    assert_eq!(teardown["freed_bytes"], 4 * 32768);
    // After the last step's report, before the process ended.
    let last_step = job.events("step").last().expect("a step line");
    let since: f64 = trace_seconds(&trace, last_step).parse().expect("seconds");
    assert!(teardown["start_ns"].as_f64().expect("start_ns") > since * 1e9);
    let groups = leaks["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1);
    let g = &groups[0];
    assert_eq!(
        (g["count"].as_u64(), g["freed_at_exit_count"].as_u64()),
        (Some(4), Some(4))
    );
    let forward =
        gpumemprof_tests::source_line_of("tests/programs/torch_train.py", "return self.layers(x)");
    let step =
        gpumemprof_tests::source_line_of("tests/programs/torch_train.py", "out = model(batch)");
    assert_eq!(
        frames(g),
        vec![
            "aten::addmm".to_owned(),
            "aten::linear".to_owned(),
            "Linear.forward at torch/nn/modules/linear.py:134".to_owned(),
            "Sequential.forward at torch/nn/modules/container.py:259".to_owned(),
            format!("MLP.forward at tests/programs/torch_train.py:{forward}"),
            format!("train_step at tests/programs/torch_train.py:{step}"),
            format!(
                "main at tests/programs/torch_train.py:{}",
                gpumemprof_tests::source_line_of(
                    "tests/programs/torch_train.py",
                    "        train_step(model, opt, batch)"
                )
            ),
            format!(
                "<module> at tests/programs/torch_train.py:{}",
                gpumemprof_tests::source_line_of("tests/programs/torch_train.py", "    main()")
            ),
        ]
    );
    assert_eq!(g["site"]["function"], "MLP.forward");
    assert_eq!(g["frames"][0]["role"], "op");
    // The text says it in words.
    let text = gpumemprof_tests::profiled::report_text("leaks", &trace, &[]);
    assert!(
        text.contains("128.0 KiB (131072 B) in 4 tensors live when the program's code finished")
            && text.contains("freed only by the interpreter's teardown (Py_FinalizeEx) at exit"),
        "{text}"
    );
}

/// At the peak, every stack reads as a PyTorch user reads it: no allocator, dispatcher or
/// interpreter frame, short names, package-relative paths; the optimizer's state at Adam's
/// own lines, and the backward pass's tensors at their autograd nodes.
#[test]
fn stacks_at_the_peak_read_in_pytorchs_terms() {
    let dir = scratch("torch_train_stacks");
    let trace = dir.join("train.trace");
    Job::run("torch_train.py", &[STEPS], &[], Some(&trace));
    let peak = report("peak", &trace, &["--top", "0"]);
    let sites = peak["peaks"][0]["sites"].as_array().expect("sites");
    assert_eq!(peak["peaks"][0]["kind"], "tensor");
    let all: Vec<Vec<String>> = sites.iter().map(frames).collect();
    for f in all.iter().flatten() {
        assert!(
            f.len() <= 200 && !f.contains("c10::") && !f.contains("_PyEval"),
            "{f}"
        );
        assert!(
            !f.contains("/site-packages/") && !f.contains("libc.so"),
            "{f}"
        );
    }
    let step = gpumemprof_tests::source_line_of("tests/programs/torch_train.py", "opt.step()");
    let adam = |line: u32| {
        vec![
            "aten::zeros_like".to_owned(),
            format!("Adam._init_group at torch/optim/adam.py:{line}"),
            "Adam.step at torch/optim/adam.py:239".to_owned(),
            format!("train_step at tests/programs/torch_train.py:{step}"),
        ]
    };
    // exp_avg and exp_avg_sq: one tensor per parameter (6 parameters), 1,839,616 bytes.
    for line in [179, 183] {
        let want = adam(line);
        let site = sites
            .iter()
            .find(|s| frames(s).starts_with(&want))
            .unwrap_or_else(|| panic!("no site {want:?} in {all:#?}"));
        assert_eq!(
            (site["bytes"].as_u64(), site["count"].as_u64()),
            (Some(1839616), Some(6))
        );
    }
    // Tensors made on autograd's backward thread: no line of the user's, the node that
    // made them is their site.
    let backward = sites
        .iter()
        .find(|s| frames(s) == ["aten::mm", "AddmmBackward0"])
        .unwrap_or_else(|| panic!("no AddmmBackward0 site in {all:#?}"));
    assert_eq!(backward["site"]["role"], "autograd_node");
    assert_eq!(backward["site"]["function"], "AddmmBackward0");
    // cuBLAS's workspace, made by the first matrix product of the backward pass.
    assert!(
        all.contains(&vec![
            "cuBLAS workspace".to_owned(),
            "aten::mm".to_owned(),
            "AddmmBackward0".to_owned()
        ]),
        "{all:#?}"
    );
}
