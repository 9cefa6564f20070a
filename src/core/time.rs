//! Time as the core sees it: instants on `CLOCK_BOOTTIME`, passed in by the shell.
//!
//! Owns: the `Instant` type and its arithmetic. Must never: read a clock. The shell
//! (`crate::clock`) is the only place that reads one.

use std::time::Duration;

/// An instant on `CLOCK_BOOTTIME`, in nanoseconds. `CLOCK_BOOTTIME` keeps counting
/// through suspend (DESIGN S5), which is why lease arithmetic uses it.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of time. (A method, not `ops::Add`: the
    /// saturation is the point, and it should read as a choice at every call.)
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, d: Duration) -> Instant {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ns))
    }

    /// `self - d`, saturating at zero.
    #[allow(clippy::should_implement_trait)]
    pub fn sub(self, d: Duration) -> Instant {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(ns))
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time from `self` until `later`; zero if `later` has passed.
    pub fn until(self, later: Instant) -> Duration {
        later.since(self)
    }

    pub fn secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl std::fmt::Debug for Instant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3}s", self.secs_f64())
    }
}

impl std::fmt::Display for Instant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3}s", self.secs_f64())
    }
}
