//! `gpumemprof browse TRACE [TRACE2]` (or `--pid PID`): reads the traces (a progress bar on
//! stderr), then runs the terminal browser (`browse`) until `q`. A trace still being
//! written is followed: read again, what the user set up kept, whenever it grew (looked at
//! every second between keys, and at most a fifth of the time spent reading); `r` reads
//! again at once. Needs a terminal on stdout.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::DefaultTerminal;

use crate::browse::app::{Action, App};
use crate::browse::names::{Names, Symbols};
use crate::browse::sites::{self, Leaked};
use crate::browse::story::StoryBuilder;
use crate::error::Error;
use crate::live::find_trace;
use crate::replay::{LiveAlloc, Loaded};
use crate::report::teardown::Teardown;
use crate::report::TraceInfo;
use crate::symbolize::Symbolizer;

#[derive(Debug, ClapArgs)]
#[group(required = true, multiple = false)]
pub struct Args {
    /// The trace file (one still being written is read again as it grows). A second trace
    /// is shown beside the first: two runs of a job, or two ranks.
    #[arg(num_args = 1..=2, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
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
    let paths = match args.pid {
        Some(pid) => vec![find_trace(pid)?],
        None => args.traces.clone(),
    };
    // The first read shows its progress bar before the screen changes.
    let started = Instant::now();
    let mut read = read_all(&paths)?;
    let mut reading = started.elapsed();
    let mut terminal = ratatui::try_init().map_err(Error::Output)?;
    let _restore = Restore;
    let mut kept = None;
    loop {
        let (action, keep) = {
            let mut inputs = read.iter_mut().map(|(path, loaded, builder)| Input {
                path,
                loaded,
                builder: std::mem::take(builder),
            });
            let first = inputs.next().expect("clap requires a trace");
            let mut app = app(first, inputs.next());
            if let Some(k) = kept.take() {
                app.restore(k);
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
        let again = read_all(&paths);
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

/// Each trace read, with its story.
fn read_all(paths: &[PathBuf]) -> Result<Vec<(&Path, Loaded, StoryBuilder)>, Error> {
    let mut read = Vec::new();
    for path in paths {
        let mut builder = StoryBuilder::new();
        let loaded = crate::input::load_keeping_exit(path, &mut [&mut builder])?;
        read.push((path.as_path(), loaded, builder));
    }
    Ok(read)
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
}

/// `train.py 4 (pid 42)`.
fn program(path: &Path, loaded: &Loaded) -> String {
    let info = TraceInfo::new(path, loaded);
    let pid = info.pid.map_or_else(String::new, |p| format!(" (pid {p})"));
    format!("{}{pid}", super::program(&info.argv))
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
    let mut app = App::new(story, names, program(first.path, first.loaded), leaks);
    if let Some(s) = second {
        app.compare(s.builder.finish(), program(s.path, s.loaded));
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
    terminal: &mut DefaultTerminal,
    app: &mut App,
    grew: impl Fn() -> bool,
) -> std::io::Result<Action> {
    loop {
        terminal.draw(|f| crate::browse::draw::draw(f, app))?;
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
                terminal.draw(|f| crate::browse::draw::draw(f, app))?;
                return Ok(Action::Reload);
            }
            other => return Ok(other),
        }
    }
}
