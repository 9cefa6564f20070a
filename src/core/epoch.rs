//! Epochs and etcd going back in time (DESIGN §3).
//!
//! Owns: the local data's epoch (the `tenure.epoch` row), the operator's
//! `confirm_epoch`, the highest revisions read (store and member keys), the
//! `rollback` marker and the refusals they imply.
//!
//! Must never: let a node lead or promote on an epoch regression or a rollback no
//! operator confirmed, or record an epoch over a higher unconfirmed one.

use super::model::*;
use super::{Core, Planner, State};

/// At most this many member keys are remembered for the rollback check (a scope full
/// of garbage member keys must not grow memory without bound).
const MEMBER_REVISIONS_CAP: usize = 1024;

impl Core {
    /// DESIGN §3: the local data was written under a higher epoch than `key_epoch`
    /// (etcd wiped or restored) and no operator confirmed it: the refusal text.
    pub(super) fn epoch_regression(&self, key_epoch: Epoch) -> Option<String> {
        let local = self.local_epoch?;
        if local <= key_epoch || self.confirm.as_ref().is_some_and(|c| c.up_to >= local) {
            return None;
        }
        Some(format!(
            "epoch regression: my data was written under epoch {local}, the leader key's epoch \
             is {key_epoch}: etcd was wiped or restored; after checking, confirm with \
             `tenure confirm-epoch --config FILE` (accepts data epochs up to {local})"
        ))
    }

    /// The epoch the shell should record in the local `tenure.epoch` row now: the
    /// leadership's, once PostgreSQL runs as primary under it, unless the row already
    /// holds it or holds a higher epoch nobody confirmed (never paper over a
    /// regression). Idempotent: a failed write is retried on the next iteration.
    pub fn epoch_to_write(&self, pg: &PgStatus) -> Option<Epoch> {
        let State::Leader(l) = &self.state else {
            return None;
        };
        // The row names its writer and lease too (seed 253898 review): a row of the
        // same epoch number written by another leadership (an etcd wiped and
        // refilled) is rewritten, and an older row without the lease gets it.
        let ours = pg.epoch == Some(l.epoch)
            && pg.epoch_row.member.as_deref() == Some(self.cfg.name.as_str())
            && pg.epoch_row.lease == Some(l.lease);
        if pg.role != PgRole::Primary || ours || pg.epoch_row.unread {
            return None;
        }
        if self.epoch_regression(l.epoch).is_some() {
            return None;
        }
        Some(l.epoch)
    }

    /// The epoch of the local data (the `tenure.epoch` row), if read in this run.
    pub fn local_epoch(&self) -> Option<Epoch> {
        self.local_epoch
    }

    /// DESIGN §3: remember the highest revision read (and each member key's), and
    /// notice when a read goes below it: etcd went back in time. The numeric
    /// comparison of the data's epoch with the leader key's misses a wipe once the
    /// new store's revisions pass the old epoch; this one compares etcd with itself.
    pub(super) fn note_revisions(&mut self, view: &ClusterView) {
        self.rollback_marker = view.rollback.clone();
        self.prior_max_revision = self.max_revision;
        // A missing header revision (0) says nothing.
        let mut back = None;
        if view.revision > 0 && view.revision < self.max_revision {
            back = Some(format!(
                "a read's revision went from {} back to {}",
                self.max_revision, view.revision
            ));
        }
        for m in &view.members {
            if back.is_none()
                && let Some(&old) = self.member_revisions.get(&m.name)
                && m.mod_revision < old
            {
                back = Some(format!(
                    "members/{} went from mod revision {old} back to {} (read at revision {})",
                    m.name, m.mod_revision, view.revision
                ));
            }
        }
        let detected = back.is_some();
        if let Some(reason) = back {
            self.rollback_seen = Some(RollbackSeen {
                seen_revision: self.max_revision,
                found_revision: view.revision,
                reason,
            });
            // The new store's history starts here.
            self.max_revision = 0;
            self.member_revisions.clear();
        }
        self.max_revision = self.max_revision.max(view.revision);
        if self.member_revisions.len() > MEMBER_REVISIONS_CAP {
            self.member_revisions.clear();
        }
        for m in &view.members {
            // A known member costs no allocation (issue 13): `entry` would need an
            // owned key, a clone of the name on every loop.
            match self.member_revisions.get_mut(&m.name) {
                Some(r) => *r = (*r).max(m.mod_revision),
                None => {
                    self.member_revisions
                        .insert(m.name.clone(), m.mod_revision.max(0));
                }
            }
        }
        if view.rollback.is_some() && !detected {
            // The marker is in etcd now: it governs, and only the operator clears it.
            // (A rollback seen in this very read is still reported once: the shell
            // logs it even when another node's marker was first.)
            self.rollback_seen = None;
        }
    }

    /// Why no node may take the leader key or promote: the `rollback` marker exists
    /// (garbage in it counts), or this node saw etcd go back in time and its marker is
    /// not readable yet. The text names the key and the command that clears it.
    pub(super) fn rollback_refusal(&self) -> Option<String> {
        let data = match self.local_epoch {
            Some(e) => format!("; this node's data carries epoch {e}"),
            None => String::new(),
        };
        if let Some(m) = &self.rollback_marker {
            let what = match &m.parse_error {
                Some(e) => {
                    format!("holds a value that does not parse ({e}): it counts as a marker")
                }
                None => format!(
                    "says etcd went back in time ({}: revision {} seen, {} found, by {} at {})",
                    m.reason, m.seen_revision, m.found_revision, m.by, m.at
                ),
            };
            return Some(format!(
                "the rollback marker {} {what}; no node takes the leader key or promotes until \
                 an operator checks that etcd was wiped or restored and no other primary runs, \
                 then runs `tenure confirm-epoch --config FILE`, which deletes {}{data}",
                m.key, m.key
            ));
        }
        let s = self.rollback_seen.as_ref()?;
        Some(format!(
            "etcd went back in time ({}); writing the rollback marker (key `rollback` in the \
             scope); no node takes the leader key or promotes until an operator runs \
             `tenure confirm-epoch --config FILE`{data}",
            s.reason
        ))
    }

    /// Step phase: the epoch facts of this observation. The local epoch row: only an
    /// answering PostgreSQL can tell (a stopped one keeps what we last read), and
    /// only when the read of the row succeeded: a failed read is no answer (it
    /// keeps what we knew, or leaves the row unknown), never "no row", which would
    /// pass the regression check (DESIGN §3). An empty data directory carries none.
    /// Then the operator's confirmation and the revisions of the read.
    pub(super) fn note_epochs(&mut self, obs: &Observation) {
        match (&obs.pg.data, obs.pg.role) {
            (_, PgRole::Primary | PgRole::Replica) if obs.pg.epoch_row.unread => {}
            (_, PgRole::Primary | PgRole::Replica) => {
                self.local_epoch = obs.pg.epoch;
                self.local_epoch_known = true;
                self.local_epoch_mine =
                    obs.pg.epoch_row.member.as_deref() == Some(self.cfg.name.as_str());
                self.local_epoch_lease = obs.pg.epoch_row.lease;
            }
            (DataDir::Empty, _) => {
                self.local_epoch = None;
                self.local_epoch_known = true;
                self.local_epoch_mine = false;
                self.local_epoch_lease = None;
            }
            _ => {}
        }
        if let Ok(view) = &obs.cluster {
            self.confirm = view.confirm_epoch.clone();
            self.note_revisions(view);
        }
    }

    /// Step phase, last in the plan so it never delays a fence: write the marker
    /// until a read shows it (create-only; `CreateInitialize` may already have
    /// written it).
    pub(super) fn plan_rollback_marker(&self, obs: &Observation, p: &mut Planner) {
        if let Some(s) = &self.rollback_seen
            && obs.cluster.is_ok()
            && !p.actions.contains(&Action::Exit)
        {
            p.push(Action::MarkRollback(s.clone()));
        }
    }
}
