//! `gpumemprof analyze`: its flags; the report and its heuristics are `report/analyze`.

use crate::report::analyze::{build, write_text, Analysis};
use crate::report::level::MemoryLevel;
use crate::report::teardown::Teardown;
use crate::report::TraceInfo;
use crate::symbolize::Symbolizer;
use crate::units;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The trace file written by the shim.
    pub trace: std::path::PathBuf,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Stack frames shown per finding (0: all).
    #[arg(long, value_name = "N", default_value_t = crate::report::DEFAULT_FRAMES)]
    pub frames: usize,
    /// Exit 3 if there is any finding of severity "warning".
    #[arg(long)]
    pub fail_on_findings: bool,
    /// Read a framework allocator's tensors (the default when the trace has them) or the
    /// segments allocated from CUDA, HIP or the driver.
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub level: Option<MemoryLevel>,
}

pub fn run(args: &Args) -> Result<(), crate::error::Error> {
    use super::common;
    let mut analysis = Analysis::new();
    let loaded = crate::input::load_keeping_exit(&args.trace, &mut [&mut analysis])?;
    let r = &loaded.replayed;
    let oom = super::oom::explain(&args.trace, r, args.frames)?;
    let mut sym = Symbolizer::of(&loaded);
    let teardown = Teardown::find(&r.exit_tail, &mut sym);
    let report = build(
        TraceInfo::new(&args.trace, &loaded),
        r,
        analysis,
        &mut sym,
        args.frames,
        oom.as_ref(),
        MemoryLevel::of(r, args.level),
        teardown.as_ref(),
    );
    for w in sym.take_warnings() {
        crate::term::warn(&w);
    }
    common::emit(args.json, &report, write_text)?;
    let warnings = report.warnings() as u64;
    if args.fail_on_findings && warnings > 0 {
        return Err(crate::error::Error::Findings(format!(
            "{} of severity warning (--fail-on-findings)",
            units::plural(warnings, "finding", "findings")
        )));
    }
    Ok(())
}
