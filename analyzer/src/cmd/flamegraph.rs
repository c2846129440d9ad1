//! `gpumemprof flamegraph TRACE -o FILE.svg`: live GPU memory by call stack at the peak
//! (default), at the end (`--leaks`), at an out-of-memory failure (`--oom[=N]`) or at a
//! time (`--at SECONDS`), drawn by inferno; one root box per device and memory kind.

use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::{load, snapshot, MomentArgs, Output};
use crate::error::Error;
use crate::input::warn_all;
use crate::symbolize::Symbolizer;
use crate::views::flamegraph::{folded, svg, Style};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The trace file written by the shim.
    pub trace: PathBuf,
    #[command(flatten)]
    pub output: Output,
    #[command(flatten)]
    pub moment: MomentArgs,
    /// Allocating functions at the top (an icicle graph of stacks innermost first): the
    /// widest boxes are the functions that allocate, whoever called them.
    #[arg(long)]
    pub inverted: bool,
}

pub fn run(args: &Args) -> Result<(), Error> {
    args.output.check(&args.trace)?;
    let mut builder = args.moment.builder();
    let loaded = load(&args.trace, &mut [&mut builder])?;
    let r = &loaded.replayed;
    args.moment.check_device(r)?;
    let snap = snapshot(builder)?;
    let mut sym = Symbolizer::of(&loaded);
    let lines = folded(&snap, &mut sym, args.inverted);
    warn_all(sym.take_warnings());
    let style = Style {
        title: format!("Live GPU memory {}", snap.describe()),
        subtitle: Some(subtitle(&loaded, args.inverted)),
        inverted: args.inverted,
        javascript: true,
    };
    let bytes = svg(&lines, &style).map_err(Error::Output)?;
    args.output.write(&bytes)?;
    args.output.done(&format!(
        "flamegraph of {}, {}",
        crate::units::plural(lines.len() as u64, "stack", "stacks"),
        snap.describe()
    ));
    Ok(())
}

/// The program and how to read the graph.
pub fn subtitle(loaded: &crate::replay::Loaded, inverted: bool) -> String {
    let argv: Vec<String> = loaded
        .header
        .get("argv")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let how = if inverted {
        "allocating functions at the top, their callers below"
    } else {
        "callers below, allocating functions on top"
    };
    format!("{}: width = live bytes; {how}", super::program(&argv))
}
