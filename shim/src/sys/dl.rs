//! The real `dlsym`/`dlvsym`, and symbol lookups every layer uses (the overrides the
//! program meets are in `hooks/dlsym.rs`).
//!
//! Programs that never link a CUDA library (TensorFlow, JAX, static cudart, ctypes)
//! reach allocation functions with `dlsym(handle, "cuMemAlloc_v2")`, which searches
//! only that handle's scope and never meets a preloaded export. So the shim exports
//! `dlsym` and `dlvsym` itself:
//!
//! * `RTLD_NEXT` and `RTLD_DEFAULT` lookups are resolved relative to the *caller*
//!   (its position in the search order, its namespace and local scope). An ordinary
//!   call from our code would make the shim the caller and change the answer (HAMi's
//!   `import torch` livelock), so the exported entry points are a few instructions of
//!   assembly that jump (not call) to the real function for those two handles.
//! * Every other handle goes to `substitute`: the real lookup, then, only for the exact
//!   names in the hook table, the shim's wrapper bound to what the handle returned.
//!   Names the table does not have cost a first-byte test (Python's `PyInit_*` lookups)
//!   or a length-and-bytes comparison against the table; nothing allocates or locks.
//!
//! The real `dlsym` cannot be found with `dlsym` or `dlvsym` (both would be ours, and a
//! versioned reference such as `dlvsym@GLIBC_2.34` still binds to an unversioned
//! preloaded definition), so `real_dlsym` reads it from libc's own dynamic symbol table
//! (the GNU hash table) via `dl_iterate_phdr`: the default, non-hidden version, as a
//! normally linked program would get. glibc before 2.34 keeps both in libdl.so.2, which
//! is searched next.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
pub type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// The real functions, found once. Read by the assembly entry points.
pub static GPUMEMPROF_REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static GPUMEMPROF_REAL_DLVSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// libc's `dlsym`. Calling it from the shim makes the shim the caller: right for
/// `RTLD_NEXT` lookups of the shim's own "next" functions.
pub fn real_dlsym() -> Option<DlsymFn> {
    let p = GPUMEMPROF_REAL_DLSYM.load(Ordering::Acquire);
    let p = if p.is_null() {
        resolve_real(c"dlsym", &GPUMEMPROF_REAL_DLSYM)
    } else {
        p
    };
    // SAFETY: the pointer is libc's dlsym, which has this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
}

pub fn real_dlvsym() -> Option<DlvsymFn> {
    let p = GPUMEMPROF_REAL_DLVSYM.load(Ordering::Acquire);
    let p = if p.is_null() {
        resolve_real(c"dlvsym", &GPUMEMPROF_REAL_DLVSYM)
    } else {
        p
    };
    // SAFETY: the pointer is libc's dlvsym, which has this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlvsymFn>(p) })
}

/// `dlsym` through the real function (NULL when it cannot be found, never a crash).
/// `handle` is a handle from `dlopen` or a pseudo-handle; the loader validates it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn lookup(handle: *mut c_void, name: &CStr) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: a valid handle (or pseudo-handle) and a NUL-terminated name.
        Some(f) => unsafe { f(handle, name.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

/// `name` in a loaded library `RTLD_NEXT` cannot see (see `elf::find_in_any`), never
/// in the shim itself.
pub fn find_local(name: &CStr) -> *mut c_void {
    elf::find_in_any(name, find_local as *const c_void)
}

/// The definition of `name` that comes after the shim: `RTLD_NEXT`, else one in a library
/// `RTLD_NEXT` cannot see (loaded with `RTLD_LOCAL`, as Python loads PyTorch's and
/// TensorFlow's extension modules and everything they link); found once, `slot` keeps the
/// answer (`ABSENT` when there is none). `None` if there is none.
/// Inlined into each hook: once found, a load and a test (out of line, the lookup took four
/// instruction lines of its own on every call; BENCHMARKS.md, twentieth).
#[inline(always)]
pub fn next_cached(slot: &AtomicPtr<c_void>, name: &CStr) -> Option<*mut c_void> {
    let p = slot.load(Ordering::Acquire);
    if p == ABSENT {
        return None;
    }
    if !p.is_null() {
        return Some(p);
    }
    find_next(slot, name)
}

/// `next_cached`'s first call for `slot`.
#[cold]
#[inline(never)]
fn find_next(slot: &AtomicPtr<c_void>, name: &CStr) -> Option<*mut c_void> {
    let p = next_definition(name);
    slot.store(if p.is_null() { ABSENT } else { p }, Ordering::Release);
    (!p.is_null()).then_some(p)
}

/// libc's own default-version definition of `name`, read from libc's symbol table (never
/// one of the shim's exports of the same name); NULL if libc has none.
pub fn libc_symbol(name: &CStr) -> *mut c_void {
    elf::find_in_loaded(&[c"libc.so.6"], name)
}

/// Every copy of the shim exports this name (`session::one_copy`).
pub const SHIM_MARK: &CStr = c"gpumemprof_session_mark";

/// The real definition of `name` after the shim: `RTLD_NEXT`, else one in a library
/// `RTLD_NEXT` cannot see (`find_local`); never one of another copy of the shim (whose
/// export would call ours back as its own "next"). NULL if there is none.
pub fn next_definition(name: &CStr) -> *mut c_void {
    let p = lookup(libc::RTLD_NEXT, name);
    if !p.is_null() && !elf::in_shim_copy(p) {
        return p;
    }
    find_local(name)
}

/// A lookup cache's mark of a name with no definition (never an address): `next_cached`'s
/// and the device helpers' (`hooks/device.rs`).
pub const ABSENT: *mut c_void = std::ptr::dangling_mut::<c_void>();

#[cold]
fn resolve_real(name: &CStr, slot: &AtomicPtr<c_void>) -> *mut c_void {
    let p = elf::find_in_loaded(&[c"libc.so.6", c"libdl.so.2"], name);
    if !p.is_null() {
        slot.store(p, Ordering::Release);
    }
    p
}

/// Called by the assembly entry point (`hooks/dlsym.rs`) when `GPUMEMPROF_REAL_DLSYM` is still empty.
pub extern "C" fn gpumemprof_resolve_real_dlsym() -> *mut c_void {
    resolve_real(c"dlsym", &GPUMEMPROF_REAL_DLSYM)
}

pub extern "C" fn gpumemprof_resolve_real_dlvsym() -> *mut c_void {
    resolve_real(c"dlvsym", &GPUMEMPROF_REAL_DLVSYM)
}

/// Resolves both real functions now (from the constructor), so the assembly fast path
/// never needs the slow one in practice.
pub fn prime() {
    let _ = real_dlsym();
    let _ = real_dlvsym();
}

/// Reading a loaded object's dynamic symbol table.
pub mod elf {
    use std::ffi::{c_int, c_void, CStr};

    const DT_NULL: i64 = 0;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_GNU_HASH: i64 = 0x6fff_fef5;
    const DT_VERSYM: i64 = 0x6fff_fff0;
    const PT_DYNAMIC: u32 = 2;
    const VERSYM_HIDDEN: u16 = 0x8000;
    const SHN_UNDEF: u16 = 0;

    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }

    #[repr(C)]
    struct Sym {
        name: u32,
        info: u8,
        other: u8,
        shndx: u16,
        value: u64,
        size: u64,
    }

    struct Search<'a> {
        want: &'a [&'a CStr],
        /// Search every named object but the one loaded at this bias (`want` ignored).
        any_but: Option<u64>,
        name: &'a CStr,
        found: *mut c_void,
    }

    /// The default-version definition of `name` in the first loaded object (in load
    /// order, the main program excluded) that defines it, other than the object
    /// containing `not_in`; NULL if none does. Finds functions of libraries that
    /// `RTLD_NEXT` cannot see: those loaded with `RTLD_LOCAL` (ctypes, Python extension
    /// modules) and what they link.
    pub fn find_in_any(name: &CStr, not_in: *const c_void) -> *mut c_void {
        let skip = base_of(not_in as *mut c_void).unwrap_or(0);
        let mut s = Search {
            want: &[],
            any_but: Some(skip),
            name,
            found: std::ptr::null_mut(),
        };
        // SAFETY: as in `find_in_loaded`.
        unsafe { libc::dl_iterate_phdr(Some(visit), &mut s as *mut Search as *mut c_void) };
        s.found
    }

    /// Whether `p` lies in an object that defines `SHIM_MARK`: a copy of the shim.
    pub fn in_shim_copy(p: *mut c_void) -> bool {
        base_of(p).is_some_and(|base| defining(super::SHIM_MARK).iter().any(|(b, _)| *b == base))
    }

    /// The paths of the loaded objects that define `name`, other than the one holding
    /// `not_in`.
    pub fn paths_defining(name: &CStr, not_in: *const c_void) -> Vec<String> {
        let skip = base_of(not_in as *mut c_void);
        defining(name)
            .into_iter()
            .filter(|(base, _)| Some(*base) != skip)
            .map(|(_, path)| path)
            .collect()
    }

    /// The load address of the object holding `addr`.
    pub fn base_of(addr: *mut c_void) -> Option<u64> {
        dl_info(addr).map(|i| i.dli_fbase as u64)
    }

    /// The path of the object holding `addr`.
    pub fn path_of(addr: *mut c_void) -> Option<String> {
        let name = dl_info(addr)?.dli_fname;
        // SAFETY: dladdr filled it: the object's NUL-terminated path owned by the loader,
        // or null.
        (!name.is_null()).then(|| {
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        })
    }

    fn dl_info(addr: *mut c_void) -> Option<libc::Dl_info> {
        let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
        // SAFETY: valid out-pointer; dladdr only reads the loader's tables.
        if addr.is_null() || unsafe { libc::dladdr(addr, info.as_mut_ptr()) } == 0 {
            return None;
        }
        // SAFETY: dladdr succeeded, so it filled `info`.
        Some(unsafe { info.assume_init() })
    }

    /// The loaded objects that define `name`: their load address and path.
    fn defining(name: &CStr) -> Vec<(u64, String)> {
        let mut s = Defining {
            name,
            found: Vec::new(),
        };
        // SAFETY: as in `find_in_loaded`.
        unsafe {
            libc::dl_iterate_phdr(Some(visit_defining), &mut s as *mut Defining as *mut c_void)
        };
        s.found
    }

    struct Defining<'a> {
        name: &'a CStr,
        found: Vec<(u64, String)>,
    }

    unsafe extern "C" fn visit_defining(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        let s = &mut *(data as *mut Defining);
        let info = &*info;
        if !info.dlpi_name.is_null() && defines(info, s.name) {
            let path = CStr::from_ptr(info.dlpi_name)
                .to_string_lossy()
                .into_owned();
            s.found.push((info.dlpi_addr, path));
        }
        0
    }

    /// Whether the object of `info` defines `name`.
    unsafe fn defines(info: &libc::dl_phdr_info, name: &CStr) -> bool {
        let base = info.dlpi_addr;
        (0..info.dlpi_phnum as usize).any(|i| {
            let ph = &*info.dlpi_phdr.add(i);
            ph.p_type == PT_DYNAMIC
                && !lookup(base, (base + ph.p_vaddr) as *const Dyn, name).is_null()
        })
    }

    /// The default-version definition of `name` in the first of `libraries` (matched
    /// by file name) that is loaded and defines it; NULL if none does.
    pub fn find_in_loaded(libraries: &[&CStr], name: &CStr) -> *mut c_void {
        for lib in libraries {
            let mut s = Search {
                want: std::slice::from_ref(lib),
                any_but: None,
                name,
                found: std::ptr::null_mut(),
            };
            // SAFETY: the callback only reads the loader's program headers and the
            // object's mapped dynamic section, tables and strings.
            unsafe { libc::dl_iterate_phdr(Some(visit), &mut s as *mut Search as *mut c_void) };
            if !s.found.is_null() {
                return s.found;
            }
        }
        std::ptr::null_mut()
    }

    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        let s = &mut *(data as *mut Search);
        let info = &*info;
        if info.dlpi_name.is_null() {
            return 0;
        }
        let path = CStr::from_ptr(info.dlpi_name).to_bytes();
        let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        match s.any_but {
            // The main program (empty name), the vDSO, the excluded object and every copy
            // of the shim are skipped.
            Some(skip) => {
                if file.is_empty()
                    || info.dlpi_addr == skip
                    || !path.contains(&b'/')
                    || defines(info, super::SHIM_MARK)
                {
                    return 0;
                }
            }
            None => {
                if !s.want.iter().any(|w| w.to_bytes() == file) {
                    return 0;
                }
            }
        }
        let base = info.dlpi_addr;
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            if ph.p_type == PT_DYNAMIC {
                let dynamic = (base + ph.p_vaddr) as *const Dyn;
                s.found = lookup(base, dynamic, s.name);
                // Searching any object: go on to the next one until a definition.
                return i32::from(s.any_but.is_none() || !s.found.is_null());
            }
        }
        0
    }

    /// The loader relocates most tables' addresses in the dynamic section in place;
    /// an unrelocated (smaller than the base) one gets the base added.
    fn addr(base: u64, v: u64) -> u64 {
        if v < base {
            base + v
        } else {
            v
        }
    }

    fn gnu_hash(name: &[u8]) -> u32 {
        name.iter()
            .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32))
    }

    unsafe fn lookup(base: u64, mut d: *const Dyn, name: &CStr) -> *mut c_void {
        let (mut strtab, mut symtab, mut hash, mut versym) = (0u64, 0u64, 0u64, 0u64);
        while (*d).tag != DT_NULL {
            match (*d).tag {
                DT_STRTAB => strtab = addr(base, (*d).val),
                DT_SYMTAB => symtab = addr(base, (*d).val),
                DT_GNU_HASH => hash = addr(base, (*d).val),
                DT_VERSYM => versym = addr(base, (*d).val),
                _ => {}
            }
            d = d.add(1);
        }
        if strtab == 0 || symtab == 0 || hash == 0 {
            return std::ptr::null_mut();
        }
        let h = hash as *const u32;
        let (nbuckets, symoffset, bloom_size) = (*h, *h.add(1), *h.add(2));
        if nbuckets == 0 {
            return std::ptr::null_mut();
        }
        let buckets = h.add(4 + 2 * bloom_size as usize); // 64-bit bloom words
        let chains = buckets.add(nbuckets as usize);
        let want = name.to_bytes();
        let hv = gnu_hash(want);
        let mut i = *buckets.add((hv % nbuckets) as usize);
        if i < symoffset {
            return std::ptr::null_mut();
        }
        loop {
            let ch = *chains.add((i - symoffset) as usize);
            if (ch | 1) == (hv | 1) {
                let sym = &*(symtab as *const Sym).add(i as usize);
                let sname = CStr::from_ptr((strtab + sym.name as u64) as *const i8);
                let hidden =
                    versym != 0 && *(versym as *const u16).add(i as usize) & VERSYM_HIDDEN != 0;
                if sname.to_bytes() == want && sym.shndx != SHN_UNDEF && !hidden {
                    return (base + sym.value) as *mut c_void;
                }
            }
            if ch & 1 != 0 {
                return std::ptr::null_mut();
            }
            i += 1;
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn gnu_hash_matches_the_reference_values() {
            // Values from the GNU hash definition (h = h * 33 + c, seed 5381).
            assert_eq!(super::gnu_hash(b""), 5381);
            assert_eq!(super::gnu_hash(b"printf"), 0x156b_2bb8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::ffi::c_int;

    #[test]
    fn the_real_dlsym_is_libcs_and_finds_symbols() {
        let f = real_dlsym().expect("libc's dlsym is found in its symbol table");
        // SAFETY: RTLD_DEFAULT and a valid name.
        let p = unsafe { f(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert!(!p.is_null());
        // SAFETY: getpid's signature.
        let getpid: extern "C" fn() -> c_int = unsafe { std::mem::transmute(p) };
        assert_eq!(getpid(), std::process::id() as c_int);
        let v = real_dlvsym().expect("libc's dlvsym is found");
        // SAFETY: as above.
        let q = unsafe {
            v(
                libc::RTLD_DEFAULT,
                c"getpid".as_ptr(),
                c"GLIBC_2.2.5".as_ptr(),
            )
        };
        assert_eq!(q, p);
        // A name no library defines.
        // SAFETY: as above.
        let none = unsafe { f(libc::RTLD_DEFAULT, c"gpumemprof_no_such_symbol".as_ptr()) };
        assert!(none.is_null());
    }
}
