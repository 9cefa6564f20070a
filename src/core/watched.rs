//! Which iterations may decide on the cluster view kept from the scope watch
//! instead of a linearizable read of the scope (issue 13 item 5).
//!
//! Owns: that rule, and the argument (below) that a view older than the iteration
//! lets no replica or candidate do anything unsafe under it.
//!
//! Must never: let a decision that DESIGN §1/§3 require to rest on a linearizable
//! read rest on the kept view — an acquire and everything a candidate weighs
//! (§1 step 1, step 4, §3a's fresh positions), a leader's renewal and everything
//! a leader writes (§1 steps 2, 5), an adoption (S4), a bootstrap, the first
//! decision after start-up, anything while etcd may have gone back in time (§3).

use super::model::*;
use super::{Core, State};

impl Core {
    /// May this iteration's step take `view` — the last full read with every watch
    /// event since applied in order (`dcs::view`), complete up to its revision but
    /// possibly older than the iteration — as its `Observation::cluster`? Asked by
    /// the shell before the step; pure, it changes nothing.
    ///
    /// Only a plain follower of a leader it already followed at the last step, with
    /// no vacancy open: `State::Follower`, the view's `leader` names another node,
    /// and its lease is the one this node tracks, so this iteration's
    /// `LeaseTimeToLive` poll (`lease_to_poll`) is of that very key's lease. The
    /// shell checks the poll against the view and reads the scope when they
    /// disagree (the lease gone or without keys while the view shows the key), and
    /// makes no iteration on the kept view without that poll answering (DESIGN §3:
    /// the watch is never the only way a replica learns the key changed; the poll is
    /// its per-loop re-read of `leader`).
    ///
    /// INVARIANT: what such a step decides from `view`, and why a stale view is safe
    /// there (the view can only be behind etcd, never ahead of it or made up: every
    /// value in it was in etcd at its revision):
    /// - *The leader key* (`track_vacancy`, `follow`): a stale key that still names
    ///   the old leader delays the vacancy by the staleness; no action a follower
    ///   takes on a leader key can give it the key (only the acquire txn can, S3,
    ///   and that comes only after a vacancy, read linearizably). `E_max` comes from
    ///   polls of the tracked lease, not from the view, so a late view never moves
    ///   it. A DELETE reaches the agent through the same watch stream as the view's
    ///   events, so the `leader_deleted_at` the vacancy is dated with is no later
    ///   than today's; and a view without a leader key is never used (a read is).
    /// - *S4, a local primary*: fenced whatever the view says (`follow`: only the
    ///   first decision, never taken on a kept view, may adopt).
    /// - *The leader's member key* (whom to clone, rewind from, stream from): a
    ///   stale one points replication at a node that may no longer serve it; the
    ///   job fails and is retried, the data is never touched but by `pg_rewind` or
    ///   a basebackup of a running primary, which the leader's own key vouches for.
    /// - *`history`* (divergence, §3a): it only grows, so a stale one lacks the
    ///   newest switch point; a replica then notices its fork later, never wrongly.
    /// - *`initialize`*: never deleted; a stale one is the same one.
    /// - *`config`* (timing, pause), applied by the shell with S6 checked against
    ///   what is armed: a follower arms nothing and renews nothing; a late change
    ///   reaches it by the staleness, and every candidate reads before it races (and
    ///   its acquire txn compares `config`'s mod revision anyway).
    /// - *`sync`, `release`, `failover`, the other members' positions*: weighed only
    ///   by a candidate (vacancy: read) or the leader (reads).
    /// - *Revisions* (`note_revisions`, §3's rollback check): a kept view's revision
    ///   and its member keys' mod revisions only move forward, so it can hide a
    ///   rollback for as long as the watch lasts, never invent one; a restarted
    ///   etcd breaks the watch, and the read that follows is compared as always.
    /// - *The member key's publication* (shell): a view lacking this node's key
    ///   makes it write the key again, as a read lacking it did; a stale view that
    ///   still shows it delays that by the staleness.
    pub fn watched_view_serves(&self, view: &ClusterView) -> bool {
        if self.state != State::Follower
            || self.vacancy.is_some()
            || self.late_delete.is_some()
            || self.rollback_seen.is_some()
            || self.rollback_marker.is_some()
            || view.rollback.is_some()
        {
            return false;
        }
        let Some(k) = &view.leader else {
            return false;
        };
        k.name != self.cfg.name
            && self.track.lease == Some(k.lease)
            && self.lease_to_poll() == Some(k.lease)
    }
}
