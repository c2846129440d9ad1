//! A trace decoded on a thread of its own: where there are two cores or more, one reads,
//! decompresses and decodes the blocks while the caller's thread replays the records
//! before them, batch by batch, in the order the file has them (so every report is the
//! same as a one-thread pass: the same records, the same damage, at the same places).
//!
//! ```text
//!  decoder thread:  read ─ zstd ─ decode ─► [batch of 4,096] ─► sync channel (4 deep) ─┐
//!  caller:          replay ◄───────────────────────────────────────────────────────────┘
//!                   emptied batches go back to be filled again (no allocation per batch)
//! ```
//!
//! A damaged block the reader skipped is an `Item::Damaged` where it was; an I/O error (or
//! Ctrl-C, which the progress reader turns into one) ends the pass with that error after
//! the records before it. A caller that stops early drops the channel and the decoder
//! stops at its next batch.

use std::io::Read;
use std::sync::mpsc::{channel, sync_channel};

use gpumemprof_format::{ReadError, Record, TraceReader};

/// Records a batch holds: large enough that the channel costs nothing per record, small
/// enough that a batch stays in the caches of both cores (about 300 KiB).
const BATCH: usize = 4096;
/// Batches decoded ahead of the replay.
const AHEAD: usize = 4;

/// What the reader gave, in file order.
#[derive(Debug)]
pub enum Item {
    Record(Record),
    /// A damaged block was skipped here (`TraceReader::damage` counts it).
    Damaged,
    /// A record the consumer took out of its batch (`Item::take`).
    Taken,
}

impl Item {
    /// The item, leaving `Taken` in its place: the consumer owns the record without a copy
    /// of the whole batch.
    pub fn take(&mut self) -> Item {
        std::mem::replace(self, Item::Taken)
    }
}

/// Whether a second thread can help: more than one CPU for this process.
pub fn two_cores() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Calls `apply` with each batch of `reader`'s items, in order, then returns how reading
/// ended. On one core, the batches are decoded on this thread.
pub fn each_batch<R: Read + Send>(
    reader: &mut TraceReader<R>,
    apply: impl FnMut(&mut [Item]) -> Flow,
) -> Result<(), ReadError> {
    each_batch_on(reader, two_cores(), apply)
}

/// `each_batch`, decoding on a second thread only if `threaded`.
pub fn each_batch_on<R: Read + Send>(
    reader: &mut TraceReader<R>,
    threaded: bool,
    mut apply: impl FnMut(&mut [Item]) -> Flow,
) -> Result<(), ReadError> {
    if !threaded {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let end = fill(reader, &mut batch);
            if apply(&mut batch) == Flow::Stop {
                return Ok(());
            }
            batch.clear();
            if let Some(end) = end {
                return end;
            }
        }
    }
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = sync_channel::<Vec<Item>>(AHEAD);
        let (empty_tx, empty_rx) = channel::<Vec<Item>>();
        let decoder = scope.spawn(move || loop {
            let mut batch = empty_rx
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(BATCH));
            let end = fill(reader, &mut batch);
            // The consumer stopped: nothing more to decode.
            if full_tx.send(batch).is_err() {
                return Ok(());
            }
            if let Some(end) = end {
                return end;
            }
        });
        for mut batch in full_rx.iter() {
            if apply(&mut batch) == Flow::Stop {
                break;
            }
            batch.clear();
            let _ = empty_tx.send(batch);
        }
        // Dropping the receiver ends a decoder still sending.
        drop(full_rx);
        decoder
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Whether the consumer wants more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    More,
    Stop,
}

/// Fills `batch` (up to `BATCH` items); `Some(end)` when reading ended (`Ok`: the end of
/// the file; `Err`: an I/O error, after the items before it).
fn fill<R: Read>(
    reader: &mut TraceReader<R>,
    batch: &mut Vec<Item>,
) -> Option<Result<(), ReadError>> {
    while batch.len() < BATCH {
        match reader.next_record() {
            Ok(Some(record)) => batch.push(Item::Record(record)),
            Ok(None) => return Some(Ok(())),
            Err(ReadError::Corrupt { .. }) => batch.push(Item::Damaged),
            Err(e) => return Some(Err(e)),
        }
    }
    None
}
