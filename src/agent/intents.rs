//! The loop's side of the API's write endpoints: it carries out the intents the
//! handlers hand over (`api::mgmt::Intent`) and answers each parked connection.
//!
//! Owns: when an intent runs (between iterations, only when the time left before
//! the loop's next deadline holds a whole etcd call; otherwise right after the next
//! iteration), and the dispatch from an intent to the code that carries it out.
//! Must never: delay a renewal or the fence (DESIGN §5 "Order of service", S1, S6
//! d): every call is capped by `Agent::deadline` (`F - B` and the next tick while
//! leading), and nothing runs while a fence is in progress.
//!
//! Adding an intent: a variant in `api::mgmt::Intent` and an arm in
//! [`Agent::carry_out`] returning the [`Response`].

use crate::api::mgmt::{Intent, Response};
use crate::clock;

use super::Agent;

impl Agent {
    /// Carry out the API's pending intents if the time before the loop's next
    /// deadline holds an etcd call of `retry_timeout`; otherwise leave them for the
    /// end of the next iteration (the agent calls this there too).
    pub(super) fn carry_out_intents(&mut self) {
        // Immediate switchovers parked until their outcome shows (agent/switchover.rs).
        self.answer_awaiting();
        while self.api.has_intents() {
            let r = self.core.timing().retry_timeout;
            let now = clock::now();
            let fencing =
                self.core.fence_in_progress() || self.core.call_cap().is_some_and(|cap| now >= cap);
            if !fencing && self.deadline(r) < now.add(r) {
                // The next tick or `F - B` is nearer than one call: it comes first.
                return;
            }
            let Some((ticket, intent)) = self.api.take_intent() else {
                return;
            };
            let resp = if fencing {
                Response::text(
                    503,
                    "this node is fencing its PostgreSQL (its lease could not be renewed): \
                     retry on another member",
                )
            } else if let Intent::Failover(f) = intent {
                // Answered after its outcome: parked until then (agent/switchover.rs).
                match self.request_failover(Some(ticket), f) {
                    Some(r) => r,
                    None => continue,
                }
            } else {
                match self.carry_out_operator(ticket, intent) {
                    super::manage::Handled::Now(r) => r,
                    // Answered when the job it started ends.
                    super::manage::Handled::Later => continue,
                    super::manage::Handled::NotMine(intent) => self.carry_out(intent),
                }
            };
            if !self.api.complete(ticket, &resp) {
                log::debug!("api: the client left before its answer ({})", resp.code);
            }
        }
    }

    /// One intent, answered.
    fn carry_out(&mut self, intent: Intent) -> Response {
        match intent {
            Intent::PatchConfig(patch) => self.write_config(Some(patch), None),
            Intent::PutConfig(value) => self.write_config(None, Some(value)),
            Intent::Failover(f) => self
                .request_failover(None, f)
                .unwrap_or_else(|| Response::text(202, "queued")),
            Intent::CancelSwitchover => self.cancel_switchover(),
            // `manage` takes these before this match (`carry_out_operator`).
            Intent::Restart(_)
            | Intent::CancelRestart
            | Intent::Reload
            | Intent::Reinitialize { .. } => {
                Response::text(500, "not carried out: no handler in the loop")
            }
        }
    }
}
