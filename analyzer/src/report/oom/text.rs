//! The text form of `gpumemprof oom`: one screen (about 40 lines with the default
//! `--top 5 --frames 5`). The verdict comes first; each list entry is one line whose call
//! site is a chain of its innermost frames.

use std::io::{self, Write};

use super::{short_frame, OomReport};
use crate::report::write_frames;
use crate::symbolize::Frame;
use crate::units;

/// Frames in the one-line chain of a list entry (at most `--frames`).
const CHAIN_FRAMES: usize = 3;

/// `f (file.c:12) < g (file.c:40) < main (file.c:99)`, innermost first, from the site on
/// (the framework's frames above the user's line are in the JSON), after the op that made
/// the tensor, if any (`aten::relu < forward (train.py:12) < ...`).
fn chain(stack: u64, all: &[Frame]) -> String {
    let frames = crate::report::level::starting_at_site(all);
    if frames.is_empty() {
        return if stack == 0 {
            "(no stack captured)".into()
        } else {
            format!("(stack {stack})")
        };
    }
    let op = crate::report::level::op_above_site(all).map(short_frame);
    let mut parts: Vec<String> = op.into_iter().collect();
    parts.extend(frames.iter().take(CHAIN_FRAMES).map(short_frame));
    if frames.len() > CHAIN_FRAMES {
        parts.push("...".into());
    }
    parts.join(" < ")
}

/// ` of aten::relu` where a site's tensors were made by an op above the user's line.
fn of_op(frames: &[Frame]) -> String {
    crate::report::level::op_above_site(frames)
        .and_then(|f| f.function.as_deref())
        .map_or_else(String::new, |op| format!(" of {op}"))
}

/// `alloc`/`allocs` for allocations (the list's narrow column), tensors as they are.
fn short(word: &'static str) -> &'static str {
    match word {
        "allocation" => "alloc",
        "allocations" => "allocs",
        w => w,
    }
}

pub fn write_text(r: &OomReport, out: &mut dyn Write) -> io::Result<()> {
    let b = units::bytes;
    let (Some(f), Some(live)) = (&r.failure, &r.live) else {
        // One line: nothing to explain.
        let other = r.failure_counts.other_failed_allocations;
        return if other > 0 {
            writeln!(
                out,
                "no out-of-memory failure in {} ({} failed with other errors)",
                r.trace.path,
                units::plural(other, "allocation call", "allocation calls")
            )
        } else {
            writeln!(out, "no out-of-memory failure in {}", r.trace.path)
        };
    };
    r.trace.write_text(out)?;
    writeln!(out, "{}", r.verdict)?;
    if let Some(t) = &r.pytorch {
        if let Some(m) = &t.message {
            // Its closing advice depends on the version: say so when it is not known.
            let words = if t.torch_version.is_some() {
                ""
            } else {
                " (as torch 2.15 words it)"
            };
            writeln!(out, "PyTorch's error{words}: CUDA out of memory. {m}")?;
        }
        for (n, s) in t.sites.iter().enumerate() {
            writeln!(
                out,
                "  tensors #{} {} in {}{}{} (stack {})",
                n + 1,
                units::bytes_exact(s.bytes),
                units::plural(s.count, "tensor", "tensors"),
                of_op(&s.frames),
                crate::report::level::from_site(s.site.as_ref(), &[]),
                s.stack_id
            )?;
        }
    }
    writeln!(out)?;

    let c = &r.failure_counts;
    let not_kept = c.out_of_memory.saturating_sub(c.kept);
    let more = if c.kept > 1 {
        "; --index N shows another"
    } else {
        ""
    };
    let dropped = if not_kept > 0 {
        format!(", {not_kept} more not kept")
    } else {
        String::new()
    };
    writeln!(
        out,
        "failure {} of {} out of memory ({} transient, {} final{dropped}{more})",
        f.index + 1,
        c.kept,
        c.transient,
        c.r#final
    )?;
    let place = if f.kind == "pinned_host" {
        String::new()
    } else {
        format!(" on device {}", units::device(f.device))
    };
    writeln!(
        out,
        "  {} of {} {} memory{place} at {}, thread {}, error {} (stack {}):",
        f.api,
        units::bytes_exact(f.size),
        f.kind,
        units::secs(f.time_ns),
        f.tid,
        f.result,
        f.stack_id
    )?;
    let from = crate::report::level::from_site(f.site.as_ref(), &f.frames);
    if !from.is_empty() {
        writeln!(out, "   {from}")?;
    }
    write_frames(out, &f.frames, "      ")?;
    if let Some(a) = &f.attempts {
        writeln!(
            out,
            "  before it, on this thread: {} of {} failed (the allocator's attempts: part of this error)",
            units::plural(a.count, &format!("{} call", a.api), &format!("{} calls", a.api)),
            b(a.size)
        )?;
    }
    if f.kind != "pinned_host" {
        match (f.mem_free_bytes, f.mem_total_bytes) {
            (Some(free), Some(total)) => writeln!(
                out,
                "  device {}: {} free of {} right after the failure",
                units::device(f.device),
                b(free),
                b(total)
            )?,
            _ => writeln!(
                out,
                "  device {}: free memory not recorded",
                units::device(f.device)
            )?,
        }
    }
    if let Some(n) = &r.nvml {
        writeln!(
            out,
            "  NVML {}{}: this process used {} (hooks tracked {}, {} untracked), other processes {}",
            if n.at_failure { "at the failure, " } else { "at " },
            units::secs(n.time_ns),
            b(n.process_used_bytes),
            b(n.tracked_bytes),
            b(n.untracked_bytes),
            b(n.other_processes_bytes)
        )?;
    }
    match &f.retry {
        None => writeln!(
            out,
            "  final: no later allocation of {} or more of this memory succeeded, on thread {} or from stack {}",
            b(f.size),
            f.tid,
            f.stack_id
        )?,
        Some(retry) => {
            let who = if retry.same_thread {
                "same thread".to_string()
            } else {
                format!("thread {}, same stack", retry.tid)
            };
            writeln!(
                out,
                "  transient: {} of {} succeeded {} later ({who})",
                retry.api,
                b(retry.size),
                units::secs(retry.time_ns.saturating_sub(f.time_ns))
            )?
        }
    }
    if let Some(hint) = &r.hint {
        writeln!(out, "  hint: {hint}")?;
    }

    let kinds: Vec<String> = live
        .by_kind
        .iter()
        .map(|k| format!("{} {}", k.kind, b(k.bytes)))
        .collect();
    // A refused tensor competes with tensors: counted as such.
    let (one, many) = crate::report::level::count_words(f.kind);
    writeln!(
        out,
        "\nlive at the failure: {} in {} ({}), {}",
        units::bytes_exact(live.bytes),
        units::plural(live.count, one, many),
        kinds.join(", "),
        units::plural(live.sites_total, "call site", "call sites")
    )?;
    for s in &live.sites {
        writeln!(
            out,
            "  {:>10}  {:>9}  {}",
            b(s.bytes),
            units::plural(s.count, short(one), short(many)),
            chain(s.stack_id, &s.frames)
        )?;
    }
    let shown = live
        .sites
        .iter()
        .fold(0u64, |n, s| n.saturating_add(s.bytes));
    let hidden = live.sites_total.saturating_sub(live.sites.len() as u64);
    if hidden > 0 {
        writeln!(
            out,
            "  {:>10} in {} more",
            b(live.bytes.saturating_sub(shown)),
            units::plural(hidden, "site", "sites")
        )?;
    }
    if !live.largest.is_empty() {
        writeln!(out, "\nlargest live {many}:")?;
        for a in &live.largest {
            writeln!(
                out,
                "  {:>10}  {:<11} at {:>9}  {}",
                b(a.size),
                a.kind,
                units::secs(a.time_ns),
                chain(a.stack_id, &a.frames)
            )?;
        }
    }
    if let Some(g) = &r.growth {
        let sign = if g.growth_bytes < 0 { "-" } else { "+" };
        writeln!(
            out,
            "\nin the {} before the failure: {} -> {} ({sign}{})",
            units::secs(g.window_ns),
            b(g.bytes_at_start),
            b(g.bytes_at_failure),
            b(g.growth_bytes.unsigned_abs())
        )?;
        if g.sites.is_empty() {
            writeln!(out, "  no call site grew")?;
        }
        for s in &g.sites {
            writeln!(
                out,
                "  {:>11}  ({} -> {})  {}",
                format!("+{}", b(s.growth_bytes.unsigned_abs())),
                b(s.bytes_at_start),
                b(s.bytes_at_failure),
                chain(s.stack_id, &s.frames)
            )?;
        }
    }
    Ok(())
}
