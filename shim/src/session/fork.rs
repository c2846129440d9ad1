//! `fork`: the writer's, the stack table's and the NVTX names' locks are held across it
//! (in the order the writer takes them), so the child never inherits one mid-change; the
//! child then starts its own trace on its first event (`GPUMEMPROF_FORK=trace`) or
//! passes everything through (`off`).

use super::{current, ACTIVE, DISABLED, FORK_OFF, PIPELINE, STATE, STOPPED, UNINIT};
use crate::capture::{intern, nvtx_names, thread};
use std::sync::atomic::Ordering;

/// Before fork: hold the writer's and the stack table's locks (in the order the writer
/// takes them), so the child never inherits one mid-change.
pub(super) extern "C" fn prepare() {
    if matches!(STATE.load(Ordering::Acquire), ACTIVE | STOPPED) {
        if let Some(p) = current() {
            p.lock_for_fork();
        }
    }
    intern::lock_for_fork();
    // After the writer's lock, as the writer takes them (it defines NVTX names under it).
    nvtx_names::lock_for_fork();
}

pub(super) extern "C" fn parent() {
    // SAFETY: both locks were taken by `prepare` on this thread.
    unsafe {
        nvtx_names::unlock_after_fork();
        intern::unlock_after_fork();
        if matches!(STATE.load(Ordering::Acquire), ACTIVE | STOPPED) {
            if let Some(p) = current() {
                p.unlock_after_fork();
            }
        }
    }
}

/// In the child of fork(): there is no writer thread, and the parent's pipeline must
/// not be touched. The child either starts its own trace on its first event (a new
/// pipeline, every known stack defined again) or passes everything through.
pub(super) extern "C" fn child() {
    // SAFETY: the table's lock was taken by `prepare` on this thread.
    unsafe { intern::child_after_fork() };
    // SAFETY: the NVTX names' lock was taken by `prepare` on this thread too.
    unsafe { nvtx_names::child_after_fork() };
    thread::reset_after_fork();
    match STATE.load(Ordering::Acquire) {
        UNINIT => {}
        ACTIVE if !FORK_OFF.load(Ordering::Relaxed) => {
            PIPELINE.store(std::ptr::null_mut(), Ordering::Release);
            STATE.store(UNINIT, Ordering::Release);
        }
        _ => STATE.store(DISABLED, Ordering::Release),
    }
}
