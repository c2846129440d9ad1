//! TensorFlow's tensors: its BFC allocator's `AllocateRaw` and `DeallocateRaw`.
//! `libtensorflow_framework.so.2` (TF 2.21) exports `tsl::BFCAllocator::AllocateRaw(unsigned
//! long, unsigned long, tsl::AllocationAttributes const&)` and `::DeallocateRaw(void*)`
//! GLOBAL DEFAULT, and the vtables of `tsl::BFCAllocator`, `GPUBFCAllocator` and the
//! pluggable-device allocator bind those slots by symbol name (R_X86_64_64; no
//! -Bsymbolic), so the shim's preloaded definitions of the same names are the ones every
//! virtual call reaches. Each forwards to the library's own (`RTLD_NEXT`) and records the
//! block as a tensor when the allocator's memory is on a device. Releases before the move
//! to `tsl` name the class `tensorflow::BFCAllocator`: both sets of names are exported.
//!
//! ```text
//!  allocator->AllocateRaw(align, n, attrs)  (vtable slot -> here)
//!    └► real AllocateRaw ─► ptr ─► GetMemoryType(this) == kDevice? ─► AllocatedSize(this, ptr)
//!                                   └► Event{Tensor, +size, allocated: this allocator's running sum}
//!  allocator->DeallocateRaw(ptr): the size asked first (AllocatedSize), then the real call
//! ```
//!
//! The sizes are the allocator's own (`AllocatedSize`: the chunk handed out, as its
//! `bytes_in_use` counts them), asked through its exported non-virtual members; the device
//! is the calling thread's current one (TensorFlow makes its device current before it
//! allocates). The BFC allocator reports no reserved figure per change: `reserved` is 0 and
//! its regions are the segments the hooks see as device memory. Unlike PyTorch's hook this
//! one runs outside the allocator's lock (it takes it itself), so asking it is safe.

use super::device;
use super::record::{in_shim, record, Rec};
use super::Family;
use crate::sys::clock;
use crate::sys::dl;
use crate::sys::event::{EventKind, TENSOR_FREE};
use crate::sys::hooklist::Api;
use gpumemprof_format::{MemKind, FRAMEWORK_TENSORFLOW};
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

type AllocateFn = unsafe extern "C" fn(*mut c_void, usize, usize, *const c_void) -> *mut c_void;
type DeallocateFn = unsafe extern "C" fn(*mut c_void, *mut c_void);
type SizeFn = unsafe extern "C" fn(*const c_void, *const c_void) -> usize;
type MemoryTypeFn = unsafe extern "C" fn(*const c_void) -> c_int;

/// `tsl::AllocatorMemoryType::kDevice`.
const DEVICE_MEMORY: c_int = 1;

/// One class's entry points: the names, and the library's own functions once found.
struct Class {
    allocate: &'static CStr,
    deallocate: &'static CStr,
    allocated_size: &'static CStr,
    memory_type: &'static CStr,
    slots: [AtomicPtr<c_void>; 4],
}

impl Class {
    const fn new(names: [&'static CStr; 4]) -> Class {
        Class {
            allocate: names[0],
            deallocate: names[1],
            allocated_size: names[2],
            memory_type: names[3],
            slots: [const { AtomicPtr::new(std::ptr::null_mut()) }; 4],
        }
    }

    /// The library's definition of entry `i` (after the shim, also when Python loaded
    /// TensorFlow with `RTLD_LOCAL`), found once; NULL if there is none.
    fn next(&self, i: usize) -> *mut c_void {
        let name = [
            self.allocate,
            self.deallocate,
            self.allocated_size,
            self.memory_type,
        ][i];
        dl::next_cached(&self.slots[i], name).unwrap_or(std::ptr::null_mut())
    }

    /// The allocator's memory is on a device, and the size of its block at `ptr`.
    ///
    /// The memory type is asked on every call, not remembered per instance: an allocator
    /// destroyed and another of the same class made at its address (the harness does
    /// that) would inherit a remembered answer, and the call is cheap beside the
    /// event's stack (`docs/ARCHITECTURE.md`, "TensorFlow").
    fn device_block(&self, this: *mut c_void, ptr: *mut c_void) -> Option<usize> {
        let (ty, size) = (self.next(3), self.next(2));
        if ty.is_null() || size.is_null() || ptr.is_null() {
            return None;
        }
        // SAFETY: the library's own members of this class, called on the instance the
        // program called, with a block it handed out.
        unsafe {
            let ty: MemoryTypeFn = std::mem::transmute(ty);
            if ty(this) != DEVICE_MEMORY {
                return None;
            }
            let size: SizeFn = std::mem::transmute(size);
            Some(size(this, ptr))
        }
    }
}

static TSL: Class = Class::new([
    c"_ZN3tsl12BFCAllocator11AllocateRawEmmRKNS_20AllocationAttributesE",
    c"_ZN3tsl12BFCAllocator13DeallocateRawEPv",
    c"_ZNK3tsl12BFCAllocator13AllocatedSizeEPKv",
    c"_ZNK3tsl12BFCAllocator13GetMemoryTypeEv",
]);

static TENSORFLOW: Class = Class::new([
    c"_ZN10tensorflow12BFCAllocator11AllocateRawEmmRKNS_20AllocationAttributesE",
    c"_ZN10tensorflow12BFCAllocator13DeallocateRawEPv",
    c"_ZNK10tensorflow12BFCAllocator13AllocatedSizeEPKv",
    c"_ZNK10tensorflow12BFCAllocator13GetMemoryTypeEv",
]);

/// Bytes each allocator instance holds in tensors, for the events' `allocated` (a few
/// allocators per process: one per device and kind; beyond `SLOTS` they share
/// `OVERFLOW_IN_USE`).
struct Instance {
    /// The allocator's address; 0: a free slot.
    this: AtomicUsize,
    in_use: AtomicU64,
}

const SLOTS: usize = 16;
static INSTANCES: [Instance; SLOTS] = [const {
    Instance {
        this: AtomicUsize::new(0),
        in_use: AtomicU64::new(0),
    }
}; SLOTS];
static OVERFLOW_IN_USE: AtomicU64 = AtomicU64::new(0);

/// The slot of allocator `this` (claimed on first use), or `None` when all are taken.
fn instance(this: *mut c_void) -> Option<&'static Instance> {
    let key = this as usize;
    INSTANCES
        .iter()
        .find(|i| match i.this.load(Ordering::Acquire) {
            k if k == key => true,
            0 => match i
                .this
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => true,
                Err(k) => k == key,
            },
            _ => false,
        })
}

fn in_use(this: *mut c_void) -> &'static AtomicU64 {
    instance(this).map_or(&OVERFLOW_IN_USE, |i| &i.in_use)
}

fn tensor(
    me: &crate::capture::thread::ThreadState,
    this: *mut c_void,
    ptr: *mut c_void,
    size: usize,
    free: bool,
    time_ns: u64,
) {
    let total = in_use(this);
    let allocated = if free {
        total
            .fetch_sub(size as u64, Ordering::AcqRel)
            .saturating_sub(size as u64)
    } else {
        (total.fetch_add(size as u64, Ordering::AcqRel)).wrapping_add(size as u64)
    };
    let mut r = Rec::new(EventKind::Tensor, Api::_None, time_ns);
    r.mem = MemKind::Tensor;
    r.result = u32::from(FRAMEWORK_TENSORFLOW);
    r.device = match device::current(Family::Driver) {
        d if d >= 0 => d,
        _ => device::current(Family::Runtime),
    };
    r.address = ptr as u64;
    r.size = size as u64;
    r.aux = if free { TENSOR_FREE } else { 0 };
    r.stream = allocated;
    record(me, r);
}

fn allocate(
    class: &Class,
    this: *mut c_void,
    alignment: usize,
    num_bytes: usize,
    attrs: *const c_void,
) -> *mut c_void {
    let real = class.next(0);
    if real.is_null() {
        crate::sys::diag::warn(
            "TensorFlow's BFCAllocator::AllocateRaw was not found; no allocation made",
        );
        return std::ptr::null_mut();
    }
    // SAFETY: the library's own AllocateRaw, with the caller's arguments. Called outside
    // the shim's guard: the regions it allocates from CUDA inside are recorded as such.
    let real: AllocateFn = unsafe { std::mem::transmute(real) };
    let ptr = unsafe { real(this, alignment, num_bytes, attrs) };
    in_shim(|me| {
        if let Some(size) = class.device_block(this, ptr) {
            tensor(me, this, ptr, size, false, clock::now());
        }
    });
    ptr
}

fn deallocate(class: &Class, this: *mut c_void, ptr: *mut c_void) {
    let real = class.next(1);
    if real.is_null() {
        crate::sys::diag::warn(
            "TensorFlow's BFCAllocator::DeallocateRaw was not found; nothing freed",
        );
        return;
    }
    // SAFETY: the library's own DeallocateRaw.
    let real: DeallocateFn = unsafe { std::mem::transmute(real) };
    // The size while the block is still the allocator's; the time before the call.
    let mut size = None;
    in_shim(|_| size = class.device_block(this, ptr));
    let t0 = clock::now_before_release();
    // SAFETY: the caller's arguments (outside the guard, as for AllocateRaw).
    unsafe { real(this, ptr) };
    if let Some(size) = size {
        in_shim(|me| tensor(me, this, ptr, size, true, t0));
    }
}

#[export_name = "_ZN3tsl12BFCAllocator11AllocateRawEmmRKNS_20AllocationAttributesE"]
pub extern "C" fn tsl_allocate_raw(
    this: *mut c_void,
    alignment: usize,
    num_bytes: usize,
    attrs: *const c_void,
) -> *mut c_void {
    allocate(&TSL, this, alignment, num_bytes, attrs)
}

#[export_name = "_ZN3tsl12BFCAllocator13DeallocateRawEPv"]
pub extern "C" fn tsl_deallocate_raw(this: *mut c_void, ptr: *mut c_void) {
    deallocate(&TSL, this, ptr)
}

#[export_name = "_ZN10tensorflow12BFCAllocator11AllocateRawEmmRKNS_20AllocationAttributesE"]
pub extern "C" fn tf_allocate_raw(
    this: *mut c_void,
    alignment: usize,
    num_bytes: usize,
    attrs: *const c_void,
) -> *mut c_void {
    allocate(&TENSORFLOW, this, alignment, num_bytes, attrs)
}

#[export_name = "_ZN10tensorflow12BFCAllocator13DeallocateRawEPv"]
pub extern "C" fn tf_deallocate_raw(this: *mut c_void, ptr: *mut c_void) {
    deallocate(&TENSORFLOW, this, ptr)
}
