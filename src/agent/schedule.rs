//! The loop's schedule beyond the renewal grid: the core's own wake-up deadline, and
//! a non-leader's schedule while etcd does not answer (issue 13 item 4 follow-ups).
//!
//! Owns: when the wait ends besides the tick and `F - B` (the plan's `wake_at`), the
//! etcd time budget of a non-leader's observation (one `retry_timeout` in all, one
//! move to the next member), and a non-leader's next tick after an iteration that
//! ran past it.
//!
//! Must never: touch a leader's (or an adopting node's) schedule or its calls'
//! deadlines: those are the renewal grid and `F - B` (S1, S6 d). Nothing here
//! decides: the core plans `wake_at`; this module only carries it out.

use std::time::Duration;

use crate::clock;
use crate::core::time::Instant;

use super::Agent;

/// State of the schedule between iterations.
#[derive(Default)]
pub(super) struct Schedule {
    /// The last plan's `wake_at`: the wait ends then at the latest.
    plan_wake: Option<Instant>,
    /// While a non-leader observes: no etcd call of it runs past this instant.
    etcd_cap: Option<Instant>,
    /// A non-leader's observation already moved to the next etcd member.
    switched: bool,
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

    /// No leader lease to renew (neither leading nor adopting) and nothing to
    /// fence: nothing of this node's safety hangs on its tick.
    fn keeps_no_grid(&self) -> bool {
        self.core.lease_to_renew().is_none()
            && !self.core.pets_need_proof()
            && !self.core.fence_in_progress()
    }

    /// Start of an observation. A node with no lease to renew keeps no renewal
    /// grid: all of its etcd calls of this observation share one `retry_timeout`.
    /// When etcd does not answer, the first call waits it out and the rest are not
    /// sent, so the iteration stays within `R + P <= L_w` (S6 d) and the wait that
    /// follows serves the API. Before this, a member-lease grant and the cluster
    /// read each waited `R`: `2R = L_w` in the test bed, and the iterations ran
    /// back to back with the API never served.
    pub(super) fn etcd_budget_begin(&mut self, now: Instant) {
        self.schedule.switched = false;
        self.schedule.etcd_cap = if self.keeps_no_grid() {
            Some(now.add(self.core.timing().retry_timeout))
        } else {
            None
        };
    }

    /// End of an observation: the plan's actions (an acquire) get their own
    /// deadlines, as before.
    pub(super) fn etcd_budget_end(&mut self) {
        self.schedule.etcd_cap = None;
        self.schedule.switched = false;
    }

    /// A call's deadline `t` within the observation's etcd budget (non-leaders).
    pub(super) fn within_etcd_budget(&self, t: Instant) -> Instant {
        match self.schedule.etcd_cap {
            Some(cap) => t.min(cap),
            None => t,
        }
    }

    /// The observation's etcd budget is spent: send nothing more to etcd in it.
    pub(super) fn etcd_budget_spent(&self) -> bool {
        self.schedule
            .etcd_cap
            .is_some_and(|cap| clock::now() >= cap)
    }

    /// Whether to move to the next etcd member now: always, except a second time in
    /// one non-leader observation (one member's silence is evidence against that
    /// member only; the calls skipped after it are none against the next).
    pub(super) fn may_switch_endpoint(&mut self) -> bool {
        if self.schedule.etcd_cap.is_none() {
            return true;
        }
        !std::mem::replace(&mut self.schedule.switched, true)
    }

    /// After an iteration of a node with no lease to renew that ran past its tick
    /// (a slow PostgreSQL probe, etcd calls that waited): the next tick is the
    /// next one of the grid still ahead, so there is always a wait (and the API is
    /// served in it) rather than the next iteration at once. A leader's grid is not
    /// touched (S1, S6 d: its renewals keep their fixed rate; a late one shows as
    /// the schedule overrun the loop already reports).
    pub(super) fn keep_schedule(&mut self) {
        if !self.keeps_no_grid() {
            return;
        }
        let now = clock::now();
        if self.next_tick > now {
            return;
        }
        let lw = self.core.timing().loop_wait.max(Duration::from_millis(1));
        let behind = now.since(self.next_tick).as_nanos();
        let periods = u32::try_from(behind / lw.as_nanos() + 1).unwrap_or(u32::MAX);
        self.next_tick = self.next_tick.add(lw.saturating_mul(periods));
    }
}
