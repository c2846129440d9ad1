//! End to end on the real thing: the unmodified torch package (see `torch_package`) trains an
//! MLP with Adam on the simulated GPU (`tests/programs/torch_train.py`) under the shim, and
//! what gpumemprof says must be what PyTorch says: `torch.cuda.memory_stats()` after every
//! step, and PyTorch's own snapshot (`_dump_snapshot`) of the same run; and what it shows
//! must read in PyTorch's terms: the leak a normal exit hides, stacks of ops and lines.

use std::path::Path;

// Only `assert_valid` is used here.
#[allow(dead_code)]
#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

use gpumemprof_tests::profiled::{analyzer, report, scratch, succeeded};
use gpumemprof_tests::torch_job::{
    assert_peaks_are_pytorchs, snapshot_json, stat, trace_seconds, Job,
};
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

/// A segment as `layout` gives it: address, size, and its blocks (size, state).
type Segment = (u64, u64, Vec<(u64, String)>);

/// A snapshot's segments as (address, total size, blocks as (size, state)), in address
/// order: what both snapshots must agree on.
fn layout(snapshot: &Value) -> Vec<Segment> {
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
fn bytes_in(layout: &[Segment], state: &str) -> (u64, u64) {
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
    assert_peaks_are_pytorchs(pytorch, last);
    // Every tensor by the program's end (its last line, after the drain of autograd).
    assert_eq!(
        pytorch["tensor_allocations"].as_u64(),
        Some(stat(job.event("end"), "allocation.all.allocated"))
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
    // Device memory at its peak by the library that asked: only PyTorch's allocator here
    // (the stand-in cuBLAS allocates nothing), its reserved peak in its segments (none is
    // released: those at the peak are those after the last step).
    let libraries = summary["libraries_at_peak"].as_array().expect("libraries");
    assert_eq!(libraries.len(), 1, "{libraries:?}");
    assert_eq!(
        (
            libraries[0]["library"].as_str(),
            libraries[0]["bytes"].as_u64(),
            libraries[0]["count"].as_u64()
        ),
        (
            Some("libc10_cuda.so"),
            Some(stat(last, "reserved_bytes.all.peak")),
            Some(stat(last, "segment.all.current"))
        )
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
    // What they are: outputs of the forward pass that backward passes ran across.
    assert_eq!(
        g["kinds"],
        serde_json::json!([{"kind": "activations", "bytes": 4 * 32768, "tensors": 4}])
    );
    // The text says it in words.
    let text = gpumemprof_tests::profiled::report_text("leaks", &trace, &[]);
    assert!(
        text.contains("128.0 KiB (131072 B) in 4 tensors live when the program's code finished")
            && text.contains("freed only by the interpreter's teardown (Py_FinalizeEx) at exit")
            && text.contains("freed only at exit; kind: activations (stack "),
        "{text}"
    );

    // `analyze` reads the same tensors: the kept activations are a site still growing, one
    // per step, though teardown freed them; the parameters, freed only at exit, a note;
    // the segments PyTorch keeps cached at exit no cleanup problem.
    let analyzed = report("analyze", &trace, &[]);
    schema::assert_valid("analyze", &analyzed);
    assert_eq!(analyzed["level"], "tensors");
    let end = job.event("end");
    assert_peaks_are_pytorchs(&analyzed["summary"]["allocators"][0], end);
    let findings = analyzed["findings"].as_array().expect("findings");
    let named =
        |h: &str| -> Vec<&Value> { findings.iter().filter(|f| f["heuristic"] == h).collect() };
    let growing = named("site_still_growing");
    assert_eq!(growing.len(), 1, "{findings:#?}");
    let g = growing[0];
    assert_eq!(
        (g["kind"].as_str(), g["bytes"].as_u64(), g["count"].as_u64()),
        (Some("tensor"), Some(4 * 32768), Some(4))
    );
    assert_eq!(g["evidence"]["cycles"], 4);
    assert_eq!(frames(g)[..3], frames(&groups[0])[..3]);
    assert!(
        g["message"].as_str().is_some_and(|m| m.ends_with(
            "was still held when the program's code finished (4 tensors, 4 of them freed only \
             by the interpreter's teardown)"
        )),
        "{g:#}"
    );
    assert!(named("insufficient_cleanup").is_empty(), "{findings:#?}");
    let shutdown = named("freed_only_at_shutdown");
    assert_eq!(shutdown.len(), 1, "{findings:#?}");
    let weights = [IN * HIDDEN, HIDDEN * HIDDEN, HIDDEN * OUT].map(block);
    let biases = [HIDDEN, HIDDEN, OUT].map(block);
    assert_eq!(
        (shutdown[0]["bytes"].as_u64(), shutdown[0]["count"].as_u64()),
        (Some(weights.iter().chain(&biases).sum()), Some(6))
    );
    // With `--level segments`, the segments: PyTorch's cache, never freed, is what the
    // process still held when it exited.
    let segments = report("analyze", &trace, &["--level", "segments"]);
    schema::assert_valid("analyze", &segments);
    assert_eq!(segments["level"], "segments");
    let cleanup: Vec<&Value> = (segments["findings"].as_array().expect("findings"))
        .iter()
        .filter(|f| f["heuristic"] == "insufficient_cleanup")
        .collect();
    assert_eq!(cleanup.len(), 1);
    assert_eq!(
        cleanup[0]["bytes"].as_u64(),
        Some(stat(end, "reserved_bytes.all.current"))
    );
}

/// At the peak, every stack reads as a PyTorch user reads it: no allocator, dispatcher or
/// interpreter frame, short names, package-relative paths; the optimizer's state at Adam's
/// own lines, and the backward pass's tensors at their autograd nodes.
#[test]
fn stacks_at_the_peak_read_in_pytorchs_terms() {
    let dir = scratch("torch_train_stacks");
    let trace = dir.join("train.trace");
    let job = Job::run("torch_train.py", &[STEPS], &[], Some(&trace));
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
    // The biases' gradients, summed over the batch by autograd's engine after their node
    // returned (`validate_outputs`: no node on the stack): by the peak, layer 3's and layer
    // 2's (128 and 512 floats).
    let reduced = sites
        .iter()
        .find(|s| frames(s) == ["aten::sum_dim_IntList", "gradient matched to its input"])
        .unwrap_or_else(|| panic!("no site of the engine's reduction in {all:#?}"));
    assert_eq!(reduced["site"]["role"], "autograd_step");
    assert_eq!(
        (reduced["bytes"].as_u64(), reduced["count"].as_u64()),
        (Some(block(OUT) + block(HIDDEN)), Some(2))
    );
    // With every frame shown, no site is a thread's entry point (`libstdc++.so.6+0x...`):
    // the backward thread's tensors are at their node, or the engine's step, by name.
    let native = report("peak", &trace, &["--top", "0", "--native"]);
    let site_functions: Vec<&str> = (native["peaks"][0]["sites"].as_array().expect("sites"))
        .iter()
        .map(|s| s["site"]["function"].as_str().unwrap_or("(none)"))
        .collect();
    for want in [
        "torch::autograd::generated::AddmmBackward0::apply",
        "torch::autograd::InputMetadata::reduce_grad",
        "at::cuda::allocateCUDABlasWorkspace",
    ] {
        assert!(
            site_functions.contains(&want),
            "{want} in {site_functions:#?}"
        );
    }
    for s in native["peaks"][0]["sites"].as_array().expect("sites") {
        let module = s["site"]["module"].as_str().unwrap_or("");
        assert!(
            !module.contains("libstdc++") && !module.contains("libc.so"),
            "{s:#}"
        );
    }
    // `monitor` of the finished job: PyTorch's own figures as its last tensor record left
    // them (the teardown freed every tensor; the segments stay reserved), and sites counted
    // in tensors: none live.
    let monitor = report("monitor", &trace, &["--once"]);
    schema::assert_valid("monitor", &monitor);
    let end = job.event("end");
    assert_eq!(monitor["level"], "tensors");
    let allocator = &monitor["devices"][0]["allocator"];
    assert_eq!(
        (
            allocator["framework"].as_str(),
            allocator["allocated_bytes"].as_u64(),
            allocator["allocated_peak_bytes"].as_u64(),
            allocator["reserved_bytes"].as_u64()
        ),
        (
            Some("pytorch"),
            Some(0),
            Some(stat(end, "allocated_bytes.all.peak")),
            Some(stat(end, "reserved_bytes.all.current"))
        )
    );
    assert_eq!(monitor["sites"], serde_json::json!([]));
}

/// The model of `torch_train.py`: a batch of 64 rows of 256 floats through Linear layers of
/// 256 -> 512 -> 512 -> 128.
const BATCH: u64 = 64;
const IN: u64 = 256;
const HIDDEN: u64 = 512;
const OUT: u64 = 128;
const FLOAT: u64 = 4;

/// A tensor of `elements` floats as the allocator holds it: its block, a multiple of 512.
fn block(elements: u64) -> u64 {
    (elements * FLOAT).div_ceil(512) * 512
}

/// Kinds of memory at the peak, each in exact bytes computed from the model's shapes and
/// checked against what PyTorch itself holds (the program's "kinds" line). The peak is in
/// the last step's backward pass, when layer 1's weight gradient is made: the history holds
/// one output per step, so the last step is the highest.
#[test]
fn kinds_of_memory_at_the_peak_are_the_models_own() {
    let dir = scratch("torch_train_kinds");
    let trace = dir.join("train.trace");
    let job = Job::run("torch_train.py", &[STEPS], &[], Some(&trace));
    let steps: u64 = STEPS.parse().unwrap();
    let theirs = job.event("kinds");

    let weights = [IN * HIDDEN, HIDDEN * HIDDEN, HIDDEN * OUT].map(block);
    let biases = [HIDDEN, HIDDEN, OUT].map(block);
    let parameters: u64 = weights.iter().chain(&biases).sum();
    assert_eq!(parameters, 1_839_616);
    assert_eq!(theirs["parameters"], parameters);
    // Adam: exp_avg and exp_avg_sq per parameter (its step counters stay on the CPU).
    assert_eq!(theirs["optimizer_state"], 2 * parameters);
    assert_eq!(theirs["gradients"], parameters);
    let want = [
        ("parameters", parameters, 6),
        ("optimizer state", 2 * parameters, 12),
        // Every gradient but layer 1's bias, not made yet.
        ("gradients", parameters - biases[0], 5),
        // The batch (which layer 1's gradient reads), the outputs the history kept (one per
        // step, this one included) and the loss: one float in a 512-byte block.
        (
            "activations",
            block(BATCH * IN) + steps * block(BATCH * OUT) + block(1),
            2 + steps,
        ),
        // ReLU's gradient flowing into layer 1, and the loss's gradient (backward()'s ones).
        ("temporaries", block(BATCH * HIDDEN) + block(1), 2),
        // cuBLAS's workspace: PyTorch's default of 32 MiB on this GPU (sm_90).
        ("workspaces", 32 << 20, 1),
        ("other", 0, 0),
    ];
    let want: Vec<Value> = want
        .iter()
        .map(|(kind, bytes, tensors)| {
            serde_json::json!({"kind": kind, "bytes": bytes, "tensors": tensors})
        })
        .collect();
    let peak = report("peak", &trace, &[]);
    assert_eq!(peak["peaks"][0]["kinds"], Value::Array(want.clone()));
    let total: u64 = want.iter().map(|k| k["bytes"].as_u64().unwrap()).sum();
    let last = job.events("step").last().expect("a step line");
    assert_eq!(total, stat(last, "allocated_bytes.all.peak"));
    assert_eq!(peak["peaks"][0]["peak_bytes"], total);

    let summary = report("summary", &trace, &[]);
    assert_eq!(
        summary["allocators"][0]["kinds_at_peak"],
        Value::Array(want.clone())
    );
    // The timeline by kind (CSV): in every bucket the kinds add up to the tensor line's
    // highest, and the bucket of the peak holds the peak's kinds.
    let csv = dir.join("timeline.csv");
    succeeded(
        analyzer()
            .args(["export", "--format", "csv", "-o"])
            .arg(&csv)
            .arg(&trace),
        "gpumemprof export --format csv",
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    let mut buckets: std::collections::BTreeMap<u64, (u64, Vec<(String, u64)>)> =
        Default::default();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (start, kind, max) = (f[0].parse().unwrap(), f[3], f[5].parse().unwrap());
        let b = buckets.entry(start).or_default();
        match kind.strip_prefix("tensor:") {
            Some(k) if f[2] == "0" => b.1.push((k.to_string(), max)),
            _ if kind == "tensor" && f[2] == "0" => b.0 = max,
            _ => {}
        }
    }
    for (start, (tensors, kinds)) in &buckets {
        assert_eq!(kinds.len(), 7, "bucket at {start} ns: {kinds:?}");
        assert_eq!(
            kinds.iter().map(|k| k.1).sum::<u64>(),
            *tensors,
            "at {start} ns"
        );
    }
    let (_, at_peak) = (buckets.values())
        .find(|(tensors, _)| *tensors == total)
        .expect("the peak's bucket");
    let want_kinds: Vec<(String, u64)> = (want.iter())
        .map(|k| {
            (
                k["kind"].as_str().unwrap().into(),
                k["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(at_peak, &want_kinds);
    let text = gpumemprof_tests::profiled::report_text("summary", &trace, &[]);
    assert!(
        text.contains(
            "  at the allocated peak, by kind: parameters 1.8 MiB, optimizer state 3.5 MiB, \
             gradients 1.8 MiB, activations 192.5 KiB, temporaries 128.5 KiB, workspaces 32.0 MiB\n"
        ),
        "{text}"
    );
    let html = dir.join("report.html");
    succeeded(
        analyzer().arg("report").arg(&trace).arg("-o").arg(&html),
        "gpumemprof report",
    );
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(
        html.contains(
            "<h3>GPU 0: the allocated peak by kind of memory</h3>\
             <table class=\"kinds\"><tr><th>kind</th><th class=\"num\">bytes</th>\
             <th class=\"num\">tensors</th><th class=\"num\">share</th></tr>\
             <tr><td>parameters</td><td class=\"num\">1.8 MiB</td><td class=\"num\">6</td>\
             <td class=\"num\">4.5%</td></tr>"
        ),
        "no kinds table in the report"
    );
}

/// `diff` of the loop run for 4 steps and for 6: the kept activations' site grew by two
/// tensors though the interpreter's teardown freed them all, the leaked total with it; the
/// allocator's peaks are PyTorch's own of each run.
#[test]
fn diff_of_two_runs_shows_the_leak_grow_with_the_steps() {
    let dir = scratch("torch_train_diff");
    let (four, six) = (dir.join("four.trace"), dir.join("six.trace"));
    let job4 = Job::run("torch_train.py", &["4"], &[], Some(&four));
    let job6 = Job::run("torch_train.py", &["6"], &[], Some(&six));
    let d = report("diff", &four, &[six.to_str().unwrap()]);
    schema::assert_valid("diff", &d);
    assert_eq!(d["level"], "tensors");
    let change = |v: &Value| (v["before"].as_u64(), v["after"].as_u64());
    let activation = 32768;
    assert_eq!(
        change(&d["totals"]["leaked_bytes"]),
        (Some(4 * activation), Some(6 * activation))
    );
    assert_eq!(change(&d["totals"]["leaked_count"]), (Some(4), Some(6)));
    let (end4, end6) = (job4.event("end"), job6.event("end"));
    for (ours, theirs) in [
        ("allocated_peak_bytes", "allocated_bytes.all.peak"),
        ("reserved_peak_bytes", "reserved_bytes.all.peak"),
    ] {
        assert_eq!(
            change(&d["totals"][ours]),
            (Some(stat(end4, theirs)), Some(stat(end6, theirs))),
            "{ours}"
        );
    }
    let changed: Vec<&Value> = (d["sites"].as_array().expect("sites"))
        .iter()
        .filter(|s| s["live_bytes_at_end"]["delta"] != 0)
        .collect();
    assert_eq!(changed.len(), 1, "{:#}", d["sites"]);
    let site = changed[0];
    assert_eq!(site["status"], "changed");
    assert_eq!(
        change(&site["live_bytes_at_end"]),
        (Some(4 * activation), Some(6 * activation))
    );
    assert_eq!(change(&site["live_allocations_at_end"]), (Some(4), Some(6)));
    assert_eq!(frames(site)[..2], ["aten::addmm", "aten::linear"]);
}
