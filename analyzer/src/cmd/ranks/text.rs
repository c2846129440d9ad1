//! The text form of a report over several traces. Each trace is named by its rank when
//! every trace has a rank of its own, else by its pid (a job of forked workers: 201 traces
//! of rank 0), with the rank too when it has one (`pid 4242 of rank 0`); long lists of names are shortened
//! (consecutive ranks as ranges, at most `LISTED` names then how many more).

use std::io::{self, Write};

use super::{RankRow, RanksReport, Which};
use crate::report::leaks::workspaces_line;
use crate::report::write_frames;
use crate::units;

/// Names listed before "and N more".
const LISTED: usize = 8;

/// How the traces of one report are named.
pub struct Names {
    by_rank: bool,
    ranks: Vec<Option<u64>>,
    pids: Vec<Option<u64>>,
}

impl Names {
    pub fn of(traces: &[RankRow]) -> Names {
        let ranks: Vec<Option<u64>> = traces.iter().map(|t| t.rank).collect();
        let mut seen = std::collections::HashSet::new();
        let by_rank = ranks.iter().all(|r| r.is_some_and(|r| seen.insert(r)));
        Names {
            by_rank,
            ranks,
            pids: traces.iter().map(|t| t.trace.pid).collect(),
        }
    }

    /// Trace `i`: `rank 3`, else `pid 4242` (`pid 4242 of rank 0` when it has a rank).
    pub fn one(&self, i: usize) -> String {
        let pid = self.pids[i].map_or_else(|| "?".to_string(), |p| p.to_string());
        match (self.by_rank, self.ranks[i]) {
            (true, Some(r)) => format!("rank {r}"),
            (_, Some(r)) => format!("pid {pid} of rank {r}"),
            (_, None) => format!("pid {pid}"),
        }
    }

    /// Traces `indexes` (in report order): `ranks 0-3, 5`, else `pids 11, 12, 13, ... and
    /// 198 more`.
    pub fn list(&self, indexes: &[usize]) -> String {
        if self.by_rank {
            let mut ranks: Vec<u64> = indexes.iter().filter_map(|&i| self.ranks[i]).collect();
            ranks.sort_unstable();
            let word = if ranks.len() == 1 { "rank" } else { "ranks" };
            return format!("{word} {}", ranges(&ranks));
        }
        let pids: Vec<String> = indexes
            .iter()
            .map(|&i| self.pids[i].map_or_else(|| "?".to_string(), |p| p.to_string()))
            .collect();
        let word = if pids.len() == 1 { "pid" } else { "pids" };
        format!("{word} {}", shortened(&pids))
    }
}

/// Sorted numbers with runs of three or more as ranges (`0-3, 5, 7-9`), at most `LISTED`
/// items then how many numbers more.
fn ranges(sorted: &[u64]) -> String {
    let mut items: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            items.push((format!("{}-{}", sorted[i], sorted[j]), j - i + 1));
        } else {
            for n in &sorted[i..=j] {
                items.push((n.to_string(), 1));
            }
        }
        i = j + 1;
    }
    let more: usize = items.iter().skip(LISTED).map(|(_, n)| n).sum();
    let shown: Vec<String> = items.into_iter().take(LISTED).map(|(s, _)| s).collect();
    with_more(shown.join(", "), more)
}

/// At most `LISTED` names, then how many more.
fn shortened(names: &[String]) -> String {
    let shown = names[..names.len().min(LISTED)].join(", ");
    with_more(shown, names.len().saturating_sub(LISTED))
}

fn with_more(shown: String, more: usize) -> String {
    if more == 0 {
        shown
    } else {
        format!("{shown}, ... and {more} more")
    }
}

pub fn write_text(report: &RanksReport, out: &mut dyn Write) -> io::Result<()> {
    let names = Names::of(&report.traces);
    writeln!(
        out,
        "{} ({})",
        units::plural(report.traces.len() as u64, "trace", "traces"),
        names.list(&(0..report.traces.len()).collect::<Vec<_>>())
    )?;
    // A PyTorch job's ranks in PyTorch's terms: its allocated and reserved peaks, and what
    // each leaked in tensors.
    let tensors = report
        .traces
        .iter()
        .all(|t| t.allocated_peak_bytes.is_some());
    if tensors {
        writeln!(
            out,
            "{:>5}  {:<16}  {:>8}  {:>10}  {:>10}  {:>10}  {:>9}  trace",
            "rank", "host", "pid", "allocated", "reserved", "leaked", "events"
        )?;
        writeln!(
            out,
            "{:>5}  {:<16}  {:>8}  {:>10}  {:>10}",
            "", "", "", "peak", "peak"
        )?;
    } else {
        writeln!(
            out,
            "{:>5}  {:<16}  {:>8}  {:>10}  {:>9}  {:>10}  {:>9}  trace",
            "rank", "host", "pid", "peak", "peak at", "live@end", "events"
        )?;
    }
    for t in &report.traces {
        let (a, b, c) = if tensors {
            (
                units::bytes(t.allocated_peak_bytes.unwrap_or(0)),
                units::bytes(t.reserved_peak_bytes.unwrap_or(0)),
                units::bytes(t.leaked_bytes),
            )
        } else {
            (
                units::bytes(t.peak_bytes),
                units::secs(t.peak_time_ns),
                units::bytes(t.live_bytes_at_end),
            )
        };
        writeln!(
            out,
            "{:>5}  {:<16}  {:>8}  {:>10}  {:>w$}  {:>10}  {:>9}  {}",
            t.rank.map_or_else(|| "?".to_string(), |r| r.to_string()),
            t.host.as_deref().unwrap_or("?"),
            t.trace
                .pid
                .map_or_else(|| "?".to_string(), |p| p.to_string()),
            a,
            b,
            c,
            t.trace.events,
            t.trace.path,
            w = if tensors { 10 } else { 9 }
        )?;
    }
    for (i, t) in report.traces.iter().enumerate() {
        let name = names.one(i);
        if let Some(sig) = t.trace.died_of() {
            writeln!(
                out,
                "WARNING: {name} ({}) was ended by {sig} (live@end: live when it died)",
                t.trace.path
            )?;
        }
        let doubts = [
            (
                !t.trace.complete && !t.trace.running,
                "did NOT exit cleanly (live@end: live when the trace stopped)",
            ),
            (t.trace.running, "is still running (live@end: live so far)"),
            (
                t.trace.truncated,
                "is cut short (only its complete blocks were read)",
            ),
            (
                t.trace.dropped > 0,
                "lost events in the shim (its numbers can be off either way: lost allocations count low, lost frees high)",
            ),
            (
                t.trace.damaged_blocks > 0,
                "has damaged blocks, skipped (its numbers can be off either way: lost allocations count low, lost frees high)",
            ),
        ];
        for (_, why) in doubts.iter().filter(|(doubt, _)| *doubt) {
            writeln!(out, "WARNING: {name} ({}) {why}", t.trace.path)?;
        }
    }
    let h = &report.highest;
    if tensors {
        writeln!(
            out,
            "\nhighest allocated peak: {}, {}, {} above the median {}",
            names.one(h.index),
            units::bytes_exact(h.peak_bytes),
            units::bytes_exact(h.above_median_bytes),
            units::bytes_exact(h.median_peak_bytes)
        )?;
    } else {
        writeln!(
            out,
            "\nhighest peak: {}, {} at {}, {} above the median {}",
            names.one(h.index),
            units::bytes_exact(h.peak_bytes),
            units::secs(report.traces.get(h.index).map_or(0, |t| t.peak_time_ns)),
            units::bytes_exact(h.above_median_bytes),
            units::bytes_exact(h.median_peak_bytes)
        )?;
    }
    let Some(sites) = &report.sites else {
        return Ok(());
    };
    let total = report.sites_total.unwrap_or(0);
    let (one, many) = if tensors {
        ("tensor", "tensors")
    } else {
        ("allocation", "allocations")
    };
    if report.command == Which::Leaks {
        // Leaked is live at the end unless tensors are counted or a teardown freed some.
        let when = if tensors || report.leaked_bytes != report.live_bytes_at_end {
            "leaked, all traces (live at the end, or freed only by the interpreter's teardown)"
        } else {
            "live at the end, all traces"
        };
        writeln!(
            out,
            "\n{} in {} {when}, from {}",
            units::bytes_exact(report.leaked_bytes),
            units::plural(report.leaked_count, one, many),
            units::plural(total, "call site", "call sites")
        )?;
        let leaked = (report.leaked_bytes, report.leaked_count);
        let workspaces = (report.workspaces_bytes, report.workspaces_count);
        if let Some(line) = workspaces_line(leaked, workspaces, (one, many)) {
            writeln!(out, "{line}")?;
        }
    } else {
        writeln!(
            out,
            "\ncall sites at the peaks (bytes summed over the traces): {total}"
        )?;
    }
    if (sites.len() as u64) < total {
        writeln!(out, "showing the {} largest", sites.len())?;
    }
    for (n, s) in sites.iter().enumerate() {
        writeln!(
            out,
            "\n#{} {} in {}{}, {}",
            n + 1,
            units::bytes_exact(s.bytes),
            units::plural(s.count, one, many),
            if s.kind == "tensor" {
                String::new()
            } else {
                format!(" ({} memory)", s.kind)
            },
            names.list(&s.trace_indexes)
        )?;
        write_frames(out, &s.frames, "    ")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_ranges_and_long_lists_are_cut() {
        assert_eq!(ranges(&[0, 1, 2, 3, 5, 7, 8]), "0-3, 5, 7, 8");
        assert_eq!(ranges(&[4]), "4");
        let many: Vec<u64> = (0..40).step_by(2).collect();
        assert_eq!(ranges(&many), "0, 2, 4, 6, 8, 10, 12, 14, ... and 12 more");
        let pids: Vec<String> = (100..301).map(|p| p.to_string()).collect();
        assert_eq!(
            shortened(&pids),
            "100, 101, 102, 103, 104, 105, 106, 107, ... and 193 more"
        );
    }
}
