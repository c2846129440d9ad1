//! `gpumemprof report TRACE -o FILE.html`: the one-file HTML report (views/html.rs), built
//! from one pass over the trace: the timeline, live memory by stack at the peak and at the
//! first out-of-memory failure, and the replay the text reports use.

use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::Output;
use crate::error::Error;
use crate::input::warn_all;
use crate::report::teardown::Teardown;
use crate::report::{leaks, summary, TraceInfo};
use crate::snapshot::{Moment, SnapshotBuilder};
use crate::symbolize::Symbolizer;
use crate::timeline::TimelineBuilder;
use crate::views::chart;
use crate::views::flamegraph::{folded, svg, Style};
use crate::views::html::{inline_svg, render, Page};
use gpumemprof_format::header::api_names;

/// Rows of the "top sites at the peak", leak and out-of-memory tables.
const TOP_SITES: usize = 10;
const TOP_LEAKS: usize = 20;
const TOP_OOMS: usize = 20;

/// inferno's zoom and search controls: they need its script, which the page leaves out.
const FLAMEGRAPH_CONTROLS: &[&str] = &["unzoom", "search", "matched", "details"];

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The trace file written by the shim.
    pub trace: PathBuf,
    #[command(flatten)]
    pub output: Output,
}

pub fn run(args: &Args) -> Result<(), Error> {
    args.output.check(&args.trace)?;
    let mut timeline = TimelineBuilder::new();
    let mut peak = SnapshotBuilder::new(Moment::Peak, None);
    let mut first_oom = SnapshotBuilder::new(Moment::Oom(1), None);
    let loaded = crate::input::load_keeping_exit(
        &args.trace,
        &mut [&mut timeline, &mut peak, &mut first_oom],
    )?;
    let mut t = timeline.finish();
    let peak = peak.finish().map_err(Error::Failed)?;
    // No failure in the trace: no section for it.
    let first_oom = first_oom.finish().ok();

    let r = &loaded.replayed;
    let info = TraceInfo::new(&args.trace, &loaded);
    let oom = super::oom::explain(&args.trace, r, crate::report::oom::DEFAULT_FRAMES)?;
    let remedies = (oom.as_ref())
        .filter(|o| o.pytorch.is_some())
        .and_then(|_| super::oom::remedies_of(&args.trace));
    let mut sym = Symbolizer::of(&loaded);
    crate::kinds::timeline::add(&mut t, &args.trace, &loaded, &mut sym);
    let mut summary = summary::build(info.clone(), r);
    summary::add_kinds(&mut summary, &crate::kinds::at_peaks(r, &mut sym));
    let level = crate::report::level::MemoryLevel::of(r, None);
    let teardown = Teardown::find(&r.exit_tail, &mut sym);
    let leaks = leaks::build(
        info.clone(),
        r,
        &mut sym,
        TOP_LEAKS,
        0,
        level,
        teardown.as_ref(),
    );
    let apis = api_names(&loaded.header);

    let fail = |e: String| Error::Failed(e);
    let timeline_svg = chart::svg(&t, &super::timeline::title(&info, &t)).map_err(fail)?;
    let timeline_svg = inline_svg(&timeline_svg, "tl-", &[]).map_err(fail)?;
    let mut flamegraph = |snap: &crate::snapshot::Snapshot, prefix: &str| {
        let lines = folded(snap, &mut sym, false);
        let style = Style {
            title: format!("Live GPU memory {}", snap.describe()),
            subtitle: Some(super::flamegraph::subtitle(&loaded, false)),
            inverted: false,
            javascript: false,
        };
        let bytes = svg(&lines, &style).map_err(Error::Output)?;
        inline_svg(
            &String::from_utf8_lossy(&bytes),
            prefix,
            FLAMEGRAPH_CONTROLS,
        )
        .map_err(fail)
    };
    let peak_svg = flamegraph(&peak, "fgp-")?;
    let oom_svg = match &first_oom {
        Some(s) => Some(flamegraph(s, "fgo-")?),
        None => None,
    };
    let peak_sites: Vec<_> = peak
        .sites
        .iter()
        .take(TOP_SITES)
        .map(|s| (*s, sym.stack(s.stack, 0)))
        .collect();
    let ooms: Vec<_> = t
        .ooms
        .iter()
        .take(TOP_OOMS)
        .map(|o| (*o, sym.stack(o.stack, 0)))
        .collect();
    warn_all(sym.take_warnings());

    let page = Page {
        trace: &info,
        summary: &summary,
        leaks: &leaks,
        timeline: &t,
        timeline_svg: &timeline_svg,
        peak: &peak,
        peak_flamegraph_svg: &peak_svg,
        peak_sites: &peak_sites,
        ooms: &ooms,
        oom_flamegraph: first_oom.as_ref().zip(oom_svg.as_deref()),
        oom_verdict: oom.as_ref().map(|o| o.verdict.as_str()),
        oom_remedies: remedies.as_ref().map(|r| r.verdict.as_str()),
        apis: &apis,
    };
    let html = render(&page);
    args.output.write(html.as_bytes())?;
    args.output.done(&format!(
        "HTML report, {} KiB, one file: open it in a browser",
        html.len().div_ceil(1024)
    ));
    Ok(())
}
