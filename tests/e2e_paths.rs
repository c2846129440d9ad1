//! End to end, every door to an allocation function (the every-path issue): programs reach
//! the CUDA driver, the runtime and HIP the ways real programs do, under
//! `LD_PRELOAD=libgpumemprof.so`; each test asserts exactly which API recorded how many
//! allocations and bytes, so a missed call or a call counted twice (runtime over driver)
//! fails. The programs print what they did and are checked without the profiler in
//! `sim_contract.rs`.

use gpumemprof_format::{MemKind, Record, FREE_RANGE, FREE_STREAM_ORDERED};
use gpumemprof_tests::profiled::*;
use gpumemprof_tests::{script_command, shared_library, shim_path, source_line_of};
use std::collections::BTreeMap;
use std::path::Path;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// What a trace recorded, per API name.
#[derive(Debug, Default)]
struct Tally {
    /// name -> (count, bytes) of successful allocations.
    allocs: BTreeMap<String, (u64, u64)>,
    /// name -> count of free calls.
    frees: BTreeMap<String, u64>,
    /// name -> sizes of failed allocations.
    failed: BTreeMap<String, Vec<u64>>,
}

fn names(header: &serde_json::Value) -> BTreeMap<u16, String> {
    header["apis"]
        .as_array()
        .expect("apis table")
        .iter()
        .map(|a| {
            (
                a["id"].as_u64().unwrap() as u16,
                a["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn tally(trace: &Path) -> (Tally, Vec<Record>) {
    let (header, records) = decode(trace);
    let names = names(&header);
    let mut t = Tally::default();
    for r in &records {
        match r {
            Record::Alloc(a) => {
                let e = t.allocs.entry(names[&a.api].clone()).or_default();
                e.0 += 1;
                e.1 += a.size;
            }
            Record::Free(f) => *t.frees.entry(names[&f.api].clone()).or_default() += 1,
            Record::AllocFailed(f) => t
                .failed
                .entry(names[&f.api].clone())
                .or_default()
                .push(f.size),
            _ => {}
        }
    }
    (t, records)
}

fn map<V: Clone>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn row<'a>(summary: &'a serde_json::Value, device: i64, kind: &str) -> &'a serde_json::Value {
    summary["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["device"] == device && r["kind"] == kind)
        .unwrap_or_else(|| panic!("no row ({device}, {kind}) in {summary:#}"))
}

/// (a) A program linked to libcuda calls the driver through the dynamic linker.
#[test]
fn a_program_linked_to_the_driver_is_seen_call_by_call() {
    let dir = scratch("paths_drv_linked");
    let run = run_profiled(&dir, "drv_linked", &[], &[]);
    run.assert_ok();
    let (t, records) = tally(&run.trace);
    assert_eq!(
        t.allocs,
        map(&[
            ("cuMemAlloc_v2", (3, 6 * MIB)),
            ("cuMemAllocAsync", (1, 8 * MIB)),
            ("cuMemAllocFromPoolAsync", (1, 5 * MIB)),
            ("cuMemAllocHost_v2", (1, MIB)),
            ("cuMemAllocManaged", (1, 4 * MIB)),
            ("cuMemAllocPitch_v2", (1, 1024 * 10)),
            ("cuMemHostAlloc", (1, 2 * MIB)),
            ("cuMemHostRegister_v2", (1, 64 << 10)),
        ])
    );
    assert_eq!(
        t.frees,
        map(&[
            ("cuMemFreeAsync", 1),
            ("cuMemFreeHost", 1),
            ("cuMemFree_v2", 1),
            ("cuMemHostUnregister", 1),
        ])
    );
    assert_eq!(t.failed, map(&[("cuMemAlloc_v2", vec![2 << 40])]));
    // The out-of-memory failure carries the device's memory, read on the failing thread.
    let failure = records
        .iter()
        .find_map(|r| match r {
            Record::AllocFailed(f) => Some(*f),
            _ => None,
        })
        .unwrap();
    assert_eq!((failure.result, failure.device), (2, 0));
    assert_eq!(failure.mem_total, 16 * GIB);
    assert!(
        failure.mem_free < 16 * GIB && failure.mem_free > 15 * GIB,
        "{failure:?}"
    );
    let async_free = records.iter().any(
        |r| matches!(r, Record::Free(f) if f.flags & FREE_STREAM_ORDERED != 0 && f.stream != 0),
    );
    assert!(
        async_free,
        "cuMemFreeAsync is recorded stream-ordered with its stream"
    );
    let pool_alloc = records.iter().any(
        |r| matches!(r, Record::Alloc(a) if a.pool == 0x1000 && a.size == 5 * MIB && a.device == 0),
    );
    assert!(pool_alloc, "the pool allocation carries its pool");

    let s = report("summary", &run.trace, &[]);
    assert_eq!(row(&s, 0, "device")["live_bytes_at_end"], 9_447_424);
    assert_eq!(row(&s, 0, "managed")["live_bytes_at_end"], 4 * MIB);
    assert_eq!(row(&s, 0, "pinned_host")["live_bytes_at_end"], 2 * MIB);
    assert_eq!(s["unknown_frees"], 0);
}

/// (b) The static-cudart way: dlopen + dlsym(handle, "cuGetProcAddress_v2"), then every
/// driver function (the resolver itself included) through the resolver.
#[test]
fn the_static_cudart_way_through_the_resolver_is_seen_and_errors_pass_through() {
    let dir = scratch("paths_drv_resolver");
    let run = run_profiled(&dir, "drv_resolver", &[], &[]);
    run.assert_ok();
    let out = run.stdout();
    // The driver's answers are untouched: a missing function is its error and NULL,
    // and the version argument still picks the v1 ABI.
    for fact in [
        "missing_rc=500",
        "missing_status=1",
        "missing_pfn_null=1",
        "v1_differs_from_v2=1",
        "self_lookup_status=0",
    ] {
        assert!(out.lines().any(|l| l == fact), "{fact} not in:\n{out}");
    }
    let (t, _) = tally(&run.trace);
    assert_eq!(
        t.allocs,
        map(&[
            ("cuMemAlloc_v2", (1, 7 * MIB)),
            ("cuMemAllocAsync", (1, 9 * MIB))
        ])
    );
    assert_eq!(t.frees, map(&[("cuMemFree_v2", 1)]));
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["totals"]["live_bytes_at_end"], 9 * MIB);
}

/// A runtime that asks the resolver on every call (`bench_resolve`: cuMemAlloc, a function
/// that is not hooked, cuMemFree, each round): every answer after the first comes from the
/// resolver wrapper's cache, and every allocation and free is still seen.
#[test]
fn a_resolver_asked_on_every_call_still_substitutes_every_time() {
    let dir = scratch("paths_resolve_per_call");
    let run = run_profiled(&dir, "bench_resolve", &["500"], &[]);
    run.assert_ok();
    let (t, _) = tally(&run.trace);
    // 1000 warm-up rounds and 500 timed ones.
    assert_eq!(t.allocs, map(&[("cuMemAlloc_v2", (1500, 1500 * 4096))]));
    assert_eq!(t.frees, map(&[("cuMemFree_v2", 1500)]));
}

/// (c) The TensorFlow/XLA way: dlopen(libcuda, RTLD_LOCAL) + dlsym(handle, "cuMemAlloc_v2").
#[test]
fn the_tensorflow_way_of_dlsym_on_a_local_handle_is_seen() {
    let dir = scratch("paths_drv_dlsym");
    let run = run_profiled(&dir, "drv_dlsym", &[], &[]);
    run.assert_ok();
    let (t, records) = tally(&run.trace);
    assert_eq!(t.allocs, map(&[("cuMemAlloc_v2", (2, 16 * MIB))]));
    assert_eq!(t.frees, map(&[("cuMemFree_v2", 1)]));
    // The device comes from the handle's library (RTLD_LOCAL: invisible to RTLD_NEXT).
    assert!(records
        .iter()
        .all(|r| !matches!(r, Record::Alloc(a) if a.device != 0)));
    let s = report("summary", &run.trace, &[]);
    assert_eq!(row(&s, 0, "device")["live_bytes_at_end"], 10 * MIB);
}

/// (d) PyTorch's expandable segments: VMM calls through cudaGetDriverEntryPoint.
#[test]
fn expandable_segments_count_mapped_memory_once_with_exact_peak_and_live_bytes() {
    let dir = scratch("paths_vmm");
    let run = run_profiled(&dir, "vmm_expandable", &[], &[]);
    run.assert_ok();
    let (t, records) = tally(&run.trace);
    assert_eq!(
        t.allocs,
        map(&[
            ("cuMemAddressReserve", (1, 64 * MIB)),
            ("cuMemCreate", (5, 10 * MIB)),
            ("cuMemMap", (5, 10 * MIB)),
        ])
    );
    assert_eq!(t.frees, map(&[("cuMemRelease", 2), ("cuMemUnmap", 1)]));
    // One unmap released two adjacent mappings.
    let unmap = records
        .iter()
        .find_map(|r| match r {
            Record::Free(f) if f.flags & FREE_RANGE != 0 => Some(*f),
            _ => None,
        })
        .unwrap();
    assert_eq!((unmap.size, unmap.kind), (4 * MIB, MemKind::Device));

    let s = report("summary", &run.trace, &[]);
    let device = row(&s, 0, "device");
    assert_eq!(device["peak_bytes"], 8 * MIB);
    assert_eq!(device["live_bytes_at_end"], 6 * MIB);
    assert_eq!(device["allocations"], 5);
    assert_eq!(device["frees"], 2);
    assert_eq!(row(&s, 0, "vmm_handle")["live_bytes_at_end"], 6 * MIB);
    assert_eq!(
        row(&s, -1, "address_reservation")["live_bytes_at_end"],
        64 * MIB
    );
    // Handles and the reservation are not memory: totals are the mappings alone.
    assert_eq!(s["totals"]["peak_bytes"], 8 * MIB);
    assert_eq!(s["totals"]["live_bytes_at_end"], 6 * MIB);
    assert_eq!(s["unknown_frees"], 0);
    let leaks = report("leaks", &run.trace, &[]);
    assert_eq!(leaks["total_bytes"], 6 * MIB);
    assert_eq!(leaks["total_count"], 3);
}

/// (e) Python ctypes calling the runtime: dlopen + dlsym(handle, "cudaMalloc").
#[test]
fn python_ctypes_calls_into_the_runtime_are_seen() {
    let dir = scratch("paths_ctypes");
    let trace = dir.join("ctypes.trace");
    let mut cmd = script_command("ctypes_alloc.py");
    cmd.env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace);
    let output = cmd.output().expect("run python3");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (t, _) = tally(&trace);
    assert_eq!(t.allocs, map(&[("cudaMalloc", (3, 12 * MIB))]));
    assert_eq!(t.frees, map(&[("cudaFree", 1)]));
    let leaks = report("leaks", &trace, &[]);
    assert_eq!(leaks["total_bytes"], 8 * MIB);
    assert_eq!(leaks["total_count"], 2);
    // The innermost Python frame of the leak is the marked line of allocate_batch.
    let line = source_line_of("tests/programs/ctypes_alloc.py", "GPUMEMPROF-CTYPES-ALLOC");
    let first_python = leaks["groups"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["python"] == true)
        .cloned()
        .unwrap_or_default();
    assert_eq!(first_python["function"], "allocate_batch", "{leaks}");
    assert_eq!(first_python["line"], line);
}

/// (f) A second preloaded library forwarding with dlsym(RTLD_NEXT, ...) still gets the
/// next function (the override forwards RTLD_NEXT with the caller's identity), in either
/// preload order, and the allocations are counted once.
#[test]
fn a_second_preloaded_library_still_finds_its_next_function() {
    let second = shared_library("second_preload");
    for (label, order) in [
        (
            "shim_first",
            format!("{}:{}", shim_path().display(), second.display()),
        ),
        (
            "second_first",
            format!("{}:{}", second.display(), shim_path().display()),
        ),
    ] {
        let dir = scratch(&format!("paths_second_{label}"));
        let trace = dir.join("t.trace");
        let mut cmd = gpumemprof_tests::program_command("cudart_once");
        cmd.env("LD_PRELOAD", &order)
            .env("GPUMEMPROF_OUTPUT", &trace);
        let output = cmd.output().expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{label}: {stderr}");
        assert!(
            stderr.lines().any(|l| l == "second_preload_calls=2"),
            "{label}: {stderr}"
        );
        let (t, _) = tally(&trace);
        assert_eq!(t.allocs, map(&[("cudaMalloc", (2, 16 * MIB))]), "{label}");
        assert_eq!(t.frees, map(&[("cudaFree", 1)]), "{label}");
    }
}

/// (g) Per-thread-default-stream lookups get the `_ptsz` functions.
#[test]
fn per_thread_stream_lookups_get_the_ptsz_functions() {
    let dir = scratch("paths_ptsz");
    let run = run_profiled(&dir, "ptsz_lookup", &[], &[]);
    run.assert_ok();
    let out = run.stdout();
    assert!(out.contains("alloc_pointers_differ=1\n"), "{out}");
    assert!(out.contains("free_pointers_differ=1\n"), "{out}");
    let (t, _) = tally(&run.trace);
    assert_eq!(
        t.allocs,
        map(&[
            ("cuMemAllocAsync", (1, 5 * MIB)),
            ("cuMemAllocAsync_ptsz", (1, 3 * MIB)),
        ])
    );
    assert_eq!(
        t.frees,
        map(&[("cuMemFreeAsync", 1), ("cuMemFreeAsync_ptsz", 1)])
    );
}

/// (h) cudaMalloc through the runtime, which reaches cuMemAlloc_v2 through the resolver:
/// one allocation, recorded as the runtime call.
#[test]
fn a_runtime_call_that_goes_through_the_driver_is_counted_once() {
    let dir = scratch("paths_once");
    let run = run_profiled(&dir, "cudart_once", &[], &[]);
    run.assert_ok();
    let (t, _) = tally(&run.trace);
    assert_eq!(t.allocs, map(&[("cudaMalloc", (2, 16 * MIB))]));
    assert_eq!(t.frees, map(&[("cudaFree", 1)]));
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["totals"]["peak_bytes"], 12 * MIB);
    assert_eq!(s["totals"]["live_bytes_at_end"], 4 * MIB);
}

/// (i) HIP, linked: every allocation function, VMM included, and an out-of-memory.
#[test]
fn hip_allocations_are_seen_with_the_same_semantics() {
    let dir = scratch("paths_hip");
    let run = run_profiled(&dir, "hip_alloc", &[], &[]);
    run.assert_ok();
    let (t, records) = tally(&run.trace);
    assert_eq!(
        t.allocs,
        map(&[
            ("hipExtMallocWithFlags", (1, 5 * MIB)),
            ("hipHostMalloc", (1, MIB)),
            ("hipMalloc", (1, MIB)),
            ("hipMallocAsync", (1, 2 * MIB)),
            ("hipMallocFromPoolAsync", (1, 3 * MIB)),
            ("hipMallocManaged", (1, 4 * MIB)),
            ("hipMemAddressReserve", (1, 16 * MIB)),
            ("hipMemCreate", (1, 2 * MIB)),
            ("hipMemMap", (1, 2 * MIB)),
        ])
    );
    assert_eq!(
        t.frees,
        map(&[
            ("hipFree", 1),
            ("hipFreeAsync", 1),
            ("hipHostFree", 1),
            ("hipMemAddressFree", 1),
            ("hipMemRelease", 1),
            ("hipMemUnmap", 1),
        ])
    );
    assert_eq!(t.failed.len(), 1, "{:?}", t.failed);
    assert_eq!(t.failed["hipMalloc"].len(), 1);
    let failure = records
        .iter()
        .find_map(|r| match r {
            Record::AllocFailed(f) => Some(*f),
            _ => None,
        })
        .unwrap();
    assert_eq!(failure.result, 2);
    assert_eq!(failure.mem_total, 16 * GIB);
    let s = report("summary", &run.trace, &[]);
    assert_eq!(row(&s, 0, "device")["live_bytes_at_end"], 8 * MIB);
    assert_eq!(row(&s, 0, "managed")["live_bytes_at_end"], 4 * MIB);
    assert_eq!(s["unknown_frees"], 0);
}
