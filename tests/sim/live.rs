//! Liveness check (3): "a healthy majority elects a leader within the worst-case
//! failover `tenure check-config` prints, counted from the later of the last
//! processed keepalive and the last DCS leader change".
//!
//! The world records, after every event, the facts the bound depends on (every
//! keepalive etcd processed per lease, etcd leader changes, every change of the
//! `leader` key and why it went, whether a leader is elected, whether a healthy
//! majority exists); [`check`] evaluates the bound on that history at the end.
//!
//! - **Elected**: the key names a node whose PostgreSQL runs as a writable primary
//!   (not being fenced).
//! - **Healthy**: host up, agent running and not frozen, reachable from etcd (no
//!   partition, no held-back answers), PostgreSQL data present; etcd has a leader.
//! - **Where it applies**: from `C = max(end of the last fault, start of the final
//!   healthy-majority interval)`; the majority must hold from then to the end.
//! - **The bound** (`Schedule::budget`, i.e. `tenure::config::budget`):
//!   `failover_worst = ttl + 0.5 s sweep + 3 L_w + 2 R`, plus `early_expiry_delay`
//!   (`2W + R + M` with the old leader's own `W` if it ran a watchdog and was
//!   elected under its key, `ttl + R` if not: review F2) when the expiry was early, plus one `L_w` for fresh positions ([`fresh_allowance`]),
//!   plus [`SLACK`], counted from
//!   `base = max(last keepalive etcd processed for the old lease, last etcd leader
//!   change + election timeout, start of the healthy majority)`.
//!   The `+ election timeout`: after a leader change etcd resets every lease to its
//!   full TTL **plus one election timeout** (DESIGN §1 step 3), so counted from the
//!   change the printed number is short by that much; the world's etcd models it.
//! - **Early**: etcd removed the key before the lease's own expiry (a revoke, an
//!   operator delete, a release) and not as a clean release (published marker), or
//!   the node that wins had no `LeaseTimeToLive` answer for the old lease in the
//!   `L_w + R` before the removal: DESIGN §1 step 4 ("a stale prediction proves
//!   nothing") makes it wait the early-expiry delay too, and so does a winner whose
//!   scope watch was closed when the key went (it cannot know whether a whole
//!   leadership came and went unseen). Such a winner (typically
//!   restarted, or cut off until just before) also counts only from when it became
//!   healthy: `base` takes the start of its last healthy interval.
//! - **A key made and removed early before the election** by a holder that never
//!   ran under it (an acquire txn applied after the read that decided it lost, its
//!   lease revoked: `TENURE_SIM_NO_LATE_ACQUIRE`): to every other node an early
//!   DELETE of a holder that may have promoted (F2), so the bound adds `ttl + R`.
//! - **Adopted after a restart** (seed 253898): a winner whose agent restarted
//!   after its key was created and before it was elected adopts the key with no
//!   record of its promote delay and waits the conservative one (`ttl + R`) from
//!   the adoption: `base` takes that restart and the bound adds that delay.
//! - **Synchronous mode**: only the leader the `sync` key names, or the standby it
//!   lists, may take over (the key as it stood when the old leader's key went; no
//!   key: anyone). None of them healthy at the end: skipped (failover impossible by
//!   design: the listed standby lost, or strict/degraded with the leader lost).
//!   Else `base` also takes the start of the first of them to be healthy to the
//!   end, and the bound adds [`sync_allowance`] (the names must settle before a
//!   promotion; `tenure check-config` does not print that part).

use std::collections::HashMap;
use std::time::Duration;

use tenure::core::model::*;
use tenure::core::time::Instant;

use super::world::{Schedule, WATCH_LAG_MAX};

/// Fixed slack for the simulated PostgreSQL actions on the takeover path: a
/// promote (`pg_promote()`, at most 0.3 s here) or a start (at most 0.21 s), plus
/// 0.09 s for slow etcd answers (the world delays 3 % of them by up to 0.12 s).
pub const SLACK: Duration = Duration::from_millis(600);

/// The fresh-position allowance, now part of the printed takeover `3 L_w + 2 R`
/// (zero here; kept so the bound's terms stay visible). A candidate compares only positions written after the first read that
/// showed the key absent (DESIGN §3a, "bounded wait" of `L_w + R`), and the loop
/// re-evaluates only at its ticks. Replicas woken by the same watch event publish
/// before that read as often as after it, so their fresh positions count only from
/// their next tick, or the wait runs out at `L_w + R` and is noticed at the tick after:
/// the takeover takes up to `2 L_w + R` after the DELETE (seed 1978: 3.77 s with
/// `L_w` 2 s, `R` 1 s). A better rival that dies after publishing holds the others
/// back for its head start `2 (L_w + R)`, noticed at the next tick: `3 L_w + 2 R`
/// (seed 29722).
pub fn fresh_allowance(_sched: &Schedule) -> Duration {
    Duration::ZERO
}

/// Synchronous mode's extra on the takeover path, not in the printed number: the
/// winner writes the `sync` key naming itself, sets `synchronous_standby_names`
/// and promotes only once the names held for a loop (`names_settled`).
pub fn sync_allowance(sched: &Schedule) -> Duration {
    match sched.sync() {
        SyncMode::Off => Duration::ZERO,
        _ => sched.bound_timing().loop_wait * SYNC_ALLOWANCE_LW,
    }
}

/// Loops of [`sync_allowance`].
pub const SYNC_ALLOWANCE_LW: u32 = 2;

/// One removal of the `leader` key.
#[derive(Clone, Debug)]
pub struct Removal {
    pub at: Instant,
    pub key: LeaderKey,
    /// Before the lease's expiry by etcd's own clock.
    pub early: bool,
    /// The holder published a clean release of this epoch first.
    pub clean: bool,
}

#[derive(Default)]
pub struct LiveRec {
    /// Per lease: the grant and every keepalive etcd processed (TTL > 0).
    pub ka: HashMap<LeaseId, Vec<Instant>>,
    /// Instants a new etcd leader took over (leases extended).
    pub etcd_changes: Vec<Instant>,
    /// Every change of the `leader` key.
    pub keys: Vec<(Instant, Option<LeaderKey>)>,
    pub removals: Vec<Removal>,
    /// Transitions of "a leader is elected".
    pub elected: Vec<(Instant, bool)>,
    /// Transitions of "a healthy majority exists".
    pub majority: Vec<(Instant, bool)>,
    /// The node the key names now.
    pub holder: Option<usize>,
    /// Per node: transitions of "healthy".
    pub healthy: Vec<Vec<(Instant, bool)>>,
    /// (node, lease) -> when the node sent its last `LeaseTimeToLive` etcd answered in time.
    pub polls: HashMap<(usize, LeaseId), Instant>,
    /// Per node: transitions of "its scope watch is open" (closed: a change lost).
    pub watch_open: Vec<Vec<(Instant, bool)>>,
    /// Expiry (etcd's clock) of the lease of the key as last observed.
    pub prev_expiry: Option<Instant>,
    /// Every change of the `sync` key.
    pub sync: Vec<(Instant, Option<SyncKey>)>,
    /// The `sync` key's mod revision as last observed.
    pub sync_rev: Option<i64>,
    /// Per node: every (re)start of its agent (`Ev::Restart`).
    pub starts: HashMap<usize, Vec<Instant>>,
}

fn state_at(tr: &[(Instant, bool)], t: Instant) -> bool {
    tr.iter()
        .rev()
        .find(|(at, _)| *at <= t)
        .is_some_and(|x| x.1)
}

pub fn push_transition(tr: &mut Vec<(Instant, bool)>, at: Instant, v: bool) {
    if tr.last().map(|x| x.1) != Some(v) {
        tr.push((at, v));
    }
}

/// What check (3) found.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// Not applicable (why).
    Skipped(String),
    Checked {
        /// From `base` to the election (zero if elected at `C`).
        took: Duration,
        bound: Duration,
        /// The printed part of `bound`: `failover_worst` (+ `early_expiry_delay`).
        printed: Duration,
        early: bool,
        /// Which term set `base`: 0 keepalive, 1 etcd change, 2 healthy majority,
        /// 3 the winner becoming healthy, 4 a node the `sync` key allows becoming
        /// healthy (5: elected at `C`, no base).
        base_from: usize,
        /// `Some(text)` if the bound was missed.
        late: Option<String>,
    },
}

pub fn check(
    rec: &LiveRec,
    sched: &Schedule,
    quiet: Instant,
    end: Instant,
    election_timeout: Duration,
) -> Verdict {
    let Some(&(s, true)) = rec.majority.last() else {
        return Verdict::Skipped("no healthy majority at the end of the run".into());
    };
    let c = s.max(quiet);
    if state_at(&rec.elected, c) {
        return Verdict::Checked {
            took: Duration::ZERO,
            bound: Duration::ZERO,
            printed: Duration::ZERO,
            early: false,
            base_from: 5,
            late: None,
        };
    }
    let elected_at = rec
        .elected
        .iter()
        .find(|(at, v)| *v && *at > c)
        .map(|x| x.0);
    // The old leader: the key's holder at C, or the last key removed before C.
    let key_at_c = rec
        .keys
        .iter()
        .rev()
        .find(|(at, _)| *at <= c)
        .and_then(|x| x.1.clone());
    let (key, removal) = match key_at_c {
        Some(k) => {
            let r = rec
                .removals
                .iter()
                .find(|r| r.at > c && r.key == k)
                .cloned();
            (k, r)
        }
        None => match rec.removals.iter().rev().find(|r| r.at <= c) {
            Some(r) => (r.key.clone(), Some(r.clone())),
            None => return Verdict::Skipped("no leader key before the check".into()),
        },
    };
    let cut = removal.as_ref().map_or(c, |r| r.at.min(c));
    let t_ka = rec
        .ka
        .get(&key.lease)
        .and_then(|v| v.iter().rev().find(|t| **t <= cut).copied())
        .unwrap_or(Instant::ZERO);
    let t_ch = rec
        .etcd_changes
        .iter()
        .rev()
        .find(|t| **t <= cut)
        .map(|t| t.add(election_timeout))
        .unwrap_or(Instant::ZERO);
    // With `config` changes of the timing, the largest values any node runs.
    let t = &sched.bound_timing();
    // The node elected at the end (its name is the key's then).
    let winner = elected_at.and_then(|e| {
        rec.keys
            .iter()
            .rev()
            .find(|(at, _)| *at <= e)
            .and_then(|x| x.1.as_ref())
            .and_then(|k| k.name.trim_start_matches("pg").parse::<usize>().ok())
    });
    let winner_since = match (winner, elected_at) {
        (Some(w), Some(e)) => rec.healthy[w]
            .iter()
            .rev()
            .find(|(at, v)| *v && *at <= e)
            .map_or(Instant::ZERO, |x| x.0),
        _ => Instant::ZERO,
    };
    // `TENURE_SIM_STRICT_BASE=1`: never count from the winner's recovery (shows
    // the schedules where a late-healthy winner is what makes the bound hold).
    let winner_since = if std::env::var_os("TENURE_SIM_STRICT_BASE").is_some() {
        Instant::ZERO
    } else {
        winner_since
    };
    // Synchronous mode: only the leader the `sync` key names, or the standby it
    // lists, may take over (no key: anyone). The key as it stood when the old
    // leader's key went (nobody can change it until a new leader holds the key).
    // If none of them is healthy to the end, failover is impossible by design;
    // otherwise the bound counts from when the first of them became healthy.
    let mut allowed_since = Instant::ZERO;
    let mut sync_note = String::new();
    if sched.sync() != SyncMode::Off {
        let at = removal.as_ref().map_or(c, |r| r.at);
        let k = rec
            .sync
            .iter()
            .rev()
            .find(|(t, _)| *t <= at)
            .and_then(|x| x.1.clone());
        let allowed: Vec<usize> = match &k {
            None => (0..sched.nodes).collect(),
            Some(k) => std::iter::once(&k.leader)
                .chain(&k.sync_standbys)
                .filter_map(|n| n.trim_start_matches("pg").parse::<usize>().ok())
                .collect(),
        };
        let since = allowed
            .iter()
            .filter_map(|&a| match rec.healthy.get(a).and_then(|h| h.last()) {
                Some(&(t, true)) => Some(t),
                _ => None,
            })
            .min();
        match since {
            Some(t) => allowed_since = t,
            None => {
                return Verdict::Skipped(format!(
                    "synchronous mode: no node the sync key {k:?} allows is healthy at the end"
                ));
            }
        }
        sync_note = format!(", sync key {k:?} allows a healthy node from {allowed_since}");
    }
    // Seed 253898: a winner whose agent restarted after its key was created and
    // before it promoted adopts the key (S4) with no record of its promote delay,
    // and waits the conservative one from the adoption (`Core::adoption_delay`:
    // `ttl + R`, S6(b) keeps `2W + R + M` below it). Counted from that restart, like
    // a winner becoming healthy, with that delay in the bound.
    let adopted_at = match (winner, elected_at) {
        (Some(w), Some(e)) => {
            let held = rec
                .keys
                .iter()
                .rev()
                .find(|(at, _)| *at <= e)
                .and_then(|x| x.1.clone());
            let won_at = held.and_then(|k| {
                rec.keys
                    .iter()
                    .find(|(_, x)| x.as_ref() == Some(&k))
                    .map(|x| x.0)
            });
            won_at.and_then(|won| {
                rec.starts
                    .get(&w)
                    .and_then(|v| v.iter().rev().find(|t| **t > won && **t <= e).copied())
            })
        }
        _ => None,
    };
    let winner_since = winner_since.max(adopted_at.unwrap_or(Instant::ZERO));
    let terms = [t_ka, t_ch, s, winner_since, allowed_since];
    let base = terms.iter().copied().fold(Instant::ZERO, Instant::max);
    let base_from = terms.iter().position(|t| *t == base).unwrap_or(0);
    let stale = match (winner, &removal) {
        (Some(w), Some(r)) => rec
            .polls
            .get(&(w, key.lease))
            // The winner's window is at least the smallest any node runs; it
            // judges at the instant its watch delivers the DELETE.
            .is_none_or(|p| p.add(sched.min_poll_window()) < r.at.add(WATCH_LAG_MAX)),
        _ => false,
    };
    // The winner's watch was closed when the key went: it cannot know what it
    // missed, so the core judges the vacancy untimeable (DESIGN §1 step 4, S3).
    let gapped = match (winner, &removal) {
        (Some(w), Some(r)) => !rec.watch_open.get(w).is_some_and(|tr| state_at(tr, r.at)),
        _ => false,
    };
    let early = stale || gapped || removal.as_ref().is_some_and(|r| r.early && !r.clean);
    let holder = key
        .name
        .trim_start_matches("pg")
        .parse::<usize>()
        .unwrap_or(usize::MAX);
    let holder_wd = sched
        .watchdog
        .get(holder)
        .copied()
        .unwrap_or(false)
        .then(|| sched.w[holder]);
    // Review F2: a holder that never ran as a primary under its key may have won
    // right after an earlier early DELETE; its own `W` says nothing about that one,
    // so the core waits `ttl + R` after its early DELETE.
    let created = rec
        .keys
        .iter()
        .find(|(_, k)| k.as_ref() == Some(&key))
        .map_or(Instant::ZERO, |x| x.0);
    let gone = removal.as_ref().map_or(c, |r| r.at);
    let promoted = state_at(&rec.elected, created)
        || rec
            .elected
            .iter()
            .any(|(at, v)| *v && *at > created && *at <= gone);
    let b = sched.budget(holder_wd.filter(|_| promoted));
    let adoption_delay = if adopted_at.is_some() {
        sched.budget(None).early_expiry_delay
    } else {
        Duration::ZERO
    };
    // A key made after the old one went and removed early before the election, by
    // a holder that never ran under it: an acquire txn applied after the read
    // that decided it lost, whose lease its node then revoked (review LOW 5,
    // `TENURE_SIM_NO_LATE_ACQUIRE`). To every other node that is an early DELETE
    // of a holder that may have promoted (F2): the winner waits `ttl + R` from it.
    let interloper = removal.as_ref().and_then(|o| {
        rec.removals
            .iter()
            .find(|r| {
                r.at > o.at
                    && elected_at.is_none_or(|e| r.at < e)
                    && r.early
                    && !r.clean
                    && r.key != key
            })
            .cloned()
    });
    let extra_delay = if interloper.is_some() {
        adoption_delay.max(sched.budget(None).early_expiry_delay)
    } else {
        adoption_delay
    };
    // `TENURE_SIM_OLD_AGENTS` with their member keys shown (finding L1): every win
    // waits `ttl + R` counted from the win, after fresh positions published past
    // the read that saw them (one more loop); member keys persist in the
    // simulation, so every election of the run is a mixed-version one.
    let mixed = if super::agent::old_agent(sched.old_agents.as_deref(), 0)
        .is_some_and(|(_, shown)| shown)
    {
        sched.budget(None).early_expiry_delay + t.loop_wait
    } else {
        Duration::ZERO
    };
    let printed = b.failover_worst
        + mixed
        + if early {
            b.early_expiry_delay.max(extra_delay)
        } else {
            extra_delay
        };
    let bound = printed + fresh_allowance(sched) + sync_allowance(sched) + SLACK;
    let deadline = base.add(bound);
    let late = match elected_at {
        Some(e) if e <= deadline => None,
        _ if end < deadline => {
            return Verdict::Skipped(format!("run ended at {end} before the deadline {deadline}"));
        }
        e => Some(format!(
            "(3) liveness: no leader elected (key + writable primary) by {deadline} = base {base} + bound {:.3} s \
             (failover_worst {:.3} s + fresh-position allowance {:.3} s{} + slack {:.1} s); elected at {e:?}; base = max(last keepalive {t_ka}, \
             etcd change + ET {t_ch}, healthy majority from {s}, winner {winner:?} healthy from {winner_since}, \
             winner's prediction stale {stale}{sync_note}); adopted after a restart at {adopted_at:?} \
             (adoption delay {:.3} s); sync allowance {:.3} s; old leader {} lease {:x}, removal {removal:?}; \
             a key made and removed early after it {interloper:?}",
            bound.as_secs_f64(),
            b.failover_worst.as_secs_f64(),
            fresh_allowance(sched).as_secs_f64(),
            if early {
                format!(
                    " + early_expiry_delay {:.3} s",
                    b.early_expiry_delay.as_secs_f64()
                )
            } else {
                String::new()
            },
            SLACK.as_secs_f64(),
            adoption_delay.as_secs_f64(),
            sync_allowance(sched).as_secs_f64(),
            key.name,
            key.lease,
        )),
    };
    Verdict::Checked {
        took: elected_at.map_or(bound, |e| e.since(base)),
        bound,
        printed,
        early: early || interloper.is_some(),
        base_from,
        late,
    }
}
