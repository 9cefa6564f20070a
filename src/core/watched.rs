//! Which iterations may decide on the cluster view kept from the scope watch
//! instead of a linearizable read of the scope (issue 13 item 5).
//!
//! Owns: that rule, and the argument (below) that a view older than the iteration
//! lets no replica or candidate do anything unsafe under it; and when such a
//! follower reads the scope anyway (`kept_view_check`: a bounded time between
//! authenticated, linearizable reads) and whether that read may stand in for its
//! lease poll.
//!
//! Must never: let a decision that DESIGN §1/§3 require to rest on a linearizable
//! read rest on the kept view — an acquire and everything a candidate weighs
//! (§1 step 1, step 4, §3a's fresh positions), a leader's renewal and everything
//! a leader writes (§1 steps 2, 5), an adoption (S4), a bootstrap, the first
//! decision after start-up, anything while etcd may have gone back in time (§3).

use std::time::Duration;

use super::model::*;
use super::time::Instant;
use super::{Core, State};

/// What backs an iteration's kept view (`Core::kept_view_check`), once the core
/// accepted it (`Core::watched_view_serves`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptViewCheck {
    /// This iteration's `LeaseTimeToLive` of the followed lease: the kept view
    /// serves if the poll agrees with it (the usual iteration, one request).
    Poll,
    /// A linearizable range over the scope instead of the poll (still one
    /// request): the read is due, and the poll would add nothing the next one does
    /// not give before any DELETE could be judged on time. The shell skips the poll
    /// only if the read shows the followed key on the followed lease.
    Read,
    /// The read is due, and the poll comes with it (two requests this iteration):
    /// the followed lease's `E_max` is too close for a poll to be skipped.
    ReadAndPoll,
}

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

    /// On an iteration whose kept view the core accepted: is it backed by the
    /// usual `LeaseTimeToLive` poll, or is a linearizable read of the scope due
    /// (`last_read`: when the shell's last successful one was sent)?
    ///
    /// A follower serving from the kept view sends only the poll, which etcd
    /// answers from its leader's lessor, without a quorum read and (3.4) without
    /// checking the auth token; its watch was authorised once, when it opened. So
    /// once every `ttl / 3` (the member lease's keepalive cadence, less `R` for the
    /// grid's jitter) it reads the scope instead: a refused token (etcd restarted,
    /// `auth disable`/`enable`, an expired simple token) shows within that bound,
    /// not at the first read of a vacancy (which would cost the failover a loop),
    /// and the view rests on a quorum read at least that often (review W1).
    ///
    /// INVARIANT: the read replaces the poll (`Read`) only while `E_max >= now +
    /// 2 (L_w + R)`. A DELETE before the next poll then is judged early either way
    /// (DESIGN §1 step 4): before `E_max`, or past it and so more than `L_w + R`
    /// after the last poll; and one after the next poll is judged on that poll
    /// alone, as always. So skipping a poll never makes a DELETE look on time, and
    /// in a healthy cluster (`E_max` about `ttl - L_w` ahead) the next poll comes
    /// long before `E_max`, so it delays no failover either. With `E_max` closer
    /// (a leader that stopped renewing, a ttl at S6 a's limit) both are sent.
    pub fn kept_view_check(&self, now: Instant, last_read: Option<Instant>) -> KeptViewCheck {
        let every = Duration::from_secs(u64::from(self.timing.ttl)) / 3;
        let r = self.timing.retry_timeout;
        let due = last_read.is_none_or(|at| now.since(at) >= every.saturating_sub(r));
        if !due {
            return KeptViewCheck::Poll;
        }
        let l_w_r = self.timing.loop_wait + r;
        let far = self.track.last_poll.is_some()
            && self.track.e_max.is_some_and(|e| e >= now.add(l_w_r * 2));
        if far {
            KeptViewCheck::Read
        } else {
            KeptViewCheck::ReadAndPoll
        }
    }
}
