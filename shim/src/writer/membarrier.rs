//! `membarrier(2)`: the writer's side of the asymmetric barrier between a push and the
//! final drain.

/// The slow, always-available form (every CPU goes through a scheduler pass).
const CMD_GLOBAL: libc::c_long = 1;
const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Registers the process for expedited barriers; false where the kernel (or a
/// seccomp filter) refuses: pushes then pay a full fence each.
pub fn register() -> bool {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            CMD_REGISTER_PRIVATE_EXPEDITED,
            0 as libc::c_long,
        ) == 0
    }
}

/// A full memory barrier on every running thread of the process; false if it failed.
pub fn all_threads() -> bool {
    // SAFETY: as above.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            CMD_PRIVATE_EXPEDITED,
            0 as libc::c_long,
        ) == 0
            || libc::syscall(libc::SYS_membarrier, CMD_GLOBAL, 0 as libc::c_long) == 0
    }
}
