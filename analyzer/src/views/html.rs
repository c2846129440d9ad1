//! The one-file HTML report (`gpumemprof report`): summary, timeline, flamegraph and top
//! sites at the peak, leaks, and out-of-memory failures when there are any. Everything is
//! inline (CSS, SVG; no script): it opens offline and never fetches anything, so it can be
//! attached to a bug report or archived with the job's logs.
//!
//! SVGs from plotters and inferno are inlined through `inline_svg`, which keeps the drawing
//! and drops what a standalone SVG document carries but an HTML page must not: the XML
//! declaration and doctype, comments, scripts and style sheets (inferno's would restyle the
//! whole page), namespace declarations (the HTML parser knows SVG), and ids that could clash.

use std::collections::HashMap;
use std::fmt::Write;

use super::flamegraph::{root_label, xml_escape as esc};
pub use super::inline_svg::inline_svg;
use crate::report::leaks::LeaksReport;
use crate::report::summary::{Counts, SummaryReport};
use crate::report::TraceInfo;
use crate::snapshot::{Snapshot, StackBytes};
use crate::symbolize::Frame;
use crate::timeline::{OomEvent, Timeline};
use crate::units;

/// Everything the page shows, computed by the caller.
pub struct Page<'a> {
    pub trace: &'a TraceInfo,
    pub summary: &'a SummaryReport,
    pub leaks: &'a LeaksReport,
    pub timeline: &'a Timeline,
    pub timeline_svg: &'a str,
    pub peak: &'a Snapshot,
    pub peak_flamegraph_svg: &'a str,
    /// The largest sites at the peak, with their frames (innermost first).
    pub peak_sites: &'a [(StackBytes, Vec<Frame>)],
    /// The first out-of-memory failures, with their frames.
    pub ooms: &'a [(OomEvent, Vec<Frame>)],
    /// Live memory at the first out-of-memory failure, and its flamegraph.
    pub oom_flamegraph: Option<(&'a Snapshot, &'a str)>,
    /// The `oom` report's verdict on the failure it explains (the first final one).
    pub oom_verdict: Option<&'a str>,
    /// For a PyTorch out-of-memory error, what would have avoided it (`oom`'s remedies).
    pub oom_remedies: Option<&'a str>,
    pub apis: &'a HashMap<u16, String>,
}

const CSS: &str = r#"
:root { --fg:#1d2330; --muted:#5b6577; --line:#dde2ea; --bg:#f6f7f9; --accent:#1f77b4; --bad:#c62828; }
* { box-sizing:border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif; color:var(--fg); background:var(--bg); }
header { background:#1d2330; color:#fff; padding:18px 28px; }
header h1 { margin:0 0 4px; font-size:22px; }
header .meta { color:#c9d1de; font-size:13px; }
header code { color:#fff; }
nav { padding:8px 28px; background:#fff; border-bottom:1px solid var(--line); position:sticky; top:0; z-index:1; }
nav a { margin-right:18px; color:var(--accent); text-decoration:none; font-weight:600; }
main { padding:8px 28px 40px; max-width:1480px; }
section { background:#fff; border:1px solid var(--line); border-radius:6px; padding:16px 20px; margin:18px 0; }
h2 { margin:0 0 10px; font-size:18px; }
.note { color:var(--muted); margin:4px 0 10px; }
.warn { color:var(--bad); font-weight:600; }
.cards { display:flex; flex-wrap:wrap; gap:12px; margin-bottom:14px; }
.card { border:1px solid var(--line); border-radius:6px; padding:10px 14px; min-width:190px; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card .value { font-size:22px; font-weight:650; }
.card .sub { color:var(--muted); font-size:12px; }
.card.bad .value { color:var(--bad); }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { color:var(--muted); font-weight:600; background:#fafbfc; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
tr.total td { font-weight:650; }
ol.frames { margin:0; padding-left:18px; font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace; }
ol.frames li.inlined { color:var(--muted); }
details.more summary { cursor:pointer; color:var(--accent); font-size:12px; padding-left:18px; }
.figure { overflow-x:auto; }
.figure svg { width:100%; height:auto; display:block; }
/* The chart's text is sized for its 1400 pixels: never shrunk below legible, scrolled instead. */
.figure.chart svg { min-width:1150px; }
.flame text { font-family:Verdana,"DejaVu Sans",sans-serif; font-size:12px; }
.flame [id$="-title"] { text-anchor:middle; font-size:17px; }
.flame [id$="-subtitle"] { text-anchor:middle; fill:#5b6577; }
.flame [id$="-frames"] > g:hover > rect { stroke:#000; stroke-width:0.7; }
footer { color:var(--muted); font-size:12px; padding:0 28px 24px; }
"#;

/// Frames shown per stack in the tables.
const TABLE_FRAMES: usize = 8;

pub fn render(p: &Page) -> String {
    let mut h = String::with_capacity(64 * 1024 + p.timeline_svg.len() * 2);
    let t = p.trace;
    let program = if t.argv.is_empty() {
        "(unknown program)".to_string()
    } else {
        t.argv.join(" ")
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>GPU memory report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(&program)
    );
    header(&mut h, p, &program);
    // A run that died of out-of-memory reads its failure first.
    let oom = p.timeline.oom_count > 0;
    h.push_str("<nav><a href=\"#summary\">Summary</a>");
    if oom {
        h.push_str("<a href=\"#oom\">Out of memory</a>");
    }
    h.push_str(
        "<a href=\"#timeline\">Timeline</a>\
         <a href=\"#flamegraph\">Flamegraph at the peak</a><a href=\"#peak-sites\">Top sites at the peak</a>\
         <a href=\"#leaks\">Leaks</a>",
    );
    h.push_str("</nav>\n<main>\n");
    summary(&mut h, p);
    if oom {
        ooms(&mut h, p);
    }
    let _ = write!(
        h,
        "<section id=\"timeline\"><h2>Timeline</h2>\
         <p class=\"note\">Live bytes over time per device and memory kind (a PyTorch job's \
         tensors stacked by kind of memory); dashed: what NVML measured for the process (when \
         the trace has samples) and the device's capacity; red lines: allocations that failed \
         for lack of memory. <code>gpumemprof timeline TRACE -o t.svg --from S --to S</code> \
         zooms in.</p><div class=\"figure chart\">{}</div></section>",
        p.timeline_svg
    );
    let _ = write!(
        h,
        "<section id=\"flamegraph\"><h2>Flamegraph at the peak</h2>\
         <p class=\"note\">Live memory {}, by call stack: each box is as wide as the bytes its \
         stack held; callers below, the allocating function on top. Hover a box for its exact \
         bytes.</p><div class=\"figure flame\">{}</div></section>",
        esc(&p.peak.describe()),
        p.peak_flamegraph_svg
    );
    peak_sites(&mut h, p);
    leaks(&mut h, p);
    let _ = write!(
        h,
        "</main>\n<footer>Written by gpumemprof {} from <code>{}</code>. One file: it needs no \
         network access. Field meanings: docs/REPORTS.md.</footer>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        esc(&t.path)
    );
    h
}

fn header(h: &mut String, p: &Page, program: &str) {
    let t = p.trace;
    let pid = t.pid.map_or_else(|| "?".to_string(), |p| p.to_string());
    let ending = match (t.died_of(), t.complete) {
        (Some(_), _) => format!("{} (live at end means live when it died)", t.ending_words()),
        (None, true) => t.ending_words(),
        (None, false) => {
            "did NOT exit cleanly (live at end means live when the trace stopped)".to_string()
        }
    };
    let _ = write!(
        h,
        "<header><h1>GPU memory report</h1><div class=\"meta\"><code>{}</code> (pid {pid}) \
         &middot; trace <code>{}</code> &middot; {} &middot; {} events &middot; process {ending}</div>",
        esc(program),
        esc(&t.path),
        units::secs(t.duration_ns),
        t.events
    );
    if t.dropped > 0 {
        let _ = write!(
            h,
            "<div class=\"meta\"><strong>{} events were dropped by the shim: {}.</strong></div>",
            t.dropped,
            crate::input::LOSS_BOTH_WAYS
        );
    }
    if t.truncated {
        h.push_str(
            "<div class=\"meta\"><strong>The trace file is cut short: only its complete blocks \
             were read.</strong></div>",
        );
    }
    if let Some(words) = t.damage_words() {
        let _ = write!(
            h,
            "<div class=\"meta\"><strong>{}.</strong></div>",
            esc(&words)
        );
    }
    h.push_str("</header>\n");
}

fn card(h: &mut String, label: &str, value: &str, sub: &str, bad: bool) {
    let _ = write!(
        h,
        "<div class=\"card{}\"><div class=\"label\">{}</div><div class=\"value\">{}</div>\
         <div class=\"sub\">{}</div></div>",
        if bad { " bad" } else { "" },
        esc(label),
        esc(value),
        esc(sub)
    );
}

fn summary(h: &mut String, p: &Page) {
    let s = p.summary;
    let c = &s.totals;
    h.push_str("<section id=\"summary\"><h2>Summary</h2><div class=\"cards\">");
    // A PyTorch job leads with its tensors (PyTorch's allocated), reserved beside them.
    match s.allocators.iter().max_by_key(|a| a.allocated_peak_bytes) {
        Some(a) => card(
            h,
            &format!("peak allocated, GPU {}", a.device),
            &units::bytes(a.allocated_peak_bytes),
            &format!(
                "{} B in tensors; peak reserved {}",
                a.allocated_peak_bytes,
                units::bytes(a.reserved_peak_bytes)
            ),
            false,
        ),
        None => card(
            h,
            "peak (all memory)",
            &units::bytes(c.peak_bytes),
            &format!("{} B at {}", c.peak_bytes, units::secs(c.peak_time_ns)),
            false,
        ),
    }
    let l = p.leaks;
    let (one, many) = l.level.count_words();
    let freed_at_exit = l
        .teardown
        .as_ref()
        .map(|t| format!("; {} freed only at exit", units::bytes(t.freed_bytes)))
        .unwrap_or_default();
    // The program's own leak: the workspaces a framework keeps to the end are said apart.
    let own = l.total_bytes.saturating_sub(l.workspaces_bytes);
    let workspaces = if l.workspaces_count > 0 {
        format!(
            "; besides, {} of library workspaces kept for the process's life",
            units::bytes(l.workspaces_bytes)
        )
    } else {
        String::new()
    };
    card(
        h,
        "leaked",
        &units::bytes(own),
        &format!(
            "{own} B in {}{freed_at_exit}{workspaces}",
            units::plural(l.total_count.saturating_sub(l.workspaces_count), one, many)
        ),
        own > 0,
    );
    card(
        h,
        "allocations",
        &c.allocations.to_string(),
        &format!(
            "{}, {} allocated",
            units::plural(c.frees, "free", "frees"),
            units::bytes(c.bytes_allocated)
        ),
        false,
    );
    card(
        h,
        "out of memory",
        &s.out_of_memory_errors.to_string(),
        &format!("{} failed allocation calls in all", s.failed_allocations),
        s.out_of_memory_errors > 0,
    );
    if let Some(n) = s.nvml.iter().max_by_key(|n| n.peak_used_bytes) {
        card(
            h,
            &format!("NVML peak, GPU {}", n.device),
            &units::bytes(n.peak_used_bytes),
            &if n.missed_peak() {
                format!(
                    "no sample near the hooks' peak of {}",
                    units::bytes(n.tracked_peak_bytes)
                )
            } else {
                format!(
                    "{} not seen by the hooks",
                    units::bytes(n.untracked_at_peak_bytes)
                )
            },
            false,
        );
    }
    h.push_str("</div>");
    super::kinds_table::html(h, &s.allocators);
    if s.rows.is_empty() {
        h.push_str("<p>No allocations recorded.</p>");
    } else {
        h.push_str(
            "<table><tr><th>device</th><th>kind</th><th class=\"num\">allocations</th>\
             <th class=\"num\">frees</th><th class=\"num\">allocated</th><th class=\"num\">freed</th>\
             <th class=\"num\">peak</th><th class=\"num\">peak at</th><th class=\"num\">live at end</th>\
             <th class=\"num\">(count)</th><th class=\"num\">failed</th></tr>",
        );
        for r in &s.rows {
            count_row(h, &units::device(r.device), r.kind, &r.counts, "");
        }
        if s.rows.len() > 1 {
            count_row(h, "all", "memory", &s.totals, " class=\"total\"");
        }
        h.push_str("</table>");
    }
    let _ = write!(
        h,
        "<p class=\"note\">Unknown frees {}, failed frees {}, failed allocations {}. Address \
         reservations and VMM handles are listed but never counted as memory.</p>",
        s.unknown_frees, s.failed_frees, s.failed_allocations
    );
    super::libraries_table::html(h, &s.libraries_at_peak);
    if !s.nvml.is_empty() {
        h.push_str(
            "<table><tr><th>NVML device</th><th class=\"num\">samples</th>\
             <th class=\"num\">most used by the process</th><th class=\"num\">at</th>\
             <th class=\"num\">tracked then</th><th class=\"num\">not seen by the hooks</th>\
             <th class=\"num\">device memory</th></tr>",
        );
        for n in &s.nvml {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>",
                n.device,
                n.samples,
                units::bytes(n.peak_used_bytes),
                units::secs(n.peak_time_ns),
                units::bytes(n.tracked_at_peak_bytes),
                if n.missed_peak() {
                    "unknown (no sample near the peak)".to_string()
                } else {
                    units::bytes(n.untracked_at_peak_bytes)
                },
                units::bytes(n.device_total_bytes)
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</section>\n");
}

fn count_row(h: &mut String, device: &str, kind: &str, c: &Counts, class: &str) {
    let _ = write!(
        h,
        "<tr{class}><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\" title=\"{} B\">{}</td>\
         <td class=\"num\">{}</td><td class=\"num\" title=\"{} B\">{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td></tr>",
        esc(device),
        esc(kind),
        c.allocations,
        c.frees,
        units::bytes(c.bytes_allocated),
        units::bytes(c.bytes_freed),
        c.peak_bytes,
        units::bytes(c.peak_bytes),
        units::secs(c.peak_time_ns),
        c.live_bytes_at_end,
        units::bytes(c.live_bytes_at_end),
        c.live_allocations_at_end,
        c.failed_allocations
    );
}

/// A stack as a list: its first `TABLE_FRAMES` frames (Python first, see `glue`), the rest
/// behind a `<details>` that expands in place (no script).
fn frames(h: &mut String, frames: &[Frame]) {
    if frames.is_empty() {
        h.push_str("<span class=\"note\">(no stack captured)</span>");
        return;
    }
    let items = |h: &mut String, frames: &[Frame]| {
        for f in frames {
            let _ = write!(
                h,
                "<li{}>{}</li>",
                if f.inlined { " class=\"inlined\"" } else { "" },
                esc(&f.describe())
            );
        }
    };
    let (shown, rest) = frames.split_at(frames.len().min(TABLE_FRAMES));
    h.push_str("<ol class=\"frames\">");
    items(h, shown);
    h.push_str("</ol>");
    if !rest.is_empty() {
        let _ = write!(
            h,
            "<details class=\"more\"><summary>{} more frame{}</summary>\
             <ol class=\"frames\" start=\"{}\">",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" },
            TABLE_FRAMES + 1
        );
        items(h, rest);
        h.push_str("</ol></details>");
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

fn peak_sites(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section id=\"peak-sites\"><h2>Top sites at the peak</h2><p class=\"note\">Live memory \
         {}: the call stacks that held the most, innermost frame first.</p>",
        esc(&p.peak.describe())
    );
    if p.peak_sites.is_empty() {
        h.push_str("<p>Nothing was live.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th class=\"num\">#</th><th class=\"num\">bytes</th><th class=\"num\">share</th>\
         <th class=\"num\">allocations</th><th>where</th><th>stack</th></tr>",
    );
    for (n, (site, f)) in p.peak_sites.iter().enumerate() {
        let _ = write!(
            h,
            "<tr><td class=\"num\">{}</td><td class=\"num\" title=\"{} B\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>",
            n + 1,
            site.bytes,
            units::bytes(site.bytes),
            percent(site.bytes, p.peak.total_bytes),
            site.count,
            esc(&root_label(site.device, site.kind))
        );
        frames(h, f);
        h.push_str("</td></tr>");
    }
    h.push_str("</table></section>\n");
}

fn leaks(h: &mut String, p: &Page) {
    let l = p.leaks;
    h.push_str("<section id=\"leaks\"><h2>Leaks</h2>");
    let when = match (l.trace.died_of(), l.trace.complete) {
        (Some(sig), _) => {
            format!("when the process died (ended by {sig}: this is not necessarily leaked)")
        }
        (None, true) => match &l.teardown {
            Some(t) => format!(
                "when the program's code finished ({} of it freed only afterwards, by the \
                 interpreter's teardown: {})",
                units::bytes(t.freed_bytes),
                t.function
            ),
            None => "at exit".to_string(),
        },
        (None, false) => "when the trace stopped (the process did not exit cleanly: this is not \
                          necessarily leaked)"
            .to_string(),
    };
    let (one, many) = l.level.count_words();
    let _ = write!(
        h,
        "<p class=\"note\">{} in {} live {}, grouped by call stack and kind, largest first{}.</p>",
        esc(&units::bytes_exact(l.total_bytes)),
        units::plural(l.total_count, one, many),
        esc(&when),
        if l.workspaces_count > 0 {
            format!(
                "; the last {} ({}) are library workspaces the framework keeps for the \
                 process's life",
                units::plural(l.workspaces_count, one, many),
                esc(&units::bytes(l.workspaces_bytes))
            )
        } else {
            String::new()
        }
    );
    if l.groups.is_empty() {
        h.push_str("<p>Nothing was live at the end.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th class=\"num\">#</th><th class=\"num\">bytes</th><th class=\"num\">allocations</th>\
         <th>kind</th><th>devices</th><th class=\"num\">allocated</th><th>stack</th></tr>",
    );
    for (n, g) in l.groups.iter().enumerate() {
        let devices: Vec<String> = g.devices.iter().map(|d| units::device(*d)).collect();
        let when = units::span_column(g.first_time_ns, g.last_time_ns);
        let _ = write!(
            h,
            "<tr><td class=\"num\">{}</td><td class=\"num\" title=\"{} B\">{}</td>\
             <td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>",
            n + 1,
            g.bytes,
            esc(&units::bytes_exact(g.bytes)),
            g.count,
            g.kind,
            devices.join(", "),
            when
        );
        frames(h, &g.frames);
        h.push_str("</td></tr>");
    }
    h.push_str("</table>");
    if l.groups.iter().map(|g| g.count).sum::<u64>() < l.total_count {
        let _ = write!(
            h,
            "<p class=\"note\">The {} largest groups are shown; <code>gpumemprof leaks TRACE</code> \
             lists them all.</p>",
            l.groups.len()
        );
    }
    h.push_str("</section>\n");
}

fn ooms(h: &mut String, p: &Page) {
    let t = p.timeline;
    let _ = write!(
        h,
        "<section id=\"oom\"><h2>Out of memory</h2><p class=\"warn\">{} returned \
         out-of-memory (error 2).</p>",
        esc(&units::plural(
            t.oom_count,
            "allocation call",
            "allocation calls"
        ))
    );
    if let Some(verdict) = p.oom_verdict {
        let _ = write!(
            h,
            "<p class=\"verdict\"><strong>{}</strong></p><p class=\"note\">For what held the \
             memory, what grew before the failure and the failure in PyTorch's terms: \
             <code>gpumemprof oom {}</code></p>",
            esc(verdict),
            esc(&p.trace.path)
        );
    }
    if let Some(remedies) = p.oom_remedies {
        let _ = write!(
            h,
            "<p class=\"remedies\">{} <span class=\"note\">(the recorded tensors replayed \
             through PyTorch's allocator policy; try others with <code>gpumemprof whatif {}</code>)\
             </span></p>",
            esc(remedies),
            esc(&p.trace.path)
        );
    }
    h.push_str(
        "<table><tr><th class=\"num\">#</th><th class=\"num\">at</th><th>call</th>\
         <th class=\"num\">asked for</th><th>where</th><th class=\"num\">free / total then</th><th>stack</th></tr>",
    );
    for (n, (o, f)) in p.ooms.iter().enumerate() {
        let api = p
            .apis
            .get(&o.api)
            .cloned()
            .unwrap_or_else(|| format!("api {}", o.api));
        let free = if o.mem_total > 0 {
            format!(
                "{} / {}",
                units::bytes(o.mem_free),
                units::bytes(o.mem_total)
            )
        } else {
            "unknown".to_string()
        };
        let _ = write!(
            h,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td class=\"num\" title=\"{} B\">{}</td><td>{}</td><td class=\"num\">{}</td><td>",
            n + 1,
            units::secs(o.time_ns),
            esc(&api),
            o.size,
            units::bytes(o.size),
            esc(&root_label(o.device, o.kind)),
            free
        );
        frames(h, f);
        h.push_str("</td></tr>");
    }
    h.push_str("</table>");
    if (p.ooms.len() as u64) < t.oom_count {
        let _ = write!(
            h,
            "<p class=\"note\">The first {} are shown.</p>",
            p.ooms.len()
        );
    }
    if let Some((snap, svg)) = p.oom_flamegraph {
        let _ = write!(
            h,
            "<h2>Live memory at the first failure</h2><p class=\"note\">Live memory {}.</p>\
             <div class=\"figure flame\">{}</div>",
            esc(&snap.describe()),
            svg
        );
    }
    h.push_str("</section>\n");
}
