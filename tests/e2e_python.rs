//! Python frames in stacks, end to end, on every CPython 3.9 to 3.13 this machine has
//! (`python3.X` on PATH, or under pyenv's `versions/`; `python3` itself is required).
//!
//! - The shim's struct offsets (shim/src/python/layout.rs) equal `offsetof` from each
//!   version's own headers (tests/python/py_offsets.c).
//! - tests/programs/py_frames.py, run under the shim: `leaks --json` names the Python
//!   function and line of each allocation, callers included, in place of the interpreter's
//!   evaluation frames; a `threading.Thread` has its own Python frames; a pthread that never
//!   ran Python has native frames only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpumemprof_tests::profiled::{report, report_text};
use gpumemprof_tests::{
    analyzer_path, repo_root, shared_library, shim_path, sim_dir, source_line_of,
};
use serde_json::Value;

const MIB: u64 = 1 << 20;
const SCRIPT: &str = "tests/programs/py_frames.py";
/// How reports name it: relative to the test's working directory (`tests/`).
const SCRIPT_NAME: &str = "programs/py_frames.py";

/// Every CPython 3.9 to 3.13 found, as (minor version, interpreter path), one per version.
fn interpreters() -> BTreeMap<u32, PathBuf> {
    let mut found = BTreeMap::new();
    let pyenv_root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    for minor in 9..=13u32 {
        let name = format!("python3.{minor}");
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(root) = &pyenv_root {
            if let Ok(dir) = std::fs::read_dir(root.join("versions")) {
                let mut versions: Vec<PathBuf> = dir
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with(&format!("3.{minor}.")))
                    })
                    .collect();
                versions.sort();
                candidates.extend(versions.into_iter().map(|v| v.join("bin").join(&name)));
            }
        }
        candidates.push(PathBuf::from(&name));
        for c in candidates {
            let ok = Command::new(&c)
                .args(["-c", "import sys; print(sys.version_info[:2])"])
                .output()
                .is_ok_and(|o| {
                    o.status.success()
                        && String::from_utf8_lossy(&o.stdout).trim() == format!("(3, {minor})")
                });
            if ok {
                found.insert(minor, c);
                break;
            }
        }
    }
    found
}

/// At least the machine's `python3` must be among them, or nothing here is tested.
fn interpreters_checked() -> BTreeMap<u32, PathBuf> {
    let found = interpreters();
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.version_info[1])"])
        .output()
        .expect("python3 is needed for the Python frame tests");
    let minor: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(
        found.contains_key(&minor),
        "python3 (3.{minor}) was not found as python3.{minor}: {found:?}"
    );
    eprintln!(
        "CPython versions tested: {:?}",
        found.keys().collect::<Vec<_>>()
    );
    found
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gpumemprof-e2e-python-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn struct_offsets_match_every_installed_pythons_headers() {
    for (minor, python) in interpreters_checked() {
        let include = Command::new(&python)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['include'])",
            ])
            .output()
            .unwrap();
        let include = String::from_utf8_lossy(&include.stdout).trim().to_string();
        let dir = scratch(&format!("offsets{minor}"));
        let exe = dir.join("py_offsets");
        let cc = Command::new("cc")
            .arg(format!("-I{include}"))
            .arg(format!("-I{include}/internal"))
            .arg(repo_root().join("tests/python/py_offsets.c"))
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(
            cc.status.success(),
            "3.{minor}: {}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let printed = Command::new(&exe).output().unwrap();
        let printed = String::from_utf8(printed.stdout).unwrap();
        let ours = gpumemprof::capture::python::table_text(300 + minor)
            .unwrap_or_else(|| panic!("the shim has no layout for 3.{minor}"));
        assert_eq!(
            printed, ours,
            "3.{minor}: headers (left) and shim/src/python/layout.rs (right)"
        );
    }
}

/// Runs py_frames.py under the shim with `python`, returns `leaks --json --frames 0`.
fn leaks_of_py_frames(python: &Path, tag: &str) -> Value {
    report("leaks", &py_frames_trace(python, tag), &["--frames", "0"])
}

/// The trace of `tests/programs/py_frames.py` run by `python` under the shim.
fn py_frames_trace(python: &Path, tag: &str) -> PathBuf {
    let dir = scratch(tag);
    let trace = dir.join("py.trace");
    let out = Command::new(python)
        .arg(repo_root().join(SCRIPT))
        .arg(shared_library("py_native_thread"))
        .env("LD_PRELOAD", shim_path())
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env_remove("GPUMEMPROF_STACKS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{tag}: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    assert!(!stderr.contains("warning"), "{tag}: {stderr}");
    trace
}

/// `monitor`'s sites name the script as every report does: relative to the program's
/// working directory (the tests crate), not by its absolute path.
#[test]
fn monitor_names_source_files_as_the_reports_do() {
    let trace = py_frames_trace(Path::new("python3"), "monitor_paths");
    let leaks = report("leaks", &trace, &["--frames", "0"]);
    let monitor = report("monitor", &trace, &["--once", "--frames", "0"]);
    let files = |groups: &Value, bytes: u64| -> Vec<String> {
        let group = (groups.as_array().expect("groups").iter())
            .find(|g| g["bytes"] == bytes)
            .unwrap_or_else(|| panic!("no group of {bytes} bytes in {groups:#}"));
        (group["frames"].as_array().expect("frames").iter())
            .filter(|f| f["python"] == true)
            .map(|f| f["file"].as_str().expect("file").to_owned())
            .collect()
    };
    // The 8 MiB the weights hold, made on the main thread: every Python frame is the
    // script's.
    let ours = files(&monitor["sites"], 8 * MIB);
    assert_eq!(ours, vec![SCRIPT_NAME; 5]);
    assert_eq!(ours, files(&leaks["groups"], 8 * MIB));
}

/// The Python frames of a group in `file` (a suffix), as `function:line`.
fn python_frames_in(group: &Value, file: &str) -> Vec<String> {
    group["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["python"] == true && f["file"].as_str().unwrap().ends_with(file))
        .map(|f| format!("{}:{}", f["function"].as_str().unwrap(), f["line"]))
        .collect()
}

/// All Python frames of a group, whatever their file.
fn python_frames(group: &Value) -> Vec<String> {
    python_frames_in(group, "")
}

fn line(marker: &str) -> u32 {
    source_line_of(SCRIPT, marker)
}

#[test]
fn leaks_name_the_python_function_and_line_on_every_version() {
    let (malloc, weights, step, main, thread) = (
        line("# PY-FRAMES-MALLOC"),
        line("# PY-FRAMES-WEIGHTS"),
        line("# PY-FRAMES-STEP"),
        line("# PY-FRAMES-MAIN"),
        line("# PY-FRAMES-THREAD"),
    );
    for (minor, python) in interpreters_checked() {
        let leaks = leaks_of_py_frames(&python, &format!("leaks{minor}"));
        assert_eq!(leaks["total_bytes"], 11 * MIB + 9 * MIB / 4, "3.{minor}");
        assert_eq!(leaks["total_count"], 10, "3.{minor}");
        let groups = leaks["groups"].as_array().unwrap();
        let by_bytes = |b: u64| {
            groups
                .iter()
                .find(|g| g["bytes"] == b)
                .unwrap_or_else(|| panic!("3.{minor}: no group of {b} bytes"))
        };
        // Qualified names from 3.11 on (co_qualname), plain names before.
        let q = |class: &str, f: &str| {
            if minor >= 11 {
                format!("{class}.{f}")
            } else {
                f.to_string()
            }
        };
        let main_line = line("if __name__ == \"__main__\":") + 1;
        // Every Python frame of the main thread's stack is the script's.
        assert_eq!(
            python_frames(by_bytes(8 * MIB)),
            vec![
                format!("malloc:{malloc}"),
                format!("{}:{weights}", q("Trainer", "build_weights")),
                format!("{}:{step}", q("Trainer", "step")),
                format!("main:{main}"),
                format!("<module>:{main_line}"),
            ],
            "3.{minor}"
        );
        // The thread's own frames only (then threading.py's): none of the main thread's.
        let threaded = by_bytes(2 * MIB);
        assert_eq!(
            python_frames_in(threaded, SCRIPT_NAME),
            vec![format!("malloc:{malloc}"), format!("worker:{thread}")],
            "3.{minor}"
        );
        assert!(
            python_frames(threaded)[2..]
                .iter()
                .all(|f| !f.starts_with("main:")),
            "3.{minor}: {threaded}"
        );
        let native = by_bytes(MIB);
        assert!(python_frames(native).is_empty(), "3.{minor}");
        assert_eq!(native["frames"][0]["function"], "run", "3.{minor}");
        // The evaluator's own frames are replaced, not kept beside the Python ones.
        let main_group = by_bytes(8 * MIB);
        let eval_frames = main_group["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["function"] == "_PyEval_EvalFrameDefault")
            .count();
        assert_eq!(eval_frames, 0, "3.{minor}: {main_group}");
        // One loop, two lines, the same native frames: two sites, three blocks each (the
        // shim reuses a stack's id only when its Python frames are the same too).
        for (marker, size) in [
            ("# PY-FRAMES-TWIN-A", 512 << 10),
            ("# PY-FRAMES-TWIN-B", 256 << 10),
        ] {
            let twin = by_bytes(3 * size);
            assert_eq!(twin["count"], 3, "3.{minor}: {twin}");
            assert_eq!(
                python_frames_in(twin, SCRIPT_NAME)[..2],
                [
                    format!("malloc:{malloc}"),
                    format!("twins:{}", line(marker))
                ],
                "3.{minor}"
            );
        }
    }
}

#[test]
fn native_stacks_mode_records_no_python_frames() {
    let dir = scratch("native_mode");
    let trace = dir.join("py.trace");
    let out = Command::new("python3")
        .arg(repo_root().join(SCRIPT))
        .arg(shared_library("py_native_thread"))
        .env("LD_PRELOAD", shim_path())
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_STACKS", "native")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = report("info", &trace, &[]);
    assert_eq!(info["records"]["python_codes"], 0);
    assert_eq!(info["records"]["allocations"], 10);
}

/// The "done when": `gpumemprof run -- python3 examples/train.py` on the simulated
/// runtime gives leak and peak reports that name the Python lines. 8 steps: 8 MiB leaked
/// from `Model.keep_for_logging`; the peak, 32 MiB, is the 16 MiB of weights, the last
/// step's 8 MiB of activations and the 8 MiB leaked by then.
#[test]
fn run_python_train_names_the_python_lines_in_leaks_and_peak() {
    const EXAMPLE: &str = "examples/train.py";
    let dir = scratch("run_train");
    let trace = dir.join("train.trace");
    let out = Command::new(analyzer_path())
        .arg("run")
        .arg("-o")
        .arg(&trace)
        .args(["--", "python3"])
        .arg(repo_root().join(EXAMPLE))
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("STEPS", "8")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "train.py: 8 steps done\n"
    );
    assert!(
        stderr.contains(&format!("gpumemprof: writing {}", trace.display())),
        "{stderr}"
    );
    let line = |marker: &str| source_line_of(EXAMPLE, marker);
    let leaks = report("leaks", &trace, &[]);
    assert_eq!(leaks["total_bytes"], 8 * MIB);
    assert_eq!(leaks["groups"].as_array().unwrap().len(), 1);
    let leak = python_frames_in(&leaks["groups"][0], EXAMPLE);
    assert_eq!(
        leak[..3],
        [
            format!("device_alloc:{}", line("rc = cudart.cudaMalloc")),
            format!("Model.keep_for_logging:{}", line("# the leak: never freed")),
            format!("Model.step:{}", line("self.keep_for_logging()")),
        ],
        "{leak:?}"
    );
    // Python first: ctypes' and libffi's frames above device_alloc and the interpreter's
    // between and under the Python frames are left out; `--native` shows them.
    let shown: Vec<String> = leaks["groups"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{}:{}", f["function"].as_str().unwrap_or("?"), f["line"]))
        .collect();
    assert_eq!(
        shown,
        [
            format!("device_alloc:{}", line("rc = cudart.cudaMalloc")),
            format!("Model.keep_for_logging:{}", line("# the leak: never freed")),
            format!("Model.step:{}", line("self.keep_for_logging()")),
            format!("main:{}", line("model.step()")),
            format!("<module>:{}", line("    main()")),
        ]
    );
    let text = report_text("leaks", &trace, &["--frames", "2"]);
    let first = text.lines().skip_while(|l| !l.starts_with("#1 ")).nth(1);
    assert_eq!(
        first.map(str::trim),
        Some(
            format!(
                "device_alloc at {}:{}",
                repo_root().join(EXAMPLE).display(),
                line("rc = cudart.cudaMalloc")
            )
            .as_str()
        ),
        "{text}"
    );
    // The HTML report's Leaks section shows the same frames first; with `--native` the
    // frames past the eighth (Model.keep_for_logging's among them) expand in place.
    let keep = format!(
        "<li>Model.keep_for_logging at {}:{}</li>",
        repo_root().join(EXAMPLE).display(),
        line("# the leak: never freed")
    );
    for (flags, first_list_has_it) in [(&[][..], true), (&["--native"][..], false)] {
        let html_path = dir.join("report.html");
        let out = Command::new(analyzer_path())
            .args(flags)
            .arg("report")
            .arg(&trace)
            .arg("-o")
            .arg(&html_path)
            .arg("-f")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let html = std::fs::read_to_string(&html_path).unwrap();
        let section = &html[html.find("id=\"leaks\"").unwrap()..];
        let section = &section[..section.find("</section>").unwrap()];
        let first_list = &section[..section.find("</ol>").unwrap()];
        assert_eq!(
            first_list.contains(&keep),
            first_list_has_it,
            "{flags:?}: {section}"
        );
        let expands = section.find("<details class=\"more\"><summary>");
        assert_eq!(
            expands.is_some(),
            !first_list_has_it,
            "{flags:?}: {section}"
        );
        if let Some(at) = expands {
            assert!(section[at..].contains(&keep), "{section}");
        }
    }
    let native = report("leaks", &trace, &["--native", "--frames", "0"]);
    let frames = native["groups"][0]["frames"].as_array().unwrap();
    assert_eq!(frames[0]["python"], false, "{frames:#?}");
    let interpreter = frames
        .iter()
        .filter(|f| f["python"] == false)
        .filter(|f| f["function"].as_str().is_some_and(|n| n.contains("PyEval")))
        .count();
    assert!(interpreter > 0, "{frames:#?}");
    let peak = report("peak", &trace, &[]);
    let row = &peak["peaks"][0];
    assert_eq!(row["peak_bytes"], 32 * MIB);
    let mut sites: Vec<(u64, String)> = row["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            // The caller of device_alloc names the site.
            let frames = python_frames_in(s, EXAMPLE);
            (s["bytes"].as_u64().unwrap(), frames[1].clone())
        })
        .collect();
    sites.sort();
    let forward = format!("{}:{}", forward_function(), line("# activations"));
    assert_eq!(
        sites,
        vec![
            (8 * MIB, forward),
            (
                8 * MIB,
                format!("Model.keep_for_logging:{}", line("# the leak: never freed"))
            ),
            (16 * MIB, format!("Model.__init__:{}", line("# weights"))),
        ]
    );
}

/// The function examples/train.py's activations are allocated in, as python3 names it: a
/// comprehension is its own function before 3.12 (qualified names from 3.11), inlined into
/// its caller from 3.12 on (PEP 709).
fn forward_function() -> &'static str {
    match python3_minor() {
        ..=10 => "<listcomp>",
        11 => "Model.forward.<locals>.<listcomp>",
        _ => "Model.forward",
    }
}

fn python3_minor() -> u32 {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.version_info[1])"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The flight recorder (`GPUMEMPROF_MODE=oom`) keeps the Python code definitions with its
/// stacks and writes them at the out-of-memory. examples/train.py on a 30 MiB device: step 7's
/// 1 MiB logging buffer fails with 30 MiB live (16 MiB of weights, 6 MiB leaked by steps
/// 1 to 6, 8 MiB of step 7's activations), and the script exits 1 with them still live.
#[test]
fn the_flight_recorder_dump_names_the_python_lines() {
    const EXAMPLE: &str = "examples/train.py";
    let dir = scratch("flight_recorder");
    let trace = dir.join("oom.trace");
    let out = Command::new("python3")
        .arg(repo_root().join(EXAMPLE))
        .env("LD_PRELOAD", shim_path())
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_MODE", "oom")
        .env("SIMCUDA_CAPACITY", (30 * MIB).to_string())
        .env("STEPS", "8")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("train.py: cudaMalloc(1048576) failed with error 2"),
        "{stderr}"
    );
    let leaks = report("leaks", &trace, &[]);
    assert_eq!(leaks["total_bytes"], 30 * MIB);
    let line = |marker: &str| source_line_of(EXAMPLE, marker);
    let mut sites: Vec<(u64, String)> = leaks["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let frames = python_frames_in(g, EXAMPLE);
            (g["bytes"].as_u64().unwrap(), frames[1].clone())
        })
        .collect();
    sites.sort();
    let forward = forward_function();
    assert_eq!(
        sites,
        vec![
            (
                6 * MIB,
                format!("Model.keep_for_logging:{}", line("# the leak: never freed"))
            ),
            (8 * MIB, format!("{forward}:{}", line("# activations"))),
            (16 * MIB, format!("Model.__init__:{}", line("# weights"))),
        ]
    );
}
