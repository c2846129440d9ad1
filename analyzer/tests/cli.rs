//! End-to-end tests of the `gpumemprof` command: each builds a synthetic trace of a named
//! situation with the format crate's `TraceWriter`, runs the real binary, and checks exact
//! numbers, exit codes and stderr lines.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpumemprof_format::{
    Alloc, AllocFailed, Free, MemKind, Module, Record, Stats, FORMAT_VERSION, MAGIC,
};
use serde_json::{json, Value};

const DEV: MemKind = MemKind::Device;
const MIB: u64 = 1 << 20;

#[path = "checks/synth.rs"]
mod synth;
#[path = "checks/tempdir.rs"]
mod tempdir;

use synth::{free, stack};
use tempdir::TempDir;

fn tmp_dir(name: &str) -> TempDir {
    TempDir::new("analyzer", name)
}

fn header() -> Value {
    json!({
        "format": "gpumemprof",
        "format_version": FORMAT_VERSION,
        "shim_version": "0.1.0",
        "pid": 4242,
        "host": "testhost",
        "argv": ["./train", "--epochs", "3"],
        "exe": "/opt/train",
        "start_time_unix_ns": 1_700_000_000_000_000_000u64,
        "start_monotonic_ns": 1000,
        "config": {},
        "apis": [
            {"id": 0, "name": "cudaMalloc", "family": "runtime"},
            {"id": 1, "name": "cudaFree", "family": "runtime"}
        ]
    })
}

/// The bytes of a trace with one block per inner vector, and where each block ends.
fn trace_bytes(blocks: &[Vec<Record>]) -> (Vec<u8>, Vec<usize>) {
    synth::trace_bytes(&header(), blocks)
}

fn write_trace(dir: &Path, blocks: &[Vec<Record>]) -> PathBuf {
    synth::write_blocks(dir.join("run.gmt"), &header(), blocks).0
}

fn alloc(t: u64, device: i32, kind: MemKind, address: u64, size: u64, stack: u64) -> Record {
    Record::Alloc(Alloc {
        kind,
        device,
        ..synth::alloc_of(t, address, size, stack)
    })
}

fn free_with(t: u64, address: u64, result: u32) -> Record {
    Record::Free(Free {
        result,
        ..synth::free_of(t, address)
    })
}

fn end(t: u64, events: u64) -> Record {
    Record::End(Stats {
        time_ns: t,
        events,
        queue_waits: 2,
        dropped: 0,
    })
}

fn gpumemprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpumemprof"))
        .args(args)
        .output()
        .expect("run gpumemprof")
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `gpumemprof CMD TRACE --json EXTRA...`, asserts success, returns the JSON.
fn report(cmd: &str, trace: &Path, extra: &[&str]) -> Value {
    let path = trace.to_str().expect("utf-8 temp path");
    let mut args = vec![cmd, path, "--json"];
    args.extend_from_slice(extra);
    let out = gpumemprof(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["schema_version"], 1);
    v
}

fn text(cmd: &str, trace: &Path, extra: &[&str]) -> String {
    let mut args = vec![cmd, trace.to_str().expect("utf-8 temp path")];
    args.extend_from_slice(extra);
    let out = gpumemprof(&args);
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8(out.stdout).expect("utf-8 text")
}

#[test]
fn two_devices_one_leak_each() {
    let dir = tmp_dir("two-devices");
    let trace = write_trace(
        &dir,
        &[
            vec![
                stack(1),
                stack(2),
                alloc(10, 0, DEV, 0xa000, MIB, 1),
                alloc(20, 0, DEV, 0xb000, 512, 2),
                alloc(25, 1, DEV, 0xc000, 2048, 1),
            ],
            vec![
                free(30, 0xa000),
                alloc(40, 0, MemKind::PinnedHost, 0xd000, 4096, 2),
                free(50, 0xd000),
                end(60, 6),
            ],
        ],
    );
    let s = report("summary", &trace, &[]);
    assert_eq!(
        s["trace"],
        json!({"path": trace.to_str(), "pid": 4242, "argv": ["./train", "--epochs", "3"],
               "complete": true, "ending": null, "truncated": false, "damaged_blocks": 0,
               "damaged_bytes": 0, "damaged_events": 0, "events": 6,
               "queue_waits": 2, "dropped": 0, "duration_ns": 60, "stopped": null})
    );
    assert_eq!(
        s["rows"],
        json!([
            {"device": 0, "kind": "device", "allocations": 2, "frees": 1,
             "bytes_allocated": MIB + 512, "bytes_freed": MIB, "peak_bytes": MIB + 512,
             "peak_time_ns": 20, "live_bytes_at_end": 512, "live_allocations_at_end": 1,
             "failed_allocations": 0},
            {"device": 0, "kind": "pinned_host", "allocations": 1, "frees": 1,
             "bytes_allocated": 4096, "bytes_freed": 4096, "peak_bytes": 4096,
             "peak_time_ns": 40, "live_bytes_at_end": 0, "live_allocations_at_end": 0,
             "failed_allocations": 0},
            {"device": 1, "kind": "device", "allocations": 1, "frees": 0,
             "bytes_allocated": 2048, "bytes_freed": 0, "peak_bytes": 2048,
             "peak_time_ns": 25, "live_bytes_at_end": 2048, "live_allocations_at_end": 1,
             "failed_allocations": 0}
        ])
    );
    // The combined peak is at t=25 (1 MiB + 512 + 2048), not the sum of the row peaks.
    assert_eq!(
        s["totals"],
        json!({"allocations": 4, "frees": 2, "bytes_allocated": MIB + 512 + 2048 + 4096,
               "bytes_freed": MIB + 4096, "peak_bytes": MIB + 512 + 2048, "peak_time_ns": 25,
               "live_bytes_at_end": 2560, "live_allocations_at_end": 2,
               "failed_allocations": 0})
    );
    assert_eq!(
        (
            &s["unknown_frees"],
            &s["failed_frees"],
            &s["failed_allocations"]
        ),
        (&json!(0), &json!(0), &json!(0))
    );

    let l = report("leaks", &trace, &[]);
    assert_eq!(
        (&l["total_bytes"], &l["total_count"]),
        (&json!(2560), &json!(2))
    );
    let groups: Vec<_> = l["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            (
                g["stack_id"].clone(),
                g["devices"].clone(),
                g["bytes"].clone(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        vec![
            (json!(1), json!([1]), json!(2048)),
            (json!(2), json!([0]), json!(512))
        ]
    );

    let t = text("summary", &trace, &[]);
    assert!(t.contains("pid 4242: ./train --epochs 3"), "{t}");
    assert!(t.contains("peak 1.0 MiB (1051136 B) at 0.000 s"), "{t}");
}

#[test]
fn peak_in_the_middle_is_attributed_at_the_high_water_mark() {
    let dir = tmp_dir("peak-middle");
    let trace = write_trace(
        &dir,
        &[vec![
            stack(1),
            stack(2),
            stack(3),
            stack(4),
            alloc(1_000_000_000, 0, DEV, 0x1000, 100 * MIB, 1),
            alloc(2_000_000_000, 0, DEV, 0x2000, 200 * MIB, 2),
            alloc(2_500_000_000, 0, DEV, 0x3000, 50 * MIB, 2),
            alloc(3_000_000_000, 0, DEV, 0x4000, 300 * MIB, 3),
            free(4_000_000_000, 0x4000),
            free(4_100_000_000, 0x2000),
            // A lower local maximum later: must not replace the peak's sites.
            alloc(5_000_000_000, 0, DEV, 0x5000, 400 * MIB, 4),
            free(6_000_000_000, 0x5000),
            alloc(7_000_000_000, 0, DEV, 0x6000, MIB, 4),
            end(8_000_000_000, 9),
        ]],
    );
    let p = report("peak", &trace, &["--top", "2"]);
    let peaks = p["peaks"].as_array().expect("peaks");
    assert_eq!(peaks.len(), 1);
    assert_eq!(peaks[0]["device"], 0);
    assert_eq!(peaks[0]["kind"], "device");
    assert_eq!(peaks[0]["peak_bytes"], 650 * MIB);
    assert_eq!(peaks[0]["peak_time_ns"], 3_000_000_000u64);
    let sites: Vec<_> = peaks[0]["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .map(|s| {
            (
                s["stack_id"].clone(),
                s["bytes"].clone(),
                s["count"].clone(),
            )
        })
        .collect();
    assert_eq!(
        sites,
        vec![
            (json!(3), json!(300 * MIB), json!(1)),
            (json!(2), json!(250 * MIB), json!(2))
        ]
    );
    // Frames of unknown modules: the bare return addresses, as hex strings.
    assert_eq!(
        peaks[0]["sites"][0]["frames"][0],
        json!({"address": "0x1003", "module": null, "function": null, "file": null,
               "line": null, "inlined": false, "python": false})
    );

    let all = report("peak", &trace, &["--top", "0"]);
    assert_eq!(all["peaks"][0]["sites"].as_array().map(Vec::len), Some(3));

    let s = report("summary", &trace, &[]);
    assert_eq!(s["totals"]["live_bytes_at_end"], 151 * MIB);

    let t = text("peak", &trace, &["--frames", "1"]);
    assert!(
        t.contains("device 0 device memory: peak 650.0 MiB (681574400 B) at 3.000 s"),
        "{t}"
    );
    assert!(
        t.contains("#1 300.0 MiB (314572800 B) in 1 allocation (stack 3)\n      0x1003\n  #2"),
        "{t}"
    );
}

#[test]
fn leaks_are_grouped_by_stack_and_kind() {
    let dir = tmp_dir("leaks-grouped");
    let trace = write_trace(
        &dir,
        &[vec![
            stack(5),
            stack(6),
            alloc(100, 0, DEV, 0x10, 1000, 5),
            alloc(200, 1, DEV, 0x20, 3000, 5),
            alloc(300, 0, MemKind::Managed, 0x30, 500, 5),
            alloc(400, 0, DEV, 0x40, 7, 6),
            alloc(500, 1, DEV, 0x50, 2000, 5),
            free(600, 0x40),
            alloc(700, 0, DEV, 0x60, 10, 6),
            end(800, 7),
        ]],
    );
    let l = report("leaks", &trace, &[]);
    assert_eq!(
        (&l["total_bytes"], &l["total_count"]),
        (&json!(6510), &json!(5))
    );
    let g = &l["groups"];
    assert_eq!(g.as_array().map(Vec::len), Some(3));
    // No framework frames in these stacks: each group's site is its innermost frame.
    assert_eq!(g[0]["site"], g[0]["frames"][0]);
    let strip = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().expect("group").remove("frames");
        v.as_object_mut().expect("group").remove("site");
        v
    };
    assert_eq!(
        strip(&g[0]),
        json!({"stack_id": 5, "kind": "device", "devices": [0, 1], "bytes": 6000, "count": 3,
               "freed_at_exit_bytes": 0, "freed_at_exit_count": 0, "before_damage_count": 0,
               "first_time_ns": 100, "last_time_ns": 500})
    );
    assert_eq!(
        strip(&g[1]),
        json!({"stack_id": 5, "kind": "managed", "devices": [0], "bytes": 500, "count": 1,
               "freed_at_exit_bytes": 0, "freed_at_exit_count": 0, "before_damage_count": 0,
               "first_time_ns": 300, "last_time_ns": 300})
    );
    assert_eq!(
        strip(&g[2]),
        json!({"stack_id": 6, "kind": "device", "devices": [0], "bytes": 10, "count": 1,
               "freed_at_exit_bytes": 0, "freed_at_exit_count": 0, "before_damage_count": 0,
               "first_time_ns": 700, "last_time_ns": 700})
    );
    assert_eq!(g[0]["frames"].as_array().map(Vec::len), Some(2));
    let top = report("leaks", &trace, &["--top", "1", "--frames", "1"]);
    assert_eq!(top["groups"].as_array().map(Vec::len), Some(1));
    assert_eq!(top["total_count"], 5);
    assert_eq!(top["groups"][0]["frames"].as_array().map(Vec::len), Some(1));

    let t = text("leaks", &trace, &[]);
    assert!(
        t.contains("6.4 KiB (6510 B) in 5 allocations live at exit"),
        "{t}"
    );
    assert!(!t.contains("did not exit cleanly"), "{t}");
}

#[test]
fn out_of_order_address_reuse_leaves_exactly_the_later_allocation_live() {
    // Thread 1 frees A (t=2); thread 2 then gets the same address as B (t=3), but B's
    // event reaches the trace before A's free.
    let dir = tmp_dir("reuse");
    let trace = write_trace(
        &dir,
        &[vec![
            stack(1),
            stack(2),
            alloc(1, 0, DEV, 0x7000, 64, 1),
            alloc(3, 0, DEV, 0x7000, 96, 2),
            free(2, 0x7000),
            end(4, 3),
        ]],
    );
    let s = report("summary", &trace, &[]);
    assert_eq!(s["rows"][0]["live_allocations_at_end"], 1);
    assert_eq!(s["rows"][0]["live_bytes_at_end"], 96);
    assert_eq!(s["rows"][0]["frees"], 1);
    assert_eq!(s["unknown_frees"], 0);
    let l = report("leaks", &trace, &[]);
    assert_eq!(l["groups"][0]["stack_id"], 2);
    assert_eq!(l["groups"][0]["first_time_ns"], 3);
    assert_eq!(l["total_count"], 1);
}

#[test]
fn unknown_and_failed_frees_and_failed_allocations_are_counted() {
    let dir = tmp_dir("frees");
    let failed = Record::AllocFailed(AllocFailed {
        time_ns: 5,
        tid: 7,
        api: 0,
        kind: DEV,
        device: 1,
        size: 80 << 30,
        stream: 0,
        pool: 0,
        stack: 0,
        result: 2,
        mem_free: 0,
        mem_total: 0,
    });
    let trace = write_trace(
        &dir,
        &[vec![
            alloc(1, 0, DEV, 0x100, 10, 0),
            free_with(2, 0x100, 1), // failed: the allocation stays live
            free(3, 0xdead),        // never allocated
            free(4, 0x100),
            free(5, 0x100), // double free
            free(6, 0),     // cudaFree(0): ignored
            failed,
            end(7, 7),
        ]],
    );
    let s = report("summary", &trace, &[]);
    assert_eq!(s["unknown_frees"], 2);
    assert_eq!(s["failed_frees"], 1);
    assert_eq!(s["failed_allocations"], 1);
    assert_eq!(s["rows"][0]["frees"], 1);
    assert_eq!(s["rows"][0]["live_allocations_at_end"], 0);
    assert_eq!(s["rows"][1]["device"], 1);
    assert_eq!(s["rows"][1]["allocations"], 0);
    assert_eq!(s["rows"][1]["failed_allocations"], 1);
    assert_eq!(s["totals"]["failed_allocations"], 1);
}

/// Asserts the command failed with `code` and exactly one stderr line starting `prefix`.
fn assert_fails(args: &[&str], code: i32, prefix: &str) -> String {
    let out = gpumemprof(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stderr: {:?}",
        stderr_lines(&out)
    );
    assert!(out.stdout.is_empty());
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with(prefix), "{lines:?}");
    lines[0].clone()
}

#[test]
fn invalid_input_exits_5_with_one_line() {
    let dir = tmp_dir("invalid");
    let random = dir.join("random.bin");
    // Deterministic pseudo-random bytes (xorshift): no extra crate needed.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&random, bytes).expect("write");
    let r = random.to_str().expect("utf-8");
    assert_fails(&["summary", r], 5, &format!("gpumemprof: error: {r}: "));

    let empty = dir.join("empty.gmt");
    std::fs::write(&empty, b"").expect("write");
    let e = empty.to_str().expect("utf-8");
    assert_fails(
        &["leaks", e, "--json"],
        5,
        &format!("gpumemprof: error: {e}: "),
    );

    let newer = dir.join("newer.gmt");
    let hdr = serde_json::to_vec(&header()).expect("json");
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    b.extend_from_slice(&(hdr.len() as u32).to_le_bytes());
    b.extend_from_slice(&hdr);
    std::fs::write(&newer, b).expect("write");
    let n = newer.to_str().expect("utf-8");
    let line = assert_fails(&["peak", n], 5, &format!("gpumemprof: error: {n}: "));
    assert!(line.contains("newer"), "{line}");

    // A flipped byte inside a complete block: the checksum catches it, the block is
    // skipped (its 50 events counted by the End record after it), the report comes from
    // the rest. With every block damaged nothing can be read: exit 5.
    let (mut b, ends) = trace_bytes(&[vec![alloc(1, 0, DEV, 0x10, 10, 0); 50], vec![end(2, 50)]]);
    b[ends[0] - 10] ^= 0xff;
    let corrupt = dir.join("corrupt.gmt");
    std::fs::write(&corrupt, &b).expect("write");
    let c = corrupt.to_str().expect("utf-8");
    let out = gpumemprof(&["summary", c, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("skipped 1 damaged block"), "{lines:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (&v["trace"]["damaged_blocks"], &v["trace"]["damaged_events"]),
        (&json!(1), &json!(50))
    );
    assert_eq!(v["totals"]["allocations"], 0);
    b[ends[1] - 3] ^= 0xff;
    std::fs::write(&corrupt, &b).expect("write");
    assert_fails(&["summary", c], 5, &format!("gpumemprof: error: {c}: "));
}

#[test]
fn missing_file_exits_1_and_bad_usage_exits_2() {
    let dir = tmp_dir("missing");
    let missing = dir.join("nope.gmt");
    let m = missing.to_str().expect("utf-8");
    assert_fails(&["summary", m], 1, &format!("gpumemprof: error: {m}: "));
    let d = dir.to_str().expect("utf-8");
    // A directory is read as the traces in it (analyzer/tests/ranks.rs); this one has none.
    assert_fails(&["summary", d], 5, &format!("gpumemprof: error: {d}: "));

    assert_eq!(gpumemprof(&[]).status.code(), Some(2));
    assert_eq!(gpumemprof(&["summary"]).status.code(), Some(2));
    assert_eq!(gpumemprof(&["frobnicate", m]).status.code(), Some(2));
    assert_eq!(
        gpumemprof(&["peak", m, "--top", "x"]).status.code(),
        Some(2)
    );
    assert_eq!(gpumemprof(&["--help"]).status.code(), Some(0));
}

#[test]
fn truncated_trace_reports_its_complete_blocks_with_one_warning() {
    let dir = tmp_dir("truncated");
    let (bytes, ends) = trace_bytes(&[
        vec![
            alloc(1, 0, DEV, 0x10, 100, 0),
            alloc(2, 0, DEV, 0x20, 200, 0),
        ],
        vec![
            free(3, 0x10),
            Record::Stats(Stats {
                time_ns: 4,
                events: 3,
                queue_waits: 0,
                dropped: 0,
            }),
        ],
        vec![alloc(5, 0, DEV, 0x30, 400, 0), end(6, 4)],
    ]);
    // Killed while writing the third block.
    let path = dir.join("killed.gmt");
    std::fs::write(&path, &bytes[..ends[2] - 5]).expect("write");
    let p = path.to_str().expect("utf-8");
    let out = gpumemprof(&["summary", p, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stderr_lines(&out),
        vec![format!(
            "gpumemprof: warning: {p}: the trace ends inside a block (the process was \
             probably killed); reporting the 2 complete blocks"
        )]
    );
    let s: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(s["schema_version"], 1);
    assert_eq!(s["trace"]["complete"], false);
    assert_eq!(s["trace"]["truncated"], true);
    assert_eq!(s["trace"]["events"], 3);
    assert_eq!(s["trace"]["duration_ns"], 4);
    assert_eq!(s["totals"]["allocations"], 2);
    assert_eq!(s["totals"]["live_bytes_at_end"], 200);
    assert_eq!(s["totals"]["peak_bytes"], 300);

    let t = String::from_utf8(gpumemprof(&["leaks", p]).stdout).expect("utf-8");
    assert!(t.contains("did not exit cleanly"), "{t}");
    assert!(t.contains("live when the trace stopped"), "{t}");
}

#[test]
fn every_report_has_schema_version_1_and_the_trace_object() {
    let dir = tmp_dir("schema");
    let trace = write_trace(&dir, &[vec![alloc(1, 0, DEV, 0x10, 1, 0)]]);
    for cmd in ["summary", "peak", "leaks"] {
        let v = report(cmd, &trace, &[]);
        let keys: Vec<&str> = v["trace"]
            .as_object()
            .expect("trace object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = vec![
            "path",
            "pid",
            "argv",
            "complete",
            "ending",
            "truncated",
            "damaged_blocks",
            "damaged_bytes",
            "damaged_events",
            "events",
            "queue_waits",
            "dropped",
            "duration_ns",
            "stopped",
        ];
        let mut got = keys.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "{cmd}");
        assert_eq!(v["trace"]["complete"], false, "{cmd}");
        // A trace without an Ending record (an older shim, a process still running).
        assert_eq!(v["trace"]["ending"], Value::Null, "{cmd}");
    }
}

mod symbols {
    //! Symbolization against a real ELF with DWARF, compiled here with the system C compiler.

    use super::*;
    use object::{Object, ObjectSymbol};

    /// Line 7 is `make_buffers`'s opening line; `fill` is always inlined into it.
    const PROGRAM: &str = "#include <stdlib.h>
static inline __attribute__((always_inline)) void *fill(size_t n) {
    void *p = malloc(n);
    if (p) ((char *)p)[0] = 1;
    return p;
}
void *make_buffers(size_t n) {
    void *a = fill(n);
    void *b = fill(n * 2);
    free(b);
    return a;
}
int main(void) { return make_buffers(16) == 0; }
";
    /// Where the test pretends the program was loaded (a PIE's bias).
    const BIAS: u64 = 0x5555_0000_0000;

    struct Elf {
        path: PathBuf,
        build_id: Vec<u8>,
        /// Address and size of `make_buffers` in the file.
        func: u64,
        size: u64,
    }

    /// Compiles `source` (saved as `name`) with `compiler` into `dir/prog`, with DWARF
    /// and a build-id; `symbol` is the (mangled) function the test's addresses fall in.
    fn build(dir: &Path, compiler: &str, name: &str, source: &str, symbol: &str) -> Elf {
        let src = dir.join(name);
        let path = dir.join("prog");
        std::fs::write(&src, source).expect("write source");
        let status = Command::new(compiler)
            .args(["-g", "-O0", "-Wl,--build-id", "-o"])
            .arg(&path)
            .arg(&src)
            .status()
            .expect("run the system C/C++ compiler (needed for this test)");
        assert!(status.success());
        let data = std::fs::read(&path).expect("read ELF");
        let file = object::File::parse(&*data).expect("parse ELF");
        let build_id = file.build_id().expect("notes").expect("build-id").to_vec();
        let sym = file
            .symbols()
            .find(|s| s.name() == Ok(symbol))
            .expect("the function's symbol");
        Elf {
            path,
            build_id,
            func: sym.address(),
            size: sym.size(),
        }
    }

    fn compile(dir: &Path) -> Elf {
        build(dir, "cc", "prog.c", PROGRAM, "make_buffers")
    }

    fn module(elf: &Elf, time_ns: u64, build_id: Vec<u8>) -> Record {
        Record::Module(Module {
            time_ns,
            bias: BIAS,
            start: BIAS,
            end: BIAS + 0x10_0000,
            path: elf.path.to_str().expect("utf-8").to_owned(),
            build_id,
        })
    }

    /// A return address whose call instruction starts at `offset` into `make_buffers`.
    fn ret(elf: &Elf, offset: u64) -> u64 {
        BIAS + elf.func + offset + 1
    }

    #[test]
    fn frames_resolve_to_function_file_line_and_inlined_calls() {
        let dir = tmp_dir("symbols");
        let elf = compile(&dir);
        let every: Vec<u64> = (0..elf.size).map(|off| ret(&elf, off)).collect();
        let trace = write_trace(
            &dir,
            &[vec![
                module(&elf, 0, elf.build_id.clone()),
                Record::Stack {
                    id: 1,
                    frames: vec![ret(&elf, 0), 0x10],
                },
                Record::Stack {
                    id: 2,
                    frames: every,
                },
                alloc(1, 0, DEV, 0x100, 64, 1),
                alloc(2, 0, DEV, 0x200, 32, 2),
                end(3, 2),
            ]],
        );
        let l = report("leaks", &trace, &["--frames", "0"]);
        let f = &l["groups"][0]["frames"];
        assert_eq!(l["groups"][0]["stack_id"], 1);
        assert_eq!(f[0]["address"], format!("{:#x}", ret(&elf, 0)));
        assert_eq!(f[0]["module"], elf.path.to_str().expect("utf-8"));
        assert_eq!(f[0]["function"], "make_buffers");
        assert_eq!(f[0]["file"], dir.join("prog.c").to_str().expect("utf-8"));
        assert_eq!(f[0]["line"], 7);
        assert_eq!(f[0]["inlined"], false);
        // An address outside every module: bare.
        assert_eq!(f[1]["module"], Value::Null);
        assert_eq!(f[1]["address"], "0x10");

        // Somewhere in make_buffers, fill() was inlined: that address gives two frames,
        // `fill` (inlined) then `make_buffers`.
        let all = l["groups"][1]["frames"].as_array().expect("frames");
        let pair = all
            .windows(2)
            .find(|w| w[0]["function"] == "fill" && w[0]["inlined"] == true)
            .expect("an inlined frame of fill");
        assert_eq!(pair[1]["function"], "make_buffers");
        assert_eq!(pair[1]["inlined"], false);
        assert_eq!(pair[0]["address"], pair[1]["address"]);
        assert!(all
            .iter()
            .all(|f| f["function"] == "fill" || f["function"] == "make_buffers"));

        let t = text("leaks", &trace, &[]);
        let want = format!("make_buffers at {}:7", dir.join("prog.c").display());
        assert!(t.contains(&want), "{t}");
        let out = gpumemprof(&["peak", trace.to_str().expect("utf-8")]);
        assert!(out.stderr.is_empty(), "{:?}", stderr_lines(&out));
    }

    #[test]
    fn a_rebuilt_or_missing_file_gives_module_offsets_and_one_warning() {
        let dir = tmp_dir("symbols-mismatch");
        let elf = compile(&dir);
        let gone = Record::Module(Module {
            time_ns: 0,
            bias: 0x7000_0000_0000,
            start: 0x7000_0000_0000,
            end: 0x7000_0001_0000,
            path: "/nonexistent/libgone.so".into(),
            build_id: vec![9, 9],
        });
        let trace = write_trace(
            &dir,
            &[vec![
                module(&elf, 0, vec![1, 2, 3, 4]),
                gone,
                Record::Stack {
                    id: 1,
                    frames: vec![ret(&elf, 0), ret(&elf, 1), 0x7000_0000_1235],
                },
                alloc(1, 0, DEV, 0x100, 64, 1),
            ]],
        );
        let p = trace.to_str().expect("utf-8");
        let out = gpumemprof(&["leaks", p, "--json"]);
        assert_eq!(out.status.code(), Some(0));
        let warnings = stderr_lines(&out);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with(&format!(
            "gpumemprof: warning: {}: its build-id differs",
            elf.path.display()
        )));
        let l: Value = serde_json::from_slice(&out.stdout).expect("json");
        let f = &l["groups"][0]["frames"];
        assert_eq!(f[0]["function"], Value::Null);
        assert_eq!(f[0]["module"], elf.path.to_str().expect("utf-8"));
        assert_eq!(f[2]["module"], "/nonexistent/libgone.so");
        assert_eq!(f[2]["function"], Value::Null);

        let t = text("leaks", &trace, &[]);
        assert!(t.contains(&format!("prog+{:#x}", elf.func + 1)), "{t}");
        assert!(t.contains("libgone.so+0x1235"), "{t}");
    }

    #[test]
    fn a_reused_address_range_picks_the_module_loaded_before_the_stack_was_used() {
        let dir = tmp_dir("symbols-reload");
        let elf = compile(&dir);
        let old = Record::Module(Module {
            time_ns: 0,
            bias: BIAS,
            start: BIAS,
            end: BIAS + 0x10_0000,
            path: "/nonexistent/old.so".into(),
            build_id: Vec::new(),
        });
        let frames = vec![ret(&elf, 0)];
        let trace = write_trace(
            &dir,
            &[vec![
                old,
                Record::Stack {
                    id: 1,
                    frames: frames.clone(),
                },
                alloc(50, 0, DEV, 0x100, 64, 1),
                module(&elf, 100, elf.build_id.clone()),
                Record::Stack { id: 2, frames },
                alloc(200, 0, DEV, 0x200, 32, 2),
            ]],
        );
        let l = report("leaks", &trace, &[]);
        let by_stack = |id: u64| {
            l["groups"]
                .as_array()
                .expect("groups")
                .iter()
                .find(|g| g["stack_id"] == id)
                .map(|g| g["frames"][0].clone())
                .expect("group")
        };
        assert_eq!(by_stack(1)["module"], "/nonexistent/old.so");
        assert_eq!(by_stack(2)["function"], "make_buffers");
    }

    #[test]
    fn cpp_function_names_are_demangled() {
        let dir = tmp_dir("symbols-cpp");
        let source = "namespace model {
void *alloc_weights(int layers) { return new char[layers]; }
}
int main() { return model::alloc_weights(3) == nullptr; }
";
        let elf = build(
            &dir,
            "c++",
            "model.cpp",
            source,
            "_ZN5model13alloc_weightsEi",
        );
        let trace = write_trace(
            &dir,
            &[vec![
                module(&elf, 0, elf.build_id.clone()),
                Record::Stack {
                    id: 1,
                    frames: vec![ret(&elf, 4)],
                },
                alloc(1, 0, DEV, 0x100, 64, 1),
            ]],
        );
        // Shown without the parameter list; `--full-names` keeps it.
        let l = report("leaks", &trace, &[]);
        let f = &l["groups"][0]["frames"][0];
        assert_eq!(f["function"], "model::alloc_weights");
        let full = report("leaks", &trace, &["--full-names"]);
        assert_eq!(
            full["groups"][0]["frames"][0]["function"],
            "model::alloc_weights(int)"
        );
        assert_eq!(f["file"], dir.join("model.cpp").to_str().expect("utf-8"));
        assert_eq!(f["line"], 2);
    }
}

/// `cat a.trace b.trace > both.trace`: the first trace is reported, with one warning that
/// says where the second starts; the second's allocations are not the first process's.
#[test]
fn two_concatenated_traces_are_not_read_as_one_process() {
    let dir = tmp_dir("concatenated");
    let (one, _) = trace_bytes(&[vec![alloc(1, 0, DEV, 0x10, 100, 0), end(2, 1)]]);
    let (two, _) = trace_bytes(&[vec![alloc(1, 0, DEV, 0x20, 300, 0), end(2, 1)]]);
    let path = dir.join("both.gmt");
    std::fs::write(&path, [&one[..], &two[..]].concat()).expect("write");
    let p = path.to_str().expect("utf-8");
    let out = gpumemprof(&["summary", p, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stderr_lines(&out),
        vec![format!(
            "gpumemprof: warning: {p}: another trace starts at byte {} (two traces \
             concatenated?); only the first is read: split the file there to read the second",
            one.len()
        )]
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (
            &v["totals"]["allocations"],
            &v["totals"]["live_bytes_at_end"]
        ),
        (&json!(1), &json!(100))
    );
}

/// The help says what each command takes: the flags about how stacks read only where
/// stacks are shown, parquet among the exports, and a path (a directory for parquet) for
/// `export -o`.
#[test]
fn help_shows_the_stack_flags_only_where_stacks_are_shown() {
    let help = |args: &[&str]| {
        let out = gpumemprof(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {:?}",
            stderr_lines(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for cmd in ["run", "timeline", "info", "summary", "track"] {
        let h = help(&[cmd, "--help"]);
        assert!(
            !h.contains("--native") && !h.contains("--full-names"),
            "{cmd}: {h}"
        );
    }
    for cmd in [
        "peak",
        "leaks",
        "oom",
        "flamegraph",
        "report",
        "export",
        "analyze",
    ] {
        let h = help(&[cmd, "--help"]);
        assert!(
            h.contains("--native") && h.contains("--full-names"),
            "{cmd}: {h}"
        );
    }
    let top = help(&["--help"]);
    let export = top
        .lines()
        .find(|l| l.trim_start().starts_with("export"))
        .unwrap();
    assert!(
        export.contains("parquet (tables for DuckDB, Spark, Polars)"),
        "{export}"
    );
    let h = help(&["export", "--help"]);
    assert!(h.contains("-o, --output <PATH>"), "{h}");
    assert!(h.contains("or for parquet a directory"), "{h}");
}

/// Outputs are readable by the user only (as the trace: they carry its command line and
/// paths), and never written through a symbolic link, `-f` or not: a link planted where a
/// report goes would have it overwrite what the link points at.
#[test]
fn outputs_are_private_and_never_written_through_a_symbolic_link() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp_dir("outputs");
    let trace = write_trace(
        &dir,
        &[vec![
            alloc(100, 0, MemKind::Device, 0x1000, 4096, 0),
            end(200, 1),
        ]],
    );
    let t = trace.to_str().unwrap();
    let svg = dir.join("t.svg");
    let out = gpumemprof(&["timeline", t, "-o", svg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{:?}", stderr_lines(&out));
    let mode = std::fs::metadata(&svg).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let target = dir.join("not-a-report.txt");
    std::fs::write(&target, "untouched\n").unwrap();
    let link = dir.join("link.svg");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let l = link.to_str().unwrap();
    for force in [&["-f"][..], &[]] {
        let mut args = vec!["timeline", t, "-o", l];
        args.extend(force);
        let out = gpumemprof(&args);
        assert_eq!(out.status.code(), Some(1), "{force:?}");
        let expected = if force.is_empty() {
            format!("gpumemprof: error: {l}: already exists; pass -f to overwrite it, or choose another path")
        } else {
            format!(
                "gpumemprof: error: {l}: is a symbolic link, which gpumemprof never writes \
                 through: remove it or choose another path"
            )
        };
        assert_eq!(stderr_lines(&out), vec![expected]);
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched\n");
}
