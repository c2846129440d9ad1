//! The slow path: the unwind rule of one code address, read from the `.eh_frame` of the
//! object that contains it, as it is mapped in memory. Runs once per address (the
//! result is cached in `rules`), under the unwinder's lock, never on a cache hit.
//!
//! ```text
//!  address ─► _dl_find_object (glibc >= 2.35: lock-free, no malloc, live loader state)
//!          ─► the object's ELF and program headers, read at its first mapped byte:
//!             PT_GNU_EH_FRAME (.eh_frame_hdr: the binary-search table) and the PT_LOAD
//!             that holds .eh_frame (which bounds how far gimli may read)
//!          ─► gimli: the FDE for the address, its CFI program run up to the address
//!          ─► the row reduced to a `Rule`, or `Unsupported`
//! ```
//!
//! Nothing here holds the loader's lock: `_dl_find_object` takes none, and the object
//! cannot be unloaded while one of its return addresses is on this thread's stack.

use super::rules::{Base, Rule, Saved};
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, NativeEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

/// glibc's `struct dl_find_object` (dlfcn.h, glibc 2.35).
#[repr(C)]
pub struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 7],
}

type FindObjectFn = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> i32;

/// `_dl_find_object`, looked up once at initialisation (absent before glibc 2.35: then
/// the fast unwinder stays off and every stack takes the slow one).
static FIND_OBJECT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Looks up `_dl_find_object`; true if it exists. Called at initialisation.
pub fn init() -> bool {
    if FIND_OBJECT.load(Ordering::Acquire).is_null() {
        let p = crate::sys::dl::lookup(libc::RTLD_DEFAULT, c"_dl_find_object");
        FIND_OBJECT.store(p, Ordering::Release);
    }
    available()
}

#[inline]
pub fn available() -> bool {
    !FIND_OBJECT.load(Ordering::Relaxed).is_null()
}

/// The state the slow path keeps between calls (under the unwinder's lock).
pub struct Slow {
    /// gimli's row evaluator: its storage allocated once, reused for every address.
    ctx: UnwindContext<usize>,
}

impl Slow {
    pub fn new() -> Slow {
        Slow {
            ctx: UnwindContext::new(),
        }
    }

    /// The rule at `addr` (a lookup address: a return address minus one, or the first
    /// frame's instruction pointer).
    pub fn rule_for(&mut self, addr: u64) -> Rule {
        let Some(obj) = Object::containing(addr) else {
            return Rule::Unsupported;
        };
        self.rule_in(&obj, addr).unwrap_or(Rule::Unsupported)
    }

    fn rule_in(&mut self, obj: &Object, addr: u64) -> Option<Rule> {
        let bases = BaseAddresses::default()
            .set_eh_frame_hdr(obj.hdr_addr)
            .set_eh_frame(obj.eh_frame_addr);
        let hdr = EhFrameHdr::new(obj.hdr, NativeEndian)
            .parse(&bases, 8)
            .ok()?;
        let eh_frame = EhFrame::new(obj.eh_frame, NativeEndian);
        let table = hdr.table()?;
        let fde = table
            .fde_for_address(&eh_frame, &bases, addr, EhFrame::cie_from_offset)
            .ok()?;
        if fde.is_signal_trampoline() {
            return None;
        }
        let row = fde
            .unwind_info_for_address(&eh_frame, &bases, &mut self.ctx, addr)
            .ok()?;
        let (base, cfa_off) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                let base = match *register {
                    X86_64::RSP => Base::Rsp,
                    X86_64::RBP => Base::Rbp,
                    _ => return None,
                };
                (base, i32::try_from(*offset).ok()?)
            }
            CfaRule::Expression(e) => {
                let expr = e.get(&eh_frame).ok()?;
                match rbp_expression(expr.0.slice())? {
                    (off, true) => (Base::DerefRbp, off),
                    (_, false) => return None,
                }
            }
        };
        match row.register(X86_64::RA) {
            RegisterRule::Undefined => return Some(Rule::End),
            RegisterRule::Offset(-8) => {}
            _ => return None,
        }
        // The caller's rsp is the CFA unless a rule says otherwise (none does in
        // compiler output; anything else is left to the slow unwinder).
        if !matches!(row.register(X86_64::RSP), RegisterRule::Undefined) {
            return None;
        }
        let (rbp, rbp_off) = match row.register(X86_64::RBP) {
            // No rule: the callee did not touch rbp (libgcc reads it the same way).
            RegisterRule::Undefined | RegisterRule::SameValue => (Saved::Same, 0),
            RegisterRule::Offset(n) => (Saved::AtCfa, i16::try_from(n).ok()?),
            RegisterRule::Expression(e) => {
                let expr = e.get(&eh_frame).ok()?;
                match rbp_expression(expr.0.slice())? {
                    (off, false) => (Saved::AtRbp, i16::try_from(off).ok()?),
                    (_, true) => return None,
                }
            }
            _ => return None,
        };
        Some(Rule::Step {
            base,
            cfa_off,
            rbp,
            rbp_off,
        })
    }
}

/// The two DWARF expressions compilers emit at call sites, both gcc's in a function
/// that realigns its stack through a saved pointer (DRAP): `DW_OP_breg6 off;
/// DW_OP_deref` for the CFA (CFA = *(rbp + off)) and `DW_OP_breg6 off` for where rbp is
/// saved. Returns (off, whether it dereferences); anything else is `None`.
fn rbp_expression(expr: &[u8]) -> Option<(i32, bool)> {
    const DW_OP_BREG6: u8 = 0x76;
    const DW_OP_DEREF: u8 = 0x06;
    let (&op, rest) = expr.split_first()?;
    if op != DW_OP_BREG6 {
        return None;
    }
    let (off, used) = sleb128(rest)?;
    let deref = match rest.get(used..)? {
        [] => false,
        [DW_OP_DEREF] => true,
        _ => return None,
    };
    Some((i32::try_from(off).ok()?, deref))
}

fn sleb128(b: &[u8]) -> Option<(i64, usize)> {
    let mut v: i64 = 0;
    let mut shift = 0;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= ((byte & 0x7f) as i64) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            if shift < 64 && byte & 0x40 != 0 {
                v |= -1i64 << shift;
            }
            return Some((v, i + 1));
        }
    }
    None
}

/// The unwind sections of one loaded object, as slices of its mapped memory.
struct Object {
    hdr_addr: u64,
    hdr: &'static [u8],
    eh_frame_addr: u64,
    eh_frame: &'static [u8],
}

const PT_LOAD: u32 = 1;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PT_PHDR: u32 = 6;
const PF_R: u32 = 4;
/// Program headers are read from the object's first page, always mapped (or, for a main
/// program whose mapping does not start with them, where the auxiliary vector says).
const FIRST_PAGE: u64 = 4096;

impl Object {
    /// The object containing `addr` now, with its `.eh_frame_hdr` and `.eh_frame`.
    fn containing(addr: u64) -> Option<Object> {
        let f = FIND_OBJECT.load(Ordering::Acquire);
        if f.is_null() {
            return None;
        }
        // SAFETY: `f` is glibc's `_dl_find_object`.
        let f: FindObjectFn = unsafe { std::mem::transmute(f) };
        // SAFETY: all-zero is a valid `DlFindObject` (integers and pointers).
        let mut dlfo: DlFindObject = unsafe { std::mem::zeroed() };
        // SAFETY: `f` only writes the struct; the address is any value.
        if unsafe { f(addr as *mut c_void, &mut dlfo) } != 0
            || dlfo.eh_frame.is_null()
            || dlfo.link_map.is_null()
        {
            return None;
        }
        // The bias is the link map's `l_addr` (its first field).
        // SAFETY: `_dl_find_object` returned a live link map.
        let bias = unsafe { *(dlfo.link_map as *const u64) };
        let (phdrs, end) = headers_at(dlfo.map_start as u64, dlfo.map_end as u64, bias)
            .or_else(|| main_headers(bias))?;
        let phnum = phdrs.len() / 56;
        let ph = |i: usize| {
            let p = &phdrs[i * 56..i * 56 + 56];
            // p_type, p_flags, p_offset, p_vaddr, p_memsz
            (
                u32_at(p, 0).unwrap_or(0),
                u32_at(p, 4).unwrap_or(0),
                u64_at(p, 8).unwrap_or(0),
                u64_at(p, 16).unwrap_or(0),
                u64_at(p, 40).unwrap_or(0),
            )
        };
        let (_, _, _, hdr_vaddr, hdr_size) =
            (0..phnum).map(ph).find(|&(t, ..)| t == PT_GNU_EH_FRAME)?;
        let hdr_addr = bias.wrapping_add(hdr_vaddr);
        if hdr_addr != dlfo.eh_frame as u64 {
            return None;
        }
        let within_load = |a: u64| {
            (0..phnum).map(ph).find_map(|(t, flags, _, vaddr, memsz)| {
                let lo = bias.wrapping_add(vaddr);
                (t == PT_LOAD && flags & PF_R != 0 && a >= lo && a < lo.wrapping_add(memsz))
                    .then(|| lo.wrapping_add(memsz))
            })
        };
        let hdr_end = within_load(hdr_addr)?;
        if hdr_addr.checked_add(hdr_size)? > hdr_end || hdr_end > end {
            return None;
        }
        // SAFETY: inside a readable PT_LOAD segment of a loaded object.
        let hdr = unsafe { std::slice::from_raw_parts(hdr_addr as *const u8, hdr_size as usize) };
        let eh_frame_addr = EhFrameHdr::new(hdr, NativeEndian)
            .parse(&BaseAddresses::default().set_eh_frame_hdr(hdr_addr), 8)
            .ok()?
            .eh_frame_ptr()
            .direct()
            .ok()?;
        let eh_end = within_load(eh_frame_addr)?;
        if eh_end > end {
            return None;
        }
        // SAFETY: from `.eh_frame` to the end of the readable segment that holds it.
        let eh_frame = unsafe {
            std::slice::from_raw_parts(
                eh_frame_addr as *const u8,
                (eh_end - eh_frame_addr) as usize,
            )
        };
        Some(Object {
            hdr_addr,
            hdr,
            eh_frame_addr,
            eh_frame,
        })
    }
}

/// The program headers of the object whose mapping starts at `start` (its ELF header, in
/// its first page), loaded at `bias`, and the end of its mapping, `end`; `None` if that page
/// is not its headers.
fn headers_at(start: u64, end: u64, bias: u64) -> Option<(&'static [u8], u64)> {
    // SAFETY: the object's first page is mapped and readable (it holds the ELF and
    // program headers of every object ld.so maps); every read is bounds-checked.
    let page = unsafe { std::slice::from_raw_parts(start as *const u8, FIRST_PAGE as usize) };
    if end < start + FIRST_PAGE || page.get(..4)? != b"\x7fELF" || page[4] != 2 {
        return None;
    }
    let phoff = u64_at(page, 32)? as usize;
    let phentsize = u16_at(page, 54)? as usize;
    let phnum = u16_at(page, 56)? as usize;
    if phentsize != 56 {
        return None;
    }
    let phdrs = page.get(phoff..phoff.checked_add(phnum * 56)?)?;
    // The segment holding file offset 0 (these headers) must start the mapping, or they
    // are not ours.
    let first = phdrs
        .chunks_exact(56)
        .find(|p| u32_at(p, 0) == Some(PT_LOAD) && u64_at(p, 8) == Some(0))?;
    if bias.wrapping_add(u64_at(first, 16)? & !(FIRST_PAGE - 1)) != start {
        return None;
    }
    Some((phdrs, end))
}

/// The main program's program headers, from the auxiliary vector, and the end of its last
/// segment, where its mapping as `_dl_find_object` reports it does not start with them: for
/// a main program whose segments leave a gap between them (linked for pages larger than
/// 4 KiB, or as the linker happened to lay them out), glibc reports its text segment alone,
/// whose first page is code, and every frame of the program went to the slow unwinder.
/// `None` unless the headers' own segment (`PT_PHDR`) puts them where they are at `bias`:
/// the object at `bias` is the main program (and its `.eh_frame_hdr` is then checked
/// against what `_dl_find_object` found, as any object's is).
fn main_headers(bias: u64) -> Option<(&'static [u8], u64)> {
    // SAFETY: reads the process's auxiliary vector.
    let (at, n, size) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR),
            libc::getauxval(libc::AT_PHNUM),
            libc::getauxval(libc::AT_PHENT),
        )
    };
    if at == 0 || n == 0 || n > 1024 || size != 56 {
        return None;
    }
    // SAFETY: the program headers the kernel mapped for the main program, which stay
    // mapped (they lie in its first segment).
    let phdrs = unsafe { std::slice::from_raw_parts(at as *const u8, n as usize * 56) };
    let phdr = phdrs
        .chunks_exact(56)
        .find(|p| u32_at(p, 0) == Some(PT_PHDR))?;
    if bias.wrapping_add(u64_at(phdr, 16)?) != at {
        return None;
    }
    let end = phdrs
        .chunks_exact(56)
        .filter(|p| u32_at(p, 0) == Some(PT_LOAD))
        .filter_map(|p| {
            Some(
                bias.wrapping_add(u64_at(p, 16)?)
                    .wrapping_add(u64_at(p, 40)?),
            )
        })
        .max()?;
    Some((phdrs, end))
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(i..i + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_realignment_expressions_are_recognised_and_nothing_else() {
        // DW_OP_breg6 -16; DW_OP_deref
        assert_eq!(rbp_expression(&[0x76, 0x70, 0x06]), Some((-16, true)));
        assert_eq!(rbp_expression(&[0x76, 0x10, 0x06]), Some((16, true)));
        assert_eq!(rbp_expression(&[0x76, 0x00]), Some((0, false)));
        assert_eq!(rbp_expression(&[0x77, 0x78, 0x06]), None);
        assert_eq!(rbp_expression(&[0x76, 0x78, 0x06, 0x06]), None);
        assert_eq!(rbp_expression(&[0x76]), None);
        assert_eq!(sleb128(&[0x80, 0x7f]), Some((-128, 2)));
    }

    #[test]
    fn a_function_of_this_binary_has_a_rule_and_null_has_none() {
        assert!(init());
        let mut slow = Slow::new();
        let here = a_function_of_this_binary_has_a_rule_and_null_has_none as *const () as u64;
        // Its first instruction: CFA = rsp + 8, return address at CFA - 8.
        assert_eq!(
            slow.rule_for(here),
            Rule::Step {
                base: Base::Rsp,
                cfa_off: 8,
                rbp: Saved::Same,
                rbp_off: 0
            }
        );
        assert_eq!(slow.rule_for(0), Rule::Unsupported);
        assert_eq!(slow.rule_for(16), Rule::Unsupported);
    }
}
