//! `browse`'s benchmark (`cargo bench -p gpumemprof-analyzer --bench replay -- --browse
//! [--size 1GB | --trace PATH]`): the synthetic trace read into `browse`'s story (time, peak resident
//! memory), then a session of keys on an 80x24 test screen, each key applied and the screen
//! drawn, timed: the "within 100 ms per key". Prints numbers, asserts nothing.

use std::io::{self, Write};
use std::path::Path;
use std::time::Instant;

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

use crate::browse::story::StoryBuilder;

/// The keys of the session: about what a user does to find a leak.
const SESSION: &str = "llllllllllhhhhhhhhhh++++++LLLL----p/step\ne\tjjjj \t\t\ng";

pub fn run(dir: &Path, size: u64, out: &mut dyn Write) -> io::Result<()> {
    let (path, info) = super::trace(dir, size)?;
    let what = format!(
        "{:.1} MB, {} events, {} stacks",
        info.bytes as f64 / 1e6,
        info.events,
        info.stacks
    );
    run_on(&path, &what, out)
}

/// The benchmark on the trace at `path` (`what` describes it).
pub fn run_on(path: &Path, what: &str, out: &mut dyn Write) -> io::Result<()> {
    let path = path.to_path_buf();
    super::reset_hwm();
    let start = Instant::now();
    let mut builder = StoryBuilder::new();
    let loaded = crate::observe::replay_observed(
        gpumemprof_format::open_path(&path).map_err(io::Error::other)?,
        &mut [&mut builder],
    )
    .map_err(io::Error::other)?;
    let read = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let input = crate::cmd::browse::Input {
        path: &path,
        loaded: &loaded,
        builder,
        label: None,
    };
    let mut app = crate::cmd::browse::app(input, None);
    let mut terminal = Terminal::new(TestBackend::new(80, 24))?;
    terminal.draw(|f| crate::browse::draw::draw(f, &mut app))?;
    let first = start.elapsed().as_secs_f64();
    let rss = super::vm_hwm_kib().map_or_else(|| "?".to_string(), |k| format!("{} MB", k / 1024));
    writeln!(
        out,
        "gpumemprof browse benchmark: {} ({what}): read in {read:.2} s, first screen {:.0} ms; \
         peak RSS {rss}; {} buckets of {} ns",
        path.display(),
        first * 1e3,
        app.story.buckets.len(),
        app.story.width_ns
    )?;
    let mut times: Vec<(f64, char)> = Vec::new();
    for c in SESSION.chars() {
        let code = match c {
            '\n' => KeyCode::Enter,
            '\t' => KeyCode::Tab,
            c => KeyCode::Char(c),
        };
        let start = Instant::now();
        app.key(KeyEvent::new(code, KeyModifiers::NONE));
        terminal.draw(|f| crate::browse::draw::draw(f, &mut app))?;
        times.push((start.elapsed().as_secs_f64() * 1e3, c));
    }
    let mut sorted: Vec<f64> = times.iter().map(|t| t.0).collect();
    sorted.sort_by(f64::total_cmp);
    let slowest = times
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .expect("keys");
    writeln!(
        out,
        "  {} keys, each applied and drawn: median {:.2} ms, 95th percentile {:.2} ms, slowest \
         {:.2} ms ({:?})",
        times.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() * 95 / 100],
        slowest.0,
        slowest.1
    )
}
