//! Record types of a gpumemprof trace: what one hooked call, one interned stack or one
//! loaded module looks like once decoded. Both the shim (encoding) and the analyzer
//! (decoding) use exactly these types.

/// Where the memory lives. Device totals only ever count `Device`; managed and pinned
/// host memory are reported as their own kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemKind {
    Device,
    Managed,
    PinnedHost,
    /// A kind written by a newer shim; kept so totals stay honest.
    Other(u8),
}

impl MemKind {
    pub fn to_u8(self) -> u8 {
        match self {
            MemKind::Device => 0,
            MemKind::Managed => 1,
            MemKind::PinnedHost => 2,
            MemKind::Other(v) => v,
        }
    }
    pub fn from_u8(v: u8) -> MemKind {
        match v {
            0 => MemKind::Device,
            1 => MemKind::Managed,
            2 => MemKind::PinnedHost,
            v => MemKind::Other(v),
        }
    }
    /// Stable lowercase name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Device => "device",
            MemKind::Managed => "managed",
            MemKind::PinnedHost => "pinned_host",
            MemKind::Other(_) => "other",
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

/// Flags on a free.
pub const FREE_STREAM_ORDERED: u8 = 1;

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
    /// Written once when the trace is closed cleanly; its absence means the process
    /// died (or was still running) before the final flush.
    End(Stats),
    /// A record kind this reader does not know (written by a newer shim); skipped.
    Unknown {
        kind: u8,
        len: usize,
    },
}
