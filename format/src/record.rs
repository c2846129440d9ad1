//! Record types of a gpumemprof trace: what one hooked call, one interned stack or one
//! loaded module looks like once decoded. Both the shim (encoding) and the analyzer
//! (decoding) use exactly these types.

/// Where the memory lives. Device totals only ever count `Device`; managed and pinned
/// host memory are reported as their own kinds. Two kinds are not memory in use at all
/// (`is_memory` is false): an address-space reservation (`cuMemAddressReserve`) and a
/// physical VMM handle (`cuMemCreate`), whose bytes count once mapped (`cuMemMap`
/// records a `Device` allocation for each mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemKind {
    Device,
    Managed,
    PinnedHost,
    /// Virtual address space reserved for later mapping; never counted as memory.
    AddressReservation,
    /// Physical memory behind a VMM handle (`cuMemCreate`/`hipMemCreate`); counted
    /// through its mappings, never on its own.
    VmmHandle,
    /// A framework's tensor (a block its caching allocator handed out, `Record::Tensor`):
    /// memory inside the segments the framework allocated, so never added to them; the
    /// reports' tensor level counts these alone.
    Tensor,
    /// A kind written by a newer shim; kept so totals stay honest.
    Other(u8),
}

impl MemKind {
    pub fn to_u8(self) -> u8 {
        match self {
            MemKind::Device => 0,
            MemKind::Managed => 1,
            MemKind::PinnedHost => 2,
            MemKind::AddressReservation => 3,
            MemKind::VmmHandle => 4,
            MemKind::Tensor => 5,
            MemKind::Other(v) => v,
        }
    }
    pub fn from_u8(v: u8) -> MemKind {
        match v {
            0 => MemKind::Device,
            1 => MemKind::Managed,
            2 => MemKind::PinnedHost,
            3 => MemKind::AddressReservation,
            4 => MemKind::VmmHandle,
            5 => MemKind::Tensor,
            v => MemKind::Other(v),
        }
    }
    /// Stable lowercase name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Device => "device",
            MemKind::Managed => "managed",
            MemKind::PinnedHost => "pinned_host",
            MemKind::AddressReservation => "address_reservation",
            MemKind::VmmHandle => "vmm_handle",
            MemKind::Tensor => "tensor",
            MemKind::Other(_) => "other",
        }
    }
    /// False for the kinds that are bookkeeping, not memory in use (reservations and
    /// VMM handles), and for tensors, which lie inside memory already counted: reports
    /// leave them out of the segment level's totals, peaks and leaks.
    pub fn is_memory(self) -> bool {
        !matches!(
            self,
            MemKind::AddressReservation | MemKind::VmmHandle | MemKind::Tensor
        )
    }
    /// Live allocations of these kinds share one address space per kind group: device,
    /// managed and pinned memory have distinct addresses (unified addressing), while a
    /// reservation shares its address with the mappings inside it and a handle is not an
    /// address at all.
    pub fn space(self) -> usize {
        match self {
            MemKind::AddressReservation => 1,
            MemKind::VmmHandle => 2,
            // A tensor shares its address with the segment it starts.
            MemKind::Tensor => 3,
            _ => 0,
        }
    }
}

/// Address spaces of `MemKind::space`.
pub const SPACES: usize = 4;

/// `Tensor::framework` of PyTorch's caching allocator (`c10::reportMemoryUsageToProfiler`).
pub const FRAMEWORK_PYTORCH: u8 = 1;
/// `Tensor::framework` of TensorFlow's BFC allocator (`AllocateRaw`/`DeallocateRaw`): its
/// `reserved` is 0 (not reported per change).
pub const FRAMEWORK_TENSORFLOW: u8 = 2;

/// The function that reported a failed allocation of kind `MemKind::Tensor` (API 0, not in
/// the header's `apis` table): PyTorch's caching allocator refusing a block, just before it
/// raises `OutOfMemoryError`.
pub const TENSOR_OUT_OF_MEMORY_API: &str = "c10::reportOutOfMemoryToProfiler";

/// A framework allocator's block handed out (`delta > 0`) or taken back (`delta < 0`),
/// with the allocator's own totals on that device after the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tensor {
    pub time_ns: u64,
    pub tid: u32,
    /// Which allocator (`FRAMEWORK_PYTORCH`).
    pub framework: u8,
    pub device: i32,
    pub address: u64,
    /// Bytes: positive for an allocation, negative for a free.
    pub delta: i64,
    /// The allocator's allocated bytes after the change (PyTorch's `allocated_bytes`).
    pub allocated: u64,
    /// Its reserved bytes (the segments it holds; PyTorch's `reserved_bytes`).
    pub reserved: u64,
    pub stack: u64,
}

impl Tensor {
    /// The allocation a handed-out block is (kind `Tensor`, API 0, its bytes `|delta|`),
    /// for code that treats tensors as allocations of their own address space.
    pub fn as_alloc(&self) -> Alloc {
        Alloc {
            time_ns: self.time_ns,
            tid: self.tid,
            api: 0,
            kind: MemKind::Tensor,
            device: self.device,
            address: self.address,
            size: self.delta.unsigned_abs(),
            stream: 0,
            pool: 0,
            stack: self.stack,
        }
    }
}

/// A successful allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alloc {
    /// Nanoseconds since the trace's `start_monotonic_ns`.
    pub time_ns: u64,
    /// Kernel thread id of the caller.
    pub tid: u32,
    /// API id; names are in the header's `apis` table.
    pub api: u16,
    pub kind: MemKind,
    /// CUDA device ordinal current on the calling thread (-1 if unknown).
    pub device: i32,
    pub address: u64,
    /// Bytes actually reserved (pitch * height for pitched allocations).
    pub size: u64,
    /// Stream handle, 0 when the API has none.
    pub stream: u64,
    /// Memory pool handle, 0 when the API has none.
    pub pool: u64,
    /// Interned stack id (see `Record::Stack`); 0 = no stack captured.
    pub stack: u64,
}

/// Flags on a free: the free is stream-ordered (`cudaFreeAsync`, `cuMemFreeAsync`).
pub const FREE_STREAM_ORDERED: u8 = 1;
/// `AllocFailed::result` of an allocation that ran out of memory: the same code in every
/// API the shim hooks (`cudaErrorMemoryAllocation`, `CUDA_ERROR_OUT_OF_MEMORY`,
/// `hipErrorOutOfMemory`).
pub const OUT_OF_MEMORY: u32 = 2;
/// Flags on a free: it releases every live allocation of the address space that lies in
/// `[address, address + size)` (`cuMemUnmap` over several mappings), not one address.
pub const FREE_RANGE: u8 = 2;

/// A call to a free function (recorded whether or not the pointer was ever seen,
/// and whether or not the call succeeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Free {
    pub time_ns: u64,
    pub tid: u32,
    pub api: u16,
    pub address: u64,
    pub stream: u64,
    pub stack: u64,
    /// The API's return code (0 = success).
    pub result: u32,
    /// Bit set of `FREE_*` flags.
    pub flags: u8,
    /// Which address space the address is in (`MemKind::space`): `Device` for memory of
    /// any kind, `AddressReservation` for `cuMemAddressFree`, `VmmHandle` for
    /// `cuMemRelease`. Traces older than this field read as `Device`.
    pub kind: MemKind,
    /// Bytes of the range for `FREE_RANGE`; 0 otherwise.
    pub size: u64,
}

/// An allocation call that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocFailed {
    pub time_ns: u64,
    pub tid: u32,
    pub api: u16,
    pub kind: MemKind,
    pub device: i32,
    /// Bytes requested.
    pub size: u64,
    pub stream: u64,
    pub pool: u64,
    pub stack: u64,
    /// The API's error code (2 = out of memory for CUDA and HIP).
    pub result: u32,
    /// The device's free and total memory, read on the failing thread right after the
    /// failure (`cudaMemGetInfo`/`cuMemGetInfo_v2`/`hipMemGetInfo`); `mem_total == 0`
    /// when it could not be read (and in traces older than these fields).
    pub mem_free: u64,
    pub mem_total: u64,
}

/// A loaded object (executable or shared library) of the profiled process, so that
/// return addresses can be symbolized after the fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// When the shim saw it (ns since start).
    pub time_ns: u64,
    /// Load bias (`dlpi_addr`): address = bias + ELF virtual address.
    pub bias: u64,
    /// Lowest and one-past-highest address covered by its PT_LOAD segments.
    pub start: u64,
    pub end: u64,
    /// Absolute path as the loader saw it (the main program's via /proc/self/exe).
    pub path: String,
    /// GNU build-id bytes (may be empty).
    pub build_id: Vec<u8>,
}

/// Counters of the capture pipeline, cumulative since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    pub time_ns: u64,
    /// Events encoded into the trace so far.
    pub events: u64,
    /// Events whose producer found the queue full and had to wait.
    pub queue_waits: u64,
    /// Events that were lost (never written). Zero unless something went wrong.
    pub dropped: u64,
}

/// How the process ended, as the shim saw it: recorded just before the End record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `exit(status)`, a return from `main`, or `_exit(status)`.
    Exit(i32),
    /// A fatal signal whose default action ends the process (SIGSEGV, SIGABRT, SIGTERM...).
    Signal(u32),
}

impl Ending {
    /// The signal's name (`SIGSEGV`), for the signals a Linux process can die of;
    /// `signal N` is the caller's to write for others.
    pub fn signal_name(sig: u32) -> Option<&'static str> {
        const NAMES: [&str; 32] = [
            "",
            "SIGHUP",
            "SIGINT",
            "SIGQUIT",
            "SIGILL",
            "SIGTRAP",
            "SIGABRT",
            "SIGBUS",
            "SIGFPE",
            "SIGKILL",
            "SIGUSR1",
            "SIGSEGV",
            "SIGUSR2",
            "SIGPIPE",
            "SIGALRM",
            "SIGTERM",
            "SIGSTKFLT",
            "SIGCHLD",
            "SIGCONT",
            "SIGSTOP",
            "SIGTSTP",
            "SIGTTIN",
            "SIGTTOU",
            "SIGURG",
            "SIGXCPU",
            "SIGXFSZ",
            "SIGVTALRM",
            "SIGPROF",
            "SIGWINCH",
            "SIGIO",
            "SIGPWR",
            "SIGSYS",
        ];
        NAMES.get(sig as usize).copied().filter(|n| !n.is_empty())
    }

    /// The signal in words: `SIGSEGV (signal 11)`, or `signal 99` for one without a name.
    pub fn describe_signal(sig: u32) -> String {
        match Ending::signal_name(sig) {
            Some(name) => format!("{name} (signal {sig})"),
            None => format!("signal {sig}"),
        }
    }
}

/// The `Ending` record: when, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndingRecord {
    pub time_ns: u64,
    pub ending: Ending,
}

/// Why the shim stopped recording before the process ended: a write to the trace failed,
/// or a bug of the shim stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The file size limit (`ulimit -f`, `RLIMIT_FSIZE`): `EFBIG`.
    FileSizeLimit,
    /// The file system is full: `ENOSPC` (or `EDQUOT`).
    NoSpace,
    /// Any other write error.
    WriteError,
    /// A bug of the shim (a panic in its bookkeeping, caught): it stopped recording and
    /// let the program go on.
    InternalError,
}

impl StopReason {
    pub fn to_u8(self) -> u8 {
        match self {
            StopReason::FileSizeLimit => 1,
            StopReason::NoSpace => 2,
            StopReason::WriteError => 3,
            StopReason::InternalError => 4,
        }
    }

    pub fn from_u8(v: u8) -> Option<StopReason> {
        match v {
            1 => Some(StopReason::FileSizeLimit),
            2 => Some(StopReason::NoSpace),
            3 => Some(StopReason::WriteError),
            4 => Some(StopReason::InternalError),
            _ => None,
        }
    }

    /// The reason of a write that failed with `errno`.
    pub fn of_errno(errno: i32) -> StopReason {
        match errno {
            27 => StopReason::FileSizeLimit, // EFBIG
            28 | 122 => StopReason::NoSpace, // ENOSPC, EDQUOT
            _ => StopReason::WriteError,
        }
    }

    /// Stable lowercase name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::FileSizeLimit => "file_size_limit",
            StopReason::NoSpace => "no_space",
            StopReason::WriteError => "write_error",
            StopReason::InternalError => "internal_error",
        }
    }

    /// In words, for text reports and the shim's exit line.
    pub fn words(self) -> &'static str {
        match self {
            StopReason::FileSizeLimit => "the file size limit (ulimit -f) was reached",
            StopReason::NoSpace => "the file system was full",
            StopReason::WriteError => "a write to the trace file failed",
            StopReason::InternalError => {
                "the profiler met an internal error (a bug in gpumemprof: please report it)"
            }
        }
    }
}

/// The `Stopped` record: recording stopped at `time_ns`, before the process ended; nothing
/// after it is in the trace. The shim writes it (then an End record) in place of the block
/// it could not write, when the file still takes that much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoppedRecord {
    pub time_ns: u64,
    pub reason: StopReason,
    /// The write's `errno`.
    pub errno: u32,
}

/// Device memory as NVML saw it at one moment (sampled by the shim's writer thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    pub time_ns: u64,
    /// NVML device index.
    pub device: i32,
    /// Bytes NVML says this process uses on the device (context, library workspaces and
    /// every allocation, seen by the hooks or not).
    pub process_used: u64,
    /// Bytes used on the device by all processes.
    pub device_used: u64,
    pub device_total: u64,
    /// Nanoseconds from `time_ns` until NVML answered for this device (appended: 0 in
    /// traces written before it). NVML's figure is of one moment in that window, so the
    /// hooks' view to set against it is the most they tracked in it.
    pub query_ns: u64,
}

/// A Python code object (function) that stack frames refer to: defined once, before the
/// first stack that uses it. A Python frame in a stack is one word, see [`python_frame`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyCode {
    /// The id stack frames carry (never 0).
    pub id: u64,
    /// `co_firstlineno`: the line of the `def` (or 1 for a module).
    pub first_line: u32,
    /// `co_filename`, as Python has it (absolute or as imported).
    pub filename: String,
    /// `co_qualname` (Python 3.11 and later) or `co_name`: `Trainer.step`, `<module>`.
    pub name: String,
}

/// The tag bit of a Python frame in a stack: return addresses of a 64-bit user space
/// never have it (they are below 2^47 on x86_64, 2^52 on aarch64).
pub const PY_FRAME_TAG: u64 = 1 << 63;
/// Bits of a Python frame word holding the line number (lines from 2^24 on read as
/// 2^24 - 1: no source file is that long).
pub const PY_LINE_BITS: u32 = 24;
/// The largest code id a frame word can carry (39 bits: 550 billion functions).
pub const PY_MAX_CODE_ID: u64 = (1 << (63 - PY_LINE_BITS)) - 1;
/// Python strings (file and function names) longer than this are cut when written.
pub const MAX_PY_STRING: usize = 4096;

/// The stack word of a Python frame: code `code_id` at `line`.
#[inline]
pub fn python_frame(code_id: u64, line: u32) -> u64 {
    let line = u64::from(line).min((1 << PY_LINE_BITS) - 1);
    PY_FRAME_TAG | ((code_id & PY_MAX_CODE_ID) << PY_LINE_BITS) | line
}

/// `(code id, line)` if the stack word is a Python frame, `None` for a return address.
#[inline]
pub fn as_python_frame(word: u64) -> Option<(u64, u32)> {
    (word & PY_FRAME_TAG != 0).then_some((
        (word & !PY_FRAME_TAG) >> PY_LINE_BITS,
        (word & ((1 << PY_LINE_BITS) - 1)) as u32,
    ))
}

/// What an NVTX call did (`Nvtx::op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NvtxOp {
    /// `nvtxRangePush*`: a range opens on the calling thread (ranges nest per thread).
    Push,
    /// `nvtxRangePop`: the thread's innermost pushed range of the domain closes.
    Pop,
    /// `nvtxRangeStart*`: a range that any thread may end, identified by `Nvtx::range`.
    Start,
    /// `nvtxRangeEnd`: the range `Nvtx::range` closes.
    End,
    /// `nvtxMark*`: an instant.
    Mark,
    /// An operation written by a newer shim.
    Other(u8),
}

impl NvtxOp {
    pub fn to_u8(self) -> u8 {
        match self {
            NvtxOp::Push => 0,
            NvtxOp::Pop => 1,
            NvtxOp::Start => 2,
            NvtxOp::End => 3,
            NvtxOp::Mark => 4,
            NvtxOp::Other(v) => v,
        }
    }
    pub fn from_u8(v: u8) -> NvtxOp {
        match v {
            0 => NvtxOp::Push,
            1 => NvtxOp::Pop,
            2 => NvtxOp::Start,
            3 => NvtxOp::End,
            4 => NvtxOp::Mark,
            v => NvtxOp::Other(v),
        }
    }
    /// Stable lowercase name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            NvtxOp::Push => "push",
            NvtxOp::Pop => "pop",
            NvtxOp::Start => "start",
            NvtxOp::End => "end",
            NvtxOp::Mark => "mark",
            NvtxOp::Other(_) => "other",
        }
    }
}

/// An NVTX range or mark, recorded by the shim as NVTX's injection library
/// (`NVTX_INJECTION64_PATH`). In time order with the allocations of the same thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nvtx {
    pub time_ns: u64,
    pub tid: u32,
    pub op: NvtxOp,
    /// String id (`Record::NvtxString`) of the domain's name; 0 = NVTX's default domain.
    pub domain: u64,
    /// String id of the message; 0 = none (a pop, an end, or a range without a message).
    pub name: u64,
    /// For `Start` and `End`: the range id `nvtxRangeStart*` returned (never 0); else 0.
    pub range: u64,
}

/// NVTX strings (messages and domain names) longer than this are cut when written, and a
/// reader rejects longer ones. The shim itself keeps at most 256 bytes of a message.
pub const MAX_NVTX_STRING: usize = 4096;

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Alloc(Alloc),
    Free(Free),
    AllocFailed(AllocFailed),
    /// An interned stack: return addresses, innermost first. Defined before first use.
    Stack {
        id: u64,
        frames: Vec<u64>,
    },
    Module(Module),
    /// Periodic pipeline counters.
    Stats(Stats),
    /// An NVML sample of one device.
    Sample(Sample),
    /// A Python code object that stacks refer to. Defined before first use.
    PyCode(PyCode),
    /// An NVTX range push/pop, start/end or mark.
    Nvtx(Nvtx),
    /// An NVTX string (message or domain name), interned: defined once, before the first
    /// `Nvtx` record that uses its id.
    NvtxString {
        id: u64,
        text: String,
    },
    /// Written once when the trace is closed cleanly; its absence means the process
    /// died (or was still running) before the final flush.
    End(Stats),
    /// How the process ended (an exit status or a fatal signal), just before `End`;
    /// absent in traces of shims older than this record.
    Ending(EndingRecord),
    /// A tensor of a framework's allocator allocated or freed.
    Tensor(Tensor),
    /// Recording stopped before the process ended (a failed write); absent in traces of
    /// shims older than this record.
    Stopped(StoppedRecord),
    /// A record kind this reader does not know (written by a newer shim); skipped.
    Unknown {
        kind: u8,
        len: usize,
    },
}
