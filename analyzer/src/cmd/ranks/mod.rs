//! `summary`, `peak` and `leaks` over several traces of one job: one trace per rank
//! (torchrun, SLURM; the shim's `GPUMEMPROF_OUTPUT=job.r%r.trace`), given as several paths
//! or as a directory. One line per trace (rank, host, pid, peak and when, live at the end,
//! events), the rank that peaked highest against the median, and for `peak` and `leaks` the
//! call sites of all ranks merged.
//!
//! ```text
//!   paths / DIR --collect--> files --headers--> sorted by (rank, pid, path)
//!        for each file: replay -> RankRow + its sites merged into `Merged` -> drop the replay
//! ```
//!
//! Traces are replayed one after another and each replay is dropped before the next, so
//! memory is one trace's replay plus the rows and the merged sites. Addresses differ per
//! process (ASLR), so sites are merged by their symbolized frames, as `diff --by line` does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use gpumemprof_format::{MemKind, TraceReader, MAGIC};
use serde::Serialize;

mod text;

pub use text::{write_text, Names};

use crate::cmd::common;
use crate::error::Error;
use crate::input::rank_of;
use crate::kinds::Kind;
use crate::replay::{LiveAlloc, MemoryLevel};
use crate::report::teardown::Teardown;
use crate::report::{TraceInfo, SCHEMA_VERSION};
use crate::symbolize::{Frame, Symbolizer};
use crate::units;
use gpumemprof_format::header::str_field as header_str;

/// Which command asked: it decides the merged sites (`peak`: at the peaks; `leaks`: live
/// at the end; `summary`: none) and the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    Summary,
    Peak,
    Leaks,
}

/// The command line of one multi-trace report.
#[derive(Debug, Clone)]
pub struct Options {
    pub which: Which,
    pub json: bool,
    /// Merged sites shown, largest first (0: all).
    pub top: usize,
    /// Frames per site (0: all).
    pub frames: usize,
    /// Gate on every trace's `peak_bytes` (summary, peak).
    pub max_peak: Option<u64>,
    /// Gate on every trace's `live_bytes_at_end` (leaks).
    pub max_leaked: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RanksReport {
    pub schema_version: u32,
    pub command: Which,
    /// One per trace, sorted by rank (traces without one last), then pid, then path.
    pub traces: Vec<RankRow>,
    /// The trace whose peak was highest (the first of equals), against the median: PyTorch's
    /// allocated peak when every trace has tensors, else the peak of all memory.
    pub highest: Highest,
    /// `live_bytes_at_end` and `live_allocations_at_end` summed over the traces.
    pub live_bytes_at_end: u64,
    pub live_allocations_at_end: u64,
    /// `leaked_bytes` and `leaked_count` summed over the traces.
    pub leaked_bytes: u64,
    pub leaked_count: u64,
    /// `workspaces_bytes` and `workspaces_count` summed over the traces.
    pub workspaces_bytes: u64,
    pub workspaces_count: u64,
    /// `peak`: bytes held at each trace's peaks; `leaks`: live at the end; per site merged
    /// over the traces, largest first, at most `--top`. Null for `summary`.
    pub sites: Option<Vec<MergedSite>>,
    /// Merged sites in all, also those past `--top`. Null for `summary`.
    pub sites_total: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RankRow {
    pub trace: TraceInfo,
    /// The header's `rank` (from `RANK`, `LOCAL_RANK` or `SLURM_PROCID`); null without one.
    pub rank: Option<u64>,
    pub host: Option<String>,
    /// `summary`'s `totals`: the peak of all memory and when, what was live at the end.
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    pub live_bytes_at_end: u64,
    pub live_allocations_at_end: u64,
    pub allocations: u64,
    pub failed_allocations: u64,
    /// What the merged sites and `leaked_*` count: `tensors` when the trace has a
    /// framework allocator's tensors, else `segments`.
    pub level: MemoryLevel,
    /// PyTorch's own peaks (`torch.cuda.max_memory_allocated()` and
    /// `max_memory_reserved()`), of its device that peaked highest; null without tensors.
    pub allocated_peak_bytes: Option<u64>,
    pub reserved_peak_bytes: Option<u64>,
    /// What `leaks` counts for this trace, at its level: live at the end, or freed only by
    /// the interpreter's teardown (`--max-leaked` checks it); for `summary` and `peak`, what
    /// was live at the end at that level.
    pub leaked_bytes: u64,
    pub leaked_count: u64,
    /// `leaks` only (0 for `summary` and `peak`): of `leaked_*`, PyTorch's tensors that
    /// are a library's workspace (cuBLAS's, cuDNN's), which the framework keeps for the
    /// process's life, as `leaks` of one trace counts them; `--max-leaked` checks what is
    /// left, the program's own.
    pub workspaces_bytes: u64,
    pub workspaces_count: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Highest {
    /// Index into `traces`.
    pub index: usize,
    pub rank: Option<u64>,
    pub peak_bytes: u64,
    /// The median of the traces' peaks (of an even number: the mean of the middle two,
    /// rounded down).
    pub median_peak_bytes: u64,
    pub above_median_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MergedSite {
    pub kind: &'static str,
    pub bytes: u64,
    pub count: u64,
    /// The ranks of the traces the site is in, in trace order (null: a trace without rank).
    pub ranks: Vec<Option<u64>>,
    /// The same traces as indexes into `traces`.
    pub trace_indexes: Vec<usize>,
    /// From the first trace the site is in, at most `--frames`.
    pub frames: Vec<Frame>,
}

/// A site while traces are merged.
struct Site {
    bytes: u64,
    count: u64,
    traces: Vec<usize>,
    frames: Vec<Frame>,
}

type Merged = BTreeMap<(MemKind, Vec<String>), Site>;

/// Runs `summary`/`peak`/`leaks` on several traces or directories: prints the report,
/// then applies the gates to every trace.
pub fn run(inputs: &[PathBuf], opts: &Options) -> Result<(), Error> {
    let files = entries(inputs)?;
    let report = build(&files, opts)?;
    common::emit(opts.json, &report, write_text)?;
    match opts.which {
        // The program's own leak, as `leaks` of one trace gates it: not the libraries'
        // workspaces the framework keeps for the process's life.
        Which::Leaks => gate(
            &report,
            "leaked",
            |r| r.leaked_bytes.saturating_sub(r.workspaces_bytes),
            "--max-leaked",
            opts.max_leaked,
        ),
        _ => gate(
            &report,
            "peak",
            |r| r.peak_bytes,
            "--max-peak",
            opts.max_peak,
        ),
    }
}

/// The traces named, each directory replaced by its traces, sorted by rank (`sorted`).
pub fn entries(inputs: &[PathBuf]) -> Result<Vec<Entry>, Error> {
    sorted(collect_listed(inputs)?)
}

/// The files named, with each directory replaced by its traces; the same file once.
pub fn collect(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    Ok(collect_listed(inputs)?
        .into_iter()
        .map(|(f, _)| f)
        .collect())
}

/// `collect`, each file with whether it was found in a directory (not named itself).
fn collect_listed(inputs: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>, Error> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let found = traces_in(input)?;
            if found.is_empty() {
                return Err(Error::Invalid(format!(
                    "{}: no gpumemprof trace in this directory (looked for files that start \
                     with the trace magic or are named *.trace): give the folder the shim \
                     wrote to (GPUMEMPROF_OUTPUT), or the traces themselves",
                    input.display()
                )));
            }
            files.extend(found.into_iter().map(|f| (f, true)));
        } else {
            files.push((input.clone(), false));
        }
    }
    // A directory and a file in it given together: read the file once.
    let mut seen = HashSet::new();
    files.retain(|(f, _)| seen.insert(f.canonicalize().unwrap_or_else(|_| f.clone())));
    Ok(files)
}

/// The traces directly in `dir` (not below): regular files starting with the trace magic,
/// and files named `*.trace` whatever they hold, so a damaged trace is reported, not
/// skipped. Sorted by path.
fn traces_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let listing = |source| Error::File {
        what: format!("listing {}", dir.display()),
        source,
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        let path = entry.map_err(listing)?.path();
        // `metadata` follows symbolic links: a link to a trace counts.
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let named = path.extension().is_some_and(|e| e == "trace");
        if named || starts_with_magic(&path) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

fn starts_with_magic(path: &Path) -> bool {
    let mut magic = [0u8; MAGIC.len()];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == MAGIC)
}

/// One trace to replay, with what its header says.
pub struct Entry {
    pub path: PathBuf,
    pub rank: Option<u64>,
    /// The process's pid, from the header.
    pub pid: Option<u64>,
}

/// Reads each header (not the events) and sorts by rank, traces without one last, then
/// pid (forked workers of one rank in the order they were made, where their files' names
/// put `job.1002.trace` before `job.999.trace`), then path. A file named on the command
/// line that is not a trace fails here, before anything is replayed; one found in a
/// directory whose header cannot be read (an empty file: a process that died before
/// writing it) is skipped with a warning, unless none is left.
pub fn sorted(files: Vec<(PathBuf, bool)>) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::with_capacity(files.len());
    let mut skipped: Option<Error> = None;
    for (path, listed) in files {
        let file = File::open(&path).map_err(|source| Error::Open {
            path: path.clone(),
            source,
        })?;
        let reader = match TraceReader::open(BufReader::new(file)) {
            Ok(reader) => reader,
            Err(e) if listed => {
                let e = crate::input::read_error(&path, e);
                crate::term::warn(&format!("{e}; skipped"));
                skipped = Some(e);
                continue;
            }
            Err(e) => return Err(crate::input::read_error(&path, e)),
        };
        let rank = rank_of(reader.header());
        let pid = reader
            .header()
            .get("pid")
            .and_then(serde_json::Value::as_u64);
        entries.push(Entry { path, rank, pid });
    }
    if let (true, Some(e)) = (entries.is_empty(), skipped) {
        return Err(e);
    }
    let key = |e: &Entry| (e.rank.is_none(), e.rank, e.pid.is_none(), e.pid);
    entries.sort_by(|a, b| key(a).cmp(&key(b)).then_with(|| a.path.cmp(&b.path)));
    Ok(entries)
}

/// Of `leaked`, the bytes and count of those `kinds` (keyed by address and time, as
/// `kinds::of_leaked` gives them) calls a library's workspace.
fn workspaces_among(leaked: &[&LiveAlloc], kinds: &HashMap<(u64, u64), Kind>) -> (u64, u64) {
    (leaked.iter())
        .filter(|a| kinds.get(&(a.address, a.time_ns)) == Some(&Kind::Workspaces))
        .fold((0u64, 0u64), |(b, n), a| (b.saturating_add(a.size), n + 1))
}

/// Replays the traces one after another; only each one's row and its merged sites stay.
pub fn build(entries: &[Entry], opts: &Options) -> Result<RanksReport, Error> {
    let mut traces = Vec::with_capacity(entries.len());
    let mut merged = Merged::new();
    for (index, entry) in entries.iter().enumerate() {
        let loaded = crate::input::load_keeping_exit(&entry.path, &mut [])?;
        let r = &loaded.replayed;
        let mut sym = Symbolizer::of(&loaded);
        let level = MemoryLevel::of(r, None);
        let teardown = Teardown::find(&r.exit_tail, &mut sym);
        let freed_at_exit = teardown.as_ref().map_or(&[][..], |t| &t.freed[..]);
        let leaked: Vec<&LiveAlloc> = r
            .live
            .iter()
            .chain(freed_at_exit)
            .filter(|a| level.counts(a.kind))
            .collect();
        let mut keys: HashMap<u64, Vec<String>> = HashMap::new();
        let mut add = |stack: u64, kind: MemKind, bytes: u64, count: u64| {
            let key = keys
                .entry(stack)
                .or_insert_with(|| sym.stack(stack, 0).iter().map(frame_key).collect())
                .clone();
            let site = merged.entry((kind, key)).or_insert_with(|| Site {
                bytes: 0,
                count: 0,
                traces: Vec::new(),
                frames: sym.stack(stack, opts.frames),
            });
            // Saturating: hostile traces can claim sizes that add past u64.
            site.bytes = site.bytes.saturating_add(bytes);
            site.count += count;
            if site.traces.last() != Some(&index) {
                site.traces.push(index);
            }
        };
        match opts.which {
            Which::Summary => {}
            Which::Peak => {
                for row in r.rows.iter().filter(|row| level.counts(row.kind)) {
                    for s in &row.peak_sites {
                        add(s.stack, row.kind, s.bytes, s.count);
                    }
                }
            }
            Which::Leaks => {
                for a in &leaked {
                    add(a.stack, a.kind, a.size, 1);
                }
            }
        }
        let (workspaces_bytes, workspaces_count) = match opts.which {
            Which::Leaks => workspaces_among(&leaked, &crate::kinds::of_leaked(r, &mut sym)),
            _ => (0, 0),
        };
        let pytorch = r
            .allocators
            .iter()
            .filter(|a| a.framework == gpumemprof_format::FRAMEWORK_PYTORCH)
            .max_by_key(|a| a.peak_allocated);
        crate::input::warn_all(sym.take_warnings());
        traces.push(RankRow {
            trace: TraceInfo::new(&entry.path, &loaded),
            rank: entry.rank,
            host: header_str(&loaded.header, "host").map(str::to_owned),
            peak_bytes: r.totals.peak_bytes,
            peak_time_ns: r.totals.peak_time_ns,
            live_bytes_at_end: r.totals.live_bytes,
            live_allocations_at_end: r.totals.live_allocations,
            allocations: r.totals.allocations,
            failed_allocations: r.totals.failed_allocations,
            level,
            allocated_peak_bytes: pytorch.map(|a| a.peak_allocated),
            reserved_peak_bytes: pytorch.map(|a| a.peak_reserved),
            leaked_bytes: leaked.iter().fold(0u64, |s, a| s.saturating_add(a.size)),
            leaked_count: leaked.len() as u64,
            workspaces_bytes,
            workspaces_count,
        });
    }
    let sites = (opts.which != Which::Summary).then(|| shown(merged, &traces, opts.top));
    Ok(RanksReport {
        schema_version: SCHEMA_VERSION,
        command: opts.which,
        highest: highest(&traces),
        live_bytes_at_end: traces
            .iter()
            .fold(0, |s, t| s.saturating_add(t.live_bytes_at_end)),
        live_allocations_at_end: traces.iter().map(|t| t.live_allocations_at_end).sum(),
        leaked_bytes: traces
            .iter()
            .fold(0, |s, t| s.saturating_add(t.leaked_bytes)),
        leaked_count: traces.iter().map(|t| t.leaked_count).sum(),
        workspaces_bytes: traces
            .iter()
            .fold(0, |s, t| s.saturating_add(t.workspaces_bytes)),
        workspaces_count: traces.iter().map(|t| t.workspaces_count).sum(),
        sites_total: sites.as_ref().map(|(_, total)| *total),
        sites: sites.map(|(s, _)| s),
        traces,
    })
}

/// Merged sites largest first (ties in a fixed order), at most `top`, and how many in all.
fn shown(merged: Merged, traces: &[RankRow], top: usize) -> (Vec<MergedSite>, u64) {
    let total = merged.len() as u64;
    let mut all: Vec<_> = merged.into_iter().collect();
    all.sort_by(|(ka, a), (kb, b)| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then(ka.cmp(kb))
    });
    if top > 0 {
        all.truncate(top);
    }
    let sites = all
        .into_iter()
        .map(|((kind, _), s)| MergedSite {
            kind: kind.name(),
            bytes: s.bytes,
            count: s.count,
            ranks: s.traces.iter().map(|&i| traces[i].rank).collect(),
            trace_indexes: s.traces,
            frames: s.frames,
        })
        .collect();
    (sites, total)
}

/// The peak the traces are compared by: PyTorch's allocated peak when every trace has
/// tensors (what `torch.cuda.max_memory_allocated()` says on each rank), else the peak of
/// all memory.
pub fn compared_peak(traces: &[RankRow]) -> impl Fn(&RankRow) -> u64 {
    let tensors = !traces.is_empty() && traces.iter().all(|t| t.allocated_peak_bytes.is_some());
    move |t: &RankRow| match t.allocated_peak_bytes {
        Some(p) if tensors => p,
        _ => t.peak_bytes,
    }
}

/// The trace with the highest peak (the first of equals) and how far above the median.
fn highest(traces: &[RankRow]) -> Highest {
    let peak_of = compared_peak(traces);
    let mut index = 0;
    for (i, t) in traces.iter().enumerate() {
        if peak_of(t) > peak_of(&traces[index]) {
            index = i;
        }
    }
    let mut peaks: Vec<u64> = traces.iter().map(&peak_of).collect();
    let median = median(&mut peaks);
    let peak = traces.get(index).map_or(0, &peak_of);
    Highest {
        index,
        rank: traces.get(index).and_then(|t| t.rank),
        peak_bytes: peak,
        median_peak_bytes: median,
        above_median_bytes: peak - median,
    }
}

/// The median; of an even number of values the mean of the middle two, rounded down.
pub fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    match values.len() {
        0 => 0,
        n if n % 2 == 1 => values[n / 2],
        n => {
            let (a, b) = (values[n / 2 - 1], values[n / 2]);
            a + (b - a) / 2
        }
    }
}

/// The name of a path's last component (the whole path if it has none): checkouts and
/// install folders differ between nodes, file names do not.
fn file_name(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
}

/// One frame as sites are merged: `function at file:line`, else `function in
/// module+0xoffset`, else `module+0xoffset` (stable across processes of one binary), else
/// the raw address (which only matches within one process).
pub fn frame_key(f: &Frame) -> String {
    let place = || match (&f.module, f.offset) {
        (Some(m), Some(off)) => format!("{}+{off:#x}", file_name(m)),
        _ => f.address.clone(),
    };
    let at = match (&f.file, f.line) {
        (Some(file), Some(line)) => Some(format!("{}:{line}", file_name(file))),
        (Some(file), None) => Some(file_name(file).to_owned()),
        _ => None,
    };
    match (&f.function, at) {
        (Some(func), Some(at)) => format!("{func} at {at}"),
        (Some(func), None) => format!("{func} in {}", place()),
        (None, Some(at)) => format!("{} at {at}", place()),
        (None, None) => place(),
    }
}

/// A failed gate names the worst trace and counts the others over the limit.
fn gate(
    report: &RanksReport,
    what: &str,
    value: fn(&RankRow) -> u64,
    flag: &str,
    limit: Option<u64>,
) -> Result<(), Error> {
    let Some(limit) = limit else { return Ok(()) };
    let over: Vec<&RankRow> = report.traces.iter().filter(|t| value(t) > limit).collect();
    let Some(worst) = over
        .iter()
        .copied()
        .reduce(|a, b| if value(b) > value(a) { b } else { a })
    else {
        return Ok(());
    };
    let others = match over.len() - 1 {
        0 => String::new(),
        1 => ", and so does 1 more trace".to_string(),
        n => format!(", and so do {n} more traces"),
    };
    let names = Names::of(&report.traces);
    let index = report
        .traces
        .iter()
        .position(|t| std::ptr::eq(t, worst))
        .unwrap_or(0);
    Err(Error::Gate(format!(
        "{} ({}): {what} {} exceeds {flag} {}{others}: reduce it, or raise the limit if \
         the growth is expected",
        names.one(index),
        worst.trace.path,
        units::bytes_exact(value(worst)),
        units::bytes_exact(limit)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank's leak at exit modelled on the H100 job's (docs/VALIDATION.md): cuBLAS's two
    /// 32 MiB workspaces beside four activations of 32 KiB, and a tensor no kind was found
    /// for; the workspaces counted apart, by address and time.
    #[test]
    fn a_ranks_workspaces_are_counted_apart_from_its_own_leak() {
        let live = |address: u64, time_ns: u64, size: u64| LiveAlloc {
            address,
            time_ns,
            size,
            stack: 1,
            device: 0,
            kind: MemKind::Tensor,
        };
        let all = [
            live(0x1000, 10, 33_554_432),
            live(0x3000, 11, 33_554_432),
            live(0x5000, 12, 32_768),
            live(0x6000, 13, 32_768),
            live(0x7000, 14, 32_768),
            live(0x8000, 15, 32_768),
            live(0x9000, 16, 4096),
        ];
        let leaked: Vec<&LiveAlloc> = all.iter().collect();
        let mut kinds = HashMap::new();
        kinds.insert((0x1000, 10), Kind::Workspaces);
        kinds.insert((0x3000, 11), Kind::Workspaces);
        // The same address, another time: another tensor, not a workspace.
        kinds.insert((0x5000, 99), Kind::Workspaces);
        for (address, time) in [(0x5000, 12), (0x6000, 13), (0x7000, 14), (0x8000, 15)] {
            kinds.insert((address, time), Kind::Activations);
        }
        assert_eq!(workspaces_among(&leaked, &kinds), (67_108_864, 2));
        assert_eq!(workspaces_among(&leaked, &HashMap::new()), (0, 0));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [7, 9, 8]), 8);
        assert_eq!(median(&mut [10, 8, 8, 4]), 8);
        assert_eq!(median(&mut [1, 4]), 2);
        assert_eq!(median(&mut [5]), 5);
        assert_eq!(median(&mut [u64::MAX, u64::MAX - 1]), u64::MAX - 1);
    }

    #[test]
    fn ranks_from_the_header() {
        let rank = |v: serde_json::Value| rank_of(&v);
        assert_eq!(rank(serde_json::json!({"rank": "3"})), Some(3));
        assert_eq!(rank(serde_json::json!({"rank": 5})), Some(5));
        assert_eq!(rank(serde_json::json!({"rank": "x"})), None);
        assert_eq!(rank(serde_json::json!({})), None);
    }

    #[test]
    fn frames_merge_by_line_then_by_module_offset() {
        let frame =
            |function: Option<&str>, file: Option<&str>, line, module: Option<&str>| Frame {
                address: "0x7f0000001234".into(),
                module: module.map(str::to_owned),
                function: function.map(str::to_owned),
                file: file.map(str::to_owned),
                line,
                inlined: false,
                python: false,
                offset: module.map(|_| 0x1234),
                role: None,
            };
        let f = frame(
            Some("step"),
            Some("/a/train.c"),
            Some(7),
            Some("/bin/train"),
        );
        assert_eq!(frame_key(&f), "step at train.c:7");
        let f = frame(Some("step"), None, None, Some("/n1/libx.so"));
        assert_eq!(frame_key(&f), "step in libx.so+0x1234");
        assert_eq!(
            frame_key(&frame(None, None, None, Some("/n2/libx.so"))),
            "libx.so+0x1234"
        );
        assert_eq!(frame_key(&frame(None, None, None, None)), "0x7f0000001234");
    }
}
