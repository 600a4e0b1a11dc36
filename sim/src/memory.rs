//! The simulation's heap, counted: a global allocator (declared by the
//! `floe-sim` binary and the Kafka stage's tests) that keeps the largest
//! single allocation since the last [`reset`]. In one deterministic
//! process, every agent's memory is this process's: an allocation sized
//! from what a client claims instead of what it sent (a compression bomb,
//! a record count that lies) shows here as one huge block, whatever the
//! agent's budgets say.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The system allocator, counting.
pub struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

fn note(size: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    LARGEST.fetch_max(size, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Forgets the largest allocation so far.
pub fn reset() {
    LARGEST.store(0, Ordering::Relaxed);
}

/// The largest single allocation since [`reset`], if this process counts
/// (`None`: [`Counting`] is not its allocator).
pub fn largest() -> Option<usize> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| LARGEST.load(Ordering::Relaxed))
}
