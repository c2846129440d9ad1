//! The real-GPU validation suite (tests/gpu/, issue #8) checked as far as a machine without
//! a GPU can: its scripts parse, its CUDA C sources are valid C++ (nvcc compiles them as
//! C++), `tests/gpu/run.sh` runs in its simulated mode (`GPUMEMPROF_GPU_SUITE_SIM=1`), where
//! the CUDA C programs are built by the C compiler against the simulated runtime, once linked
//! to `libcudart.so.12` and once with the runtime compiled into the program (how nvcc's
//! default static cudart hides every cuda* call from the preload), the cudarc client runs on
//! the simulated driver, the frameworks SKIP, and the comparison rules run on canned inputs.
//! Each row of the table is asserted exactly; the canned mismatches must all FAIL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpumemprof_tests::profiled::scratch;
use gpumemprof_tests::{
    analyzer_path, repo_root, shim_path, sim_dir, source_line_of, target_dir, SIM_ENV,
};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// The simulated device's memory (SIMCUDA_CAPACITY's default).
const SIM_CAPACITY: u64 = 16 * GIB;

/// One `CHECK name expected=E measured=M STATUS reason` line.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    expected: String,
    measured: String,
    status: String,
    reason: String,
}

/// The CHECK lines of a run's stdout by name, in order of appearance.
fn rows(stdout: &str) -> Vec<(String, Row)> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("CHECK "))
        .map(|line| {
            let mut words = line.splitn(5, ' ');
            let mut next = || words.next().unwrap_or("").to_string();
            let name = next();
            let expected = next().strip_prefix("expected=").map(str::to_owned);
            let measured = next().strip_prefix("measured=").map(str::to_owned);
            let (status, reason) = (next(), next());
            let row = Row {
                expected: expected.unwrap_or_else(|| panic!("no expected= in {line:?}")),
                measured: measured.unwrap_or_else(|| panic!("no measured= in {line:?}")),
                status,
                reason,
            };
            (name, row)
        })
        .collect()
}

fn by_name(rows: &[(String, Row)]) -> BTreeMap<String, Row> {
    let map: BTreeMap<String, Row> = rows.iter().cloned().collect();
    assert_eq!(
        map.len(),
        rows.len(),
        "a check name printed twice: {rows:?}"
    );
    map
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn gpu_dir() -> PathBuf {
    repo_root().join("tests/gpu")
}

/// Every `.py` file of tests/gpu, sorted.
fn python_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(gpu_dir())
        .expect("read tests/gpu")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    files
}

/// Builds the cudarc client (its own cargo project, crates.io for cudarc the first time)
/// into the target folder; the binary's path.
fn cudarc_client() -> PathBuf {
    let target = target_dir().join("gpu-suite-cudarc");
    let manifest = gpu_dir().join("cudarc_client/Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--manifest-path",
        ])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building the cudarc client:\n{}",
        text(&out)
    );
    target.join("release/gpumemprof-cudarc-client")
}

/// `bash tests/gpu/run.sh` in the simulated mode, writing into `dir`, with `env` added.
fn run_simulated(dir: &Path, client: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(gpu_dir().join("run.sh"))
        .env("GPUMEMPROF_GPU_SUITE_SIM", "1")
        .env("GPUMEMPROF_SIM_DIR", sim_dir())
        .env("GPUMEMPROF_SHIM", shim_path())
        .env("GPUMEMPROF_ANALYZER", analyzer_path())
        .env("GPUMEMPROF_CUDARC_CLIENT", client)
        .env("GPUMEMPROF_GPU_SUITE_WORK", dir.join("work"))
        .env("OUT", dir.join("out"))
        .env_remove("GPUMEMPROF_GPU_SUITE_ONLY")
        .env_remove("LD_PRELOAD");
    for var in SIM_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("GPUMEMPROF_GPU_SUITE_TORCH_MODES")
        .envs(env.iter().copied());
    cmd.output().expect("run bash")
}

#[test]
fn the_suite_scripts_parse_and_the_cuda_sources_are_valid_cxx() {
    for script in ["run.sh", "prepare.sh"] {
        let out = Command::new("bash")
            .arg("-n")
            .arg(gpu_dir().join(script))
            .output()
            .expect("run bash");
        assert!(out.status.success(), "bash -n {script}:\n{}", text(&out));
    }
    let files = python_files();
    for script in [
        "suite.py",
        "torch_train.py",
        "torch_oom.py",
        "jax_alloc.py",
        "cupy_alloc.py",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(script)),
            "no tests/gpu/{script}: {files:?}"
        );
    }
    // Bytecode goes to a scratch folder, never into the source tree.
    let cache = scratch("gpu_suite_pycache");
    let out = Command::new("python3")
        .args(["-m", "py_compile"])
        .args(&files)
        .env("PYTHONPYCACHEPREFIX", &cache)
        .output()
        .expect("run python3");
    assert!(out.status.success(), "py_compile:\n{}", text(&out));

    // nvcc compiles the host code of a .cu as C++; the simulated mode builds it as C.
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let sources = ["leak.cu", "oom.cu"].map(|s| gpu_dir().join("cuda").join(s));
    match Command::new(&cxx)
        .args([
            "-x",
            "c++",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
        ])
        .arg(repo_root().join("tests/sim/include"))
        .args(&sources)
        .output()
    {
        Ok(out) => assert!(out.status.success(), "{cxx} -x c++:\n{}", text(&out)),
        Err(e) => {
            eprintln!("note: no C++ compiler ({cxx}: {e}): the .cu sources were not checked as C++")
        }
    }
}

/// `python3 tests/gpu/names.py FILES...`.
fn undefined_names(files: &[PathBuf]) -> Output {
    Command::new("python3")
        .arg(gpu_dir().join("names.py"))
        .args(files)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3")
}

/// Most of the suite runs only on a GPU, so a name it reads but never defines would show
/// only there (the CuPy rule once read JAX's `leak_line`): every script of the suite and of
/// tests/bench (torch_step.py runs on a GPU too) defines every name it reads, and the
/// checker finds a planted one, at the line of the scope that reads it.
#[test]
fn the_suite_scripts_read_no_name_they_never_define() {
    let mut files = python_files();
    let bench = repo_root().join("tests/bench/torch_step.py");
    files.push(bench);
    let out = undefined_names(&files);
    assert!(out.status.success(), "names.py:\n{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");

    let planted = scratch("gpu_suite_names").join("planted.py");
    std::fs::write(
        &planted,
        "import os\n\
         \n\
         def rule(groups):\n\
         \x20   line = 3\n\
         \x20   return sum(g for g in groups if g == leak_line) + line + len(os.sep)\n\
         \n\
         def other():\n\
         \x20   global kept\n\
         \x20   kept = 1\n\
         \n\
         print(rule([]), kept, __file__)\n",
    )
    .expect("write the planted script");
    let out = undefined_names(std::slice::from_ref(&planted));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "{}:5: leak_line, read in genexpr, is never defined\n",
            planted.display()
        )
    );
}

/// The rows the CUDA C programs must produce for one build on the simulated 16 GiB device.
fn cuda_rows(build: &str) -> Vec<(String, String, String)> {
    let leak = |m: &str| source_line_of("tests/gpu/cuda/leak.cu", m);
    let oom = |m: &str| source_line_of("tests/gpu/cuda/oom.cu", m);
    let (apis, malloc) = if build == "static" {
        (
            "cuMemAllocAsync:1/0,cuMemAlloc_v2:12/0,cuMemFree_v2:0/8",
            "cuMemAlloc_v2",
        )
    } else {
        (
            "cudaFree:0/8,cudaMalloc:12/0,cudaMallocAsync:1/0",
            "cudaMalloc",
        )
    };
    // free after the failure: 16 GiB - 512 MiB live; the request is 64 MiB more than that.
    let free = SIM_CAPACITY - 512 * MIB;
    let leak_sites = format!(
        "leak.cu:{}={}/3;leak.cu:{}={}/1;leak.cu:{}={}/1",
        leak("GPUMEMPROF-GPU-LEAK-CACHE"),
        6 * MIB,
        leak("GPUMEMPROF-GPU-LEAK-BUFFER"),
        10 * MIB,
        leak("GPUMEMPROF-GPU-LEAK-ASYNC"),
        6 * MIB
    );
    let oom_sites = format!(
        "oom.cu:{}={}/1;oom.cu:{}={}/4",
        oom("GPUMEMPROF-GPU-OOM-WEIGHTS"),
        256 * MIB,
        oom("GPUMEMPROF-GPU-OOM-ACT"),
        256 * MIB
    );
    let p = |name: &str| format!("cuda_{build}_{name}");
    vec![
        (p("leak_apis"), apis.to_string(), apis.to_string()),
        (
            p("leak_total"),
            format!("{}/5", 22 * MIB),
            format!("{}/5", 22 * MIB),
        ),
        (p("leak_sites"), leak_sites.clone(), leak_sites),
        (
            p("leak_by_size"),
            format!("3x{}", 2 * MIB),
            format!("3x{}", 2 * MIB),
        ),
        (
            p("leak_peak"),
            (26 * MIB).to_string(),
            (26 * MIB).to_string(),
        ),
        (
            p("oom_unchanged"),
            "rc=1,oom_rc=2".into(),
            "rc=1,oom_rc=2".into(),
        ),
        (
            p("oom_request"),
            format!("{malloc}:{}", free + 64 * MIB),
            format!("{malloc}:{}", free + 64 * MIB),
        ),
        (
            p("oom_request_site"),
            format!("oom.cu:{}", oom("GPUMEMPROF-GPU-OOM-REQUEST")),
            format!("oom.cu:{}", oom("GPUMEMPROF-GPU-OOM-REQUEST")),
        ),
        (
            p("oom_live"),
            format!("{}/5", 512 * MIB),
            format!("{}/5", 512 * MIB),
        ),
        (p("oom_sites"), oom_sites.clone(), oom_sites),
        (p("oom_free"), free.to_string(), free.to_string()),
    ]
}

fn cudarc_rows() -> Vec<(String, String, String)> {
    let line = |m: &str| source_line_of("tests/gpu/cudarc_client/src/main.rs", m);
    let apis = "cuMemAllocAsync:1/0,cuMemAlloc_v2:5/0,cuMemFree_v2:0/4";
    let sites = format!(
        "main.rs:{}={}/1;main.rs:{}={}/1",
        line("GPUMEMPROF-CUDARC-WEIGHTS"),
        64 * MIB,
        line("GPUMEMPROF-CUDARC-ASYNC"),
        8 * MIB
    );
    // 72 MiB live when it reads the free memory, asks for 64 MiB more than that.
    let free = SIM_CAPACITY - 72 * MIB;
    let request = format!("cuMemAlloc_v2:{}", free + 64 * MIB);
    vec![
        ("cudarc_apis".into(), apis.into(), apis.into()),
        (
            "cudarc_leak_total".into(),
            format!("{}/2", 72 * MIB),
            format!("{}/2", 72 * MIB),
        ),
        ("cudarc_leak_sites".into(), sites.clone(), sites),
        ("cudarc_oom".into(), request.clone(), request),
        ("cudarc_oom_free".into(), free.to_string(), free.to_string()),
    ]
}

/// One PyTorch allocator mode alone (`GPUMEMPROF_GPU_SUITE_TORCH_MODES`, so that one mode with
/// more pairs fits a short device call): its rows and the memory PyTorch cannot see, no other
/// mode's; an unknown mode is a usage error, exit 2.
#[test]
fn the_suite_runs_only_the_pytorch_modes_it_is_asked_for() {
    let client = cudarc_client();
    let only = ("GPUMEMPROF_GPU_SUITE_ONLY", "torch");
    let dir = scratch("gpu_suite_torch_modes");
    let modes = ("GPUMEMPROF_GPU_SUITE_TORCH_MODES", "nocache");
    let out = run_simulated(&dir, &client, &[only, modes]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let names: Vec<String> = rows(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "torch_nocache_train",
            "torch_nocache_oom",
            "torch_nvml",
            "torch_nccl_buffers"
        ],
        "{}",
        text(&out)
    );

    let dir = scratch("gpu_suite_torch_modes_unknown");
    let modes = ("GPUMEMPROF_GPU_SUITE_TORCH_MODES", "nocache,cached");
    let out = run_simulated(&dir, &client, &[only, modes]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // run.sh sends suite.py's stderr through `tee` with its stdout when OUT is set.
    let want =
        "suite.py: unknown PyTorch mode(s) ['cached']; known: default, expandable, async, nocache";
    assert!(text(&out).lines().any(|l| l == want), "{}", text(&out));
}

#[test]
fn the_simulated_suite_measures_the_programs_exactly_and_skips_the_frameworks() {
    let dir = scratch("gpu_suite_simulated");
    let client = cudarc_client();
    let out = run_simulated(&dir, &client, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = rows(&stdout);
    let map = by_name(&all);

    let mut want = cuda_rows("static");
    want.extend(cuda_rows("shared"));
    want.extend(cudarc_rows());
    for (name, expected, measured) in &want {
        let row = map
            .get(name)
            .unwrap_or_else(|| panic!("no row {name} in:\n{stdout}"));
        assert_eq!(
            (&row.expected, &row.measured, row.status.as_str()),
            (expected, measured, "PASS"),
            "{name}"
        );
    }
    // Both builds ran unchanged under the shim (the digest is of the program's own output).
    for build in ["static", "shared"] {
        let row = &map[&format!("cuda_{build}_leak_unchanged")];
        assert_eq!(
            (row.expected == row.measured, row.status.as_str()),
            (true, "PASS")
        );
        assert!(row.expected.starts_with("rc=0,"), "{row:?}");
    }

    // No framework here, and none would run in the simulated mode: SKIP, saying why.
    let frameworks = [
        "torchjob",
        "torch_default_train",
        "torch_default_oom",
        "torch_expandable_train",
        "torch_expandable_oom",
        "torch_async_train",
        "torch_async_oom",
        "torch_nocache_train",
        "torch_nocache_oom",
        "torch_nvml",
        "torch_nccl_buffers",
        "jax_platform",
        "jax_prealloc",
        "cupy_pool",
        "cupy_nopool",
    ];
    for name in frameworks {
        let row = map
            .get(name)
            .unwrap_or_else(|| panic!("no row {name} in:\n{stdout}"));
        let framework = name.split('_').next().unwrap().trim_end_matches("job");
        assert_eq!(row.status, "SKIP", "{name}: {row:?}");
        assert!(
            row.reason.contains(&format!("cannot import {framework} ("))
                || row
                    .reason
                    .starts_with(&format!("simulated mode: {framework} ")),
            "{name}: {row:?}"
        );
    }

    let canned = canned_rows();
    for (name, expected, measured, status) in &canned {
        let row = map
            .get(*name)
            .unwrap_or_else(|| panic!("no row {name} in:\n{stdout}"));
        assert_eq!(
            (
                row.expected.as_str(),
                row.measured.as_str(),
                row.status.as_str()
            ),
            (expected.as_str(), measured.as_str(), *status),
            "{name}"
        );
    }
    // An overhead inside the plain runs' own spread is not held to the budget.
    let noisy = &map["canned_torch_async_overhead"].reason;
    assert!(
        noisy.starts_with(
            "the runs without the shim spread by 40.7%, more than the budget: not resolved; "
        ),
        "{noisy}"
    );
    let counted = want.len() + 2 + frameworks.len() + canned.len();
    assert_eq!(
        all.len(),
        counted,
        "rows beyond the asserted ones:\n{stdout}"
    );

    // The table at the end, and the same rows as JSON in $OUT.
    let passed = all.iter().filter(|(_, r)| r.status == "PASS").count();
    let skipped = all.iter().filter(|(_, r)| r.status == "SKIP").count();
    let summary = format!(
        "{} checks: {passed} passed, 0 failed, {skipped} skipped",
        all.len()
    );
    assert_eq!(stdout.lines().last(), Some(summary.as_str()), "{stdout}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out/validation.json")).expect("validation.json"),
    )
    .expect("JSON");
    assert_eq!(json["mode"], "simulated");
    assert_eq!(json["counts"]["FAIL"], 0);
    assert_eq!(json["counts"]["PASS"], passed);
    let names: Vec<&str> = json["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    let printed: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, printed);
    let log = std::fs::read_to_string(dir.join("out/suite.log")).expect("suite.log");
    assert_eq!(log, stdout, "$OUT/suite.log is the run's output");
}

/// (name, expected, measured, status) of every canned row (tests/gpu/canned/*.json).
fn canned_rows() -> Vec<(&'static str, String, String, &'static str)> {
    let leak = format!(
        "torch_train.py:{}",
        source_line_of("tests/gpu/torch_train.py", "GPUMEMPROF-TORCH-LEAK")
    );
    let same = |name: &'static str, v: &str| (name, v.to_string(), v.to_string(), "PASS");
    let skip = |name: &'static str, e: &str| (name, e.to_string(), "-".to_string(), "SKIP");
    let curve = "e4363bbc83cdd4e8";
    vec![
        same("canned_cupy_nopool_leak", "5x3166208"),
        same("canned_cupy_nopool_live", "15831040"),
        same("canned_cupy_pool_leak", "5x3166208"),
        same("canned_cupy_pool_live", "32608256"),
        same("canned_jax_platform_leak", "5x3158016"),
        same("canned_jax_prealloc_pool", "61203283968"),
        same("canned_torch_async_peak", "150994944"),
        same("canned_torch_async_live", "136314880"),
        same("canned_torch_async_leak", "5x3149312"),
        same("canned_torch_async_leak_site", &leak),
        same("canned_torch_async_loss_curve", curve),
        // The H100's async runs of 2026-11-26: the runs without the shim spread by 40.7%.
        (
            "canned_torch_async_overhead",
            "<=10%".into(),
            "-21.4%".into(),
            "SKIP",
        ),
        same(
            "canned_torch_async_oom_request",
            "cudaMallocAsync:79993765888",
        ),
        same("canned_torch_async_oom_message_request", "74.50_GiB"),
        same("canned_torch_async_oom_message_free", "74.25_GiB"),
        same("canned_torch_async_oom_live", "268435456/4"),
        same("canned_torch_async_oom_message_reserved", "256.00_MiB"),
        same("canned_torch_default_peak", "169869312"),
        same("canned_torch_default_live", "148897792"),
        skip("canned_torch_default_leak", "5x3149312"),
        skip("canned_torch_default_leak_site", &leak),
        same("canned_torch_default_loss_curve", curve),
        (
            "canned_torch_default_overhead",
            "<=10%".into(),
            "+4.0%".into(),
            "PASS",
        ),
        same("canned_torch_default_oom_request", "cudaMalloc:79993765888"),
        same("canned_torch_default_oom_message_request", "74.50_GiB"),
        same("canned_torch_default_oom_message_free", "74.25_GiB"),
        same("canned_torch_default_oom_live", "268435456"),
        same("canned_torch_default_oom_message_reserved", "0_bytes"),
        same(
            "canned_torch_expandable_oom_request",
            "cuMemCreate:20971520",
        ),
        skip("canned_torch_expandable_oom_message_request", "-"),
        same("canned_torch_expandable_oom_message_free", "74.25_GiB"),
        same("canned_torch_expandable_oom_live", "272629760"),
        same("canned_torch_expandable_oom_message_reserved", "4.00_MiB"),
        same("canned_torch_nvml_used", "1203765248"),
        same("canned_torch_nvml_gap", "1094713344"),
        (
            "canned_torch_nccl_buffers",
            ">=1".into(),
            "37748736".into(),
            "PASS",
        ),
        skip("canned_torch_nocache_peak", "-"),
        (
            "canned_torch_nocache_live",
            ">=121634816".into(),
            "155189248".into(),
            "PASS",
        ),
        same("canned_torch_nocache_leak", "5x3149312"),
        skip("canned_torch_nocache_leak_site", &leak),
        same("canned_torch_nocache_loss_curve", curve),
        (
            "canned_torch_nocache_overhead",
            "<=10%".into(),
            "+6.3%".into(),
            "PASS",
        ),
        same("canned_torch_nocache_oom_request", "cudaMalloc:79993765888"),
        skip("canned_torch_nocache_oom_message_request", "-"),
        skip("canned_torch_nocache_oom_message_free", "-"),
        same("canned_torch_nocache_oom_live", "268435456/4"),
        skip("canned_torch_nocache_oom_message_reserved", "-"),
    ]
}

#[test]
fn every_comparison_rule_fails_on_wrong_measurements() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(gpu_dir().join("canned/mismatch"))
        .expect("read canned/mismatch")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    let out = Command::new("python3")
        .arg(gpu_dir().join("canned.py"))
        .args(&files)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3");
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let map = by_name(&rows(&stdout));
    let failed: Vec<(&str, &str, &str)> = map
        .iter()
        .filter(|(_, r)| r.status == "FAIL")
        .map(|(n, r)| (n.as_str(), r.expected.as_str(), r.measured.as_str()))
        .collect();
    let leak = format!(
        "torch_train.py:{}",
        source_line_of("tests/gpu/torch_train.py", "GPUMEMPROF-TORCH-LEAK")
    );
    let mut want = vec![
        ("canned_cupy_pool_leak", "5x3166208", "4x3166208"),
        ("canned_cupy_pool_live", "32608256", "29442048"),
        ("canned_jax_prealloc_pool", "61203283968", "3158016"),
        ("canned_torch_async_leak", "5x3149312", "4x3149312"),
        (
            "canned_torch_async_leak_site",
            leak.as_str(),
            "torch_train.py:1",
        ),
        ("canned_torch_async_oom_message_free", "-", "-"),
        ("canned_torch_async_oom_message_request", "-", "-"),
        ("canned_torch_async_oom_message_reserved", "-", "-"),
        ("canned_torch_default_live", "148897792", "150994944"),
        (
            "canned_torch_default_loss_curve",
            "e4363bbc83cdd4e8",
            "5255c2bf0f2ce532",
        ),
        ("canned_torch_default_oom_live", "268435456", "266338304"),
        (
            "canned_torch_default_oom_message_free",
            "74.25_GiB",
            "74.19_GiB",
        ),
        (
            "canned_torch_default_oom_message_reserved",
            "0_bytes",
            "-2097152_bytes",
        ),
        (
            "canned_torch_default_oom_request",
            "cudaMalloc:79993765888",
            "cudaMalloc:79991668736",
        ),
        ("canned_torch_default_overhead", "<=10%", "+16.0%"),
        (
            "canned_torch_expandable_oom_message_free",
            "74.25_GiB",
            "22.00_MiB",
        ),
        (
            "canned_torch_expandable_oom_request",
            "cuMemCreate:20971520",
            "cuMemMap:20971520",
        ),
        ("canned_torch_nccl_buffers", ">=1", "0"),
        ("canned_torch_nocache_live", ">=121634816", "121634304"),
        ("canned_torch_nocache_oom_raised", "-", "-"),
        ("canned_torch_nvml_gap", "1094713344", "1092616192"),
        ("canned_torch_nvml_used", "1203765248", "1201668096"),
    ];
    want.sort();
    assert_eq!(failed, want, "{stdout}");
}
