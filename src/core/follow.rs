//! Everything a node without leadership does: start-up decisions (S4 before all),
//! following a leader (clone, rewind, retarget), and handing over to the
//! candidacy when nobody leads.
//!
//! Owns: the follower's order of checks, the rewind bookkeeping, divergence
//! detection (DESIGN §3a), and data directories found unusable.
//!
//! Must never: leave a local PostgreSQL that may accept writes running while this
//! node does not lead (S4), or resume on a stale key of its own.

use std::time::Duration;

use super::model::*;
use super::time::Instant;
use super::{Core, Planner, State};

/// The longest wait between replica builds that keep failing (or a `loop_wait`,
/// if longer): once a minute is a source's checkpoint a minute at most.
pub const BUILD_BACKOFF_MAX: Duration = Duration::from_secs(60);

impl Core {
    /// Everything a node without leadership does.
    pub(super) fn follow(&mut self, now: Instant, obs: &Observation, p: &mut Planner) -> Reason {
        let me = self.cfg.name.clone();
        let first = self.state == State::Init;
        if obs.shutdown {
            // An unanswered acquire decided lost goes in `stopping`.
            self.state = State::Stopping;
            return self.stopping(obs, p);
        }
        let view = match &obs.cluster {
            Ok(v) => v,
            Err(e) => {
                // The bootstrap grace counts from the first read after the last
                // failed one: a restored host started during the outage reads for
                // the first time when we do (review of session 21, M1).
                self.empty_since = None;
                // S4: without etcd we cannot adopt: a local primary is fenced (a wedged
                // one too: it may still take writes).
                if obs.pg.may_accept_writes() {
                    return self
                        .start_fence(p, format!("local primary but etcd is unreachable ({e})"));
                }
                return Reason::Waiting(format!("etcd unreachable: {e}"));
            }
        };

        // Outcomes of last iteration's DCS actions.
        if let Some(out) = &obs.acquire
            && let AcquireOutcome::Won {
                lease,
                granted_ttl,
                granted_at,
                epoch,
            } = out
        {
            return self.won(now, obs, p, *lease, *granted_ttl, *granted_at, *epoch);
        }
        if let Some(ClaimOutcome::Won { lease }) = &obs.claim {
            // A host with data showed itself between our read and our claim: its
            // data is the cluster, so the lock goes back before initdb touches
            // anything (the empty directory stays empty).
            if let Some(reason) = Self::member_with_data(view, &me, None) {
                p.push(Action::Revoke { lease: *lease });
                return Reason::Waiting(format!("gave the bootstrap lock back: {reason}"));
            }
            self.state = State::Bootstrapping { lease: *lease };
            p.push(Action::StartJob(JobKind::InitDb));
            return Reason::Bootstrapping("won the initialize lock; running initdb".into());
        }

        // S4 (issue 8 finding 8) before anything that may return early (a running job,
        // `initialize` missing, locked or garbage, a system-identifier mismatch, an
        // unusable data directory): a local PostgreSQL that may accept writes while
        // this node does not lead is fenced. The only exception is the key naming us
        // at start-up, which `Adopting` confirms or fences.
        // Adoptable only where `follow` reaches the adoption below: `initialize` done
        // and matching the local data (S4: "the system identifier matches
        // `initialize`"); otherwise an early return would leave the primary running.
        let sysid_matches = match (&view.initialize, &obs.pg.data) {
            (Some(Initialize::Done { sysid }), DataDir::Present { sysid: mine, .. }) => {
                sysid == mine
            }
            _ => false,
        };
        let adoptable = first
            && self.lead_refusal.is_none()
            && sysid_matches
            && view.leader.as_ref().is_some_and(|k| k.name == me);
        if obs.pg.may_accept_writes() && !adoptable {
            let why = match (&view.leader, obs.pg.role) {
                (Some(k), PgRole::Primary) => {
                    format!("local primary while {} holds the leader key (S4)", k.name)
                }
                (None, PgRole::Primary) => "local primary but nobody holds the leader key".into(),
                (_, _) => "local PostgreSQL does not answer and its data directory says it runs \
                           as a primary (S4)"
                    .into(),
            };
            return self.start_fence(p, why);
        }

        // An acquire whose answer was lost and which a read did not show won
        // (`acquire_answered_by_read`): a failure. Its lease is revoked, after S4's
        // fence; if the txn is applied after that read after all, the revoke deletes
        // the key it made (never promoted under: S3).
        if let Some(lease) = self.unanswered_revoke.take() {
            p.push(Action::Revoke { lease });
        }
        if let Job::Running { kind, .. } = &obs.job {
            return Reason::Waiting(format!("{kind:?} running"));
        }
        if let Job::Finished {
            kind: JobKind::Rewind { .. },
            ok: false,
            detail,
        } = &obs.job
            && !detail.starts_with(REWIND_SOURCE_STEP)
        {
            // Only a rewind that ran counts towards giving up; an unreachable source
            // (a partition that heals) is retried for as long as it takes.
            self.rewind_failures += 1;
        }
        if let Job::Finished {
            kind: JobKind::Rewind { .. },
            ok: true,
            ..
        } = &obs.job
        {
            self.needs_rewind = false;
            self.rewind_failures = 0;
        }
        if let Job::Finished {
            kind: JobKind::Basebackup { from },
            ok,
            ..
        } = &obs.job
        {
            // The leader is never passed over: only a `clonefrom` member is, and
            // a failure from the leader (while that member is passed over) keeps
            // its record, or the member would be chosen again at once (review of
            // session 18, L2).
            let from_leader = view.leader.as_ref().is_some_and(|k| k.name == *from);
            self.clone_failed_from = match self.clone_failed_from.take() {
                _ if *ok => None,
                kept if from_leader => kept,
                Some((name, since)) if name == *from => Some((name, since)),
                _ => Some((from.clone(), now)),
            };
            self.build_failures = if *ok {
                0
            } else {
                self.build_failures.saturating_add(1)
            };
        }

        // The bootstrap.
        let sysid = match self.cluster_sysid(now, obs, p, view) {
            Ok(sysid) => sysid,
            Err(reason) => return reason,
        };

        let leader = view.leader.clone();
        match (&obs.pg.data, &leader) {
            (DataDir::Present { sysid: mine, .. }, _) if *mine != sysid => {
                return Reason::Refusing(format!(
                    "system identifier mismatch: my data is {mine}, the cluster's is {sysid}"
                ));
            }
            (DataDir::Unusable(why), _) => return self.unusable(p, why),
            (DataDir::Held(why), _) => {
                return Reason::Refusing(format!("data directory held: {why}"));
            }
            _ => {}
        }
        if let DataDir::Present {
            was_primary: true, ..
        } = obs.pg.data
            && first
            && obs.pg.role != PgRole::Primary
        {
            self.needs_rewind = true;
        }

        match leader {
            Some(k) if k.name == me => {
                if let Some(why) = self.lead_refusal.clone() {
                    // Never become or stay leader without the required watchdog.
                    self.state = State::Follower;
                    if obs.pg.role == PgRole::Primary {
                        return self.start_fence(p, format!("cannot adopt the leader key: {why}"));
                    }
                    p.push(Action::Revoke { lease: k.lease });
                    return Reason::Refusing(format!("cannot adopt the leader key: {why}"));
                }
                // A key whose epoch this node's own release marker gave up (the agent
                // stopped during a switchover): never resumed on, like a fenced one.
                if first && !self.released_by_marker(view, k.epoch) {
                    // S4: adopt only through a confirmed renewal of the key's lease.
                    // Seed 9982: a poll of the lease first (an observation that
                    // already carries one is weighed at once, `adopting_poll`).
                    self.state = State::Adopting {
                        lease: k.lease,
                        epoch: k.epoch,
                        poll: None,
                    };
                    if Self::adoption_poll(obs, k.lease).is_some() {
                        return self.adopting_poll(now, obs, p, k.lease, k.epoch);
                    }
                    p.again = true;
                    return Reason::Waiting(format!(
                        "the leader key names me (epoch {}); polling its lease, then confirming before adopting (S4)",
                        k.epoch
                    ));
                }
                // A key of ours from before a fence: never resume on it.
                self.state = State::Follower;
                if obs.pg.role == PgRole::Primary {
                    return self.start_fence(p, "a stale leader key of mine lingers".into());
                }
                p.push(Action::Revoke { lease: k.lease });
                Reason::Waiting("a stale leader key of mine lingers; revoking its lease".into())
            }
            Some(k) => {
                self.state = State::Follower;
                self.follow_leader(now, obs, p, view, &k)
            }
            None => {
                self.state = State::Follower;
                if obs.pg.role == PgRole::Primary {
                    return self
                        .start_fence(p, "local primary but nobody holds the leader key".into());
                }
                let r = self.candidate(now, obs, p, view);
                if p.actions.contains(&Action::Acquire) {
                    // What the acquire txn will be bound to (the shell compares this
                    // read's `release` revision): a proof now is a proof at the win.
                    self.acquire_proof = self
                        .vacancy
                        .as_ref()
                        .and_then(|v| self.release_proves(obs, v).ok());
                }
                r
            }
        }
    }

    pub(super) fn follow_leader(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        view: &ClusterView,
        k: &LeaderKey,
    ) -> Reason {
        let me = self.cfg.name.clone();
        if obs.pg.role == PgRole::Primary {
            return self.start_fence(
                p,
                format!("local primary while {} holds the leader key (S4)", k.name),
            );
        }
        let Some(lm) = view.member(&k.name) else {
            return Reason::Waiting(format!(
                "leader {} has not published its member key",
                k.name
            ));
        };
        if lm.info.conn_url.is_empty() {
            return Reason::Waiting(format!("leader {} publishes no conn_url", k.name));
        }
        match (&obs.pg.data, obs.pg.role) {
            (DataDir::Empty, _) => {
                if lm.info.role != "primary" || !lm.info.pg_healthy {
                    return Reason::Waiting(format!(
                        "leader {} is not running as primary yet",
                        k.name
                    ));
                }
                // A fresh copy of the leader has nothing to rewind (a former
                // primary reinitialized by the operator, `core::manage`).
                self.needs_rewind = false;
                self.rewind_failures = 0;
                if let Some(r) = self.data_job_paced(now, "basebackup") {
                    return r;
                }
                let from = self.clone_source(now, view, &lm.info, &k.name);
                let why = if from == k.name {
                    format!("cloning leader {from} (create_replica_methods)")
                } else {
                    format!(
                        "cloning {from}, a replica tagged clonefrom, of leader {} \
                         (create_replica_methods)",
                        k.name
                    )
                };
                p.push(Action::StartJob(JobKind::Basebackup { from }));
                Reason::Other(why)
            }
            (_, PgRole::Stopped) => {
                if let Some(held) = self.held_by_pause(if self.needs_rewind {
                    "rewinding or starting the stopped PostgreSQL"
                } else {
                    "starting the stopped PostgreSQL"
                }) {
                    return held;
                }
                if self.needs_rewind {
                    if lm.info.role != "primary" || !lm.info.pg_healthy {
                        return Reason::Waiting(format!(
                            "need a rewind from {} once it runs as primary",
                            k.name
                        ));
                    }
                    if self.rewind_failures >= 2 && self.cfg.move_aside_unusable {
                        self.rewind_failures = 0;
                        self.needs_rewind = false;
                        p.push(Action::MoveDataAside);
                        return Reason::Other(
                            "pg_rewind failed twice; moving the data directory aside for a fresh basebackup".into(),
                        );
                    }
                    if self.rewind_failures >= 2 {
                        return Reason::Refusing(
                            "pg_rewind failed twice; set move_aside_unusable to allow a fresh basebackup".into(),
                        );
                    }
                    if let Some(r) = self.data_job_paced(now, "rewind") {
                        return r;
                    }
                    p.push(Action::StartJob(JobKind::Rewind {
                        from: k.name.clone(),
                    }));
                    return Reason::Other(format!("rewinding from {} before following it", k.name));
                }
                p.push(Action::StartJob(JobKind::StartReplica {
                    leader: k.name.clone(),
                }));
                Reason::Other(format!("starting PostgreSQL as a replica of {}", k.name))
            }
            (_, PgRole::Replica) => {
                if obs.pg.following.as_deref() != Some(k.name.as_str()) {
                    self.stuck_since = None;
                    p.push(Action::Retarget {
                        leader: k.name.clone(),
                    });
                    return Reason::Other(format!(
                        "pointing replication at the new leader {}",
                        k.name
                    ));
                }
                if let Some(why) = self.diverged(now, obs, view, &lm.info)
                    && !self.paused
                {
                    // DESIGN §3a: rewind whenever the local WAL ran past the switch
                    // point. A replica that kept streaming from a frozen old primary
                    // can hold WAL the new timeline never had; it would never stream
                    // again. Stop cleanly, then the Stopped arm rewinds.
                    self.needs_rewind = true;
                    self.stuck_since = None;
                    p.push(Action::StartJob(JobKind::Stop));
                    return Reason::Other(format!("{why}; stopping to rewind from {}", k.name));
                }
                p.push(Action::CopySlots {
                    copies: !self.cfg.nofailover,
                });
                Reason::Following {
                    me: me.clone(),
                    leader: k.name.clone(),
                }
            }
            (_, PgRole::Unresponsive) => Reason::Waiting("PostgreSQL is not answering yet".into()),
            (_, PgRole::Primary) => Reason::Other("local primary: fencing first (S4)".into()),
        }
    }

    /// Where a new replica is built from (Patroni's `clonefrom` tag): a member
    /// tagged so, sparing the primary the copy, when it runs as a replica, streams,
    /// is on the leader's timeline and no more than `maximum_lag_on_failover`
    /// behind the leader's published position; the most advanced such member
    /// (then the first by name). A member builds have failed from for a lease
    /// TTL is passed over. Else the leader itself.
    pub(super) fn clone_source(
        &self,
        now: Instant,
        view: &ClusterView,
        leader: &MemberInfo,
        leader_name: &str,
    ) -> String {
        let me = self.cfg.name.as_str();
        let ttl = Duration::from_secs(u64::from(self.timing.ttl));
        let passed_over = match &self.clone_failed_from {
            Some((name, since)) if now >= since.add(ttl) => Some(name.as_str()),
            _ => None,
        };
        view.members
            .iter()
            .filter(|m| m.name != me && m.name != leader_name)
            .filter(|m| passed_over != Some(m.name.as_str()))
            .filter(|m| {
                let i = &m.info;
                i.tags.clonefrom
                    && i.role == "replica"
                    && i.state == "running"
                    && i.pg_healthy
                    && i.parse_error.is_none()
                    && !i.conn_url.is_empty()
                    && i.replication_state.as_deref() == Some("streaming")
                    && i.timeline == leader.timeline
                    && leader.xlog_location.saturating_sub(i.xlog_location)
                        <= self.timing.maximum_lag_on_failover
            })
            .max_by(|a, b| {
                a.info
                    .xlog_location
                    .cmp(&b.info.xlog_location)
                    .then_with(|| b.name.cmp(&a.name))
            })
            .map_or_else(|| leader_name.to_string(), |m| m.name.clone())
    }

    /// `Some(reason to wait)` while the last job of kind `what` (basebackup,
    /// rewind) started less than half a `loop_wait` ago; else `None`, and `now` is
    /// recorded as its new start. A refused TLS handshake or password fails such a
    /// job in milliseconds, and the child's exit wakes the loop at once: without
    /// this it would be retried tens of times a second, each time an error line and
    /// a connection to the leader. Half a loop, not a whole one: the tick after a
    /// start comes a loop_wait after that tick, which can be a hair less than a
    /// loop_wait after the instant the step saw; the next tick retries. A
    /// basebackup that failed `n` times in a row waits `2^n` times that, up to
    /// [`BUILD_BACKOFF_MAX`] (or a `loop_wait`, if longer).
    fn data_job_paced(&mut self, now: Instant, what: &'static str) -> Option<Reason> {
        let mut wait = self.timing.loop_wait / 2;
        if what == "basebackup" && self.build_failures > 0 {
            let cap = BUILD_BACKOFF_MAX.max(self.timing.loop_wait);
            wait = wait
                .saturating_mul(1u32 << self.build_failures.min(16))
                .min(cap);
        }
        if let Some((kind, at)) = self.data_job_started
            && kind == what
            && now < at.add(wait)
        {
            return Some(Reason::Waiting(if wait > self.timing.loop_wait / 2 {
                format!(
                    "the last {what} started {:.1} s ago and {} in a row failed: the next \
                     waits {:.1} s after it",
                    now.since(at).as_secs_f64(),
                    self.build_failures,
                    wait.as_secs_f64()
                )
            } else {
                format!(
                    "the last {what} started {:.1} s ago: the next waits for the next loop",
                    now.since(at).as_secs_f64()
                )
            }));
        }
        self.data_job_started = Some((what, now));
        None
    }

    /// A replica that follows the right leader but cannot stream from it because
    /// its WAL forked off (DESIGN §3a): the leader runs a newer timeline, the WAL
    /// receiver is not streaming, and either the local position is past the switch
    /// point `history` recorded for the local timeline, or the receiver has not
    /// streamed for a lease TTL (the recorded point is the promoted node's position
    /// when it decided, which can be a little short of the real one). A streaming
    /// replica is never judged diverged; a rewind that finds nothing to do is
    /// harmless.
    pub(super) fn diverged(
        &mut self,
        now: Instant,
        obs: &Observation,
        view: &ClusterView,
        leader: &MemberInfo,
    ) -> Option<String> {
        let mine = obs.pg.timeline;
        // Only a running primary can be rewound from (and only its timeline counts).
        let leader_runs = leader.role == "primary" && leader.pg_healthy;
        if obs.pg.streaming || mine == 0 || leader.timeline <= mine || !leader_runs {
            self.stuck_since = None;
            return None;
        }
        let since = *self.stuck_since.get_or_insert(now);
        if let Some(h) = view.history.iter().find(|h| h.timeline == mine)
            && obs.pg.lsn > h.lsn
        {
            return Some(format!(
                "my WAL (position {}) runs past timeline {mine}'s switch point {} to a later timeline",
                obs.pg.lsn, h.lsn,
            ));
        }
        let patience = Duration::from_secs(u64::from(self.timing.ttl));
        (now.since(since) >= patience).then(|| {
            format!(
                "on timeline {mine} and not streaming for {:.1} s while the leader runs timeline {}",
                now.since(since).as_secs_f64(),
                leader.timeline
            )
        })
    }

    pub(super) fn unusable(&mut self, p: &mut Planner, why: &str) -> Reason {
        if self.cfg.move_aside_unusable {
            p.push(Action::MoveDataAside);
            Reason::Other(format!("data directory unusable ({why}); moving it aside"))
        } else {
            Reason::Refusing(format!(
                "data directory unusable ({why}); set move_aside_unusable or fix it by hand"
            ))
        }
    }
}
