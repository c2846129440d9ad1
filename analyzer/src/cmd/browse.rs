//! `gpumemprof browse TRACE [TRACE2]` (or a job folder, or `--pid PID`): reads the traces (a
//! progress bar on stderr; which ones: `browse_job`), then runs the terminal browser
//! (`browse`) until `q`. A trace still being
//! written is followed: read again, what the user set up kept, whenever it grew (looked at
//! every second between keys, and at most a fifth of the time spent reading); `r` reads
//! again at once. Needs a terminal on stdout (drawn on a frame at a time:
//! `browse/terminal.rs`).

use std::io::{IsTerminal, Stdout};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

use crate::browse::app::{Action, App};
use crate::browse::names::{Names, Symbols};
use crate::browse::sites::{self, Leaked};
use crate::browse::story::StoryBuilder;
use crate::browse::terminal::{self, Screen};
use crate::cmd::browse_job::{self, Opened};
use crate::error::Error;
use crate::live::find_trace;
use crate::replay::{LiveAlloc, Loaded};
use crate::report::teardown::Teardown;
use crate::report::TraceInfo;
use crate::symbolize::Symbolizer;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The trace file (one still being written is read again as it grows). A second trace
    /// is shown beside the first: two runs of a job, or two ranks. A job folder (one trace
    /// per rank): its first rank beside the one that peaked highest of the others.
    #[arg(
        num_args = 1..=2,
        value_name = "TRACE",
        required_unless_present = "pid",
        conflicts_with = "pid"
    )]
    pub traces: Vec<PathBuf>,
    /// With a job folder: the rank shown beside the first.
    #[arg(long, value_name = "N", requires = "traces", conflicts_with = "pid")]
    pub rank: Option<u64>,
    /// Browse the trace of this running process (found as `monitor --pid` finds it),
    /// following it as it grows.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

pub fn run(args: &Args) -> Result<(), Error> {
    if !std::io::stdout().is_terminal() {
        return Err(Error::Failed(
            "browse draws on a terminal and stdout is not one: run it in a terminal (over SSH, \
             `ssh -t`); for a file, use `gpumemprof report`"
                .to_string(),
        ));
    }
    // The first read shows its progress bar before the screen changes.
    let started = Instant::now();
    let Opened { mut read, mut note } = match args.pid {
        Some(pid) => browse_job::open(&[find_trace(pid)?], None)?,
        None => browse_job::open(&args.traces, args.rank)?,
    };
    let mut reading = started.elapsed();
    let paths: Vec<PathBuf> = read.iter().map(|r| r.0.clone()).collect();
    let mut terminal = terminal::open().map_err(Error::Output)?;
    let _restore = Restore;
    let mut kept = None;
    loop {
        let (action, keep) = {
            let mut inputs = read.iter_mut().map(|(path, loaded, builder, label)| Input {
                path,
                loaded,
                builder: std::mem::take(builder),
                label: label.clone(),
            });
            let first = inputs.next().expect("clap requires a trace");
            let mut app = app(first, inputs.next());
            if let Some(k) = kept.take() {
                app.restore(k);
            }
            if let Some(n) = note.take() {
                app.message.get_or_insert(n);
            }
            let sizes = file_sizes(&paths);
            let follow = app.incomplete;
            // A large trace is read again at most a fifth of the time: the screen must
            // answer keys the rest of it.
            let (shown, wait) = (Instant::now(), FOLLOW.max(reading * 4));
            let grew = || follow && shown.elapsed() >= wait && file_sizes(&paths) != sizes;
            let action = event_loop(&mut terminal, &mut app, grew).map_err(Error::Output)?;
            (action, app.kept())
        };
        if action != Action::Reload {
            return Ok(());
        }
        // Read again under the screen: quietly (a progress bar would draw over it).
        let quiet = crate::term::quiet();
        crate::term::set_quiet(true);
        let started = Instant::now();
        let labels = read.iter().map(|r| r.3.clone());
        let again: Result<Vec<_>, _> = (paths.iter().zip(labels))
            .map(|(p, label)| browse_job::read_one(p, label))
            .collect();
        crate::term::set_quiet(quiet);
        read = again?;
        reading = started.elapsed();
        kept = Some(keep);
    }
}

/// Gives the terminal back (raw mode off, the main screen) however `run` ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// The traces' sizes now (0 for one that cannot be read).
fn file_sizes(paths: &[PathBuf]) -> Vec<u64> {
    (paths.iter())
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .collect()
}

/// A trace read for `browse`.
pub struct Input<'a> {
    pub path: &'a Path,
    pub loaded: &'a Loaded,
    pub builder: StoryBuilder,
    /// How the title names it before its program (`rank 3`), if it does.
    pub label: Option<String>,
}

/// `train.py 4 (pid 42)`, `rank 3: train.py 4 (pid 42)`.
fn program(input: &Input) -> String {
    let info = TraceInfo::new(input.path, input.loaded);
    let pid = info.pid.map_or_else(String::new, |p| format!(" (pid {p})"));
    let label = (input.label.as_ref()).map_or_else(String::new, |l| format!("{l}: "));
    format!("{label}{}{pid}", super::program(&info.argv))
}

/// What the interpreter's teardown freed (see `report::teardown`), and the symbolizer that
/// found it, for the names (what it loaded is loaded once).
fn freed_at_exit(loaded: &Loaded) -> (Vec<LiveAlloc>, Symbols<'_>) {
    let mut sym = Symbolizer::of(loaded);
    let freed =
        Teardown::find(&loaded.replayed.exit_tail, &mut sym).map_or_else(Vec::new, |t| t.freed);
    (freed, Symbols(sym))
}

/// The browser of a loaded trace, and of a second one beside it.
pub fn app<'a>(first: Input<'a>, second: Option<Input<'a>>) -> App<'a> {
    let (first_program, second_program) = (program(&first), second.as_ref().map(program));
    let story = first.builder.finish();
    let (freed, symbols) = freed_at_exit(first.loaded);
    let mut names = Names::new(Box::new(symbols));
    let mut exits = vec![freed];
    let mut incomplete = !complete(first.loaded);
    if let Some(s) = &second {
        let (freed, symbols) = freed_at_exit(s.loaded);
        names.add(Box::new(symbols));
        exits.push(freed);
        incomplete |= !complete(s.loaded);
    }
    let mut leaked = vec![Leaked {
        live: &first.loaded.replayed.live,
        at_exit: &exits[0],
    }];
    if let Some(s) = &second {
        leaked.push(Leaked {
            live: &s.loaded.replayed.live,
            at_exit: &exits[1],
        });
    }
    let leaks = sites::leaks(&leaked, &mut names, story.tensors);
    let mut app = App::new(story, names, first_program, leaks);
    if let (Some(s), Some(p)) = (second, second_program) {
        app.compare(s.builder.finish(), p);
    }
    app.incomplete = incomplete;
    if incomplete {
        app.message = Some(
            "the trace is still being written (or its job was killed): read again as it grows"
                .to_string(),
        );
    }
    app
}

fn complete(loaded: &Loaded) -> bool {
    !loaded.truncated && loaded.replayed.pipeline.complete
}

/// How often a trace being written is looked at (its size) between keys.
const FOLLOW: Duration = Duration::from_secs(1);

/// Draws and applies keys until one asks to quit or read again; reads again by itself when
/// `grew` says a trace being written grew.
fn event_loop(
    terminal: &mut Screen<Stdout>,
    app: &mut App,
    grew: impl Fn() -> bool,
) -> std::io::Result<Action> {
    loop {
        terminal.draw(app)?;
        let action = if event::poll(FOLLOW)? {
            match event::read()? {
                Event::Key(key) if key.kind != KeyEventKind::Release => app.key(key),
                // A resize, a mouse or focus event: drawn again at the new size.
                _ => Action::Continue,
            }
        } else if grew() {
            Action::Reload
        } else {
            Action::Continue
        };
        match action {
            Action::Continue => {}
            Action::Reload => {
                app.message = Some("reading the trace again...".to_string());
                terminal.draw(app)?;
                return Ok(Action::Reload);
            }
            other => return Ok(other),
        }
    }
}
