//! `gpumemprof info`: this machine's NVIDIA driver and devices through NVML (see `nvml`);
//! `gpumemprof info TRACE`: a trace's header (process, host, shim, environment allow-list,
//! settings) and which hooked APIs it saw and how often.

use std::collections::BTreeMap;
use std::io::{self, Write};

use gpumemprof_format::Record;
use serde::Serialize;

use crate::nvml::NvmlInfo;
use crate::observe::Observer;
use crate::replay::{LiveChange, Loaded};
use crate::report::{TraceInfo, SCHEMA_VERSION};
use crate::term::{BOLD, WARN};
use crate::units;
use gpumemprof_format::header::str_field as header_str;

pub const ANALYZER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `info` without a trace.
#[derive(Debug, Clone, Serialize)]
pub struct SystemReport {
    pub schema_version: u32,
    pub analyzer_version: &'static str,
    pub nvml: NvmlInfo,
}

pub fn system(nvml: NvmlInfo) -> SystemReport {
    SystemReport {
        schema_version: SCHEMA_VERSION,
        analyzer_version: ANALYZER_VERSION,
        nvml,
    }
}

pub fn write_system_text(report: &SystemReport, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "gpumemprof {}", report.analyzer_version)?;
    write_nvml_text(&report.nvml, out)
}

/// The NVML part of `info` (also used by `diagnose`'s environment).
pub fn write_nvml_text(n: &NvmlInfo, out: &mut dyn Write) -> io::Result<()> {
    if !n.available {
        let why = n.message.as_deref().unwrap_or("NVML is not available");
        return writeln!(out, "{WARN}{why}{WARN:#}");
    }
    let or_unknown = |s: &Option<String>| s.clone().unwrap_or_else(|| "unknown".into());
    writeln!(
        out,
        "NVIDIA driver {}, NVML {}, CUDA {} (the newest the driver supports)",
        or_unknown(&n.driver_version),
        or_unknown(&n.nvml_version),
        or_unknown(&n.cuda_driver_version)
    )?;
    if let Some(m) = &n.message {
        writeln!(out, "{WARN}{m}{WARN:#}")?;
    }
    if n.devices.is_empty() {
        writeln!(out, "no devices")?;
    }
    for d in &n.devices {
        let name = d.name.clone().unwrap_or_else(|| "(name unknown)".into());
        let uuid = d.uuid.as_ref().map_or(String::new(), |u| format!(" ({u})"));
        write!(out, "{BOLD}device {}{BOLD:#}: {name}{uuid}", d.index)?;
        match (
            d.memory_total_bytes,
            d.memory_used_bytes,
            d.memory_free_bytes,
        ) {
            (Some(t), Some(u), Some(f)) => writeln!(
                out,
                ": {} total, {} used, {} free",
                units::bytes_exact(t),
                units::bytes_exact(u),
                units::bytes_exact(f)
            )?,
            _ => writeln!(out)?,
        }
        if let Some(e) = &d.error {
            writeln!(out, "  {WARN}{e}{WARN:#}")?;
        }
    }
    Ok(())
}

/// `info TRACE`.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    pub schema_version: u32,
    pub analyzer_version: &'static str,
    pub trace: TraceInfo,
    pub header: HeaderFacts,
    pub records: RecordCounts,
    /// The APIs the trace saw, most calls first (then by name).
    pub apis: Vec<ApiUse>,
}

/// What the shim wrote in the trace's header (null where a field is absent).
#[derive(Debug, Clone, Serialize)]
pub struct HeaderFacts {
    pub format_version: Option<u64>,
    pub shim_version: Option<String>,
    pub pid: Option<u64>,
    pub ppid: Option<i64>,
    pub host: Option<String>,
    pub rank: Option<String>,
    pub exe: Option<String>,
    pub start_time_unix_ns: Option<u64>,
    /// `start_time_unix_ns` as UTC, `2026-01-02T03:04:05Z`.
    pub start_time_utc: Option<String>,
    /// CLOCK_MONOTONIC when the trace started: a program's own `time.monotonic_ns()` minus
    /// this is the `--at`/`--to` of that moment.
    pub start_monotonic_ns: Option<u64>,
    /// The shim's settings (`GPUMEMPROF_*` as it read them).
    pub config: serde_json::Value,
    /// The environment variables the shim records (an allow-list, never the whole
    /// environment), by name.
    pub env: BTreeMap<String, String>,
}

/// Records in the trace, by kind.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RecordCounts {
    pub allocations: u64,
    pub frees: u64,
    pub failed_allocations: u64,
    pub stacks: u64,
    pub modules: u64,
    pub stats: u64,
    pub samples: u64,
    pub end: u64,
    pub unknown: u64,
    /// Python code definitions (functions that Python frames in stacks refer to).
    pub python_codes: u64,
    /// NVTX range and mark events, and NVTX name definitions.
    pub nvtx_events: u64,
    pub nvtx_names: u64,
    /// How-the-process-ended records (an exit status or a fatal signal).
    pub ending: u64,
    /// A framework allocator's tensor allocations and frees (PyTorch's caching allocator).
    pub tensors: u64,
    /// Recording-stopped records (a write to the trace failed).
    pub stopped: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApiUse {
    /// The id events carry.
    pub id: u16,
    /// The function's name from the header's `apis` table (`api N` if it is not there).
    pub name: String,
    /// Its family in that table (`runtime`, `driver`, ...), if given.
    pub family: Option<String>,
    pub calls: u64,
    pub allocations: u64,
    pub failed_allocations: u64,
    /// Free calls that succeeded (whether or not the address was live).
    pub frees: u64,
    pub failed_frees: u64,
}

/// Counts records and API calls during the pass.
#[derive(Debug, Default)]
pub struct ApiCounter {
    records: RecordCounts,
    /// (allocations, failed allocations, frees, failed frees) per API id.
    apis: BTreeMap<u16, [u64; 4]>,
}

impl ApiCounter {
    pub fn new() -> ApiCounter {
        ApiCounter::default()
    }
}

impl Observer for ApiCounter {
    fn record(&mut self, record: &Record) {
        let r = &mut self.records;
        match record {
            Record::Alloc(a) => {
                r.allocations += 1;
                self.apis.entry(a.api).or_default()[0] += 1;
            }
            Record::AllocFailed(f) => {
                r.failed_allocations += 1;
                self.apis.entry(f.api).or_default()[1] += 1;
            }
            Record::Free(f) => {
                r.frees += 1;
                let i = if f.result == 0 { 2 } else { 3 };
                self.apis.entry(f.api).or_default()[i] += 1;
            }
            Record::Stack { .. } => r.stacks += 1,
            Record::Module(_) => r.modules += 1,
            Record::Stats(_) => r.stats += 1,
            Record::End(_) => r.end += 1,
            Record::Sample(_) => r.samples += 1,
            Record::Unknown { .. } => r.unknown += 1,
            Record::PyCode(_) => r.python_codes += 1,
            // NVTX: counted here; summary/peak/leaks --by range report the ranges.
            Record::Nvtx(_) => r.nvtx_events += 1,
            Record::NvtxString { .. } => r.nvtx_names += 1,
            Record::Ending(_) => r.ending += 1,
            Record::Stopped(_) => r.stopped += 1,
            Record::Tensor(_) => r.tensors += 1,
        }
    }

    fn changes(&mut self, _: u64, _: &[LiveChange]) {}
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(unix_ns: u64) -> String {
    let t = (unix_ns / 1_000_000_000) as libc::time_t;
    // SAFETY: a zeroed tm is a valid out-buffer for gmtime_r.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    unsafe { libc::gmtime_r(&t, &mut tm) };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

pub fn header_facts(header: &serde_json::Value) -> HeaderFacts {
    let start = header.get("start_time_unix_ns").and_then(|v| v.as_u64());
    let rank = header.get("rank").and_then(|v| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    HeaderFacts {
        format_version: header.get("format_version").and_then(|v| v.as_u64()),
        shim_version: header_str(header, "shim_version").map(str::to_owned),
        pid: header.get("pid").and_then(|v| v.as_u64()),
        ppid: header.get("ppid").and_then(|v| v.as_i64()),
        host: header_str(header, "host").map(str::to_owned),
        rank,
        exe: header_str(header, "exe").map(str::to_owned),
        start_time_unix_ns: start,
        start_time_utc: start.map(utc),
        start_monotonic_ns: header.get("start_monotonic_ns").and_then(|v| v.as_u64()),
        config: header
            .get("config")
            .cloned()
            .unwrap_or(serde_json::Value::Null),
        env: header
            .get("env")
            .and_then(|e| e.as_object())
            .map(|e| {
                e.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

pub fn trace(trace: TraceInfo, loaded: &Loaded, counter: ApiCounter) -> TraceReport {
    let table: BTreeMap<u64, (String, Option<String>)> =
        gpumemprof_format::header::apis(&loaded.header)
            .into_iter()
            .map(|a| (u64::from(a.id), (a.name, a.family)))
            .collect();
    let mut apis: Vec<ApiUse> = counter
        .apis
        .iter()
        .map(
            |(&id, &[allocations, failed_allocations, frees, failed_frees])| {
                let (name, family) = table
                    .get(&u64::from(id))
                    .cloned()
                    .unwrap_or_else(|| (format!("api {id}"), None));
                ApiUse {
                    id,
                    name,
                    family,
                    calls: allocations + failed_allocations + frees + failed_frees,
                    allocations,
                    failed_allocations,
                    frees,
                    failed_frees,
                }
            },
        )
        .collect();
    apis.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.name.cmp(&b.name)));
    TraceReport {
        schema_version: SCHEMA_VERSION,
        analyzer_version: ANALYZER_VERSION,
        trace,
        header: header_facts(&loaded.header),
        records: counter.records,
        apis,
    }
}

pub fn write_trace_text(report: &TraceReport, out: &mut dyn Write) -> io::Result<()> {
    report.trace.write_text(out)?;
    let h = &report.header;
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "?".into());
    writeln!(
        out,
        "format version {}, shim {}, host {}, rank {}, started {}",
        h.format_version
            .map_or_else(|| "?".into(), |v| v.to_string()),
        opt(&h.shim_version),
        opt(&h.host),
        opt(&h.rank),
        opt(&h.start_time_utc)
    )?;
    writeln!(
        out,
        "exe {}, parent pid {}",
        opt(&h.exe),
        h.ppid.map_or_else(|| "?".into(), |p| p.to_string())
    )?;
    if h.env.is_empty() {
        writeln!(out, "environment (allow-list): none set")?;
    } else {
        let env: Vec<String> = h.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(out, "environment (allow-list): {}", env.join(" "))?;
    }
    if !h.config.is_null() {
        writeln!(out, "settings: {}", h.config)?;
    }
    let r = &report.records;
    writeln!(
        out,
        "records: {} allocations, {} frees, {} failed allocations, {} stacks, {} Python \
         functions, {} NVTX events, {} modules, {} NVML samples, {} counters, {} of unknown kinds",
        r.allocations,
        r.frees,
        r.failed_allocations,
        r.stacks,
        r.python_codes,
        r.nvtx_events,
        r.modules,
        r.samples,
        r.stats + r.end,
        r.unknown
    )?;
    writeln!(out)?;
    if report.apis.is_empty() {
        return writeln!(out, "no API calls recorded");
    }
    writeln!(
        out,
        "{BOLD}{:<28} {:>10} {:>11} {:>8} {:>10} {:>12}{BOLD:#}",
        "API", "calls", "allocations", "frees", "failed", "failed frees"
    )?;
    for a in &report.apis {
        writeln!(
            out,
            "{:<28} {:>10} {:>11} {:>8} {:>10} {:>12}",
            a.name, a.calls, a.allocations, a.frees, a.failed_allocations, a.failed_frees
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_of_a_known_instant() {
        assert_eq!(
            super::utc(1_767_323_045_123_456_789),
            "2026-01-02T03:04:05Z"
        );
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A trace file: show its header and the APIs it saw instead of this machine.
    pub trace: Option<std::path::PathBuf>,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &Args) -> Result<(), crate::error::Error> {
    use super::common;
    match &args.trace {
        None => common::emit(args.json, &system(crate::nvml::query()), write_system_text),
        Some(path) => {
            let mut counter = ApiCounter::new();
            let loaded = crate::input::load_observed(path, &mut [&mut counter])?;
            let report = trace(TraceInfo::new(path, &loaded), &loaded, counter);
            common::emit(args.json, &report, write_trace_text)
        }
    }
}
