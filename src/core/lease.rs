//! The leader's clocks: the leadership record, its horizon `H`, its fence deadline
//! `F`, and the fences behind it (watchdog devices, the guardian).
//!
//! Owns: [`Leadership`]; `H = s + ttl - M`, `F` (S1), the call cap `F - B`; when a
//! pet is allowed (S2: `now + 2W <= H`) and the arming of the watchdog for a
//! leadership just won or adopted (S3); taking the shell's reports of a counted
//! renewal, a pet and a wall-clock jump (S5) into `s` and `last_pet`.
//!
//! Must never: move `s` or `last_pet` on anything but a report of what the shell did
//! (DESIGN §5), move either later on a clock jump, or plan a pet that breaks S2.

use std::time::Duration;

use super::model::*;
use super::time::Instant;
use super::{Core, Planner, State};

/// Leadership held by this node.
#[derive(Clone, Debug, PartialEq)]
pub struct Leadership {
    pub lease: LeaseId,
    pub epoch: Epoch,
    /// TTL etcd granted for `lease` (never the configured number).
    pub ttl: u32,
    /// Send instant of the last counted renewal (or of the grant).
    pub renewed_at: Instant,
    /// Last pet of the watchdog in this leadership that the shell reported done
    /// (DESIGN §5: a fact, never a plan).
    pub last_pet: Option<Instant>,
    /// A `PetWatchdog` planned at this instant whose report has not come back yet.
    /// Until it does, `F` is measured from it when no pet was reported before: the
    /// real pet (if any) comes no earlier, so `F` is never later than the device's
    /// deadline.
    pub pet_pending: Option<Instant>,
    /// Earliest instant promotion may start (DESIGN §1 step 4).
    pub promote_after: Instant,
    /// Why promotion waits, for the log.
    pub delay_reason: Option<String>,
    /// `promote_after` is the conservative delay of an adoption that could not tell
    /// whether this leadership ever promoted (seed 253898): lifted once the local
    /// data shows the key's epoch (`Core::lift_adoption_delay`).
    pub adoption_delay: bool,
    /// An adoption with no primary running (review of seed 9982, DESIGN §1 step 4,
    /// S6(e)): promotion (or a primary's start) waits for a counted renewal sent at
    /// or after this instant, `L_w + R + M` after the adopting step. Every replica poll
    /// served before the adopting renewal has gone stale by then and every later
    /// one sees the renewed lease, so no replica can judge a DELETE on time while
    /// this node may write, whatever etcd reported to the adopter's own poll (an
    /// etcd leader change resets a lease's TTL; etcd #17642 reports a bogus one).
    /// `lift_adoption_delay` never lifts it.
    pub confirm_after: Option<Instant>,
    /// PostgreSQL runs as primary under this leadership.
    pub promoted: bool,
    /// When this node last found its PostgreSQL not running while leading.
    pub down_since: Option<Instant>,
    /// A planned switchover under way (`switchover`).
    pub handover: Option<super::switchover::Handover>,
    /// The vacancy this leadership was won in: the member whose key went vacant and
    /// the revision by which it was gone (its DELETE's, else the first read that
    /// showed it absent). A `failover` request naming that member written before it
    /// was served (or moot) and is deleted, not carried out (`switchover`). `None`
    /// for an adoption or a holder nobody knew.
    pub followed: Option<(String, i64)>,
}

impl Core {
    /// The guardian is this node's fence, with kill budget `B_g` (`None`: it is not,
    /// or it died in `automatic` mode). With it `F` is unchanged (S1, S6(c)): the
    /// guardian adds a deadline for a frozen agent, it changes none of the agent's.
    pub fn set_guardian(&mut self, kill_budget: Option<Duration>) {
        self.guardian = kill_budget;
    }

    pub fn guardian(&self) -> Option<Duration> {
        self.guardian
    }

    /// DESIGN §2: the deadline the guardian holds, `G = F - B_g` (DESIGN: `H - B_g`;
    /// `F` is earlier without a watchdog, `unwatched_deadline`), while this node
    /// leads with the guardian as its fence. It moves with every counted renewal (and
    /// back with a wall-clock jump, S5); the shell hands it over when it changed.
    pub fn guardian_deadline(&self) -> Option<Instant> {
        let bg = self.guardian?;
        // Its kill completes by `F`, as the agent's own fence does (with the guardian
        // there is no device: `F` is the unwatched deadline, at or before `H`).
        self.fence_deadline().map(|f| f.sub(bg))
    }

    /// A device (or systemd's watchdog) or the guardian stands behind leadership:
    /// `DisarmWatchdog` (the guardian's stand-down) is planned after a complete fence
    /// or a clean stop.
    pub(super) fn has_fence(&self) -> bool {
        self.cfg.watchdog.is_some() || self.guardian.is_some()
    }

    /// S3 with the guardian: PostgreSQL may accept writes under this leadership
    /// only once the guardian holds a deadline (the shell hands it one right after
    /// the step that made this node leader).
    pub(super) fn guardian_unarmed(&self, obs: &Observation) -> bool {
        self.guardian.is_some() && obs.guardian_holds.is_none()
    }

    /// The watchdog `W` leadership uses from now on (a read-back that differs from
    /// the request, or `None` when `automatic` mode found no usable device).
    pub fn set_watchdog(&mut self, w: Option<Duration>) {
        self.cfg.watchdog = w;
        self.watchdog_fence = None;
    }

    /// Two watchdogs with different timeouts (the device's read-back and systemd's
    /// `WATCHDOG_USEC`): pets are judged by the longest (S2 must hold for both), `F`
    /// by the shortest (the first to fire is the one the fence must beat, S1).
    pub fn set_watchdogs(&mut self, a: Option<Duration>, b: Option<Duration>) {
        let (longest, shortest) = match (a, b) {
            (Some(x), Some(y)) => (Some(x.max(y)), Some(x.min(y))),
            (x, y) => (x.or(y), x.or(y)),
        };
        self.cfg.watchdog = longest;
        self.watchdog_fence = shortest;
    }

    pub fn watchdog(&self) -> Option<Duration> {
        self.cfg.watchdog
    }

    /// The lease (and epoch) the shell must renew with a confirmed renewal at the next
    /// renewal tick; in `Adopting`, at once.
    pub fn lease_to_renew(&self) -> Option<(LeaseId, Epoch)> {
        match &self.state {
            State::Leader(l) => Some((l.lease, l.epoch)),
            // Seed 9982: only once the poll that allows it is in (`adopt.rs`).
            State::Adopting {
                lease,
                epoch,
                poll: Some(_),
            } => Some((*lease, *epoch)),
            _ => None,
        }
    }

    /// True while adopting: the renewal must not wait for the tick.
    pub fn renew_now(&self) -> bool {
        matches!(self.state, State::Adopting { poll: Some(_), .. })
    }

    /// Whether this node is bootstrapping the cluster (it holds the bootstrap lock).
    pub fn is_bootstrapping(&self) -> bool {
        matches!(self.state, State::Bootstrapping { .. })
    }

    /// A lease other than the leader lease that must be kept alive (the bootstrap lock).
    pub fn lease_to_keep_alive(&self) -> Option<LeaseId> {
        match &self.state {
            State::Bootstrapping { lease } => Some(*lease),
            _ => None,
        }
    }

    /// True while this node leads, is adopting, or is fencing: its PostgreSQL may
    /// accept writes, so no watchdog may be petted except right after a counted
    /// renewal (S2). Otherwise a pet only proves the loop is alive.
    pub fn pets_need_proof(&self) -> bool {
        matches!(
            self.state,
            State::Leader(_) | State::Adopting { .. } | State::Fencing { .. }
        )
    }

    /// The current leadership, if any.
    pub fn leadership(&self) -> Option<&Leadership> {
        match &self.state {
            State::Leader(l) => Some(l),
            _ => None,
        }
    }

    /// `H = s + ttl - M` for the leadership held.
    pub fn horizon(&self) -> Option<Instant> {
        self.leadership().map(|l| self.horizon_of(l))
    }

    pub(super) fn horizon_of(&self, l: &Leadership) -> Instant {
        l.renewed_at
            .add(Duration::from_secs(u64::from(l.ttl)))
            .sub(self.timing.safety_margin)
    }

    /// The fence deadline `F` (S1): `last_pet + W` with a watchdog; without one
    /// `min(H, s + ttl - (L_w + R + 1 s))` (below).
    pub fn fence_deadline(&self) -> Option<Instant> {
        self.leadership().map(|l| self.fence_deadline_of(l))
    }

    pub(super) fn fence_deadline_of(&self, l: &Leadership) -> Instant {
        let h = self.horizon_of(l);
        // A reported pet, else a planned one not reported yet (the real one is no
        // earlier): either way `F` is never later than the device's deadline.
        match (
            self.watchdog_fence.or(self.cfg.watchdog),
            l.last_pet.or(l.pet_pending),
        ) {
            // With our own window S2 and S6(e) keep `p + W` below the unwatched
            // deadline; a wider one published elsewhere (review of c776472, L4: a
            // narrowing not yet published, a value from before a restart) may not.
            (Some(w), Some(p)) => p.add(w).min(h).min(self.unwatched_deadline(l)),
            // No watchdog, or one configured but not armed (the open not planned,
            // skipped or failed: an adoption keeps a running primary meanwhile, S4;
            // review of the unwatched deadline, M1).
            _ => h.min(self.unwatched_deadline(l)),
        }
    }

    /// Without a watchdog (no device, or the guardian alone): `s + ttl - (L_w + R +
    /// 1 s)`, the analogue of S6(e). A replica judges a DELETE on time only at or
    /// after its `E_max`, with a poll at most `L_w + R` old, so on a lease that
    /// poll saw with at most `L_w + R` left (TTLs truncated to whole seconds, the
    /// answer up to `R` after the send). With `F` here the leader never leads on
    /// such a lease: its fence is complete, and no later renewal can count (a
    /// renewal must complete by `F - B`), before any replica could see it so. With
    /// `F = H` two reviews of this release found two primaries (docs/design.md
    /// "Take over": an early revoke in the lease's last second; one after a renewal
    /// that counted late, up to `ttl - M` of overlap). With a watchdog S2 and S6(e)
    /// give the same: `F <= H - W` and `W > L_w + R + 1 s - M`.
    pub(super) fn unwatched_deadline(&self, l: &Leadership) -> Instant {
        // INVARIANT: F <= s + ttl - (L_w + R + 1 s) without a watchdog; S6(c)
        // (config::validate_timing) keeps L_w + R + B below it.
        l.renewed_at
            .add(Duration::from_secs(u64::from(l.ttl)))
            .sub(self.poll_window_widest() + Duration::from_secs(1))
    }

    /// S1/S3: the fence the contract requires is in place: no watchdog is in use, or
    /// the shell reported a pet (the open is one) in this leadership.
    pub(super) fn fence_armed(&self, l: &Leadership) -> bool {
        self.cfg.watchdog.is_none() || l.last_pet.is_some()
    }

    /// S2, asked by the shell right after a renewal, before anything else in the
    /// iteration: may it pet now, and until which instant (`H' - 2W`, with `H'` the
    /// horizon this renewal gives)? `None`: no pet (no watchdog, not leading, the
    /// renewal did not count for our lease, or `now + 2W > H'`). Pure: the pet
    /// itself, and whether it happened, come back in `Observation::pet`.
    pub fn pet_on_renewal(&self, now: Instant, r: &Renewal) -> Option<Instant> {
        let (State::Leader(l), Some(w)) = (&self.state, self.cfg.watchdog) else {
            return None;
        };
        let RenewalOutcome::Counted { ttl } = r.outcome else {
            return None;
        };
        if r.lease != l.lease {
            return None;
        }
        let ttl = if ttl > 0 {
            u32::try_from(ttl).unwrap_or(u32::MAX)
        } else {
            l.ttl
        };
        let s = r.sent_at.max(l.renewed_at);
        let h = s
            .add(Duration::from_secs(u64::from(ttl)))
            .sub(self.timing.safety_margin);
        let not_after = h.sub(w).sub(w);
        (now <= not_after).then_some(not_after)
    }

    /// Latest instant a blocking call may run to before a fence would be late:
    /// `F - B` while leading (S1: every blocking call's deadline is capped here).
    pub fn call_cap(&self) -> Option<Instant> {
        self.fence_deadline()
            .map(|f| f.sub(self.timing.demote_budget))
    }

    /// Is this node the leader with a lease still valid at `now`?
    pub fn leads_at(&self, now: Instant) -> bool {
        match &self.state {
            State::Leader(l) => now < self.fence_deadline_of(l),
            _ => false,
        }
    }

    /// Plan the watchdog's arming (the open is a pet, S2) for a leadership just
    /// won or adopted, if `now + 2W <= H`; `F` counts from the planned instant until
    /// the shell's report comes back.
    pub(super) fn plan_arm(&self, now: Instant, l: &mut Leadership, p: &mut Planner) {
        if let Some(w) = self.cfg.watchdog {
            let not_after = self.horizon_of(l).sub(w).sub(w);
            if now <= not_after {
                p.push(Action::PetWatchdog { not_after });
                l.pet_pending = Some(now);
            }
        }
    }

    /// Step phase: the shell's reports into the leader's clocks.
    /// S5: time the wall clock saw pass but CLOCK_BOOTTIME did not (a paused VM) is
    /// lease time lost: move the last renewal and pet back by it, so `H` and `F`
    /// come earlier, never later.
    pub(super) fn take_lease_reports(&mut self, obs: &Observation) {
        if !obs.clock_jump.is_zero()
            && let State::Leader(l) = &mut self.state
        {
            l.renewed_at = l.renewed_at.sub(obs.clock_jump);
            l.last_pet = l.last_pet.map(|p| p.sub(obs.clock_jump));
        }
        if let State::Leader(l) = &mut self.state
            && let Some(r) = &obs.renewal
            && r.lease == l.lease
            && let RenewalOutcome::Counted { ttl } = r.outcome
        {
            if r.sent_at > l.renewed_at {
                l.renewed_at = r.sent_at;
            }
            if ttl > 0 {
                l.ttl = u32::try_from(ttl).unwrap_or(u32::MAX);
            }
        }
        // DESIGN §5: `last_pet` moves only on a pet the shell reports done.
        if let State::Leader(l) = &mut self.state
            && let Some(pet) = &obs.pet
        {
            l.pet_pending = None;
            if pet.outcome == PetOutcome::Done {
                l.last_pet = Some(l.last_pet.map_or(pet.at, |p| p.max(pet.at)));
            }
        }
    }
}
