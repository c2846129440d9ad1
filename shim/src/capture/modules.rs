//! The module map: which executable or shared library is loaded where, with its GNU
//! build-id, so the analyzer can symbolize return addresses after the process is gone.
//!
//! Scanned with `dl_iterate_phdr` from the writer thread only (never on the hot path:
//! it takes the loader's write lock). `changed()` compares the loader's add/remove
//! counters so the full scan runs only when a library was loaded or unloaded.

use gpumemprof_format::Module;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;

/// The loader's (adds, subs) counters: they change whenever an object is loaded or unloaded.
pub fn generation() -> (u64, u64) {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut c_void,
    ) -> c_int {
        let out = &mut *(data as *mut (u64, u64));
        // dlpi_adds/dlpi_subs exist only if the loader passes a struct that large.
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
            *out = ((*info).dlpi_adds, (*info).dlpi_subs);
        }
        1 // stop after the first object: the counters are global
    }
    let mut g = (0u64, 0u64);
    // SAFETY: the callback only writes to `g`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut g as *mut _ as *mut c_void) };
    // The fast unwinder retires its cached rules when objects come and go.
    crate::capture::unwind::note_loader_generation(g);
    g
}

/// Every loaded object with at least one PT_LOAD segment.
pub fn scan(time_ns: u64) -> Vec<Module> {
    struct Ctx {
        time_ns: u64,
        exe: String,
        out: Vec<Module>,
    }
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        let ctx = &mut *(data as *mut Ctx);
        let info = &*info;
        let bias = info.dlpi_addr;
        let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let (mut start, mut end) = (u64::MAX, 0u64);
        let mut build_id = Vec::new();
        for ph in phdrs {
            if ph.p_type == PT_LOAD {
                start = start.min(bias.wrapping_add(ph.p_vaddr));
                end = end.max(bias.wrapping_add(ph.p_vaddr).wrapping_add(ph.p_memsz));
            } else if ph.p_type == PT_NOTE && build_id.is_empty() {
                let notes = std::slice::from_raw_parts(
                    bias.wrapping_add(ph.p_vaddr) as *const u8,
                    ph.p_memsz as usize,
                );
                build_id = find_build_id(notes).unwrap_or_default();
            }
        }
        if start >= end {
            return 0;
        }
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(info.dlpi_name)
                .to_string_lossy()
                .into_owned()
        };
        // The main program is reported with an empty name.
        let path = if name.is_empty() {
            ctx.exe.clone()
        } else {
            name
        };
        ctx.out.push(Module {
            time_ns: ctx.time_ns,
            bias,
            start,
            end,
            path,
            build_id,
        });
        0
    }
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut ctx = Ctx {
        time_ns,
        exe,
        out: Vec::new(),
    };
    // SAFETY: the callback reads the loader's phdr info, valid during the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut ctx as *mut Ctx as *mut c_void) };
    ctx.out
}

/// Finds the NT_GNU_BUILD_ID descriptor in a PT_NOTE segment.
fn find_build_id(mut notes: &[u8]) -> Option<Vec<u8>> {
    fn u32_at(b: &[u8], i: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
    }
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let namesz = u32_at(notes, 0)? as usize;
        let descsz = u32_at(notes, 4)? as usize;
        let ty = u32_at(notes, 8)?;
        let name_end = 12 + align4(namesz);
        let desc_end = name_end.checked_add(align4(descsz))?;
        if desc_end > notes.len() {
            return None;
        }
        if ty == NT_GNU_BUILD_ID && notes.get(12..12 + namesz) == Some(b"GNU\0") {
            return Some(notes[name_end..name_end + descsz].to_vec());
        }
        notes = &notes[desc_end..];
    }
    None
}

/// The `[start, end)` range of the module containing `addr`, if any.
pub fn range_of(modules: &[Module], addr: u64) -> Option<(u64, u64)> {
    modules
        .iter()
        .find(|m| addr >= m.start && addr < m.end)
        .map(|m| (m.start, m.end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_this_test_binary_with_a_build_id() {
        let mods = scan(0);
        let here = scan as *const () as u64;
        let m = mods
            .iter()
            .find(|m| here >= m.start && here < m.end)
            .expect("own module");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(m.path, exe.to_string_lossy());
        // Rust binaries on Linux are linked with --build-id (20-byte SHA1).
        assert_eq!(m.build_id.len(), 20);
        assert!(mods.iter().any(|m| m.path.contains("libc.so")));
    }

    #[test]
    fn generation_changes_only_on_load() {
        let a = generation();
        let b = generation();
        assert_eq!(a, b);
        assert!(a.0 > 0);
    }
}
