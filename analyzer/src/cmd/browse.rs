//! `gpumemprof browse TRACE [TRACE2]` (or `--pid PID`): reads the traces (a progress bar on
//! stderr), then runs the terminal browser (`browse`) until `q`; `r` reads them again, for
//! a job still writing one. Needs a terminal on stdout.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

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
    /// The trace file (it may still be being written: `r` reads it again). A second trace
    /// is shown beside the first: two runs of a job, or two ranks.
    #[arg(num_args = 1..=2, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Browse the trace of this running process (found as `monitor --pid` finds it).
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
    loop {
        let mut read = Vec::new();
        for path in &paths {
            let mut builder = StoryBuilder::new();
            let loaded = crate::input::load_keeping_exit(path, &mut [&mut builder])?;
            read.push((path.as_path(), loaded, builder));
        }
        let mut inputs = read.iter_mut().map(|(path, loaded, builder)| Input {
            path,
            loaded,
            builder: std::mem::take(builder),
        });
        let first = inputs.next().expect("clap requires a trace");
        let mut app = app(first, inputs.next());
        let mut terminal = ratatui::try_init().map_err(Error::Output)?;
        let action = event_loop(&mut terminal, &mut app);
        ratatui::restore();
        match action.map_err(Error::Output)? {
            Action::Reload => continue,
            _ => return Ok(()),
        }
    }
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

/// What the interpreter's teardown freed (see `report::teardown`).
fn freed_at_exit(loaded: &Loaded) -> Vec<LiveAlloc> {
    let mut sym = Symbolizer::of(loaded);
    Teardown::find(&loaded.replayed.exit_tail, &mut sym).map_or_else(Vec::new, |t| t.freed)
}

/// The browser of a loaded trace, and of a second one beside it.
pub fn app<'a>(first: Input<'a>, second: Option<Input<'a>>) -> App<'a> {
    let story = first.builder.finish();
    let mut names = Names::new(Box::new(Symbols(Symbolizer::of(first.loaded))));
    let mut exits = vec![freed_at_exit(first.loaded)];
    let mut incomplete = !complete(first.loaded);
    if let Some(s) = &second {
        names.add(Box::new(Symbols(Symbolizer::of(s.loaded))));
        exits.push(freed_at_exit(s.loaded));
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
    if incomplete {
        app.message = Some(
            "the trace is incomplete (being written, or its job was killed): r reads it again"
                .to_string(),
        );
    }
    app
}

fn complete(loaded: &Loaded) -> bool {
    !loaded.truncated && loaded.replayed.pipeline.complete
}

fn event_loop(terminal: &mut DefaultTerminal, app: &mut App) -> std::io::Result<Action> {
    loop {
        terminal.draw(|f| crate::browse::draw::draw(f, app))?;
        if let Event::Key(key) = event::read()? {
            if key.kind != KeyEventKind::Release {
                match app.key(key) {
                    Action::Continue => {}
                    other => return Ok(other),
                }
            }
        }
        // A resize, a mouse or focus event: drawn again at the new size.
    }
}
