//! `browse` driven by keys on ratatui's test backend, with exact screens; and the story's
//! moments against a replay done the slow way.

use gpumemprof_format::{AllocFailed, MemKind, Nvtx, NvtxOp, Record, OUT_OF_MEMORY};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

use super::app::{Action, App};
use super::moment::Moment;
use super::names::Names;
use super::sites::{self, Leaked};
use super::story::{Story, StoryBuilder, MAX_BUCKETS};
use crate::fasthash::FastMap;
use crate::observe::Observer;
use crate::replay::{LiveAlloc, LiveChange};

const MIB: u64 = 1 << 20;

fn alloc(address: u64, time_ns: u64, size: u64, stack: u64, kind: MemKind) -> LiveAlloc {
    LiveAlloc {
        address,
        time_ns,
        size,
        stack,
        device: 0,
        kind,
    }
}

/// A job's story from `(time, +/-, address, size, stack)` tensor events; stacks 1..
fn story_of(events: &[(u64, bool, u64, u64, u64)]) -> (StoryBuilder, Vec<LiveAlloc>) {
    let mut b = StoryBuilder::new();
    let mut live: FastMap<u64, LiveAlloc> = FastMap::default();
    for &(t, add, address, size, stack) in events {
        let change = if add {
            let a = alloc(address, t, size, stack, MemKind::Device);
            live.insert(address, a);
            LiveChange::Added(a)
        } else {
            LiveChange::Released(live.remove(&address).expect("freed what is live"))
        };
        b.changes(t, &[change]);
    }
    (b, live.into_values().collect())
}

/// The frames of a training loop's stacks, innermost first.
fn names() -> Names<'static> {
    Names::new(Box::new(table()))
}

fn table() -> FastMap<u64, Vec<String>> {
    let mut table: FastMap<u64, Vec<String>> = FastMap::default();
    let main = "<module> at train.py:40";
    table.insert(
        1,
        vec![
            "Model.forward at model.py:12".into(),
            "train_step at train.py:20".into(),
            main.into(),
        ],
    );
    table.insert(
        2,
        vec![
            "Model.forward at model.py:13".into(),
            "train_step at train.py:20".into(),
            main.into(),
        ],
    );
    table.insert(3, vec!["compute_loss at train.py:25".into(), main.into()]);
    table.insert(
        4,
        vec!["keep_for_logging at train.py:31".into(), main.into()],
    );
    table.insert(5, vec!["cache_batch at train.py:33".into(), main.into()]);
    table
}

/// A loop of 3 steps: each makes 8 + 4 MiB of activations and 1 MiB of loss, frees them
/// and keeps 2 MiB for logging (the leak); then an 80 MiB request fails.
fn training() -> (StoryBuilder, Vec<LiveAlloc>) {
    training_keeping(2 * MIB, false)
}

/// `training`, keeping `kept` bytes a step, and with `cache` a 5 MiB batch kept from the
/// first step on (stack 5).
fn training_keeping(kept: u64, cache: bool) -> (StoryBuilder, Vec<LiveAlloc>) {
    training_paced(kept, cache, 1_000_000_000)
}

/// `training_keeping`, its steps `period_ns` apart (from 1 s on).
fn training_paced(kept: u64, cache: bool, period_ns: u64) -> (StoryBuilder, Vec<LiveAlloc>) {
    let mut ev = Vec::new();
    if cache {
        ev.push((1_000_000_000, true, 0x9999, 5 * MIB, 5));
    }
    let mut address = 0x1000;
    for step in 0..3u64 {
        let t = 1_000_000_000 + step * period_ns;
        let (a, b, c, d) = (address, address + 1, address + 2, address + 3);
        address += 4;
        ev.push((t, true, a, 8 * MIB, 1));
        ev.push((t + 100_000_000, true, b, 4 * MIB, 2));
        ev.push((t + 200_000_000, true, c, MIB, 3));
        ev.push((t + 300_000_000, false, a, 8 * MIB, 1));
        ev.push((t + 300_000_000, false, b, 4 * MIB, 2));
        ev.push((t + 300_000_000, false, c, MIB, 3));
        ev.push((t + 400_000_000, true, d, kept, 4));
    }
    let (mut b, live) = story_of(&ev);
    b.record(&Record::AllocFailed(AllocFailed {
        time_ns: 4_500_000_000,
        tid: 1,
        api: 1,
        kind: MemKind::Device,
        device: 0,
        size: 80 * MIB,
        stream: 0,
        pool: 0,
        stack: 3,
        result: OUT_OF_MEMORY,
        mem_free: 10 * MIB,
        mem_total: 32 * MIB,
    }));
    (b, live)
}

fn app() -> App<'static> {
    let (b, live) = training();
    let story = b.finish();
    let mut names = names();
    let leaks = sites::leaks(
        &[Leaked {
            live: &live,
            at_exit: &[],
        }],
        &mut names,
        story.tensors,
    );
    App::new(story, names, "train.py (pid 42)".to_string(), leaks)
}

/// The screen as text, each line's trailing blanks cut.
fn screen(app: &mut App, width: u16, height: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
    t.draw(|f| super::draw::draw(f, app)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..height)
        .map(|y| {
            let line: String = (0..width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect();
            line.trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn press(app: &mut App, keys: &str) -> Action {
    let mut last = Action::Continue;
    for c in keys.chars() {
        last = app.key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
    last
}

fn code(app: &mut App, code: KeyCode) -> Action {
    app.key(KeyEvent::new(code, KeyModifiers::NONE))
}

/// The state where each bucket's primary series was first highest, the slow way: every
/// change applied in order, the state copied at each new high of the bucket.
fn slow_moments(story: &Story, changes: &[(u64, u64, i64)]) -> Vec<Vec<(u64, u64)>> {
    let w = story.width_ns;
    let mut state: FastMap<u64, u64> = FastMap::default();
    let mut value = 0u64;
    let mut out = Vec::new();
    let mut next = 0;
    for i in 0..story.buckets.len() as u64 {
        let mut best = value;
        let mut best_state = state.clone();
        while next < changes.len() && changes[next].0 < (i + 1) * w {
            let (_, stack, delta) = changes[next];
            let e = state.entry(stack).or_default();
            *e = (*e as i64 + delta) as u64;
            value = (value as i64 + delta) as u64;
            if value > best {
                best = value;
                best_state = state.clone();
            }
            next += 1;
        }
        assert_eq!(
            story.buckets[i as usize].primary_max, best,
            "bucket {i}'s high"
        );
        let mut v: Vec<(u64, u64)> = best_state.into_iter().filter(|&(_, b)| b > 0).collect();
        v.sort();
        out.push(v);
    }
    out
}

#[test]
fn every_moment_is_the_state_at_its_buckets_high_after_the_grid_doubled() {
    // 6,000 events over 40 ms: the 1 µs grid doubles to 16 µs (four merges).
    let mut seed = 12345u64;
    let mut rand = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut live: Vec<(u64, u64, u64)> = Vec::new();
    let mut events = Vec::new();
    let mut changes = Vec::new();
    let mut t = 0;
    for address in 0..6_000u64 {
        t += 1 + rand(13_000);
        if live.is_empty() || rand(5) < 3 {
            let (size, stack) = (1 + rand(1 << 20), 1 + rand(20));
            live.push((address, size, stack));
            events.push((t, true, address, size, stack));
            changes.push((t, stack, size as i64));
        } else {
            let (address, size, stack) = live.swap_remove(rand(live.len() as u64) as usize);
            events.push((t, false, address, size, stack));
            changes.push((t, stack, -(size as i64)));
        }
    }
    let story = story_of(&events).0.finish();
    assert_eq!(story.width_ns, 16_000);
    assert!(story.buckets.len() > MAX_BUCKETS / 2 && story.buckets.len() <= MAX_BUCKETS);
    let slow = slow_moments(&story, &changes);
    for (i, want) in slow.iter().enumerate() {
        let mut got: Vec<(u64, u64)> = story
            .at_bucket(i)
            .iter()
            .map(|s| (s.stack, s.bytes))
            .collect();
        got.sort();
        assert_eq!(&got, want, "bucket {i}");
    }
    let mut end: FastMap<u64, u64> = FastMap::default();
    for (_, stack, delta) in &changes {
        let e = end.entry(*stack).or_default();
        *e = (*e as i64 + delta) as u64;
    }
    let mut want: Vec<(u64, u64)> = end.into_iter().filter(|&(_, b)| b > 0).collect();
    want.sort();
    let mut got: Vec<(u64, u64)> = story.at_end().iter().map(|s| (s.stack, s.bytes)).collect();
    got.sort();
    assert_eq!(got, want);
}

const PEAK: &str = " gpumemprof browse · 0.000 s to 4.500 s · train.py (pid 42)
 17.0 MiB                                 ▁▄▄▄           ▆███
                          ▅▅▇▇            ████         ▅▅████
                         ▃████          ██████         ██████
                         █████          ██████▂▂▂▂▂▂▂▂▂██████▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇
        0                █████ ▅▅▅▅▅▅▅▅▅███████████████████████████████████████
          ────────────────────────────────────────────────▲───────────────────x─
▶ at the peak 3.200 s: 17.0 MiB live · device 32.0 MiB
 Tree  Top sites  Leaks at end                             bytes  share   allocs
▾ GPU 0 device memory                                   17.0 MiB 100.0%        5
  ▾ <module> at train.py:40                             17.0 MiB 100.0%        5
    ▾ train_step at train.py:20                         12.0 MiB  70.6%        2
      · Model.forward at model.py:12                     8.0 MiB  47.1%        1
      · Model.forward at model.py:13                     4.0 MiB  23.5%        1
    · keep_for_logging at train.py:31                    4.0 MiB  23.5%        2
    · compute_loss at train.py:25                        1.0 MiB   5.9%        1







? help  q quit  ←→ moment  +- zoom  p peak  o OOM  e end  / search  Tab view";

#[test]
fn opens_at_the_peak_with_the_tree_of_what_is_live_then() {
    let mut a = app();
    assert_eq!(screen(&mut a, 80, 24), PEAK);
}

/// The lines of the screen from `from` to `to` (0-based, inclusive).
fn lines(app: &mut App, from: usize, to: usize) -> String {
    let s = screen(app, 80, 24);
    let picked: Vec<&str> = s.lines().skip(from).take(to + 1 - from).collect();
    picked.join("\n").trim_end().to_string()
}

#[test]
fn the_end_and_the_oom_are_a_key_away() {
    let mut a = app();
    press(&mut a, "e");
    assert_eq!(
        lines(&mut a, 6, 12),
        "          ────────────────────────────────────────────────────────────────────▲─
▶ at the end 4.500 s: 6.0 MiB live · device 32.0 MiB
 Tree  Top sites  Leaks at end                             bytes  share   allocs
▾ GPU 0 device memory                                    6.0 MiB 100.0%        3
  ▾ <module> at train.py:40                              6.0 MiB 100.0%        3
    · keep_for_logging at train.py:31                    6.0 MiB 100.0%        3
"
        .trim_end()
    );
    press(&mut a, "o");
    assert_eq!(
        lines(&mut a, 7, 7),
        "▶ at OOM 1 of 1 4.500 s (asked for 80.0 MiB): 6.0 MiB live · device 32.0 MiB"
    );
    press(&mut a, "p");
    assert_eq!(screen(&mut a, 80, 24), PEAK);
}

#[test]
fn the_cursor_moves_by_column_and_zooms_around_itself() {
    let mut a = app();
    // Per column: 32 buckets of 2.048 ms. One column left of the peak's (3.080 s to
    // 3.145 s): the second activation made at 3.100 s, with the two kept for logging.
    assert_eq!(
        (a.per_column, a.columns, a.story.width_ns),
        (32, 70, 2_048_000)
    );
    code(&mut a, KeyCode::Left);
    assert_eq!(
        lines(&mut a, 7, 7),
        "▶ at 3.100 s: 16.0 MiB live · device 32.0 MiB"
    );
    press(&mut a, "H");
    assert_eq!(
        lines(&mut a, 7, 7),
        "▶ at 2.424 s: 4.0 MiB live · device 32.0 MiB"
    );
    // Zoomed in 4 times: 2 buckets a column, the cursor in the middle of the chart.
    press(&mut a, "++++");
    assert_eq!(a.per_column, 2);
    assert_eq!(a.cursor_column(), Some(35));
    assert_eq!(
        lines(&mut a, 0, 0),
        " gpumemprof browse · 2.281 s to 2.568 s · train.py (pid 42)"
    );
    press(&mut a, "----");
    assert_eq!(a.per_column, 32);
    press(&mut a, "-");
    assert_eq!(a.message.as_deref(), Some("the whole trace is shown"));
}

#[test]
fn search_shows_the_paths_to_matching_frames_and_n_walks_them() {
    let mut a = app();
    press(&mut a, "/forward");
    assert_eq!(
        lines(&mut a, 23, 23),
        "/forward█  (Enter: search, Esc: cancel)"
    );
    code(&mut a, KeyCode::Enter);
    assert_eq!(
        lines(&mut a, 8, 14),
        " Tree  Top sites  Leaks at end   /forward                  bytes  share   allocs
▾ GPU 0 device memory                                   17.0 MiB 100.0%        5
  ▾ <module> at train.py:40                             17.0 MiB 100.0%        5
    ▾ train_step at train.py:20                         12.0 MiB  70.6%        2
      · Model.forward at model.py:12                     8.0 MiB  47.1%        1
      · Model.forward at model.py:13                     4.0 MiB  23.5%        1
"
        .trim_end()
    );
    // The first match is selected; n goes to the second, then wraps.
    assert_eq!(a.selected[0], 3);
    press(&mut a, "n");
    assert_eq!(a.selected[0], 4);
    press(&mut a, "n");
    assert_eq!(a.selected[0], 3);
    press(&mut a, "N");
    assert_eq!(a.selected[0], 4);
    code(&mut a, KeyCode::Esc);
    assert_eq!(
        screen(&mut a, 80, 24)
            .lines()
            .filter(|l| l.contains("compute_loss"))
            .count(),
        1
    );
    press(&mut a, "/nothing such");
    code(&mut a, KeyCode::Enter);
    assert_eq!(
        lines(&mut a, 9, 9),
        "  no frame here matches the search (Esc clears it)"
    );
}

#[test]
fn focus_close_all_and_open_one() {
    let mut a = app();
    press(&mut a, "jj");
    press(&mut a, "f");
    assert_eq!(
        lines(&mut a, 9, 12),
        "▾ train_step at train.py:20                             12.0 MiB  70.6%        2
  · Model.forward at model.py:12                         8.0 MiB  47.1%        1
  · Model.forward at model.py:13                         4.0 MiB  23.5%        1
"
        .trim_end()
    );
    press(&mut a, "uu");
    press(&mut a, "c");
    assert_eq!(
        lines(&mut a, 9, 10),
        "▸ GPU 0 device memory                                   17.0 MiB 100.0%        5\n"
            .trim_end()
    );
    code(&mut a, KeyCode::Char(' '));
    assert_eq!(
        lines(&mut a, 9, 11),
        "▾ GPU 0 device memory                                   17.0 MiB 100.0%        5
  ▸ <module> at train.py:40                             17.0 MiB 100.0%        5
"
        .trim_end()
    );
}

#[test]
fn top_sites_leaks_details_and_help() {
    let mut a = app();
    code(&mut a, KeyCode::Tab);
    assert_eq!(
        lines(&mut a, 9, 13),
        "  Model.forward at model.py:12                           8.0 MiB  47.1%        1
  Model.forward at model.py:13                           4.0 MiB  23.5%        1
  keep_for_logging at train.py:31                        4.0 MiB  23.5%        2
  compute_loss at train.py:25                            1.0 MiB   5.9%        1
"
        .trim_end()
    );
    code(&mut a, KeyCode::Tab);
    assert_eq!(
        lines(&mut a, 9, 10),
        "  keep_for_logging at train.py:31                        6.0 MiB 100.0%        3\n"
            .trim_end()
    );
    code(&mut a, KeyCode::Enter);
    assert_eq!(
        lines(&mut a, 9, 17),
        "┌ details (any key closes) ────────────────────────────────────────────────────┐
│ keep_for_logging at train.py:31                                              │
│ Leaked: 6.0 MiB in 3 allocations, still live when the trace ended            │
│ Over the whole trace: 3 allocations of 2.0 MiB, the first at 1.400 s, the las│
│ Kind: device memory on GPU 0                                                 │
│ Stack, innermost first:                                                      │
│   keep_for_logging at train.py:31                                            │
│   <module> at train.py:40                                                    │
│                                                                              │"
    );
    press(&mut a, "x");
    code(&mut a, KeyCode::Tab);
    press(&mut a, "?");
    assert_eq!(
        lines(&mut a, 9, 11),
        "┌ keys ────────────────────────────────────────────────────────────────────────┐
│ ←/→ h/l   moment: one column earlier/later (H/L: ten)                        │
│ +/-       zoom the timeline in/out around the cursor                         │"
    );
    assert_eq!(press(&mut a, "q"), Action::Quit);
}

#[test]
fn any_size_draws_and_a_small_one_says_so() {
    let mut a = app();
    assert_eq!(
        screen(&mut a, 30, 8),
        "terminal too small: browse\nneeds 40x12 (this is 30x8); q\nquits\n\n\n\n\n"
    );
    for (w, h) in [(40, 12), (41, 13), (200, 60), (80, 24)] {
        let s = screen(&mut a, w, h);
        assert!(s.contains("GPU 0 device memory"), "{w}x{h}:\n{s}");
    }
    assert_eq!(a.columns, 70);
    assert_eq!(screen(&mut a, 80, 24), PEAK);
}

#[test]
fn a_job_with_tensors_leads_with_them_and_keeps_its_segments_closed() {
    let mut b = StoryBuilder::new();
    let seg = alloc(0x10, 1_000, 20 * MIB, 1, MemKind::Device);
    let t1 = alloc(0x10, 2_000, 6 * MIB, 2, MemKind::Tensor);
    let t2 = alloc(0x11, 3_000, 3 * MIB, 3, MemKind::Tensor);
    b.changes(1_000, &[LiveChange::Added(seg)]);
    b.changes(2_000, &[LiveChange::Added(t1)]);
    b.changes(3_000, &[LiveChange::Added(t2)]);
    b.changes(4_000, &[LiveChange::Released(t1)]);
    let story = b.finish();
    let mut names = names();
    let live = [seg, t2];
    let leaks = sites::leaks(
        &[Leaked {
            live: &live,
            at_exit: &[],
        }],
        &mut names,
        story.tensors,
    );
    let mut a = App::new(story, names, "t (pid 1)".into(), leaks);
    assert_eq!(
        lines(&mut a, 7, 12),
        "▶ at the peak 0.000 s: 9.0 MiB of tensors (reserved 20.0 MiB)
 Tree  Top sites  Leaks at end                             bytes  share  tensors
▾ GPU 0 tensors                                          9.0 MiB 100.0%        2
  ▾ <module> at train.py:40                              9.0 MiB 100.0%        2
    ▾ train_step at train.py:20                          6.0 MiB  66.7%        1
      · Model.forward at model.py:13                     6.0 MiB  66.7%        1"
    );
    assert_eq!(
        lines(&mut a, 13, 15),
        "    · compute_loss at train.py:25                        3.0 MiB  33.3%        1
▸ GPU 0 device memory                                   20.0 MiB 100.0%        1
"
        .trim_end()
    );
    // Leaks count tensors only.
    assert_eq!(a.leaks.len(), 1);
    assert_eq!(
        (&a.leaks[0].stacks, a.leaks[0].bytes),
        (&vec![(0, 3)], [3 * MIB, 0])
    );
}

#[test]
fn two_runs_side_by_side_with_their_differences() {
    let (a, a_live) = training();
    let (b, b_live) = training_keeping(3 * MIB, true);
    let (a, b) = (a.finish(), b.finish());
    let mut names = names();
    names.add(Box::new(table()));
    let sides = [
        Leaked {
            live: &a_live,
            at_exit: &[],
        },
        Leaked {
            live: &b_live,
            at_exit: &[],
        },
    ];
    let leaks = sites::leaks(&sides, &mut names, a.tensors);
    let mut app = App::new(a, names, "train.py (pid 42)".into(), leaks);
    app.compare(b, "train.py (pid 43)".into());
    // B keeps 3 MiB a step, not 2, and caches a 5 MiB batch: both at their peaks.
    assert_eq!(
        screen(&mut app, 80, 24),
        " gpumemprof browse · A: train.py (pid 42) · B: train.py (pid 43)
 17.0 MiB                 ▄▄▅▅          ▂▂▆▇▇▇         ▄▄████
        A                █████ ▂▂▂▂▂▂▂▂▂██████▄▄▄▄▄▄▄▄▄██████▆▆▆▆▆▆▆▆▆▆▆▆▆▆▆▆▆▆
          ────────────────────────────────────────────────▲───────────────────x─
 24.0 MiB                ▁▄▄▄▄          ▃▃▆▆▆▆         ▅▅████▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂
        B                █████▄▆▆▆▆▆▆▆▆▆███████████████████████████████████████
          ────────────────────────────────────────────────▲───────────────────x─
▶ A at the peak 3.200 s: 17.0 MiB live · B at the peak 3.200 s: 24.0 MiB live
 Tree  Top sites  Leaks at end                          A          B       B - A
▾ GPU 0 device memory                            17.0 MiB   24.0 MiB    +7.0 MiB
  ▾ <module> at train.py:40                      17.0 MiB   24.0 MiB    +7.0 MiB
    ▾ train_step at train.py:20                  12.0 MiB   12.0 MiB           =
      · Model.forward at model.py:12              8.0 MiB    8.0 MiB           =
      · Model.forward at model.py:13              4.0 MiB    4.0 MiB           =
    · keep_for_logging at train.py:31             4.0 MiB    6.0 MiB    +2.0 MiB
    · cache_batch at train.py:33 [B only]             0 B    5.0 MiB    +5.0 MiB
    · compute_loss at train.py:25                 1.0 MiB    1.0 MiB           =






? help  q quit  ←→ moment  +- zoom  p peak  o OOM  e end  / search  Tab view"
    );
    // The leaks of both, grouped by site.
    code(&mut app, KeyCode::Tab);
    code(&mut app, KeyCode::Tab);
    assert_eq!(
        lines(&mut app, 9, 10),
        "  keep_for_logging at train.py:31                 6.0 MiB    9.0 MiB    +3.0 MiB
  cache_batch at train.py:33 [B only]                 0 B    5.0 MiB    +5.0 MiB"
    );
    // One column before the peak (A's second activation, 3.100 s): B follows by time, then
    // by event (B's first change was its cache: its 15th change is A's 14th, the step's
    // first activation, at 3.000 s).
    code(&mut app, KeyCode::Left);
    assert_eq!(
        lines(&mut app, 7, 7),
        "▶ A at 3.100 s: 16.0 MiB live · B at 3.100 s: 23.0 MiB live"
    );
    press(&mut app, "a");
    assert_eq!(
        lines(&mut app, 7, 7),
        "▶ A at 3.100 s: 16.0 MiB live · B at 3.000 s: 19.0 MiB live"
    );
    assert_eq!(lines(&mut app, 23, 23), "the second trace follows by event");
    // The end of both.
    press(&mut app, "e");
    assert_eq!(
        lines(&mut app, 7, 7),
        "▶ A at the end 4.500 s: 6.0 MiB live · B at the end 4.500 s: 14.0 MiB live"
    );
    // Details say each side's figures.
    code(&mut app, KeyCode::Tab);
    press(&mut app, "jj");
    code(&mut app, KeyCode::Enter);
    assert_eq!(
        lines(&mut app, 9, 14),
        "┌ details (any key closes) ────────────────────────────────────────────────────┐
│ keep_for_logging at train.py:31                                              │
│ Live in A at the end: 6.0 MiB in 3 allocations (100.0% of GPU 0 device memory│
│ Live in B at the end: 9.0 MiB in 3 allocations (64.3% of GPU 0 device memory)│
│ Over the whole trace: 3 allocations of 2.0 MiB, the first at 1.400 s, the las│
│ B: Over the whole trace: 3 allocations of 3.0 MiB, the first at 1.400 s, the │"
    );
}

/// Each step of `training_paced` marked by an NVTX range (thread 1), from its start to
/// 10 ms after its last allocation.
fn mark_steps(b: &mut StoryBuilder, period_ns: u64) {
    mark_steps_late(b, period_ns, 0);
}

/// `mark_steps`, each range pushed `late_ns` after the step's first allocation.
fn mark_steps_late(b: &mut StoryBuilder, period_ns: u64, late_ns: u64) {
    for step in 0..3u64 {
        let t = 1_000_000_000 + step * period_ns;
        for (time_ns, op) in [(t + late_ns, NvtxOp::Push), (t + 410_000_000, NvtxOp::Pop)] {
            b.record(&Record::Nvtx(Nvtx {
                time_ns,
                tid: 1,
                op,
                domain: 0,
                name: 0,
                range: 0,
            }));
        }
    }
}

/// `training` with its steps marked (A), beside `training_paced` keeping 3 MiB a step, its
/// steps 1.5 s apart and each range pushed `b_late_ns` after the step's first allocation (B).
fn paced_pair(b_late_ns: u64) -> App<'static> {
    let (mut a, a_live) = training();
    let (mut b, b_live) = training_paced(3 * MIB, false, 1_500_000_000);
    mark_steps(&mut a, 1_000_000_000);
    mark_steps_late(&mut b, 1_500_000_000, b_late_ns);
    let (a, b) = (a.finish(), b.finish());
    let mut names = names();
    names.add(Box::new(table()));
    let sides =
        [(&a_live, &[][..]), (&b_live, &[][..])].map(|(live, at_exit)| Leaked { live, at_exit });
    let leaks = sites::leaks(&sides, &mut names, a.tensors);
    let mut app = App::new(a, names, "train.py (pid 42)".into(), leaks);
    app.compare(b, "train.py (pid 43)".into());
    app
}

/// A run with steps 1 s apart beside one with steps 1.5 s apart: by time, B's moment is
/// between its steps; by step, at the same point of the same step. At 80 columns B's moment
/// has a line of its own; at 100 both fit on one.
#[test]
fn two_runs_of_different_speeds_follow_each_other_step_for_step() {
    let mut app = paced_pair(0);
    assert_eq!(
        lines(&mut app, 7, 8),
        "▶ A at the peak 3.200 s (step 3/3): 17.0 MiB live
  B at the peak 4.200 s (step 3/3): 19.0 MiB live"
    );
    // A's step 3, a quarter through: B by time is between its steps 2 and 3 (2.5 s and
    // 4.0 s; nothing changed in its 2 ms bucket holding 3.1 s, so its moment is the
    // bucket's start), by event at A's number of changes, by step a quarter through its
    // step 3 (4.1 s).
    code(&mut app, KeyCode::Left);
    assert_eq!(
        lines(&mut app, 7, 8),
        "▶ A at 3.100 s (step 3/3): 16.0 MiB live
  B at 3.098 s (after step 2/3): 6.0 MiB live"
    );
    press(&mut app, "a");
    assert_eq!(lines(&mut app, 23, 23), "the second trace follows by event");
    press(&mut app, "a");
    assert_eq!(
        screen(&mut app, 100, 24).lines().nth(7).unwrap(),
        "▶ A at 3.100 s (step 3/3): 16.0 MiB live · B at 4.100 s (step 3/3): 18.0 MiB live"
    );
    assert_eq!(
        lines(&mut app, 23, 23),
        "the second trace follows by step (NVTX ranges)"
    );
    // Before the first step, B is as long before its own; then back to time.
    press(&mut app, "s");
    assert_eq!(
        lines(&mut app, 7, 8),
        "▶ A at 0.000 s (before step 1/3): 0 B live
  B at 0.000 s (before step 1/3): 0 B live"
    );
    press(&mut app, "a");
    assert_eq!(lines(&mut app, 23, 23), "the second trace follows by time");
}

/// B's step 3 begins 1 ms after its first allocation, inside the 2 ms bucket that holds
/// both (3.99983 s to 4.00193 s), whose moment is that allocation (4.000 s), before the
/// step. Following A's step 3 from its start, B is shown in its step 3: at the next
/// bucket's start (4.00193 s), where nothing changed (as a CI run of two PyTorch jobs once showed
/// `after step 2/3`).
#[test]
fn by_step_the_second_trace_is_shown_in_the_step_even_where_it_begins_mid_bucket() {
    let mut app = paced_pair(1_000_000);
    press(&mut app, "aa");
    let start = app.story.bucket_of(3_000_000_000);
    app.go(Moment::Bucket(start));
    assert_eq!(
        lines(&mut app, 7, 8),
        "▶ A at 3.000 s (step 3/3): 12.0 MiB live
  B at 4.001 s (step 3/3): 14.0 MiB live"
    );
}

#[test]
fn a_scale_as_wide_as_the_gutter_keeps_the_bars_in_their_columns() {
    let mut b = StoryBuilder::new();
    let big = alloc(0x10, 1_000, 1_073_636_966, 1, MemKind::Device);
    b.changes(1_000, &[LiveChange::Added(big)]);
    b.changes(2_000, &[LiveChange::Released(big)]);
    let mut a = App::new(b.finish(), names(), "t (pid 1)".into(), Vec::new());
    let s = screen(&mut a, 80, 24);
    let lines: Vec<&str> = s.lines().collect();
    // Column 0 (0 to 1 µs) is empty; the allocation's bucket (1 µs to 2 µs), then its
    // release's, which starts with it live: the same columns under the 10-character scale.
    assert_eq!(lines[1], "1023.9 MiB ██");
    assert_eq!(lines[5], "        0  ██");
    assert_eq!(lines[6], format!("          ─▲{}", "─".repeat(68)));
}

#[test]
fn reading_again_keeps_what_was_set_up() {
    let mut a = app();
    code(&mut a, KeyCode::Left);
    press(&mut a, "c");
    code(&mut a, KeyCode::Char(' '));
    press(&mut a, "j/model");
    code(&mut a, KeyCode::Enter);
    code(&mut a, KeyCode::Tab);
    let before = screen(&mut a, 80, 24);
    let mut b = app();
    b.restore(a.kept());
    assert_eq!(screen(&mut b, 80, 24), before);
    assert_eq!(
        lines(&mut b, 7, 7),
        "▶ at 3.100 s: 16.0 MiB live · device 32.0 MiB"
    );
    // The peak stays the peak, the end the end.
    press(&mut a, "p");
    let mut c = app();
    c.restore(a.kept());
    assert_eq!(lines(&mut c, 7, 7), lines(&mut a, 7, 7));
    press(&mut a, "e");
    let mut d = app();
    d.restore(a.kept());
    assert_eq!(
        lines(&mut d, 7, 7),
        "▶ at the end 4.500 s: 6.0 MiB live · device 32.0 MiB"
    );
}

#[test]
fn the_other_keys() {
    let mut a = app();
    // C: the chart's scale is the device's 32 MiB (the failed allocation read it).
    press(&mut a, "C");
    assert_eq!(lines(&mut a, 1, 1).split_whitespace().next(), Some("32.0"));
    press(&mut a, "C");
    assert_eq!(lines(&mut a, 1, 1).split_whitespace().next(), Some("17.0"));
    // s: the start, where nothing was live yet.
    press(&mut a, "s");
    assert_eq!(
        lines(&mut a, 7, 7),
        "▶ at 0.000 s: 0 B live · device 32.0 MiB"
    );
    assert_eq!(lines(&mut a, 9, 9), "  nothing live at this moment");
    // O: the previous out-of-memory error, here the only one.
    press(&mut a, "O");
    assert!(lines(&mut a, 7, 7).starts_with("▶ at OOM 1 of 1 4.500 s (asked for 80.0 MiB)"));
    // G, g, PgDn, PgUp on the peak's tree of 7 rows.
    press(&mut a, "p");
    press(&mut a, "G");
    assert_eq!(a.selected[0], 6);
    press(&mut a, "g");
    assert_eq!(a.selected[0], 0);
    code(&mut a, KeyCode::PageDown);
    assert_eq!(a.selected[0], 6);
    code(&mut a, KeyCode::PageUp);
    assert_eq!(a.selected[0], 0);
    // Ctrl-C quits, as q does.
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(a.key(ctrl_c), Action::Quit);
}

/// Each write the terminal's writer receives.
#[derive(Clone, Default)]
struct Writes(std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>>);

impl std::io::Write for Writes {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().push(bytes.to_vec());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A frame reaches the terminal in one write, as one synchronized update (DEC mode 2026),
/// the whole screen in it; the next frame, another write; and what is written when the
/// screen goes (the cursor shown again) goes out then.
#[test]
fn a_frame_goes_out_in_one_write_as_one_synchronized_update() {
    use ratatui::layout::Rect;
    use ratatui::{TerminalOptions, Viewport};
    let writes = Writes::default();
    let options = TerminalOptions {
        viewport: Viewport::Fixed(Rect::new(0, 0, 80, 24)),
    };
    let mut s = super::terminal::Screen::new(writes.clone(), options).unwrap();
    let mut app = app();
    s.draw(&mut app).unwrap();
    {
        let w = writes.0.borrow();
        assert_eq!(w.len(), 1);
        let frame = String::from_utf8_lossy(&w[0]);
        assert!(frame.starts_with("\x1b[?2026h"), "{frame:?}");
        assert!(frame.ends_with("\x1b[?2026l"), "{frame:?}");
        // The first and the last rows of the screen, in the one write.
        assert!(frame.contains("gpumemprof browse"), "{frame:?}");
        assert!(frame.contains("? help"), "{frame:?}");
    }
    press(&mut app, "l");
    s.draw(&mut app).unwrap();
    assert_eq!(writes.0.borrow().len(), 2);
    drop(s);
    let w = writes.0.borrow();
    assert_eq!(w.len(), 3);
    // ratatui's show-cursor sequence, which it writes when the terminal is dropped.
    assert_eq!(w[2], b"\x1b[?25h");
}
