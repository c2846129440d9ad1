//! Running a program under the shim and reading what it wrote: the trace decoded with
//! the format crate, and the analyzer's JSON reports.

use crate::{analyzer_path, program_command, shim_path};
use gpumemprof_format::{open_path, Record};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty scratch folder for one test (under the target dir, removed first).
pub fn scratch(test: &str) -> PathBuf {
    let dir = crate::target_dir().join("e2e-scratch").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// One profiled run: the program's output and where its trace went.
pub struct Run {
    pub output: Output,
    pub trace: PathBuf,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// Panics with the program's stderr unless it exited 0.
    pub fn assert_ok(&self) {
        assert_eq!(self.output.status.code(), Some(0), "{}", self.stderr());
    }
}

/// Runs a built C program with the shim preloaded, writing `dir/<name>.trace`.
/// `env` adds or overrides variables (simulator capacity, GPUMEMPROF_*).
pub fn run_profiled(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let trace = dir.join(format!("{name}.trace"));
    let mut cmd = program_command(name);
    cmd.args(args)
        .env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("run the program");
    Run { output, trace }
}

/// Runs `cmd` (`what` names it in the message) and returns its output; panics with its
/// stderr unless it exited 0.
pub fn succeeded(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `cmd` under the shim, its trace written to `trace`, without NVML sampling (so a test's
/// numbers are the program's own).
pub fn preload<'a>(cmd: &'a mut Command, trace: &Path) -> &'a mut Command {
    cmd.env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", trace)
        .env("GPUMEMPROF_NVML_MS", "0")
}

/// Runs a built C program without the shim.
pub fn run_plain(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = program_command(name);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the program")
}

/// Every record of a trace (panics on a read error: tests expect valid traces).
pub fn decode(trace: &Path) -> (serde_json::Value, Vec<Record>) {
    let mut r = open_path(trace).unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    let header = r.header().clone();
    let mut records = Vec::new();
    while let Some(rec) = r
        .next_record()
        .unwrap_or_else(|e| panic!("{}: {e}", trace.display()))
    {
        records.push(rec);
    }
    (header, records)
}

/// The API id the header assigns to `name`.
pub fn api_id(header: &serde_json::Value, name: &str) -> u16 {
    header["apis"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == name))
        .and_then(|x| x["id"].as_u64())
        .unwrap_or_else(|| panic!("no API {name} in the header")) as u16
}

/// The analyzer, ready to run.
pub fn analyzer() -> Command {
    Command::new(analyzer_path())
}

/// `gpumemprof <cmd> <trace> --json`, parsed; panics unless it exits 0.
pub fn report(cmd: &str, trace: &Path, extra: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = std::iter::once("--json")
        .chain(extra.iter().copied())
        .collect();
    serde_json::from_str(&report_text(cmd, trace, &args)).expect("gpumemprof printed JSON")
}

/// `gpumemprof <cmd> <trace> <extra>` as text; panics unless it exits 0.
pub fn report_text(cmd: &str, trace: &Path, extra: &[&str]) -> String {
    let out = analyzer()
        .arg(cmd)
        .arg(trace)
        .args(extra)
        .output()
        .expect("run gpumemprof");
    assert!(
        out.status.success(),
        "gpumemprof {cmd} failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The stderr lines the shim itself printed.
pub fn shim_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("gpumemprof:"))
        .collect()
}

/// Stderr without the shim's own lines.
pub fn without_shim_lines(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with("gpumemprof:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Every record of a trace that may end inside a block (its process was killed while
/// writing), and whether it did: like [`decode`], which reads such a trace up to its last
/// complete block without saying so. Panics on any other read error.
pub fn decode_cut(trace: &Path) -> (serde_json::Value, Vec<Record>, bool) {
    let mut r = open_path(trace).unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    let header = r.header().clone();
    let mut records = Vec::new();
    while let Some(rec) = r
        .next_record()
        .unwrap_or_else(|e| panic!("{}: {e}", trace.display()))
    {
        records.push(rec);
    }
    (header, records, r.truncated())
}

/// The `*.trace` files of `dir`, sorted.
pub fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut traces: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("read a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .collect();
    traces.sort();
    traces
}

/// Runs `tests/programs/rank_leak.c` as a three-rank job (RANK=0, 1, 2, traces
/// `dir/job.r<rank>.trace`, as torchrun would start it); the traces, by rank.
pub fn rank_job(dir: &Path) -> Vec<PathBuf> {
    (0..3)
        .map(|rank| {
            let out = program_command("rank_leak")
                .env("LD_PRELOAD", shim_path())
                .env("GPUMEMPROF_OUTPUT", dir.join("job.r%r.trace"))
                .env("GPUMEMPROF_NVML_MS", "0")
                .env("RANK", rank.to_string())
                // RANK comes first; these would only be read without it.
                .env_remove("LOCAL_RANK")
                .env_remove("SLURM_PROCID")
                .output()
                .expect("run rank_leak");
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("rank {rank} done\n")
            );
            let trace = dir.join(format!("job.r{rank}.trace"));
            assert!(trace.is_file(), "no {}", trace.display());
            trace
        })
        .collect()
}
