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
            MemKind::Other(_) => "other",
        }
    }
    /// False for the kinds that are bookkeeping, not memory in use (reservations and
    /// VMM handles): reports leave them out of totals, peaks and leaks.
    pub fn is_memory(self) -> bool {
        !matches!(self, MemKind::AddressReservation | MemKind::VmmHandle)
    }
    /// Live allocations of these kinds share one address space per kind group: device,
    /// managed and pinned memory have distinct addresses (unified addressing), while a
    /// reservation shares its address with the mappings inside it and a handle is not an
    /// address at all.
    pub fn space(self) -> usize {
        match self {
            MemKind::AddressReservation => 1,
            MemKind::VmmHandle => 2,
            _ => 0,
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
    /// An NVML sample of one device.
    Sample(Sample),
    /// Written once when the trace is closed cleanly; its absence means the process
    /// died (or was still running) before the final flush.
    End(Stats),
    /// A record kind this reader does not know (written by a newer shim); skipped.
    Unknown {
        kind: u8,
        len: usize,
    },
}
