//! `cargo bench -p gpumemprof-analyzer --bench replay [-- --size 1GB] [--runs N]
//! [--cli PATH | --no-cli]`: how fast the analyzer reads a trace, on one core.
//! `-- --live N`: its memory per live allocation and per stack instead; `-- --browse`: the
//! time `browse` takes to read the trace and to answer each key. See `gpumemprof_analyzer::bench` and
//! BENCHMARKS.md ("Analyzer").

use std::path::Path;
use std::process::ExitCode;

use gpumemprof_analyzer::bench::{memory, run, Options, DEFAULT_SIZE};
use gpumemprof_analyzer::units::parse_size;

fn main() -> ExitCode {
    let cli = Path::new(env!("CARGO_BIN_EXE_gpumemprof"));
    // target/<profile>/gpumemprof: the trace goes to target/bench/.
    let target = cli.ancestors().nth(2).unwrap_or(Path::new("target"));
    let mut opts = Options {
        size: DEFAULT_SIZE,
        runs: 3,
        dir: target.join("bench"),
        cli: Some(cli.to_path_buf()),
    };
    let mut live = None;
    let mut browse = false;
    let mut given: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let parsed = match arg.as_str() {
            "--size" => args
                .next()
                .ok_or("--size needs a SIZE".to_string())
                .and_then(|s| parse_size(&s).map(|v| opts.size = v)),
            "--runs" => args
                .next()
                .and_then(|n| n.parse().ok())
                .map(|n| opts.runs = n)
                .ok_or_else(|| "--runs needs a number".to_string()),
            "--cli" => args
                .next()
                .map(|p| opts.cli = Some(p.into()))
                .ok_or_else(|| "--cli needs the path of a gpumemprof binary".to_string()),
            "--live" => args
                .next()
                .and_then(|n| n.parse().ok())
                .map(|n| live = Some(n))
                .ok_or_else(|| "--live needs a number of allocations".to_string()),
            "--trace" => args
                .next()
                .map(|p| given = Some(p.into()))
                .ok_or_else(|| "--trace needs the path of a trace".to_string()),
            "--browse" => {
                browse = true;
                Ok(())
            }
            "--no-cli" => {
                opts.cli = None;
                Ok(())
            }
            "--bench" => Ok(()), // passed by `cargo bench`
            other => Err(format!(
                "unknown argument {other:?} (use --size SIZE, --runs N, --cli PATH, --no-cli, --live N, --browse [--trace PATH])"
            )),
        };
        if let Err(e) = parsed {
            eprintln!("replay bench: {e}");
            return ExitCode::from(2);
        }
    }
    let result = match live {
        // The README's memory bound: 3,000 stacks of 30 frames, then N live allocations.
        Some(n) => memory(n, 3000, 30, &mut std::io::stdout()),
        None if browse && given.is_some() => {
            let path = given.expect("just seen");
            let what = format!("{} bytes", std::fs::metadata(&path).map_or(0, |m| m.len()));
            gpumemprof_analyzer::bench::browse::run_on(&path, &what, &mut std::io::stdout())
        }
        None if browse => {
            gpumemprof_analyzer::bench::browse::run(&opts.dir, opts.size, &mut std::io::stdout())
        }
        None => run(&opts, &mut std::io::stdout()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay bench: {e}");
            ExitCode::FAILURE
        }
    }
}
