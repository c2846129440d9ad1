//! `gpumemprof diff BEFORE AFTER`: what changed between two traces (two runs, or the same
//! job at two commits), per call site: the bytes it held at the peak of its (device, kind)
//! and the bytes it still held at the end (as `leaks` counts them: with what the
//! interpreter's teardown freed); sites only in AFTER are new, only in BEFORE gone.
//!
//! Stack ids and addresses differ between runs (interning order, ASLR), so a site is
//! matched by its symbolized frames: `function at file:line` per frame (`--by line`, the
//! default), or `function` only (`--by function`: survives edits that move lines between
//! commits). Files and modules are compared by file name, so two checkouts in different
//! folders still match. A frame without a function falls back to `module+0xoffset`.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use clap::ValueEnum;
use gpumemprof_format::MemKind;
use serde::Serialize;

use crate::replay::{has_tensors, Loaded, MemoryLevel};
use crate::report::teardown::Teardown;
use crate::report::{write_frames, TraceInfo, SCHEMA_VERSION};
use crate::symbolize::{Frame, Symbolizer};
use crate::term::{BAD, BOLD, GOOD};
use crate::units;

/// How call sites of the two traces are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SiteKey {
    /// Function, file name and line of every frame.
    Line,
    /// Function of every frame.
    Function,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub schema_version: u32,
    pub before: TraceInfo,
    pub after: TraceInfo,
    /// How sites were matched: "line" or "function".
    pub key: SiteKey,
    /// What is compared: `tensors` (when both traces have a framework allocator's tensors)
    /// or `segments`. `totals` are the segments' either way, but for `leaked_*` (at this
    /// level) and the allocator's peaks.
    pub level: MemoryLevel,
    pub totals: Totals,
    /// Sites whose bytes changed, new and gone sites: largest change of live-at-end bytes
    /// first, then largest change at the peak. Unchanged sites are only counted (all
    /// listed with `--all`).
    pub sites: Vec<SiteDiff>,
    pub changed_sites: u64,
    pub new_sites: u64,
    pub gone_sites: u64,
    pub unchanged_sites: u64,
}

/// A number in both traces and their difference (after - before).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Change {
    pub before: u64,
    pub after: u64,
    pub delta: i64,
}

impl Change {
    pub fn new(before: u64, after: u64) -> Change {
        let delta = i128::from(after) - i128::from(before);
        Change {
            before,
            after,
            delta: delta.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    /// The combined peak of all memory kinds (`summary`'s `totals.peak_bytes`).
    pub peak_bytes: Change,
    pub live_bytes_at_end: Change,
    pub live_allocations_at_end: Change,
    pub allocations: Change,
    pub failed_allocations: Change,
    /// What was still held when the program ended, at the report's level, as `leaks`'s
    /// `total_bytes` and `total_count` (with what the interpreter's teardown freed).
    pub leaked_bytes: Change,
    pub leaked_count: Change,
    /// A framework allocator's peaks (PyTorch's `max_memory_allocated()` and
    /// `max_memory_reserved()`), summed over devices; null unless both traces have them.
    pub allocated_peak_bytes: Option<Change>,
    pub reserved_peak_bytes: Option<Change>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SiteDiff {
    /// "changed", "new" (only in AFTER), "gone" (only in BEFORE) or "unchanged".
    pub status: &'static str,
    pub kind: &'static str,
    /// Bytes the site held at the peak of its (device, kind), summed over devices.
    pub peak_bytes: Change,
    /// Bytes the site still held when the trace ended.
    pub live_bytes_at_end: Change,
    pub live_allocations_at_end: Change,
    /// Stack ids of the site in each trace (several when frames beyond the key differ;
    /// empty where the site is absent).
    pub stack_ids_before: Vec<u64>,
    pub stack_ids_after: Vec<u64>,
    /// The site's frames (from AFTER, or from BEFORE for a gone site), at most `--frames`.
    pub frames: Vec<Frame>,
}

/// One site's numbers in one trace.
#[derive(Debug, Default, Clone)]
struct Side {
    peak: u64,
    live: u64,
    live_count: u64,
    stacks: Vec<u64>,
    frames: Vec<Frame>,
}

/// The name of a path's last component (the whole path if it has none).
fn file_name(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
}

/// One frame as it is compared.
fn frame_key(f: &Frame, by: SiteKey) -> String {
    let place = || match (&f.module, f.offset) {
        (Some(m), Some(off)) => format!("{}+{off:#x}", file_name(m)),
        _ => f.address.clone(),
    };
    match (&f.function, by) {
        (Some(func), SiteKey::Function) => func.clone(),
        (Some(func), SiteKey::Line) => match (&f.file, f.line) {
            (Some(file), Some(line)) => format!("{func} at {}:{line}", file_name(file)),
            (Some(file), None) => format!("{func} at {}", file_name(file)),
            _ => format!("{func} in {}", place()),
        },
        (None, _) => place(),
    }
}

/// One trace's sites by (kind, frame keys).
type SiteMap = BTreeMap<(MemKind, Vec<String>), Side>;

/// The sites of one trace by key, and the key of each stack seen so far.
#[derive(Default)]
struct Sites {
    keys: BTreeMap<u64, Vec<String>>,
    sites: SiteMap,
}

impl Sites {
    fn side(
        &mut self,
        sym: &mut Symbolizer,
        stack: u64,
        kind: MemKind,
        by: SiteKey,
        frames: usize,
    ) -> &mut Side {
        let key = self
            .keys
            .entry(stack)
            .or_insert_with(|| {
                sym.stack(stack, 0)
                    .iter()
                    .map(|f| frame_key(f, by))
                    .collect()
            })
            .clone();
        let s = self.sites.entry((kind, key)).or_default();
        if !s.stacks.contains(&stack) {
            if s.stacks.is_empty() {
                s.frames = sym.stack(stack, frames);
            }
            s.stacks.push(stack);
        }
        s
    }
}

/// Every site of one trace: at the peaks and live at the end (what the interpreter's
/// teardown freed included, as `leaks` counts; loaded with `input::load_keeping_exit`);
/// and the trace's (bytes, count) live at the end so.
fn sides(
    loaded: &Loaded,
    by: SiteKey,
    frames: usize,
    level: MemoryLevel,
) -> (SiteMap, (u64, u64), Vec<String>) {
    let r = &loaded.replayed;
    let mut sym = Symbolizer::of(loaded);
    let teardown = Teardown::find(&r.exit_tail, &mut sym);
    let freed_at_exit = teardown.as_ref().map_or(&[][..], |t| &t.freed[..]);
    let mut all = Sites::default();
    for row in r.rows.iter().filter(|row| level.counts(row.kind)) {
        for site in &row.peak_sites {
            let s = all.side(&mut sym, site.stack, row.kind, by, frames);
            // Saturating: hostile traces can claim sizes that add past u64.
            s.peak = s.peak.saturating_add(site.bytes);
        }
    }
    let mut leaked = (0u64, 0u64);
    for a in r
        .live
        .iter()
        .chain(freed_at_exit)
        .filter(|a| level.counts(a.kind))
    {
        let s = all.side(&mut sym, a.stack, a.kind, by, frames);
        s.live = s.live.saturating_add(a.size);
        s.live_count += 1;
        leaked = (leaked.0.saturating_add(a.size), leaked.1 + 1);
    }
    for s in all.sites.values_mut() {
        s.stacks.sort_unstable();
    }
    (all.sites, leaked, sym.take_warnings())
}

/// A framework allocator's (allocated, reserved) peaks summed over devices, if it has one.
fn allocator_peaks(loaded: &Loaded) -> Option<(u64, u64)> {
    let a = &loaded.replayed.allocators;
    (!a.is_empty()).then(|| {
        a.iter().fold((0u64, 0u64), |(al, re), f| {
            (
                al.saturating_add(f.peak_allocated),
                re.saturating_add(f.peak_reserved),
            )
        })
    })
}

/// `all`: list unchanged sites too; `level`: asked for, else tensors when both traces have
/// them. Returns the report and the symbolizer's warnings.
pub fn build(
    before: (TraceInfo, &Loaded),
    after: (TraceInfo, &Loaded),
    by: SiteKey,
    frames: usize,
    all: bool,
    level: Option<MemoryLevel>,
) -> (DiffReport, Vec<String>) {
    let level = level.unwrap_or(
        if has_tensors(&before.1.replayed) && has_tensors(&after.1.replayed) {
            MemoryLevel::Tensors
        } else {
            MemoryLevel::Segments
        },
    );
    let (b_sites, b_leaked, mut warnings) = sides(before.1, by, frames, level);
    let (a_sites, a_leaked, w) = sides(after.1, by, frames, level);
    warnings.extend(w);
    let mut keys: Vec<&(MemKind, Vec<String>)> = b_sites.keys().chain(a_sites.keys()).collect();
    keys.sort();
    keys.dedup();
    let empty = Side::default();
    let (mut changed, mut new, mut gone, mut unchanged) = (0, 0, 0, 0);
    let mut sites = Vec::new();
    for key in keys {
        let (b, a) = (b_sites.get(key), a_sites.get(key));
        let status = match (b, a) {
            (None, Some(_)) => {
                new += 1;
                "new"
            }
            (Some(_), None) => {
                gone += 1;
                "gone"
            }
            (Some(b), Some(a)) if b.peak != a.peak || b.live != a.live => {
                changed += 1;
                "changed"
            }
            _ => {
                unchanged += 1;
                "unchanged"
            }
        };
        if status == "unchanged" && !all {
            continue;
        }
        let (bs, as_) = (b.unwrap_or(&empty), a.unwrap_or(&empty));
        sites.push(SiteDiff {
            status,
            kind: key.0.name(),
            peak_bytes: Change::new(bs.peak, as_.peak),
            live_bytes_at_end: Change::new(bs.live, as_.live),
            live_allocations_at_end: Change::new(bs.live_count, as_.live_count),
            stack_ids_before: bs.stacks.clone(),
            stack_ids_after: as_.stacks.clone(),
            frames: if a.is_some() {
                as_.frames.clone()
            } else {
                bs.frames.clone()
            },
        });
    }
    // Largest change first; ties keep the key order (sites were visited sorted).
    sites.sort_by_key(|s| {
        (
            std::cmp::Reverse(s.live_bytes_at_end.delta.unsigned_abs()),
            std::cmp::Reverse(s.peak_bytes.delta.unsigned_abs()),
        )
    });
    let (rb, ra) = (&before.1.replayed, &after.1.replayed);
    let peaks = allocator_peaks(before.1).zip(allocator_peaks(after.1));
    let totals = Totals {
        peak_bytes: Change::new(rb.totals.peak_bytes, ra.totals.peak_bytes),
        live_bytes_at_end: Change::new(rb.totals.live_bytes, ra.totals.live_bytes),
        live_allocations_at_end: Change::new(
            rb.totals.live_allocations,
            ra.totals.live_allocations,
        ),
        allocations: Change::new(rb.totals.allocations, ra.totals.allocations),
        failed_allocations: Change::new(rb.totals.failed_allocations, ra.totals.failed_allocations),
        leaked_bytes: Change::new(b_leaked.0, a_leaked.0),
        leaked_count: Change::new(b_leaked.1, a_leaked.1),
        allocated_peak_bytes: peaks.map(|(b, a)| Change::new(b.0, a.0)),
        reserved_peak_bytes: peaks.map(|(b, a)| Change::new(b.1, a.1)),
    };
    let report = DiffReport {
        schema_version: SCHEMA_VERSION,
        before: before.0,
        after: after.0,
        key: by,
        level,
        totals,
        sites,
        changed_sites: changed,
        new_sites: new,
        gone_sites: gone,
        unchanged_sites: unchanged,
    };
    (report, warnings)
}

/// `+3.0 MiB (3145728 B)`, `-512 B`, `0 B`.
fn signed_bytes(delta: i64) -> String {
    let sign = if delta > 0 {
        "+"
    } else if delta < 0 {
        "-"
    } else {
        ""
    };
    format!("{sign}{}", units::bytes_exact(delta.unsigned_abs()))
}

fn signed(delta: i64) -> String {
    if delta > 0 {
        format!("+{delta}")
    } else {
        delta.to_string()
    }
}

fn bytes_line(out: &mut dyn Write, label: &str, c: &Change) -> io::Result<()> {
    let style = match c.delta.signum() {
        1 => BAD,
        -1 => GOOD,
        _ => Default::default(),
    };
    writeln!(
        out,
        "{label:<15} {} -> {}  {style}{}{style:#}",
        units::bytes(c.before),
        units::bytes(c.after),
        signed_bytes(c.delta)
    )
}

pub fn write_text(report: &DiffReport, out: &mut dyn Write) -> io::Result<()> {
    let describe = |t: &TraceInfo| {
        let pid = t.pid.map_or_else(|| "?".to_string(), |p| p.to_string());
        format!("{}  (pid {pid}: {})", t.path, t.argv.join(" "))
    };
    writeln!(out, "before {}", describe(&report.before))?;
    writeln!(out, "after  {}", describe(&report.after))?;
    for (t, name) in [(&report.before, "before"), (&report.after, "after")] {
        if let Some(sig) = t.died_of() {
            writeln!(
                out,
                "WARNING: the {name} process was ended by {sig}: its \"live at end\" means \
                 live when it died"
            )?;
        } else if !t.complete {
            writeln!(
                out,
                "WARNING: the {name} process did not exit cleanly: its \"live at end\" means \
                 live when its trace stopped"
            )?;
        }
        if t.dropped > 0 {
            writeln!(
                out,
                "WARNING: the {name} trace lost {} events: {}",
                t.dropped,
                crate::input::LOSS_BOTH_WAYS
            )?;
        }
    }
    writeln!(out)?;
    let t = &report.totals;
    // A framework's job: its tensors first (PyTorch's allocated and reserved peaks, what
    // the program still held at its end), then the segments' totals. Counted in segments,
    // what was held at the end is `live at end` below.
    if report.level == MemoryLevel::Tensors {
        if let (Some(allocated), Some(reserved)) = (&t.allocated_peak_bytes, &t.reserved_peak_bytes)
        {
            bytes_line(out, "allocated peak", allocated)?;
            bytes_line(out, "reserved peak", reserved)?;
        }
        bytes_line(out, "leaked", &t.leaked_bytes)?;
        writeln!(
            out,
            "{:<15} {} -> {}  {}",
            "leaked tensors",
            t.leaked_count.before,
            t.leaked_count.after,
            signed(t.leaked_count.delta)
        )?;
        writeln!(out, "memory from CUDA (segments and other allocations):")?;
    }
    bytes_line(out, "peak", &t.peak_bytes)?;
    bytes_line(out, "live at end", &t.live_bytes_at_end)?;
    writeln!(
        out,
        "{:<15} {} -> {}  {}",
        "allocations",
        t.allocations.before,
        t.allocations.after,
        signed(t.allocations.delta)
    )?;
    if t.failed_allocations.before + t.failed_allocations.after > 0 {
        writeln!(
            out,
            "{:<15} {} -> {}  {}",
            "failed",
            t.failed_allocations.before,
            t.failed_allocations.after,
            signed(t.failed_allocations.delta)
        )?;
    }
    writeln!(
        out,
        "\nsites (matched by {}): {} changed, {} new, {} gone, {} unchanged",
        match report.key {
            SiteKey::Line => "function and line",
            SiteKey::Function => "function",
        },
        report.changed_sites,
        report.new_sites,
        report.gone_sites,
        report.unchanged_sites
    )?;
    let (_, many) = report.level.count_words();
    for s in &report.sites {
        let style = if s.live_bytes_at_end.delta > 0 || s.peak_bytes.delta > 0 {
            BAD
        } else {
            GOOD
        };
        writeln!(
            out,
            "\n{BOLD}{}{BOLD:#} {} memory: live at end {style}{}{style:#} ({} -> {}, {} -> {} \
             {many}), at the peak {style}{}{style:#} ({} -> {})",
            s.status,
            s.kind,
            signed_bytes(s.live_bytes_at_end.delta),
            units::bytes(s.live_bytes_at_end.before),
            units::bytes(s.live_bytes_at_end.after),
            s.live_allocations_at_end.before,
            s.live_allocations_at_end.after,
            signed_bytes(s.peak_bytes.delta),
            units::bytes(s.peak_bytes.before),
            units::bytes(s.peak_bytes.after)
        )?;
        write_frames(out, &s.frames, "    ")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_signed_and_saturate() {
        assert_eq!(Change::new(5, 8).delta, 3);
        assert_eq!(Change::new(8, 5).delta, -3);
        assert_eq!(Change::new(0, u64::MAX).delta, i64::MAX);
        assert_eq!(signed_bytes(3 << 20), "+3.0 MiB (3145728 B)");
        assert_eq!(signed_bytes(-512), "-512 B");
        assert_eq!(signed_bytes(0), "0 B");
    }

    #[test]
    fn frames_are_keyed_by_file_name_not_folder() {
        let f = Frame {
            address: "0x5555".into(),
            module: Some("/a/build/prog".into()),
            function: Some("step".into()),
            file: Some("/a/src/train.c".into()),
            line: Some(12),
            inlined: false,
            offset: Some(0x1234),
            python: false,
            role: None,
        };
        assert_eq!(frame_key(&f, SiteKey::Line), "step at train.c:12");
        assert_eq!(frame_key(&f, SiteKey::Function), "step");
        let bare = Frame {
            function: None,
            file: None,
            line: None,
            ..f
        };
        assert_eq!(frame_key(&bare, SiteKey::Line), "prog+0x1234");
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The earlier trace (the baseline).
    pub before: std::path::PathBuf,
    /// The later trace, compared with it.
    pub after: std::path::PathBuf,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// How call sites are matched between the traces.
    #[arg(long, value_enum, default_value_t = SiteKey::Line)]
    pub by: SiteKey,
    /// Stack frames shown per site (0: all).
    #[arg(long, value_name = "N", default_value_t = crate::report::DEFAULT_FRAMES)]
    pub frames: usize,
    /// List unchanged sites too.
    #[arg(long)]
    pub all: bool,
    /// Compare a framework allocator's tensors (the default when both traces have them)
    /// or the segments allocated from CUDA, HIP or the driver.
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub level: Option<MemoryLevel>,
}

pub fn run(args: &Args) -> Result<(), crate::error::Error> {
    use super::common;
    let before = crate::input::load_keeping_exit(&args.before, &mut [])?;
    let after = crate::input::load_keeping_exit(&args.after, &mut [])?;
    let (report, warnings) = build(
        (TraceInfo::new(&args.before, &before), &before),
        (TraceInfo::new(&args.after, &after), &after),
        args.by,
        args.frames,
        args.all,
        args.level,
    );
    for w in warnings {
        crate::term::warn(&w);
    }
    common::emit(args.json, &report, write_text)
}
