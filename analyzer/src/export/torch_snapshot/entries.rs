//! The snapshot's trace entries as they are pickled: each device's entries streamed from
//! its replay pass, each stack's frames written once and referenced after.

use std::collections::HashMap;
use std::io::{self, Write};

use gpumemprof_format::Record;

use super::*;
use crate::export::pickle::{Memo, Pickler};
use crate::export::window::Window;
use crate::fasthash::FastMap;
use crate::observe::Observer;
use crate::replay::{LiveAlloc, LiveChange};
use crate::symbolize::{Frame, Symbolizer};

/// One trace entry.
struct Entry {
    action: &'static str,
    /// `addr`, or `device_free` for `oom`.
    addr_key: &'static str,
    addr: u64,
    size: u64,
    stream: u64,
    stack: u64,
}

/// The pickle being written, with the symbolizer and the memo of frame lists and frames.
pub(super) struct SnapshotWriter<'s, 'a, W: Write> {
    pub(super) p: Pickler<W>,
    pub(super) sym: &'s mut Symbolizer<'a>,
    /// Frame lists written, by stack id.
    pub(super) stacks: FastMap<u64, Memo>,
    /// Frame dicts written, by (name, filename, line).
    pub(super) frames: HashMap<(String, String, u32), Memo>,
    pub(super) start_unix_ns: u64,
    pub(super) entries: u64,
    /// Whether each stack's device allocations are PyTorch's caching allocator's, by id.
    torchs: FastMap<u64, bool>,
}

impl<'s, 'a, W: Write> SnapshotWriter<'s, 'a, W> {
    pub(super) fn new(out: W, sym: &'s mut Symbolizer<'a>, start_unix_ns: u64) -> io::Result<Self> {
        Ok(SnapshotWriter {
            p: Pickler::new(out)?,
            sym,
            stacks: FastMap::default(),
            frames: HashMap::new(),
            start_unix_ns,
            entries: 0,
            torchs: FastMap::default(),
        })
    }

    /// Whether a device allocation of `stack` is one of PyTorch's segments, in a trace
    /// with its tensors: made by its caching allocator (`torch_frames::by_torch_allocator`;
    /// a stack that does not say counts as PyTorch's). A library's own allocation (cuBLAS's
    /// workspace on CUDA 13, NCCL's buffers) is not in PyTorch's snapshot.
    pub(super) fn torchs(&mut self, stack: u64) -> bool {
        let sym = &*self.sym;
        *(self.torchs.entry(stack)).or_insert_with(|| {
            crate::torch_frames::by_torch_allocator(sym.native_modules(stack)).unwrap_or(true)
        })
    }

    /// The top dict and its `device_traces` list, to which each device's list is appended.
    pub(super) fn begin(&mut self) -> io::Result<()> {
        self.p.empty_dict()?;
        self.p.str_memo("device_traces")?;
        self.p.empty_list()
    }

    /// Closes `device_traces` and writes `segments`: one per allocation in `live`, and
    /// returns how many. With `tensors` (the trace has a framework's tensors: `live` ones,
    /// sorted by device and address as `live` is), only PyTorch's own allocations are
    /// segments (`torchs`), and a segment's blocks are the tensors inside it; without, the
    /// segment is one block.
    pub(super) fn segments(
        &mut self,
        live: &[&LiveAlloc],
        tensors: Option<&[&LiveAlloc]>,
        extras: &Extras,
    ) -> io::Result<u64> {
        self.p.setitem()?;
        self.p.str_memo("segments")?;
        self.p.empty_list()?;
        let mut batch = 0;
        let mut next = 0;
        let mut written = 0;
        let tensors_in_trace = tensors.is_some();
        let tensors = tensors.unwrap_or(&[]);
        for a in live {
            if tensors_in_trace && !self.torchs(a.stack) {
                continue;
            }
            self.p.begin_item(&mut batch)?;
            let (stream, mapped) = extras.get(a);
            let end = a.address.saturating_add(a.size);
            // Tensors before this segment belong to none (their segment came before the
            // trace, or by a path the hooks do not see).
            while next < tensors.len()
                && (tensors[next].device, tensors[next].address) < (a.device, a.address)
            {
                next += 1;
            }
            let first = next;
            while next < tensors.len()
                && tensors[next].device == a.device
                && tensors[next].address < end
            {
                next += 1;
            }
            let inside = tensors_in_trace.then(|| &tensors[first..next]);
            self.segment(a, stream, mapped, inside)?;
            self.p.end_item(&mut batch)?;
            written += 1;
        }
        self.p.end_items(&mut batch)?;
        self.p.setitem()?;
        Ok(written)
    }

    /// Ends the pickle; returns the number of trace entries written.
    pub(super) fn finish(self) -> io::Result<u64> {
        self.p.finish()?;
        Ok(self.entries)
    }

    pub(super) fn key_uint(&mut self, key: &str, value: u64) -> io::Result<()> {
        self.p.str_memo(key)?;
        self.p.uint(value)
    }

    /// One entry of the device list on top of the stack, at `time_ns` since the trace
    /// started.
    fn entry(&mut self, batch: &mut usize, e: &Entry, time_ns: u64) -> io::Result<()> {
        self.p.begin_item(batch)?;
        self.p.empty_dict()?;
        self.p.mark()?;
        self.p.str_memo("action")?;
        self.p.str_memo(e.action)?;
        self.key_uint(e.addr_key, e.addr)?;
        self.key_uint("size", e.size)?;
        self.key_uint("stream", e.stream)?;
        let time_us = self.start_unix_ns.saturating_add(time_ns) / 1000;
        self.key_uint("time_us", time_us)?;
        self.p.str_memo("frames")?;
        self.frame_list(e.stack)?;
        self.p.setitems()?;
        self.entries += 1;
        self.p.end_item(batch)
    }

    /// A segment: a live allocation, and its blocks: the `tensors` inside it with
    /// `inactive` blocks for the gaps, or (`None`: no tensors in the trace) one active
    /// block of its size.
    pub(super) fn segment(
        &mut self,
        a: &LiveAlloc,
        stream: u64,
        mapped: bool,
        tensors: Option<&[&LiveAlloc]>,
    ) -> io::Result<()> {
        let used = tensors.map_or(a.size, |t| {
            // Saturating: hostile traces can claim sizes that add past u64.
            t.iter().fold(0u64, |sum, b| sum.saturating_add(b.size))
        });
        self.p.empty_dict()?;
        self.p.mark()?;
        self.key_uint("device", a.device.max(0) as u64)?;
        self.key_uint("address", a.address)?;
        self.key_uint("total_size", a.size)?;
        for key in ["allocated_size", "active_size", "requested_size"] {
            self.key_uint(key, used)?;
        }
        self.key_uint("stream", stream)?;
        // PyTorch's "small" pool is its own 2 MiB segments for requests up to 1 MiB;
        // below the framework every segment is a driver allocation: "large".
        self.p.str_memo("segment_type")?;
        self.p.str_memo("large")?;
        self.p.str_memo("is_expandable")?;
        self.p.bool(mapped)?;
        self.p.str_memo("frames")?;
        self.frame_list(a.stack)?;
        self.p.str_memo("blocks")?;
        self.p.empty_list()?;
        let Some(tensors) = tensors else {
            self.block(a.address, a.size, Some(a.stack))?;
            self.p.append()?;
            return self.p.setitems();
        };
        let mut batch = 0;
        let (mut at, end) = (a.address, a.address.saturating_add(a.size));
        for t in tensors {
            if t.address > at {
                self.p.begin_item(&mut batch)?;
                self.block(at, t.address - at, None)?;
                self.p.end_item(&mut batch)?;
            }
            self.p.begin_item(&mut batch)?;
            self.block(t.address, t.size, Some(t.stack))?;
            self.p.end_item(&mut batch)?;
            at = at.max(t.address.saturating_add(t.size));
        }
        if end > at {
            self.p.begin_item(&mut batch)?;
            self.block(at, end - at, None)?;
            self.p.end_item(&mut batch)?;
        }
        self.p.end_items(&mut batch)?;
        self.p.setitems()
    }

    /// A block: active (a tensor, or the whole allocation) with its stack, or inactive.
    fn block(&mut self, address: u64, size: u64, stack: Option<u64>) -> io::Result<()> {
        self.p.empty_dict()?;
        self.p.mark()?;
        self.key_uint("address", address)?;
        self.key_uint("size", size)?;
        self.key_uint("requested_size", if stack.is_some() { size } else { 0 })?;
        self.p.str_memo("state")?;
        self.p.str_memo(if stack.is_some() {
            "active_allocated"
        } else {
            "inactive"
        })?;
        self.p.str_memo("frames")?;
        match stack {
            Some(s) => self.frame_list(s)?,
            None => self.p.empty_list()?,
        }
        self.p.setitems()
    }

    /// The frames of `stack`, innermost first: written the first time, a memo reference
    /// after that.
    pub(super) fn frame_list(&mut self, stack: u64) -> io::Result<()> {
        if let Some(&m) = self.stacks.get(&stack) {
            return self.p.get(m);
        }
        let frames = self.sym.stack(stack, 0);
        self.p.empty_list()?;
        if let Some(m) = self.p.memoize()? {
            self.stacks.insert(stack, m);
        }
        let mut batch = 0;
        for f in &frames {
            self.p.begin_item(&mut batch)?;
            self.frame(f)?;
            self.p.end_item(&mut batch)?;
        }
        self.p.end_items(&mut batch)
    }

    pub(super) fn frame(&mut self, f: &Frame) -> io::Result<()> {
        let key = torch_frame(f);
        if let Some(&m) = self.frames.get(&key) {
            return self.p.get(m);
        }
        self.p.empty_dict()?;
        let memo = self.p.memoize()?;
        self.p.mark()?;
        self.p.str_memo("name")?;
        self.p.str_memo(&key.0)?;
        self.p.str_memo("filename")?;
        self.p.str_memo(&key.1)?;
        self.key_uint("line", u64::from(key.2))?;
        self.p.setitems()?;
        if let Some(m) = memo {
            self.frames.insert(key, m);
        }
        Ok(())
    }
}

/// A frame as PyTorch's snapshot has it, `(name, filename, line)`: the function, else
/// `module+0xoffset`, else the address; the source file, else the module's path, else
/// `??` (what PyTorch's symbolizer writes for an unknown file); the line, else 0.
pub fn torch_frame(f: &Frame) -> (String, String, u32) {
    let name = match (&f.function, &f.module, f.offset) {
        (Some(function), _, _) => function.clone(),
        (None, Some(module), Some(offset)) => {
            let file = Path::new(module)
                .file_name()
                .map_or(module.as_str(), |n| n.to_str().unwrap_or(module.as_str()));
            format!("{file}+{offset:#x}")
        }
        _ => f.address.clone(),
    };
    let filename = f
        .file
        .clone()
        .or_else(|| f.module.clone())
        .unwrap_or_else(|| "??".to_owned());
    (name, filename, f.line.unwrap_or(0))
}

/// A later pass's observer: writes one device's entries.
pub(super) struct DeviceEntries<'w, 's, 'a, W: Write> {
    pub(super) w: &'w mut SnapshotWriter<'s, 'a, W>,
    pub(super) device: i32,
    pub(super) extras: Extras,
    /// The latest event time so far: entry times never go back, although the shim's
    /// reorder window lets a rare event arrive after a later one (viewers sort by time).
    pub(super) now_ns: u64,
    /// The stack of the free record being applied (0: none captured).
    pub(super) free_stack: u64,
    /// Items in the open APPENDS batch of the device's list.
    pub(super) batch: usize,
    /// The first write error; nothing more is written after it.
    pub(super) error: Option<io::Error>,
    /// Tensors are the blocks (`alloc`/`free` entries) and allocations only segments.
    pub(super) tensors: bool,
    /// Entries are written only at times in this window, and the first `skip` of those
    /// are left out (`--last`); `u64::MAX`: none is written, `counted` counts them.
    window: Window,
    skip: u64,
    pub(super) counted: u64,
}

impl<'w, 's, 'a, W: Write> DeviceEntries<'w, 's, 'a, W> {
    pub(super) fn new(
        w: &'w mut SnapshotWriter<'s, 'a, W>,
        device: i32,
        header: &serde_json::Value,
        tensors: bool,
    ) -> Self {
        DeviceEntries {
            w,
            device,
            extras: Extras::new(header),
            now_ns: 0,
            free_stack: 0,
            batch: 0,
            error: None,
            tensors,
            window: Window::default(),
            skip: 0,
            counted: 0,
        }
    }

    /// Writes only the entries in `window`'s times, leaving out the first `skip` of them
    /// (`u64::MAX`: only counts them).
    pub(super) fn windowed(mut self, window: Window, skip: u64) -> Self {
        self.window = window;
        self.skip = skip;
        self
    }

    fn emit(&mut self, e: Entry) {
        if !self.window.contains(self.now_ns) {
            return;
        }
        self.counted += 1;
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        if self.error.is_none() {
            if let Err(err) = self.w.entry(&mut self.batch, &e, self.now_ns) {
                self.error = Some(err);
            }
        }
    }

    /// One entry per `(action, stack)` for allocation `a` on `stream`.
    fn emit_all(&mut self, a: &LiveAlloc, stream: u64, actions: &[(&'static str, u64)]) {
        for &(action, stack) in actions {
            self.emit(Entry {
                action,
                addr_key: "addr",
                addr: a.address,
                size: a.size,
                stream,
                stack,
            });
        }
    }

    /// The stack of a release's request: the free's, else the allocation's (as PyTorch
    /// with context recording "all": the free's stack on the request and the segment's
    /// release, the allocation's on completion).
    fn free_stack(&self, a: &LiveAlloc) -> u64 {
        if self.free_stack != 0 {
            self.free_stack
        } else {
            a.stack
        }
    }
}

impl<W: Write> Observer for DeviceEntries<'_, '_, '_, W> {
    fn record(&mut self, record: &Record) {
        self.extras.record(record);
        self.free_stack = 0;
        match record {
            Record::Alloc(a) => self.now_ns = self.now_ns.max(a.time_ns),
            Record::Free(f) => {
                self.now_ns = self.now_ns.max(f.time_ns);
                self.free_stack = f.stack;
            }
            Record::Tensor(t) => {
                self.now_ns = self.now_ns.max(t.time_ns);
                if t.delta < 0 {
                    self.free_stack = t.stack;
                }
            }
            Record::AllocFailed(f) => {
                self.now_ns = self.now_ns.max(f.time_ns);
                if f.result == OUT_OF_MEMORY
                    && f.device == self.device
                    && exported(f.kind, f.device)
                {
                    self.emit(Entry {
                        action: "oom",
                        addr_key: "device_free",
                        addr: if f.mem_total > 0 { f.mem_free } else { 0 },
                        size: f.size,
                        stream: f.stream,
                        stack: f.stack,
                    });
                }
            }
            _ => {}
        }
    }

    fn changes(&mut self, _time_ns: u64, changes: &[LiveChange]) {
        for change in changes {
            match change {
                LiveChange::Added(a) if a.device == self.device && tensor(a.kind, a.device) => {
                    self.emit_all(a, 0, &[("alloc", a.stack)]);
                }
                LiveChange::Released(a) if a.device == self.device && tensor(a.kind, a.device) => {
                    let requested = self.free_stack(a);
                    self.emit_all(
                        a,
                        0,
                        &[("free_requested", requested), ("free_completed", a.stack)],
                    );
                }
                LiveChange::Added(a) if a.device == self.device && exported(a.kind, a.device) => {
                    let (stream, mapped) = self.extras.added(a);
                    if self.tensors && !self.w.torchs(a.stack) {
                        continue;
                    }
                    let segment = if mapped {
                        "segment_map"
                    } else {
                        "segment_alloc"
                    };
                    // With tensors in the trace, they are the blocks: a segment is only one.
                    let all = [(segment, a.stack), ("alloc", a.stack)];
                    let actions = if self.tensors { &all[..1] } else { &all[..] };
                    self.emit_all(a, stream, actions);
                }
                LiveChange::Released(a)
                    if a.device == self.device && exported(a.kind, a.device) =>
                {
                    let (stream, mapped) = self.extras.released(a);
                    if self.tensors && !self.w.torchs(a.stack) {
                        continue;
                    }
                    let requested = self.free_stack(a);
                    let segment = if mapped {
                        "segment_unmap"
                    } else {
                        "segment_free"
                    };
                    let all = [
                        ("free_requested", requested),
                        ("free_completed", a.stack),
                        (segment, requested),
                    ];
                    let actions = if self.tensors { &all[2..] } else { &all[..] };
                    self.emit_all(a, stream, actions);
                }
                _ => {}
            }
        }
    }
}
