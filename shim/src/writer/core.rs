//! The writer's state under its lock: events accepted from the rings, put back in time
//! order (the reorder buffer), stamps converted to trace nanoseconds, stacks, Python
//! code objects, NVTX names and modules defined before the events that use them, and
//! records encoded into blocks that are compressed and written with one `write(2)`
//! each, or kept by the flight recorder (`recorder.rs`) until an out-of-memory.
//!
//! Why reorder: a free is stamped before the real call and an allocation after it, so
//! when thread A frees an address that thread B gets back at once, A's free is always
//! older than B's allocation; but A may push later than B. Sorting a short window by
//! time puts them back in happens-before order.

use super::live_high::LiveHigh;
use super::output::{self, OpenError};
use super::pending::{Pending, PendingTensor};
use super::recorder::Recorder;
use crate::capture::{intern, modules, nvtx_names, python};
use crate::sys::clock;
use crate::sys::diag::{say, warn};
use crate::sys::event::{Event, EventKind, OUT_OF_MEMORY, TENSOR_FREE};
use gpumemprof_format::{
    Alloc, AllocFailed, Ending, EndingRecord, Free, MemKind, Module, Nvtx, NvtxOp, Stats,
    StopReason, StoppedRecord, TraceWriter, BLOCK_FLUSH_BYTES,
};
use std::collections::{HashSet, VecDeque};
use std::fs::File;

/// The reorder buffer is emitted whole if it grows past this many events.
const REORDER_MAX: usize = 1 << 20;

/// Where encoded records go.
pub(super) enum Sink {
    File(TraceWriter<File>),
    /// The flight recorder, until the first out-of-memory failure.
    Recorder(Box<Recorder>),
}

pub struct WriterCore {
    pub(super) sink: Sink,
    /// The trace's path; empty while the flight recorder has written nothing.
    pub(super) path: String,
    /// Set when the flight recorder created the file (the pipeline publishes it).
    pub(super) new_path: Option<String>,
    pub(super) start_ns: u64,
    /// Stamps (TSC or ns) to trace nanoseconds.
    pub(super) clock: clock::Converter,
    pub(super) fresh_stacks: Vec<(u64, intern::Frames)>,
    /// NVTX names interned since the last definitions were written; the flight recorder
    /// keeps every one until its dump.
    pub(super) nvtx_names: Vec<(u64, String)>,
    /// The reorder buffer: emitted from the front, so what stays is never moved.
    pub(super) pending: VecDeque<Pending>,
    /// Whether `pending` is in time order (each ring is; several threads' are not).
    pub(super) sorted: bool,
    pub(super) module_gen: (u64, u64),
    pub(super) known_modules: HashSet<(u64, String)>,
    pub(super) events: u64,
    /// Out-of-memory errors (for the exit line's advice).
    pub(super) out_of_memory: super::oom_count::OomCount,
    /// Live device memory and its rises, when NVML is sampled (`run`): when to sample again.
    live_high: Option<LiveHigh>,
    pub(super) dropped: u64,
    pub(super) last_flush_ns: u64,
    pub(super) io_failed: bool,
    /// Why and when recording stopped, when a write failed.
    pub(super) stopped: Option<(StopReason, u64)>,
    /// Events encoded into the current block.
    block_events: u64,
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
        start_ns: u64,
    ) -> (WriterCore, Vec<Module>) {
        let rec = Recorder::new(ring, header, wanted);
        Self::with_sink(Sink::Recorder(Box::new(rec)), String::new(), start_ns)
    }

    fn with_sink(sink: Sink, path: String, start_ns: u64) -> (WriterCore, Vec<Module>) {
        let mut core = WriterCore {
            sink,
            path,
            new_path: None,
            start_ns,
            clock: clock::Converter::new(),
            fresh_stacks: Vec::new(),
            nvtx_names: Vec::new(),
            pending: VecDeque::with_capacity(4096),
            sorted: true,
            module_gen: (0, 0),
            known_modules: HashSet::new(),
            events: 0,
            out_of_memory: Default::default(),
            live_high: None,
            dropped: 0,
            last_flush_ns: start_ns,
            io_failed: false,
            stopped: None,
            block_events: 0,
        };
        let modules = core.refresh_modules(start_ns);
        (core, modules)
    }

    /// Records modules loaded since the last scan (only scans when the loader's
    /// counters moved) and returns them.
    pub(super) fn refresh_modules(&mut self, now: u64) -> Vec<Module> {
        let gen = modules::generation();
        if gen == self.module_gen {
            return Vec::new();
        }
        self.module_gen = gen;
        // A library loaded since: perhaps the Python interpreter (embedded programs).
        python::refresh();
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
    pub(super) fn define_stacks(&mut self) {
        let mut codes = Vec::new();
        intern::take_fresh(&mut self.fresh_stacks, &mut codes);
        match &mut self.sink {
            Sink::File(out) => {
                // Codes first: the new stacks may name them.
                for c in &codes {
                    out.encoder().py_code(c);
                }
                for (id, frames) in self.fresh_stacks.drain(..) {
                    out.encoder().stack(id, frames);
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
    pub(super) fn define_nvtx_names(&mut self) {
        nvtx_names::take_fresh(&mut self.nvtx_names);
        if let Sink::File(out) = &mut self.sink {
            for (id, text) in self.nvtx_names.drain(..) {
                out.encoder().nvtx_string(id, &text);
            }
        }
    }

    /// Follows the live device memory of the events emitted from now on (`live_high`).
    pub(super) fn follow_live_device(&mut self) {
        self.live_high = Some(LiveHigh::default());
    }

    /// When NVML is due again early after the sample at `last_sample` (`LiveHigh::due`;
    /// None unless followed).
    pub(super) fn live_due(&self, last_sample: u64) -> Option<u64> {
        self.live_high.as_ref().and_then(|l| l.due(last_sample))
    }

    /// NVML was sampled: later rises count from the highest level seen so far.
    pub(super) fn live_sampled(&mut self) {
        if let Some(l) = self.live_high.as_mut() {
            l.sampled();
        }
    }

    /// Queues an event of thread `tid` for ordering (its time stays a raw stamp until
    /// `emit`).
    pub(super) fn accept(&mut self, tid: u32, ev: &Event) {
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
            EventKind::Tensor => Pending::Tensor(PendingTensor {
                time_ns,
                tid,
                framework: ev.result as u8,
                device: ev.device,
                address: ev.address,
                // The size is a byte count below 2^63; `aux` says a free.
                delta: if ev.aux == TENSOR_FREE {
                    (ev.size as i64).wrapping_neg()
                } else {
                    ev.size as i64
                },
                allocated: ev.stream,
                reserved: ev.pool,
                stack,
            }),
        };
        self.stage(p);
    }

    /// Adds to the reorder buffer, noting whether it is still in order.
    #[inline]
    pub(super) fn stage(&mut self, p: Pending) {
        if let Some(last) = self.pending.back() {
            if p.time() < last.time() {
                self.sorted = false;
            }
        }
        self.pending.push_back(p);
    }

    /// Encodes, in time order, every pending event stamped at or before `cutoff`
    /// (relative ns); `None` emits everything.
    pub(super) fn emit(&mut self, cutoff: Option<u64>) {
        self.emit_blocks(cutoff, false);
    }

    /// `emit(Some(cutoff))`, stopping after the first block it writes; true when it did
    /// and events before the cutoff remain. The writer drains the rings between blocks:
    /// compressing and writing a 1 MiB block took longer than a thread allocating as fast
    /// as it can takes to fill its ring (0.9 ms), and several in a row (after a nap) would
    /// make it wait (`queue_waits`; BENCHMARKS.md, "ninth").
    pub(super) fn emit_one_block(&mut self, cutoff: u64) -> bool {
        self.emit_blocks(Some(cutoff), true)
    }

    fn emit_blocks(&mut self, cutoff: Option<u64>, one_block: bool) -> bool {
        if self.pending.is_empty() {
            return false;
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
        for left in (0..n).rev() {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let t = self.clock.to_ns(p.time()).saturating_sub(self.start_ns);
            if let Some(l) = self.live_high.as_mut() {
                l.apply(&p);
            }
            if self.put(p.retimed(t)) && one_block && left > 0 {
                return true;
            }
        }
        false
    }

    /// Encodes one event (or hands it to the flight recorder); true when that filled a
    /// block, which was written.
    pub(super) fn put(&mut self, p: Pending) -> bool {
        match &mut self.sink {
            Sink::File(out) => {
                // Counted as written: the flight recorder's events come through here once
                // more when it dumps them.
                match &p {
                    Pending::Failed(f) => self.out_of_memory.failed(f),
                    Pending::Tensor(t) => self.out_of_memory.tensor(t.tid),
                    _ => {}
                }
                let enc = out.encoder();
                match p {
                    Pending::Alloc(a) => enc.alloc(&a),
                    Pending::Free(f) => enc.free(&f),
                    Pending::Failed(f) => enc.alloc_failed(&f),
                    Pending::Sample(s) => enc.sample(&s),
                    Pending::Nvtx(n) => enc.nvtx(&n),
                    Pending::Tensor(x) => enc.tensor(&x.tensor()),
                }
                self.events += 1;
                self.block_events += 1;
                if enc.len() >= BLOCK_FLUSH_BYTES {
                    self.flush_block();
                    return true;
                }
                false
            }
            Sink::Recorder(r) => {
                let oom = matches!(&p, Pending::Failed(f) if f.result == OUT_OF_MEMORY);
                r.push(p);
                if oom {
                    self.dump_recorder();
                }
                false
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
        let (out, path) = match output::open_trace(&r.wanted, r.header.clone()) {
            Ok(x) => x,
            Err(OpenError::Create(e)) => {
                warn(&format!(
                    "out of memory, but the flight recorder cannot create {}: {e}",
                    r.wanted
                ));
                return;
            }
            Err(OpenError::Header(path, e)) => {
                warn(&format!("cannot write the trace header to {path}: {e}"));
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
        let (live, tensors) = r.live_at_end();
        let (base, ring) = r.take_dump();
        let n_ring = ring.len();
        for p in base {
            self.put(p);
        }
        for p in ring {
            self.put(p);
        }
        self.flush_block();
        let tensors = if tensors > 0 {
            format!(" and {} tensors", tensors)
        } else {
            String::new()
        };
        say(&format!(
            "out of memory: the flight recorder wrote the last {n_ring} events and what was live before them to {path} ({live} allocations{tensors} live at the failure); recording goes on"
        ));
        self.path = path.clone();
        self.new_path = Some(path);
    }

    pub(super) fn stats(&self, queue_waits: u64, now: u64) -> Stats {
        Stats {
            time_ns: now.saturating_sub(self.start_ns),
            events: self.events,
            queue_waits,
            dropped: self.dropped,
        }
    }

    /// Compresses and writes the current block with one write(2), never raising SIGXFSZ
    /// in the program (`output::without_sigxfsz`). On an I/O error (file size limit, disk
    /// full, file removed) writing stops for good and later events are counted as dropped:
    /// the part of the block that was written is cut off (a half-written block in the
    /// middle would hide every later one), and a last small block says why, with a
    /// `Stopped` and an End record, when the file takes that much.
    pub(super) fn flush_block(&mut self) {
        let Sink::File(out) = &mut self.sink else {
            return;
        };
        // Events (not stack, module or counter records) in the block, for `dropped`.
        let events = std::mem::take(&mut self.block_events);
        if self.io_failed {
            self.dropped += events;
            out.encoder().clear();
            return;
        }
        if let Err(e) = output::without_sigxfsz(|| out.flush_block()) {
            self.io_failed = true;
            self.dropped += events;
            let reason = StopReason::of_errno(e.raw_os_error().unwrap_or(0));
            let now = clock::now_ns().saturating_sub(self.start_ns);
            self.stopped = Some((reason, now));
            let whole = out.written();
            let cut = |out: &mut TraceWriter<File>| {
                use std::io::Seek;
                let file = out.get_mut();
                file.set_len(whole)
                    .and_then(|()| file.seek(std::io::SeekFrom::Start(whole)).map(|_| ()))
            };
            let _ = cut(out);
            let stats = Stats {
                time_ns: now,
                events: self.events.saturating_sub(self.dropped),
                queue_waits: 0,
                dropped: self.dropped,
            };
            // The room kept under the file size limit is for this block.
            out.set_budget(None);
            out.encoder().stopped(&StoppedRecord {
                time_ns: now,
                reason,
                errno: e.raw_os_error().unwrap_or(0) as u32,
            });
            out.encoder().end(&stats);
            if output::without_sigxfsz(|| out.flush_block()).is_err() {
                let _ = cut(out);
            }
            warn(&format!(
                "cannot write to the trace file {}: {e}; recording stops here ({})",
                self.path,
                reason.words()
            ));
        }
    }

    pub(super) fn periodic_flush(&mut self, queue_waits: u64, now: u64) {
        self.refresh_modules(now);
        let s = self.stats(queue_waits, now);
        if let Sink::File(out) = &mut self.sink {
            out.encoder().stats(&s);
        }
        self.flush_block();
        self.last_flush_ns = now;
    }

    /// Completes the trace: everything pending, then why recording stopped early when a
    /// bug of the shim stopped it at `halted` (`clock::now_ns`), then how the process ended
    /// (when known), then the End record. Called again for late events: each call writes
    /// the last two again, and a reader keeps the last.
    pub(super) fn finish(&mut self, queue_waits: u64, ending: Option<Ending>, halted: Option<u64>) {
        let now = clock::now_ns();
        self.define_stacks();
        self.emit(None);
        self.refresh_modules(now);
        let s = self.stats(queue_waits, now);
        let halted = halted
            .filter(|_| self.stopped.is_none())
            .map(|t| t.saturating_sub(self.start_ns));
        if let Some(time_ns) = halted {
            self.stopped = Some((StopReason::InternalError, time_ns));
        }
        if let Sink::File(out) = &mut self.sink {
            if let Some(time_ns) = halted {
                out.encoder().stopped(&StoppedRecord {
                    time_ns,
                    reason: StopReason::InternalError,
                    errno: 0,
                });
            }
            if let Some(ending) = ending {
                out.encoder().ending(&EndingRecord {
                    time_ns: s.time_ns,
                    ending,
                });
            }
            out.encoder().end(&s);
        }
        self.flush_block();
    }

    /// The path of a file the flight recorder just created, once.
    pub(super) fn take_new_path(&mut self) -> Option<String> {
        self.new_path.take()
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}
