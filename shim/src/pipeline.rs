//! The event pipeline: each hooked thread pushes its events (stacks already interned,
//! see intern.rs) into its own bounded ring (ring.rs); one writer thread drains every
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
//! Why reorder: a free is stamped before the real call and an allocation after it, so
//! when thread A frees an address that thread B gets back at once, A's free is always
//! older than B's allocation; but A may push later than B. Sorting a short window by
//! time puts them back in happens-before order.
//!
//! Lossless: a producer that finds its ring full waits for the writer. After shutdown
//! (the final flush at exit) the writer thread is gone; events that still arrive (CUDA's
//! own atexit frees) are written synchronously by the calling thread under the writer
//! lock, each followed by an updated End record. A push and the writer's final drain
//! are ordered with an asymmetric barrier: `membarrier(2)` on the writer's side once at
//! shutdown, a compiler fence on the pushing side (a full fence per push where the
//! kernel lacks `membarrier`).

use crate::clock;
use crate::event::{Event, EventKind};
use crate::guard::{ThreadState, RING_GONE};
use crate::intern;
use crate::lifecycle;
use crate::modules;
use crate::output;
use crate::recorder::Recorder;
use crate::ring::{Registry, Ring};
use crossbeam_queue::ArrayQueue;
use gpumemprof_format::{
    Alloc, AllocFailed, Free, MemKind, Module, Nvtx, NvtxOp, Sample, Stats, TraceWriter,
    BLOCK_FLUSH_BYTES,
};
use once_cell::sync::OnceCell;
use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::thread::Thread;
use std::time::Duration;

/// `cudaErrorMemoryAllocation`, `CUDA_ERROR_OUT_OF_MEMORY`, `hipErrorOutOfMemory`.
const OUT_OF_MEMORY: u32 = 2;

/// Events younger than this stay in the reorder buffer: far longer than the few
/// microseconds between a hook's timestamp and its push.
const REORDER_WINDOW_NS: u64 = 2_000_000;
/// The reorder buffer is emitted whole if it grows past this many events.
const REORDER_MAX: usize = 1 << 20;
/// Slots of the shared queue (threads without a ring).
const SHARED_QUEUE: usize = 1024;
/// zstd level. Level 1 compresses packed event records smaller than level 3 does (3.24
/// against 3.49 bytes per event on the analyzer benchmark's training loop) and in half
/// the time (BENCHMARKS.md, "fourth session").
pub const ZSTD_LEVEL: i32 = 1;

/// An event in the shared queue, with its thread.
struct Tagged {
    tid: u32,
    ev: Event,
}

pub struct Pipeline {
    rings: Registry,
    /// Events of threads without a ring.
    queue: ArrayQueue<Tagged>,
    /// Whether `membarrier` orders pushes against the final drain (else a fence per push).
    asymmetric: bool,
    core: Mutex<WriterCore>,
    /// Set once when the writer thread starts; read without a lock to unpark it.
    writer: OnceCell<Thread>,
    writer_sleeping: AtomicBool,
    wake_threshold: usize,
    queue_waits: AtomicU64,
    shutdown_requested: AtomicBool,
    writer_done: AtomicBool,
    /// Set after the writer wrote the End record (`writer_done` is set before, so late
    /// events know to write themselves).
    writer_finished: AtomicBool,
    /// `gpumemprof_flush()` requests and the writer's acknowledgements.
    flush_requests: AtomicU64,
    flush_done: AtomicU64,
    flush_ns: u64,
    start_ns: u64,
    /// NVML sampling interval (0 = off).
    nvml_ns: u64,
    /// The trace file's path, once a file exists (at once, or at the flight
    /// recorder's dump); stable for the life of the process.
    path: OnceCell<std::ffi::CString>,
    /// `GPUMEMPROF_TRACE_LIST`: the file that gets the trace's path once it exists.
    trace_list: OnceCell<String>,
    /// The writer thread's kernel thread id (0 until it runs).
    writer_tid: std::sync::atomic::AtomicU32,
}

/// Events as they wait in the reorder buffer: already interned, without frames.
#[derive(Clone, Debug)]
pub(crate) enum Pending {
    Alloc(Alloc),
    Free(Free),
    /// Boxed: failures are rare, and without their 72 bytes every event moved through the
    /// reorder buffer (and sorted there) is one 64-byte line.
    Failed(Box<AllocFailed>),
    Sample(Sample),
    Nvtx(Nvtx),
}

impl Pending {
    /// The same event with its time replaced (a stamp converted to trace ns).
    fn retimed(self, t: u64) -> Pending {
        match self {
            Pending::Alloc(mut a) => {
                a.time_ns = t;
                Pending::Alloc(a)
            }
            Pending::Free(mut f) => {
                f.time_ns = t;
                Pending::Free(f)
            }
            Pending::Failed(mut f) => {
                f.time_ns = t;
                Pending::Failed(f)
            }
            Pending::Sample(mut m) => {
                m.time_ns = t;
                Pending::Sample(m)
            }
            Pending::Nvtx(mut n) => {
                n.time_ns = t;
                Pending::Nvtx(n)
            }
        }
    }

    fn time(&self) -> u64 {
        match self {
            Pending::Alloc(a) => a.time_ns,
            Pending::Free(f) => f.time_ns,
            Pending::Failed(f) => f.time_ns,
            Pending::Sample(s) => s.time_ns,
            Pending::Nvtx(n) => n.time_ns,
        }
    }
}

/// Where encoded records go.
enum Sink {
    File(TraceWriter<File>),
    /// The flight recorder, until the first out-of-memory failure.
    Recorder(Box<Recorder>),
}

pub struct WriterCore {
    sink: Sink,
    /// The trace's path; empty while the flight recorder has written nothing.
    path: String,
    /// Set when the flight recorder created the file (the pipeline publishes it).
    new_path: Option<String>,
    quiet: bool,
    start_ns: u64,
    /// Stamps (TSC or ns) to trace nanoseconds.
    clock: clock::Converter,
    fresh_stacks: Vec<(u64, Box<[u64]>)>,
    /// NVTX names interned since the last definitions were written; the flight recorder
    /// keeps every one until its dump.
    nvtx_names: Vec<(u64, String)>,
    /// The reorder buffer: emitted from the front, so what stays is never moved.
    pending: VecDeque<Pending>,
    /// Whether `pending` is in time order (each ring is; several threads' are not).
    sorted: bool,
    module_gen: (u64, u64),
    known_modules: HashSet<(u64, String)>,
    events: u64,
    dropped: u64,
    last_flush_ns: u64,
    io_failed: bool,
}

impl WriterCore {
    /// A writer over a trace whose header is written; also returns the module map it
    /// recorded first.
    pub fn new(out: TraceWriter<File>, path: String, start_ns: u64) -> (WriterCore, Vec<Module>) {
        Self::with_sink(Sink::File(out), path, start_ns)
    }

    /// A flight recorder (`GPUMEMPROF_MODE=oom`): no file until an out-of-memory.
    pub fn recorder(
        ring: usize,
        header: serde_json::Value,
        wanted: String,
        quiet: bool,
        start_ns: u64,
    ) -> (WriterCore, Vec<Module>) {
        let rec = Recorder::new(ring, header, wanted);
        let (mut core, modules) =
            Self::with_sink(Sink::Recorder(Box::new(rec)), String::new(), start_ns);
        core.quiet = quiet;
        (core, modules)
    }

    fn with_sink(sink: Sink, path: String, start_ns: u64) -> (WriterCore, Vec<Module>) {
        let mut core = WriterCore {
            sink,
            path,
            new_path: None,
            quiet: false,
            start_ns,
            clock: clock::Converter::new(),
            fresh_stacks: Vec::new(),
            nvtx_names: Vec::new(),
            pending: VecDeque::with_capacity(4096),
            sorted: true,
            module_gen: (0, 0),
            known_modules: HashSet::new(),
            events: 0,
            dropped: 0,
            last_flush_ns: start_ns,
            io_failed: false,
        };
        let modules = core.refresh_modules(start_ns);
        (core, modules)
    }

    /// Records modules loaded since the last scan (only scans when the loader's
    /// counters moved) and returns them.
    fn refresh_modules(&mut self, now: u64) -> Vec<Module> {
        let gen = modules::generation();
        if gen == self.module_gen {
            return Vec::new();
        }
        self.module_gen = gen;
        // A library loaded since: perhaps the Python interpreter (embedded programs).
        crate::python::refresh();
        let t = now.saturating_sub(self.start_ns);
        let mut fresh = Vec::new();
        for m in modules::scan(t) {
            if self.known_modules.insert((m.start, m.path.clone())) {
                match &mut self.sink {
                    Sink::File(out) => out.encoder().module(&m),
                    Sink::Recorder(r) => r.modules.push(m.clone()),
                }
                fresh.push(m);
            }
        }
        fresh
    }

    /// Writes the definitions of stacks interned since the last call. Called after
    /// popping events, so every stack those events use is defined before them.
    fn define_stacks(&mut self) {
        let mut codes = Vec::new();
        intern::take_fresh(&mut self.fresh_stacks, &mut codes);
        match &mut self.sink {
            Sink::File(out) => {
                // Codes first: the new stacks may name them.
                for c in &codes {
                    out.encoder().py_code(c);
                }
                for (id, frames) in self.fresh_stacks.drain(..) {
                    out.encoder().stack(id, &frames);
                }
            }
            Sink::Recorder(r) => {
                r.codes.append(&mut codes);
                r.stacks.append(&mut self.fresh_stacks);
            }
        }
        self.define_nvtx_names();
    }

    /// Writes the NVTX names interned since the last call (before the events that use
    /// them, as `define_stacks` does for stacks); the flight recorder keeps them instead.
    fn define_nvtx_names(&mut self) {
        crate::nvtx::take_fresh_names(&mut self.nvtx_names);
        if let Sink::File(out) = &mut self.sink {
            for (id, text) in self.nvtx_names.drain(..) {
                out.encoder().nvtx_string(id, &text);
            }
        }
    }

    /// Queues an event of thread `tid` for ordering (its time stays a raw stamp until
    /// `emit`).
    fn accept(&mut self, tid: u32, ev: &Event) {
        let stack = ev.stack;
        let time_ns = ev.time_ns;
        let p = match ev.kind {
            EventKind::Alloc => Pending::Alloc(Alloc {
                time_ns,
                tid,
                api: ev.api,
                kind: MemKind::from_u8(ev.mem),
                device: ev.device,
                address: ev.address,
                size: ev.size,
                stream: ev.stream,
                pool: ev.pool,
                stack: stack as u64,
            }),
            EventKind::Free => Pending::Free(Free {
                time_ns,
                tid,
                api: ev.api,
                address: ev.address,
                stream: ev.stream,
                stack: stack as u64,
                result: ev.result,
                flags: ev.aux as u8,
                kind: MemKind::from_u8(ev.mem),
                size: ev.size,
            }),
            EventKind::AllocFailed => Pending::Failed(Box::new(AllocFailed {
                time_ns,
                tid,
                api: ev.api,
                kind: MemKind::from_u8(ev.mem),
                device: ev.device,
                size: ev.size,
                stream: ev.stream,
                pool: ev.pool,
                stack: stack as u64,
                result: ev.result,
                // A failure has no address: that field carries the device's free bytes.
                mem_free: ev.address,
                mem_total: ev.aux,
            })),
            EventKind::Nvtx => Pending::Nvtx(Nvtx {
                time_ns,
                tid,
                op: NvtxOp::from_u8(ev.mem),
                domain: ev.address,
                name: ev.size,
                range: ev.aux,
            }),
        };
        self.stage(p);
    }

    /// Adds to the reorder buffer, noting whether it is still in order.
    #[inline]
    fn stage(&mut self, p: Pending) {
        if let Some(last) = self.pending.back() {
            if p.time() < last.time() {
                self.sorted = false;
            }
        }
        self.pending.push_back(p);
    }

    /// Encodes, in time order, every pending event stamped at or before `cutoff`
    /// (relative ns); `None` emits everything.
    fn emit(&mut self, cutoff: Option<u64>) {
        if self.pending.is_empty() {
            return;
        }
        // Every pending stamp is older than this anchor: converting interpolates.
        self.clock.anchor();
        // Stable: events of one thread keep their program order on equal stamps. The
        // conversion is monotonic, so stamp order is time order. A buffer from one thread
        // is in order already.
        if !self.sorted {
            self.pending.make_contiguous().sort_by_key(Pending::time);
            self.sorted = true;
        }
        let n = match cutoff {
            Some(c) if self.pending.len() < REORDER_MAX => {
                // One inverse conversion, then integer comparisons of stamps.
                let last = self
                    .clock
                    .stamp_at_or_before(self.start_ns.saturating_add(c));
                self.pending.partition_point(|p| p.time() <= last)
            }
            _ => self.pending.len(),
        };
        for _ in 0..n {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let t = self.clock.to_ns(p.time()).saturating_sub(self.start_ns);
            self.put(p.retimed(t));
        }
    }

    /// Encodes one event (or hands it to the flight recorder).
    fn put(&mut self, p: Pending) {
        match &mut self.sink {
            Sink::File(out) => {
                let enc = out.encoder();
                match p {
                    Pending::Alloc(a) => enc.alloc(&a),
                    Pending::Free(f) => enc.free(&f),
                    Pending::Failed(f) => enc.alloc_failed(&f),
                    Pending::Sample(s) => enc.sample(&s),
                    Pending::Nvtx(n) => enc.nvtx(&n),
                }
                self.events += 1;
                if enc.len() >= BLOCK_FLUSH_BYTES {
                    self.flush_block();
                }
            }
            Sink::Recorder(r) => {
                let oom = matches!(&p, Pending::Failed(f) if f.result == OUT_OF_MEMORY);
                r.push(p);
                if oom {
                    self.dump_recorder();
                }
            }
        }
    }

    /// The flight recorder saw an out-of-memory: create the file, write what it kept,
    /// and record normally from now on. If the file cannot be created, keep recording
    /// in memory (a later failure tries again).
    #[cold]
    fn dump_recorder(&mut self) {
        let Sink::Recorder(r) = &self.sink else {
            return;
        };
        let (file, path) = match output::create_exclusive(&r.wanted) {
            Ok(x) => x,
            Err(e) => {
                lifecycle::warn(&format!(
                    "out of memory, but the flight recorder cannot create {}: {e}",
                    r.wanted
                ));
                return;
            }
        };
        let mut header = r.header.clone();
        header["path"] = serde_json::Value::String(path.clone());
        let out = match TraceWriter::new(file, &header, ZSTD_LEVEL) {
            Ok(w) => w,
            Err(e) => {
                lifecycle::warn(&format!("cannot write the trace header to {path}: {e}"));
                return;
            }
        };
        let Sink::Recorder(mut r) = std::mem::replace(&mut self.sink, Sink::File(out)) else {
            return;
        };
        if let Sink::File(out) = &mut self.sink {
            let enc = out.encoder();
            for m in &r.modules {
                enc.module(m);
            }
            for c in &r.codes {
                enc.py_code(c);
            }
            for (id, frames) in &r.stacks {
                enc.stack(*id, frames);
            }
            for (id, text) in self.nvtx_names.drain(..) {
                enc.nvtx_string(id, &text);
            }
        }
        let (base, ring) = r.take_dump();
        let (n_base, n_ring) = (base.len(), ring.len());
        for a in base {
            self.put(Pending::Alloc(a));
        }
        for p in ring {
            self.put(p);
        }
        self.flush_block();
        if !self.quiet {
            eprintln!(
                "gpumemprof: out of memory: the flight recorder wrote {n_base} live allocations and the last {n_ring} events to {path}; recording goes on"
            );
        }
        self.path = path.clone();
        self.new_path = Some(path);
    }

    fn stats(&self, queue_waits: u64, now: u64) -> Stats {
        Stats {
            time_ns: now.saturating_sub(self.start_ns),
            events: self.events,
            queue_waits,
            dropped: self.dropped,
        }
    }

    /// Compresses and writes the current block with one write(2). On an I/O error
    /// (disk full, file removed) writing stops for good and later events are counted
    /// as dropped: a half-written block in the middle would hide every later one.
    fn flush_block(&mut self) {
        let Sink::File(out) = &mut self.sink else {
            return;
        };
        if self.io_failed {
            self.dropped += out.encoder().records();
            out.encoder().clear();
            return;
        }
        if let Err(e) = out.flush_block() {
            self.io_failed = true;
            self.dropped += out.encoder().records();
            out.encoder().clear();
            lifecycle::warn(&format!(
                "cannot write to the trace file {}: {e}; recording stops here",
                self.path
            ));
        }
    }

    fn periodic_flush(&mut self, queue_waits: u64, now: u64) {
        self.refresh_modules(now);
        let s = self.stats(queue_waits, now);
        if let Sink::File(out) = &mut self.sink {
            out.encoder().stats(&s);
        }
        self.flush_block();
        self.last_flush_ns = now;
    }

    fn finish(&mut self, queue_waits: u64) {
        let now = clock::now_ns();
        self.define_stacks();
        self.emit(None);
        self.refresh_modules(now);
        let s = self.stats(queue_waits, now);
        if let Sink::File(out) = &mut self.sink {
            out.encoder().end(&s);
        }
        self.flush_block();
    }

    /// The path of a file the flight recorder just created, once.
    fn take_new_path(&mut self) -> Option<String> {
        self.new_path.take()
    }

    pub fn path(&self) -> &str {
        &self.path
    }
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
            flush_done: AtomicU64::new(0),
            flush_ns: flush_ms * 1_000_000,
            start_ns,
            nvml_ns: nvml_ms * 1_000_000,
            path: OnceCell::new(),
            trace_list: OnceCell::new(),
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

    /// Whether the calling thread is the writer (a signal handler must not wait for
    /// itself).
    pub fn on_writer_thread(&self) -> bool {
        self.writer_tid.load(Ordering::Relaxed) == crate::guard::tid()
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

    fn wake_writer(&self) {
        if self.writer_sleeping.swap(false, Ordering::AcqRel) {
            if let Some(t) = self.writer.get() {
                t.unpark();
            }
        }
    }

    /// Hands one event of the calling thread to the writer. Never loses it: waits while
    /// the thread's ring is full, and writes it itself once the writer thread has
    /// finished.
    #[inline]
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
            Some(r) if crate::ring::note_owner(r) => r as *const Ring,
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

    /// Moves every pushed event (all rings and the shared queue) into the writer's
    /// reorder buffer; returns how many. The caller holds the writer lock.
    fn drain(&self, core: &mut WriterCore) -> usize {
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
    fn write_late(&self, ev: Option<(u32, &Event)>) {
        let mut core = self.core.lock();
        self.drain(&mut core);
        if let Some((tid, e)) = ev {
            core.accept(tid, e);
        }
        core.finish(self.queue_waits.load(Ordering::Relaxed));
        if let Some(p) = core.take_new_path() {
            self.set_path(&p);
        }
    }

    /// The writer thread's body.
    pub fn run_writer(&self) {
        crate::guard::mark_internal_thread();
        self.writer_tid
            .store(crate::guard::tid(), Ordering::Relaxed);
        // NVML is asked from here only (never CUDA); loading it may take a while, so
        // it happens on the first round, not before the writer starts.
        let mut nvml = if self.nvml_ns > 0 {
            crate::nvml::Nvml::open()
        } else {
            None
        };
        let mut next_sample = 0u64;
        let mut samples = Vec::new();
        loop {
            let shutting = self.shutdown_requested.load(Ordering::Acquire);
            if let Some(n) = nvml.as_mut() {
                let now = clock::now_ns();
                if now >= next_sample {
                    n.sample(clock::now(), &mut samples);
                    next_sample = now + self.nvml_ns;
                }
            }
            let popped = {
                let mut core = self.core.lock();
                for m in samples.drain(..) {
                    core.stage(Pending::Sample(m));
                }
                let n = self.drain(&mut core);
                core.define_stacks();
                let now = clock::now_ns();
                let rel = now.saturating_sub(self.start_ns);
                core.emit(Some(rel.saturating_sub(REORDER_WINDOW_NS)));
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
                } else if now.saturating_sub(core.last_flush_ns) >= self.flush_ns {
                    core.periodic_flush(self.queue_waits.load(Ordering::Relaxed), now);
                }
                n
            };
            if popped >= self.wake_threshold {
                continue; // producers are busy: keep draining
            }
            // Less than a quarter of the queue arrived: nap (each round re-sorts the reorder
            // window, so tiny rounds waste work) until producers fill a quarter of the queue
            // (they unpark us), the reorder window passes, or the next flush is due.
            self.writer_sleeping.store(true, Ordering::Release);
            if !self.shutdown_requested.load(Ordering::Acquire) {
                let has_pending = !self.core.lock().pending.is_empty();
                let mut nap = if has_pending {
                    Duration::from_nanos(REORDER_WINDOW_NS)
                } else {
                    Duration::from_nanos(self.flush_ns.min(100_000_000))
                };
                if nvml.is_some() {
                    let until = next_sample.saturating_sub(clock::now_ns());
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
        lifecycle::mark_shutdown();
        // Pairs with `after_push`: every push either lands before the drain below or
        // sees `writer_done` and writes itself (under this lock, after us).
        if !(self.asymmetric && membarrier::all_threads()) {
            fence(Ordering::SeqCst);
        }
        self.drain(&mut core);
        core.finish(self.queue_waits.load(Ordering::Relaxed));
        if let Some(p) = core.take_new_path() {
            self.set_path(&p);
        }
        self.writer_finished.store(true, Ordering::Release);
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
    /// Returns the number of events written and the path (empty if no file was
    /// written: a flight recorder that never saw an out-of-memory), or None if the
    /// writer did not finish.
    pub fn shutdown(&self, timeout: Duration) -> Option<(u64, String)> {
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
        let core = self.core.lock();
        Some((core.events, core.path().to_string()))
    }
}

/// `membarrier(2)`: the writer's side of the asymmetric barrier between a push and the
/// final drain.
mod membarrier {
    /// The slow, always-available form (every CPU goes through a scheduler pass).
    const CMD_GLOBAL: libc::c_long = 1;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// Registers the process for expedited barriers; false where the kernel (or a
    /// seccomp filter) refuses: pushes then pay a full fence each.
    pub fn register() -> bool {
        // SAFETY: membarrier takes two integers and touches no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                CMD_REGISTER_PRIVATE_EXPEDITED,
                0 as libc::c_long,
            ) == 0
        }
    }

    /// A full memory barrier on every running thread of the process; false if it failed.
    pub fn all_threads() -> bool {
        // SAFETY: as above.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                CMD_PRIVATE_EXPEDITED,
                0 as libc::c_long,
            ) == 0
                || libc::syscall(libc::SYS_membarrier, CMD_GLOBAL, 0 as libc::c_long) == 0
        }
    }
}

/// Drives the writer's own code path (intern, reorder, encode, compress, write) with
/// `n` synthetic events of a training-loop shape, into `path`: for the benchmark only.
/// Returns the seconds spent and the bytes written.
pub fn writer_benchmark(n: usize, path: &str) -> std::io::Result<(f64, u64)> {
    let file = File::create(path)?;
    let out = TraceWriter::new(file, &serde_json::json!({"bench": true}), ZSTD_LEVEL)?;
    let start_ns = clock::now_ns();
    let (mut core, _) = WriterCore::new(out, path.to_string(), start_ns);
    // Eight call sites 20 frames deep, sizes and addresses that repeat like a training loop.
    let mut ids = [0u32; 8];
    for (site, id) in ids.iter_mut().enumerate() {
        let frames: Vec<u64> = (0..20)
            .map(|d| 0x5555_0000_0000 + (site as u64) * 0x1000 + d * 0x40)
            .collect();
        *id = intern::intern(&frames);
    }
    let t = std::time::Instant::now();
    for i in 0..n {
        let site = (i / 2) % 8;
        let alloc = i % 2 == 0;
        let ev = Event {
            time_ns: start_ns + i as u64 * 500,
            address: 0x7000_0000_0000 + ((site as u64) << 21),
            size: 1 << (12 + site),
            stack: ids[site],
            device: 0,
            api: if alloc { 1 } else { 2 },
            ..Event::new(if alloc {
                EventKind::Alloc
            } else {
                EventKind::Free
            })
        };
        core.accept(1000 + (i % 4) as u32, &ev);
        if core.pending.len() >= 4096 {
            core.define_stacks();
            core.emit(None);
        }
    }
    core.finish(0);
    let secs = t.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(path)?.len();
    Ok((secs, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the reorder buffer moves and sorts per event, and the flight recorder keeps.
    #[test]
    fn a_pending_event_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Pending>(), 64);
        assert_eq!(std::mem::size_of::<AllocFailed>(), 72);
    }
}
