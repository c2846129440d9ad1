//! One recording per process. Two copies of the shim can be loaded at once (a pip
//! install's and a source build's, or the user's own `LD_PRELOAD` plus `gpumemprof run`'s):
//! each copy's hooks then call the other's as "the next definition", and both record, or,
//! with PyTorch's driver calls resolved through both, spin. So the copy loaded second
//! stands down: its hooks pass every call straight through, its `dlsym` and resolver hand
//! out what they were given, and the recording copy never takes another copy's exports for
//! the real functions (`dl::next_definition`). The recording copy says so once, when it
//! starts (the first GPU call); a standing-down copy reached all the same says so too.
//!
//! Which copy is first: each exports `gpumemprof_session_mark`; the global scope's
//! definition of that name belongs to the copy loaded first (`LD_PRELOAD` order). A copy
//! loaded with `RTLD_LOCAL` after a preloaded one finds the preloaded one's; a copy alone
//! finds its own (or none, loaded locally), and records.

use crate::sys::dl::{self, elf};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

/// This copy's mark, exported so other copies can find it (`dl::SHIM_MARK` names it).
#[no_mangle]
#[used]
pub static gpumemprof_session_mark: u8 = 0;

/// Another copy came first: this one passes everything through.
static STANDING_DOWN: AtomicBool = AtomicBool::new(false);

/// Decides, from the constructor, whether this copy stands down. The mark found is
/// compared by the object holding it: a reference to our own exported mark would itself go
/// through the global scope (and find the first copy's).
pub(super) fn decide() {
    let first = dl::lookup(libc::RTLD_DEFAULT, dl::SHIM_MARK);
    let another = match (elf::base_of(first), elf::base_of(decide as *mut c_void)) {
        (Some(theirs), Some(ours)) => theirs != ours,
        _ => false,
    };
    STANDING_DOWN.store(another, Ordering::Relaxed);
}

/// Whether another copy of the shim records this process (this one passes through).
#[inline]
pub fn standing_down() -> bool {
    STANDING_DOWN.load(Ordering::Relaxed)
}

/// The warning the standing-down copy gives once: which copy records, which stands down.
pub(super) fn warning() -> String {
    let first = dl::lookup(libc::RTLD_DEFAULT, dl::SHIM_MARK);
    let mine = warning as *mut c_void;
    format!(
        "{} already records this process: this copy of the shim ({}) stands down and passes \
         every call through",
        elf::path_of(first).unwrap_or_else(|| "another copy of the shim".into()),
        elf::path_of(mine).unwrap_or_else(|| "the second one".into())
    )
}

/// When other copies of the shim are loaded besides this recording one: the warning that
/// says they stand down.
pub(super) fn others_warning() -> Option<String> {
    let others = elf::paths_defining(dl::SHIM_MARK, others_warning as *const c_void);
    (!others.is_empty()).then(|| {
        format!(
            "another copy of the shim is loaded too ({}): it stands down; this one ({}) \
             records the process",
            others.join(", "),
            elf::path_of(others_warning as *mut c_void).unwrap_or_else(|| "the first".into())
        )
    })
}
