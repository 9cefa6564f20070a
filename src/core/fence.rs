//! Losing or giving up leadership: the checks that override everything else in a
//! step, the fence driven to completion, and the clean stop.
//!
//! Owns: the leader-side checks run before any state's own step (a lost key, a
//! refused guard, a required watchdog gone, `F - B` reached: S1, S5), the only way
//! into `Fencing`, the revoke or release after a complete fence, and `Stopping`.
//!
//! Must never: revoke, release or disarm before the shell reported a complete fence
//! (no process of the local PostgreSQL left, DESIGN §3a), or leave `Fencing` for
//! the same lease or epoch.

use super::model::*;
use super::time::Instant;
use super::{Core, Planner, State};

/// A clean stop is over: the last fence, planned after the stop job ended (no job
/// has run since: `Idle`), reported that no process of the PostgreSQL remains.
pub(super) fn stop_checked(obs: &Observation) -> bool {
    obs.fence == Some(FenceOutcome::Complete) && matches!(obs.job, Job::Idle)
}

impl Core {
    /// True while a fence is under way: the shell makes no call before the fence
    /// (each would only delay it, issue 8 finding 6).
    pub fn fence_in_progress(&self) -> bool {
        matches!(self.state, State::Fencing { .. })
    }

    /// Leader-side checks that override everything: lost key, stale renewal, deadline.
    pub(super) fn check_leadership(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
    ) -> Option<Reason> {
        let State::Leader(l) = &self.state else {
            return None;
        };
        if matches!(obs.handed_over, Some(HandOverOutcome::Released(_))) {
            // The switchover released the key and revoked the lease on purpose, after
            // a complete fence check: nothing is lost, `hand_over` takes it from here.
            return None;
        }
        let me = &self.cfg.name;
        let mut lost: Option<String> = None;
        if let Some(r) = &obs.renewal {
            match &r.outcome {
                RenewalOutcome::LeaseGone => {
                    lost = Some("the lease is gone (keepalive TTL <= 0)".into())
                }
                RenewalOutcome::KeyLost { found } => {
                    lost = Some(match found {
                        None => "the leader key vanished while the lease lived".into(),
                        Some(k) => format!(
                            "the leader key now names {} (epoch {}, lease {:x})",
                            k.name, k.epoch, k.lease
                        ),
                    })
                }
                _ => {}
            }
        }
        if lost.is_none()
            && let Ok(view) = &obs.cluster
        {
            match &view.leader {
                None if obs.released.is_none() => {
                    lost = Some("a linearizable read shows no leader key".into())
                }
                Some(k) if k.name != *me || k.epoch != l.epoch => {
                    lost = Some(format!(
                        "the leader key names {} at epoch {}",
                        k.name, k.epoch
                    ))
                }
                _ => {}
            }
        }
        if lost.is_none()
            && let Some(why) = &obs.watchdog_failed
        {
            // S3: a required watchdog could not be armed: give the key back.
            self.lead_refusal = Some(format!("required watchdog unusable: {why}"));
            let why = format!("required watchdog unusable ({why}); releasing the key");
            let (lease, epoch) = (l.lease, l.epoch);
            self.needs_rewind = self.needs_rewind || l.promoted;
            self.enter_fencing(Some(lease), Some(epoch), true, why.clone());
            return Some(self.fencing(obs, p, Some(lease), Some(epoch), true, why));
        }
        if lost.is_none()
            && let Some(what) = &obs.guard_refused
        {
            // DESIGN §1 step 5: the guard compares the key's create revision and value
            // with ours; a refusal is proof the key is no longer this leadership's.
            lost = Some(format!(
                "the epoch guard refused {what}: leadership is lost"
            ));
        }
        if lost.is_none() && obs.leader_deleted_at.is_some() && obs.released.is_none() {
            lost = Some("the watch saw the leader key deleted or overwritten".into());
        }
        let f = self.fence_deadline_of(l);
        if lost.is_none() && now >= f.sub(self.timing.demote_budget) {
            lost = Some(format!(
                "no renewal counted since {}; fence deadline F = {} is within the demote budget",
                l.renewed_at, f
            ));
        }
        let why = lost?;
        let (lease, epoch, promoted) = (l.lease, l.epoch, l.promoted);
        let must_fence = promoted || obs.pg.role != PgRole::Replica;
        if must_fence {
            self.needs_rewind = true;
        }
        self.enter_fencing(Some(lease), Some(epoch), false, why.clone());
        Some(self.fencing(obs, p, Some(lease), Some(epoch), false, why))
    }

    /// Drive a fence to completion, then revoke or release and become a follower.
    pub(super) fn fencing(
        &mut self,
        obs: &Observation,
        p: &mut Planner,
        lease: Option<LeaseId>,
        epoch: Option<Epoch>,
        release: bool,
        why: String,
    ) -> Reason {
        match obs.fence {
            Some(FenceOutcome::Complete) => {}
            Some(FenceOutcome::Incomplete) => {
                // S1: stay armed; try again at once. The host resets at F if it never
                // completes.
                p.push(Action::Fence);
                p.again = true;
                return Reason::Fencing(format!("{why}; the fence is not complete yet, retrying"));
            }
            None => {
                // Even a "stopped" PostgreSQL is fenced: a backend can outlive its
                // postmaster and still commit (DESIGN §3a); the fence finds it.
                p.push(Action::Fence);
                p.again = true;
                return Reason::Fencing(why);
            }
        }
        // INVARIANT: no process of the local PostgreSQL remains from here on.
        if self.has_fence() {
            p.push(Action::DisarmWatchdog);
        }
        match (lease, epoch, release) {
            (Some(lease), Some(epoch), true) => p.push(Action::Release { lease, epoch }),
            (Some(lease), _, _) => p.push(Action::Revoke { lease }),
            _ => {}
        }
        self.state = State::Follower;
        p.again = true;
        Reason::Fencing(format!("{why}; fence complete, leadership dropped"))
    }

    /// INVARIANT: the only way into `Fencing`: the lease (if any) is never renewed
    /// again, and the next steps drive the fence to completion before revoking it.
    pub(super) fn enter_fencing(
        &mut self,
        lease: Option<LeaseId>,
        epoch: Option<Epoch>,
        release: bool,
        why: String,
    ) {
        self.state = State::Fencing {
            lease,
            epoch,
            release,
            why,
        };
    }

    pub(super) fn start_fence(&mut self, p: &mut Planner, why: String) -> Reason {
        self.needs_rewind = true;
        self.enter_fencing(None, None, false, why.clone());
        p.push(Action::Fence);
        p.again = true;
        Reason::Fencing(why)
    }

    pub(super) fn stopping(&mut self, obs: &Observation, p: &mut Planner) -> Reason {
        // An unanswered acquire decided lost, or not decided yet (a stopping node
        // never takes it: second review, L3): its lease goes too
        // (`Core::acquire_answered_by_read`).
        let pending = self.unanswered.take().map(|(lease, ..)| lease);
        if let Some(lease) = self.unanswered_revoke.take().or(pending) {
            p.push(Action::Revoke { lease });
        }
        match (&obs.job, obs.pg.role) {
            (Job::Running { .. }, _) => {
                Reason::ShuttingDown("waiting for PostgreSQL to stop".into())
            }
            // DESIGN §5: the stop is done only when a fail-closed fence check found no
            // process left (orphan backends of a dead postmaster included, §3a).
            (_, PgRole::Stopped) if stop_checked(obs) => {
                p.push(Action::Exit);
                Reason::ShuttingDown(
                    "PostgreSQL stopped and no process of it remains; exiting".into(),
                )
            }
            (_, PgRole::Stopped) => {
                p.push(Action::Fence);
                p.again = true;
                Reason::ShuttingDown(
                    "PostgreSQL stopped; checking that no process of it remains (fence)".into(),
                )
            }
            (
                Job::Finished {
                    ok: false, detail, ..
                },
                _,
            ) => {
                // A clean stop failed: fall back to the fence so we never exit with a
                // primary running and no agent.
                p.push(Action::Fence);
                Reason::ShuttingDown(format!("clean stop failed ({detail}); fencing"))
            }
            _ => {
                p.push(Action::StartJob(JobKind::Stop));
                Reason::ShuttingDown("stopping PostgreSQL cleanly".into())
            }
        }
    }
}
