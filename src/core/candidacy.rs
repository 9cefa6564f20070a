//! May this node take the vacant key? (DESIGN §1 step 4, §3a)
//!
//! Owns: the candidate's checks, in order: bootstrap shortcut, a running standby
//! with data, tags and refusals, synchronous mode, the old lease gone, timeline,
//! `maximum_lag_on_failover`, and the comparison with rivals' fresh positions.
//!
//! Must never: plan `Acquire` while the old lease may live, or on positions
//! published before the vacancy was seen (once a rival had time to publish).

use super::model::*;
use super::time::Instant;
use super::{Core, Planner};

impl Core {
    /// Why this node may not take leadership now: refused for the run (S3: a
    /// required watchdog missing, or refused at a leadership's open), or its
    /// required watchdog failed the shell's last check (`watchdog_unusable`).
    pub(super) fn leadership_refusal(&self) -> Option<String> {
        match (&self.lead_refusal, &self.watchdog_unusable) {
            (Some(why), _) => Some(why.clone()),
            (None, Some(why)) => Some(format!("required watchdog unusable: {why}")),
            (None, None) => None,
        }
    }

    /// The key is absent: may this node take it? (§1 step 4, §3a)
    pub(super) fn candidate(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        view: &ClusterView,
    ) -> Reason {
        let me = self.cfg.name.clone();
        // The node that just ran initdb: no other node has data, nobody led before.
        if self.bootstrapped_here
            && self.leadership_refusal().is_none()
            && self.rollback_refusal().is_none()
            && obs.pg.role == PgRole::Stopped
            && matches!(obs.pg.data, DataDir::Present { .. })
            && view.history.is_empty()
        {
            p.push(Action::Acquire);
            p.again = true;
            return Reason::Acquiring("bootstrapped the cluster; taking the leader key".into());
        }
        // Maintenance mode: no automatic failover, and a stopped PostgreSQL stays
        // stopped (the standby start below is a restart).
        if let Some(held) = self.held_by_pause("taking the vacant leader key") {
            return held;
        }
        // A stopped node with data starts as a standby with no upstream so it can
        // publish a live position.
        match (&obs.pg.data, obs.pg.role) {
            (DataDir::Empty, _) => return Reason::Waiting("no leader to clone from".into()),
            (_, PgRole::Stopped) => {
                p.push(Action::StartJob(JobKind::StartReplica {
                    leader: String::new(),
                }));
                return Reason::Other(
                    "no leader; starting PostgreSQL as a standby to publish my position".into(),
                );
            }
            (_, PgRole::Unresponsive) => {
                return Reason::Waiting("PostgreSQL is not answering yet".into());
            }
            _ => {}
        }
        if self.cfg.nofailover {
            return Reason::Waiting("no leader, and I am tagged nofailover".into());
        }
        // S3: a node that could not arm its required watchdog would win, give the
        // key back and cost the next winner a promote delay (issue 13 item 4).
        if let Some(why) = self.leadership_refusal() {
            return Reason::Refusing(format!("not a candidate: {why}"));
        }
        if let Some(why) = self.rollback_refusal() {
            return Reason::Refusing(format!("not a candidate: {why}"));
        }
        if let Err(why) = self.sync_allows(view, &me) {
            return Reason::Waiting(format!("not a candidate: {why}"));
        }
        let Some(v) = self.vacancy.clone() else {
            return Reason::Waiting("no leader".into());
        };
        // The old lease must be gone (TTL -1), never merely "probably expired".
        if !v.lease_gone() {
            let detail = match &obs.lease_poll {
                Some(lp) if v.old_lease == Some(lp.lease) => match lp.ttl {
                    Some(t) if t > 0 => format!(
                        "the leader key vanished while its lease {:x} still lives (TTL {t} s): waiting",
                        lp.lease
                    ),
                    Some(t) => format!(
                        "lease {:x} expired (TTL {t}); its revoke is in flight",
                        lp.lease
                    ),
                    None => format!("lease {:x} is gone; re-checking", lp.lease),
                },
                _ => "waiting for an answer about the old leader's lease".into(),
            };
            // A hand-over deletes the key, then revokes the lease: poll again at once
            // for a little while rather than a loop later (the write gap).
            if matches!(&view.release, Some(Ok(m)) if v.old_epoch == Some(m.epoch) && m.taken_by.is_none())
                && now.since(v.at) < self.timing.retry_timeout
            {
                p.again = true;
            }
            return Reason::Waiting(detail);
        }
        let newest = view.newest_timeline();
        if obs.pg.timeline < newest {
            return Reason::Waiting(format!(
                "not a candidate: on timeline {} but history is at {newest}",
                obs.pg.timeline
            ));
        }
        let lag = v.old_xlog.saturating_sub(obs.pg.lsn);
        if v.old_xlog > 0 && lag > self.timing.maximum_lag_on_failover {
            return Reason::Waiting(format!(
                "not a candidate: {lag} bytes behind the old leader > maximum_lag_on_failover"
            ));
        }
        // A switchover's or a manual failover's candidate is preferred (itself for
        // one ttl, by the others for a head start, below): it skips the comparison,
        // the others wait for it while it looks fit. Every
        // check above applies to it as to any candidate, and the others judge its
        // fitness by the same checks on what it published (its timeline, its lag):
        // a candidate that cannot take the key is not waited for (simulation seed
        // 1725160487: a switchover's named replica still on the old timeline had
        // four nodes wait a ttl). Only a publication fresher than the vacancy is
        // judged so: one from before it may predate the candidate's catching up
        // (a clean hand-over's candidate reaches the shutdown checkpoint only at
        // the end), and passing it over would hand a planned switchover to another
        // node. Safety does not depend on this: the acquire is a compare-and-set
        // (S3), and the candidate checks itself.
        // The requested candidate, alive, takes the key at its first tick once the
        // old lease is gone (it skips the fresh-position wait), well inside the head
        // start a better rival gets below: waited for no longer than that, counted
        // from when this node saw the old lease gone (no node may acquire before
        // its own such moment: counted from the DELETE, a lease that outlived it
        // used the head start up and a switchover went to another node, review of
        // f8e4c4c). Its member key outlives a lost host by up to a member-lease
        // TTL, and waiting for it that long broke the printed worst-case failover
        // (simulation seed 990011717: a manual failover's candidate lost its host;
        // four nodes waited 17 s). Past it, the candidate is one rival among the
        // others.
        let requested_limit = (self.timing.loop_wait + self.timing.retry_timeout) * 2;
        let requested_from = v.gone_at.map_or(v.at, |g| g.max(v.at));
        match self.preferred_candidate(now, view, &v) {
            Some(x) if x == me => {
                p.push(Action::Acquire);
                p.again = true;
                return Reason::Acquiring(format!(
                    "the requested candidate, at timeline {}, position {}",
                    obs.pg.timeline, obs.pg.lsn
                ));
            }
            Some(x)
                if now.since(requested_from) < requested_limit
                    && view.member(&x).is_some_and(|m| {
                        m.info.pg_healthy
                            && m.info.role == "replica"
                            && !m.info.tags.nofailover
                            && m.info.parse_error.is_none()
                            && (m.mod_revision <= v.seen_revision
                                || m.info.timeline >= newest
                                    && !(v.old_xlog > 0
                                        && v.old_xlog.saturating_sub(m.info.xlog_location)
                                            > self.timing.maximum_lag_on_failover))
                            && self.sync_allows(view, &x).is_ok()
                    }) =>
            {
                return Reason::Waiting(format!("{x} is the requested candidate"));
            }
            _ => {}
        }
        // Fresh positions only: members that published after the vacancy was seen.
        let fresh_wait = self.timing.loop_wait + self.timing.retry_timeout;
        let waited_enough = now.since(v.at) >= fresh_wait;
        // A better rival gets a bounded head start, never a veto. Alive, it takes the
        // key by its own `v.at + 2 L_w + R` (fresh-position wait, then its next tick);
        // one more `R` covers our `v.at` and its differing by a watch delivery or a
        // slow read. Past that it is presumed dead: its member key outlives its host
        // by up to a member-lease TTL, and deferring to it for that long broke the
        // printed worst-case failover (simulation seed 29722: a rival published a
        // fresh position and lost its host 70 ms later; four nodes waited 7 s).
        // Safety does not depend on who goes first (the acquire is a compare-and-set,
        // S3); only which position wins, which `maximum_lag_on_failover` bounds.
        let defer_limit = (self.timing.loop_wait + self.timing.retry_timeout) * 2;
        let deferred_enough = now.since(v.at) >= defer_limit;
        let mine = (obs.pg.timeline, obs.pg.lsn);
        let mut passed_over: Option<&str> = None;
        for m in &view.members {
            if m.name == me || Some(&m.name) == v.old_holder.as_ref() {
                continue;
            }
            let i = &m.info;
            // In synchronous mode a member the `sync` key does not allow is no rival
            // (else the sync standby would defer to a better-placed async one that
            // may not take the key, and nobody would).
            let eligible = i.pg_healthy
                && i.role == "replica"
                && !i.tags.nofailover
                && i.parse_error.is_none()
                && self.sync_allows(view, &m.name).is_ok();
            if !eligible {
                continue;
            }
            if m.mod_revision <= v.seen_revision {
                if !waited_enough {
                    return Reason::Waiting(format!(
                        "waiting for {} to publish a fresh position",
                        m.name
                    ));
                }
                continue;
            }
            let theirs = (i.timeline, i.xlog_location);
            if theirs > mine || (theirs == mine && m.name < me) {
                if !deferred_enough {
                    return Reason::Waiting(format!(
                        "{} is a better candidate (timeline {}, position {})",
                        m.name, i.timeline, i.xlog_location
                    ));
                }
                passed_over.get_or_insert(m.name.as_str());
            }
        }
        p.push(Action::Acquire);
        p.again = true;
        match passed_over {
            Some(rival) => Reason::Acquiring(format!(
                "{rival} placed better but has not taken the key within its head start of {} s; \
                 taking it at timeline {}, position {}",
                defer_limit.as_secs_f64(),
                mine.0,
                mine.1
            )),
            None => Reason::Acquiring(format!(
                "best candidate at timeline {}, position {}",
                mine.0, mine.1
            )),
        }
    }
}
