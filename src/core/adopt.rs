//! Seed 9982: an adoption (S4) must not resurrect a lease a replica may already
//! count as running out (DESIGN §1 step 4, S6(e)).
//!
//! A replica judges a DELETE of `leader` on time when it comes at or after its
//! `E_max` and its last poll is at most `L_w + R` old. That is safe while the holder
//! renews at its fixed rate (S6(e) puts its `F` first). A holder that stopped and
//! comes back on the same lease (an agent restarted after a host reset, adopting
//! its key) breaks it: a replica whose last poll saw the dying lease with TTL 0
//! has `E_max` = that poll, and an early revoke right after the adopting renewal
//! is judged on time while the adopter's `F` lies `W` later.
//!
//! So the adopter first polls the lease (`LeaseTimeToLive`, at `q`, TTL `t`:
//! at least `t` left, the expiry `X >= q + t`) and sends its confirming renewal at
//! `s` only if `t >= (s - q) + L_w + R + 1 s`. Then every poll a replica sent before
//! `s` (at `p < s`) had more than `X - s >= L_w + R + 1 s` left, so it saw a TTL
//! (truncated) above `L_w + R`: its `E_max > p + L_w + R`, and a DELETE before that
//! replica's next poll is either before `E_max` or after its poll went stale:
//! early either way (the promote delay covers the adopter). A poll sent at or
//! after `s` and served after the renewal sees the renewed lease, the normal case.
//! Otherwise the node does not adopt: it never renews, pets or promotes on that
//! lease; it fences a local primary first, revokes the lease (a DELETE that no
//! local primary can outlive) and competes afresh.

use std::time::Duration;

use super::model::*;
use super::time::Instant;
use super::{Core, Planner, State};

/// The poll an adoption waits for: its send instant and remaining TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AdoptPoll {
    pub sent_at: Instant,
    pub ttl: i64,
}

impl Core {
    /// The poll of `lease` in this observation, if it shows the lease alive.
    pub(super) fn adoption_poll(obs: &Observation, lease: LeaseId) -> Option<AdoptPoll> {
        let poll = obs.lease_poll.as_ref().filter(|p| p.lease == lease)?;
        Some(AdoptPoll {
            sent_at: poll.sent_at,
            ttl: poll.ttl.unwrap_or(-1),
        })
    }

    /// Why a confirming renewal sent at `s` after `poll` could resurrect a lease a
    /// replica may count as running out (module doc), or `None` if it cannot.
    pub(super) fn adoption_too_late(&self, poll: AdoptPoll, s: Instant) -> Option<String> {
        // Review L2: the widest `L_w + R` a replica may still judge with.
        let window = self.poll_window_widest();
        if s < poll.sent_at {
            return Some("the renewal was sent before the poll".into());
        }
        let gap = s.since(poll.sent_at);
        if gap > window {
            return Some(format!(
                "the lease poll is {:.3} s older than the renewal (more than L_w + R = {:.3} s)",
                gap.as_secs_f64(),
                window.as_secs_f64()
            ));
        }
        let need = gap + window + Duration::from_secs(1);
        let left = Duration::from_secs(poll.ttl.max(0).unsigned_abs());
        if poll.ttl < 0 || left < need {
            return Some(format!(
                "the lease had TTL {} s at the poll; adopting needs (s - q) + L_w + R + 1 s = \
                 {:.3} s so that no replica's E_max has run out",
                poll.ttl,
                need.as_secs_f64()
            ));
        }
        None
    }

    /// Give up the key instead of adopting it (seed 9982): fence a local primary
    /// first (its lease is revoked once the fence is complete), else revoke now.
    pub(super) fn refuse_adoption(
        &mut self,
        obs: &Observation,
        p: &mut Planner,
        lease: LeaseId,
        why: String,
    ) -> Reason {
        let why = format!("not adopting the leader key (seed 9982, DESIGN §1 step 4): {why}");
        self.state = State::Follower;
        let was_primary = obs.pg.may_accept_writes()
            || obs.pg.role == PgRole::Primary
            || matches!(
                obs.pg.data,
                DataDir::Present {
                    was_primary: true,
                    ..
                }
            );
        // A stopped PostgreSQL is fenced too (review of 88463a7, F4): a backend can
        // outlive its postmaster and still commit (DESIGN §3a), and the key must
        // not go before the fence found none; for a stopped one the fence is a
        // process scan. Only a standby that answers as one skips it.
        if was_primary || obs.pg.role == PgRole::Stopped {
            // Fencing, then revoking: the revoke comes after the fence is complete.
            self.enter_fencing(Some(lease), None, false, why.clone());
            if was_primary {
                self.needs_rewind = true;
            }
            p.push(Action::Fence);
            p.again = true;
            return Reason::Fencing(why);
        }
        p.push(Action::Revoke { lease });
        p.again = true;
        Reason::Waiting(why)
    }

    /// `Adopting` before its renewal: record the poll, or refuse if it already
    /// shows too little left (the renewal comes later still).
    pub(super) fn adopting_poll(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        lease: LeaseId,
        epoch: Epoch,
    ) -> Reason {
        let Some(poll) = Self::adoption_poll(obs, lease) else {
            if obs.pg.may_accept_writes() {
                // S4: a local primary is not left running unadopted while polls
                // fail (a failed adopting renewal fenced it too).
                let why = "the lease poll before adopting did not answer".to_string();
                return self.refuse_adoption(obs, p, lease, why);
            }
            p.again = true;
            return Reason::Waiting(
                "the leader key names me; polling its lease before adopting (S4)".into(),
            );
        };
        if let Some(why) = self.adoption_too_late(poll, now.max(poll.sent_at)) {
            return self.refuse_adoption(obs, p, lease, why);
        }
        self.state = State::Adopting {
            lease,
            epoch,
            poll: Some(poll),
        };
        p.again = true;
        Reason::Waiting(format!(
            "the leader key names me (epoch {epoch}), its lease has {} s left; confirming \
             before adopting (S4)",
            poll.ttl
        ))
    }
}
