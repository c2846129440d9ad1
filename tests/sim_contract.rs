//! The simulated CUDA runtime honours the real contract, checked without any profiler.
//!
//! Every end-to-end test of the profiler trusts the simulator's results (return codes,
//! out-parameters, addresses, capacity) and the example programs' documented numbers; these
//! tests pin both down, so a profiler test failure can never be the simulator's fault.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use gpumemprof_tests::{program_command, sim_dir, source_line_of, target_dir};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn run(mut cmd: Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs a program that must succeed; returns its stdout.
fn run_ok(cmd: Command) -> String {
    let description = format!("{cmd:?}");
    let output = run(cmd);
    assert!(
        output.status.success(),
        "{description} failed with {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(&output),
        stderr(&output)
    );
    stdout(&output)
}

fn all_apis_command() -> Command {
    let mut cmd = program_command("all_apis");
    cmd.env("SIMCUDA_CAPACITY", GIB.to_string())
        .env("SIMCUDA_DEVICES", "2");
    cmd
}

/// all_apis prints "<label> <field>=<value>" lines; keyed here by "<label> <field>".
fn all_apis_facts() -> BTreeMap<String, String> {
    let out = run_ok(all_apis_command());
    let mut facts = BTreeMap::new();
    for line in out.lines() {
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("odd line {line:?}"));
        let previous = facts.insert(key.to_string(), value.to_string());
        assert!(previous.is_none(), "all_apis printed {key:?} twice");
    }
    facts
}

#[test]
fn all_apis_results_follow_the_cuda_contract() {
    let facts = all_apis_facts();
    let expected: &[(&str, String)] = &[
        ("runtime_version value", "12040".into()),
        ("driver_version value", "12040".into()),
        ("runtime_version.null_out rc", "1".into()),
        ("device_count value", "2".into()),
        ("mem_info.start free", GIB.to_string()),
        ("mem_info.start total", GIB.to_string()),
        // Plain allocations: the first address of device 0, NULL for size 0 and on failure.
        ("malloc rc", "0".into()),
        ("malloc ptr", "0x700000000000".into()),
        ("malloc.null_out rc", "1".into()),
        ("malloc.zero rc", "0".into()),
        ("malloc.zero ptr", "0x0".into()),
        ("malloc.over_capacity rc", "2".into()),
        ("malloc.over_capacity ptr", "0x0".into()),
        // Last error: peek keeps it, get returns and clears it.
        ("peek_at_last_error rc", "2".into()),
        ("peek_at_last_error.again rc", "2".into()),
        ("get_last_error rc", "2".into()),
        ("get_last_error.again rc", "0".into()),
        // 1000 bytes are charged as 1024 and bump the next address by 1024.
        ("malloc.odd_size ptr", "0x700000100000".into()),
        ("mem_info.after_malloc free", (GIB - MIB - 1024).to_string()),
        ("free.null rc", "0".into()),
        ("free.never_allocated rc", "1".into()),
        ("free.interior rc", "1".into()),
        ("free rc", "0".into()),
        ("free.double rc", "1".into()),
        // LIFO reuse by exact rounded size.
        ("malloc.reuse ptr", "0x700000100000".into()),
        ("malloc.reuse same_as_freed", "1".into()),
        // Streams and stream-ordered allocation.
        ("stream_create ptr", "0x5e0000000100".into()),
        ("malloc_async ptr", "0x700000100400".into()),
        ("malloc_async.zero ptr", "0x0".into()),
        ("malloc_async.bad_stream rc", "400".into()),
        ("malloc_async_ptsz ptr", "0x700000500400".into()),
        ("free_async rc", "0".into()),
        ("free_async_ptsz rc", "0".into()),
        ("free_async.double rc", "1".into()),
        ("free_async.null rc", "0".into()),
        // Default pools: 0x1000 + device; the pool, not the current device, picks the device.
        ("default_pool.dev0 ptr", "0x1000".into()),
        ("default_pool.dev1 ptr", "0x1001".into()),
        ("default_pool.bad_device rc", "101".into()),
        ("malloc_from_pool ptr", "0x700000900400".into()),
        ("malloc_from_pool.dev1 ptr", "0x710000000000".into()),
        ("malloc_from_pool.bad_pool rc", "1".into()),
        ("malloc_from_pool.zero ptr", "0x0".into()),
        // The current device is per thread and survives a failed cudaSetDevice.
        ("get_device.after_set value", "1".into()),
        ("malloc.dev1 ptr", "0x710000000000".into()),
        ("mem_info.dev1 free", (GIB - 2 * MIB).to_string()),
        ("set_device.2 rc", "101".into()),
        ("set_device.negative rc", "101".into()),
        ("get_device.after_bad_set value", "1".into()),
        // Managed memory is real host memory charged to the device.
        ("malloc_managed ptr", "host-page-aligned".into()),
        ("malloc_managed.zero rc", "1".into()),
        ("malloc_managed.bad_flags rc", "1".into()),
        ("malloc_managed.over_capacity rc", "2".into()),
        ("malloc_managed.over_capacity ptr", "0x0".into()),
        ("mem_info.after_managed free", (GIB - 5 * MIB).to_string()),
        ("free.managed rc", "0".into()),
        ("free_host.managed rc", "1".into()),
        // Pitch = width rounded up to 512.
        ("malloc_pitch ptr", "0x700000b00400".into()),
        ("malloc_pitch pitch", "1024".into()),
        ("malloc_pitch.null_pitch rc", "1".into()),
        ("malloc_3d ptr", "0x700000b02c00".into()),
        ("malloc_3d pitch", "512".into()),
        ("malloc_3d xsize", "100".into()),
        ("malloc_3d ysize", "4".into()),
        // Pinned host memory has its own free function and capacity.
        ("malloc_host ptr", "host-page-aligned".into()),
        ("malloc_host.zero ptr", "0x0".into()),
        ("malloc_host.over_capacity rc", "2".into()),
        ("free.pinned rc", "1".into()),
        ("free_host rc", "0".into()),
        ("free_host.double rc", "1".into()),
        ("free_host.null rc", "0".into()),
        ("free_host.device_ptr rc", "1".into()),
        ("host_alloc ptr", "host-page-aligned".into()),
        ("host_alloc.bad_flags rc", "1".into()),
        // The end state: 5 MiB device + 3 MiB managed charged to device 0.
        ("malloc.keep ptr", "0x700000b04400".into()),
        ("mem_info.end free", (GIB - 8 * MIB).to_string()),
        ("mem_info.end total", GIB.to_string()),
        ("mem_info.null_free total", GIB.to_string()),
        ("mem_info.null_total free", (GIB - 8 * MIB).to_string()),
        ("mem_info.null_both rc", "0".into()),
        ("stream_destroy rc", "0".into()),
        ("stream_destroy.again rc", "400".into()),
        ("error.2 name", "cudaErrorMemoryAllocation".into()),
        ("error.2 string", "out of memory".into()),
        ("error.1 name", "cudaErrorInvalidValue".into()),
        ("error.9999 string", "unrecognized error code".into()),
        ("get_last_error.end rc", "400".into()),
        ("get_last_error.end_again rc", "0".into()),
        ("live device", (5 * MIB).to_string()),
        ("live managed", (3 * MIB).to_string()),
        ("live pinned_host", (2 * MIB).to_string()),
    ];
    for (key, want) in expected {
        assert_eq!(facts.get(*key), Some(want), "all_apis fact {key:?}");
    }
}

#[test]
fn all_apis_output_is_deterministic() {
    // The program sets the simulator's variables itself when they are unset.
    let first = run_ok(all_apis_command());
    let second = run_ok(program_command("all_apis"));
    assert_eq!(first, second);
}

#[test]
fn all_apis_rejects_a_different_configuration() {
    let mut cmd = program_command("all_apis");
    cmd.env("SIMCUDA_DEVICES", "1");
    let output = run(cmd);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("device count"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn train_leak_runs_its_steps() {
    let out = run_ok(program_command("train_leak"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 21, "{out}");
    for (i, line) in lines[..20].iter().enumerate() {
        assert_eq!(*line, format!("step {} done", i + 1));
    }
    assert_eq!(lines[20], "finished 20 steps");
}

/// The documented peak is (94 + steps) MiB: exactly that much capacity suffices, 512 bytes
/// less fails at the last step's logging allocation.
#[test]
fn train_leak_peak_is_94_mib_plus_one_per_step() {
    for steps in [3u64, 20] {
        let peak = (94 + steps) * MIB;
        let mut enough = program_command("train_leak");
        enough
            .arg(steps.to_string())
            .env("SIMCUDA_CAPACITY", peak.to_string());
        assert!(run_ok(enough).ends_with(&format!("finished {steps} steps\n")));

        let mut short = program_command("train_leak");
        short
            .arg(steps.to_string())
            .env("SIMCUDA_CAPACITY", (peak - 512).to_string());
        let output = run(short);
        assert_eq!(output.status.code(), Some(1));
        let err = stderr(&output);
        assert!(
            err.contains("last_log_buffer") && err.contains("cudaErrorMemoryAllocation"),
            "{err}"
        );
        assert!(stdout(&output).ends_with(&format!("step {} done\n", steps - 1)));
    }
}

#[test]
fn threads_free_everything_they_allocate() {
    let mut cmd = program_command("threads");
    cmd.args(["4", "2000", "1000"]);
    assert_eq!(run_ok(cmd), "threads=4 pairs=2000 ok\n");
}

#[test]
fn ctor_alloc_gets_the_first_device_address() {
    let out = run_ok(program_command("ctor_alloc"));
    assert!(out.contains("before main at 0x700000000000"), "{out}");
}

#[test]
fn bench_loop_reports_its_timing() {
    for mode in ["cuda", "malloc"] {
        let mut cmd = program_command("bench_loop");
        cmd.args([mode, "5", "1000", "4096"]);
        let out = run_ok(cmd);
        let ns: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("ns_per_pair="))
            .unwrap_or_else(|| panic!("no ns_per_pair in {out}"))
            .parse()
            .expect("ns_per_pair is a number");
        assert!(ns > 0.0, "{out}");
        assert!(out.lines().any(|l| l == "pairs=1000"), "{out}");
    }
}

#[test]
fn malformed_configuration_fails_every_call_with_initialization_error() {
    for (var, value) in [
        ("SIMCUDA_DEVICES", "0"),
        ("SIMCUDA_CAPACITY", "12x"),
        ("SIMCUDA_HOST_CAPACITY", "-1"),
    ] {
        let mut cmd = program_command("ctor_alloc");
        cmd.env(var, value);
        let output = run(cmd);
        assert_eq!(output.status.code(), Some(1), "{var}={value}");
        let err = stderr(&output);
        assert!(
            err.contains(var) && err.contains("cudaErrorInitializationError"),
            "{err}"
        );
    }
}

#[test]
fn target_dir_is_the_profile_folder() {
    let dir = target_dir();
    assert!(dir.join("deps").is_dir(), "{}", dir.display());
    let exe = std::env::current_exe().unwrap();
    assert_eq!(exe.parent().unwrap().parent().unwrap(), dir);
}

#[test]
fn markers_name_exactly_one_line() {
    let markers = [
        ("examples/train_leak.c", "GPUMEMPROF-WEIGHTS"),
        ("examples/train_leak.c", "GPUMEMPROF-ACT-8M"),
        ("examples/train_leak.c", "GPUMEMPROF-ACT-4M"),
        ("examples/train_leak.c", "GPUMEMPROF-ACT-2M"),
        ("examples/train_leak.c", "GPUMEMPROF-GRAD"),
        ("examples/train_leak.c", "GPUMEMPROF-LEAK"),
        ("examples/ctor_alloc.c", "GPUMEMPROF-CTOR"),
        ("examples/ctor_alloc.c", "GPUMEMPROF-MAIN-ALLOC"),
    ];
    for (file, marker) in markers {
        assert!(source_line_of(file, marker) > 1, "{file}: {marker}");
    }
}

/// Like the real library: soname libcudart.so.12, every cuda* export versioned
/// @@libcudart.so.12, nothing else exported.
#[test]
fn library_exports_versioned_cuda_symbols_only() {
    let library = sim_dir().join("libcudart.so.12");
    let mut dynamic = Command::new("readelf");
    dynamic.arg("-d").arg(&library);
    assert!(run_ok(dynamic).contains("Library soname: [libcudart.so.12]"));

    let mut symbols = Command::new("readelf");
    symbols.args(["--dyn-syms", "--wide"]).arg(&library);
    let table = run_ok(symbols);
    let mut exported = Vec::new();
    for line in table.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name; skip undefined imports and the header.
        if cols.len() < 8 || cols[6] == "UND" || cols[4] != "GLOBAL" {
            continue;
        }
        let name = cols[7];
        if name == "libcudart.so.12" {
            continue; // the version definition itself
        }
        assert!(
            name.starts_with("cuda") && name.ends_with("@@libcudart.so.12"),
            "exported {name}"
        );
        exported.push(name.trim_end_matches("@@libcudart.so.12").to_string());
    }
    for want in [
        "cudaMalloc",
        "cudaFree",
        "cudaMallocAsync",
        "cudaMallocAsync_ptsz",
        "cudaFreeAsync",
        "cudaFreeAsync_ptsz",
        "cudaMallocFromPoolAsync",
        "cudaDeviceGetDefaultMemPool",
        "cudaMallocManaged",
        "cudaMallocPitch",
        "cudaMalloc3D",
        "cudaMallocHost",
        "cudaHostAlloc",
        "cudaFreeHost",
        "cudaMemGetInfo",
        "cudaGetDevice",
        "cudaSetDevice",
        "cudaGetDeviceCount",
        "cudaDeviceSynchronize",
        "cudaStreamCreate",
        "cudaStreamDestroy",
        "cudaGetErrorString",
        "cudaGetErrorName",
        "cudaRuntimeGetVersion",
        "cudaDriverGetVersion",
        "cudaGetLastError",
        "cudaPeekAtLastError",
    ] {
        assert!(
            exported.iter().any(|n| n == want),
            "{want} not exported: {exported:?}"
        );
    }
    assert!(
        sim_dir().join("libcudart.so").exists(),
        "libcudart.so link name missing"
    );
}
