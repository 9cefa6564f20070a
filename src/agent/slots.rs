//! The loop's side of the `status` key and of replicas' slot copies.
//!
//! Owns: what the leader last wrote to `status` (its WAL position and the
//! positions of the physical slots it keeps), and a replica's last run of its
//! slot copies (`pg::slots` plans them; `PgCtl::copy_slots` runs the SQL).
//!
//! Must never: write `status` unguarded (DESIGN §1 step 5: a stale leader's write
//! is refused, and a refusal is lost leadership), write it while nothing changed
//! (an idle cluster writes nothing to etcd, issue 13 item 5), or let slot upkeep
//! decide anything about leadership: a copy is WAL kept for a consumer, nothing
//! the core reads. None of this runs on a leader's renewal path: `status` is
//! written after the iteration's actions, each call bounded by its deadline.

use std::time::Duration;

use log::{debug, info, warn};

use super::Agent;
use crate::clock;
use crate::core::model::{Epoch, Lsn, Observation, PgRole};
use crate::core::time::Instant;
use crate::pg::{self, slots as pgslots};

/// A change of the published slot positions alone (the optime unchanged) is
/// written at most this often, and a replica's copies advanced at most this
/// often: a copy behind its consumer only keeps a little more WAL, and a write
/// per loop for it would double what a leader under load writes.
pub(super) const SLOT_POSITIONS_EVERY: Duration = Duration::from_secs(5);

/// What the leader last wrote to `status`.
#[derive(Debug)]
pub(super) struct StatusWritten {
    epoch: Epoch,
    optime: Lsn,
    slots: Option<Vec<(String, Lsn)>>,
    retain: Option<Vec<String>>,
    /// Its inputs, compared before anything is parsed: the probe's slot column
    /// and the slot upkeep it was published from (`SlotsMade::at`).
    seen: Option<String>,
    made_at: Option<Instant>,
    at: Instant,
}

/// A replica's last run of its slot copies: its inputs (compared before anything
/// is parsed) and when it last changed something.
#[derive(Debug)]
pub(super) struct CopyRun {
    copies: bool,
    seen: Option<String>,
    published: Vec<(String, Lsn)>,
    ignore: Vec<crate::config::IgnoreSlot>,
    at: Instant,
    worked_at: Option<Instant>,
    error: Option<String>,
    /// Creates PostgreSQL refused, and when: not tried again for
    /// [`super::SLOTS_RECHECK`] (each try is an ERROR in PostgreSQL's log, and
    /// under load the inputs change every loop).
    refused: Vec<(String, Instant)>,
    /// Copies said to start after their consumer's position (`CopyWork::ahead`).
    ahead: Vec<String>,
}

impl Agent {
    /// `Action::SyncSlots`: the leader's slot upkeep (`PgCtl::sync_slots`): one
    /// slot per other member, the permanent ones, and departed members' for
    /// `member_slots_ttl` ([`pgslots::Retention`]). Run again when an input
    /// changed, a kept slot's time ran out, or [`super::SLOTS_RECHECK`] passed.
    pub(super) fn sync_slots(&mut self, members: Vec<String>, obs: &Observation) {
        let Some(epoch) = self.core.leadership().map(|l| l.epoch) else {
            return;
        };
        let pm = self.pg.postmaster_pid().unwrap_or(0);
        let now = clock::now();
        let ttl = self.cfg.dynamic.member_slots_ttl;
        let (permanent, ignore) = (&self.cfg.dynamic.slots, &self.cfg.dynamic.ignore_slots);
        // Nothing changed since the last upkeep of this leadership: no work, and
        // nothing allocated on the leader's loop (review L4).
        if self.slots.as_ref().is_some_and(|d| {
            d.epoch == epoch
                && d.postmaster == pm
                && d.members == members
                && d.permanent == *permanent
                && d.ignore == *ignore
                && d.ttl == ttl
                && d.retained_until.is_none_or(|t| now < t)
                && now.since(d.at) < super::SLOTS_RECHECK
        }) {
            return;
        }
        let mine = pg::slot_name(&self.cfg.name);
        let current: Vec<String> = members.iter().map(|m| pg::slot_name(m)).collect();
        let published = obs
            .cluster
            .as_ref()
            .ok()
            .and_then(|v| v.status_retain_slots.as_deref());
        let (retained, retained_until) = self
            .retention
            .update(now, epoch, &current, published, &mine, ttl);
        let (permanent, ignore) = (permanent.clone(), ignore.clone());
        let out = match self.pg.sync_slots(
            &members,
            &permanent,
            &retained,
            &ignore,
            self.deadline(Duration::from_secs(1)),
        ) {
            Ok(out) => out,
            Err(e) => {
                warn!("replication slots: {e}");
                return;
            }
        };
        for g in &out.gave_up {
            info!(
                "slot {g} of a departed member was invalidated by PostgreSQL \
                 (max_slot_wal_keep_size): dropped, not kept any longer"
            );
            self.retention.forget(g);
        }
        let error = (!out.errors.is_empty()).then(|| out.errors.join("; "));
        match &error {
            // Said once per distinct error; the upkeep runs again on a change or
            // after the recheck, not every loop.
            Some(e) if self.slots.as_ref().and_then(|d| d.error.as_ref()) != Some(e) => {
                warn!("replication slots: {e}")
            }
            Some(e) => debug!("replication slots: {e}"),
            None => {}
        }
        if self.slots.as_ref().is_none_or(|d| d.retained != retained) && !retained.is_empty() {
            info!(
                "keeping the slots of departed members {retained:?} (member_slots_ttl {} s)",
                ttl.as_secs()
            );
        }
        self.slots = Some(super::SlotsMade {
            at: now,
            epoch,
            postmaster: pm,
            members,
            permanent,
            ignore,
            ttl,
            retained,
            retained_until,
            error,
        })
    }

    /// Patroni's `status` key (`{"optime": N, "slots": {...}}`, DESIGN §4): the
    /// leader's WAL position, which replicas' `?lag=` checks and `patronictl list`
    /// measure lag against, and the restart positions of the member and permanent
    /// slots it keeps, which replicas copy ahead of a failover. Written by the
    /// leader of a running primary when the optime changed, or when only the
    /// slots' positions did and the last write is [`SLOT_POSITIONS_EVERY`] old;
    /// guarded by the epoch (DESIGN §1 step 5: a stale leader's write is refused).
    pub(super) fn publish_status(&mut self, obs: &Observation) {
        let Some(l) = self.core.leadership() else {
            return;
        };
        let (epoch, optime) = (l.epoch, obs.pg.lsn);
        if !l.promoted || obs.pg.role != PgRole::Primary || optime == 0 {
            return;
        }
        let now = clock::now();
        let made_at = self.slots.as_ref().map(|m| m.at);
        let seen = obs.pg.report.slots_json.as_deref();
        if let Some(w) = &self.status_written
            && w.epoch == epoch
            && w.optime == optime
            && ((w.seen.as_deref() == seen && w.made_at == made_at)
                || now.since(w.at) < SLOT_POSITIONS_EVERY)
        {
            return;
        }
        let mine = pg::slot_name(&self.cfg.name);
        let slots = self.slots.as_ref().map(|made| {
            let keep: Vec<String> = made
                .members
                .iter()
                .map(|m| pg::slot_name(m))
                .chain(made.permanent.iter().cloned())
                .chain(made.retained.iter().cloned())
                .filter(|s| *s != mine)
                .collect();
            pgslots::published(&pgslots::parse_local(seen), &keep)
        });
        // Every member slot this leadership keeps, its own among them: the next
        // leader keeps them for `member_slots_ttl` (this node's, for its rejoin).
        // Built from the retention state, not the last upkeep's result: one that
        // failed must not leave the next leader nothing to keep (review M2).
        let retain = self.retention.names(epoch).map(|mut r| {
            r.push(mine.clone());
            r.sort();
            r.dedup();
            r
        });
        let seen = seen.map(str::to_string);
        if let Some(w) = &mut self.status_written
            && w.epoch == epoch
            && w.optime == optime
            && w.slots == slots
            && w.retain == retain
        {
            // The slots' text moved (an active slot's position that is not
            // published, say) but nothing published did: nothing to write.
            (w.seen, w.made_at) = (seen, made_at);
            return;
        }
        let value = crate::dcs::encode_status(optime, slots.as_deref(), retain.as_deref());
        let deadline = self.deadline(self.core.timing().retry_timeout);
        let me = self.cfg.name.clone();
        if let Some((etcd, rt)) = self.connect(deadline) {
            match etcd.guarded_put(rt, "status", &value, &me, epoch, deadline) {
                Ok(true) => {
                    self.status_written = Some(StatusWritten {
                        epoch,
                        optime,
                        slots,
                        retain,
                        seen,
                        made_at,
                        at: now,
                    })
                }
                // Leadership is lost: fence in the very next step, as for every
                // refused guarded write.
                Ok(false) => self.pending.guard_refused = Some("the status key write".into()),
                Err(e) => debug!("status key: {e}"),
            }
        }
    }

    /// `Action::CopySlots`: keep this replica's copies of the slots the leader
    /// publishes (`pg::slots::plan_copies`). Nothing while the leader publishes
    /// no list (an older agent, or one whose upkeep has not run): the slots here
    /// are left alone. Inputs unchanged since the last run (and younger than the
    /// leader's recheck) are no work; advances alone wait
    /// [`SLOT_POSITIONS_EVERY`] after the last run that changed something.
    pub(super) fn copy_slots(&mut self, copies: bool, obs: &Observation) {
        let Ok(view) = &obs.cluster else {
            return;
        };
        let Some(published) = pgslots::fresh_list(view) else {
            return;
        };
        let now = clock::now();
        let seen = obs.pg.report.slots_json.as_deref();
        let ignore = &self.cfg.dynamic.ignore_slots;
        let last = self.slot_copies.as_ref();
        if let Some(r) = last
            && r.copies == copies
            && r.seen.as_deref() == seen
            && r.published == published
            && r.ignore == *ignore
            && now.since(r.at) < super::SLOTS_RECHECK
        {
            return;
        }
        let mut w = pgslots::plan_copies(
            &pgslots::parse_local(seen),
            published,
            &pg::slot_name(&self.cfg.name),
            copies,
            ignore,
            obs.pg.report.replay_lsn,
        );
        let mut refused: Vec<(String, Instant)> = last
            .map(|r| r.refused.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, at)| now.since(*at) < super::SLOTS_RECHECK)
            .collect();
        w.creates.retain(|n| !refused.iter().any(|(r, _)| r == n));
        let mut ahead = last.map(|r| r.ahead.clone()).unwrap_or_default();
        for (name, bytes) in &w.ahead {
            if !ahead.contains(name) {
                warn!(
                    "slot copy {name} starts {bytes} bytes after the position its consumer \
                     confirmed on the leader (it was made here while the consumer was behind \
                     this standby's last restartpoint; PostgreSQL cannot move a slot back): a \
                     failover to this node before the consumer passes it leaves the consumer \
                     a gap"
                );
                ahead.push(name.clone());
            }
        }
        ahead.retain(|n| {
            let still = w.ahead.iter().any(|(a, _)| a == n);
            if !still {
                info!("slot copy {n} no longer starts after its consumer's position");
            }
            still
        });
        let worked_at = last.and_then(|r| r.worked_at);
        let deferred = !w.changes_set()
            && !w.advances.is_empty()
            && worked_at.is_some_and(|t| now.since(t) < SLOT_POSITIONS_EVERY);
        if deferred {
            // Not recorded (the next loop plans again, and runs once it is time),
            // but for what was said.
            if let Some(r) = self.slot_copies.as_mut() {
                r.ahead = ahead;
            }
            return;
        }
        let mut run = CopyRun {
            copies,
            seen: seen.map(str::to_string),
            published: published.to_vec(),
            ignore: ignore.clone(),
            at: now,
            worked_at,
            error: last.and_then(|r| r.error.clone()),
            refused: Vec::new(),
            ahead,
        };
        if !w.is_empty() {
            run.worked_at = Some(now);
            let result = self
                .pg
                .copy_slots(&w, self.deadline(Duration::from_secs(1)))
                .map_err(|e| e.to_string())
                .and_then(|o| {
                    refused.extend(o.refused.iter().map(|n| (n.clone(), now)));
                    if o.errors.is_empty() {
                        Ok(())
                    } else {
                        Err(o.errors.join("; "))
                    }
                });
            match result {
                Ok(()) => {
                    run.error = None;
                    if w.changes_set() {
                        info!(
                            "slot copies of the leader's slots: dropped {:?}, made {:?}",
                            w.drops, w.creates
                        );
                    }
                    if !w.advances.is_empty() {
                        debug!("slot copies advanced: {:?}", w.advances);
                    }
                }
                Err(e) => {
                    // Said once per distinct error: under write load the inputs
                    // change every loop, and so would the line.
                    if run.error.as_deref() != Some(e.as_str()) {
                        warn!("slot copies: {e}");
                    } else {
                        debug!("slot copies: {e}");
                    }
                    run.error = Some(e);
                }
            }
        }
        run.refused = refused;
        self.slot_copies = Some(run);
    }
}
