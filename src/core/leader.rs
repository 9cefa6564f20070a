//! Holding leadership: winning the key, adopting it at start-up, running as the
//! leader, and the leader's clean shutdown.
//!
//! Owns: the promote delay after an early expiry (DESIGN §1 step 4), S6(b) for the
//! granted TTL, adoption through a confirmed renewal (S4), and the order in which a
//! leader promotes or starts PostgreSQL as primary (fence armed, guardian holding,
//! epoch and rollback checks, synchronous mode first: S3).
//!
//! Must never: promote or start a primary before the promote delay passed and the
//! fence is armed, adopt without a confirmed renewal, or release the key before a
//! clean stop was checked by a fence.

use std::time::Duration;

use super::fence::stop_checked;
use super::model::*;
use super::switchover::Request;
use super::time::Instant;
use super::{Core, Leadership, Planner, State};

/// Why an adopter with no primary running waits after its delay (review of seed
/// 9982): a counted renewal sent `L_w + R + M` after the adoption comes first.
const ADOPTION_UNCONFIRMED: &str = "leader with the lock; waiting for a renewal sent L_w + R + M \
     after the adoption to count before writing (no replica may still count the lease as \
     running out)";

impl Core {
    pub(super) fn lead(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        mut l: Leadership,
    ) -> Reason {
        // S2: the pet that follows a counted renewal is no longer planned here: the
        // shell asks `pet_on_renewal` right after the renewal (nothing in between) and
        // reports it; `decide` took that report into `last_pet` already.
        if obs.shutdown {
            return self.lead_shutdown(obs, p, l);
        }
        if let Some(h) = l.handover.clone() {
            return self.hand_over(obs, p, l, h);
        }

        let me = self.cfg.name.clone();
        let valid_for = now.until(self.fence_deadline_of(&l));

        if obs.promoted == Some(true) {
            l.promoted = true;
        }
        self.lift_adoption_delay(now, &mut l);
        self.extend_adoption_delay(now, obs, &mut l);
        // Issue 13 item 4: the promotion (or the primary's start) the promote delay
        // holds back comes when the delay ends, not at the first tick after it (up
        // to `loop_wait` later). The delay itself is unchanged: S3, nobody writes
        // before the old holder's lease can have expired (DESIGN §1 step 4).
        if !l.promoted && now < l.promote_after {
            p.wake_by(l.promote_after);
        }
        let reason = match (obs.pg.role, &obs.job) {
            (_, Job::Running { kind, .. }) => {
                Reason::Waiting(format!("leader with the lock; {kind:?} running"))
            }
            (PgRole::Primary, _) if self.epoch_regression(l.epoch).is_some() => {
                // A primary (adopted, or started before its row could be read) whose
                // data is ahead of the key's epoch: stop it, keep the key (DESIGN §3).
                let why = self.epoch_regression(l.epoch).unwrap_or_default();
                l.promoted = false;
                p.push(Action::Fence);
                p.again = true;
                Reason::Refusing(format!("{why}; fencing the local primary"))
            }
            (PgRole::Primary, _) => {
                l.promoted = true;
                l.down_since = None;
                let mut sync_note = None;
                let mut request_note = None;
                if let Ok(view) = &obs.cluster {
                    match self.failover_request(now, obs, view, &mut l, p) {
                        Request::HandOver(reason) => {
                            self.state = State::Leader(l);
                            return reason;
                        }
                        Request::Lead(note) => request_note = note,
                    }
                    let others: Vec<String> = view
                        .members
                        .iter()
                        .filter(|m| m.name != me)
                        .map(|m| m.name.clone())
                        .collect();
                    p.push(Action::SyncSlots { members: others });
                    // Review F2: `history` records every fork this leadership made;
                    // an append lost with its answer (or refused by a timeout) is
                    // planned again until a read shows it. Replicas compare their
                    // timeline with it before they may take the key (candidacy).
                    if view.newest_timeline() < obs.pg.timeline {
                        p.push(Action::AppendHistory {
                            epoch: l.epoch,
                            timeline: obs.pg.timeline,
                        });
                    }
                    sync_note = self.manage_sync(now, view, &obs.pg, l.epoch, p);
                }
                let sync_note = match (sync_note, request_note) {
                    (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                    (a, b) => a.or(b),
                };
                match sync_note {
                    Some(note) => Reason::Other(format!(
                        "I am {me}, leader with the lock, lease valid {:.1} s; {note}",
                        valid_for.as_secs_f64()
                    )),
                    None => Reason::Leading { me, valid_for },
                }
            }
            (PgRole::Replica, _) => {
                let refusal = self.epoch_regression(l.epoch);
                if let Some(why) = refusal.or_else(|| self.rollback_refusal()) {
                    // Keep the key, so nobody else promotes either, and wait for the
                    // operator (DESIGN §3).
                    l.down_since = None;
                    self.state = State::Leader(l);
                    return Reason::Refusing(why);
                }
                if now < l.promote_after {
                    // Synchronous mode's names are set while the delay runs, so
                    // they have held for a loop when it ends: after it they cost
                    // up to two loops past the printed worst case (simulation seed
                    // 920018050). Not the `sync` key (see `sync_names_ahead`).
                    self.sync_names_ahead(obs, p);
                    Reason::PromoteDelayed {
                        remaining: now.until(l.promote_after),
                        why: l.delay_reason.clone().unwrap_or_default(),
                    }
                } else if !Self::adoption_confirmed(&l) {
                    Reason::Waiting(ADOPTION_UNCONFIRMED.into())
                } else if !self.local_epoch_known && !self.led_from_bootstrap {
                    // DESIGN §3: the row's read failed and none succeeded in this run
                    // (`note_epochs`): an unknown epoch must not pass the regression
                    // check. Retried every iteration, for `primary_start_timeout`.
                    if let Some(r) = self.epoch_unread_too_long(now, &l, p) {
                        return r;
                    }
                    Reason::Waiting(
                        "leader with the lock, not promoting yet: the tenure.epoch row could \
                         not be read"
                            .into(),
                    )
                } else if !self.fence_armed(&l) {
                    // S3: the watchdog is armed (a pet reported done) before promotion.
                    Reason::Waiting("leader with the lock; waiting to arm the watchdog".into())
                } else if self.guardian_unarmed(obs) {
                    p.again = true;
                    Reason::Waiting(
                        "leader with the lock; waiting for the guardian to hold its deadline G"
                            .into(),
                    )
                } else if let Err(why) = self.sync_before_writes(now, obs, l.epoch, p, true) {
                    Reason::Waiting(format!("leader with the lock, not promoting yet: {why}"))
                } else {
                    p.push(Action::Promote { epoch: l.epoch });
                    p.again = true;
                    Reason::Promoting { epoch: l.epoch }
                }
            }
            (PgRole::Stopped, _) | (PgRole::Unresponsive, _) if self.paused => {
                // Maintenance mode: keep the key (renewals and S1 go on), neither
                // restart PostgreSQL nor give the key up; `primary_start_timeout`
                // counts from the resume.
                l.down_since = None;
                self.held_by_pause(
                    "restarting PostgreSQL or giving up the leader key (leader with the lock)",
                )
                .unwrap_or_else(|| Reason::Waiting("paused".into()))
            }
            (PgRole::Stopped, _) | (PgRole::Unresponsive, _) => {
                let since = *l.down_since.get_or_insert(now);
                if now.since(since) > self.timing.primary_start_timeout {
                    // Give the key up; a replica will take over. Fence first: an
                    // unresponsive postmaster may still accept writes.
                    let why = format!(
                        "PostgreSQL not running as primary for {:.1} s > primary_start_timeout",
                        now.since(since).as_secs_f64()
                    );
                    self.enter_fencing(Some(l.lease), Some(l.epoch), true, why.clone());
                    self.needs_rewind = true;
                    p.push(Action::Fence);
                    return Reason::Fencing(why);
                }
                if obs.pg.role == PgRole::Stopped {
                    let data = matches!(obs.pg.data, DataDir::Present { .. });
                    let unread = !self.local_epoch_known && !self.led_from_bootstrap;
                    let refused = self.epoch_regression(l.epoch).is_some()
                        || self.rollback_refusal().is_some();
                    if data && unread && now >= l.promote_after {
                        // `down_since` restarts with each standby start below: the
                        // unread row has its own bound.
                        if let Some(r) = self.epoch_unread_too_long(now, &l, p) {
                            return r;
                        }
                    }
                    if data && (unread || refused) {
                        // Read the epoch row (or keep the data readable while refusing)
                        // as a standby: a primary could write before we know (DESIGN §3).
                        l.down_since = None;
                        p.push(Action::StartJob(JobKind::StartReplica {
                            leader: String::new(),
                        }));
                        Reason::Waiting(
                            "leader with the lock; starting PostgreSQL as a standby first to read its epoch"
                                .into(),
                        )
                    } else if data && now >= l.promote_after && !Self::adoption_confirmed(&l) {
                        Reason::Waiting(ADOPTION_UNCONFIRMED.into())
                    } else if data && now >= l.promote_after && !self.fence_armed(&l) {
                        // S3 (issue 8 finding 9): a primary starts only with the fence
                        // armed, exactly as a promotion does.
                        Reason::Waiting(
                            "leader with the lock; waiting to arm the watchdog before starting PostgreSQL as primary"
                                .into(),
                        )
                    } else if data && now >= l.promote_after && self.guardian_unarmed(obs) {
                        p.again = true;
                        Reason::Waiting(
                            "leader with the lock; waiting for the guardian to hold its deadline G"
                                .into(),
                        )
                    } else if data && now >= l.promote_after {
                        match self.sync_before_writes(now, obs, l.epoch, p, false) {
                            Ok(()) => {
                                p.push(Action::StartJob(JobKind::StartPrimary));
                                Reason::Waiting(
                                    "leader with the lock; starting PostgreSQL as primary".into(),
                                )
                            }
                            Err(why) => Reason::Waiting(format!(
                                "leader with the lock, not starting PostgreSQL yet: {why}"
                            )),
                        }
                    } else {
                        Reason::Waiting("leader with the lock; PostgreSQL is stopped".into())
                    }
                } else {
                    Reason::Waiting("leader with the lock; PostgreSQL is not answering yet".into())
                }
            }
        };
        self.state = State::Leader(l);
        reason
    }

    /// How long after an adoption its confirming renewal must be sent
    /// (`Leadership::confirm_after`): `L_w + R` makes every replica poll served
    /// before the adopting renewal stale, measured on the replica's clock; `M`
    /// covers the two hosts' clock-rate drift (review of 88463a7, F2).
    fn confirm_wait(&self) -> Duration {
        self.poll_window_widest() + self.timing.safety_margin
    }

    /// Whether an adoption's confirming renewal (`Leadership::confirm_after`) has
    /// counted: a leadership that is not such an adoption always is.
    fn adoption_confirmed(l: &Leadership) -> bool {
        l.confirm_after.is_none_or(|c| l.renewed_at >= c)
    }

    /// Fresh-eyes review of seed 253898, R2 (S3, DESIGN §3): a leader that cannot
    /// promote because the `tenure.epoch` row was never read in this run waits for
    /// a read at most `primary_start_timeout`, counted from the first such wait
    /// after its promote delay; then it gives the key up (fence of the standby,
    /// then a guarded release; no promotion), so a member that can read its row may
    /// lead. `None`: keep waiting. The fence planned while leading is reported as
    /// a lost lease (`LEASE_LOST`, naming this cause).
    fn epoch_unread_too_long(
        &mut self,
        now: Instant,
        l: &Leadership,
        p: &mut Planner,
    ) -> Option<Reason> {
        let since = match self.epoch_unread_since {
            Some((e, at)) if e == l.epoch => at,
            _ => {
                self.epoch_unread_since = Some((l.epoch, now));
                now
            }
        };
        let waited = now.since(since);
        if waited <= self.timing.primary_start_timeout {
            return None;
        }
        let why = format!(
            "ALERT: the tenure.epoch row could not be read for {:.1} s > primary_start_timeout \
             {:.1} s (leader without a primary): giving up the leader key without promoting",
            waited.as_secs_f64(),
            self.timing.primary_start_timeout.as_secs_f64()
        );
        self.epoch_unread_since = None;
        self.needs_rewind = self.needs_rewind || l.promoted;
        self.enter_fencing(Some(l.lease), Some(l.epoch), true, why.clone());
        p.push(Action::Fence);
        p.again = true;
        Some(Reason::Fencing(why))
    }

    pub(super) fn lead_shutdown(
        &mut self,
        obs: &Observation,
        p: &mut Planner,
        l: Leadership,
    ) -> Reason {
        let stopped = obs.pg.role == PgRole::Stopped && !matches!(obs.job, Job::Running { .. });
        if stopped && !stop_checked(obs) {
            // DESIGN §1 step 4 and S1: a stopped postmaster is not proof that nothing
            // of this PostgreSQL runs (a backend can outlive it and commit, §3a). The
            // key, the `released` marker and the watchdog go only after a fence found
            // nothing left; an incomplete one is retried, armed.
            p.push(Action::Fence);
            p.again = true;
            self.state = State::Leader(l);
            return Reason::ShuttingDown(
                "PostgreSQL stopped; checking that no process of it remains before releasing the key"
                    .into(),
            );
        }
        if stopped {
            // Clean stop finished and no process of it remains: hand the key over with
            // the release marker (no candidate named), the one proof that lets a
            // replica skip the early-expiry delay (DESIGN §1 step 4, S1, S3): guarded
            // by the epoch and carrying the shutdown checkpoint's LSN, which the
            // successor's WAL must reach. The member key's `released` is only shown.
            if self.has_fence() {
                p.push(Action::DisarmWatchdog);
            }
            // Review F2: only a leadership that promoted hands over with a marker. One
            // still in its promote delay may follow an early DELETE whose old leader
            // has not fenced yet: its marker would prove its own clean stop, not that
            // (S3). The shell would find no shutdown checkpoint anyway (a standby's
            // `pg_control` says "shut down in recovery"); the core does not rely on it.
            if l.promoted {
                p.push(Action::HandOver {
                    lease: l.lease,
                    epoch: l.epoch,
                    candidate: None,
                });
            }
            // Its fallback, skipped by the shell once the hand-over released the key:
            // without a marker (no shutdown checkpoint: the postmaster had died) the
            // key still goes at once with a guarded delete, and the successor judges
            // that DELETE as in DESIGN §1 step 4 (the early-expiry delay).
            p.push(Action::Release {
                lease: l.lease,
                epoch: l.epoch,
            });
            p.push(Action::Exit);
            self.released = Some(l.epoch);
            self.state = State::Stopping;
            return Reason::ShuttingDown("PostgreSQL stopped; releasing the leader key".into());
        }
        let reason = match &obs.job {
            Job::Running { .. } => Reason::ShuttingDown("waiting for PostgreSQL to stop".into()),
            Job::Finished {
                ok: false, detail, ..
            } => {
                p.push(Action::Fence);
                Reason::ShuttingDown(format!("clean stop failed ({detail}); fencing"))
            }
            _ => {
                p.push(Action::StartJob(JobKind::Stop));
                Reason::ShuttingDown("stopping PostgreSQL cleanly before releasing the key".into())
            }
        };
        self.state = State::Leader(l);
        reason
    }

    pub(super) fn adopting(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        lease: LeaseId,
        epoch: Epoch,
        poll: super::adopt::AdoptPoll,
    ) -> Reason {
        let Some(r) = &obs.renewal else {
            p.again = true;
            return Reason::Waiting("confirming the leader key that names me (S4)".into());
        };
        // Seed 9982 (DESIGN §1 step 4, S6(e)): checked on this step's instant, after
        // the renewal's answer (etcd applied it at some point up to then, not at its
        // send instant: review of the fix); refused even after it counted (nothing
        // was petted or promoted).
        if r.lease == lease
            && let Some(why) = self.adoption_too_late(poll, now.max(r.sent_at))
        {
            return self.refuse_adoption(obs, p, lease, why);
        }
        match r.outcome {
            RenewalOutcome::Counted { .. }
                if r.lease == lease && obs.cluster.is_err() && obs.pg.may_accept_writes() =>
            {
                // S4 (issue 8 finding 11): adoption checks the local primary's timeline
                // against `history`, which this iteration could not read: a PostgreSQL
                // that may accept writes is fenced rather than adopted on an unchecked
                // timeline. One that cannot (a standby, stopped) has no timeline to
                // check: it adopts below, so a read that keeps failing while the
                // keepalives succeed cannot leave the cluster without a primary.
                let why = "could not read history to check the local primary's timeline \
                           before adopting (S4)"
                    .to_string();
                self.start_fence(p, why)
            }
            RenewalOutcome::Counted { ttl } if r.lease == lease => {
                let newest = obs
                    .cluster
                    .as_ref()
                    .map(|v| v.newest_timeline())
                    .unwrap_or(1);
                let tl_ok = obs.pg.role != PgRole::Primary || obs.pg.timeline >= newest;
                if !tl_ok {
                    self.enter_fencing(
                        Some(lease),
                        Some(epoch),
                        true,
                        format!(
                            "local primary on timeline {} but history is at {newest}",
                            obs.pg.timeline
                        ),
                    );
                    self.needs_rewind = true;
                    p.push(Action::Fence);
                    return Reason::Fencing("refusing to adopt: timeline behind history".into());
                }
                let ttl = u32::try_from(ttl).unwrap_or(u32::MAX);
                let promoted = obs.pg.role == PgRole::Primary;
                // DESIGN §1 step 4, S3 (seed 253898): a key found naming us with no
                // primary running may have been won after an early DELETE by this
                // node before a crash, its promote delay (in memory only) unfinished.
                let (promote_after, delay_reason) = if promoted {
                    (now, None)
                } else {
                    // Published from now on (`leader_ttl_seen`): a second crash
                    // inside this delay finds it in our member key.
                    let old = self.adoption_ttl(now, obs, ttl);
                    self.note_ttl_seen(now, old);
                    let d = self.adoption_delay(now, obs, ttl);
                    self.adopted_at = Some(now);
                    let why = format!(
                        "adopted a leadership this node may never have promoted under (its \
                         promote delay may not have passed before the restart); waiting {:.1} \
                         s from {now}",
                        d.as_secs_f64()
                    );
                    (now.add(d), Some(why))
                };
                let l = Leadership {
                    lease,
                    epoch,
                    ttl,
                    renewed_at: r.sent_at,
                    last_pet: None,
                    pet_pending: None,
                    promote_after,
                    delay_reason,
                    adoption_delay: !promoted,
                    // INVARIANT: an adoption with no primary running may write only
                    // after a renewal sent `L_w + R + M` after this step has counted.
                    confirm_after: (!promoted).then(|| now.add(self.confirm_wait())),
                    promoted,
                    down_since: None,
                    handover: None,
                    followed: None,
                };
                let mut l = l;
                // S4 then S2: the device is opened only after adopting, and the open
                // is a pet, so it needs `now + 2W <= H` like any other.
                self.plan_arm(now, &mut l, p);
                self.led_from_bootstrap = false;
                self.state = State::Leader(l);
                p.again = true;
                Reason::Other(format!(
                    "adopted the leader key: confirmed renewal of lease {lease:x} at epoch {epoch}"
                ))
            }
            _ => {
                // Not ours after all: fence any local primary, never resume on it.
                let why = format!("could not adopt the leader key ({:?})", r.outcome);
                self.start_fence(p, why)
            }
        }
    }

    /// The largest TTL the old lease of an adopted leadership may have had: seen in
    /// this run (members' `leader_ttl` and `leader_ttl_seen`, folded in by
    /// `track_leader`), this node's own recent sightings, the largest
    /// `leader_ttl_seen` published now (our own member key from before the crash
    /// among them: the member lease outlives a quick restart), the ttl in force,
    /// and the lease just renewed (seed 253898 review: `max_leader_ttl_seen` alone
    /// is memory, lost with the crash, and a ttl lowered in `config` leaves the old
    /// leader on its longer lease).
    fn adoption_ttl(&self, now: Instant, obs: &Observation, renewed_ttl: u32) -> u32 {
        self.max_leader_ttl_seen
            .max(self.timing.ttl)
            .max(renewed_ttl)
            .max(self.ttl_floor(now, obs))
    }

    /// DESIGN §1 step 4, S3 (seed 253898): the delay before an adopted leadership
    /// that may never have promoted may promote, counted from the adoption. The
    /// DELETE that let this node win came before the win, so before the adoption,
    /// and nothing tells how early it was nor who held the key: wait the longest
    /// delay any old leader could need. Without a watchdog that is its own horizon,
    /// `ttl_old + R` (`adoption_ttl`: the largest leader TTL known); with one,
    /// `2 W_old + R + M`, which S6(b) keeps below it for the old leader's own TTL,
    /// and which is counted anyway for every `W` published (and ours). A configured
    /// `promote_delay` applies too.
    pub(super) fn adoption_delay(
        &self,
        now: Instant,
        obs: &Observation,
        renewed_ttl: u32,
    ) -> Duration {
        let t = &self.timing;
        let ttl = self.adoption_ttl(now, obs, renewed_ttl);
        let mut d = Duration::from_secs(u64::from(ttl)) + t.retry_timeout;
        let published = obs
            .cluster
            .as_ref()
            .map(|v| {
                v.members
                    .iter()
                    .filter_map(|m| m.info.watchdog_timeout)
                    // Fresh-eyes review of seed 253898, R1: no validated `W` is larger.
                    .filter(|w| *w <= MAX_WATCHDOG)
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        let w = self
            .cfg
            .watchdog
            .unwrap_or_default()
            .max(Duration::from_secs(u64::from(published)));
        if !w.is_zero() {
            d = d.max(w + w + t.retry_timeout + t.safety_margin);
        }
        if let Some(pd) = t.promote_delay {
            d = d.max(pd);
        }
        d
    }

    /// The adoption delay ends once the local data shows the key's own epoch
    /// written by this node (and under this lease, when the row names one): only a
    /// primary under this leadership writes that (`epoch_to_write`), and it promoted
    /// after the leadership's delay (S3), so the old primary is gone. An older epoch
    /// (or none), or the same epoch number written by another member or under
    /// another lease (an etcd wiped and refilled reuses revisions), proves nothing:
    /// the delay stays (seed 253898 review). A row without a lease was written by a
    /// version before the column: the member's name is all it can show.
    fn lift_adoption_delay(&self, now: Instant, l: &mut Leadership) {
        let ours = self.local_epoch_known
            && self.local_epoch == Some(l.epoch)
            && self.local_epoch_mine
            && self.local_epoch_lease.is_none_or(|x| x == l.lease);
        if l.adoption_delay && ours {
            // INVARIANT: `adoption_delay` is cleared only on proof of an earlier
            // promotion under this very epoch.
            l.adoption_delay = false;
            l.promote_after = l.promote_after.min(now);
            l.delay_reason = None;
        }
    }

    /// Seed 253898 review: the adoption delay was sized from what the adoption's
    /// observation showed; a read that failed then (an adoption without a primary
    /// goes ahead on a failed read, `adopting`) or a member key that shows a longer
    /// `leader_ttl_seen` or `W` since makes it longer, still counted from the
    /// adoption. Only ever lengthens; nothing once lifted or promoted.
    fn extend_adoption_delay(&mut self, now: Instant, obs: &Observation, l: &mut Leadership) {
        let Some(at) = self.adopted_at else { return };
        if !l.adoption_delay || l.promoted || obs.cluster.is_err() {
            return;
        }
        let old = self.adoption_ttl(now, obs, l.ttl);
        self.note_ttl_seen(now, old);
        let until = at.add(self.adoption_delay(now, obs, l.ttl));
        if until > l.promote_after {
            l.promote_after = until;
            l.delay_reason = Some(format!(
                "adopted a leadership this node may never have promoted under; a later read \
                 shows an older lease of {old} s (or a longer W): waiting {:.1} s from {at}",
                until.since(at).as_secs_f64()
            ));
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn won(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        lease: LeaseId,
        granted_ttl: u32,
        granted_at: Instant,
        epoch: Epoch,
    ) -> Reason {
        // DESIGN §1 step 4: after an early (or unknowable) expiry the old primary may
        // not know yet; wait until it has fenced or been reset.
        let (mut after, mut why) = (now, None);
        // The marker the winning txn was bound to (review F1), re-checked against
        // this node's WAL now: the read after the win shows it taken.
        let proof = self
            .acquire_proof
            .take()
            .filter(|m| obs.pg.timeline == m.timeline && obs.pg.lsn >= m.lsn);
        // The old lease's TTL, at least what this node saw recently and what any
        // member publishes (seed 253898 review: a node that restarted and never
        // polled the old lease, and a vacancy after a leadership that never
        // promoted, whose own predecessor may hold a lease granted under a ttl since
        // lowered). Published from now on, so a crash inside the delay keeps it.
        let old_ttl = self.vacancy.as_ref().map(|v| {
            v.old_ttl
                .unwrap_or(self.max_leader_ttl_seen)
                .max(self.ttl_floor(now, obs))
        });
        if let Some(old) = old_ttl {
            self.note_ttl_seen(now, old);
        }
        let t = &self.timing;
        if let Some(v) = &self.vacancy
            && v.early
            && proof.is_none()
        {
            let d = match v.old_watchdog {
                Some(w) => {
                    Duration::from_secs(2 * u64::from(w)) + t.retry_timeout + t.safety_margin
                }
                // The old leader fenced by its own horizon, `s + ttl_old - M`: its
                // lease's granted TTL, not the config in force now (issue 8 finding
                // 2: a ttl lowered in `config` then an early revoke gave ~15 s of two
                // primaries). Unknown: the largest leader TTL seen in this run. The
                // current ttl and ours only ever lengthen the wait.
                None => {
                    let old = old_ttl.unwrap_or(self.max_leader_ttl_seen);
                    Duration::from_secs(u64::from(old.max(t.ttl).max(granted_ttl)))
                        + t.retry_timeout
                }
            };
            after = v.at.add(d);
            why = Some(format!(
                "the old leader's key vanished before its lease could have expired; waiting {:.1} s from {}",
                d.as_secs_f64(),
                v.at
            ));
        }
        if let Some(d) = t.promote_delay
            && now.add(d) > after
        {
            after = now.add(d);
            why = Some(format!("promote_delay {:.1} s", d.as_secs_f64()));
        }
        // Finding L1 (S3): beside an agent older than the acquisition record, no
        // record nor marker proves the vacancy; the horizon bound from the win.
        let horizon_ttl = old_ttl
            .unwrap_or(self.max_leader_ttl_seen)
            .max(t.ttl)
            .max(granted_ttl);
        // (At least as late: its reason names the member.)
        if let Some((until, w)) = self.older_agent_delay(now, obs, horizon_ttl)
            && until >= after
        {
            after = until;
            why = Some(w);
        }
        let mut l = Leadership {
            lease,
            epoch,
            ttl: granted_ttl,
            // S5: a wall-clock jump this observation found (a hypervisor pause) came
            // off the monotonic clock after the grant as much as after a renewal
            // (`take_lease_reports` shifts a leader's; this leadership is new).
            renewed_at: granted_at.sub(obs.clock_jump),
            last_pet: None,
            pet_pending: None,
            promote_after: after,
            delay_reason: why,
            adoption_delay: false,
            confirm_after: None,
            promoted: obs.pg.role == PgRole::Primary,
            down_since: None,
            handover: None,
            followed: self
                .vacancy
                .as_ref()
                .and_then(|v| Some((v.old_holder.clone()?, v.seen_revision))),
        };
        // S6(b) for the TTL etcd granted (issue 8 finding 4): with `2W > ttl - M - R` a
        // renewal that took up to R leaves no instant with `t + 2W <= H`, so this
        // leadership could never arm the watchdog, never promote and never fence:
        // a cluster without a primary for good. Give the key back at once.
        if let Some(w) = self.cfg.watchdog {
            let room = Duration::from_secs(u64::from(granted_ttl))
                .saturating_sub(t.safety_margin)
                .saturating_sub(t.retry_timeout);
            if w + w > room {
                let why = format!(
                    "watchdog W = {} s cannot be petted under the granted TTL {granted_ttl} s \
                     (S6 b: 2W <= ttl - M - R = {:.3} s); releasing the key",
                    w.as_secs(),
                    room.as_secs_f64()
                );
                self.vacancy = None;
                // Backstop: the shell sizes `W` from the ttl in force and refuses
                // changes that break S6 for it, so this takes a ttl change racing the
                // acquire (granted under the old ttl, `W` already for the new one).
                // The next acquire asks for the ttl in force, so no refusal for the
                // run: a two-node cluster would be left without a primary.
                self.enter_fencing(Some(lease), Some(epoch), true, why.clone());
                p.push(Action::Fence);
                p.again = true;
                return Reason::Refusing(why);
            }
        }
        // S3: arm before promotion; S2: only if now + 2W <= H.
        self.plan_arm(now, &mut l, p);
        self.vacancy = None;
        self.led_from_bootstrap = self.bootstrapped_here;
        // INVARIANT: the bootstrap shortcut is one-shot: once this node has led, a
        // later vacancy is judged like any other (it may be the fenced old primary).
        self.bootstrapped_here = false;
        self.state = State::Leader(l);
        p.again = true;
        Reason::Promoting { epoch }
    }
}
