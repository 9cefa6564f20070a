//! The leader-lease TTLs this node saw recently, published in its member key
//! (`leader_ttl_seen`), and the floor they give an old lease's TTL after a crash.
//!
//! Why (seed 253898 review, DESIGN §1 step 4, §5): a promote delay without a
//! watchdog figure waits the *old* lease's granted TTL. After `ttl` is lowered in
//! `config`, the old leader may still hold a lease granted under the old ttl; a node
//! that knew it (a poll's `grantedTTL`, the holder's `leader_ttl`) loses it in a
//! crash, and after a revoke etcd no longer tells (`LeaseTimeToLive` answers -1).
//! Every member publishes the largest TTL it saw in the last `ttl + R + M` of
//! seeing it, so a restarted node (the winner adopting its own key, a candidate that
//! never polled the old lease) folds in what the others, and its own member key
//! from before the crash (bound to its member lease, which outlives a quick
//! restart), still show.
//!
//! Owns: the small table of (granted TTL, kept until) and the value published.
//!
//! Must never: shorten a wait (every use takes a maximum with what else is known),
//! grow without bound (a fixed table; an overflow merges entries, which only
//! lengthens), or republish at every step a value folded in from another member (a
//! value passed around would never decay). The table holds this node's own
//! sightings, the TTL a win or an adoption counted its promote delay with (the one
//! thing a second crash inside that delay must find), and, once per run, what our
//! own member key published before the restart (our first publish overwrites it),
//! each kept for one such TTL.

use std::time::Duration;

use super::model::*;
use super::time::Instant;
use super::{Core, State};

/// Distinct TTLs remembered at once (more than one only around a ttl change).
const SLOTS: usize = 4;

/// A leader lease's TTL as a promote delay may use it: whole seconds, at most
/// [`MAX_TTL`], which no validated configuration exceeds (`validate_timing`).
/// Anything larger is garbage (another writer, a garbled key: the shell's parse
/// leaves it out and says so) and is left out here too, so it can neither block a
/// failover nor be kept and republished (fresh-eyes review of seed 253898, R1).
pub(super) fn sane_ttl(t: i64) -> Option<u32> {
    u32::try_from(t).ok().filter(|t| *t <= MAX_TTL)
}

/// (granted TTL in whole seconds, kept until).
#[derive(Clone, Debug, Default)]
pub(super) struct TtlSeen {
    slots: [Option<(u32, Instant)>; SLOTS],
    /// Our own member key's value was read once in this run (and carried on).
    own_carried: bool,
}

impl TtlSeen {
    /// Remember `ttl` until `until` (extending an entry of the same TTL).
    fn note(&mut self, now: Instant, ttl: u32, until: Instant) {
        // INVARIANT: every TTL kept (and so published) is at most `MAX_TTL`, kept at
        // most `MAX_TTL + R + M` past its last sighting.
        if ttl == 0 || ttl > MAX_TTL {
            return;
        }
        if let Some(s) = self.slots.iter_mut().flatten().find(|s| s.0 == ttl) {
            s.1 = s.1.max(until);
            return;
        }
        // A free slot, an expired one, or one the new entry covers entirely.
        let free = self.slots.iter_mut().find(|s| match s {
            None => true,
            Some((t, u)) => *u <= now || (*t <= ttl && *u <= until),
        });
        if let Some(s) = free {
            *s = Some((ttl, until));
            return;
        }
        // Full: merge into the entry of the smallest TTL. The merged entry covers
        // both (the larger TTL, the later end): it only ever lengthens.
        if let Some(s) = self.slots.iter_mut().flatten().min_by_key(|s| s.0) {
            *s = (s.0.max(ttl), s.1.max(until));
        }
    }

    /// The largest TTL still kept at `now`.
    fn max_at(&self, now: Instant) -> Option<u32> {
        self.slots
            .iter()
            .flatten()
            .filter(|(_, u)| *u > now)
            .map(|(t, _)| *t)
            .max()
    }
}

impl Core {
    /// What this node publishes as `leader_ttl_seen` (as of its last step): the
    /// largest leader-lease TTL it saw itself, kept `ttl + R + M` past the last
    /// sighting. Changes only with a ttl change (and once more when it decays), so an
    /// idle cluster writes nothing for it (issue 13 item 5).
    pub fn leader_ttl_seen(&self) -> Option<u32> {
        self.ttl_seen.max_at(self.last_step?)
    }

    /// `ttl` was in force for a leader lease seen at `at`: its holder may fence as
    /// late as `ttl - M` after its last renewal, itself before the lease's DELETE,
    /// itself before the end of any vacancy that followed (refreshed while open).
    /// Kept `R + M` longer than that.
    pub(super) fn note_ttl_seen(&mut self, at: Instant, ttl: u32) {
        let t = &self.timing;
        let until = at.add(Duration::from_secs(u64::from(ttl)) + t.retry_timeout + t.safety_margin);
        self.ttl_seen.note(at, ttl, until);
    }

    /// Step phase (after the vacancy is tracked): this iteration's own sightings of
    /// a leader lease's granted TTL. A live key's (the holder's published TTL or a
    /// poll's `grantedTTL`), the open vacancy's old lease, our own leadership's.
    pub(super) fn note_ttls_seen(&mut self, now: Instant, obs: &Observation) {
        if !self.ttl_seen.own_carried
            && let Ok(view) = &obs.cluster
        {
            // The first read of this run: what our member key published before a
            // restart is carried on for one more TTL (the key is rewritten by our
            // first publish after this step; a second crash must still find it).
            self.ttl_seen.own_carried = true;
            if let Some(g) = view
                .member(&self.cfg.name)
                .and_then(|m| m.info.leader_ttl_seen)
            {
                self.note_ttl_seen(now, g);
            }
        }
        if let Some(g) = obs
            .lease_poll
            .as_ref()
            .and_then(|p| p.granted_ttl)
            // etcd's own answer; `note_ttl_seen` still drops one above `MAX_TTL`:
            // what a restart remembers is capped like every published value
            // (docs/design.md, review of 88463a7 F3).
            .and_then(|g| u32::try_from(g).ok())
        {
            self.note_ttl_seen(now, g);
        }
        let live = obs
            .cluster
            .as_ref()
            .ok()
            .and_then(|v| v.leader.as_ref())
            .is_some_and(|k| self.track.lease == Some(k.lease));
        if live && let Some(g) = self.track.holder_ttl {
            self.note_ttl_seen(now, g);
        }
        if let Some(g) = self.vacancy.as_ref().and_then(|v| v.old_ttl) {
            self.note_ttl_seen(now, g);
        }
        if let State::Leader(l) = &self.state {
            let g = l.ttl;
            self.note_ttl_seen(now, g);
        }
    }

    /// A lower bound on an old lease's TTL from what is seen now: this node's own
    /// recent sightings and the largest `leader_ttl_seen` any member publishes (its
    /// own key from before a crash included). 0: nothing known.
    pub(super) fn ttl_floor(&self, now: Instant, obs: &Observation) -> u32 {
        let published = obs
            .cluster
            .as_ref()
            .map(|v| {
                v.members
                    .iter()
                    .filter_map(|m| m.info.leader_ttl_seen)
                    .filter_map(|t| sane_ttl(t.into()))
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        self.ttl_seen.max_at(now).unwrap_or(0).max(published)
    }
}
