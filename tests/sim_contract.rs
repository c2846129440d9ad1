//! The simulated GPU libraries (the CUDA runtime and driver, HIP, NVML) honour the real
//! contract, checked without any profiler.
//!
//! Every end-to-end test of the profiler trusts the simulators' results (return codes,
//! out-parameters, addresses, capacity, resolver answers) and the client programs' documented
//! numbers; these tests pin both down, so a profiler test failure can never be the simulators'
//! fault.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use gpumemprof_tests::{
    program_command, script_command, shared_library, sim_dir, source_line_of, target_dir,
};

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

// ---- the driver, HIP and NVML simulators ---------------------------------------------------

/// "key=value" lines as a map; a key printed twice is a bug in the program.
fn facts_of(what: &str, out: &str) -> BTreeMap<String, String> {
    let mut facts = BTreeMap::new();
    for line in out.lines() {
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{what}: odd line {line:?}"));
        let previous = facts.insert(key.to_string(), value.to_string());
        assert!(previous.is_none(), "{what} printed {key:?} twice");
    }
    facts
}

/// Checks every expected fact; the message shows all of them on a mismatch.
fn assert_facts(what: &str, facts: &BTreeMap<String, String>, expected: &[(&str, &str)]) {
    for (key, want) in expected {
        assert_eq!(
            facts.get(*key).map(String::as_str),
            Some(*want),
            "{what}: fact {key:?}\nall facts: {facts:#?}"
        );
    }
}

/// Runs `drv_contract <mode>` with extra environment; its facts.
fn driver_facts(mode: &str, env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut cmd = program_command("drv_contract");
    cmd.arg(mode).envs(env.iter().copied());
    facts_of(&format!("drv_contract {mode}"), &run_ok(cmd))
}

/// A program that must succeed and print exactly these lines.
fn expect_output(cmd: Command, lines: &[&str]) {
    let description = format!("{cmd:?}");
    let out = run_ok(cmd);
    let want: String = lines.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(out, want, "{description}");
}

#[test]
fn driver_calls_before_cuinit_fail_with_not_initialized() {
    let facts = driver_facts("init", &[]);
    assert_facts(
        "drv_contract init",
        &facts,
        &[
            ("before_init.mem_alloc", "3"),
            ("before_init.mem_alloc.ptr", "0x1"),
            ("before_init.device_count", "3"),
            ("before_init.mem_get_info", "3"),
            // These work before cuInit, as in the real driver.
            ("before_init.driver_version", "0"),
            ("before_init.driver_version.value", "12040"),
            ("before_init.get_proc", "0"),
            ("before_init.get_proc.status", "0"),
            ("before_init.error_name", "0"),
            ("before_init.error_name.value", "CUDA_ERROR_OUT_OF_MEMORY"),
            ("before_init.error_string", "0"),
            ("before_init.error_string.value", "named symbol not found"),
            ("before_init.error_name.unknown", "1"),
            ("before_init.error_name.unknown.null", "1"),
            ("init.bad_flags", "1"),
            ("init", "0"),
            ("init.again", "0"),
            ("after_init.device_count", "0"),
            ("after_init.device_count.value", "1"),
            ("after_init.driver_version.null", "1"),
        ],
    );
}

#[test]
fn resolver_picks_the_abi_by_version_and_the_stream_variant_by_flags() {
    let facts = driver_facts("resolver", &[]);
    let found = |label: &'static str, export: &'static str| {
        [
            (format!("{label}.rc"), "0"),
            (format!("{label}.status"), "0"),
            (format!("{label}.fn"), export),
        ]
    };
    let missing = |label: &'static str, status: &'static str| {
        [
            (format!("{label}.rc"), "500"),
            (format!("{label}.status"), status),
            (format!("{label}.fn"), "null"),
        ]
    };
    let invalid = |label: &'static str| {
        [
            (format!("{label}.rc"), "1"),
            (format!("{label}.status"), "99"), // untouched
            (format!("{label}.fn"), "null"),
        ]
    };
    let mut expected: Vec<(String, &str)> = Vec::new();
    for (label, export) in [
        ("mem_alloc.12040", "cuMemAlloc_v2"),
        ("mem_alloc.3020", "cuMemAlloc_v2"),
        ("mem_alloc.3010", "cuMemAlloc"),
        ("mem_free.3000", "cuMemFree"),
        ("mem_free.12040", "cuMemFree_v2"),
        ("mem_alloc_pitch.3000", "cuMemAllocPitch"),
        ("mem_alloc_pitch.12040", "cuMemAllocPitch_v2"),
        ("mem_alloc_host.3000", "cuMemAllocHost"),
        ("mem_alloc_host.12040", "cuMemAllocHost_v2"),
        ("mem_get_info.3000", "cuMemGetInfo"),
        ("mem_get_info.12040", "cuMemGetInfo_v2"),
        ("host_register.6040", "cuMemHostRegister"),
        ("host_register.6050", "cuMemHostRegister_v2"),
        ("alloc_async.11020", "cuMemAllocAsync"),
        ("alloc_async.legacy", "cuMemAllocAsync"),
        ("alloc_async.ptds", "cuMemAllocAsync_ptsz"),
        ("free_async.ptds", "cuMemFreeAsync_ptsz"),
        ("alloc_from_pool.ptds", "cuMemAllocFromPoolAsync_ptsz"),
        ("alloc_from_pool.12040", "cuMemAllocFromPoolAsync"),
        ("init.ptds", "cuInit"),
        ("mem_create.10020", "cuMemCreate"),
        ("mem_map.12040", "cuMemMap"),
        ("get_proc.11030", "cuGetProcAddress"),
        ("get_proc.12000", "cuGetProcAddress_v2"),
    ] {
        expected.extend(found(label, export));
    }
    // Too old a cudaVersion: VERSION_NOT_SUFFICIENT (2).
    for label in [
        "alloc_async.11010",
        "alloc_async.ptds_old",
        "mem_create.10010",
    ] {
        expected.extend(missing(label, "2"));
    }
    // Suffixed, unknown and prefix-only names: SYMBOL_NOT_FOUND (1).
    for label in ["suffixed", "suffixed_ptsz", "unknown", "prefix_only"] {
        expected.extend(missing(label, "1"));
    }
    for label in ["alloc_async.both_flags", "alloc_async.unknown_flag"] {
        expected.extend(invalid(label));
    }
    expected.extend([
        ("null_status.rc".to_string(), "0"),
        ("null_status.fn".to_string(), "cuInit"),
        ("null_pfn.rc".to_string(), "1"),
        ("null_symbol.rc".to_string(), "1"),
        ("null_symbol.status".to_string(), "99"),
        ("v1.mem_alloc.rc".to_string(), "0"),
        ("v1.mem_alloc.fn".to_string(), "cuMemAlloc_v2"),
        ("v1.unknown.rc".to_string(), "500"),
        ("v1.unknown.fn".to_string(), "null"),
    ]);
    let expected: Vec<(&str, &str)> = expected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_facts("drv_contract resolver", &facts, &expected);
}

#[test]
fn simcuda_hide_makes_the_resolver_report_names_as_not_found() {
    let facts = driver_facts(
        "resolver",
        &[("SIMCUDA_HIDE", "cuMemCreate,cuMemAllocAsync")],
    );
    assert_facts(
        "drv_contract resolver with SIMCUDA_HIDE",
        &facts,
        &[
            ("mem_create.10020.rc", "500"),
            ("mem_create.10020.status", "1"),
            ("mem_create.10020.fn", "null"),
            // The base name hides its per-thread variant too.
            ("alloc_async.ptds.rc", "500"),
            ("alloc_async.ptds.status", "1"),
            ("alloc_async.11020.status", "1"),
            // Exact names only: the neighbours are still there.
            ("mem_map.12040.fn", "cuMemMap"),
            ("free_async.ptds.fn", "cuMemFreeAsync_ptsz"),
            ("alloc_from_pool.12040.fn", "cuMemAllocFromPoolAsync"),
            // Only the resolver hides them; the exports stay.
            ("dlsym.mem_create_found", "1"),
        ],
    );
}

#[test]
fn contexts_are_per_thread_and_charge_simcuda_context_bytes() {
    let facts = driver_facts(
        "context",
        &[
            ("SIMCUDA_DEVICES", "2"),
            ("SIMCUDA_CONTEXT_BYTES", &(64 * MIB).to_string()),
        ],
    );
    let total = 16 * GIB;
    let free_after_context = (total - 64 * MIB).to_string();
    let total = total.to_string();
    let context = (64 * MIB).to_string();
    let context_and_1mib = (65 * MIB).to_string();
    assert_facts(
        "drv_contract context",
        &facts,
        &[
            ("current.before.rc", "0"),
            ("current.before", "0x0"),
            ("used.before", "0"),
            // The first call that needs a context makes device 0's primary one current.
            ("mem_get_info.rc", "0"),
            ("mem_get_info.free", &free_after_context),
            ("mem_get_info.total", &total),
            ("used.after_bind", &context),
            ("current.after", "0x5c0000000000"),
            // cuMemGetInfo_v2 takes NULL for either half.
            ("mem_get_info.null_both", "0"),
            ("mem_get_info.null_total", "0"),
            ("mem_get_info.null_total.free", &free_after_context),
            ("mem_get_info.null_free", "0"),
            ("mem_get_info.null_free.total", &total),
            ("get_device", "0"),
            // Another thread starts without a current context.
            ("thread.current.rc", "0"),
            ("thread.current", "0x0"),
            ("thread.get_device.rc", "0"),
            ("thread.get_device", "0"),
            ("used1.before", "0"),
            ("retain.1.rc", "0"),
            ("retain.1", "0x5c0000000100"),
            ("used1.after_retain", &context),
            ("retain.bad_device", "101"),
            ("retain.null_out", "1"),
            ("set_current.1", "0"),
            ("alloc.dev1", "0x710000000000"),
            ("get_device.after_set", "1"),
            ("attribute.ordinal", "1"),
            ("used1.after_alloc", &context_and_1mib),
            ("set_current.bogus", "201"),
            ("set_current.null", "0"),
            ("current.after_null", "0x0"),
            ("device_get.bad", "101"),
            ("used.unknown_device", "0"),
        ],
    );
}

#[test]
fn driver_allocations_follow_the_cuda_contract() {
    let facts = driver_facts("alloc", &[]);
    assert_facts(
        "drv_contract alloc",
        &facts,
        &[
            ("mem_alloc.null_out", "1"),
            ("mem_alloc.zero", "1"),
            ("mem_alloc.zero.ptr", "0x0"),
            ("mem_alloc.over_capacity", "2"),
            ("mem_alloc.over_capacity.ptr", "0x0"),
            ("mem_alloc.ptr", "0x700000000000"),
            ("used.after_1000", "1024"),
            ("mem_free.interior", "1"),
            ("mem_free.null", "0"),
            ("mem_free_host.device_ptr", "1"),
            ("mem_free", "0"),
            ("mem_free.double", "1"),
            ("pitch.bad_element", "1"),
            ("pitch.zero_height", "1"),
            ("pitch", "0"),
            ("pitch.value", "1024"),
            ("managed.bad_flags", "1"),
            ("managed", "0"),
            ("mem_free_async.managed", "1"),
            ("mem_free.managed", "0"),
            ("alloc_host.zero", "1"),
            ("alloc_host", "0"),
            ("mem_free.pinned", "1"),
            ("free_host", "0"),
            ("free_host.null", "0"),
            ("host_alloc.bad_flags", "1"),
            ("stream", "0x5e0000000100"),
            ("alloc_async.bad_stream", "400"),
            ("alloc_async.legacy_stream", "0"),
            ("free_async.per_thread_stream", "0"),
            ("alloc_async.zero", "1"),
            ("default_pool.bad_device", "101"),
            ("default_pool", "0"),
            ("alloc_from_pool.bad_pool", "1"),
            ("stream_destroy", "0"),
            ("stream_destroy.again", "400"),
            ("alloc_async.destroyed_stream", "400"),
            // v1: a 32-bit device pointer from the legacy window; 32-bit sizes saturate.
            ("v1.alloc", "0"),
            ("v1.alloc.ptr", "0x10000000"),
            ("v1.get_info.total", "4294967295"),
            ("v1.free_by_v2", "0"),
            ("v1.free.double", "1"),
            ("attribute.type", "2"),
            ("attribute.managed", "0"),
            ("attribute.start", "0x700000102c00"),
            ("attribute.host_pointer.device", "1"),
            ("attribute.unknown_pointer", "1"),
            ("attribute.null_data", "1"),
            // Live: the 10240-byte pitched block and the 3 MiB one.
            ("used.end", "3155968"),
        ],
    );
}

#[test]
fn host_registration_rejects_overlaps_and_unknown_pointers() {
    let facts = driver_facts("host", &[]);
    assert_facts(
        "drv_contract host",
        &facts,
        &[
            ("register", "0"),
            ("register.again", "712"),
            ("register.overlap", "712"),
            ("register.null", "1"),
            ("register.zero", "1"),
            ("register.bad_flags", "1"),
            ("attribute.type.rc", "0"),
            ("attribute.type", "1"),
            ("used", "0"), // pinned in place: nothing charged
            ("unregister.interior", "713"),
            ("unregister", "0"),
            ("unregister.again", "713"),
            ("register.after_unregister", "0"),
        ],
    );
}

#[test]
fn vmm_charges_at_create_and_returns_memory_after_release_and_unmap() {
    let facts = driver_facts("vmm", &[]);
    assert_facts(
        "drv_contract vmm",
        &facts,
        &[
            ("granularity", "2097152"),
            ("granularity.bad_type", "1"),
            ("create.zero", "1"),
            ("create.unaligned", "1"),
            ("create.unaligned.handle", "0x0"),
            ("create.null_prop", "1"),
            ("create.bad_type", "1"),
            ("create.bad_location", "1"),
            ("create.bad_device", "101"),
            ("create.bad_flags", "1"),
            ("create.null_handle", "1"),
            ("create.over_capacity", "2"),
            ("create.over_capacity.handle", "0x0"),
            ("used.start", "0"),
            ("handle.1", "0x4a000010"),
            ("used.after_create", "2097152"),
            ("properties.type", "1"),
            ("properties.location_type", "1"),
            ("properties.location_id", "0"),
            ("properties.handle_types", "1"),
            ("properties.unknown", "400"),
            ("reserve.unaligned", "1"),
            ("reserve.bad_flags", "1"),
            ("reserve.bad_alignment", "1"),
            ("reserve.base", "0x740000000000"),
            ("reserve.hint.base", "0x750000000000"),
            // A hint inside an existing reservation is ignored.
            ("reserve.taken_hint.base", "0x740001000000"),
            ("used.after_reserve", "2097152"), // address space is not charged
            ("map.outside", "1"),
            ("map.unknown_handle", "400"),
            ("map.past_handle", "1"),
            ("map.too_long", "1"),
            ("map.unaligned", "1"),
            ("map.bad_flags", "1"),
            ("set_access.unmapped", "1"),
            ("map.1", "0"),
            ("map.overlap", "1"),
            ("set_access", "0"),
            ("set_access.null_desc", "1"),
            ("set_access.zero_count", "1"),
            ("set_access.beyond_mapping", "1"),
            ("attribute.ordinal", "0"),
            ("attribute.start", "0x740000000000"),
            ("mem_free.mapped", "1"),
            ("map.across_reservations", "1"),
            ("map.2", "0"),
            ("map.3", "0"),
            ("used.mapped", "8388608"),
            ("unmap.partial", "1"),
            ("unmap.unaligned", "1"),
            ("unmap.unmapped", "1"),
            // Released while mapped: still charged until the mapping goes.
            ("release.2_mapped", "0"),
            ("used.released_but_mapped", "8388608"),
            ("release.2_again", "400"),
            ("properties.released", "400"),
            ("map.released", "400"),
            ("unmap.2", "0"),
            ("used.released_and_unmapped", "6291456"),
            ("unmap.gap", "1"),
            ("address_free.mapped", "1"),
            // Unmapped but not released: still charged.
            ("unmap.three", "0"),
            ("used.unmapped_not_released", "8388608"),
            ("release.1", "0"),
            ("release.3", "0"),
            ("release.4", "0"),
            ("used.end", "0"),
            ("address_free.wrong_size", "1"),
            ("address_free.interior", "1"),
            ("address_free", "0"),
            ("address_free.again", "1"),
        ],
    );
}

/// The readelf table of a library's dynamic symbols: (name, defined) for each global one.
fn dynamic_symbols(library: &Path) -> Vec<(String, bool)> {
    let mut cmd = Command::new("readelf");
    cmd.args(["--dyn-syms", "--wide"]).arg(library);
    run_ok(cmd)
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            (cols.len() >= 8 && (cols[4] == "GLOBAL" || cols[4] == "WEAK"))
                .then(|| (cols[7].to_string(), cols[6] != "UND"))
        })
        .collect()
}

#[test]
fn runtime_reaches_the_driver_only_through_dlopen_and_the_resolver() {
    let runtime = sim_dir().join("libcudart.so.12");
    let mut dynamic = Command::new("readelf");
    dynamic.arg("-d").arg(&runtime);
    let dynamic = run_ok(dynamic);
    assert!(!dynamic.contains("libcuda.so"), "{dynamic}");
    assert!(dynamic.contains("[$ORIGIN]"), "{dynamic}");
    let imports: Vec<String> = dynamic_symbols(&runtime)
        .into_iter()
        .filter(|(name, defined)| !defined && name.starts_with("cu"))
        .map(|(name, _)| name)
        .collect();
    assert!(imports.is_empty(), "libcudart imports {imports:?}");

    // At run time the only symbol anything looks up in libcuda is the resolver (dlsym binds
    // it as the library's own reference).
    let mut cmd = program_command("cudart_once");
    cmd.env("LD_DEBUG", "bindings");
    let output = run(cmd);
    assert!(output.status.success(), "{}", stderr(&output));
    let bound: Vec<String> = stderr(&output)
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once("binding file ")?;
            let (_, to) = rest.split_once(" to ")?;
            let (target, symbol) = to.split_once(": normal symbol `")?;
            target
                .contains("libcuda.so.1")
                .then(|| symbol.split('\'').next().unwrap_or("").to_string())
        })
        .collect();
    assert_eq!(
        bound,
        ["cuGetProcAddress_v2"],
        "symbols bound in libcuda.so.1"
    );
}

#[test]
fn runtime_without_a_driver_returns_insufficient_driver() {
    let mut ldconfig = Command::new("ldconfig");
    ldconfig.arg("-p");
    if let Ok(out) = ldconfig.output() {
        if String::from_utf8_lossy(&out.stdout).contains("libcuda.so.1") {
            eprintln!("skipped: this machine has a libcuda.so.1 the runtime would find");
            return;
        }
    }
    // The runtime alone, with no driver beside it or on any search path.
    let dir = target_dir().join("sim-contract-scratch").join("no_driver");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch folder");
    std::fs::copy(
        sim_dir().join("libcudart.so.12"),
        dir.join("libcudart.so.12"),
    )
    .expect("copy libcudart.so.12");
    let mut cmd = program_command("cudart_once");
    cmd.env("LD_LIBRARY_PATH", &dir);
    let output = run(cmd);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("cudaMalloc 12 MiB returned 35, expected 0"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn driver_entry_point_of_a_hidden_function_is_symbol_not_found() {
    // cudaSuccess with a NULL pointer; the status says cudaDriverEntryPointSymbolNotFound (1).
    let mut cmd = program_command("ptsz_lookup");
    cmd.env("SIMCUDA_HIDE", "cuMemAllocAsync");
    let output = run(cmd);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("its status returned 1, expected 0"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn runtime_calls_whose_driver_function_is_hidden_need_a_newer_driver() {
    // all_apis stops at its first cudaMallocAsync: 36, cudaErrorCallRequiresNewerDriver.
    let mut cmd = all_apis_command();
    cmd.env("SIMCUDA_HIDE", "cuMemAllocAsync");
    let output = run(cmd);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("malloc_async returned 36 (cudaErrorCallRequiresNewerDriver)"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn hip_follows_the_cuda_rules_with_hip_names() {
    let mut cmd = program_command("hip_contract");
    cmd.env("SIMHIP_CAPACITY", GIB.to_string())
        .env("SIMHIP_DEVICES", "2");
    let facts = facts_of("hip_contract", &run_ok(cmd));
    let gib = GIB.to_string();
    assert_facts(
        "hip_contract",
        &facts,
        &[
            ("device_count", "2"),
            ("runtime_version", "60241133"),
            ("mem_get_info.total", &gib),
            ("mem_get_info.free", &gib),
            ("mem_get_info.null_free", "0"),
            ("malloc.null_out", "1"),
            ("malloc.zero", "0"),
            ("malloc.zero.ptr", "0x0"),
            ("malloc.over_capacity", "2"),
            ("malloc.over_capacity.ptr", "0x0"),
            ("last_error", "2"),
            ("last_error.again", "0"),
            ("malloc.ptr", "0x600000000000"),
            ("used.after_malloc", "1024"),
            ("free.null", "0"),
            ("free.never_allocated", "1"),
            ("free.interior", "1"),
            ("host_free.device_ptr", "1"),
            ("free", "0"),
            ("free.double", "1"),
            ("malloc.reuse.same", "1"),
            ("ext_malloc.bad_flags", "1"),
            ("stream", "0x5f0000000100"),
            ("malloc_async.bad_stream", "400"),
            ("malloc_async.per_thread", "0"),
            ("free_async", "0"),
            ("pool.bad_device", "101"),
            ("pool.dev1.handle", "0x2001"),
            ("from_pool.dev1.ptr", "0x610000000000"),
            ("attributes.pool_dev1.type", "2"),
            ("attributes.pool_dev1.device", "1"),
            ("from_pool.bad_pool", "1"),
            ("stream_destroy.again", "400"),
            ("set_device.2", "101"),
            ("set_device.1", "0"),
            ("get_device", "1"),
            ("malloc.dev1.ptr", "0x610000100000"),
            ("managed.bad_flags", "1"),
            ("managed.zero", "1"),
            ("managed", "0"),
            ("attributes.managed.type", "3"),
            ("attributes.managed.managed", "1"),
            ("host_malloc.bad_flags", "1"),
            ("host_malloc", "0"),
            ("attributes.pinned.type", "1"),
            ("free.pinned", "1"),
            ("host_free", "0"),
            ("host_free.null", "0"),
            ("attributes.device.type", "2"),
            ("attributes.device.device", "0"),
            ("attributes.unknown.rc", "0"),
            ("attributes.unknown.type", "0"),
            ("attributes.null", "1"),
            ("granularity", "2097152"),
            ("vmm.create.unaligned", "1"),
            ("vmm.create.over_capacity", "2"),
            ("vmm.create", "0"),
            ("vmm.handle", "0x4b000010"),
            ("vmm.charged_at_create", "2097152"),
            ("vmm.reserve.base", "0x640000000000"),
            ("vmm.map.outside", "1"),
            ("vmm.map.unknown_handle", "400"),
            ("vmm.set_access.unmapped", "1"),
            ("vmm.map", "0"),
            ("vmm.set_access", "0"),
            ("attributes.vmm.type", "2"),
            ("vmm.release_mapped", "0"),
            ("vmm.charged_after_release", "2097152"),
            ("vmm.unmap.partial", "1"),
            ("vmm.address_free.mapped", "1"),
            ("vmm.unmap", "0"),
            ("vmm.charged_after_unmap", "0"),
            ("vmm.release.again", "400"),
            ("vmm.address_free", "0"),
            ("error.2.string", "out of memory"),
            ("error.101.name", "hipErrorInvalidDevice"),
            ("error.500.name", "hipErrorNotFound"),
            // Live on device 0: the reused 1000-byte block and 1 MiB managed.
            ("used.end", "1049600"),
        ],
    );
}

#[test]
fn hip_malformed_configuration_fails_with_not_initialized() {
    let mut cmd = program_command("hip_alloc");
    cmd.env("SIMHIP_DEVICES", "0");
    let output = run(cmd);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("SIMHIP_DEVICES") && err.contains("hipMalloc 1 MiB returned 3"),
        "{err}"
    );
}

#[test]
fn nvml_reports_this_process_with_its_context() {
    let mut cmd = program_command("nvml_query");
    cmd.env("SIMCUDA_DEVICES", "2")
        .env("SIMCUDA_CONTEXT_BYTES", (64 * MIB).to_string());
    let facts = facts_of("nvml_query", &run_ok(cmd));
    let total = (16 * GIB).to_string();
    let used = (164 * MIB).to_string();
    let free = (16 * GIB - 164 * MIB).to_string();
    let context = (64 * MIB).to_string();
    assert_facts(
        "nvml_query",
        &facts,
        &[
            ("before_init.count", "1"),
            ("init", "0"),
            ("count", "2"),
            ("handle.bad_index", "2"),
            ("driver_version", "550.54.15"),
            ("name", "NVIDIA Simulated GPU"),
            ("name.small_buffer", "7"),
            ("uuid", "GPU-5e1a0000-0000-4000-8000-000000000000"),
            ("memory.null", "2"),
            ("processes.null_count", "2"),
            // Before the first CUDA call the runtime has not loaded the driver.
            ("before.dev0.total", &total),
            ("before.dev0.used", "0"),
            ("before.dev0.count_query.rc", "0"),
            ("before.dev0.processes", "0"),
            // 100 MiB allocated + the 64 MiB context.
            ("after.dev0.total", &total),
            ("after.dev0.used", &used),
            ("after.dev0.free", &free),
            ("after.dev0.count_query.rc", "7"),
            ("after.dev0.processes", "1"),
            ("after.dev0.process_is_self", "1"),
            ("after.dev0.process_used", &used),
            ("after.dev0.gpu_instance", "0xffffffff"),
            ("after.dev1.used", "0"),
            ("after.dev1.processes", "0"),
            ("thread.dev0.used", &used),
            ("thread.dev0.processes", "1"),
            ("thread.dev0.process_is_self", "1"),
            // Freed: the context stays.
            ("freed.dev0.used", &context),
            ("freed.dev0.process_used", &context),
            ("shutdown", "0"),
            ("after_shutdown.count", "1"),
            ("shutdown.again", "1"),
            ("error_string.7", "Insufficient Size"),
        ],
    );
}

#[test]
fn nvml_malformed_configuration_fails_init() {
    for (var, value) in [
        ("SIMCUDA_CAPACITY", "lots"),
        ("SIMNVML_QUERY_US", "10000001"),
    ] {
        let mut cmd = program_command("nvml_query");
        cmd.env(var, value);
        let output = run(cmd);
        assert_eq!(output.status.code(), Some(1), "{var}");
        assert!(
            stdout(&output).contains("init=999\n"),
            "{}",
            stdout(&output)
        );
        assert!(stderr(&output).contains(var), "{}", stderr(&output));
    }
}

/// Soname, exports and self-references of each simulated library.
#[test]
fn simulated_libraries_export_their_api_only_and_never_call_themselves_through_the_plt() {
    for (file, link, prefixes) in [
        (
            "libcuda.so.1",
            "libcuda.so",
            &["cu", "simcuda_device_used"][..],
        ),
        ("libcudart.so.12", "libcudart.so", &["cuda"][..]),
        ("libamdhip64.so.6", "libamdhip64.so", &["hip"][..]),
        ("libnvidia-ml.so.1", "libnvidia-ml.so", &["nvml"][..]),
    ] {
        let library = sim_dir().join(file);
        assert!(sim_dir().join(link).exists(), "{link} link name missing");
        let mut dynamic = Command::new("readelf");
        dynamic.arg("-d").arg(&library);
        assert!(
            run_ok(dynamic).contains(&format!("Library soname: [{file}]")),
            "{file}: soname"
        );
        let exports: Vec<String> = dynamic_symbols(&library)
            .into_iter()
            .filter(|(_, defined)| *defined)
            .map(|(name, _)| name.split('@').next().unwrap_or("").to_string())
            .filter(|name| name != file) // cudart's version definition
            .collect();
        for name in &exports {
            assert!(
                prefixes.iter().any(|p| name.starts_with(p)),
                "{file} exports {name}"
            );
        }
        // No relocation names one of its own exports: nothing inside binds to them through
        // the PLT or GOT, where a preloaded profiler would interpose.
        let mut relocations = Command::new("readelf");
        relocations.args(["-r", "--wide"]).arg(&library);
        for line in run_ok(relocations).lines() {
            let Some(symbol) = line.split_whitespace().nth(4) else {
                continue;
            };
            let symbol = symbol.split('@').next().unwrap_or("");
            assert!(
                !exports.iter().any(|e| e == symbol),
                "{file} refers to its own {symbol}: {line}"
            );
        }
    }
    let driver: Vec<String> = dynamic_symbols(&sim_dir().join("libcuda.so.1"))
        .into_iter()
        .filter(|(_, defined)| *defined)
        .map(|(name, _)| name)
        .collect();
    for want in [
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGet",
        "cuDeviceGetCount",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuCtxGetCurrent",
        "cuCtxGetDevice",
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemAllocPitch",
        "cuMemAllocPitch_v2",
        "cuMemAllocManaged",
        "cuMemAllocAsync",
        "cuMemAllocAsync_ptsz",
        "cuMemAllocFromPoolAsync",
        "cuMemAllocFromPoolAsync_ptsz",
        "cuMemFree",
        "cuMemFree_v2",
        "cuMemFreeAsync",
        "cuMemFreeAsync_ptsz",
        "cuMemHostAlloc",
        "cuMemAllocHost",
        "cuMemAllocHost_v2",
        "cuMemFreeHost",
        "cuMemHostRegister",
        "cuMemHostRegister_v2",
        "cuMemHostUnregister",
        "cuMemCreate",
        "cuMemRelease",
        "cuMemMap",
        "cuMemUnmap",
        "cuMemSetAccess",
        "cuMemAddressReserve",
        "cuMemAddressFree",
        "cuMemGetAllocationPropertiesFromHandle",
        "cuMemGetAllocationGranularity",
        "cuMemGetInfo",
        "cuMemGetInfo_v2",
        "cuPointerGetAttribute",
        "cuDeviceGetDefaultMemPool",
        "cuStreamCreate",
        "cuStreamDestroy",
        "cuGetErrorName",
        "cuGetErrorString",
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "simcuda_device_used",
    ] {
        assert!(
            driver.iter().any(|n| n == want),
            "libcuda.so.1 lacks {want}"
        );
    }
    let runtime: Vec<String> = dynamic_symbols(&sim_dir().join("libcudart.so.12"))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for want in [
        "cudaGetDriverEntryPoint@@libcudart.so.12",
        "cudaGetDriverEntryPointByVersion@@libcudart.so.12",
        "cudaMallocFromPoolAsync_ptsz@@libcudart.so.12",
        "cudaHostRegister@@libcudart.so.12",
        "cudaHostUnregister@@libcudart.so.12",
    ] {
        assert!(
            runtime.iter().any(|n| n == want),
            "libcudart.so.12 lacks {want}"
        );
    }
}

// ---- the client programs, without the profiler ---------------------------------------------

#[test]
fn drv_linked_prints_its_documented_numbers() {
    expect_output(
        program_command("drv_linked"),
        &[
            "init_rc=0",
            "alloc_1mib=0x700000000000",
            "alloc_2mib=0x700000100000",
            "alloc_3mib=0x700000300000",
            "free_2mib=0x700000100000",
            "managed_4mib=host-page-aligned",
            "pinned_1mib=host-page-aligned",
            "pinned_1mib_freed=1",
            "host_alloc_2mib=host-page-aligned",
            "registered_bytes=65536",
            "unregistered=1",
            "pitch_alloc=0x700000600000",
            "pitch=1024",
            "stream=0x5e0000000100",
            "async_8mib=0x700000602800",
            "async_8mib_freed=1",
            "pool=0x1000",
            "pool_5mib=0x700000e02800",
            "failed_alloc_rc=2",
            "failed_alloc_size=2199023255552",
            "failed_alloc_ptr=0x0",
            "device_used=13641728",
            "alloc_calls_ok=9",
            "free_calls_ok=3",
            "live_device_bytes=9447424",
            "live_managed_bytes=4194304",
            "live_pinned_bytes=2097152",
        ],
    );
}

#[test]
fn drv_resolver_prints_its_documented_numbers() {
    expect_output(
        program_command("drv_resolver"),
        &[
            "self_lookup_rc=0",
            "self_lookup_status=0",
            "self_is_v2_export=1",
            "mem_alloc_is_v2_export=1",
            "mem_free_is_v2_export=1",
            "alloc_7mib=0x700000000000",
            "async_9mib=0x700000700000",
            "free_7mib=0x700000000000",
            "missing_rc=500",
            "missing_status=1",
            "missing_pfn_null=1",
            "v1_rc=0",
            "v1_differs_from_v2=1",
            "v1_is_v1_export=1",
            "live_device_bytes=9437184",
        ],
    );
}

#[test]
fn drv_dlsym_prints_its_documented_numbers() {
    expect_output(
        program_command("drv_dlsym"),
        &[
            "init_rc=0",
            "alloc_6mib=0x700000000000",
            "alloc_10mib=0x700000600000",
            "free_6mib=0x700000000000",
            "live_device_bytes=10485760",
        ],
    );
}

#[test]
fn vmm_expandable_prints_its_documented_numbers() {
    expect_output(
        program_command("vmm_expandable"),
        &[
            "entry_points=8",
            "entry_status=0",
            "granularity=2097152",
            "reserve_base=0x740000000000",
            "reserve_size=67108864",
            "handle_1=0x4a000010",
            "handle_2=0x4a000020",
            "handle_3=0x4a000030",
            "handle_4=0x4a000040",
            "peak_committed=8388608",
            "unmapped_bytes=4194304",
            "released_handles=2",
            "handle_5=0x4a000050",
            "live_committed=6291456",
            "live_handles=3",
            "reservation_live=1",
            "device_used=6291456",
        ],
    );
}

#[test]
fn ptsz_lookup_prints_its_documented_numbers() {
    expect_output(
        program_command("ptsz_lookup"),
        &[
            "alloc_ptsz_status=0",
            "alloc_default_status=0",
            "alloc_pointers_differ=1",
            "free_pointers_differ=1",
            "alloc_ptsz_is_ptsz_export=1",
            "alloc_default_is_plain_export=1",
            "free_ptsz_is_ptsz_export=1",
            "free_default_is_plain_export=1",
            "ptsz_3mib=0x700000000000",
            "default_5mib=0x700000300000",
            "freed=2",
            "live_device_bytes=0",
        ],
    );
}

const CUDART_ONCE_OUTPUT: &[&str] = &[
    "alloc_12mib=0x700000000000",
    "free_12mib=0x700000000000",
    "alloc_4mib=0x700000c00000",
    "cudaMalloc_calls=2",
    "cudaFree_calls=1",
    "live_device_bytes=4194304",
];

#[test]
fn cudart_once_prints_its_documented_numbers() {
    expect_output(program_command("cudart_once"), CUDART_ONCE_OUTPUT);
}

#[test]
fn second_preload_forwards_cudamalloc_and_counts_the_calls() {
    let mut cmd = program_command("cudart_once");
    cmd.env("LD_PRELOAD", shared_library("second_preload"));
    let output = run(cmd);
    assert!(output.status.success(), "{}", stderr(&output));
    let want: String = CUDART_ONCE_OUTPUT
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(stdout(&output), want);
    assert!(
        stderr(&output).contains("second_preload_calls=2\n"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn hip_alloc_prints_its_documented_numbers() {
    expect_output(
        program_command("hip_alloc"),
        &[
            "malloc_1mib=0x600000000000",
            "free_1mib=0x600000000000",
            "stream=0x5f0000000100",
            "async_2mib=0x600000100000",
            "async_2mib_freed=1",
            "pool=0x2000",
            "pool_3mib=0x600000300000",
            "managed_4mib=host-page-aligned",
            "host_1mib=host-page-aligned",
            "host_1mib_freed=1",
            "ext_5mib=0x600000600000",
            "vmm_reserve=0x640000000000",
            "vmm_handle=0x4b000010",
            "vmm_peak_committed=2097152",
            "vmm_live_committed=0",
            "failed_alloc_rc=2",
            "failed_alloc_size=2199023255552",
            "failed_alloc_ptr=0x0",
            "device_used=12582912",
            "alloc_calls_ok=6",
            "free_calls_ok=3",
            "live_device_bytes=8388608",
            "live_managed_bytes=4194304",
        ],
    );
}

#[test]
fn nvml_gap_prints_its_documented_numbers() {
    let mut cmd = program_command("nvml_gap");
    cmd.env("SIMCUDA_CONTEXT_BYTES", (64 * MIB).to_string());
    expect_output(
        cmd,
        &[
            "alloc_100mib=0x700000000000",
            "allocated_bytes=104857600",
            "slept_ms=400",
            "device_used=171966464",
            "untracked_bytes=67108864",
        ],
    );
}

#[test]
fn nvml_churn_prints_its_documented_numbers() {
    let mut cmd = program_command("nvml_churn");
    cmd.args(["3", "2", "0"]);
    expect_output(
        cmd,
        &["rounds=3", "level_bytes=2097152", "allocated_bytes=6291456"],
    );
}

#[test]
fn ctypes_alloc_prints_its_documented_numbers() {
    assert!(
        source_line_of("tests/programs/ctypes_alloc.py", "GPUMEMPROF-CTYPES-ALLOC") > 1,
        "the marker names the cudaMalloc line"
    );
    expect_output(
        script_command("ctypes_alloc.py"),
        &[
            "alloc_1=0x700000000000",
            "alloc_2=0x700000400000",
            "alloc_3=0x700000800000",
            "free_1=0x700000000000",
            "allocated=3",
            "freed=1",
            "live_device_bytes=8388608",
        ],
    );
}
