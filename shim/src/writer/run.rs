//! The writer thread: drain every ring and the shared queue into the writer's core,
//! sample NVML, emit what left the reorder window, flush blocks on time and on request,
//! nap while little arrives; at shutdown the final drain (ordered against pushes by
//! `membarrier`) and the End record. After it, late events are written by the threads
//! that make them (`write_late`).

use super::core::WriterCore;
use super::membarrier;
use super::pending::Pending;
use super::pipeline::Pipeline;
use crate::capture::thread;
use crate::sys::clock;
use crate::sys::event::Event;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

/// Events younger than this stay in the reorder buffer: far longer than the few
/// microseconds between a hook's timestamp and its push (a quarter of the flush interval
/// where that is shorter, `reorder_window`).
const REORDER_WINDOW_NS: u64 = 2_000_000;

/// The promise is that no event waits longer than the flush interval (`GPUMEMPROF_FLUSH_MS`)
/// to be written. An event can arrive just after a flush, wait out the reorder window and
/// the writer's nap, and then the block must still be compressed and written, while the
/// writer thread competes with the program's for a core. So blocks are written every half
/// interval, and the other half is the margin (measured in BENCHMARKS.md, "lost window").
fn flush_period(flush_ns: u64) -> u64 {
    (flush_ns / 2).max(100_000)
}

fn reorder_window(flush_ns: u64) -> u64 {
    REORDER_WINDOW_NS.min(flush_ns / 4)
}

impl Pipeline {
    /// Moves every pushed event (all rings and the shared queue) into the writer's
    /// reorder buffer; returns how many. The caller holds the writer lock.
    pub(super) fn drain(&self, core: &mut WriterCore) -> usize {
        // SAFETY: the caller holds `core`'s lock: the only consumer.
        let mut n = unsafe { self.rings.drain_all(|tid, e| core.accept(tid, e)) };
        while let Some(t) = self.queue.pop() {
            core.accept(t.tid, &t.ev);
            n += 1;
        }
        n
    }

    /// After the writer finished: drains what is left (and `ev`) straight into the file,
    /// followed by an updated End record.
    pub(super) fn write_late(&self, ev: Option<(u32, &Event)>) {
        let mut core = self.core.lock();
        self.drain(&mut core);
        if let Some((tid, e)) = ev {
            core.accept(tid, e);
        }
        core.finish(
            self.queue_waits.load(Ordering::Relaxed),
            self.ending(),
            self.halted(),
        );
        if let Some(p) = core.take_new_path() {
            self.set_path(&p);
        }
    }

    /// The writer thread's body.
    pub fn run_writer(&self) {
        thread::mark_internal_thread();
        // Its wake-ups must not preempt the program's threads (`sys::sched`); refused,
        // it runs as any thread does.
        let _ = crate::sys::sched::as_batch();
        self.writer_tid.store(thread::tid(), Ordering::Relaxed);
        // NVML is asked from here only (never CUDA); loading it may take a while, so
        // it happens on the first round, not before the writer starts.
        let mut nvml = if self.nvml_ns > 0 {
            super::nvml::Nvml::open()
        } else {
            None
        };
        if nvml.is_some() {
            self.core.lock().follow_live_device();
        }
        let (mut next_sample, mut last_sample) = (0u64, 0u64);
        // When NVML is due early, after a rise of the live device memory (`live_high`: a
        // job whose memory rises between two samples would otherwise show NVML's view from
        // before the rise as the most it used), and whether a sample was just taken.
        let (mut early, mut sampled) = (None::<u64>, false);
        let mut samples = Vec::new();
        loop {
            let shutting = self.shutdown_requested.load(Ordering::Acquire);
            if shutting {
                crate::sys::faults::writer_stall_due();
            }
            if let Some(n) = nvml.as_mut() {
                let now = clock::now_ns();
                let changed = early.is_some_and(|due| now >= due);
                // An out-of-memory waits for its flush: the sample sees the memory then.
                let asked = self.nvml_asked.swap(false, Ordering::AcqRel);
                if now >= next_sample || changed || asked {
                    n.sample(clock::now(), &mut samples);
                    next_sample = now + self.nvml_ns;
                    last_sample = now;
                    sampled = true;
                }
            }
            let (popped, more) = {
                let mut core = self.core.lock();
                for m in samples.drain(..) {
                    core.stage(Pending::Sample(m));
                }
                if std::mem::take(&mut sampled) {
                    core.live_sampled();
                }
                let n = self.drain(&mut core);
                crate::sys::faults::writer_panic_due(n);
                core.define_stacks();
                let now = clock::now_ns();
                let rel = now.saturating_sub(self.start_ns);
                let cutoff = rel.saturating_sub(reorder_window(self.flush_ns));
                let more = core.emit_one_block(cutoff);
                early = core.live_due(last_sample);
                if let Some(p) = core.take_new_path() {
                    self.set_path(&p);
                }
                if shutting {
                    break;
                }
                let asked = self.flush_requests.load(Ordering::Acquire);
                if asked > self.flush_done.load(Ordering::Relaxed) {
                    // The requester pushed its events before it asked, and the Acquire load
                    // above saw the request: draining again now sees every one of them
                    // (the drain above may have run before they were pushed).
                    self.drain(&mut core);
                    core.define_stacks();
                    core.emit(None);
                    core.periodic_flush(self.queue_waits.load(Ordering::Relaxed), now);
                    if let Some(p) = core.take_new_path() {
                        self.set_path(&p);
                    }
                    self.flush_done.store(asked, Ordering::Release);
                } else if now.saturating_sub(core.last_flush_ns) >= flush_period(self.flush_ns) {
                    core.periodic_flush(self.queue_waits.load(Ordering::Relaxed), now);
                }
                (n, more)
            };
            if popped >= self.wake_threshold || more {
                // Producers are busy, or a block was written with more to emit: drain the
                // rings before going on.
                continue;
            }
            // Less than a quarter of the queue arrived: nap (each round re-sorts the reorder
            // window, so tiny rounds waste work) until producers fill a quarter of the queue
            // (they unpark us), the reorder window passes, or the next flush is due.
            self.writer_sleeping.store(true, Ordering::Release);
            if !self.shutdown_requested.load(Ordering::Acquire) {
                let (has_pending, last_flush) = {
                    let core = self.core.lock();
                    (!core.pending.is_empty(), core.last_flush_ns)
                };
                // Never past the next flush that is due.
                let due = last_flush
                    .saturating_add(flush_period(self.flush_ns))
                    .saturating_sub(clock::now_ns())
                    .max(100_000);
                let mut nap = if has_pending {
                    Duration::from_nanos(reorder_window(self.flush_ns).min(due))
                } else {
                    Duration::from_nanos(due)
                };
                if nvml.is_some() {
                    let due = early.map_or(next_sample, |d| d.min(next_sample));
                    let until = due.saturating_sub(clock::now_ns());
                    nap = nap.min(Duration::from_nanos(until.max(1_000_000)));
                }
                std::thread::park_timeout(nap);
            }
            self.writer_sleeping.store(false, Ordering::Release);
        }
        self.writer_finish();
    }

    fn writer_finish(&self) {
        let mut core = self.core.lock();
        self.writer_done.store(true, Ordering::Release);
        // Pairs with `after_push`: every push either lands before the drain below or
        // sees `writer_done` and writes itself (under this lock, after us).
        if !(self.asymmetric && membarrier::all_threads()) {
            fence(Ordering::SeqCst);
        }
        self.drain(&mut core);
        core.finish(
            self.queue_waits.load(Ordering::Relaxed),
            self.ending(),
            self.halted(),
        );
        if let Some(p) = core.take_new_path() {
            self.set_path(&p);
        }
        self.events_written.store(core.events, Ordering::Release);
        self.writer_finished.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::{flush_period, reorder_window};

    #[test]
    fn blocks_are_written_every_half_flush_interval_after_a_short_reorder_window() {
        // The default 100 ms: a block every 50 ms (the other half is the margin for writing
        // it), events held 2 ms for ordering.
        assert_eq!(flush_period(100_000_000), 50_000_000);
        assert_eq!(reorder_window(100_000_000), 2_000_000);
        // 4 ms: every 2 ms, held a quarter of the interval (1 ms).
        assert_eq!(flush_period(4_000_000), 2_000_000);
        assert_eq!(reorder_window(4_000_000), 1_000_000);
        // The shortest interval (1 ms): every 0.5 ms, held 0.25 ms.
        assert_eq!(flush_period(1_000_000), 500_000);
        assert_eq!(reorder_window(1_000_000), 250_000);
        // Never more often than every 0.1 ms, whatever the interval.
        assert_eq!(flush_period(100_000), 100_000);
        // Each period and window, together, fit in the interval they serve.
        for flush_ms in [1u64, 2, 10, 100, 1000, 60_000] {
            let flush = flush_ms * 1_000_000;
            assert!(
                flush_period(flush) + reorder_window(flush) <= flush,
                "{flush_ms} ms"
            );
        }
    }
}
