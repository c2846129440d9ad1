//! End to end: real C programs, linked with `-lcudart` against the simulated runtime, run
//! under `LD_PRELOAD=libgpumemprof.so`; the assertions are exact numbers on the decoded
//! trace and on the analyzer's JSON, for the situations the programs stand for.

use gpumemprof_format::{MemKind, Record, FREE_STREAM_ORDERED};
use gpumemprof_tests::profiled::*;
use gpumemprof_tests::source_line_of;
use std::collections::{BTreeMap, HashMap};

const MIB: u64 = 1 << 20;

fn frame_is(frame: &serde_json::Value, function: &str, file_suffix: &str, line: u32) -> bool {
    frame["function"] == function
        && frame["file"]
            .as_str()
            .is_some_and(|f| f.ends_with(file_suffix))
        && frame["line"] == line
}

#[test]
fn training_loop_leak_is_reported_at_its_line_with_bytes_and_count() {
    let dir = scratch("train_leak");
    let run = run_profiled(&dir, "train_leak", &["20"], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());

    let leaks = report("leaks", &run.trace, &[]);
    assert_eq!(leaks["schema_version"], 1);
    assert_eq!(leaks["trace"]["complete"], true);
    assert_eq!(leaks["trace"]["dropped"], 0);
    assert_eq!(leaks["total_bytes"], 20 * MIB);
    assert_eq!(leaks["total_count"], 20);
    let groups = leaks["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "one leaking site: {groups:#?}");
    let g = &groups[0];
    assert_eq!(g["bytes"], 20 * MIB);
    assert_eq!(g["count"], 20);
    assert_eq!(g["kind"], "device");
    assert_eq!(g["devices"], serde_json::json!([0]));
    let line = source_line_of("examples/train_leak.c", "GPUMEMPROF-LEAK");
    let top = &g["frames"][0];
    assert!(
        frame_is(top, "keep_for_logging", "examples/train_leak.c", line),
        "innermost frame should be keep_for_logging at train_leak.c:{line}, got {top}"
    );
    let functions: Vec<&str> = g["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(
        functions.starts_with(&["keep_for_logging", "train_step", "main"]),
        "{functions:?}"
    );
}

#[test]
fn training_loop_summary_and_peak_are_exact() {
    let dir = scratch("train_peak");
    let run = run_profiled(&dir, "train_leak", &["20"], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());

    // 1 + 5*S allocations, 1 + 4*S frees; peak (94 + S) MiB in the last step.
    let s = report("summary", &run.trace, &[]);
    let rows = s["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let r = &rows[0];
    assert_eq!(
        (r["device"].as_i64(), r["kind"].as_str()),
        (Some(0), Some("device"))
    );
    assert_eq!(r["allocations"], 101);
    assert_eq!(r["frees"], 81);
    assert_eq!(
        r["bytes_allocated"],
        64 * MIB + 20 * (8 + 4 + 2 + 16 + 1) * MIB
    );
    assert_eq!(r["bytes_freed"], 64 * MIB + 20 * (8 + 4 + 2 + 16) * MIB);
    assert_eq!(r["peak_bytes"], 114 * MIB);
    assert_eq!(r["live_bytes_at_end"], 20 * MIB);
    assert_eq!(r["live_allocations_at_end"], 20);
    assert_eq!(r["failed_allocations"], 0);
    assert_eq!(s["totals"]["peak_bytes"], 114 * MIB);
    assert_eq!(s["unknown_frees"], 0);
    assert_eq!(s["failed_frees"], 0);

    // At the peak: weights, the four step buffers, and the 20 logging buffers.
    let p = report("peak", &run.trace, &["--top", "100"]);
    let peaks = p["peaks"].as_array().unwrap();
    assert_eq!(peaks.len(), 1);
    assert_eq!(peaks[0]["peak_bytes"], 114 * MIB);
    let mut by_line: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for site in peaks[0]["sites"].as_array().unwrap() {
        let line = site["frames"][0]["line"].as_u64().unwrap() as u32;
        by_line.insert(
            line,
            (
                site["bytes"].as_u64().unwrap(),
                site["count"].as_u64().unwrap(),
            ),
        );
    }
    let at = |m: &str| source_line_of("examples/train_leak.c", m);
    let want: BTreeMap<u32, (u64, u64)> = [
        (at("GPUMEMPROF-WEIGHTS"), (64 * MIB, 1)),
        (at("GPUMEMPROF-ACT-8M"), (8 * MIB, 1)),
        (at("GPUMEMPROF-ACT-4M"), (4 * MIB, 1)),
        (at("GPUMEMPROF-ACT-2M"), (2 * MIB, 1)),
        (at("GPUMEMPROF-GRAD"), (16 * MIB, 1)),
        (at("GPUMEMPROF-LEAK"), (20 * MIB, 20)),
    ]
    .into();
    assert_eq!(by_line, want);
}

#[test]
fn eight_threads_of_100000_pairs_lose_no_event() {
    let dir = scratch("threads");
    let run = run_profiled(&dir, "threads", &["8", "100000", "4096"], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.stdout().trim(), "threads=8 pairs=100000 ok");

    let (header, records) = decode(&run.trace);
    let malloc = api_id(&header, "cudaMalloc");
    let free = api_id(&header, "cudaFree");
    let mut per_thread: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut end = None;
    for r in &records {
        match r {
            Record::Alloc(a) => {
                assert_eq!((a.api, a.size, a.kind), (malloc, 4096, MemKind::Device));
                per_thread.entry(a.tid).or_default().0 += 1;
            }
            Record::Free(f) => {
                assert_eq!((f.api, f.result), (free, 0));
                per_thread.entry(f.tid).or_default().1 += 1;
            }
            Record::End(s) => end = Some(*s),
            _ => {}
        }
    }
    assert_eq!(per_thread.len(), 8, "eight allocating threads");
    for (tid, counts) in &per_thread {
        assert_eq!(*counts, (100_000, 100_000), "thread {tid}");
    }
    let end = end.expect("the trace was closed cleanly");
    assert_eq!(end.events, 1_600_000);
    assert_eq!(end.dropped, 0);

    // Address reuse across threads replays cleanly: every free finds its allocation.
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["totals"]["allocations"], 800_000);
    assert_eq!(s["totals"]["frees"], 800_000);
    assert_eq!(s["totals"]["live_bytes_at_end"], 0);
    assert_eq!(s["unknown_frees"], 0);
    assert_eq!(s["trace"]["dropped"], 0);
}

#[test]
fn every_runtime_api_is_recorded_with_its_kind_size_stream_and_pool() {
    let dir = scratch("all_apis");
    let run = run_profiled(&dir, "all_apis", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());

    let s = report("summary", &run.trace, &[]);
    let rows: Vec<(i64, String, u64, u64, u64, u64)> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["device"].as_i64().unwrap(),
                r["kind"].as_str().unwrap().to_string(),
                r["allocations"].as_u64().unwrap(),
                r["frees"].as_u64().unwrap(),
                r["live_bytes_at_end"].as_u64().unwrap(),
                r["live_allocations_at_end"].as_u64().unwrap(),
            )
        })
        .collect();
    // The counts documented at the top of tests/programs/all_apis.c.
    assert_eq!(
        rows,
        vec![
            (0, "device".into(), 9, 8, 5 * MIB, 1),
            (0, "managed".into(), 2, 1, 3 * MIB, 1),
            (0, "pinned_host".into(), 3, 2, 2 * MIB, 1),
            (1, "device".into(), 2, 2, 0, 0),
        ]
    );
    assert_eq!(s["failed_allocations"], 16);
    assert_eq!(s["failed_frees"], 8);
    assert_eq!(s["unknown_frees"], 0);
    assert_eq!(s["totals"]["live_bytes_at_end"], 10 * MIB);

    let (header, records) = decode(&run.trace);
    let name: HashMap<u16, String> = header["apis"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_u64().unwrap() as u16,
                a["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut allocs: BTreeMap<String, Vec<(u64, u64, u64)>> = BTreeMap::new();
    let mut frees: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut oom = Vec::new();
    for r in &records {
        match r {
            Record::Alloc(a) => allocs
                .entry(name[&a.api].clone())
                .or_default()
                .push((a.size, a.stream, a.pool)),
            Record::Free(f) => {
                let e = frees.entry(name[&f.api].clone()).or_default();
                if f.result == 0 {
                    e.0 += 1;
                } else {
                    e.1 += 1;
                }
                let ordered = f.flags & FREE_STREAM_ORDERED != 0;
                assert_eq!(ordered, name[&f.api].starts_with("cudaFreeAsync"), "{f:?}");
            }
            Record::AllocFailed(f) if f.result == 2 => oom.push((name[&f.api].clone(), f.size)),
            _ => {}
        }
    }
    let count = |n: &str| allocs.get(n).map_or(0, Vec::len);
    assert_eq!(count("cudaMalloc"), 5);
    assert_eq!(count("cudaMallocAsync"), 1);
    assert_eq!(count("cudaMallocAsync_ptsz"), 1);
    assert_eq!(count("cudaMallocFromPoolAsync"), 2);
    assert_eq!(count("cudaMallocManaged"), 2);
    assert_eq!(count("cudaMallocHost"), 1);
    assert_eq!(count("cudaHostAlloc"), 2);
    // Pitched allocations record what was reserved: pitch x rows (x depth).
    assert_eq!(allocs["cudaMallocPitch"], vec![(1024 * 10, 0, 0)]);
    assert_eq!(allocs["cudaMalloc3D"], vec![(512 * 4 * 3, 0, 0)]);
    // Stream-ordered allocations carry their stream; pool allocations their pool.
    assert!(
        allocs["cudaMallocAsync"].iter().all(|a| a.1 != 0),
        "{allocs:?}"
    );
    let pools: Vec<u64> = allocs["cudaMallocFromPoolAsync"]
        .iter()
        .map(|a| a.2)
        .collect();
    assert_eq!(pools, vec![0x1000, 0x1001]);
    // Successful and failed frees per API (NULL frees are not recorded).
    let ok = |n: &str| frees.get(n).map_or(0, |f| f.0);
    assert_eq!(
        ok("cudaFree") + ok("cudaFreeAsync") + ok("cudaFreeAsync_ptsz"),
        11
    );
    assert_eq!(ok("cudaFreeAsync_ptsz"), 1);
    assert_eq!(ok("cudaFreeHost"), 2);
    assert_eq!(frees.values().map(|f| f.1).sum::<u64>(), 8);
    oom.sort();
    assert_eq!(
        oom,
        vec![
            ("cudaMalloc".to_string(), 2u64 << 30),
            ("cudaMallocHost".to_string(), 1u64 << 62),
            ("cudaMallocManaged".to_string(), 2u64 << 30),
        ]
    );
}

#[test]
fn allocation_in_a_constructor_before_main_is_recorded_with_its_stack() {
    let dir = scratch("ctor");
    let run = run_profiled(&dir, "ctor_alloc", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let leaks = report("leaks", &run.trace, &[]);
    assert_eq!(leaks["total_bytes"], 2 * MIB);
    assert_eq!(leaks["total_count"], 1);
    let line = source_line_of("examples/ctor_alloc.c", "GPUMEMPROF-CTOR");
    let top = &leaks["groups"][0]["frames"][0];
    assert!(
        top["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("examples/ctor_alloc.c"))
            && top["line"] == line,
        "expected ctor_alloc.c:{line}, got {top}"
    );
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["totals"]["allocations"], 2);
    assert_eq!(s["totals"]["frees"], 1);
    assert_eq!(s["totals"]["peak_bytes"], 3 * MIB);
}

#[test]
fn header_names_the_process_and_config_and_only_allowed_environment() {
    let dir = scratch("header");
    let run = run_profiled(
        &dir,
        "train_leak",
        &["2"],
        &[
            ("GPUMEMPROF_STACK_DEPTH", "3"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("MY_SECRET_TOKEN", "hunter2"),
        ],
    );
    assert_eq!(run.output.status.code(), Some(0));
    let (h, records) = decode(&run.trace);
    assert_eq!(h["format"], "gpumemprof-trace");
    assert_eq!(h["argv"][1], "2");
    assert!(h["exe"].as_str().unwrap().ends_with("/train_leak"));
    assert_eq!(h["config"]["stacks"], "full");
    assert_eq!(h["config"]["stack_depth"], 3);
    assert_eq!(h["env"], serde_json::json!({"CUDA_VISIBLE_DEVICES": "0"}));
    assert!(!std::fs::read_to_string(&run.trace)
        .unwrap_or_default()
        .contains("hunter2"));
    // The depth limit holds for every stack.
    let depths: Vec<usize> = records
        .iter()
        .filter_map(|r| match r {
            Record::Stack { frames, .. } => Some(frames.len()),
            _ => None,
        })
        .collect();
    assert!(!depths.is_empty());
    assert!(depths.iter().all(|&d| d == 3), "{depths:?}");
    // Modules are recorded so the analyzer can symbolize: the program itself, with a build-id.
    assert!(records.iter().any(|r| matches!(r,
        Record::Module(m) if m.path.ends_with("/train_leak") && !m.build_id.is_empty())));
}

#[test]
fn stacks_off_records_events_without_stacks() {
    let dir = scratch("stacks_off");
    let run = run_profiled(&dir, "train_leak", &["5"], &[("GPUMEMPROF_STACKS", "off")]);
    assert_eq!(run.output.status.code(), Some(0));
    let (_, records) = decode(&run.trace);
    assert!(!records.iter().any(|r| matches!(r, Record::Stack { .. })));
    let allocs: Vec<u64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Alloc(a) => Some(a.stack),
            _ => None,
        })
        .collect();
    assert_eq!(allocs.len(), 26);
    assert!(allocs.iter().all(|&s| s == 0));
    let leaks = report("leaks", &run.trace, &[]);
    assert_eq!(leaks["total_bytes"], 5 * MIB);
    assert_eq!(leaks["total_count"], 5);
}

#[test]
fn free_stacks_off_records_frees_without_a_stack_and_allocations_with_theirs() {
    // train_leak 5: 26 allocations, 21 frees, 5 MiB leaked from keep_for_logging.
    let leak_site = |env: &[(&str, &str)]| {
        let dir = scratch(&format!("free_stacks_{}", env.len()));
        let run = run_profiled(&dir, "train_leak", &["5"], env);
        assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
        let (h, records) = decode(&run.trace);
        let stacks = |free: bool| -> Vec<u64> {
            (records.iter())
                .filter_map(|r| match r {
                    Record::Alloc(a) if !free => Some(a.stack),
                    Record::Free(f) if free => Some(f.stack),
                    _ => None,
                })
                .collect()
        };
        let (allocs, frees) = (stacks(false), stacks(true));
        assert_eq!((allocs.len(), frees.len()), (26, 21));
        assert!(allocs.iter().all(|&s| s != 0), "{allocs:?}");
        let leaks = report("leaks", &run.trace, &[]);
        assert_eq!(
            (leaks["total_bytes"].as_u64(), leaks["total_count"].as_u64()),
            (Some(5 * MIB), Some(5))
        );
        let site = &leaks["groups"][0]["site"];
        let site = (site["function"].clone(), site["line"].clone());
        (h["config"]["free_stacks"].clone(), frees, site)
    };
    let (on, frees_on, site_on) = leak_site(&[]);
    let (off, frees_off, site_off) = leak_site(&[("GPUMEMPROF_FREE_STACKS", "0")]);
    assert_eq!(
        (on, off),
        (serde_json::json!(true), serde_json::json!(false))
    );
    assert!(frees_on.iter().all(|&s| s != 0), "{frees_on:?}");
    assert!(frees_off.iter().all(|&s| s == 0), "{frees_off:?}");
    // The leak is found at the same line either way.
    assert_eq!(site_on.0, "keep_for_logging");
    assert_eq!(site_on, site_off);
}

#[test]
fn a_free_of_memory_allocated_where_the_shim_cannot_see_is_an_unknown_free() {
    // 1 MiB through the export and 2 MiB through dlsym on libcudart's handle are seen; 3 MiB
    // from the legacy, unhooked v1 cuMemAlloc is freed with cudaFree: an unknown free.
    let dir = scratch("unseen_free");
    let run = run_profiled(&dir, "unseen_free", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.stdout(), "ok\n");
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["totals"]["allocations"], 2);
    assert_eq!(s["totals"]["bytes_allocated"], 3 * MIB);
    assert_eq!(s["totals"]["frees"], 2);
    assert_eq!(s["unknown_frees"], 1);
    assert_eq!(s["failed_frees"], 0);
    assert_eq!(s["totals"]["live_bytes_at_end"], 0);
}

/// A runtime with no `cudaGetDevice` and no driver in the process (`bare_runtime.c`): the
/// allocations go on the only device, and the torch-snapshot export keeps them (it dropped
/// every one while they were on device "?"). A successful allocation where the runtime
/// counts one device is on device 0 for certain (`device::of_allocation`, which never asks
/// for the current device then); the failed 2 TiB request at the end is put there too, by
/// the fallback for a runtime that cannot name its device, which says so once.
#[test]
fn a_runtime_without_get_device_puts_allocations_on_the_only_device() {
    let dir = scratch("bare_runtime");
    let lib = gpumemprof_tests::shared_library("bare_runtime");
    let run = run_profiled(
        &dir,
        "bare_runtime_user",
        &[lib.to_str().unwrap(), "100", "3"],
        &[("GPUMEMPROF_NVML_MS", "0")],
    );
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.stdout(), "pairs=100 kept=3 refused=2\n");
    let stderr = run.stderr();
    let said: Vec<&str> = shim_lines(&stderr)
        .into_iter()
        .filter(|l| l.contains("warning"))
        .collect();
    assert_eq!(
        said,
        [
            "gpumemprof: warning: the CUDA runtime has no cudaGetDevice; its allocations are put \
          on the only device, device 0"
        ],
        "{stderr}"
    );

    let s = report("summary", &run.trace, &[]);
    let rows = s["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["device"], 0);
    assert_eq!(rows[0]["allocations"], 103);
    assert_eq!(rows[0]["frees"], 100);
    assert_eq!(rows[0]["live_bytes_at_end"], 6 * MIB);
    assert_eq!(rows[0]["failed_allocations"], 1);

    let pickle = dir.join("bare.pickle");
    let out = analyzer()
        .args(["export", "--format", "torch-snapshot"])
        .arg(&run.trace)
        .arg("-o")
        .arg(&pickle)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stderr);
    // 103 allocations and 100 frees, each an alloc entry and a segment entry, and the
    // refused request's out-of-memory entry.
    assert!(
        said.contains("507 trace entries on 1 device, 3 segments live at the end"),
        "{said}"
    );
}
