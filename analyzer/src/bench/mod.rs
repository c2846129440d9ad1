//! The analyzer benchmark (`cargo bench -p gpumemprof-analyzer --bench replay`): a
//! synthetic training-loop trace (`synth`), then the time of each stage of reading it on
//! one core — decompressing only, decoding only, the replay pass with the summary, and the
//! real CLI's `summary`, `peak` and `leaks` as child processes — in events/s and MB/s of
//! trace, with the peak resident memory of each. Rates are per second of CPU time (user + system):
//! on a shared machine, wall time measures the neighbours too. It prints numbers and
//! asserts nothing.

pub mod browse;
pub mod synth;

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use gpumemprof_format::{open_path, ReadError, Record};

use crate::replay;
use crate::report::{summary, TraceInfo};
pub use synth::SynthInfo;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Target size of the synthetic trace on disk.
    pub size: u64,
    /// Runs of each stage; the median is shown.
    pub runs: usize,
    /// Where the trace is written (and kept for the next run).
    pub dir: PathBuf,
    /// The `gpumemprof` binary to time, if any.
    pub cli: Option<PathBuf>,
}

/// The default trace: large enough for steady rates, quick to generate (about 15 s).
pub const DEFAULT_SIZE: u64 = 200_000_000;

/// One stage's median CPU time (with the wall time of that run) and its peak resident memory.
#[derive(Debug, Clone, Copy)]
pub struct Stage {
    pub cpu_secs: f64,
    pub wall_secs: f64,
    pub max_rss_kib: Option<u64>,
}

fn secs(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// User + system CPU seconds of `usage`.
fn cpu(usage: &libc::rusage) -> f64 {
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// This process's CPU seconds so far.
fn self_cpu() -> f64 {
    // SAFETY: an all-zero rusage is valid and getrusage only writes it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    cpu(&usage)
}

/// The trace of `size` bytes under `dir`, generated unless a run of the same generator
/// left it there (a sidecar JSON file records what it holds).
pub fn trace(dir: &Path, size: u64) -> io::Result<(PathBuf, SynthInfo)> {
    fs::create_dir_all(dir)?;
    let path = dir.join(format!("replay-{size}.trace"));
    let meta = dir.join(format!("replay-{size}.json"));
    if let Some(info) = cached(&path, &meta) {
        return Ok((path, info));
    }
    let info = synth::generate(&path, size)?;
    let json = serde_json::json!({
        "generator": synth::GENERATOR_VERSION,
        "bytes": info.bytes, "events": info.events, "records": info.records,
        "stacks": info.stacks, "steps": info.steps,
    });
    fs::write(&meta, json.to_string())?;
    Ok((path, info))
}

fn cached(path: &Path, meta: &Path) -> Option<SynthInfo> {
    let json: serde_json::Value = serde_json::from_slice(&fs::read(meta).ok()?).ok()?;
    let field = |k: &str| json.get(k).and_then(|v| v.as_u64());
    let info = SynthInfo {
        bytes: field("bytes")?,
        events: field("events")?,
        records: field("records")?,
        stacks: field("stacks")?,
        steps: field("steps")?,
    };
    let same = field("generator") == Some(synth::GENERATOR_VERSION)
        && fs::metadata(path).ok()?.len() == info.bytes;
    same.then_some(info)
}

/// Decompresses every block and decodes nothing: the floor under any reader. Returns the
/// decompressed bytes.
pub fn decompress_only(path: &Path) -> io::Result<u64> {
    let mut file = io::BufReader::with_capacity(1 << 16, fs::File::open(path)?);
    let mut pre = [0u8; 16];
    file.read_exact(&mut pre)?;
    let header_len = u32::from_le_bytes([pre[12], pre[13], pre[14], pre[15]]);
    io::copy(&mut (&mut file).take(header_len.into()), &mut io::sink())?;
    let mut dctx = zstd::bulk::Decompressor::new()?;
    let (mut comp, mut raw, mut total) = (Vec::new(), Vec::new(), 0);
    let mut len = [0u8; 4];
    while file.read_exact(&mut len).is_ok() {
        let len = u32::from_le_bytes(len) as usize;
        if len > gpumemprof_format::MAX_BLOCK_COMPRESSED {
            return Err(io::Error::other("not a trace block"));
        }
        comp.resize(len, 0);
        file.read_exact(&mut comp)?;
        let size = zstd::zstd_safe::get_frame_content_size(&comp)
            .ok()
            .flatten()
            .filter(|&n| n <= gpumemprof_format::MAX_BLOCK_RAW as u64)
            .ok_or_else(|| io::Error::other("not a trace block"))?;
        raw.resize(size as usize, 0);
        total += dctx.decompress_to_buffer(&comp, &mut raw[..])? as u64;
    }
    Ok(total)
}

/// Reads every record and nothing else; returns the events (alloc, free, failed) seen.
pub fn decode(path: &Path) -> Result<u64, ReadError> {
    let mut reader = open_path(path)?;
    let mut events = 0;
    while let Some(record) = reader.next_salvaged()? {
        if matches!(
            record,
            Record::Alloc(_) | Record::Free(_) | Record::AllocFailed(_)
        ) {
            events += 1;
        }
    }
    Ok(events)
}

/// The replay pass and the summary report, as `gpumemprof summary` computes them.
pub fn replay_summary(path: &Path) -> Result<u64, ReadError> {
    let loaded = replay::replay(open_path(path)?)?;
    let report = summary::build(TraceInfo::new(path, &loaded), &loaded.replayed);
    Ok(report.totals.allocations)
}

/// Runs `bin args` with its output discarded; its CPU and wall time and peak resident memory.
pub fn run_child(bin: &Path, args: &[&str]) -> io::Result<Stage> {
    let start = Instant::now();
    let child = Command::new(bin).args(args).stdout(Stdio::null()).spawn()?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 on our own child's pid reaps it once
    // (std's `Child` is not waited on afterwards).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: both out-pointers are valid for the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall_secs = start.elapsed().as_secs_f64();
    if r != pid {
        return Err(io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(io::Error::other(format!(
            "{} {args:?} failed (wait status {status})",
            bin.display()
        )));
    }
    Ok(Stage {
        cpu_secs: cpu(&usage),
        wall_secs,
        max_rss_kib: Some(usage.ru_maxrss as u64), // KiB on Linux
    })
}

/// Keeps this process and its children on the CPU it runs on now: every rate is one core's.
pub fn pin_to_one_core() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions; the set is initialised before use.
    unsafe {
        let cpu = usize::try_from(libc::sched_getcpu()).ok()?;
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        (libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0)
            .then_some(cpu)
    }
}

/// A `/proc/self/status` field in KiB (`VmHWM:` peak resident memory, `VmRSS:` now).
fn status_kib(key: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn vm_hwm_kib() -> Option<u64> {
    status_kib("VmHWM:")
}

/// The memory bound of the README, measured: replays `stacks` stack definitions of
/// `frames` frames, then `live` allocations never freed, and prints the resident bytes
/// per stack and per live allocation, while replaying and with the result assembled.
pub fn memory(live: u64, stacks: u64, frames: u64, out: &mut dyn Write) -> io::Result<()> {
    use gpumemprof_format::{Alloc, MemKind};
    let rss = || status_kib("VmRSS:").map_or(0.0, |k| k as f64 * 1024.0);
    let stacks = stacks.max(1);
    let base = rss();
    let mut r = replay::Replay::new();
    for id in 1..=stacks {
        let frames = (0..frames).map(|f| 0x7f00_0000_0000 + id * 4096 + f * 64);
        r.record(Record::Stack {
            id,
            frames: frames.collect(),
        });
    }
    let with_stacks = rss();
    for i in 0..live {
        r.record(Record::Alloc(Alloc {
            time_ns: i,
            tid: 1,
            api: 1,
            kind: MemKind::Device,
            device: 0,
            address: 0x7e00_0000_0000 + i * 512,
            size: 512,
            stream: 0,
            pool: 0,
            stack: 1 + i % stacks,
        }));
    }
    let replaying = rss();
    reset_hwm();
    let result = r.finish();
    let peak = vm_hwm_kib().map_or(0.0, |k| k as f64 * 1024.0);
    let n = live.max(1) as f64;
    writeln!(
        out,
        "gpumemprof analyzer memory: {stacks} stacks of {frames} frames: {:.0} bytes per stack; \
         {live} live allocations: {:.0} bytes each while replaying, {:.0} with the result ({} live)",
        (with_stacks - base) / stacks as f64,
        (replaying - with_stacks) / n,
        (peak - with_stacks) / n,
        result.live.len()
    )
}

/// Resets VmHWM to the current resident size (Linux 4.0+), so it measures what follows.
fn reset_hwm() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The run of median CPU time among `runs` calls of `f` in this process, with the peak
/// resident memory over all of them.
fn in_process<T, E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    runs: usize,
    mut f: impl FnMut() -> Result<T, E>,
) -> io::Result<Stage> {
    let reset = reset_hwm();
    let mut all = Vec::new();
    for _ in 0..runs.max(1) {
        let (t, c) = (Instant::now(), self_cpu());
        f().map_err(io::Error::other)?;
        all.push(Stage {
            cpu_secs: self_cpu() - c,
            wall_secs: t.elapsed().as_secs_f64(),
            max_rss_kib: None,
        });
    }
    let rss = if reset { vm_hwm_kib() } else { None };
    Ok(Stage {
        max_rss_kib: rss,
        ..median(all)
    })
}

fn median(mut v: Vec<Stage>) -> Stage {
    v.sort_by(|a, b| a.cpu_secs.total_cmp(&b.cpu_secs));
    v[v.len() / 2]
}

/// The run of median CPU time among `runs` runs of the CLI, with the largest peak
/// resident memory among them.
fn cli_stage(bin: &Path, args: &[&str], runs: usize) -> io::Result<Stage> {
    let mut all = Vec::new();
    for _ in 0..runs.max(1) {
        all.push(run_child(bin, args)?);
    }
    let rss = all.iter().filter_map(|s| s.max_rss_kib).max();
    Ok(Stage {
        max_rss_kib: rss,
        ..median(all)
    })
}

fn line(out: &mut dyn Write, what: &str, s: Stage, info: &SynthInfo) -> io::Result<()> {
    let rss = s
        .max_rss_kib
        .map_or_else(|| "?".into(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
    writeln!(
        out,
        "  {what:<28} {:6.2} s cpu ({:6.2} s wall)  {:6.2} M events/s  {:6.1} MB/s  peak RSS {rss}",
        s.cpu_secs,
        s.wall_secs,
        info.events as f64 / s.cpu_secs / 1e6,
        info.bytes as f64 / s.cpu_secs / 1e6,
    )
}

/// Generates (or reuses) the trace and prints one line per stage.
pub fn run(opts: &Options, out: &mut dyn Write) -> io::Result<()> {
    let cpu = pin_to_one_core();
    let t = Instant::now();
    let (path, info) = trace(&opts.dir, opts.size)?;
    let made = t.elapsed().as_secs_f64();
    writeln!(
        out,
        "gpumemprof analyzer benchmark: {} ({:.1} MB, {} events, {} records, {} stacks, {} steps; \
         ready in {made:.1} s)",
        path.display(),
        info.bytes as f64 / 1e6,
        info.events,
        info.records,
        info.stacks,
        info.steps
    )?;
    writeln!(
        out,
        "  pinned to CPU {}, median of {} runs; rates per CPU second",
        cpu.map_or_else(|| "? (pinning failed)".into(), |c| c.to_string()),
        opts.runs
    )?;
    let unpacked = in_process(opts.runs, || decompress_only(&path))?;
    line(out, "zstd only (no decoding)", unpacked, &info)?;
    let decoded = in_process(opts.runs, || decode(&path))?;
    line(out, "decode (reader only)", decoded, &info)?;
    let replayed = in_process(opts.runs, || replay_summary(&path))?;
    line(out, "replay + summary (library)", replayed, &info)?;
    if let Some(bin) = &opts.cli {
        let trace = path.to_string_lossy();
        for cmd in ["summary", "peak", "leaks"] {
            let s = cli_stage(bin, &["-q", cmd, "--json", &trace], opts.runs)?;
            line(out, &format!("gpumemprof {cmd} (CLI)"), s, &info)?;
        }
    }
    Ok(())
}
