//! The event pipeline: each hooked thread pushes its events (stacks already interned,
//! see capture/intern.rs) into its own bounded ring (capture/ring.rs); one writer thread drains every
//! ring, writes the definitions of new stacks, puts events back in time order, encodes
//! them and writes compressed blocks.
//!
//! ```text
//!  thread A ─► ring A ─┐ push: one slot store + one release store (full ring => wait, counted)
//!  thread B ─► ring B ─┼──► writer thread:
//!  thread C ─► ring C ─┤      drain every ring → Stack records of stacks interned since
//!  (no ring) ► shared ─┘      the last round → reorder buffer sorted by time
//!              queue          → encode events older than REORDER_WINDOW
//!                             → every flush_ms (or 1 MiB): Stats + zstd block, one write(2)
//!                             → a round of < 1/4 ring: nap (a quarter-full ring unparks it)
//! ```
//!
//! The shared `ArrayQueue` carries the events of threads without a ring: one exiting
//! (other libraries' thread-exit destructors may still free memory) or one whose ring
//! could not be allocated.
//!
//! Lossless: a producer that finds its ring full waits for the writer. After shutdown
//! (the final flush at exit) the writer thread is gone; events that still arrive (CUDA's
//! own atexit frees) are written synchronously by the calling thread under the writer
//! lock, each followed by an updated End record. A push and the writer's final drain
//! are ordered with an asymmetric barrier: `membarrier(2)` on the writer's side once at
//! shutdown, a compiler fence on the pushing side (a full fence per push where the
//! kernel lacks `membarrier`).

use super::core::WriterCore;
use super::membarrier;
use super::output;
use crate::capture::ring::{Registry, Ring};
use crate::capture::thread::{self, ThreadState, RING_GONE};
use crate::sys::clock;
use crate::sys::event::Event;
use crossbeam_queue::ArrayQueue;
use gpumemprof_format::Ending;
use once_cell::sync::OnceCell;
use parking_lot::Mutex;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::thread::Thread;
use std::time::Duration;

/// Slots of the shared queue (threads without a ring).
const SHARED_QUEUE: usize = 1024;

/// An event in the shared queue, with its thread.
pub(super) struct Tagged {
    pub(super) tid: u32,
    pub(super) ev: Event,
}

pub struct Pipeline {
    pub(super) rings: Registry,
    /// Events of threads without a ring.
    pub(super) queue: ArrayQueue<Tagged>,
    /// Whether `membarrier` orders pushes against the final drain (else a fence per push).
    pub(super) asymmetric: bool,
    pub(super) core: Mutex<WriterCore>,
    /// Set once when the writer thread starts; read without a lock to unpark it.
    pub(super) writer: OnceCell<Thread>,
    pub(super) writer_sleeping: AtomicBool,
    pub(super) wake_threshold: usize,
    pub(super) queue_waits: AtomicU64,
    pub(super) shutdown_requested: AtomicBool,
    pub(super) writer_done: AtomicBool,
    /// Set after the writer wrote the End record (`writer_done` is set before, so late
    /// events know to write themselves).
    pub(super) writer_finished: AtomicBool,
    /// `gpumemprof_flush()` requests and the writer's acknowledgements.
    pub(super) flush_requests: AtomicU64,
    /// An out-of-memory asked for an NVML sample now (its process usage at the failure, as
    /// PyTorch's message gives it).
    pub(super) nvml_asked: AtomicBool,
    pub(super) flush_done: AtomicU64,
    pub(super) flush_ns: u64,
    pub(super) start_ns: u64,
    /// NVML sampling interval (0 = off).
    pub(super) nvml_ns: u64,
    /// The trace file's path, once a file exists (at once, or at the flight
    /// recorder's dump); stable for the life of the process.
    pub(super) path: OnceCell<std::ffi::CString>,
    /// `GPUMEMPROF_TRACE_LIST`: the file that gets the trace's path once it exists.
    pub(super) trace_list: OnceCell<String>,
    /// How the process ended, once the session knows (`encode_ending`; 0 = not known).
    pub(super) ending: AtomicU64,
    /// When a bug of the shim stopped recording (`clock::now_ns`; 0: it did not).
    halted_ns: AtomicU64,
    /// The writer thread died of a bug of the shim (`abandon_writer`).
    abandoned: AtomicBool,
    /// Events in the file when the writer finished (read by a signal handler, which must
    /// not take the writer's lock).
    pub(super) events_written: AtomicU64,
    /// The writer thread's kernel thread id (0 until it runs).
    pub(super) writer_tid: std::sync::atomic::AtomicU32,
}

impl Pipeline {
    pub fn new(
        core: WriterCore,
        capacity: usize,
        flush_ms: u64,
        nvml_ms: u64,
        start_ns: u64,
    ) -> Pipeline {
        Pipeline {
            rings: Registry::new(capacity),
            queue: ArrayQueue::new(SHARED_QUEUE),
            asymmetric: membarrier::register(),
            core: Mutex::new(core),
            writer: OnceCell::new(),
            writer_sleeping: AtomicBool::new(false),
            wake_threshold: (capacity.next_power_of_two() / 4).max(1),
            queue_waits: AtomicU64::new(0),
            shutdown_requested: AtomicBool::new(false),
            writer_done: AtomicBool::new(false),
            writer_finished: AtomicBool::new(false),
            flush_requests: AtomicU64::new(0),
            nvml_asked: AtomicBool::new(false),
            flush_done: AtomicU64::new(0),
            flush_ns: flush_ms * 1_000_000,
            start_ns,
            nvml_ns: nvml_ms * 1_000_000,
            path: OnceCell::new(),
            trace_list: OnceCell::new(),
            ending: AtomicU64::new(0),
            halted_ns: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
            events_written: AtomicU64::new(0),
            writer_tid: std::sync::atomic::AtomicU32::new(0),
        }
    }

    pub fn set_writer(&self, t: Thread) {
        let _ = self.writer.set(t);
    }

    /// Where `set_path` notes the trace (`GPUMEMPROF_TRACE_LIST`); before `set_path`.
    pub fn set_trace_list(&self, list: Option<&str>) {
        if let Some(list) = list {
            let _ = self.trace_list.set(list.to_string());
        }
    }

    /// Publishes the trace file's path (once the file exists: at start, or at the flight
    /// recorder's dump) and adds it to the trace list, if any.
    pub fn set_path(&self, path: &str) {
        let first = self
            .path
            .set(std::ffi::CString::new(path).unwrap_or_default())
            .is_ok();
        if let (true, Some(list)) = (first, self.trace_list.get()) {
            output::note_trace(list, path);
        }
    }

    pub fn path(&self) -> Option<&std::ffi::CStr> {
        self.path.get().map(|c| c.as_c_str())
    }

    /// Records how the process ends, before the final flush that writes it (the first
    /// ending set wins: a signal during exit handlers does not replace the exit status).
    pub fn set_ending(&self, ending: Ending) {
        let v = match ending {
            Ending::Exit(status) => (1 << 32) | u64::from(status as u32),
            Ending::Signal(sig) => (2 << 32) | u64::from(sig),
        };
        let _ = self
            .ending
            .compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The ending `set_ending` recorded, if any.
    pub(super) fn ending(&self) -> Option<Ending> {
        let v = self.ending.load(Ordering::Acquire);
        match v >> 32 {
            1 => Some(Ending::Exit(v as u32 as i32)),
            2 => Some(Ending::Signal(v as u32)),
            _ => None,
        }
    }

    /// Notes that a bug of the shim stopped recording now (`session::halt`): the trace's
    /// end says so with a `Stopped` record (the first time noted wins).
    pub fn halt(&self) {
        let now = clock::now_ns().max(1);
        let _ = self
            .halted_ns
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
    }

    /// When `halt` was noted, if it was.
    pub(super) fn halted(&self) -> Option<u64> {
        Some(self.halted_ns.load(Ordering::Acquire)).filter(|&t| t != 0)
    }

    /// The writer thread died of a bug of the shim: nobody waits for it any more (a full
    /// ring's thread writes its events itself, as after the writer's end; a signal handler
    /// finds it finished), and the exit handler completes the trace (`shutdown`).
    pub fn abandon_writer(&self) {
        self.abandoned.store(true, Ordering::Release);
        self.writer_done.store(true, Ordering::Release);
        self.writer_finished.store(true, Ordering::Release);
    }

    /// Events in the file once the writer finished (0 before): lock-free, for a signal
    /// handler.
    pub fn events_written(&self) -> u64 {
        self.events_written.load(Ordering::Acquire)
    }

    /// Whether the writer has completed the trace (its final drain ran; events after it
    /// are written by the threads that make them).
    pub fn finished(&self) -> bool {
        self.writer_done.load(Ordering::Acquire) && !self.abandoned.load(Ordering::Acquire)
    }

    /// Whether the calling thread is the writer (a signal handler must not wait for
    /// itself).
    pub fn on_writer_thread(&self) -> bool {
        self.writer_tid.load(Ordering::Relaxed) == thread::tid()
    }

    /// Before `fork`: hold the writer's lock, so the child never inherits a
    /// half-written block or a lock held by a thread that does not exist there.
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.core.lock());
    }

    /// After `fork`, in the parent (the child abandons this pipeline).
    ///
    /// # Safety
    /// Only after `lock_for_fork` on this thread.
    pub unsafe fn unlock_after_fork(&self) {
        self.core.force_unlock();
    }

    pub(super) fn wake_writer(&self) {
        if self.writer_sleeping.swap(false, Ordering::AcqRel) {
            if let Some(t) = self.writer.get() {
                t.unpark();
            }
        }
    }

    /// Hands one event of the calling thread to the writer. Never loses it: waits while
    /// the thread's ring is full, and writes it itself once the writer thread has
    /// finished. Always inlined into `hooks::record::record`, so the event is built in
    /// registers and stored once, into its ring slot (left to the compiler, it became a
    /// call once the shim had one more hook, and the tensor path slowed: BENCHMARKS.md).
    #[inline(always)]
    pub fn push(&self, me: &ThreadState, ev: &Event) {
        let mut ring = me.ring();
        if ring.is_null() {
            ring = self.claim_ring(me);
        }
        if ring == RING_GONE {
            return self.push_shared(me.tid(), ev);
        }
        // SAFETY: a ring is a leaked Box, never freed; this thread owns it (its TLS says
        // so) and the hook guard keeps this push from being re-entered.
        let ring = unsafe { &*ring };
        // SAFETY: as above.
        let used = match unsafe { ring.push(ev) } {
            Ok(used) => used,
            Err(()) => match self.wait_for_room(ring, me.tid(), ev) {
                Some(used) => used,
                None => return, // written late, by this thread
            },
        };
        self.after_push();
        if used >= ring.capacity() / 4 && self.writer_sleeping.load(Ordering::Relaxed) {
            // `used` counts from a stale tail: look again before waking the writer.
            // SAFETY: this thread owns the ring.
            if unsafe { ring.refresh_used() } >= ring.capacity() / 4 {
                self.wake_writer();
            }
        }
    }

    /// This thread's first event (or first since fork): a ring of its own, or
    /// `RING_GONE` when none can be had (the shared queue then takes its events).
    #[cold]
    fn claim_ring(&self, me: &ThreadState) -> *const Ring {
        let ring = match self.rings.claim(me.tid()) {
            Some(r) if thread::note_owner(r) => r as *const Ring,
            Some(r) => {
                // Without the exit hook it could never be reused: give it back now.
                r.retire();
                RING_GONE
            }
            None => RING_GONE,
        };
        me.set_ring(ring);
        ring
    }

    /// Orders a push before the check of `writer_done` (see `writer_finish`): a compiler
    /// fence when the writer's side issues `membarrier`, else a full fence.
    #[inline(always)]
    fn after_push(&self) {
        if self.asymmetric {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        if self.writer_done.load(Ordering::Relaxed) {
            self.write_late(None);
        }
    }

    /// The ring is full: waits for room (`wait_for_writer`). Returns the ring's fill
    /// after the push, or None if the writer had finished and this thread wrote the event
    /// itself.
    #[cold]
    fn wait_for_room(&self, ring: &Ring, tid: u32, ev: &Event) -> Option<u64> {
        // SAFETY: the caller owns the ring.
        let used = self.wait_for_writer(|| unsafe { ring.push(ev) }.ok());
        if used.is_none() {
            self.write_late(Some((tid, ev)));
        }
        used
    }

    /// The shared queue, for a thread without a ring: waits while it is full.
    #[cold]
    fn push_shared(&self, tid: u32, ev: &Event) {
        let mut item = Some(Tagged { tid, ev: *ev });
        let mut push = || match self.queue.push(item.take()?) {
            Ok(()) => Some(()),
            Err(back) => {
                item = Some(back);
                None
            }
        };
        if push().is_none() && self.wait_for_writer(&mut push).is_none() {
            self.write_late(Some((tid, ev)));
            return;
        }
        self.after_push();
        if self.writer_sleeping.load(Ordering::Relaxed) && self.queue.len() >= SHARED_QUEUE / 4 {
            self.wake_writer();
        }
    }

    /// A full ring or queue: counts one queue wait, then wakes the writer and retries
    /// `push` until it succeeds, spinning first (the writer frees a whole ring in one
    /// drain, a few microseconds once it runs), then yielding, then sleeping briefly.
    /// `None` when the writer finished first: the caller writes the event itself.
    #[cold]
    fn wait_for_writer<T>(&self, mut push: impl FnMut() -> Option<T>) -> Option<T> {
        self.queue_waits.fetch_add(1, Ordering::Relaxed);
        let mut spins = 0u32;
        loop {
            if self.writer_done.load(Ordering::Acquire) {
                return None;
            }
            self.writer_sleeping.store(true, Ordering::Release);
            self.wake_writer();
            spins += 1;
            if spins < 4096 {
                std::hint::spin_loop();
            } else if spins < 4352 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
            if let Some(done) = push() {
                return Some(done);
            }
        }
    }
}

impl Pipeline {
    /// `flush_now` after an out-of-memory, with an NVML sample taken first (when NVML is
    /// sampled at all): the process's usage at the failure is in the trace.
    pub fn flush_after_oom(&self, timeout: Duration) -> bool {
        self.nvml_asked.store(true, Ordering::Release);
        self.flush_now(timeout)
    }

    /// Writes every event pushed so far to the file (not merely queued) and returns
    /// once it is there, or after `timeout` (false).
    pub fn flush_now(&self, timeout: Duration) -> bool {
        if self.writer_done.load(Ordering::Acquire) {
            return true; // events after shutdown are written synchronously
        }
        let target = self.flush_requests.fetch_add(1, Ordering::AcqRel) + 1;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.writer_sleeping.store(true, Ordering::Release);
            self.wake_writer();
            if self.flush_done.load(Ordering::Acquire) >= target
                || self.writer_done.load(Ordering::Acquire)
            {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// `shutdown` for a signal handler: no lock, no allocation; true if the writer
    /// finished in time.
    pub fn shutdown_from_signal(&self, timeout: Duration) -> bool {
        self.shutdown_requested.store(true, Ordering::Release);
        self.writer_sleeping.store(true, Ordering::Release);
        self.wake_writer();
        let deadline = std::time::Instant::now() + timeout;
        // Not `writer_done`: that is set before the End record is written.
        while !self.writer_finished.load(Ordering::Acquire) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// Asks the writer to drain, write the End record and stop; waits up to `timeout`.
    /// Returns what was written, or None if the writer did not finish.
    pub fn shutdown(&self, timeout: Duration) -> Option<Written> {
        self.shutdown_requested.store(true, Ordering::Release);
        self.writer_sleeping.store(true, Ordering::Release);
        self.wake_writer();
        let deadline = std::time::Instant::now() + timeout;
        while !self.writer_done.load(Ordering::Acquire) {
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if self.abandoned.swap(false, Ordering::AcqRel) {
            // The writer died: what it left in the rings and its pending events are
            // written here, then why and how the recording ended, as the writer would.
            self.write_late(None);
        }
        let core = self.core.lock();
        Some(Written {
            events: core.events.saturating_sub(core.dropped),
            stopped: core.stopped,
            dropped: core.dropped,
            out_of_memory: core.out_of_memory.errors,
            path: core.path().to_string(),
        })
    }
}

/// What a finished trace holds, for the exit line.
pub struct Written {
    /// Events in the file (those encoded after a failed write are not).
    pub events: u64,
    /// Why and when (ns since start) recording stopped early, when a write failed.
    pub stopped: Option<(gpumemprof_format::StopReason, u64)>,
    /// Events recorded but not written (after the stop).
    pub dropped: u64,
    /// Out-of-memory errors (a framework's refusal and its failed CUDA calls count once).
    pub out_of_memory: u64,
    /// The trace file (empty if none was written: a flight recorder that never saw an
    /// out-of-memory).
    pub path: String,
}
