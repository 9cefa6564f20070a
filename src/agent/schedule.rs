//! The loop's schedule beyond the renewal grid: the core's own wake-up deadline
//! (issue 13 item 4 follow-ups).
//!
//! Owns: when the wait ends besides the tick and `F - B` (the plan's `wake_at`).
//!
//! Must never: touch a leader's (or an adopting node's) schedule or its calls'
//! deadlines: those are the renewal grid and `F - B` (S1, S6 d). Nothing here
//! decides: the core plans `wake_at`; this module only carries it out.

use crate::core::time::Instant;

use super::Agent;

/// State of the schedule between iterations.
#[derive(Default)]
pub(super) struct Schedule {
    /// The last plan's `wake_at`: the wait ends then at the latest.
    plan_wake: Option<Instant>,
}

impl Agent {
    /// The wait's end: `until` (the tick or `F - B`), or the core's `wake_at` if
    /// that comes first. A plan's wake-up never delays the tick or `F - B`.
    pub(super) fn wait_end(&self, until: Instant) -> Instant {
        match self.schedule.plan_wake {
            Some(w) => until.min(w),
            None => until,
        }
    }

    /// Remember the plan's `wake_at` for the next wait.
    pub(super) fn plan_wake(&mut self, wake_at: Option<Instant>) {
        self.schedule.plan_wake = wake_at;
    }
}
