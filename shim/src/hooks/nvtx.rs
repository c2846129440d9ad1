//! NVTX ranges and marks: the shim is also an NVTX injection library. With
//! `NVTX_INJECTION64_PATH=libgpumemprof.so`, the first NVTX call of the process (any copy
//! of nvtx3's header-only loader: the program's, PyTorch's, the `nvtx` Python package's)
//! `dlopen`s the shim and calls `InitializeInjectionNvtx2`, which fills NVTX's function
//! table with the callbacks below. Each records one event through the same queue as the
//! allocations, so a thread's ranges and allocations stay in program order.
//!
//! ```text
//!  nvtxRangePushA("forward") ─► callback: depth bookkeeping (the return value)
//!                                └► name ─► names::intern ─► id ─► Event{kind: Nvtx, op: push}
//!                                                                   └► queue ─► writer: kind 10
//! ```
//!
//! Return values are NVTX's, whether or not anything is recorded (`GPUMEMPROF_DISABLE=1`, no
//! trace file): a push returns the 0-based level of the range it opens and a pop the level
//! of the range it closes, per thread and domain, or -1 for a pop with nothing open (an
//! error: NVTX asks for a negative value); a start returns a process-wide range id, never 0;
//! a domain or registered-string handle is a name id, never NULL. Nothing here follows a
//! handle the program passes back, reads a message past `names::MAX_NAME` bytes (256), or
//! panics into the caller.
//!
//! ABI: the few types and ids used are declared here from nvtx3's headers (NVTX v3, the
//! PyPI wheel `nvidia-nvtx-cu12`): `nvtxDetail/nvtxTypes.h` (export-table ids, callback
//! modules and ids, `NvtxExportTableCallbacks`) and `nvToolsExt.h` (`nvtxEventAttributes_t`,
//! the message types).

use super::record::in_shim;
use crate::capture::nvtx_names as names;
use crate::capture::nvtx_names::{ascii, wide, MAX_NAME};
use crate::session;
use crate::sys::clock;
use crate::sys::event::{Event, EventKind};
use gpumemprof_format::NvtxOp;
use std::cell::Cell;
use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_uint};
use std::sync::atomic::{AtomicU64, Ordering};

/// `NvtxGetExportTableFunc_t` (nvtxTypes.h).
type GetExportTable = Option<unsafe extern "C" fn(export_table_id: u32) -> *const c_void>;
/// `NVTX_ETID_CALLBACKS` (nvtxTypes.h, `NvtxExportTableID`).
const ETID_CALLBACKS: u32 = 1;
/// `NvtxFunctionTable`: an array of pointers to NVTX's function-pointer slots.
type FunctionTable = *mut *mut *const c_void;

/// `NvtxExportTableCallbacks` (nvtxTypes.h).
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<
        unsafe extern "C" fn(
            module: c_int,
            out_table: *mut FunctionTable,
            out_size: *mut c_uint,
        ) -> c_int,
    >,
}

/// `NvtxCallbackModule` (nvtxTypes.h).
const MODULE_CORE: c_int = 1;
const MODULE_CORE2: c_int = 5;

/// `NvtxCallbackIdCore` (nvtxTypes.h).
mod core {
    pub const MARK_EX: usize = 1;
    pub const MARK_A: usize = 2;
    pub const MARK_W: usize = 3;
    pub const RANGE_START_EX: usize = 4;
    pub const RANGE_START_A: usize = 5;
    pub const RANGE_START_W: usize = 6;
    pub const RANGE_END: usize = 7;
    pub const RANGE_PUSH_EX: usize = 8;
    pub const RANGE_PUSH_A: usize = 9;
    pub const RANGE_PUSH_W: usize = 10;
    pub const RANGE_POP: usize = 11;
}

/// `NvtxCallbackIdCore2` (nvtxTypes.h).
mod core2 {
    pub const DOMAIN_MARK_EX: usize = 1;
    pub const DOMAIN_RANGE_START_EX: usize = 2;
    pub const DOMAIN_RANGE_END: usize = 3;
    pub const DOMAIN_RANGE_PUSH_EX: usize = 4;
    pub const DOMAIN_RANGE_POP: usize = 5;
    pub const DOMAIN_REGISTER_STRING_A: usize = 10;
    pub const DOMAIN_REGISTER_STRING_W: usize = 11;
    pub const DOMAIN_CREATE_A: usize = 12;
    pub const DOMAIN_CREATE_W: usize = 13;
}

/// `nvtxEventAttributes_v2` (nvToolsExt.h): 48 bytes on LP64.
#[repr(C)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_void,
}

/// `nvtxMessageType_t` (nvToolsExt.h).
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;

/// Domains one thread tracks push levels for at once; a 17th domain with ranges open
/// shares a slot with another (its levels are then off; NVTX tools rarely see two).
const DOMAIN_SLOTS: usize = 16;

thread_local! {
    /// (domain id, open pushed ranges) per domain with ranges open on this thread; a slot
    /// at depth 0 is free. Const-initialised, no Drop.
    static DEPTHS: [Cell<(u64, u32)>; DOMAIN_SLOTS] =
        const { [const { Cell::new((0, 0)) }; DOMAIN_SLOTS] };
}

/// The next `nvtxRangeStart*` id (process-wide, from 1).
static NEXT_RANGE: AtomicU64 = AtomicU64::new(1);

/// The entry point NVTX's loader looks up in the library `NVTX_INJECTION64_PATH` names.
/// Fills the CORE and CORE2 slots this module handles; returns 1 (success), or 0 if the
/// export table is not one it understands (NVTX then keeps its no-op functions).
///
/// # Safety
/// `get_export_table` is NVTX's `nvtxGetExportTable` (or NULL).
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: GetExportTable) -> c_int {
    std::panic::catch_unwind(|| {
        let Some(get) = get_export_table else {
            return 0;
        };
        let callbacks = get(ETID_CALLBACKS) as *const ExportTableCallbacks;
        if callbacks.is_null()
            || (*callbacks).struct_size < std::mem::size_of::<ExportTableCallbacks>()
        {
            return 0;
        }
        let Some(get_table) = (*callbacks).get_module_function_table else {
            return 0;
        };
        let core: [(usize, *const c_void); 11] = [
            (core::MARK_EX, mark_ex as *const c_void),
            (core::MARK_A, mark_a as *const c_void),
            (core::MARK_W, mark_w as *const c_void),
            (core::RANGE_START_EX, range_start_ex as *const c_void),
            (core::RANGE_START_A, range_start_a as *const c_void),
            (core::RANGE_START_W, range_start_w as *const c_void),
            (core::RANGE_END, range_end as *const c_void),
            (core::RANGE_PUSH_EX, range_push_ex as *const c_void),
            (core::RANGE_PUSH_A, range_push_a as *const c_void),
            (core::RANGE_PUSH_W, range_push_w as *const c_void),
            (core::RANGE_POP, range_pop as *const c_void),
        ];
        let core2: [(usize, *const c_void); 9] = [
            (core2::DOMAIN_MARK_EX, domain_mark_ex as *const c_void),
            (
                core2::DOMAIN_RANGE_START_EX,
                domain_range_start_ex as *const c_void,
            ),
            (core2::DOMAIN_RANGE_END, domain_range_end as *const c_void),
            (
                core2::DOMAIN_RANGE_PUSH_EX,
                domain_range_push_ex as *const c_void,
            ),
            (core2::DOMAIN_RANGE_POP, domain_range_pop as *const c_void),
            (
                core2::DOMAIN_REGISTER_STRING_A,
                register_string_a as *const c_void,
            ),
            (
                core2::DOMAIN_REGISTER_STRING_W,
                register_string_w as *const c_void,
            ),
            (core2::DOMAIN_CREATE_A, domain_create_a as *const c_void),
            (core2::DOMAIN_CREATE_W, domain_create_w as *const c_void),
        ];
        let filled = fill(get_table, MODULE_CORE, &core) && fill(get_table, MODULE_CORE2, &core2);
        c_int::from(filled)
    })
    .unwrap_or(0)
}

/// Writes each `(callback id, function)` into NVTX's slot for it; false if the module's
/// table cannot be had.
unsafe fn fill(
    get_table: unsafe extern "C" fn(c_int, *mut FunctionTable, *mut c_uint) -> c_int,
    module: c_int,
    entries: &[(usize, *const c_void)],
) -> bool {
    let mut table: FunctionTable = std::ptr::null_mut();
    let mut size: c_uint = 0;
    if get_table(module, &mut table, &mut size) == 0 || table.is_null() {
        return false;
    }
    for &(id, f) in entries {
        // `size` counts the ids of the module (slot 0 unused); an older NVTX has fewer.
        if id < size as usize {
            let slot = *table.add(id);
            if !slot.is_null() {
                *slot = f;
            }
        }
    }
    true
}

// ---------------------------------------------------------------------------------
// Names: NVTX strings, cut to MAX_NAME bytes and interned.

/// The message of an attribute structure as a name id (0: none, or unreadable).
unsafe fn attr_name(attr: *const EventAttributes) -> u64 {
    if attr.is_null() {
        return 0;
    }
    // Only read fields the caller's structure says it has.
    let size = usize::from((*attr).size);
    if size < std::mem::size_of::<EventAttributes>() {
        return 0;
    }
    let mut buf = [0u8; MAX_NAME];
    match (*attr).message_type {
        MESSAGE_ASCII => message_id(ascii((*attr).message as *const c_char, &mut buf)),
        MESSAGE_UNICODE => message_id(wide((*attr).message as *const u32, &mut buf)),
        MESSAGE_REGISTERED => handle_id((*attr).message),
        _ => 0,
    }
}

/// A handle this module handed out (a domain, a registered string) as its name id; 0 for
/// NULL (the default domain) and anything it never handed out.
fn handle_id(h: *const c_void) -> u64 {
    let v = h as u64;
    if names::is_id(v) {
        v
    } else {
        0
    }
}

// ---------------------------------------------------------------------------------
// Recording.

/// Records one NVTX event, unless this thread is inside the shim or nothing is recorded;
/// `name` is only evaluated when the event is recorded. Keeps the caller's errno.
#[inline]
fn record(op: NvtxOp, domain: u64, range: u64, name: impl FnOnce() -> u64) {
    in_shim(|me| {
        let Some(p) = session::recording() else {
            return;
        };
        let name = name();
        let ev = Event {
            time_ns: clock::now(),
            address: domain,
            size: name,
            aux: range,
            mem: op.to_u8(),
            ..Event::new(EventKind::Nvtx)
        };
        p.push(me, &ev);
    });
}

/// One more pushed range of `domain` on this thread: the level it opens (0-based).
fn push_level(domain: u64) -> c_int {
    DEPTHS
        .try_with(|slots| {
            let i = slots
                .iter()
                .position(|s| s.get().0 == domain && s.get().1 > 0)
                .or_else(|| slots.iter().position(|s| s.get().1 == 0))
                .unwrap_or(domain as usize % DOMAIN_SLOTS);
            let (_, depth) = slots[i].get();
            slots[i].set((domain, depth.saturating_add(1)));
            c_int::try_from(depth).unwrap_or(c_int::MAX)
        })
        .unwrap_or(0)
}

/// One pushed range of `domain` fewer: the level it closes, or -1 with none open.
fn pop_level(domain: u64) -> c_int {
    DEPTHS
        .try_with(|slots| {
            let Some(s) = slots.iter().find(|s| s.get().0 == domain && s.get().1 > 0) else {
                return -1;
            };
            let depth = s.get().1 - 1;
            s.set((domain, depth));
            c_int::try_from(depth).unwrap_or(c_int::MAX)
        })
        .unwrap_or(-1)
}

/// `gpumemprof_range_push` (the C API): a range of NVTX's default domain on this thread,
/// exactly as `nvtxRangePushA(name)` opens one; its level, 0-based.
pub(crate) fn api_push(name: *const c_char) -> c_int {
    push(0, || message_of(name, ascii))
}

/// `gpumemprof_range_pop`: as `nvtxRangePop()`.
pub(crate) fn api_pop() -> c_int {
    pop(0)
}

fn push(domain: u64, name: impl FnOnce() -> u64) -> c_int {
    let level = push_level(domain);
    record(NvtxOp::Push, domain, 0, name);
    level
}

fn pop(domain: u64) -> c_int {
    let level = pop_level(domain);
    // A pop with nothing open closes nothing: not recorded.
    if level >= 0 {
        record(NvtxOp::Pop, domain, 0, || 0);
    }
    level
}

fn start(domain: u64, name: impl FnOnce() -> u64) -> u64 {
    let id = NEXT_RANGE.fetch_add(1, Ordering::Relaxed);
    record(NvtxOp::Start, domain, id, name);
    id
}

fn end(domain: u64, id: u64) {
    record(NvtxOp::End, domain, id, || 0);
}

fn mark(domain: u64, name: impl FnOnce() -> u64) {
    record(NvtxOp::Mark, domain, 0, name);
}

/// A name read from `p` by `read` and interned (a `[u8; MAX_NAME]` buffer on the stack):
/// for handles, which are never NULL, so an empty name has an id too.
fn interned<T>(p: *const T, read: unsafe fn(*const T, &mut [u8; MAX_NAME]) -> &[u8]) -> u64 {
    let mut buf = [0u8; MAX_NAME];
    // SAFETY: `p` is what the program passed NVTX for a string: NULL or NUL-terminated.
    names::intern(unsafe { read(p, &mut buf) })
}

/// A message read like `interned`; an empty or NULL one is no name (0).
fn message_of<T>(p: *const T, read: unsafe fn(*const T, &mut [u8; MAX_NAME]) -> &[u8]) -> u64 {
    let mut buf = [0u8; MAX_NAME];
    // SAFETY: as in `interned`.
    message_id(unsafe { read(p, &mut buf) })
}

fn message_id(bytes: &[u8]) -> u64 {
    if bytes.is_empty() {
        0
    } else {
        names::intern(bytes)
    }
}

// ---------------------------------------------------------------------------------
// The callbacks NVTX calls (signatures from nvtxTypes.h's `*_impl_fntype`). Each takes
// what the program passed to the NVTX function of its name.

unsafe extern "C" fn mark_ex(attr: *const EventAttributes) {
    mark(0, || attr_name(attr));
}
unsafe extern "C" fn mark_a(message: *const c_char) {
    mark(0, || message_of(message, ascii));
}
unsafe extern "C" fn mark_w(message: *const u32) {
    mark(0, || message_of(message, wide));
}
unsafe extern "C" fn range_start_ex(attr: *const EventAttributes) -> u64 {
    start(0, || attr_name(attr))
}
unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    start(0, || message_of(message, ascii))
}
unsafe extern "C" fn range_start_w(message: *const u32) -> u64 {
    start(0, || message_of(message, wide))
}
unsafe extern "C" fn range_end(id: u64) {
    end(0, id);
}
unsafe extern "C" fn range_push_ex(attr: *const EventAttributes) -> c_int {
    push(0, || attr_name(attr))
}
unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    push(0, || message_of(message, ascii))
}
unsafe extern "C" fn range_push_w(message: *const u32) -> c_int {
    push(0, || message_of(message, wide))
}
unsafe extern "C" fn range_pop() -> c_int {
    pop(0)
}
unsafe extern "C" fn domain_mark_ex(domain: *const c_void, attr: *const EventAttributes) {
    mark(handle_id(domain), || attr_name(attr));
}
unsafe extern "C" fn domain_range_start_ex(
    domain: *const c_void,
    attr: *const EventAttributes,
) -> u64 {
    start(handle_id(domain), || attr_name(attr))
}
unsafe extern "C" fn domain_range_end(domain: *const c_void, id: u64) {
    end(handle_id(domain), id);
}
unsafe extern "C" fn domain_range_push_ex(
    domain: *const c_void,
    attr: *const EventAttributes,
) -> c_int {
    push(handle_id(domain), || attr_name(attr))
}
unsafe extern "C" fn domain_range_pop(domain: *const c_void) -> c_int {
    pop(handle_id(domain))
}
/// `nvtxDomainRegisterStringA`: the handle is the string's name id (the domain does not
/// matter: ids are by content).
unsafe extern "C" fn register_string_a(_domain: *const c_void, s: *const c_char) -> *const c_void {
    handle(|| interned(s, ascii))
}
unsafe extern "C" fn register_string_w(_domain: *const c_void, s: *const u32) -> *const c_void {
    handle(|| interned(s, wide))
}
/// `nvtxDomainCreateA`: the handle is the domain name's id.
unsafe extern "C" fn domain_create_a(name: *const c_char) -> *const c_void {
    handle(|| interned(name, ascii))
}
unsafe extern "C" fn domain_create_w(name: *const u32) -> *const c_void {
    handle(|| interned(name, wide))
}

/// A name id as an NVTX handle; interning never records an event, so it works (and gives
/// the same ids) whether or not the shim records. NULL only if interning panicked.
fn handle(id: impl FnOnce() -> u64) -> *const c_void {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(id)).unwrap_or(0) as *const c_void
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_struct_has_nvtx_layout() {
        // nvToolsExt.h: NVTX_EVENT_ATTRIB_STRUCT_SIZE is 48 on LP64, the message at 40.
        assert_eq!(std::mem::size_of::<EventAttributes>(), 48);
        assert_eq!(std::mem::offset_of!(EventAttributes, message_type), 32);
        assert_eq!(std::mem::offset_of!(EventAttributes, message), 40);
    }

    #[test]
    fn push_and_pop_levels_are_per_domain_and_a_stray_pop_is_negative() {
        std::thread::spawn(|| {
            assert_eq!(pop_level(0), -1);
            assert_eq!(push_level(0), 0);
            assert_eq!(push_level(0), 1);
            assert_eq!(push_level(7), 0);
            assert_eq!(pop_level(0), 1);
            assert_eq!(pop_level(7), 0);
            assert_eq!(pop_level(7), -1);
            assert_eq!(pop_level(0), 0);
            assert_eq!(pop_level(0), -1);
            assert_eq!(push_level(0), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn attributes_too_small_or_of_unknown_type_have_no_name() {
        let mut attr = EventAttributes {
            version: 3,
            size: 48,
            category: 0,
            color_type: 0,
            color: 0,
            payload_type: 0,
            reserved0: 0,
            payload: 0,
            message_type: MESSAGE_ASCII,
            message: c"fwd".as_ptr().cast(),
        };
        // SAFETY: a valid structure.
        unsafe {
            let id = attr_name(&attr);
            assert_eq!(id, names::intern(b"fwd"));
            attr.message_type = MESSAGE_REGISTERED;
            attr.message = id as *const c_void;
            assert_eq!(attr_name(&attr), id);
            attr.message = usize::MAX as *const c_void; // never handed out: no name
            assert_eq!(attr_name(&attr), 0);
            attr.message_type = 99;
            assert_eq!(attr_name(&attr), 0);
            attr.size = 40; // an older, smaller structure: its message is not read
            attr.message_type = MESSAGE_ASCII;
            assert_eq!(attr_name(&attr), 0);
            assert_eq!(attr_name(std::ptr::null()), 0);
        }
    }
}
