//! End to end views: the bundled training loop (`examples/train_leak.c`, 20 steps) and the
//! every-API program (`tests/programs/all_apis.c`, three out-of-memory failures) run under
//! the shim; then `gpumemprof flamegraph`, `timeline`, `report` and `export` run on their
//! traces, and the assertions are the programs' documented numbers: the leak's 20 MiB from
//! one line, the 114 MiB peak, the three failed requests.

use std::path::{Path, PathBuf};
use std::process::Output;

use gpumemprof_tests::profiled::*;
use gpumemprof_tests::{repo_root, source_line_of};
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// Documented in examples/train_leak.c for 20 steps.
const LEAK: u64 = 20 * MIB;
const PEAK: u64 = 114 * MIB;

fn gpumemprof(args: &[&str]) -> Output {
    analyzer().args(args).output().expect("run gpumemprof")
}

fn ok(args: &[&str]) -> Output {
    let out = gpumemprof(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "gpumemprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 scratch path")
}

/// One profiled run of `name`, with its trace.
fn traced(test: &str, name: &str, args: &[&str]) -> (PathBuf, PathBuf) {
    let dir = scratch(test);
    let run = run_profiled(&dir, name, args, &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    (dir, run.trace)
}

/// The `<title>` texts of a flamegraph SVG, which must parse as XML.
fn flamegraph_titles(svg: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(svg).expect("read the SVG");
    let doc = roxmltree::Document::parse_with_options(
        &text,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{} is not XML: {e}", svg.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(str::to_owned))
        .collect()
}

/// `12,345,678` as inferno writes counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| std::str::from_utf8(g).expect("ASCII digits"))
        .collect();
    groups.join(",")
}

fn leak_frame() -> String {
    let line = source_line_of("examples/train_leak.c", "GPUMEMPROF-LEAK");
    format!("keep_for_logging (train_leak.c:{line})")
}

#[test]
fn flamegraph_names_the_leaking_frame_with_its_bytes_at_the_peak_and_at_the_end() {
    let (dir, trace) = traced("views_flamegraph", "train_leak", &["20"]);
    let leak = format!("{} ({} bytes, ", leak_frame(), thousands(LEAK));

    let peak_svg = dir.join("peak.svg");
    let out = ok(&["flamegraph", path(&trace), "-o", path(&peak_svg)]);
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(
        note.contains("wrote") && note.contains("114.0 MiB"),
        "{note}"
    );
    let titles = flamegraph_titles(&peak_svg);
    assert!(
        titles.contains(&format!("all ({} bytes, 100%)", thousands(PEAK))),
        "{titles:#?}"
    );
    assert!(titles.iter().any(|t| t.starts_with(&leak)), "{titles:#?}");
    let weights = source_line_of("examples/train_leak.c", "GPUMEMPROF-WEIGHTS");
    assert!(
        titles.iter().any(|t| t.starts_with(&format!(
            "main (train_leak.c:{weights}) ({} bytes",
            thousands(64 * MIB)
        ))),
        "{titles:#?}"
    );

    let leaks_svg = dir.join("leaks.svg");
    ok(&[
        "flamegraph",
        path(&trace),
        "--leaks",
        "-o",
        path(&leaks_svg),
    ]);
    let titles = flamegraph_titles(&leaks_svg);
    assert!(
        titles.contains(&format!("all ({} bytes, 100%)", thousands(LEAK))),
        "{titles:#?}"
    );
    assert!(titles.iter().any(|t| t.starts_with(&leak)), "{titles:#?}");

    // Inverted: the allocating function sits right on the device root, with all its bytes.
    let inverted = dir.join("inverted.svg");
    ok(&[
        "flamegraph",
        path(&trace),
        "--leaks",
        "--inverted",
        "-o",
        path(&inverted),
    ]);
    assert!(flamegraph_titles(&inverted)
        .iter()
        .any(|t| t.starts_with(&leak)));

    // Past the end, `--at` is the end.
    let late = dir.join("late.svg");
    ok(&[
        "flamegraph",
        path(&trace),
        "--at",
        "3600",
        "-o",
        path(&late),
    ]);
    assert!(flamegraph_titles(&late).contains(&format!("all ({} bytes, 100%)", thousands(LEAK))));

    // An existing file is kept unless -f; the message says what to do.
    let again = gpumemprof(&["flamegraph", path(&trace), "-o", path(&peak_svg)]);
    assert_eq!(again.status.code(), Some(1));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already exists; pass -f"), "{err}");
    ok(&["flamegraph", path(&trace), "-o", path(&peak_svg), "-f"]);

    // The loop never runs out of memory: --oom says so and what to use instead.
    let oom = gpumemprof(&[
        "flamegraph",
        path(&trace),
        "--oom",
        "-o",
        path(&dir.join("oom.svg")),
    ]);
    assert_eq!(oom.status.code(), Some(1));
    let err = String::from_utf8_lossy(&oom.stderr);
    assert!(err.contains("no out-of-memory failure"), "{err}");
    assert!(!dir.join("oom.svg").exists());
}

#[test]
fn folded_export_has_the_leak_line_with_exactly_the_leaked_bytes() {
    let (_dir, trace) = traced("views_folded", "train_leak", &["20"]);
    let out = ok(&[
        "export",
        "--format",
        "folded",
        path(&trace),
        "--leaks",
        "-o",
        "-",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one leaking stack: {text}");
    let (stack, bytes) = lines[0].rsplit_once(' ').unwrap();
    assert_eq!(bytes.parse::<u64>().unwrap(), LEAK);
    let frames: Vec<&str> = stack.split(';').collect();
    // The device root, then outermost first: ... main, train_step, keep_for_logging.
    assert_eq!(frames[0], "[GPU 0 device]");
    assert_eq!(frames.last().copied(), Some(leak_frame().as_str()));
    assert!(frames[frames.len() - 2].starts_with("train_step (train_leak.c:"));
    assert!(frames[frames.len() - 3].starts_with("main (train_leak.c:"));

    // At the peak: six stacks that add up to the peak, the leak's among them.
    let out = ok(&["export", "--format", "folded", path(&trace), "-o", "-"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let parsed: Vec<(&str, u64)> = text
        .lines()
        .map(|l| {
            let (s, b) = l.rsplit_once(' ').unwrap();
            (s, b.parse().unwrap())
        })
        .collect();
    assert_eq!(parsed.len(), 6, "{text}");
    assert_eq!(parsed.iter().map(|(_, b)| b).sum::<u64>(), PEAK);
    assert!(parsed
        .iter()
        .any(|(s, b)| s.ends_with(&leak_frame()) && *b == LEAK));
}

#[test]
fn csv_timeline_peak_and_end_equal_summary() {
    let (dir, trace) = traced("views_csv", "train_leak", &["20"]);
    let csv = dir.join("timeline.csv");
    ok(&["export", "--format", "csv", path(&trace), "-o", path(&csv)]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("start_ns,end_ns,device,kind,min_bytes,max_bytes,end_bytes")
    );
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect();
    let num = |r: &Vec<String>, i: usize| r[i].parse::<u64>().unwrap();
    let series = |device: &str, kind: &str| -> Vec<&Vec<String>> {
        rows.iter()
            .filter(|r| r[2] == device && r[3] == kind)
            .collect()
    };
    let all = series("all", "all");
    let dev0 = series("0", "device");
    assert!(
        !all.is_empty() && all.len() <= 2048,
        "{} buckets",
        all.len()
    );
    assert_eq!(all.len(), dev0.len());

    let summary = report("summary", &trace, &[]);
    let peak = summary["totals"]["peak_bytes"].as_u64().unwrap();
    assert_eq!(peak, PEAK);
    assert_eq!(all.iter().map(|r| num(r, 5)).max(), Some(peak));
    assert_eq!(
        dev0.iter().map(|r| num(r, 5)).max(),
        summary["rows"][0]["peak_bytes"].as_u64()
    );
    assert_eq!(
        all.last().map(|r| num(r, 6)),
        summary["totals"]["live_bytes_at_end"].as_u64()
    );
    assert_eq!(all.last().map(|r| num(r, 6)), Some(LEAK));
    // Buckets are contiguous, in time order, and min <= max.
    for w in all.windows(2) {
        assert_eq!(num(w[0], 1), num(w[1], 0));
    }
    assert!(all.iter().all(|r| num(r, 4) <= num(r, 5)));
}

#[test]
fn chrome_export_has_a_counter_track_per_device_and_an_instant_event_per_oom() {
    let (dir, trace) = traced("views_chrome", "all_apis", &[]);
    let json_path = dir.join("trace.json");
    ok(&[
        "export",
        "--format",
        "chrome",
        path(&trace),
        "-o",
        path(&json_path),
    ]);
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).expect("JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents");

    let counter_max = |name: &str| -> Option<u64> {
        events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == name)
            .filter_map(|e| e["args"]["bytes"].as_u64())
            .max()
    };
    let summary = report("summary", &trace, &[]);
    assert_eq!(
        counter_max("all GPU memory (live bytes)"),
        summary["totals"]["peak_bytes"].as_u64()
    );
    for row in summary["rows"].as_array().unwrap() {
        let name = format!(
            "GPU {} {} memory (live bytes)",
            row["device"],
            row["kind"].as_str().unwrap()
        );
        assert_eq!(counter_max(&name), row["peak_bytes"].as_u64(), "{name}");
    }
    assert!(counter_max("GPU 1 device memory (live bytes)").is_some());

    // The three out-of-memory failures documented in all_apis.c, in order.
    let ooms: Vec<(&str, u64)> = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "oom")
        .map(|e| {
            assert_eq!(e["s"], "g");
            (
                e["args"]["api"].as_str().unwrap(),
                e["args"]["requested_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ooms,
        vec![
            ("cudaMalloc", 1 << 30 << 1),
            ("cudaMallocManaged", 1 << 30 << 1),
            ("cudaMallocHost", 1 << 62)
        ]
    );
    assert_eq!(v["otherData"]["out_of_memory_failures"], 3);
}

#[test]
fn timeline_draws_svg_and_png() {
    let (dir, trace) = traced("views_timeline", "all_apis", &[]);
    let svg = dir.join("timeline.svg");
    ok(&["timeline", path(&trace), "-o", path(&svg)]);
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the timeline SVG is XML");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    let summary = report("summary", &trace, &[]);
    let peak = summary["totals"]["peak_bytes"].as_u64().unwrap();
    assert_eq!(peak, 11 * MIB, "all_apis' combined peak");
    for want in [
        "all devices",
        "GPU 0",
        "GPU 1",
        "all memory, highest 11.0 MiB",
        "3 out-of-memory failures",
        "OOM 2.0 GiB",
    ] {
        assert!(texts.contains(&want), "{want:?} not in {texts:#?}");
    }

    let png = dir.join("timeline.png");
    ok(&["timeline", path(&trace), "-o", path(&png)]);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: 1400 pixels wide, a title strip and three panels high.
    assert_eq!(&bytes[16..20], &1400u32.to_be_bytes());
    assert_eq!(&bytes[20..24], &(60u32 + 3 * 320).to_be_bytes());

    let unknown = gpumemprof(&["timeline", path(&trace), "-o", path(&dir.join("t.gif"))]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("--format svg|png"));

    // The device's size, read by the failed allocations (the simulated 1 GiB): far above
    // the 11 MiB drawn, so named in the legend rather than drawn.
    assert!(
        texts.contains(&"device capacity 1.0 GiB (far above)"),
        "{texts:#?}"
    );
}

/// `--from`/`--to` zoom in: the buckets cover the window only, what was live at its start
/// carried in (train_leak: the 64 MiB of weights when the first step starts), and the
/// peak inside it is the trace's.
#[test]
fn a_timeline_window_starts_where_asked_with_what_was_live_then() {
    let (dir, trace) = traced("views_timeline_window", "train_leak", &["20"]);
    let (_, records) = decode(&trace);
    let times: Vec<u64> = (records.iter())
        .filter_map(|r| match r {
            gpumemprof_format::Record::Alloc(a) => Some(a.time_ns),
            _ => None,
        })
        .collect();
    // Just before the first step's first allocation (the second of the trace).
    let from_ns = times[1] - 1;
    let summary = report("summary", &trace, &[]);
    let peak_ns = summary["totals"]["peak_time_ns"].as_u64().unwrap();
    let to_ns = peak_ns + 1;
    let secs = |ns: u64| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
    let csv = dir.join("window.csv");
    ok(&[
        "export",
        "--format",
        "csv",
        path(&trace),
        "-o",
        path(&csv),
        "--from",
        &secs(from_ns),
        "--to",
        &secs(to_ns),
    ]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let all: Vec<Vec<u64>> = (text.lines().skip(1))
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| r[2] == "all")
        .map(|r| {
            [0, 1, 4, 5]
                .iter()
                .map(|&i| r[i].parse().unwrap())
                .collect()
        })
        .collect();
    assert_eq!((all[0][0], all[0][2]), (from_ns, 64 * MIB));
    assert_eq!(all.iter().map(|r| r[3]).max(), Some(PEAK));
    assert!(all.last().unwrap()[0] <= to_ns, "{:?}", all.last());
    // The chart says the window.
    let svg = dir.join("window.svg");
    ok(&[
        "timeline",
        path(&trace),
        "-o",
        path(&svg),
        "--from",
        &secs(from_ns),
        "--to",
        &secs(to_ns),
    ]);
    let title = std::fs::read_to_string(&svg).unwrap();
    assert!(
        title.contains("highest 114.0 MiB from "),
        "no window in the title"
    );
    let bad = gpumemprof(&[
        "timeline",
        path(&trace),
        "-o",
        path(&svg),
        "-f",
        "--from",
        "2",
        "--to",
        "1",
    ]);
    assert_eq!(bad.status.code(), Some(1));
}

#[test]
fn html_report_is_one_offline_file_with_the_summary_numbers() {
    let (dir, trace) = traced("views_report", "train_leak", &["20"]);
    let html_path = dir.join("report.html");
    ok(&["report", path(&trace), "-o", path(&html_path)]);
    let html = std::fs::read_to_string(&html_path).unwrap();

    // Offline: no URL, nothing loaded from elsewhere.
    for never in [
        "http://", "https://", "<script", "<link", "<iframe", " src=", "@import", "url(http",
    ] {
        assert!(!html.contains(never), "the report contains {never:?}");
    }
    assert!(html.starts_with("<!DOCTYPE html>"));
    // The summary's numbers, exactly.
    let summary = report("summary", &trace, &[]);
    let peak = summary["totals"]["peak_bytes"].as_u64().unwrap();
    let live = summary["totals"]["live_bytes_at_end"].as_u64().unwrap();
    assert_eq!((peak, live), (PEAK, LEAK));
    assert!(html.contains(&format!("{peak} B at ")), "peak card");
    assert!(
        html.contains(&format!("{live} B in 20 allocations")),
        "live card"
    );
    assert!(html.contains("114.0 MiB") && html.contains("20.0 MiB"));
    // Timeline, flamegraph (the leak's box with its bytes), peak sites and leaks.
    for section in [
        "id=\"timeline\"",
        "id=\"flamegraph\"",
        "id=\"peak-sites\"",
        "id=\"leaks\"",
    ] {
        assert!(html.contains(section), "{section}");
    }
    assert!(html.contains(&format!(
        "<title>{} ({} bytes, ",
        leak_frame(),
        thousands(LEAK)
    )));
    let line = source_line_of("examples/train_leak.c", "GPUMEMPROF-LEAK");
    assert!(
        html.contains("keep_for_logging at ")
            && html.contains(&format!("train_leak.c:{line}</li>"))
    );
    assert!(
        !html.contains("id=\"oom\""),
        "no out-of-memory section without failures"
    );

    // What a person sees, when a browser is installed (CI installs one).
    screenshot(&html_path, &dir.join("report.png"));
}

#[test]
fn html_report_of_out_of_memory_failures_lists_them() {
    let (dir, trace) = traced("views_report_oom", "all_apis", &[]);
    let html_path = dir.join("report.html");
    ok(&["report", path(&trace), "-o", path(&html_path)]);
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(html.contains("id=\"oom\""));
    assert!(html.contains("3 allocation calls returned out-of-memory"));
    for api in ["cudaMalloc<", "cudaMallocManaged<", "cudaMallocHost<"] {
        assert!(html.contains(api), "{api}");
    }
    assert!(html.contains("Live memory at the first failure"));
    screenshot(&html_path, &dir.join("report.png"));
}

#[test]
fn a_file_that_is_not_a_trace_exits_5_with_one_line_and_writes_nothing() {
    let dir = scratch("views_bad_input");
    let bogus = dir.join("bogus.trace");
    std::fs::write(&bogus, b"this is not a trace").unwrap();
    for (cmd, out) in [
        (vec!["flamegraph"], "f.svg"),
        (vec!["timeline"], "t.svg"),
        (vec!["report"], "r.html"),
        (vec!["export", "--format", "chrome"], "c.json"),
        (vec!["export", "--format", "csv"], "c.csv"),
        (vec!["export", "--format", "folded"], "f.txt"),
    ] {
        let target = dir.join(out);
        let mut args = cmd.clone();
        args.extend([path(&bogus), "-o", path(&target)]);
        let o = gpumemprof(&args);
        assert_eq!(o.status.code(), Some(5), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("not a gpumemprof trace"), "{err}");
        assert!(!target.exists(), "{args:?} wrote {}", target.display());
    }
}

/// Runs tests/browser/screenshot.sh and checks it wrote a real image; skipped, with a note,
/// where /usr/bin/chromium is absent.
fn screenshot(html: &Path, png: &Path) {
    if !Path::new("/usr/bin/chromium").exists() {
        eprintln!("note: /usr/bin/chromium is absent: skipping the browser screenshot check");
        return;
    }
    let script = repo_root().join("tests/browser/screenshot.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(html)
        .arg(png)
        .output()
        .expect("run screenshot.sh");
    assert!(
        out.status.success(),
        "screenshot.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(png).expect("the screenshot");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(bytes.len() > 20_000, "a blank page? {} bytes", bytes.len());
}

/// The trial's rough edges, each in the situation it was met: `--oom 1` reads as `--oom=1`;
/// `--device` of a device the trace never used is an error, not an empty graph; `-o` of a
/// directory is refused before reading; a negative count and a time too large for the flag
/// say what is wrong (no clap tip about `-- -5`); `peak`'s text ends with the total its
/// `--max-peak` gate checks.
#[test]
fn rough_edges_of_the_command_line() {
    let (dir, trace) = traced("views_rough_edges", "all_apis", &[]);
    let t = path(&trace);
    let svg = |name: &str| dir.join(name).display().to_string();
    ok(&["flamegraph", t, "--oom", "1", "-o", &svg("spaced.svg")]);
    ok(&["flamegraph", t, "--oom=1", "-o", &svg("joined.svg")]);
    assert_eq!(
        std::fs::read(svg("spaced.svg")).unwrap(),
        std::fs::read(svg("joined.svg")).unwrap()
    );

    let failing = [
        (
            vec!["flamegraph", t, "--device", "99", "-o", "never.svg"],
            1,
            "gpumemprof: error: the trace has no memory on device 99 (it has devices 0, 1): give \
             one of those to --device"
                .to_string(),
        ),
        (
            vec!["flamegraph", t, "-o", path(&dir), "-f"],
            1,
            format!(
                "gpumemprof: error: {}: is a directory; give a file name with -o (a file in it, \
                 for example)",
                dir.display()
            ),
        ),
        (
            vec!["leaks", t, "--top", "-5"],
            2,
            "error: invalid value '-5' for '--top <N>': give 0 or more".to_string(),
        ),
        (
            vec!["oom", t, "--window", "1e400"],
            2,
            "error: invalid value '1e400' for '--window <SECONDS>': \"1e400\": too large (at \
             most 18446744073 seconds)"
                .to_string(),
        ),
    ];
    for (args, code, first) in failing {
        let out = gpumemprof(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().next(), Some(first.as_str()), "{args:?}: {err}");
        assert!(!err.contains("tip:"), "{err}");
    }
    assert!(!Path::new("never.svg").exists());

    let summary = report("summary", &trace, &[]);
    let text = report_text("peak", &trace, &["--max-peak", "1TiB"]);
    let total = summary["totals"]["peak_bytes"].as_u64().unwrap();
    assert!(
        text.contains(&format!(
            "all memory together (what --max-peak checks): peak {} at ",
            gpumemprof_analyzer::units::bytes_exact(total)
        )),
        "{text}"
    );
    let peak = report("peak", &trace, &[]);
    assert_eq!(peak["total_peak_bytes"], total);
    assert_eq!(
        peak["total_peak_time_ns"],
        summary["totals"]["peak_time_ns"]
    );
}

/// On an 80-column terminal (`script` gives the command one), text fits: no line is wider,
/// and summary's table keeps its numbers in fewer columns. Through a pipe, the same report
/// is as wide as it was written.
#[test]
fn text_on_a_terminal_fits_its_width() {
    let (_, trace) = traced("views_terminal_width", "train_leak", &["20"]);
    let command = format!(
        "{} summary {}",
        gpumemprof_tests::analyzer_path().display(),
        path(&trace)
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("COLUMNS", "80")
        .output()
        .expect("script(1), from util-linux, runs the report on a terminal");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(
        text.contains("device  kind                    allocs        peak    live@end  failed\n"),
        "{text}"
    );
    assert!(
        text.contains("     0  device                     101   114.0 MiB    20.0 MiB       0\n")
    );
    let piped = ok(&["summary", path(&trace)]);
    let piped = String::from_utf8_lossy(&piped.stdout);
    assert!(piped.lines().any(|l| l.chars().count() > 100), "{piped}");
}
