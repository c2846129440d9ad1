//! The writer core's emitting in blocks (`WriterCore::emit_one_block`): the writer thread
//! writes one block, then drains the rings, then the next.

use super::core::WriterCore;
use super::output::ZSTD_LEVEL;
use crate::sys::event::{Event, EventKind};
use gpumemprof_format::{open_path, Record, TraceWriter, BLOCK_FLUSH_BYTES};
use std::fs::File;

/// Allocations and frees of one site, `n` events 500 stamps apart from stamp `first`,
/// accepted and not emitted.
fn core_with_pending(path: &std::path::Path, n: u64, first: u64) -> WriterCore {
    let file = File::create(path).unwrap();
    let out = TraceWriter::new(file, &serde_json::json!({"test": true}), ZSTD_LEVEL).unwrap();
    let (mut core, _) = WriterCore::new(out, path.display().to_string(), 0);
    for i in 0..n {
        let kind = if i % 2 == 0 {
            EventKind::Alloc
        } else {
            EventKind::Free
        };
        let ev = Event {
            time_ns: first + i * 500,
            address: 0x7000_0000_0000 + (i / 2 % 64) * 0x20_0000,
            size: 4096,
            device: 0,
            api: 1 + (i % 2) as u16,
            ..Event::new(kind)
        };
        core.accept(7, &ev);
    }
    core
}

fn events_in(path: &std::path::Path) -> u64 {
    let mut r = open_path(path).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += matches!(rec, Record::Alloc(_) | Record::Free(_)) as u64;
    }
    n
}

/// 200,000 events take several blocks: each call writes one and says more remain, the
/// last says none do; every event is in the file once.
#[test]
fn one_block_at_a_time_until_all_are_written() {
    let dir = std::env::temp_dir().join(format!("gpumemprof-emit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("blocks.trace");
    let n = 200_000;
    let mut core = core_with_pending(&path, n, 1_000);
    let header = std::fs::metadata(&path).unwrap().len();
    let mut calls = 0;
    let mut written = vec![];
    while core.emit_one_block(u64::MAX) {
        calls += 1;
        written.push(core.events);
        assert_eq!(core.events + core.pending.len() as u64, n);
    }
    // Every block after the first (which also holds the records that open a trace) holds
    // as many of these events as the next (alone in this test binary: 24,928, then
    // 24,966 each, 10.5 raw bytes an event; a stamp's width depends on the process's
    // clock, which other tests set up); blocks fill while a whole block's worth is left,
    // and the rest waits in the open block.
    let each = written[1] - written[0];
    let want: Vec<u64> = (0..calls).map(|k| written[0] + k * each).collect();
    assert_eq!(written, want);
    assert!(
        calls >= 4 && n - written[calls as usize - 1] < each,
        "{written:?}"
    );
    assert!(std::fs::metadata(&path).unwrap().len() > header);
    // The last call wrote what was left into the open block; `finish` writes it.
    assert!(core.pending.is_empty());
    core.finish(0, None, None);
    assert_eq!(events_in(&path), n);
    assert_eq!(BLOCK_FLUSH_BYTES, 256 << 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Nothing before the cutoff: nothing is written and nothing is said to remain. The
/// events' stamps lie decades after the writer's start, whether the process stamps in
/// TSC ticks or in ns (other tests set the clock up either way; stamps near 0 came
/// before the start in one way and after it in the other, and this test failed in about
/// one run in five).
#[test]
fn nothing_before_the_cutoff_is_nothing_to_write() {
    let dir = std::env::temp_dir().join(format!("gpumemprof-emit0-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("none.trace");
    let mut core = core_with_pending(&path, 10, 1 << 60);
    assert!(!core.emit_one_block(0));
    assert_eq!((core.events, core.pending.len()), (0, 10));
    let _ = std::fs::remove_dir_all(&dir);
}
