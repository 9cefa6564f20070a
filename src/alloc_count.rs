//! A counting allocator for benchmarks (issue 13 item 2), behind the bench-only
//! cargo feature `count-allocs` (off by default: the binary users build and the
//! packages ship never has it).
//!
//! Owns: the process-wide allocation counters ([`snapshot`]) and, in builds with the
//! feature, the allocator type the `tenure` binary installs as its
//! `#[global_allocator]` (in `main.rs`, not here: a test binary with its own
//! counting allocator, such as `tests/metrics_alloc.rs`, links this library too, and
//! a library that installed one would clash with it).
//! Must never: change what an allocation returns, or be in a shipped build. Without
//! the feature every function here is a no-op that reports zeros.
//!
//! `TENURE_TRACE_ALLOCS=N` (with the feature): every `N`th allocation, once the loop
//! has run `TENURE_TRACE_ALLOCS_AFTER` iterations (default 20, so start-up is left
//! out), writes a backtrace to stderr (the agent's log), framed by `alloc-trace
//! begin`/`end` lines. Slow; for finding where the steady state allocates.

/// Allocation counters since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocCounts {
    /// `alloc` and `alloc_zeroed` calls.
    pub allocs: u64,
    /// `realloc` calls.
    pub reallocs: u64,
    /// Bytes asked for by `alloc`, `alloc_zeroed` and the growth of `realloc`.
    pub bytes: u64,
}

impl AllocCounts {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &AllocCounts) -> AllocCounts {
        AllocCounts {
            allocs: self.allocs.saturating_sub(earlier.allocs),
            reallocs: self.reallocs.saturating_sub(earlier.reallocs),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// Whether this build counts (the `count-allocs` feature).
pub const ENABLED: bool = cfg!(feature = "count-allocs");

/// The counters now (all zero without the feature).
pub fn snapshot() -> AllocCounts {
    #[cfg(feature = "count-allocs")]
    {
        counting::snapshot()
    }
    #[cfg(not(feature = "count-allocs"))]
    {
        AllocCounts::default()
    }
}

/// Called once per loop iteration: arms `TENURE_TRACE_ALLOCS` after its warm-up.
pub fn iteration() {
    #[cfg(feature = "count-allocs")]
    counting::iteration();
}

#[cfg(feature = "count-allocs")]
pub use counting::Counting;

#[cfg(feature = "count-allocs")]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::AllocCounts;

    static ALLOCS: AtomicU64 = AtomicU64::new(0);
    static REALLOCS: AtomicU64 = AtomicU64::new(0);
    static BYTES: AtomicU64 = AtomicU64::new(0);
    /// 0: no trace; else a backtrace every `TRACE_EVERY`th allocation once armed.
    static TRACE_EVERY: AtomicU64 = AtomicU64::new(0);
    /// Iterations left before the trace is armed (`u64::MAX`: not configured yet).
    static TRACE_WAIT: AtomicU64 = AtomicU64::new(u64::MAX);
    static TRACE_ARMED: AtomicU64 = AtomicU64::new(0);

    thread_local! {
        /// Set while a backtrace is taken: the backtrace allocates itself.
        static IN_TRACE: Cell<bool> = const { Cell::new(false) };
    }

    pub fn snapshot() -> AllocCounts {
        AllocCounts {
            allocs: ALLOCS.load(Ordering::Relaxed),
            reallocs: REALLOCS.load(Ordering::Relaxed),
            bytes: BYTES.load(Ordering::Relaxed),
        }
    }

    pub fn iteration() {
        let wait = TRACE_WAIT.load(Ordering::Relaxed);
        if wait == u64::MAX {
            // First iteration: read the environment once.
            let every = std::env::var("TENURE_TRACE_ALLOCS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            let after = std::env::var("TENURE_TRACE_ALLOCS_AFTER")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(20);
            TRACE_EVERY.store(every, Ordering::Relaxed);
            TRACE_WAIT.store(after, Ordering::Relaxed);
        } else if wait > 0 {
            TRACE_WAIT.store(wait - 1, Ordering::Relaxed);
        } else if TRACE_EVERY.load(Ordering::Relaxed) > 0 {
            TRACE_ARMED.store(1, Ordering::Relaxed);
        }
    }

    fn maybe_trace(n: u64, size: usize) {
        if TRACE_ARMED.load(Ordering::Relaxed) == 0 {
            return;
        }
        let every = TRACE_EVERY.load(Ordering::Relaxed);
        if every == 0 || !n.is_multiple_of(every) {
            return;
        }
        // `try_with`: no trace while the thread-local is being torn down.
        if IN_TRACE.try_with(|c| c.replace(true)).unwrap_or(true) {
            return;
        }
        let bt = std::backtrace::Backtrace::force_capture();
        // Not `eprintln!`: it panics when the write fails (a full non-blocking pipe).
        let _ = writeln!(
            std::io::stderr(),
            "alloc-trace begin: allocation {n}, {size} bytes\n{bt}\nalloc-trace end"
        );
        let _ = IN_TRACE.try_with(|c| c.set(false));
    }

    /// Counts and passes every call on to the system allocator.
    pub struct Counting;

    // SAFETY: every call is passed on unchanged to the system allocator, which
    // upholds the GlobalAlloc contract; the counters and the trace only observe
    // (the trace's own allocations re-enter with IN_TRACE set and are not traced).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let n = ALLOCS.fetch_add(1, Ordering::Relaxed) + 1;
            BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
            maybe_trace(n, layout.size());
            // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let n = ALLOCS.fetch_add(1, Ordering::Relaxed) + 1;
            BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
            maybe_trace(n, layout.size());
            // SAFETY: as for `alloc`.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` was allocated by `System` (through us) with `layout`.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            REALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(
                new_size.saturating_sub(layout.size()) as u64,
                Ordering::Relaxed,
            );
            // SAFETY: `ptr` came from `System` (through us) with `layout`; the caller
            // upholds `realloc`'s contract for `new_size`.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}
