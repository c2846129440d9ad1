//! Following a trace while the shim writes it, for `monitor` and `track`.
//!
//! The shim writes independent blocks, each with one `write(2)`, so a trace is readable at
//! any moment up to its last complete block. `Follower` keeps the replay between reads and
//! continues each read where the last complete block ended (a block caught half written is
//! read again, whole, next time); nothing is read twice. `LiveState` is the observer that
//! keeps what the live views show: live bytes now and at their peak per (device, kind),
//! live bytes per call site, the device's memory size, and threshold alerts.
//!
//! `--pid PID` finds the trace of a running process (see `find_trace`).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use gpumemprof_format::{MemKind, Module, PyCode, Record, Sample, TraceReader, MAGIC};
use serde::Serialize;

use super::common::read_error;
use crate::error::Error;
use crate::observe::{record_time, Observer};
use crate::replay::{LiveChange, Loaded, Pipeline, Replay, Replayed, StackInfo};
use crate::report::TraceInfo;
use crate::symbolize::{Frame, Symbolizer};
use crate::term;

/// Alerts kept with their details; later ones are only counted.
pub const MAX_ALERTS: usize = 1000;
/// Bytes before the header JSON: magic, version, header length (see the format crate).
const PREAMBLE_FIXED: usize = 16;

/// A trace read as it grows.
pub struct Follower {
    path: PathBuf,
    /// The file's preamble and header, put in front of each continued read.
    preamble: Vec<u8>,
    /// File offset of the first block not read yet.
    offset: u64,
    replay: Replay,
    changes: Vec<LiveChange>,
    pub header: serde_json::Value,
    pub blocks: u64,
    /// The last read ended inside a block (being written, or cut short).
    pub truncated: bool,
}

impl Follower {
    /// Reads the trace's preamble and header.
    pub fn open(path: &Path) -> Result<Follower, Error> {
        let file = File::open(path).map_err(|source| Error::Open {
            path: path.to_owned(),
            source,
        })?;
        let mut preamble = Vec::new();
        let mut r = BufReader::new(file);
        r.by_ref()
            .take(PREAMBLE_FIXED as u64)
            .read_to_end(&mut preamble)
            .map_err(|e| read_error(path, e.into()))?;
        if preamble.len() == PREAMBLE_FIXED {
            let len = u32::from_le_bytes([preamble[12], preamble[13], preamble[14], preamble[15]]);
            let len = u64::from(len).min(gpumemprof_format::MAX_HEADER_LEN as u64);
            r.take(len)
                .read_to_end(&mut preamble)
                .map_err(|e| read_error(path, e.into()))?;
        }
        // Validates magic, version and header exactly as a full read would.
        let reader = TraceReader::open(Cursor::new(&preamble)).map_err(|e| read_error(path, e))?;
        Ok(Follower {
            path: path.to_owned(),
            offset: preamble.len() as u64,
            header: reader.header().clone(),
            preamble,
            replay: Replay::new(),
            changes: Vec::new(),
            blocks: 0,
            truncated: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads every complete block added since the last call, showing its records and
    /// changes to `observers`. Returns the number of records read.
    pub fn poll(&mut self, observers: &mut [&mut dyn Observer]) -> Result<u64, Error> {
        let path = self.path.clone();
        let mut file = File::open(&path).map_err(|source| Error::Open {
            path: path.clone(),
            source,
        })?;
        file.seek(SeekFrom::Start(self.offset))
            .map_err(|e| read_error(&path, e.into()))?;
        let chained = Cursor::new(self.preamble.as_slice()).chain(BufReader::new(file));
        let mut reader = TraceReader::open(chained).map_err(|e| read_error(&path, e))?;
        let mut n = 0u64;
        while let Some(record) = reader.next_record().map_err(|e| read_error(&path, e))? {
            for o in observers.iter_mut() {
                o.record(&record);
            }
            let time = record_time(&record).unwrap_or(0);
            self.changes.clear();
            self.replay.record_changes(record, &mut self.changes);
            if !self.changes.is_empty() {
                for o in observers.iter_mut() {
                    o.changes(time, &self.changes);
                }
            }
            n += 1;
            if n & 0xfff == 0 && term::interrupted() {
                return Err(Error::Interrupted);
            }
        }
        self.offset += reader.bytes_read() - self.preamble.len() as u64;
        self.blocks += reader.blocks_read();
        self.truncated = reader.truncated();
        Ok(n)
    }
}

/// `--warning-threshold`, `--critical-threshold` and `--device-memory` of `monitor` and
/// `track`.
#[derive(Debug, clap::Args)]
pub struct ThresholdArgs {
    /// Alert when device memory in use reaches this percentage of the device's memory.
    #[arg(long, value_name = "PERCENT", default_value = "80", value_parser = super::common::percent_arg)]
    pub warning_threshold: f64,
    /// Alert (critical) at this percentage; at least the warning threshold.
    #[arg(long, value_name = "PERCENT", default_value = "95", value_parser = super::common::percent_arg)]
    pub critical_threshold: f64,
    /// The size of each device's memory (e.g. 80GiB), when the trace does not tell it
    /// (no NVML samples) or to check against a smaller budget.
    #[arg(long, value_name = "SIZE", value_parser = super::common::size_arg)]
    pub device_memory: Option<u64>,
}

impl ThresholdArgs {
    /// The live state these settings ask for; a critical threshold below the warning
    /// one is a usage error (exit 2).
    pub fn state(&self) -> LiveState {
        if self.critical_threshold < self.warning_threshold {
            clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--critical-threshold {} is below --warning-threshold {}: give a critical \
                     level at or above the warning level\n",
                    self.critical_threshold, self.warning_threshold
                ),
            )
            .exit();
        }
        LiveState::new(
            Thresholds {
                warning_percent: self.warning_threshold,
                critical_percent: self.critical_threshold,
            },
            self.device_memory,
        )
    }
}

/// The trace to follow: a file, or the trace of a running process.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Source {
    /// The trace file (it may still be being written).
    pub trace: Option<PathBuf>,
    /// Follow the trace of this running process instead (see docs/REPORTS.md for how it
    /// is found); stops when the process exits.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

impl Source {
    pub fn open(&self) -> Result<Follower, Error> {
        match (&self.trace, self.pid) {
            (Some(path), _) => Follower::open(path),
            (None, Some(pid)) => Follower::open(&find_trace(pid)?),
            (None, None) => unreachable!("clap requires TRACE or --pid"),
        }
    }
}

/// Alert levels as thresholds in percent of the device's memory.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Thresholds {
    pub warning_percent: f64,
    pub critical_percent: f64,
}

impl Thresholds {
    /// 0 below warning, 1 warning, 2 critical.
    fn level(&self, percent: f64) -> u8 {
        if percent >= self.critical_percent {
            2
        } else if percent >= self.warning_percent {
            1
        } else {
            0
        }
    }
}

const LEVELS: [&str; 3] = ["ok", "warning", "critical"];

/// Device memory usage crossed a threshold upwards.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Alert {
    pub time_ns: u64,
    pub device: i32,
    /// "warning" or "critical".
    pub level: &'static str,
    /// Device memory live in the hooks' view at that moment.
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub percent: f64,
}

/// Live bytes of one (device, kind) row now and at their peak.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowNow {
    pub live: u64,
    pub count: u64,
    pub peak: u64,
    pub peak_time_ns: u64,
}

/// Live bytes of one call site now.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiteNow {
    pub bytes: u64,
    pub count: u64,
}

/// What `monitor` and `track` show, kept up to date as records are read.
#[derive(Debug)]
pub struct LiveState {
    pub thresholds: Thresholds,
    /// `--device-memory`: the size of every device, overriding the trace.
    pub flag_total: Option<u64>,
    /// Memory kinds only.
    pub rows: BTreeMap<(i32, MemKind), RowNow>,
    pub sites: HashMap<(u64, MemKind), SiteNow>,
    /// The last NVML sample per device.
    pub nvml: BTreeMap<i32, Sample>,
    /// Device memory size from the last failed allocation that read it, per device.
    pub failure_total: BTreeMap<i32, u64>,
    pub pipeline: Pipeline,
    pub stacks: HashMap<u64, StackInfo>,
    pub modules: Vec<Module>,
    pub python: HashMap<u64, PyCode>,
    /// The alert level each device is at.
    levels: BTreeMap<i32, u8>,
    pub alerts: Vec<Alert>,
    pub alerts_total: u64,
}

impl LiveState {
    pub fn new(thresholds: Thresholds, flag_total: Option<u64>) -> LiveState {
        LiveState {
            thresholds,
            flag_total,
            rows: BTreeMap::new(),
            sites: HashMap::new(),
            nvml: BTreeMap::new(),
            failure_total: BTreeMap::new(),
            pipeline: Pipeline::default(),
            stacks: HashMap::new(),
            modules: Vec::new(),
            python: HashMap::new(),
            levels: BTreeMap::new(),
            alerts: Vec::new(),
            alerts_total: 0,
        }
    }

    /// The device's memory size and where it came from: `--device-memory`, else the last
    /// NVML sample, else the last failed allocation that read it.
    pub fn device_total(&self, device: i32) -> Option<(u64, &'static str)> {
        if let Some(t) = self.flag_total {
            return Some((t, "flag"));
        }
        if let Some(s) = self.nvml.get(&device).filter(|s| s.device_total > 0) {
            return Some((s.device_total, "nvml"));
        }
        self.failure_total
            .get(&device)
            .map(|&t| (t, "failed_allocation"))
    }

    /// Device memory (kind `device`) live on `device` now.
    pub fn device_used(&self, device: i32) -> u64 {
        self.rows
            .get(&(device, MemKind::Device))
            .map_or(0, |r| r.live)
    }

    fn check(&mut self, device: i32, time_ns: u64) {
        let Some((total, _)) = self.device_total(device) else {
            return;
        };
        let used = self.device_used(device);
        let percent = percent(used, total);
        let level = self.thresholds.level(percent);
        let before = self.levels.insert(device, level).unwrap_or(0);
        if level > before {
            self.alerts_total += 1;
            if self.alerts.len() < MAX_ALERTS {
                self.alerts.push(Alert {
                    time_ns,
                    device,
                    level: LEVELS[usize::from(level)],
                    used_bytes: used,
                    total_bytes: total,
                    percent,
                });
            }
        }
    }

    /// Every device seen (allocating device memory or sampled by NVML), ascending.
    pub fn devices(&self) -> Vec<i32> {
        let mut d: Vec<i32> = self
            .rows
            .keys()
            .filter(|(_, k)| *k == MemKind::Device)
            .map(|(d, _)| *d)
            .chain(self.nvml.keys().copied())
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    pub fn device_reports(&self) -> Vec<DeviceNow> {
        self.devices()
            .into_iter()
            .map(|device| {
                let row = self
                    .rows
                    .get(&(device, MemKind::Device))
                    .copied()
                    .unwrap_or_default();
                let total = self.device_total(device);
                let pct = |v: u64| total.map(|(t, _)| percent(v, t));
                let level = match pct(row.live) {
                    Some(p) => LEVELS[usize::from(self.thresholds.level(p))],
                    None => "unknown",
                };
                DeviceNow {
                    device,
                    current_bytes: row.live,
                    current_allocations: row.count,
                    peak_bytes: row.peak,
                    peak_time_ns: row.peak_time_ns,
                    total_bytes: total.map(|(t, _)| t),
                    total_source: total.map(|(_, s)| s),
                    current_percent: pct(row.live),
                    peak_percent: pct(row.peak),
                    level,
                    nvml_process_used_bytes: self.nvml.get(&device).map(|s| s.process_used),
                }
            })
            .collect()
    }

    /// The `n` sites holding the most live bytes now (0: all), with `frames` frames.
    pub fn top_sites(&self, n: usize, frames: usize) -> Vec<SiteReport> {
        let mut sites: Vec<_> = self.sites.iter().filter(|(_, s)| s.count > 0).collect();
        sites.sort_by(|(ka, a), (kb, b)| b.bytes.cmp(&a.bytes).then(ka.cmp(kb)));
        if n > 0 {
            sites.truncate(n);
        }
        let mut sym = Symbolizer::new(&self.modules, &self.stacks, &self.python);
        sites
            .into_iter()
            .map(|(&(stack, kind), s)| SiteReport {
                stack_id: stack,
                kind: kind.name(),
                bytes: s.bytes,
                count: s.count,
                frames: sym.stack(stack, frames),
            })
            .collect()
    }

    /// The `trace` object of a live report.
    pub fn trace_info(&self, follower: &Follower) -> TraceInfo {
        let loaded = Loaded {
            header: follower.header.clone(),
            replayed: Replayed {
                pipeline: self.pipeline,
                ..Replayed::default()
            },
            truncated: follower.truncated,
            blocks: follower.blocks,
        };
        TraceInfo::new(follower.path(), &loaded)
    }
}

fn percent(used: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let p = used as f64 * 100.0 / total as f64;
    (p * 100.0).round() / 100.0
}

impl Observer for LiveState {
    fn record(&mut self, record: &Record) {
        if let Some(t) = record_time(record) {
            self.pipeline.duration_ns = self.pipeline.duration_ns.max(t);
        }
        match record {
            Record::Sample(s) => {
                self.nvml.insert(s.device, *s);
                self.check(s.device, s.time_ns);
            }
            Record::AllocFailed(f) if f.mem_total > 0 => {
                self.failure_total.insert(f.device, f.mem_total);
                self.check(f.device, f.time_ns);
            }
            Record::Stack { id, frames } => {
                let first_use_ns = self.stacks.get(id).and_then(|s| s.first_use_ns);
                self.stacks.insert(
                    *id,
                    StackInfo {
                        frames: frames.clone(),
                        first_use_ns,
                    },
                );
            }
            Record::Module(m) => self.modules.push(m.clone()),
            Record::PyCode(c) => {
                self.python.insert(c.id, c.clone());
            }
            Record::Stats(s) | Record::End(s) => {
                self.pipeline.events = s.events;
                self.pipeline.queue_waits = s.queue_waits;
                self.pipeline.dropped = s.dropped;
                if matches!(record, Record::End(_)) {
                    self.pipeline.complete = true;
                }
            }
            Record::Unknown { .. } => self.pipeline.unknown_records += 1,
            _ => {}
        }
    }

    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]) {
        let mut touched: Vec<i32> = Vec::new();
        for change in changes {
            let (a, added) = match *change {
                LiveChange::Added(a) => (a, true),
                LiveChange::Released(a) => (a, false),
            };
            if !a.kind.is_memory() {
                continue;
            }
            let row = self.rows.entry((a.device, a.kind)).or_default();
            let site = self.sites.entry((a.stack, a.kind)).or_default();
            if added {
                row.live = row.live.saturating_add(a.size);
                row.count += 1;
                if row.live > row.peak {
                    row.peak = row.live;
                    row.peak_time_ns = time_ns;
                }
                site.bytes = site.bytes.saturating_add(a.size);
                site.count += 1;
                if let Some(info) = self.stacks.get_mut(&a.stack) {
                    info.first_use_ns.get_or_insert(a.time_ns);
                }
            } else {
                row.live = row.live.saturating_sub(a.size);
                row.count = row.count.saturating_sub(1);
                site.bytes = site.bytes.saturating_sub(a.size);
                site.count = site.count.saturating_sub(1);
            }
            if a.kind == MemKind::Device && !touched.contains(&a.device) {
                touched.push(a.device);
            }
        }
        for device in touched {
            self.check(device, time_ns);
        }
    }
}

/// One device in a live report.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceNow {
    pub device: i32,
    /// Device memory (kind `device`) live in the hooks' view now.
    pub current_bytes: u64,
    pub current_allocations: u64,
    /// The most that was live, and when first.
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// The device's memory size; null when unknown.
    pub total_bytes: Option<u64>,
    /// Where the size came from: "flag" (--device-memory), "nvml" (a sample in the
    /// trace) or "failed_allocation" (read by the shim after a failure).
    pub total_source: Option<&'static str>,
    pub current_percent: Option<f64>,
    pub peak_percent: Option<f64>,
    /// "ok", "warning", "critical" (by the current percentage), or "unknown" without a
    /// size.
    pub level: &'static str,
    /// What NVML last saw this process use on the device, if the trace has samples.
    pub nvml_process_used_bytes: Option<u64>,
}

/// A call site holding live memory now.
#[derive(Debug, Clone, Serialize)]
pub struct SiteReport {
    pub stack_id: u64,
    pub kind: &'static str,
    pub bytes: u64,
    pub count: u64,
    pub frames: Vec<Frame>,
}

/// Whether process `pid` still runs (a zombie does not).
pub fn process_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may contain spaces.
        Ok(stat) => match stat.rsplit_once(')') {
            Some((_, rest)) => !rest.trim_start().starts_with(['Z', 'X']),
            None => true,
        },
        Err(_) => false,
    }
}

/// The trace file of running process `pid`, looked for in this order:
/// 1. a file the process has open (`/proc/PID/fd`) that starts with the trace magic;
/// 2. its `GPUMEMPROF_OUTPUT` (`/proc/PID/environ`), with `%p`, `%h`, `%r` and `%%`
///    expanded, relative to its working directory (`/proc/PID/cwd`);
/// 3. `gpumemprof.PID.trace` in its working directory.
///
/// 1 and 2 need the right to read the process's /proc files (same user, or root).
pub fn find_trace(pid: u32) -> Result<PathBuf, Error> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if !proc_dir.is_dir() {
        return Err(Error::Failed(format!(
            "no process {pid}: is it still running? (give its trace file instead of --pid)"
        )));
    }
    if let Ok(entries) = std::fs::read_dir(proc_dir.join("fd")) {
        let mut fds: Vec<(u64, PathBuf)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                let n: u64 = e.file_name().to_str()?.parse().ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                Some((n, target))
            })
            .collect();
        fds.sort();
        for (_, target) in fds {
            if target.is_file() && starts_with_magic(&target) {
                return Ok(target);
            }
        }
    }
    let cwd = std::fs::read_link(proc_dir.join("cwd")).ok();
    let env = std::fs::read(proc_dir.join("environ")).unwrap_or_default();
    let var = |name: &str| {
        env.split(|&b| b == 0).find_map(|kv| {
            let kv = std::str::from_utf8(kv).ok()?;
            let (k, v) = kv.split_once('=')?;
            (k == name && !v.is_empty()).then(|| v.to_owned())
        })
    };
    let mut tried = Vec::new();
    let mut candidates = Vec::new();
    if let Some(template) = var("GPUMEMPROF_OUTPUT") {
        let rank = ["RANK", "LOCAL_RANK", "SLURM_PROCID"]
            .iter()
            .find_map(|k| var(k).filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| "0".into());
        if template.contains("%t") {
            tried.push(format!(
                "GPUMEMPROF_OUTPUT={template} (names with %t cannot be guessed)"
            ));
        } else {
            candidates.push(expand(&template, pid, &rank));
        }
    }
    candidates.push(format!("gpumemprof.{pid}.trace"));
    for c in candidates {
        let path = match (&cwd, Path::new(&c).is_absolute()) {
            (Some(dir), false) => dir.join(&c),
            _ => PathBuf::from(&c),
        };
        if path.is_file() {
            return Ok(path);
        }
        tried.push(path.display().to_string());
    }
    Err(Error::Failed(format!(
        "process {pid} has no gpumemprof trace (looked at its open files and at {}): is it \
         running with LD_PRELOAD=libgpumemprof.so, and has it allocated GPU memory yet (the \
         trace is created at the first allocation)? Give the trace file instead of --pid if \
         you know it",
        tried.join(", ")
    )))
}

fn starts_with_magic(path: &Path) -> bool {
    let mut head = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head == MAGIC
}

/// The shim's placeholders that can be known from outside (`%t`, the start time, cannot).
fn expand(template: &str, pid: u32, rank: &str) -> String {
    let mut out = String::new();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('h') => out.push_str(&hostname()),
            Some('r') => out.push_str(rank),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buffer and length match; gethostname NUL-terminates when it fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_percentages() {
        let t = Thresholds {
            warning_percent: 80.0,
            critical_percent: 95.0,
        };
        assert_eq!(t.level(79.99), 0);
        assert_eq!(t.level(80.0), 1);
        assert_eq!(t.level(95.0), 2);
        assert_eq!(percent(1, 3), 33.33);
        assert_eq!(percent(5, 0), 0.0);
    }

    #[test]
    fn placeholders_known_from_outside_are_expanded() {
        assert_eq!(
            expand("/t/run-%p-r%r-%%.trace", 42, "3"),
            "/t/run-42-r3-%.trace"
        );
        assert_eq!(expand("x%q", 1, "0"), "x%q");
    }

    #[test]
    fn this_process_runs_and_a_missing_one_does_not() {
        assert!(process_running(std::process::id()));
        assert!(!process_running(u32::MAX - 1));
    }
}
