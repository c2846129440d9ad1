//! `gpumemprof oom`: why an allocation failed with out-of-memory. For one failure (by
//! default the one that ended the run): what asked, how much the device had free, what was
//! live then and which call sites held it, what grew in the seconds before, what NVML saw
//! beyond the hooks, whether a retry succeeded later (transient) or not (final), a hint at
//! the cause, and a one-line verdict.
//!
//! `scan` holds the two streaming passes; `model` the report's types (its JSON form); this
//! file turns the scan into the report; `text` renders it in one screen.

mod model;
pub mod scan;
mod text;
pub mod torch;

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use gpumemprof_format::{AllocFailed, MemKind, ReadError, TraceReader};

use super::{TraceInfo, SCHEMA_VERSION};
use crate::error::Error;
use crate::replay::{LiveAlloc, Loaded};
use crate::symbolize::{Frame, Symbolizer};
use crate::units;
pub use model::*;
pub use scan::{competes, replay_until, scan, Failure, Moment, Scan};
pub use text::write_text;

/// `--window` unless given: how far back "what grew" looks.
pub const DEFAULT_WINDOW_NS: u64 = 5_000_000_000;
/// `--top` unless given: sites, allocations and growing sites shown.
pub const DEFAULT_TOP: usize = 5;
/// `--frames` unless given (fewer than other reports: the text stays one screen).
pub const DEFAULT_FRAMES: usize = 5;
/// Live data "filled the device" when the tracked live bytes reach this fraction of the
/// device's total memory (numerator, denominator): the CUDA context and library
/// workspaces take the rest of a device that is full (a few hundred MiB, up to a GiB).
pub const FILLED_FRACTION: (u64, u64) = (4, 5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Which kept failure (0-based, trace order); `None`: the first final, else the last.
    pub index: Option<usize>,
    pub window_ns: u64,
    /// Entries per list (0: all).
    pub top: usize,
    /// Frames per stack (0: all).
    pub frames: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            index: None,
            window_ns: DEFAULT_WINDOW_NS,
            top: DEFAULT_TOP,
            frames: DEFAULT_FRAMES,
        }
    }
}

/// Runs both passes and builds the report. `open` opens the trace afresh (it is read
/// twice), `read_error` turns a decoding error into the command's error, `trace` makes the
/// report's `trace` object from what pass 1 read (and may warn about a truncated trace);
/// symbolization warnings go to `warn`.
pub fn analyze<R: Read + Send>(
    mut open: impl FnMut() -> Result<TraceReader<R>, Error>,
    read_error: impl Fn(ReadError) -> Error,
    trace: impl FnOnce(&Loaded) -> TraceInfo,
    opts: &Options,
    warn: &mut dyn FnMut(String),
) -> Result<OomReport, Error> {
    let scanned = scan(open()?).map_err(&read_error)?;
    let trace = trace(&scanned.loaded);
    let Some(index) = scanned.select(opts.index).map_err(Error::Failed)? else {
        return Ok(build(trace, &scanned, None, opts));
    };
    let failure = &scanned.failures[index];
    let moment = replay_until(open()?, failure, opts.window_ns)
        .map_err(&read_error)?
        .ok_or_else(|| {
            Error::Failed(format!(
                "{}: the trace changed while it was read (its failure {index} is gone)",
                trace.path
            ))
        })?;
    let mut sym = Symbolizer::new(
        &moment.replayed.modules,
        &moment.replayed.stacks,
        &moment.replayed.python,
    )
    .in_dir(crate::symbolize::cwd_of(&scanned.loaded.header));
    let report = build(trace, &scanned, Some((index, &moment, &mut sym)), opts);
    for w in sym.take_warnings() {
        warn(w);
    }
    Ok(report)
}

/// The name of the function a failure came from: the framework's for a refused tensor.
fn failed_api_name(header: &serde_json::Value, call: &AllocFailed) -> String {
    match (call.kind, call.api) {
        (MemKind::Tensor, 0) => gpumemprof_format::TENSOR_OUT_OF_MEMORY_API.into(),
        (_, api) => api_name(header, api),
    }
}

/// The name the header's `apis` table gives API `id` (`api#N` if it has none).
fn api_name(header: &serde_json::Value, id: u16) -> String {
    gpumemprof_format::header::api_names(header)
        .remove(&id)
        .unwrap_or_else(|| format!("api#{id}"))
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

fn clamp_u64(v: i128) -> u64 {
    v.clamp(0, i128::from(u64::MAX)) as u64
}

/// Largest first, `top` at most (0: all).
fn take_top<T>(mut v: Vec<T>, top: usize) -> Vec<T> {
    if top > 0 {
        v.truncate(top);
    }
    v
}

/// Builds the report: `at` is the selected failure's index with its pass-2 state and a
/// symbolizer over that state's stacks; `None` when there is no failure.
pub fn build(
    trace: TraceInfo,
    scanned: &Scan,
    at: Option<(usize, &Moment, &mut Symbolizer)>,
    opts: &Options,
) -> OomReport {
    let transient = scanned.transient();
    let failure_counts = FailureCounts {
        out_of_memory: scanned.out_of_memory,
        kept: scanned.failures.len() as u64,
        transient,
        r#final: scanned.failures.len() as u64 - transient,
        other_failed_allocations: scanned.other_failed,
    };
    let mut report = OomReport {
        schema_version: SCHEMA_VERSION,
        trace,
        failure_counts,
        failure: None,
        live: None,
        growth: None,
        nvml: None,
        pytorch: None,
        cause: None,
        hint: None,
        verdict: String::new(),
    };
    let Some((index, moment, sym)) = at else {
        report.verdict = "no out-of-memory failure in this trace".into();
        return report;
    };
    let Some(failure) = scanned.failures.get(index) else {
        report.verdict = "no out-of-memory failure in this trace".into();
        return report;
    };
    let header = &scanned.loaded.header;
    let call = &failure.call;
    let known = call.mem_total > 0;
    report.failure = Some(FailureInfo {
        index,
        ordinal: failure.ordinal,
        time_ns: call.time_ns,
        api: failed_api_name(header, call),
        kind: call.kind.name(),
        device: call.device,
        size: call.size,
        tid: call.tid,
        // A refusal's record carries the allocator's totals there (see `torch`), not these.
        stream: (call.kind != MemKind::Tensor).then_some(call.stream),
        pool: (call.kind != MemKind::Tensor).then_some(call.pool),
        result: call.result,
        stack_id: call.stack,
        frames: sym.stack(call.stack, opts.frames),
        site: crate::report::level::site(&sym.stack(call.stack, 0)).cloned(),
        mem_free_bytes: known.then_some(call.mem_free),
        mem_total_bytes: known.then_some(call.mem_total),
        outcome: if failure.is_final() {
            "final"
        } else {
            "transient"
        },
        retry: failure.retry.map(|a| RetryInfo {
            time_ns: a.time_ns,
            api: api_name(header, a.api),
            kind: a.kind.name(),
            device: a.device,
            size: a.size,
            tid: a.tid,
            stack_id: a.stack,
            same_thread: a.tid == call.tid,
        }),
        attempts: failure.attempts.map(|a| AttemptsInfo {
            count: a.count,
            api: api_name(header, a.api),
            size: a.size,
        }),
    });
    let live: Vec<&LiveAlloc> = moment
        .replayed
        .live
        .iter()
        .filter(|a| competes(call, a))
        .collect();
    let live_report = live_at_failure(call, &live, sym, opts);
    report.growth = Some(growth(call.time_ns, &live_report, &live, moment, sym, opts));
    report.nvml = nvml_at_failure(failure, moment);
    let conf = crate::torch_conf::AllocConf::of_header(header);
    report.pytorch = torch::at_failure(
        call,
        moment,
        sym,
        (opts.top, opts.frames),
        &conf,
        report.nvml.as_ref(),
    );
    let (cause, hint) = match &report.pytorch {
        Some(t) if call.kind == MemKind::Tensor && known => torch::cause_and_hint(call, t, &conf),
        _ => cause_and_hint(call, &live_report, report.nvml.as_ref()),
    };
    report.cause = Some(cause);
    report.hint = Some(hint);
    report.live = Some(live_report);
    report.verdict = verdict(&report);
    report
}

fn live_at_failure(
    call: &gpumemprof_format::AllocFailed,
    live: &[&LiveAlloc],
    sym: &mut Symbolizer,
    opts: &Options,
) -> LiveAtFailure {
    let pinned = call.kind == MemKind::PinnedHost;
    let kinds: Vec<MemKind> = if pinned {
        vec![MemKind::PinnedHost]
    } else if matches!(
        call.kind,
        MemKind::Device | MemKind::Managed | MemKind::VmmHandle
    ) {
        vec![MemKind::Device, MemKind::Managed]
    } else {
        vec![call.kind]
    };
    let mut by_kind: Vec<KindBytes> = kinds
        .iter()
        .map(|k| KindBytes {
            kind: k.name(),
            bytes: 0,
            count: 0,
        })
        .collect();
    let mut sites: HashMap<u64, (u64, u64)> = HashMap::new();
    let (mut bytes, mut count) = (0u64, 0u64);
    for a in live {
        bytes = bytes.saturating_add(a.size);
        count += 1;
        if let Some(k) = kinds.iter().position(|k| *k == a.kind) {
            by_kind[k].bytes = by_kind[k].bytes.saturating_add(a.size);
            by_kind[k].count += 1;
        }
        let s = sites.entry(a.stack).or_default();
        s.0 = s.0.saturating_add(a.size);
        s.1 += 1;
    }
    let sites_total = sites.len() as u64;
    let mut sites: Vec<(u64, (u64, u64))> = sites.into_iter().collect();
    // Largest first; ties in a fixed order so reports are reproducible.
    sites.sort_by(|(sa, a), (sb, b)| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(sa.cmp(sb)));
    let sites = take_top(sites, opts.top)
        .into_iter()
        .map(|(stack, (bytes, count))| SiteInfo {
            stack_id: stack,
            bytes,
            count,
            frames: sym.stack(stack, opts.frames),
        })
        .collect();
    let mut largest: Vec<&LiveAlloc> = live.to_vec();
    largest.sort_by(|a, b| {
        b.size
            .cmp(&a.size)
            .then(a.time_ns.cmp(&b.time_ns))
            .then(a.address.cmp(&b.address))
    });
    let largest = take_top(largest, opts.top)
        .into_iter()
        .map(|a| AllocInfo {
            address: format!("{:#x}", a.address),
            size: a.size,
            kind: a.kind.name(),
            time_ns: a.time_ns,
            stack_id: a.stack,
            frames: sym.stack(a.stack, opts.frames),
        })
        .collect();
    LiveAtFailure {
        kinds: kinds.iter().map(|k| k.name()).collect(),
        device: (!pinned).then_some(call.device),
        bytes,
        count,
        by_kind,
        sites_total,
        sites,
        largest,
    }
}

fn growth(
    failure_ns: u64,
    live_report: &LiveAtFailure,
    live: &[&LiveAlloc],
    moment: &Moment,
    sym: &mut Symbolizer,
    opts: &Options,
) -> Growth {
    let mut at_failure: HashMap<u64, u64> = HashMap::new();
    for a in live {
        let b = at_failure.entry(a.stack).or_default();
        *b = b.saturating_add(a.size);
    }
    let total: i128 = moment.growth.values().sum();
    let mut sites: Vec<(u64, i128, u64)> = moment
        .growth
        .iter()
        .filter(|(_, g)| **g > 0)
        .map(|(stack, g)| (*stack, *g, at_failure.get(stack).copied().unwrap_or(0)))
        .collect();
    sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let sites = take_top(sites, opts.top)
        .into_iter()
        .map(|(stack, g, now)| GrowthSite {
            stack_id: stack,
            bytes_at_start: clamp_u64(i128::from(now) - g),
            bytes_at_failure: now,
            growth_bytes: clamp_i64(g),
            frames: sym.stack(stack, opts.frames),
        })
        .collect();
    Growth {
        window_ns: failure_ns.saturating_sub(moment.start_ns),
        start_ns: moment.start_ns,
        bytes_at_start: clamp_u64(i128::from(live_report.bytes) - total),
        bytes_at_failure: live_report.bytes,
        growth_bytes: clamp_i64(total),
        sites,
    }
}

/// The NVML sample taken at the failure, set against the most the hooks tracked while NVML
/// answered (`scan::NvmlSeen`), else the latest before it (as `summary` sets it).
fn nvml_at_failure(failure: &Failure, moment: &Moment) -> Option<NvmlAtFailure> {
    let call = &failure.call;
    if call.kind == MemKind::PinnedHost {
        return None;
    }
    let (s, tracked, at_failure) = match failure.nvml {
        Some(seen) => (seen.sample, seen.tracked, true),
        None => {
            let d = moment
                .replayed
                .nvml
                .iter()
                .find(|d| d.device == call.device)?;
            (d.last, d.tracked_at_last, false)
        }
    };
    Some(NvmlAtFailure {
        device: call.device,
        time_ns: s.time_ns,
        at_failure,
        process_used_bytes: s.process_used,
        device_used_bytes: s.device_used,
        device_total_bytes: s.device_total,
        tracked_bytes: tracked,
        untracked_bytes: s.process_used.saturating_sub(tracked),
        other_processes_bytes: s.device_used.saturating_sub(s.process_used),
    })
}

/// The cause class and its one-line hint; docs/REPORTS.md lists the rules in this order.
fn cause_and_hint(
    call: &gpumemprof_format::AllocFailed,
    live: &LiveAtFailure,
    nvml: Option<&NvmlAtFailure>,
) -> (&'static str, String) {
    let b = units::bytes;
    if call.kind == MemKind::PinnedHost {
        return (
            "host_memory",
            format!(
                "pinned host memory is page-locked host RAM: the device's free memory does not \
                 apply; {} of pinned host memory was live",
                b(live.bytes)
            ),
        );
    }
    if call.mem_total == 0 {
        return (
            "unknown",
            "the trace does not record the device's free memory at the failure (the shim \
             could not read it): no hint"
                .into(),
        );
    }
    let (free, total) = (call.mem_free, call.mem_total);
    if call.size > total {
        return (
            "exceeds_total",
            format!(
                "the request alone is larger than the device's {} of memory: no freeing helps; \
                 ask for less (smaller batch or model shard)",
                b(total)
            ),
        );
    }
    if free >= call.size {
        return (
            "fragmentation",
            format!(
                "{} was free, at least the {} asked: free memory is fragmented into pieces \
                 smaller than the request (or was freed just after the failure); fewer, \
                 uniform allocations or expandable segments help",
                b(free),
                b(call.size)
            ),
        );
    }
    let (num, den) = FILLED_FRACTION;
    if u128::from(live.bytes) * u128::from(den) >= u128::from(total) * u128::from(num) {
        let pct = u128::from(live.bytes) * 100 / u128::from(total);
        return (
            "live_data",
            format!(
                "live data filled the device: the hooks tracked {} live, {pct}% of its {}; \
                 the sites below hold it",
                b(live.bytes),
                b(total)
            ),
        );
    }
    let used = total.saturating_sub(free);
    let mut hint = format!(
        "the hooks tracked only {} of the {} in use: the rest is memory they did not see \
         (CUDA context, library workspaces, other processes, unhooked allocation paths)",
        b(live.bytes),
        b(used)
    );
    if let Some(n) = nvml {
        hint.push_str(&format!(
            "; NVML: {} untracked in this process, {} in other processes",
            b(n.untracked_bytes),
            b(n.other_processes_bytes)
        ));
    }
    ("untracked", hint)
}

/// `function` at `file:line` with the file's name only, for one-line mentions.
pub fn short_frame(f: &Frame) -> String {
    let file = f.file.as_deref().map(|p| {
        let name = Path::new(p)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(p);
        match f.line {
            Some(line) => format!("{name}:{line}"),
            None => name.to_string(),
        }
    });
    let module = || match (&f.module, f.offset) {
        (Some(m), Some(off)) => {
            let name = Path::new(m)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(m);
            format!("{name}+{off:#x}")
        }
        _ => f.address.clone(),
    };
    match (&f.function, file) {
        (Some(func), Some(file)) => format!("{func} ({file})"),
        (Some(func), None) => func.clone(),
        (None, Some(file)) => file,
        (None, None) => module(),
    }
}

/// Where a stack's memory came from, in a few words: its innermost frame.
fn site_words(stack: u64, frames: &[Frame]) -> String {
    match frames.first() {
        Some(f) => short_frame(f),
        None if stack == 0 => "calls with no stack captured".into(),
        None => format!("stack {stack}"),
    }
}

fn verdict(r: &OomReport) -> String {
    let (Some(f), Some(live)) = (&r.failure, &r.live) else {
        return "no out-of-memory failure in this trace".into();
    };
    let b = units::bytes;
    let asked = if f.kind == "pinned_host" {
        format!("{} asked {} of pinned host memory", f.api, b(f.size))
    } else {
        let what = if f.kind == "device" {
            String::new()
        } else {
            format!(" of {} memory", f.kind)
        };
        let mem = match (f.mem_free_bytes, f.mem_total_bytes) {
            (Some(free), Some(total)) => format!(" with {} free of {}", b(free), b(total)),
            _ => " (free memory not recorded)".into(),
        };
        if f.kind == "tensor" {
            let at = f
                .site
                .as_ref()
                .map_or_else(String::new, |s| format!(" at {}", short_frame(s)));
            format!(
                "PyTorch's caching allocator refused a {} block{at} on device {}{mem}",
                b(f.size),
                units::device(f.device)
            )
        } else {
            format!(
                "{} asked {}{what} on device {}{mem}",
                f.api,
                b(f.size),
                units::device(f.device)
            )
        }
    };
    let held = match (&r.pytorch, live.sites.first()) {
        (Some(t), _) => {
            let from = t.sites.first().map_or_else(String::new, |s| {
                let site = s
                    .site
                    .as_ref()
                    .map_or_else(|| site_words(s.stack_id, &s.frames), short_frame);
                format!(", {} of it from {site}", b(s.bytes))
            });
            format!(
                "PyTorch: {} allocated in {}, {} reserved ({} cached but unallocated){from}",
                b(t.allocated_bytes),
                units::plural(t.tensors, "tensor", "tensors"),
                b(t.reserved_bytes),
                b(t.cached_bytes)
            )
        }
        (None, top) => match top {
            None => "nothing live".to_string(),
            Some(top) => format!(
                "{} live, {} of it from {}",
                b(live.bytes),
                b(top.bytes),
                site_words(top.stack_id, &top.frames)
            ),
        },
    };
    let outcome = match &f.retry {
        None => "final".to_string(),
        Some(retry) => format!(
            "transient (a {} allocation succeeded {} later)",
            b(retry.size),
            units::secs(retry.time_ns.saturating_sub(f.time_ns))
        ),
    };
    format!("OOM: {asked}; {held}; {outcome}.")
}
