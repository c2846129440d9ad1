//! Per-thread blocks (a thread's first-state cache, its walks by their inputs) kept when
//! their thread exits, for threads to come: a program that starts a thread per batch
//! allocates each block once, not once per thread.
//!
//! Only ever `try_lock`ed: a thread never waits, and a fork child whose parent had another
//! thread holding the lock (now gone) just allocates.

use parking_lot::Mutex;
use std::marker::PhantomData;

/// Blocks kept at most; more are freed.
const KEPT: usize = 16;

/// Blocks of `T` given back, each from `calloc` (all-zero bytes a valid `T`).
pub struct Pool<T> {
    free: Mutex<([usize; KEPT], usize)>,
    of: PhantomData<fn() -> T>,
}

impl<T> Pool<T> {
    pub const fn new() -> Pool<T> {
        Pool {
            free: Mutex::new(([0; KEPT], 0)),
            of: PhantomData,
        }
    }

    /// A block for the calling thread: one given back, emptied by `clear`, else a new one
    /// of zero bytes (null if there is no memory for it).
    pub fn take(&self, clear: impl FnOnce(&mut T)) -> *mut T {
        let reused = self.free.try_lock().and_then(|mut free| {
            let (blocks, n) = &mut *free;
            *n = n.checked_sub(1)?;
            Some(blocks[*n])
        });
        if let Some(p) = reused {
            let block = p as *mut T;
            // SAFETY: a block given back by `give_back`, owned by nobody now.
            clear(unsafe { &mut *block });
            return block;
        }
        // SAFETY: calloc has no preconditions; the pool's blocks are types for which
        // all-zero bytes are a valid value (the caller's promise in `give_back`).
        unsafe { libc::calloc(1, std::mem::size_of::<T>()) as *mut T }
    }

    /// Gives an exiting thread's block back, or frees it when the pool is full, after
    /// `release` gave back what it holds of its own.
    ///
    /// # Safety
    /// `block` came from `take` of this pool and nobody uses it after this call.
    pub unsafe fn give_back(&self, block: *mut T, release: impl FnOnce(&mut T)) {
        if block.is_null() {
            return;
        }
        if let Some(mut free) = self.free.try_lock() {
            let (blocks, n) = &mut *free;
            if *n < KEPT {
                blocks[*n] = block as usize;
                *n += 1;
                return;
            }
        }
        // SAFETY: from calloc, used by nobody after this (the caller's promise).
        unsafe {
            release(&mut *block);
            libc::free(block as *mut libc::c_void);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_given_back_is_cleared_and_taken_again_and_only_once() {
        static POOL: Pool<[u64; 4]> = Pool::new();
        let a = POOL.take(|_| panic!("a new block is not cleared"));
        assert!(!a.is_null());
        // SAFETY: our own block, from calloc: zeroed.
        unsafe {
            assert_eq!(*a, [0; 4]);
            (*a)[2] = 7;
            POOL.give_back(a, |_| panic!("kept: not released"));
        }
        let mut cleared = 0;
        let b = POOL.take(|blk| {
            cleared += 1;
            assert_eq!(blk[2], 7);
            blk[2] = 0;
        });
        assert_eq!((b, cleared), (a, 1));
        let c = POOL.take(|_| panic!("the one block kept was taken already"));
        assert_ne!(c, b);
        // SAFETY: our own blocks, used by nobody after this.
        unsafe {
            POOL.give_back(b, |_| ());
            POOL.give_back(c, |_| ());
        }
    }

    #[test]
    fn a_block_given_back_to_a_full_pool_is_released_then_freed() {
        static POOL: Pool<u64> = Pool::new();
        let blocks: Vec<*mut u64> = (0..=KEPT).map(|_| POOL.take(|_| ())).collect();
        let mut released = Vec::new();
        for &b in &blocks {
            // SAFETY: our own blocks, used by nobody after this.
            unsafe { POOL.give_back(b, |_| released.push(b)) };
        }
        // The pool keeps 16; the 17th is released (its own memory given back) and freed.
        assert_eq!(released, [blocks[KEPT]]);
    }
}
