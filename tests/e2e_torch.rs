//! End to end on code we did not write: PyTorch's own CUDA caching allocator
//! (`libc10_cuda.so` of the pinned torch wheel, see `support::torch`) runs
//! `tests/torch/caching_allocator.cpp` on the simulated GPU, with and without the shim.
//! The shim hooks the allocator's own entry point (`c10::reportMemoryUsageToProfiler`), so
//! the reports count tensors: the harness's 4 kept tensors of 3 MiB are live at exit at its
//! KEEP line, not at the allocator's `alloc_block`, and every number equals what the
//! allocator itself says (`getDeviceStats`, printed by the harness).

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use gpumemprof_tests::profiled::{preload, report, scratch, succeeded};
use gpumemprof_tests::source_line_of;
use gpumemprof_tests::torch::harness;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const SOURCE: &str = "tests/torch/caching_allocator.cpp";

fn run(trace: Option<&std::path::Path>) -> Output {
    run_with(trace, &[])
}

/// The harness with `args` (its modes), under the shim when `trace` is given.
fn run_with(trace: Option<&std::path::Path>, args: &[&str]) -> Output {
    run_env(trace, args, &[])
}

/// `run_with`, with `env` added (the allocator's configuration; applied after the shim's
/// variables, so it may override them).
fn run_env(trace: Option<&std::path::Path>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let h = harness();
    let mut cmd = h.command(&h.exe);
    cmd.args(args);
    if let Some(t) = trace {
        preload(&mut cmd, t);
    }
    cmd.envs(env.iter().copied());
    succeeded(&mut cmd, "the harness")
}

/// NVML sampled: PyTorch's out-of-memory message names this process's memory from it, and
/// so does ours, from the sample the shim takes at the failure.
const NVML_ON: (&str, &str) = ("GPUMEMPROF_NVML_MS", "500");

/// `summary`'s row of memory kind `kind` (device 0, the only one).
fn row<'a>(summary: &'a Value, kind: &str) -> &'a Value {
    summary["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["kind"] == kind)
        .unwrap_or_else(|| panic!("a {kind} row"))
}

/// The harness's `key=value` lines.
fn facts(out: &Output) -> BTreeMap<String, String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn n(facts: &BTreeMap<String, String>, key: &str) -> u64 {
    facts[key]
        .parse()
        .unwrap_or_else(|_| panic!("{key}={}", facts[key]))
}

#[test]
fn pytorchs_caching_allocator_is_seen_as_tensors_at_the_users_line() {
    let plain = run(None);
    let dir = scratch("torch_real");
    let trace = dir.join("harness.trace");
    let traced = run_env(Some(&trace), &[], &[NVML_ON]);
    // The program behaves as without us: the same output, line for line.
    assert_eq!(
        String::from_utf8_lossy(&traced.stdout),
        String::from_utf8_lossy(&plain.stdout)
    );
    let f = facts(&plain);
    // The allocator's own numbers, as the harness documents them.
    assert_eq!(n(&f, "allocated"), 12 * MIB);
    assert_eq!(n(&f, "allocated_peak"), 13 * MIB);
    assert_eq!(n(&f, "reserved_peak"), 22 * MIB);
    assert_eq!((n(&f, "allocations"), n(&f, "frees")), (54, 50));
    assert!(
        f["oom"].starts_with("CUDA out of memory. Tried to allocate 64.00 GiB."),
        "{}",
        f["oom"]
    );

    // summary: the allocator's figures, equal to getDeviceStats, and the tensor row.
    let s = report("summary", &trace, &[]);
    schema::assert_valid("summary", &s);
    assert_eq!(
        s["allocators"],
        json!([{
            "device": 0, "framework": "pytorch",
            "tensor_allocations": n(&f, "allocations"), "tensor_frees": n(&f, "frees"),
            "allocated_bytes": n(&f, "allocated"), "allocated_peak_bytes": n(&f, "allocated_peak"),
            "reserved_bytes": n(&f, "reserved_peak"), "reserved_peak_bytes": n(&f, "reserved_peak"),
            "cached_bytes": n(&f, "reserved_peak") - n(&f, "allocated"),
            // No module, optimizer or backward pass in a C++ harness: the 4 tensors kept
            // to the end are "other", the one freed in between a temporary.
            "kinds_at_peak": kinds(&[("temporaries", MIB, 1), ("other", 12 * MIB, 4)]),
        }])
    );
    let tensor_row = row(&s, "tensor");
    assert_eq!(
        (
            &tensor_row["allocations"],
            &tensor_row["peak_bytes"],
            &tensor_row["live_bytes_at_end"],
            &tensor_row["live_allocations_at_end"]
        ),
        (&json!(54), &json!(13 * MIB), &json!(12 * MIB), &json!(4))
    );
    // The segments are the device rows: a 20 MiB and a 2 MiB segment at the peak, the
    // 2 MiB one released by the out-of-memory retry.
    assert_eq!(s["totals"]["peak_bytes"], json!(n(&f, "reserved_peak")));
    assert_eq!(
        s["totals"]["live_bytes_at_end"],
        json!(n(&f, "after_oom_reserved"))
    );

    // leaks: tensors by default, at the harness's KEEP line.
    let keep = u64::from(source_line_of(SOURCE, "GPUMEMPROF-TORCH-KEEP"));
    let l = report("leaks", &trace, &[]);
    schema::assert_valid("leaks", &l);
    assert_eq!(l["level"], "tensors");
    assert_eq!(
        (&l["total_bytes"], &l["total_count"]),
        (&json!(12 * MIB), &json!(4))
    );
    let g = &l["groups"][0];
    assert_eq!(
        (&g["kind"], &g["bytes"], &g["count"]),
        (&json!("tensor"), &json!(12 * MIB), &json!(4))
    );
    assert_eq!(g["site"]["function"], "keep_activations");
    assert_eq!(g["site"]["line"], json!(keep));
    // Relative to the harness's working directory (the tests crate).
    assert_eq!(g["site"]["file"], "torch/caching_allocator.cpp");
    // The allocator's frames are left out: the user's line first.
    assert_eq!(g["frames"][0], g["site"]);
    // --native keeps the whole stack, the allocator's frames first, C++ names without their
    // parameter lists unless --full-names.
    let native = report("leaks", &trace, &["--native"]);
    let g = &native["groups"][0];
    assert!(g["frames"][0]["module"]
        .as_str()
        .unwrap()
        .ends_with("libc10_cuda.so"));
    assert_eq!(
        g["frames"][0]["function"],
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_found_block"
    );
    let full = report("leaks", &trace, &["--native", "--full-names"]);
    assert!(full["groups"][0]["frames"][0]["function"]
        .as_str()
        .unwrap()
        .starts_with(
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_found_block(\
             c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::AllocParams const&"
        ));

    // --level segments: today's view, the 20 MiB segment, made for the same line.
    let seg = report("leaks", &trace, &["--level", "segments"]);
    assert_eq!(seg["level"], "segments");
    assert_eq!(
        (&seg["total_bytes"], &seg["total_count"]),
        (&json!(20 * MIB), &json!(1))
    );
    assert_eq!(seg["groups"][0]["site"]["line"], json!(keep));

    let seg = report("peak", &trace, &["--level", "segments"]);
    assert_eq!(
        (
            &seg["level"],
            &seg["peaks"][0]["kind"],
            &seg["peaks"][0]["peak_bytes"]
        ),
        (&json!("segments"), &json!("device"), &json!(22 * MIB))
    );
    // With several traces --level is a usage error (the per-rank report counts segments).
    let both = gpumemprof_tests::profiled::analyzer()
        .args(["leaks", "--level", "segments"])
        .args([&trace, &trace])
        .output()
        .expect("run gpumemprof");
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr)
        .contains("--level reads one trace file: give one TRACE"));

    // oom: the failure PyTorch raised, after its release-and-retry (two failed cudaMalloc
    // calls, its attempts, then the allocator's own report of the block it refused): one
    // error, in PyTorch's words and numbers.
    let o = report("oom", &trace, &[]);
    schema::assert_valid("oom", &o);
    assert_eq!(o["failure_counts"]["out_of_memory"], 1);
    assert_eq!(
        (
            &o["failure"]["index"],
            &o["failure"]["kind"],
            &o["failure"]["api"]
        ),
        (
            &json!(0),
            &json!("tensor"),
            &json!("c10::reportOutOfMemoryToProfiler")
        )
    );
    assert_eq!(
        o["failure"]["attempts"],
        json!({"count": 2, "api": "cudaMalloc", "size": 64u64 << 30})
    );
    let t = &o["pytorch"];
    assert_eq!(
        (
            &t["tried_to_allocate_bytes"],
            &t["allocated_bytes"],
            &t["tensors"]
        ),
        (
            &json!(64u64 << 30),
            &json!(n(&f, "after_oom_allocated")),
            &json!(4)
        )
    );
    assert_eq!(t["reserved_bytes"], json!(n(&f, "after_oom_reserved")));
    let message = format!("CUDA out of memory. {}", t["message"].as_str().unwrap());
    assert_eq!(f["oom"], message);
    assert_eq!(t["sites"][0]["site"]["line"], json!(keep));
    assert!(o["verdict"]
        .as_str()
        .unwrap()
        .contains("PyTorch: 12.0 MiB allocated in 4 tensors, 20.0 MiB reserved (8.0 MiB cached but unallocated), 12.0 MiB of it from keep_activations"));

    // analyze: what the allocator kept cached beyond its tensors' needs.
    let a = report("analyze", &trace, &[]);
    schema::assert_valid("analyze", &a);
    let cached: Vec<&Value> = a["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["heuristic"] == "fragmentation_cached_unallocated")
        .collect();
    assert_eq!(cached.len(), 1);
    assert_eq!(
        cached[0]["evidence"],
        json!({"reserved_peak_bytes": 22 * MIB, "allocated_peak_bytes": 13 * MIB,
               "cached_bytes": 9 * MIB})
    );

    // peak: the tensor peak (13 MiB: the kept 12 and one scratch tensor), by site.
    let scratch_line = u64::from(source_line_of(SOURCE, "GPUMEMPROF-TORCH-SCRATCH"));
    let p = report("peak", &trace, &[]);
    schema::assert_valid("peak", &p);
    assert_eq!(p["level"], "tensors");
    let peak = &p["peaks"][0];
    assert_eq!(
        (&peak["kind"], &peak["peak_bytes"]),
        (&json!("tensor"), &json!(13 * MIB))
    );
    let sites: Vec<(Value, Value, Value)> = peak["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["site"]["line"].clone(),
                s["bytes"].clone(),
                s["count"].clone(),
            )
        })
        .collect();
    assert_eq!(
        sites,
        vec![
            (json!(keep), json!(12 * MIB), json!(4)),
            (json!(scratch_line), json!(MIB), json!(1)),
        ]
    );
}

/// The flamegraph's stacks (`export --format folded`) at the peak: the tensors once the trace
/// has them, the segments with `--level segments`.
#[test]
fn folded_stacks_count_tensors_or_segments() {
    let dir = scratch("torch_folded");
    let trace = dir.join("harness.trace");
    run(Some(&trace));
    let folded = |extra: &[&str]| -> Vec<(String, u64)> {
        let out = gpumemprof_tests::profiled::analyzer()
            .args(["export", "--format", "folded"])
            .arg(&trace)
            .args(["-o", "-"])
            .args(extra)
            .output()
            .expect("run gpumemprof export");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let (stack, bytes) = l.rsplit_once(' ').expect("stack bytes");
                let root = stack.split(';').next().unwrap().to_owned();
                let user = stack
                    .split(';')
                    .find(|f| f.starts_with("keep_activations") || f.starts_with("scratch"))
                    .map_or(String::new(), |f| f.split(' ').next().unwrap().to_owned());
                (format!("{root} {user}"), bytes.parse().unwrap())
            })
            .collect()
    };
    assert_eq!(
        folded(&[]),
        vec![
            ("[GPU 0 tensor] keep_activations".to_owned(), 12 * MIB),
            ("[GPU 0 tensor] scratch".to_owned(), MIB),
        ]
    );
    assert_eq!(
        folded(&["--level", "segments"]),
        vec![
            ("[GPU 0 device] keep_activations".to_owned(), 20 * MIB),
            ("[GPU 0 device] scratch".to_owned(), 2 * MIB),
        ]
    );
}

/// The Parquet export has the tensors as rows of their own kind, read by DuckDB: one per
/// tensor the allocator handed out, 4 never freed, at the harness's lines; and the 64 GiB
/// block it refused (its `OutOfMemoryError`), a row with result 2 and no address.
#[test]
fn parquet_rows_of_kind_tensor() {
    let dir = scratch("torch_parquet");
    let trace = dir.join("harness.trace");
    run(Some(&trace));
    let allocations = gpumemprof_tests::duck::export_tables(&trace, &dir.join("tables"));
    let rows = gpumemprof_tests::duck::query(&format!(
        "SELECT api, count(*), count(*) FILTER (WHERE free_ns IS NULL), sum(bytes)
         FROM '{}' WHERE kind = 'tensor' GROUP BY api ORDER BY api",
        allocations.display()
    ));
    assert_eq!(
        rows,
        vec![
            vec![
                json!("c10::reportMemoryUsageToProfiler"),
                json!(54),
                json!(4),
                json!(62 * MIB)
            ],
            vec![
                json!("c10::reportOutOfMemoryToProfiler"),
                json!(1),
                json!(1),
                json!(64 * 1024 * MIB)
            ]
        ]
    );
    let refused = gpumemprof_tests::duck::query(&format!(
        "SELECT result, address FROM '{}' WHERE api = 'c10::reportOutOfMemoryToProfiler'",
        allocations.display()
    ));
    assert_eq!(refused, vec![vec![json!(2), json!(null)]]);
}

/// `diff` compares tensors when both traces have them (`--level segments`: segments), and
/// the timeline has a tensor series (allocated) beside the device series (reserved), out
/// of the total.
#[test]
fn diff_and_timeline_know_tensors() {
    let dir = scratch("torch_diff");
    let (before, after) = (dir.join("before.trace"), dir.join("after.trace"));
    run(Some(&before));
    run(Some(&after));
    let diff = |extra: &[&str]| -> Value {
        let out = gpumemprof_tests::profiled::analyzer()
            .arg("diff")
            .args([&before, &after])
            .args(["--json", "--all"])
            .args(extra)
            .output()
            .expect("run gpumemprof diff");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        schema::assert_valid("diff", &v);
        v
    };
    let d = diff(&[]);
    assert_eq!(d["level"], "tensors");
    let kinds: Vec<(&str, u64)> = d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap(),
                s["live_bytes_at_end"]["after"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, vec![("tensor", 12 * MIB), ("tensor", 0)]);
    assert_eq!(
        (&d["changed_sites"], &d["unchanged_sites"]),
        (&json!(0), &json!(2))
    );
    let s = diff(&["--level", "segments"]);
    assert_eq!(s["level"], "segments");
    assert!(s["sites"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["kind"] == "device"));

    let csv = gpumemprof_tests::profiled::analyzer()
        .args(["export", "--format", "csv"])
        .arg(&after)
        .args(["-o", "-"])
        .output()
        .expect("run gpumemprof export");
    let mut highest: BTreeMap<String, u64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&csv.stdout).lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let e = highest.entry(format!("{} {}", f[2], f[3])).or_default();
        *e = (*e).max(f[5].parse().unwrap());
    }
    assert_eq!(
        highest,
        BTreeMap::from([
            ("0 device".to_owned(), 22 * MIB),
            ("0 tensor".to_owned(), 13 * MIB),
            ("0 tensor:parameters".to_owned(), 0),
            ("0 tensor:optimizer state".to_owned(), 0),
            ("0 tensor:gradients".to_owned(), 0),
            ("0 tensor:activations".to_owned(), 0),
            ("0 tensor:temporaries".to_owned(), MIB),
            ("0 tensor:workspaces".to_owned(), 0),
            ("0 tensor:other".to_owned(), 12 * MIB),
            ("all all".to_owned(), 22 * MIB),
        ])
    );
}

/// `summary`'s `kinds_at_peak` with these (kind, bytes, tensors) and 0 for the rest.
fn kinds(held: &[(&str, u64, u64)]) -> serde_json::Value {
    let all = [
        "parameters",
        "optimizer state",
        "gradients",
        "activations",
        "temporaries",
        "workspaces",
        "other",
    ];
    let entries: Vec<serde_json::Value> = all
        .iter()
        .map(|kind| {
            let (bytes, tensors) = (held.iter())
                .find(|h| h.0 == *kind)
                .map_or((0, 0), |h| (h.1, h.2));
            json!({"kind": kind, "bytes": bytes, "tensors": tensors})
        })
        .collect();
    serde_json::Value::Array(entries)
}

/// `recordStream` and `emptyCache`, as PyTorch's allocator does them: a tensor used on a
/// side stream is freed only once the stream's event completed (here at `emptyCache`), and
/// `emptyCache` releases the empty segment. The reports equal the allocator's own numbers.
#[test]
fn record_stream_and_empty_cache() {
    let dir = scratch("torch_streams");
    let trace = dir.join("harness.trace");
    let out = run_with(Some(&trace), &["streams"]);
    let f = facts(&out);
    assert_eq!((n(&f, "allocations"), n(&f, "frees")), (5, 1));
    assert_eq!(
        (n(&f, "allocated"), n(&f, "reserved")),
        (12 * MIB, 20 * MIB)
    );
    let s = report("summary", &trace, &[]);
    let (t, d) = (row(&s, "tensor"), row(&s, "device"));
    assert_eq!(
        (&t["allocations"], &t["frees"], &t["live_bytes_at_end"]),
        (
            &json!(n(&f, "allocations")),
            &json!(n(&f, "frees")),
            &json!(n(&f, "allocated"))
        )
    );
    // The 2 MiB segment of the side-stream tensor, released by emptyCache.
    assert_eq!(
        (&d["allocations"], &d["frees"], &d["live_bytes_at_end"]),
        (&json!(2), &json!(1), &json!(n(&f, "reserved")))
    );
    the_kept_tensors_leak(&trace);
}

/// Expandable segments (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`): PyTorch maps
/// physical chunks into one reserved range through the driver's entry points
/// (`cudaGetDriverEntryPointByVersion`, onto the simulated driver's VMM). The mappings are the
/// segments (`device` rows), the reservation is not memory, and the tensors are counted as
/// with the default allocator, equal to its own numbers.
#[test]
fn expandable_segments_map_what_the_tensors_use() {
    let dir = scratch("torch_expandable");
    let trace = dir.join("harness.trace");
    let conf = [
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        NVML_ON,
    ];
    let out = run_env(Some(&trace), &[], &conf);
    let f = facts(&out);
    assert!(
        f["oom"].contains("expandable_segments is enabled"),
        "{}",
        f["oom"]
    );
    let s = report("summary", &trace, &[]);
    let (t, d) = (row(&s, "tensor"), row(&s, "device"));
    assert_eq!(
        (&t["allocations"], &t["peak_bytes"], &t["live_bytes_at_end"]),
        (
            &json!(n(&f, "allocations")),
            &json!(n(&f, "allocated_peak")),
            &json!(n(&f, "allocated"))
        )
    );
    // The mappings: 20 MiB and 2 MiB, the 2 MiB one unmapped by the out-of-memory retry.
    assert_eq!(
        (&d["allocations"], &d["peak_bytes"], &d["live_bytes_at_end"]),
        (
            &json!(2),
            &json!(n(&f, "reserved_peak")),
            &json!(n(&f, "after_oom_reserved"))
        )
    );
    assert_eq!(s["totals"]["peak_bytes"], json!(n(&f, "reserved_peak")));
    // No CUDA call fails here (PyTorch sees too little free memory and does not map): the
    // allocator's own report of the block it refused is the failure, in its numbers.
    let o = report("oom", &trace, &[]);
    schema::assert_valid("oom", &o);
    assert_eq!(o["failure_counts"]["out_of_memory"], 1);
    assert_eq!(
        (&o["failure"]["kind"], &o["failure"]["size"]),
        (&json!("tensor"), &json!(64u64 << 30))
    );
    let t = &o["pytorch"];
    assert_eq!(
        (&t["allocated_bytes"], &t["reserved_bytes"], &t["tensors"]),
        (
            &json!(n(&f, "after_oom_allocated")),
            &json!(n(&f, "after_oom_reserved")),
            &json!(4)
        )
    );
    let message = format!("CUDA out of memory. {}", t["message"].as_str().unwrap());
    assert_eq!(f["oom"], message);
    let at = source_line_of(SOURCE, "GPUMEMPROF-TORCH-OOM");
    let verdict = o["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with(&format!(
            "OOM: PyTorch's caching allocator refused a 64.0 GiB block at too_big \
             (caching_allocator.cpp:{at}) on device 0 with 1004.0 MiB free of 1.0 GiB; \
             PyTorch: 12.0 MiB allocated in 4 tensors"
        )),
        "{verdict}"
    );
    assert_eq!(o["failure"]["site"]["line"], json!(at));
    // What competed with it: the tensors (the segments are what was reserved around them).
    assert_eq!(
        (
            &o["live"]["kinds"],
            &o["live"]["count"],
            &o["live"]["bytes"]
        ),
        (&json!(["tensor"]), &json!(4), &json!(12 * MIB))
    );
    the_kept_tensors_leak(&trace);
}

/// The flight recorder (`GPUMEMPROF_MODE=oom`, a ring of 16 events, the fewest) writes its trace when
/// PyTorch's allocator refuses a block with expandable segments, though no CUDA call fails:
/// the 4 kept tensors, made long before the ring's events, are still live in it, the exit
/// line counts the one failure, and `oom` explains it with PyTorch's numbers.
#[test]
fn the_flight_recorder_keeps_the_tensors_live_at_an_expandable_segments_oom() {
    let dir = scratch("torch_expandable_recorder");
    let trace = dir.join("harness.trace");
    let env = [
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        ("GPUMEMPROF_MODE", "oom"),
        ("GPUMEMPROF_OOM_RING", "16"),
    ];
    let out = run_env(Some(&trace), &[], &env);
    let f = facts(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("out of memory: the flight recorder wrote")
            && stderr.contains("; 1 allocation failed for lack of memory: see why with"),
        "{stderr}"
    );
    let o = report("oom", &trace, &[]);
    assert_eq!(
        (&o["failure"]["kind"], &o["failure_counts"]["out_of_memory"]),
        (&json!("tensor"), &json!(1))
    );
    let t = &o["pytorch"];
    assert_eq!(
        (
            &t["tensors"],
            &t["allocated_bytes"],
            &t["sites"][0]["bytes"]
        ),
        (
            &json!(4),
            &json!(n(&f, "after_oom_allocated")),
            &json!(12 * MIB)
        )
    );
    the_kept_tensors_leak(&trace);
}

/// Python loads PyTorch with `RTLD_LOCAL` (ctypes here, as Python loads its extension
/// modules): `dlsym(RTLD_NEXT)` cannot see `libc10.so`, and the shim must still find
/// PyTorch's own `reportMemoryUsageToProfiler` and call it, so `torch.profiler`'s memory
/// profiling keeps working. A memory reporter (what the profiler installs) is told of every
/// block, 2 per allocate+free pair, with and without the shim; and the shim records them.
#[test]
fn pytorchs_own_function_still_runs_when_python_loads_it_locally() {
    let h = harness();
    let dir = scratch("torch_rtld_local");
    let trace = dir.join("python.trace");
    let run = |traced: bool| {
        let mut cmd = h.command("python3");
        cmd.arg("-c")
            .arg(
                "import ctypes, sys\n\
                 lib = ctypes.CDLL(sys.argv[1])\n\
                 lib.gpumemprof_bench_init()\n\
                 print(lib.gpumemprof_reported_pairs(ctypes.c_long(100)))",
            )
            .arg(&h.lib);
        if traced {
            preload(&mut cmd, &trace);
        }
        let out = succeeded(&mut cmd, "python3");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(run(false), "200");
    assert_eq!(run(true), "200");
    let s = report("summary", &trace, &[]);
    assert_eq!(s["allocators"][0]["tensor_allocations"], json!(100));
    assert_eq!(s["allocators"][0]["tensor_frees"], json!(100));
}

#[test]
fn without_free_stacks_tensors_freed_have_no_stack_and_the_kept_ones_leak_at_their_line() {
    // GPUMEMPROF_FREE_STACKS=0, as PyTorch's own context='alloc': each of the allocator's
    // 54 tensors handed out has its stack, none of its 50 taken back has one (nor has any
    // free of its segments), and the leak is where it was.
    let dir = scratch("torch_free_stacks");
    let trace = dir.join("harness.trace");
    run_env(Some(&trace), &[], &[("GPUMEMPROF_FREE_STACKS", "0")]);
    let (h, records) = gpumemprof_tests::profiled::decode(&trace);
    assert_eq!(h["config"]["free_stacks"], json!(false));
    let tensors = |handed_out: bool| -> Vec<u64> {
        (records.iter())
            .filter_map(|r| match r {
                gpumemprof_format::Record::Tensor(t) if (t.delta > 0) == handed_out => {
                    Some(t.stack)
                }
                _ => None,
            })
            .collect()
    };
    let (out, back) = (tensors(true), tensors(false));
    assert_eq!((out.len(), back.len()), (54, 50));
    assert!(out.iter().all(|&s| s != 0), "{out:?}");
    assert!(back.iter().all(|&s| s == 0), "{back:?}");
    assert!(records
        .iter()
        .all(|r| !matches!(r, gpumemprof_format::Record::Free(f) if f.stack != 0)));
    the_kept_tensors_leak(&trace);
}

/// `leaks`: the 4 tensors (12 MiB) the harness keeps, at its KEEP line.
fn the_kept_tensors_leak(trace: &Path) {
    let l = report("leaks", trace, &[]);
    let keep = u64::from(source_line_of(SOURCE, "GPUMEMPROF-TORCH-KEEP"));
    assert_eq!(
        (&l["total_bytes"], &l["total_count"]),
        (&json!(12 * MIB), &json!(4))
    );
    assert_eq!(l["groups"][0]["site"]["line"], json!(keep));
}
