//! End to end: the profiled program behaves exactly as without the shim, the shim
//! degrades to a pass-through when it cannot work, traces cut anywhere still read, and
//! bad input to the analyzer is a one-line error with exit code 5.

use gpumemprof_format::{Record, TraceReader};
use gpumemprof_tests::profiled::*;

const MIB: u64 = 1 << 20;

#[test]
fn programs_behave_exactly_as_without_the_shim() {
    let dir = scratch("unchanged");
    let cases: &[(&str, &[&str])] = &[
        ("all_apis", &[]),
        ("train_leak", &["7"]),
        ("ctor_alloc", &[]),
        ("threads", &["4", "2000", "512"]),
        ("flush_exit", &[]),
    ];
    for (name, args) in cases {
        let plain = run_plain(name, args, &[]);
        let run = run_profiled(&dir, name, args, &[]);
        let stdout_plain = String::from_utf8_lossy(&plain.stdout);
        // flush_exit reports whether the shim's flush exists: the only intended difference.
        let expected = stdout_plain.replace("flush absent", "flush rc=0");
        assert_eq!(run.stdout(), expected, "{name}: stdout differs");
        assert_eq!(
            run.output.status.code(),
            plain.status.code(),
            "{name}: exit code differs"
        );
        assert_eq!(
            without_shim_lines(&run.stderr()),
            String::from_utf8_lossy(&plain.stderr),
            "{name}: stderr differs"
        );
        assert!(run.trace.is_file(), "{name}: no trace written");
    }
}

#[test]
fn a_trace_path_that_cannot_be_created_warns_once_and_passes_through() {
    let plain = run_plain("train_leak", &["3"], &[]);
    let mut cmd = gpumemprof_tests::program_command("train_leak");
    let out = cmd
        .arg("3")
        .env("LD_PRELOAD", gpumemprof_tests::shim_path())
        .env("GPUMEMPROF_OUTPUT", "/nonexistent-dir/x/%p.trace")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, plain.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = shim_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0]
        .starts_with("gpumemprof: warning: cannot create the trace file /nonexistent-dir/x/"));
    assert!(
        lines[0].ends_with("the program runs without profiling"),
        "{}",
        lines[0]
    );
}

#[test]
fn disabled_shim_creates_no_file_and_prints_nothing() {
    let dir = scratch("disabled");
    let run = run_profiled(&dir, "train_leak", &["3"], &[("GPUMEMPROF_DISABLE", "1")]);
    assert_eq!(run.output.status.code(), Some(0));
    assert!(!run.trace.exists());
    assert!(shim_lines(&run.stderr()).is_empty(), "{}", run.stderr());
}

#[test]
fn quiet_silences_the_trace_lines_and_placeholders_expand() {
    let dir = scratch("quiet");
    let template = dir.join("job-r%r-%p.trace");
    let mut cmd = gpumemprof_tests::program_command("train_leak");
    let child = cmd
        .arg("2")
        .env("LD_PRELOAD", gpumemprof_tests::shim_path())
        .env("GPUMEMPROF_OUTPUT", &template)
        .env("GPUMEMPROF_QUIET", "1")
        .env("RANK", "3")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = dir.join(format!("job-r3-{pid}.trace"));
    assert!(expected.is_file(), "missing {}", expected.display());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&expected).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn an_existing_trace_or_symlink_is_never_overwritten() {
    let dir = scratch("no_clobber");
    let trace = dir.join("train_leak.trace");
    std::fs::write(&trace, b"precious").unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, b"victim").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("train_leak.trace.1")).unwrap();
    let run = run_profiled(&dir, "train_leak", &["2"], &[]);
    assert_eq!(run.output.status.code(), Some(0));
    assert_eq!(std::fs::read(&trace).unwrap(), b"precious");
    assert_eq!(std::fs::read(&victim).unwrap(), b"victim");
    let used = dir.join("train_leak.trace.2");
    let lines = shim_lines(&run.stderr()).join("\n");
    assert!(lines.contains(&used.display().to_string()), "{lines}");
    assert_eq!(report("leaks", &used, &[])["total_bytes"], 2 * MIB);
}

#[test]
fn flush_then_exit_without_handlers_keeps_every_event() {
    // Repeated: the flush must see events pushed just before it was asked for, whatever
    // the writer thread was doing at that moment.
    for round in 0..25 {
        let dir = scratch(&format!("flush_exit/{round}"));
        let run = run_profiled(&dir, "flush_exit", &[], &[]);
        assert_eq!(run.output.status.code(), Some(0));
        assert_eq!(run.stdout(), "flush rc=0\n");
        let (_, records) = decode(&run.trace);
        let allocs = records
            .iter()
            .filter(|r| matches!(r, Record::Alloc(_)))
            .count();
        let frees = records
            .iter()
            .filter(|r| matches!(r, Record::Free(_)))
            .count();
        assert_eq!((allocs, frees), (3, 1), "round {round}");
        // _exit skips atexit handlers, but the shim hooks _exit and completes the trace.
        assert!(
            records.iter().any(|r| matches!(r, Record::End(_))),
            "round {round}: the trace is complete"
        );
        if round == 0 {
            let leaks = report("leaks", &run.trace, &[]);
            assert_eq!(leaks["trace"]["complete"], true);
            assert_eq!(leaks["total_bytes"], 2 * MIB);
            assert_eq!(leaks["total_count"], 2);
        }
    }
}

/// Every record the reader returns for `bytes`, or the error's text.
fn read_all(bytes: &[u8]) -> Result<(Vec<Record>, bool), String> {
    let mut r = TraceReader::open(bytes).map_err(|e| e.to_string())?;
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().map_err(|e| e.to_string())? {
        v.push(rec);
    }
    Ok((v, r.truncated()))
}

#[test]
fn a_trace_cut_at_every_offset_reads_up_to_its_last_complete_block() {
    let dir = scratch("cut");
    // Five explicit flushes give a small trace of at least six blocks, whatever the timing.
    let run = run_profiled(&dir, "flush_rounds", &["5"], &[]);
    assert_eq!(run.output.status.code(), Some(0));
    assert_eq!(run.stdout(), "rounds=5 flushes=5\n");
    let bytes = std::fs::read(&run.trace).unwrap();
    let (full, truncated) = read_all(&bytes).unwrap();
    assert!(!truncated);
    let header_len = 16 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;

    let cut = dir.join("cut.trace");
    let mut seen_counts = std::collections::BTreeSet::new();
    for n in 0..=bytes.len() {
        match read_all(&bytes[..n]) {
            Err(e) => assert!(n < header_len, "cut at {n}: unexpected error {e}"),
            Ok((records, _)) => {
                assert!(
                    n >= header_len,
                    "cut at {n} inside the header read without error"
                );
                assert_eq!(
                    records[..],
                    full[..records.len()],
                    "cut at {n}: not a prefix"
                );
                seen_counts.insert(records.len());
            }
        }
    }
    // One distinct prefix per complete block, plus the empty one.
    assert!(
        seen_counts.len() >= 7,
        "expected at least six blocks, saw {seen_counts:?}"
    );

    // The analyzer agrees: exit 5 inside the header, a warning and a report after it.
    for n in [0, 7, header_len - 1] {
        std::fs::write(&cut, &bytes[..n]).unwrap();
        let out = analyzer().arg("summary").arg(&cut).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "cut at {n}");
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    }
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    let out = analyzer()
        .arg("summary")
        .arg(&cut)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["trace"]["truncated"], true);
}

#[test]
fn random_bytes_and_foreign_files_are_rejected_with_exit_5_and_one_line() {
    let dir = scratch("random");
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut inputs: Vec<Vec<u8>> = (0..20)
        .map(|i| {
            (0..(i * 97 + 1))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect();
    inputs.push(b"GPUMEMPF\x63\x00\x00\x00\x02\x00\x00\x00{}".to_vec()); // version 99
    inputs.push(std::fs::read(gpumemprof_tests::shim_path()).unwrap()); // an ELF file
    let f = dir.join("bad.trace");
    for (i, input) in inputs.iter().enumerate() {
        std::fs::write(&f, input).unwrap();
        for cmd in ["summary", "peak", "leaks"] {
            let out = analyzer().arg(cmd).arg(&f).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(5), "input {i}, {cmd}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "input {i}, {cmd}: {stderr}");
            assert!(stderr.starts_with("gpumemprof: error: "), "{stderr}");
        }
    }
}

#[test]
fn without_a_cuda_runtime_the_hooks_return_its_no_driver_error_and_record_nothing() {
    let dir = scratch("no_runtime");
    assert_eq!(
        String::from_utf8_lossy(&run_plain("no_runtime", &[], &[]).stdout),
        "cudaMalloc absent\n"
    );
    let run = run_profiled(&dir, "no_runtime", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.stdout(), "cudaMalloc rc=35 ptr=0x1\ncudaFree rc=35\n");
    assert!(!run.trace.exists(), "nothing was recorded, so no file");
    assert!(shim_lines(&run.stderr()).is_empty(), "{}", run.stderr());
}

#[test]
fn the_public_c_api_reports_state_path_and_version() {
    let dir = scratch("c_api");
    assert_eq!(
        String::from_utf8_lossy(&run_plain("c_api", &[], &[]).stdout),
        "api absent\n"
    );
    let run = run_profiled(&dir, "c_api", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        run.stdout(),
        format!(
            "active=1\npath={}\nversion={version}\nranges=0,1,1,0,-1\n\
             memory=0:0,0,0,0,0\n",
            run.trace.display()
        )
    );
    // The two ranges are NVTX's: pushed and popped on the trace.
    let s = report("summary", &run.trace, &["--by", "range"]);
    assert_eq!(s["by_range"]["nvtx"]["pushes"], 2);
    assert_eq!(s["by_range"]["nvtx"]["pops"], 2);
    let off = run_profiled(&dir, "c_api", &[], &[("GPUMEMPROF_DISABLE", "1")]);
    // Disabled: NVTX's levels all the same, and no figures (the struct left alone).
    assert_eq!(
        off.stdout(),
        format!(
            "active=0\npath=(null)\nversion={version}\nranges=0,1,1,0,-1\n\
             memory=-1:1,1,1,1,1\n"
        )
    );
}

#[test]
fn a_tiny_queue_loses_nothing() {
    let dir = scratch("tiny_queue");
    let run = run_profiled(
        &dir,
        "threads",
        &["4", "20000", "256"],
        &[("GPUMEMPROF_QUEUE_CAPACITY", "64")],
    );
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let (header, _) = decode(&run.trace);
    assert_eq!(header["config"]["queue_capacity"], 64);
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["totals"]["allocations"], 80_000);
    assert_eq!(s["totals"]["frees"], 80_000);
    assert_eq!(s["trace"]["events"], 160_000);
    assert_eq!(s["trace"]["dropped"], 0);
}

#[test]
fn an_invalid_setting_warns_once_and_the_default_applies() {
    let dir = scratch("bad_setting");
    let run = run_profiled(&dir, "train_leak", &["2"], &[("GPUMEMPROF_STACKS", "deep")]);
    assert_eq!(run.output.status.code(), Some(0));
    let stderr = run.stderr();
    let warnings: Vec<&str> = shim_lines(&stderr)
        .into_iter()
        .filter(|l| l.contains("warning"))
        .collect();
    assert_eq!(
        warnings,
        vec!["gpumemprof: warning: GPUMEMPROF_STACKS=\"deep\" is not off, native or full; using full"]
    );
    let (header, _) = decode(&run.trace);
    assert_eq!(header["config"]["stacks"], "full");
}

#[test]
fn errno_is_what_the_runtime_left_even_when_the_shim_met_errors() {
    let dir = scratch("errno");
    let plain = run_plain("errno_kept", &[], &[]);
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "malloc rc=0 errno=77\nfree rc=0 errno=77\ndouble free rc=1 errno=77\n"
    );
    // The trace path exists already: the shim's first open fails (EEXIST) before it
    // picks `.1`, inside the first cudaMalloc.
    std::fs::write(dir.join("errno_kept.trace"), b"taken").unwrap();
    let run = run_profiled(&dir, "errno_kept", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0));
    assert_eq!(run.stdout(), String::from_utf8_lossy(&plain.stdout));
    assert!(dir.join("errno_kept.trace.1").is_file());
}

#[test]
fn a_forked_child_writes_its_own_trace_or_nothing_and_an_execed_child_writes_its_own() {
    for mode in ["trace", "off"] {
        let dir = scratch(&format!("fork_exec_{mode}"));
        let template = dir.join("t.%p.trace");
        let child = gpumemprof_tests::program_command("fork_exec")
            .env("LD_PRELOAD", gpumemprof_tests::shim_path())
            .env("GPUMEMPROF_OUTPUT", &template)
            .env("GPUMEMPROF_FORK", mode)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let parent_pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "forked child rc=0\nexec child ok\nparent ok\n"
        );
        let mut traces: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "trace"))
            .collect();
        traces.sort();
        let parent = dir.join(format!("t.{parent_pid}.trace"));
        let p = report("summary", &parent, &[]);
        assert_eq!(
            p["totals"]["allocations"], 1,
            "{mode}: the forked child's allocation is never in the parent's trace"
        );
        assert_eq!(p["totals"]["live_bytes_at_end"], MIB);
        // Per child: (allocations, live bytes at end). The forked child allocates and frees
        // 2 MiB and leaves with _exit; the exec'd child keeps 3 MiB.
        let mut children: Vec<(u64, u64)> = traces
            .iter()
            .filter(|t| **t != parent)
            .map(|t| {
                let c = report("summary", t, &[]);
                assert_eq!(c["trace"]["complete"], true, "{mode}: {}", t.display());
                (
                    c["totals"]["allocations"].as_u64().unwrap(),
                    c["totals"]["live_bytes_at_end"].as_u64().unwrap(),
                )
            })
            .collect();
        children.sort();
        match mode {
            "trace" => assert_eq!(children, vec![(1, 0), (1, 3 * MIB)], "{traces:?}"),
            _ => assert_eq!(children, vec![(1, 3 * MIB)], "{traces:?}"),
        }
    }
}

/// The file offsets of a trace's blocks (each a 4-byte length and a zstd frame).
fn block_offsets(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut at = 16 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut blocks = Vec::new();
    while at + 4 <= bytes.len() {
        let len = 4 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        blocks.push((at, len));
        at += len;
    }
    blocks
}

/// The situation: three bytes flipped inside one block of a good trace. Every command
/// reads the other blocks, says once what was lost (bytes and events), and exits 0; the
/// JSON says it too. With every block damaged, nothing can be read: exit 5, one line.
#[test]
fn a_damaged_block_is_skipped_with_one_warning_and_the_loss_in_json() {
    let dir = scratch("damaged_block");
    let run = run_profiled(&dir, "flush_rounds", &["6"], &[("GPUMEMPROF_NVML_MS", "0")]);
    assert_eq!(run.stdout(), "rounds=6 flushes=6\n");
    let bytes = std::fs::read(&run.trace).unwrap();
    let blocks = block_offsets(&bytes);
    assert!(blocks.len() >= 7, "{blocks:?}");
    let (at, len) = blocks[3];
    let full = report("summary", &run.trace, &[]);

    // What that block held, read alone from the good file.
    let header_end = blocks[0].0;
    let alone = [&bytes[..header_end], &bytes[at..at + len]].concat();
    let (records, _) = read_all(&alone).unwrap();
    let count = |f: fn(&Record) -> bool| records.iter().filter(|r| f(r)).count() as u64;
    let allocs = count(|r| matches!(r, Record::Alloc(_)));
    let frees = count(|r| matches!(r, Record::Free(_)));
    assert!(allocs > 0, "{records:?}");

    let mut damaged = bytes.clone();
    for b in &mut damaged[at + len / 2..at + len / 2 + 3] {
        *b ^= 0x5a;
    }
    let bad = dir.join("damaged.trace");
    std::fs::write(&bad, &damaged).unwrap();
    let out = analyzer()
        .args(["summary", "--json"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "skipped 1 damaged block ({len} B, the first at byte {at}: block does not decompress"
        )) && stderr.contains(&format!("{} events lost", allocs + frees)),
        "{stderr}"
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &s["trace"];
    assert_eq!(t["damaged_blocks"], 1);
    assert_eq!(t["damaged_bytes"], len as u64);
    assert_eq!(t["damaged_events"], allocs + frees);
    assert_eq!(t["events"], full["trace"]["events"]);
    let (got, want) = (&s["totals"], &full["totals"]);
    assert_eq!(
        got["allocations"],
        want["allocations"].as_u64().unwrap() - allocs
    );
    assert_eq!(got["frees"], want["frees"].as_u64().unwrap() - frees);
    // Lost events count both ways, and `leaks` marks what may not be a leak: the buffers
    // kept before the damage (one a round; flush_rounds frees the others within the
    // round) are the allocations live at the end of the blocks before it.
    assert!(
        stderr.contains("lost allocations make counts low, and lost frees leave freed memory live"),
        "{stderr}"
    );
    let prefix = dir.join("prefix.trace");
    std::fs::write(&prefix, &bytes[..at]).unwrap();
    let kept_before = report("leaks", &prefix, &[])["total_count"]
        .as_u64()
        .unwrap();
    assert!(kept_before >= 2, "{kept_before}");
    let leaks = report("leaks", &bad, &[]);
    let marked: u64 = (leaks["groups"].as_array().unwrap().iter())
        .map(|g| g["before_damage_count"].as_u64().unwrap())
        .sum();
    assert_eq!(marked, kept_before);
    let text = report_text("leaks", &bad, &[]);
    assert!(
        text.contains(&format!(
            "{kept_before} of them allocated before a damaged block of the trace, where their \
             frees may be"
        )),
        "{text}"
    );
    for cmd in [&["leaks"][..], &["peak"], &["timeline", "-o"]] {
        let mut c = analyzer();
        c.args(cmd);
        if cmd.len() > 1 {
            c.arg(dir.join("timeline.png")).arg("-f");
        }
        let out = c.arg(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{cmd:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        if cmd.len() == 1 {
            assert!(
                text.contains("WARNING: 1 block of the trace file"),
                "{cmd:?}: {text}"
            );
        }
    }

    // Every block damaged: nothing to report.
    let mut all = bytes.clone();
    for (at, len) in &blocks {
        for b in &mut all[at + len / 2..at + len / 2 + 3] {
            *b ^= 0x5a;
        }
    }
    std::fs::write(&bad, &all).unwrap();
    let out = analyzer().arg("summary").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("does not decompress"), "{stderr}");
}
