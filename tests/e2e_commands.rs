//! End to end checking commands: the bundled training loop (`examples/train_leak.c`) runs
//! under the shim with 5 and with 8 steps, and `tests/programs/hold_memory.c` holds memory
//! while it is watched; then `gpumemprof diff`, the gates, `analyze`, `info`, `monitor`,
//! `track`, `diagnose` and the telemetry export run on the real traces. The assertions are
//! the programs' documented numbers: S steps leak S MiB at the LEAK line, the peak is
//! (94 + S) MiB, 1 + 5S allocations and 1 + 4S frees.

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use gpumemprof_tests::profiled::*;
use gpumemprof_tests::{program_command, shim_path, sim_dir, source_line_of};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const SOURCE: &str = "examples/train_leak.c";

fn gpumemprof(args: &[&str]) -> Output {
    analyzer()
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("run gpumemprof")
}

/// What `read` makes of each thread of process `pid` (its /proc/PID/task/TID folder and
/// its id), sorted.
fn per_thread<T: Ord>(pid: &str, read: impl Fn(&Path, u32) -> T) -> Vec<T> {
    let mut out: Vec<T> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc/PID/task")
        .map(|t| {
            let t = t.expect("task");
            let tid = t.file_name().to_string_lossy().parse().expect("tid");
            read(&t.path(), tid)
        })
        .collect();
    out.sort();
    out
}

/// Each thread of process `pid`: its name, as the kernel keeps it (15 bytes), and its
/// scheduling policy (`stat` field 41: 0 SCHED_OTHER, 3 SCHED_BATCH), sorted by name.
fn policies(pid: &str) -> Vec<(String, u32)> {
    per_thread(pid, |task, _| {
        let stat = std::fs::read_to_string(task.join("stat")).expect("stat");
        let (head, tail) = stat.rsplit_once(") ").expect("comm in parentheses");
        let name = head.split_once(" (").expect("pid (comm").1.to_owned();
        // After the comm, field 3 is the first: the policy (41) is the 39th.
        let policy = tail
            .split_whitespace()
            .nth(38)
            .expect("policy")
            .parse()
            .expect("number");
        (name, policy)
    })
}

/// Each thread of process `pid`: its id, its name (15 bytes at most) and the signals it
/// blocks (`SigBlk` of its status: bit `n - 1` for signal `n`), sorted by id.
fn blocked_signals(pid: &str) -> Vec<(u32, String, u64)> {
    per_thread(pid, |task, tid| {
        let status = std::fs::read_to_string(task.join("status")).expect("status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .expect("field")
                .trim()
                .to_owned()
        };
        let mask = u64::from_str_radix(&field("SigBlk:"), 16).expect("hex");
        (tid, field("Name:"), mask)
    })
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 scratch path")
}

/// `gpumemprof ARGS --json`, exit `want`, checked against schema `name`.
fn json_of(args: &[&str], want: i32, name: &str) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = gpumemprof(&all);
    assert_eq!(
        code(&out),
        Some(want),
        "gpumemprof {all:?}: {:?}",
        stderr_lines(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema_version"], 1);
    schema::assert_valid(name, &v);
    v
}

/// train_leak with `steps`, NVML sampling off (so every event count is exact).
fn train(dir: &Path, steps: u64) -> PathBuf {
    let sub = dir.join(format!("steps{steps}"));
    std::fs::create_dir_all(&sub).expect("mkdir");
    let run = run_profiled(
        &sub,
        "train_leak",
        &[&steps.to_string()],
        &[("GPUMEMPROF_NVML_MS", "0")],
    );
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    run.trace
}

fn line(marker: &str) -> u64 {
    u64::from(source_line_of(SOURCE, marker))
}

fn top_frame_is(frames: &Value, function: &str, marker: &str) -> bool {
    let f = &frames[0];
    f["function"] == function
        && f["file"].as_str().is_some_and(|p| p.ends_with(SOURCE))
        && f["line"] == line(marker)
}

#[test]
fn diff_of_5_and_8_steps_is_exactly_3_mib_more_at_the_leak_line() {
    let dir = scratch("commands_diff");
    let (five, eight) = (train(&dir, 5), train(&dir, 8));
    for by in ["line", "function"] {
        let d = json_of(&["diff", path(&five), path(&eight), "--by", by], 0, "diff");
        assert_eq!(d["key"], by);
        assert_eq!(
            (
                &d["changed_sites"],
                &d["new_sites"],
                &d["gone_sites"],
                &d["unchanged_sites"]
            ),
            // By function, forward()'s three activations are one site.
            (
                &json!(1),
                &json!(0),
                &json!(0),
                &json!(if by == "line" { 5 } else { 3 })
            ),
            "{d:#}"
        );
        let sites = d["sites"].as_array().expect("sites");
        assert_eq!(sites.len(), 1, "only the leak changed: {sites:#?}");
        let s = &sites[0];
        assert_eq!(s["status"], "changed");
        assert_eq!(
            s["live_bytes_at_end"],
            json!({"before": 5 * MIB, "after": 8 * MIB, "delta": 3 * MIB})
        );
        assert_eq!(
            s["live_allocations_at_end"],
            json!({"before": 5, "after": 8, "delta": 3})
        );
        assert_eq!(
            s["peak_bytes"],
            json!({"before": 5 * MIB, "after": 8 * MIB, "delta": 3 * MIB})
        );
        assert!(
            top_frame_is(&s["frames"], "keep_for_logging", "GPUMEMPROF-LEAK"),
            "{}",
            s["frames"][0]
        );
        let t = &d["totals"];
        assert_eq!(
            t["live_bytes_at_end"],
            json!({"before": 5 * MIB, "after": 8 * MIB, "delta": 3 * MIB})
        );
        assert_eq!(
            t["peak_bytes"],
            json!({"before": 99 * MIB, "after": 102 * MIB, "delta": 3 * MIB})
        );
        assert_eq!(
            t["allocations"],
            json!({"before": 26, "after": 41, "delta": 15})
        );
    }
    // With every site listed, nothing but the leak changed at the end.
    let d = json_of(&["diff", path(&five), path(&eight), "--all"], 0, "diff");
    let changed_at_end: Vec<&Value> = d["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .filter(|s| s["live_bytes_at_end"]["delta"] != 0)
        .collect();
    assert_eq!(changed_at_end.len(), 1);
    assert_eq!(d["sites"].as_array().map(Vec::len), Some(6));
    // A run against itself: nothing changed.
    let same = json_of(&["diff", path(&five), path(&five)], 0, "diff");
    assert_eq!(same["sites"], json!([]));
    assert_eq!(same["unchanged_sites"], 6);

    let out = gpumemprof(&["diff", path(&five), path(&eight)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("live at end     5.0 MiB -> 8.0 MiB  +3.0 MiB (3145728 B)"),
        "{text}"
    );
    let leak = format!(
        "keep_for_logging at {}:",
        gpumemprof_tests::repo_root().join(SOURCE).display()
    );
    assert!(text.contains(&leak), "{text}");
}

#[test]
fn gates_on_a_real_trace_pass_at_the_limit_and_fail_above_it() {
    let dir = scratch("commands_gates");
    let trace = train(&dir, 5);
    let t = path(&trace);
    for cmd in ["summary", "peak"] {
        assert_eq!(code(&gpumemprof(&[cmd, t, "--max-peak", "99MiB"])), Some(0));
        let out = gpumemprof(&[cmd, t, "--max-peak", "98MiB"]);
        assert_eq!(code(&out), Some(4));
        assert_eq!(
            stderr_lines(&out),
            vec![
                "gpumemprof: gate failed: peak 99.0 MiB (103809024 B) exceeds --max-peak 98.0 \
                 MiB (102760448 B): reduce it, or raise the limit if the growth is expected"
            ]
        );
        assert!(!out.stdout.is_empty(), "the report is still printed");
    }
    assert_eq!(
        code(&gpumemprof(&["leaks", t, "--max-leaked", "5MiB"])),
        Some(0)
    );
    assert_eq!(
        code(&gpumemprof(&["leaks", t, "--max-leaked", "5242880"])),
        Some(0)
    );
    let out = gpumemprof(&["leaks", t, "--max-leaked", "5MB"]);
    assert_eq!(code(&out), Some(4));
    assert_eq!(
        stderr_lines(&out),
        vec![
            "gpumemprof: gate failed: leaked 5.0 MiB (5242880 B) exceeds --max-leaked 4.8 MiB \
             (5000000 B): reduce it, or raise the limit if the growth is expected"
        ]
    );
    assert_eq!(
        code(&gpumemprof(&["leaks", t, "--max-leaked", "lots"])),
        Some(2)
    );
}

#[test]
fn analyze_finds_the_growth_the_leaking_site_and_the_weights_held_to_shutdown() {
    let dir = scratch("commands_analyze");
    let trace = train(&dir, 5);
    let a = json_of(&["analyze", path(&trace)], 0, "analyze");
    let brief: Vec<(String, String, Value, Value)> = a["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["heuristic"].as_str().unwrap_or("").to_owned(),
                f["severity"].as_str().unwrap_or("").to_owned(),
                f["bytes"].clone(),
                f["count"].clone(),
            )
        })
        .collect();
    let row = |h: &str, s: &str, b: u64, c: u64| (h.to_owned(), s.to_owned(), json!(b), json!(c));
    assert_eq!(
        brief,
        // One finding per cause: the leaking site, which tells the row's growth too; the
        // memory it left at exit is its own, so no cleanup finding repeats it.
        vec![
            row("site_still_growing", "warning", 5 * MIB, 5),
            row("freed_only_at_shutdown", "info", 64 * MIB, 1),
        ]
    );
    let f = &a["findings"];
    assert_eq!(f[0]["evidence"]["cycles"], 5);
    // Lows after steps 1 to 4: the weights plus the buffers kept so far.
    assert_eq!(f[0]["evidence"]["first_low_bytes"], 65 * MIB);
    assert_eq!(f[0]["evidence"]["last_low_bytes"], 68 * MIB);
    assert_eq!(f[0]["evidence"]["lows"], 4);
    assert_eq!(f[0]["evidence"]["growth_bytes"], 3 * MIB);
    assert!(
        f[0]["message"].as_str().unwrap().ends_with(
            "; on device 0 device memory, its low points rose from 65.0 MiB (68157440 B) to \
             68.0 MiB (71303168 B) over 4 cycles (1.0 MiB (1048576 B) per cycle)"
        ),
        "{}",
        f[0]["message"]
    );
    assert!(top_frame_is(
        &f[0]["frames"],
        "keep_for_logging",
        "GPUMEMPROF-LEAK"
    ));
    assert!(top_frame_is(&f[1]["frames"], "main", "GPUMEMPROF-WEIGHTS"));
    assert_eq!(a["summary"]["totals"]["allocations"], 26);
    assert_eq!(a["summary"]["totals"]["frees"], 21);

    let out = gpumemprof(&["analyze", path(&trace), "--fail-on-findings"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(
        stderr_lines(&out),
        vec!["gpumemprof: findings: 1 finding of severity warning (--fail-on-findings)"]
    );
}

#[test]
fn info_of_a_trace_and_of_the_simulated_machine() {
    let dir = scratch("commands_info");
    let trace = train(&dir, 5);
    let v = json_of(&["info", path(&trace)], 0, "info-trace");
    let apis: Vec<(String, u64, u64, u64)> = v["apis"]
        .as_array()
        .expect("apis")
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap_or("").to_owned(),
                a["calls"].as_u64().unwrap_or(0),
                a["allocations"].as_u64().unwrap_or(0),
                a["frees"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        apis,
        vec![
            ("cudaMalloc".into(), 26, 26, 0),
            ("cudaFree".into(), 21, 0, 21)
        ]
    );
    assert_eq!(v["records"]["allocations"], 26);
    assert_eq!(v["records"]["end"], 1);
    assert_eq!(v["header"]["shim_version"], env!("CARGO_PKG_VERSION"));
    assert!(v["header"]["start_time_utc"]
        .as_str()
        .is_some_and(|s| s.len() == 20 && s.ends_with('Z')));
    assert_eq!(
        v["header"]["exe"],
        gpumemprof_tests::program("train_leak")
            .to_str()
            .expect("utf-8")
    );

    // The machine, through the simulated NVML: two devices of 8 GiB, nothing used.
    let out = analyzer()
        .args(["info", "--json"])
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("SIMCUDA_DEVICES", "2")
        .env("SIMCUDA_CAPACITY", (8u64 << 30).to_string())
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let m: Value = serde_json::from_slice(&out.stdout).expect("json");
    schema::assert_valid("info", &m);
    let n = &m["nvml"];
    assert_eq!(n["available"], true, "{n:#}");
    assert_eq!(n["driver_version"], "550.54.15");
    assert_eq!(n["message"], Value::Null);
    let devices = n["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 2);
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["name"], "NVIDIA Simulated GPU");
        assert_eq!(d["memory_total_bytes"], 8u64 << 30);
        assert_eq!(d["memory_used_bytes"], 0);
        assert_eq!(d["memory_free_bytes"], 8u64 << 30);
    }
    let out = analyzer()
        .arg("info")
        .env("LD_LIBRARY_PATH", sim_dir())
        .env_remove("SIMCUDA_DEVICES")
        .env_remove("SIMCUDA_CAPACITY")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NVIDIA driver 550.54.15"), "{text}");
    assert!(
        text.contains("device 0: NVIDIA Simulated GPU")
            && text.contains(": 16.0 GiB (17179869184 B) total, 0 B used"),
        "{text}"
    );
    // A broken NVML configuration: the simulator's init fails; still exit 0, one message.
    let out = analyzer()
        .args(["info", "--json"])
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("SIMCUDA_DEVICES", "many")
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(0));
    let m: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(m["nvml"]["available"], false);
    assert!(m["nvml"]["message"]
        .as_str()
        .is_some_and(|s| s.starts_with("NVML did not initialise: ")));
}

/// With a 100 MiB device, 5 steps cross 80% and 95% at known allocations: per step the
/// live bytes go base+8, +4, +2, +16 (gradient), +1 (leak), then the frees.
#[test]
fn track_and_monitor_on_a_finished_trace_with_a_given_device_size() {
    let dir = scratch("commands_track");
    let trace = train(&dir, 5);
    let t = path(&trace);
    let v = json_of(&["track", t, "--device-memory", "100MiB"], 0, "track");
    let alerts: Vec<(String, u64)> = v["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .map(|a| {
            (
                a["level"].as_str().unwrap_or("").to_owned(),
                a["used_bytes"].as_u64().unwrap_or(0) / MIB,
            )
        })
        .collect();
    let w = |m: u64| ("warning".to_owned(), m);
    let c = |m: u64| ("critical".to_owned(), m);
    assert_eq!(
        alerts,
        vec![
            w(94),
            c(95),
            c(95),
            w(80),
            c(96),
            w(81),
            c(97),
            w(80),
            c(98)
        ]
    );
    assert_eq!(v["devices"][0]["peak_bytes"], 99 * MIB);
    assert_eq!(v["devices"][0]["peak_percent"], 99.0);
    assert_eq!(v["devices"][0]["current_bytes"], 5 * MIB);
    assert_eq!(v["devices"][0]["level"], "ok");
    let out = gpumemprof(&["track", t, "--device-memory", "100MiB", "--fail-on-alerts"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(
        stderr_lines(&out),
        vec!["gpumemprof: findings: 9 alerts raised (--fail-on-alerts)"]
    );
    assert_eq!(
        code(&gpumemprof(&[
            "track",
            t,
            "--device-memory",
            "1GiB",
            "--fail-on-alerts"
        ])),
        Some(0)
    );

    let out = gpumemprof(&[
        "monitor",
        t,
        "--once",
        "--json",
        "--device-memory",
        "100MiB",
    ]);
    assert_eq!(code(&out), Some(0));
    let m: Value = serde_json::from_slice(&out.stdout).expect("json");
    schema::assert_valid("monitor", &m);
    assert_eq!(m["trace"]["complete"], true);
    assert_eq!(m["devices"][0]["current_bytes"], 5 * MIB);
    assert_eq!(m["devices"][0]["current_allocations"], 5);
    assert_eq!(m["devices"][0]["peak_bytes"], 99 * MIB);
    assert_eq!(m["alerts_total"], 9);
    let sites = m["sites"].as_array().expect("sites");
    assert_eq!(sites.len(), 1, "only the leak is live at the end");
    assert_eq!(
        (&sites[0]["bytes"], &sites[0]["count"]),
        (&json!(5 * MIB), &json!(5))
    );
    assert!(top_frame_is(
        &sites[0]["frames"],
        "keep_for_logging",
        "GPUMEMPROF-LEAK"
    ));
}

/// A process holding memory, watched by pid: `monitor --pid --once` sees it running with
/// its memory; `track --pid` follows it until it exits, then reports the end.
#[test]
fn monitor_and_track_follow_a_running_process_by_pid() {
    let dir = scratch("commands_pid");
    let trace = dir.join("held.trace");
    let mut child = program_command("hold_memory")
        .arg("3")
        .env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_NVML_MS", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hold_memory");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ready = String::new();
    stdout.read_line(&mut ready).expect("read");
    assert_eq!(ready, "ready\n");
    let pid = child.id().to_string();
    // The writer thread is a batch thread (its wake-ups never preempt the program's); the
    // program's own threads keep their policy.
    let threads = policies(&pid);
    let writer: Vec<u32> = (threads.iter())
        .filter(|t| t.0 == "gpumemprof-writ")
        .map(|t| t.1)
        .collect();
    assert_eq!(writer, [3], "{threads:?}");
    assert!(
        threads.iter().all(|t| t.0 == "gpumemprof-writ" || t.1 == 0),
        "{threads:?}"
    );
    // Nor does it take a signal sent to the process (Ctrl-C, kill): it blocks every one
    // but the faults its own instructions raise, so the kernel gives them to the program's
    // threads; the main thread blocks none (`sys/sigmask.rs`).
    let bit = |sig: u32| 1u64 << (sig - 1);
    let asked = bit(2) | bit(15) | bit(1) | bit(13); // SIGINT, SIGTERM, SIGHUP, SIGPIPE
    let faults = bit(11) | bit(7) | bit(8) | bit(4) | bit(5) | bit(31);
    let masks = blocked_signals(&pid);
    let of = |pick: &dyn Fn(&(u32, String, u64)) -> bool| -> Vec<u64> {
        (masks.iter().filter(|t| pick(t)))
            .map(|t| t.2 & (asked | faults))
            .collect()
    };
    assert_eq!(of(&|t| t.1 == "gpumemprof-writ"), [asked], "{masks:x?}");
    assert_eq!(of(&|t| t.0 == child.id()), [0], "{masks:x?}");

    let out = gpumemprof(&["monitor", "--pid", &pid, "--once", "--json"]);
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let m: Value = serde_json::from_slice(&out.stdout).expect("json");
    schema::assert_valid("monitor", &m);
    assert_eq!(m["process_running"], true);
    assert_eq!(m["trace"]["complete"], false);
    assert_eq!(m["trace"]["path"], trace.to_str().expect("utf-8"));
    assert_eq!(m["trace"]["pid"], child.id());
    assert_eq!(m["devices"][0]["current_bytes"], 8 * MIB);
    assert_eq!(m["devices"][0]["peak_bytes"], 12 * MIB);
    let hold = u64::from(source_line_of(
        "tests/programs/hold_memory.c",
        "GPUMEMPROF-HOLD",
    ));
    assert_eq!(m["sites"][0]["frames"][0]["line"], hold);
    assert_eq!(m["sites"][0]["count"], 2);
    // The trace of a process still writing it is not "did NOT exit cleanly".
    let out = gpumemprof(&["summary", path(&trace)]);
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("process still running (the trace is read as far as it is written)"),
        "{text}"
    );
    let out = gpumemprof(&["leaks", path(&trace)]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("8.0 MiB (8388608 B) in 2 allocations live so far"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // track --pid follows until the process exits.
    let tracker = analyzer()
        .args(["track", "--pid", &pid, "--json", "--interval", "0.05"])
        .args(["--device-memory", "10MiB"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start track");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"done\n").expect("write");
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success());
    let out = tracker.wait_with_output().expect("track output");
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    schema::assert_valid("track", &v);
    assert_eq!(v["trace"]["complete"], true);
    assert_eq!(v["devices"][0]["current_bytes"], 0);
    assert_eq!(v["devices"][0]["peak_bytes"], 12 * MIB);
    // 8 of 10 MiB: warning; 12 MiB: critical (120%).
    let levels: Vec<&str> = v["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .filter_map(|a| a["level"].as_str())
        .collect();
    assert_eq!(levels, vec!["warning", "critical"]);

    // Gone: --pid says so.
    let out = gpumemprof(&["monitor", "--pid", &pid, "--once"]);
    assert_eq!(code(&out), Some(1));
}

#[test]
fn diagnose_bundles_a_real_trace() {
    let dir = scratch("commands_diagnose");
    let trace = train(&dir, 5);
    let bundle = dir.join("bundle");
    let m = json_of(&["diagnose", path(&bundle), path(&trace)], 0, "manifest");
    assert_eq!(m["files"][0]["name"], "train_leak.trace");
    assert_eq!(
        m["files"][0]["bytes"],
        std::fs::metadata(&trace).expect("stat").len()
    );
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(bundle.join(name)).expect("read")).expect("json")
    };
    assert_eq!(read("leaks.json")["total_bytes"], 5 * MIB);
    assert_eq!(read("peak.json")["peaks"][0]["peak_bytes"], 99 * MIB);
    assert_eq!(read("summary.json")["totals"]["allocations"], 26);
    schema::assert_valid("environment", &read("environment.json"));
    assert_eq!(read("environment.json")["traced_argv"][1], "5");
    // The copy is a trace the analyzer reads the same.
    let copy = bundle.join("train_leak.trace");
    let s = json_of(&["summary", path(&copy)], 0, "summary");
    assert_eq!(s["totals"]["live_bytes_at_end"], 5 * MIB);
    // Refused again without -f.
    assert_eq!(
        code(&gpumemprof(&["diagnose", path(&bundle), path(&trace)])),
        Some(1)
    );
}

#[test]
fn telemetry_export_of_a_real_trace_replays_to_the_leak() {
    let dir = scratch("commands_telemetry");
    let trace = train(&dir, 5);
    let out_file = dir.join("events.jsonl");
    let out = gpumemprof(&[
        "export",
        "--format",
        "telemetry",
        path(&trace),
        "-o",
        path(&out_file),
    ]);
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let events: Vec<Value> = std::fs::read_to_string(&out_file)
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(events.len(), 26 + 21);
    for e in &events {
        schema::assert_valid("telemetry-event", e);
    }
    let count = |t: &str| events.iter().filter(|e| e["event_type"] == t).count();
    assert_eq!((count("allocation"), count("deallocation")), (26, 21));
    let sum: i64 = events
        .iter()
        .map(|e| e["allocator_change_bytes"].as_i64().expect("change"))
        .sum();
    assert_eq!(sum, 5 * MIB as i64);
    let last = events.last().expect("events");
    assert_eq!(last["allocator_allocated_bytes"], 5 * MIB);
    let peak = events
        .iter()
        .map(|e| e["allocator_allocated_bytes"].as_u64().expect("bytes"))
        .max();
    assert_eq!(peak, Some(99 * MIB));
    // Times are wall-clock and never go back.
    assert!(events
        .windows(2)
        .all(|w| w[0]["timestamp_ns"].as_u64() <= w[1]["timestamp_ns"].as_u64()));
    assert!(events
        .iter()
        .all(|e| e["pid"].as_i64().is_some_and(|p| p > 0)
            && e["world_size"] == 1
            && e["rank"] == 0));

    // A window: `--last 10` is the export's last 10 lines; `--from`/`--to` its lines in
    // those times (the window's edges are event times of the full export).
    let lines = std::fs::read_to_string(&out_file).expect("read");
    let lines: Vec<&str> = lines.lines().collect();
    let windowed = |args: &[&str]| -> Vec<String> {
        let file = dir.join("window.jsonl");
        let mut all = vec!["export", "--format", "telemetry", path(&trace), "-f", "-o"];
        all.push(path(&file));
        all.extend_from_slice(args);
        let out = gpumemprof(&all);
        assert_eq!(code(&out), Some(0), "{args:?}: {:?}", stderr_lines(&out));
        let text = std::fs::read_to_string(&file).expect("read");
        text.lines().map(str::to_owned).collect()
    };
    assert_eq!(windowed(&["--last", "10"]), lines[lines.len() - 10..]);
    let time = |e: &Value| e["metadata"]["trace_time_ns"].as_u64().expect("time");
    let (from, to) = (time(&events[10]), time(&events[30]));
    let secs = |ns: u64| format!("{:.9}", ns as f64 / 1e9);
    let want: Vec<&str> = lines
        .iter()
        .zip(&events)
        .filter(|(_, e)| (from..=to).contains(&time(e)))
        .map(|(l, _)| *l)
        .collect();
    assert_eq!(want.len(), 21);
    assert_eq!(windowed(&["--from", &secs(from), "--to", &secs(to)]), want);
    assert_eq!(
        windowed(&["--from", &secs(from), "--to", &secs(to), "--last", "4"]),
        want[want.len() - 4..]
    );
    for (args, why) in [
        (vec!["--from", "2", "--to", "1"], "is after --to"),
        (
            vec!["--last", "3", "--format", "csv"],
            "choose the events of --format telemetry",
        ),
    ] {
        let mut all = vec!["export", "--format", "telemetry", path(&trace), "-f", "-o"];
        all.push(path(&out_file));
        all.extend_from_slice(&args);
        if args.contains(&"csv") {
            all.remove(2);
            all.remove(1);
        }
        let out = gpumemprof(&all);
        assert_eq!(code(&out), Some(1), "{args:?}");
        assert!(
            stderr_lines(&out)[0].contains(why),
            "{:?}",
            stderr_lines(&out)
        );
    }
}

#[test]
fn exit_codes_of_the_new_commands() {
    let dir = scratch("commands_exit_codes");
    let trace = train(&dir, 5);
    let t = path(&trace);
    let not_a_trace = dir.join("notes.txt");
    std::fs::write(&not_a_trace, b"hello").expect("write");
    let n = path(&not_a_trace);
    let missing = dir.join("missing.trace");
    let m = path(&missing);
    // A directory where one trace is expected (summary, peak and leaks read every trace of
    // one): exit 1 with one line that says so.
    let d = path(&dir);
    for args in [
        vec!["analyze", d],
        vec!["diff", d, t],
        vec!["oom", d],
        vec!["info", d],
    ] {
        let out = gpumemprof(&args);
        assert_eq!(code(&out), Some(1), "{args:?}");
        assert_eq!(
            stderr_lines(&out),
            [format!(
                "gpumemprof: error: {d}: a directory, where one trace file is expected (summary, \
                 peak and leaks read every trace of a directory; give this command one of them)"
            )],
            "{args:?}"
        );
    }
    for args in [
        vec!["diff", t, t],
        vec!["analyze", t],
        vec!["info", t],
        vec!["track", t],
        vec!["monitor", t, "--once"],
    ] {
        assert_eq!(code(&gpumemprof(&args)), Some(0), "{args:?}");
    }
    for (args, want) in [
        (vec!["diff", t, n], 5),
        (vec!["diff", m, t], 1),
        (vec!["analyze", n], 5),
        (vec!["info", n], 5),
        (vec!["track", n], 5),
        (vec!["monitor", n, "--once"], 5),
        (vec!["monitor", m, "--once"], 1),
        (vec!["diff", t], 2),
        (vec!["analyze", t, "--frames", "x"], 2),
        (vec!["track", t, "--warning-threshold", "0"], 2),
    ] {
        let out = gpumemprof(&args);
        assert_eq!(code(&out), Some(want), "{args:?}: {:?}", stderr_lines(&out));
        if want != 2 {
            assert_eq!(
                stderr_lines(&out).len(),
                1,
                "{args:?}: {:?}",
                stderr_lines(&out)
            );
        }
    }
}

/// The trial's monitor/track situations: `monitor` of a trace whose process was killed
/// (SIGKILL, no End record) says the process is gone and stops instead of refreshing
/// forever; `monitor --pid` of a `gpumemprof run` launcher follows its child's trace;
/// `track --device-memory 0` is a usage error.
#[test]
fn monitor_stops_for_a_gone_process_and_finds_a_launchers_child() {
    use gpumemprof_tests::running::{run_within, Running};
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;
    let dir = scratch("commands_gone");
    let trace = dir.join("killed.trace");
    let mut held = program_command("hold_memory");
    gpumemprof_tests::profiled::preload(held.arg("3"), &trace);
    let mut job = Running::start_holding_stdin(held);
    job.wait_for_line("ready", Duration::from_secs(30));
    job.kill();
    let ended = job.finish(Duration::from_secs(30));
    assert_eq!(ended.status.signal(), Some(9));

    let mut monitor = analyzer();
    monitor.args(["monitor", "--interval", "0.05", "--json", path(&trace)]);
    let out = run_within(monitor, Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert_eq!(lines[0]["process_running"], false);
    assert_eq!(lines[0]["trace"]["complete"], false);
    assert_eq!(lines[0]["devices"][0]["current_bytes"], 8 * MIB);
    let text = gpumemprof(&["monitor", path(&trace)]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("process gone: stopped without closing"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );

    // A launcher's pid: its child writes the trace.
    let child_trace = dir.join("child.trace");
    let mut launcher = analyzer();
    launcher
        .args(["run", "-o", path(&child_trace), "--"])
        .arg(gpumemprof_tests::program("hold_memory"))
        .arg("2")
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("GPUMEMPROF_NVML_MS", "0")
        .env_remove("LD_PRELOAD");
    let mut job = Running::start_holding_stdin(launcher);
    job.wait_for_line("ready", Duration::from_secs(30));
    let pid = job.pid().to_string();
    let m = json_of(&["monitor", "--pid", &pid, "--once"], 0, "monitor");
    assert_eq!(m["trace"]["path"], path(&child_trace));
    assert_eq!(m["devices"][0]["current_bytes"], 4 * MIB);
    let ended = job.finish(Duration::from_secs(30));
    assert_eq!(ended.code(), Some(0), "{}", ended.stderr);

    let out = gpumemprof(&["track", path(&trace), "--device-memory", "0"]);
    assert_eq!(code(&out), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a device's memory size must be above 0"),
        "{:?}",
        stderr_lines(&out)
    );
}
