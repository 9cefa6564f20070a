//! The HA decision core: observations and `now` in, a [`Plan`] out.
//!
//! Owns: the node's leadership state (lease, epoch, last counted renewal, horizon,
//! fence deadline), the replica-side expiry tracking of the leader's lease (`E_max`),
//! candidate choice, and the order of every leadership transition.
//!
//! Must never: do I/O, read a clock, use randomness, or block. Every fact arrives in
//! an [`Observation`]; every effect leaves as an [`Action`] the shell carries out and
//! reports back in the next observation (raft-rs's `Ready`/`advance`).
//!
//! The rules it enforces are DESIGN §1 and §2:
//! - S1: a leader whose newest counted renewal is too old fences by `F - B`.
//! - S2: `PetWatchdog` only right after a counted renewal, and only if `now + 2W <= H`.
//! - S3: the key is taken only through the acquire txn, after the old lease is gone,
//!   and promotion waits the promote delay after an early expiry.
//! - S4: a local primary without the key is fenced unless a confirmed renewal adopts.

mod adopt;
mod bootstrap;
mod candidacy;
mod catchup;
mod epoch;
mod fence;
mod follow;
mod leader;
mod lease;
mod manage;
mod mixed;
pub mod model;
mod pause;
mod switchover;
mod sync;
pub mod time;
mod ttl_seen;
mod vacancy;
mod watched;
mod window;

use std::time::Duration;

use model::*;
use time::Instant;

pub use lease::Leadership;
pub use manage::job_name;
pub use mixed::older_agents;
pub use switchover::{Handover, HandoverPhase};
pub use sync::sync_names_for;
use vacancy::{LeaseTrack, Vacancy, Watched};
pub use watched::KeptViewCheck;

/// Static facts about this node the core needs.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    pub name: String,
    pub nofailover: bool,
    /// Read-back watchdog timeout `W` when a watchdog is armed for leadership.
    pub watchdog: Option<Duration>,
    /// `[postgresql] move_aside_unusable`.
    pub move_aside_unusable: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Nothing decided yet: the first observation decides (adopt or not, S4).
    Init,
    /// Holding the `initialize` lock, running initdb.
    Bootstrapping {
        lease: LeaseId,
    },
    /// Confirming that the key found naming us is really ours (S4).
    Adopting {
        lease: LeaseId,
        epoch: Epoch,
        /// The poll of `lease` the confirming renewal waits for (seed 9982).
        poll: Option<adopt::AdoptPoll>,
    },
    Follower,
    Leader(Leadership),
    /// Leadership lost or given up: fence, then revoke (or release) `lease`.
    Fencing {
        lease: Option<LeaseId>,
        epoch: Option<Epoch>,
        release: bool,
        why: String,
    },
    /// Clean shutdown under way.
    Stopping,
}

/// The HA core of one node.
pub struct Core {
    cfg: CoreConfig,
    timing: Timing,
    state: State,
    track: LeaseTrack,
    /// The newest leadership the scope watch reported (`vacancy`, S3).
    watched: Option<Watched>,
    vacancy: Option<Vacancy>,
    /// A former primary's WAL may have forked: rewind before following.
    needs_rewind: bool,
    /// This node recorded `initialize` itself in this run: no previous leader exists.
    bootstrapped_here: bool,
    /// The system identifier of a bootstrap this node gave up or lost the lock
    /// of during this run: its directory is refused, never re-registered.
    given_up: Option<u64>,
    /// When this node, with an empty data directory, first read the scope without
    /// `initialize` (cleared once either stops being so): it races for the bootstrap
    /// lock only `L_w + R` later (`Core::bootstrap_grace`), so a host with data
    /// started at about the same time re-creates `initialize` from its data first.
    empty_since: Option<Instant>,
    /// Consecutive failed rewinds (for the basebackup fallback).
    rewind_failures: u32,
    /// The `clonefrom` member the last replica builds failed from, and when the
    /// first of them failed: once they failed for a lease TTL it is passed over
    /// (the leader, or another tagged member, is cloned instead) until a build
    /// succeeds (`follow::clone_source`). Not at once: a new member's first
    /// attempts can fail until the source admits its address (`pg_hba.conf` is
    /// rewritten at the source's next loop).
    clone_failed_from: Option<(String, Instant)>,
    /// The last basebackup or rewind started, and when: the next of the same kind
    /// waits for the next loop (`follow::data_job_paced`).
    data_job_started: Option<(&'static str, Instant)>,
    /// Replica builds that failed in a row (reset by one that succeeds): the
    /// next waits longer each time, up to [`follow::BUILD_BACKOFF_MAX`] (review
    /// of session 18, M3: a build that fails at once was retried every half loop,
    /// each a checkpoint on its source).
    build_failures: u32,
    /// Epoch this node released after a clean stop (published in its member key).
    released: Option<Epoch>,
    /// Why this node may not take leadership (a required watchdog is missing or
    /// unusable). It still runs as a replica.
    lead_refusal: Option<String>,
    /// The shell's last check found the required watchdog unusable
    /// (`Observation::watchdog_unusable`): no candidacy while it says so.
    watchdog_unusable: Option<String>,
    /// The watch's DELETE of the key that this iteration's read (sent before it)
    /// still showed: the vacancy the next read finds began then, not at that read.
    late_delete: Option<(Instant, Option<i64>)>,
    /// Instant of the previous step.
    last_step: Option<Instant>,
    /// The `L_w + R` in force before the last change of it, while it still counts
    /// (review L2, `window`).
    window_prev: Option<window::WindowPrev>,
    /// A read in this run showed (or lacked) our member key: the value left in it
    /// from before was looked at (`window`).
    window_own_read: bool,
    /// The epoch in the local data's `tenure.epoch` row, as last read while
    /// PostgreSQL answered (`None`: no row). DESIGN §3: the last epoch, remembered
    /// locally, so a wiped or restored etcd cannot make it go backwards unnoticed.
    local_epoch: Option<Epoch>,
    /// `local_epoch` was read in this run (or the data directory is empty).
    local_epoch_known: bool,
    /// That row names this node as its writer (seed 253898 review: only a row of
    /// our own leadership proves we promoted under it).
    local_epoch_mine: bool,
    /// The leader lease that row names (`None`: no row, or written before the
    /// column existed).
    local_epoch_lease: Option<LeaseId>,
    /// The operator's last `confirm_epoch` seen in etcd.
    confirm: Option<ConfirmEpoch>,
    /// The leadership held was won right after this node's own initdb (its data
    /// carries no epoch yet: it may start as primary without reading it first).
    led_from_bootstrap: bool,
    /// `synchronous_standby_names` as last observed, and since when unchanged: a
    /// reload reaches every PostgreSQL process a little after our own session, so
    /// the `sync` key trusts a value only once it held for a loop (DESIGN §3a).
    names_seen: Option<(String, Instant)>,
    /// The WAL position a standby newly named in the names must flush before the
    /// `sync` key lists it (DESIGN §3a; `catchup`).
    sync_catchup: Option<catchup::CatchUp>,
    /// `maximum_lag_on_syncnode`: the fit standbys over the lag, and since when
    /// (continuously). One counts as lagging only after a loop of it: a single
    /// sample under write load is noise.
    sync_lag_since: Vec<(String, Instant)>,
    /// When `sync_lag_since` was last brought up to date.
    sync_lag_sampled: Option<Instant>,
    /// Since when this replica, following the leader, has not streamed while the
    /// leader runs a newer timeline (`diverged`).
    stuck_since: Option<Instant>,
    /// Highest cluster revision read in this run (DESIGN §3: revisions never go
    /// backwards in one store; a read below it means etcd was wiped or restored).
    max_revision: i64,
    /// `max_revision` before the latest read (what a `CreateInitialize` marker says
    /// was seen).
    prior_max_revision: i64,
    /// Highest `mod_revision` read per member key: a key's mod_revision never goes
    /// down in one store either, and unlike the header revision it cannot be pushed
    /// past by other writes (a restore, even with bumped revisions, brings back
    /// older member keys).
    member_revisions: std::collections::BTreeMap<String, i64>,
    /// A rollback this node saw, until a read shows the `rollback` marker in etcd
    /// (the shell writes it create-only meanwhile, every iteration).
    rollback_seen: Option<RollbackSeen>,
    /// The `rollback` marker as last read.
    rollback_marker: Option<RollbackMarker>,
    /// The largest granted TTL of a leader lease seen in this run (polls' `grantedTTL`,
    /// members' `leader_ttl`): the early-expiry delay's fallback when the old lease's
    /// own TTL is unknown.
    max_leader_ttl_seen: u32,
    /// The leadership (epoch) that first waited, after its promote delay, for a
    /// read of the `tenure.epoch` row, and since when: bounded by
    /// `primary_start_timeout` (`Core::epoch_unread_too_long`).
    epoch_unread_since: Option<(Epoch, Instant)>,
    /// Leader-lease TTLs this node saw itself recently: published as
    /// `leader_ttl_seen`, a floor for an old lease's TTL after a crash (`ttl_seen`).
    ttl_seen: ttl_seen::TtlSeen,
    /// When the leadership held was adopted with the conservative delay (seed
    /// 253898): a later read that shows a longer old TTL or `W` lengthens the delay,
    /// counted from here (`Core::extend_adoption_delay`).
    adopted_at: Option<Instant>,
    /// The shortest `W` of the watchdogs in use when they differ (a device and
    /// systemd's): `F` counts from it, while every pet must satisfy S2 for the
    /// longest (`cfg.watchdog`). `None`: the same as `cfg.watchdog`.
    watchdog_fence: Option<Duration>,
    /// `B_g` while the guardian process is this node's fence (DESIGN §2 "The
    /// guardian"); `None`: no guardian (a device, systemd's watchdog, or no fence).
    guardian: Option<Duration>,
    /// Maintenance mode (`pause` in the `config` key): health-driven actions are
    /// held back (`pause`); S1–S4 are not.
    paused: bool,
    /// The release marker that proved the vacancy when this node last planned
    /// `Acquire` (review F1): the acquire txn compares its mod revision and marks it
    /// taken, so the read after a win no longer shows it untaken; `won` judges the
    /// early-expiry delay on this, the marker the winning txn was bound to.
    acquire_proof: Option<ReleaseMarker>,
    /// An acquire txn that went unanswered (`AcquireOutcome::Unanswered`: lease,
    /// granted TTL, the grant's send instant) until a read decides it: the win if
    /// the read shows the key naming us on that lease, else its lease is revoked.
    /// Kept across failed reads (the likely next one when etcd was too slow to
    /// answer): until its lease could have expired.
    unanswered: Option<(LeaseId, u32, Instant)>,
    /// The lease of an unanswered acquire a read showed lost: `follow` revokes it
    /// (kept until a step plans it: a step may return before).
    unanswered_revoke: Option<LeaseId>,
}

impl Core {
    pub fn new(cfg: CoreConfig, timing: Timing) -> Core {
        Core {
            cfg,
            timing,
            state: State::Init,
            track: LeaseTrack::default(),
            watched: None,
            vacancy: None,
            needs_rewind: false,
            bootstrapped_here: false,
            given_up: None,
            empty_since: None,
            rewind_failures: 0,
            clone_failed_from: None,
            data_job_started: None,
            build_failures: 0,
            released: None,
            lead_refusal: None,
            watchdog_unusable: None,
            late_delete: None,
            last_step: None,
            local_epoch: None,
            local_epoch_known: false,
            local_epoch_mine: false,
            local_epoch_lease: None,
            confirm: None,
            led_from_bootstrap: false,
            names_seen: None,
            sync_catchup: None,
            sync_lag_since: Vec::new(),
            sync_lag_sampled: None,
            stuck_since: None,
            max_revision: 0,
            prior_max_revision: 0,
            member_revisions: std::collections::BTreeMap::new(),
            rollback_seen: None,
            rollback_marker: None,
            max_leader_ttl_seen: 0,
            epoch_unread_since: None,
            ttl_seen: ttl_seen::TtlSeen::default(),
            adopted_at: None,
            watchdog_fence: None,
            guardian: None,
            paused: false,
            acquire_proof: None,
            unanswered: None,
            unanswered_revoke: None,
            window_prev: None,
            window_own_read: false,
        }
    }

    /// Never take leadership in this run (S3: a required watchdog cannot be armed).
    pub fn refuse_leadership(&mut self, why: String) {
        self.lead_refusal = Some(why);
    }

    /// Whether this run refuses leadership (S3), so the member key can say so.
    pub fn refuses_leadership(&self) -> bool {
        self.lead_refusal.is_some() || self.watchdog_unusable.is_some()
    }

    /// The epoch this node gave up cleanly (PostgreSQL stopped first), if any.
    pub fn released_epoch(&self) -> Option<Epoch> {
        self.released
    }

    /// Replace the timing (a validated `config` change) at `now`. A ttl change
    /// applies at the next grant; the lease held keeps its granted TTL. A change of
    /// `L_w + R` keeps the old value counting where it is the safe side (`window`).
    pub fn set_timing(&mut self, now: Instant, timing: Timing) {
        let old = std::mem::replace(&mut self.timing, timing);
        self.retime_window(now, &old);
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// One decision. Pure: same state + same inputs = same plan. The phases run in
    /// the contract's order; each lives in the module that owns it.
    pub fn step(&mut self, now: Instant, obs: &Observation) -> Plan {
        // 0. An acquire whose answer was lost, which a read shows won, is the win it
        //    was (`acquire_answered_by_read`).
        let answered;
        let obs = match self.acquire_answered_by_read(now, obs) {
            Some(o) => {
                answered = o;
                &answered
            }
            None => obs,
        };
        let mut p = Planner::default();
        // 1. Facts in: the leader's lease as a replica sees it (§1 step 4,
        //    `vacancy`), epochs and etcd's revisions (§3, `epoch`), the synchronous
        //    names in effect (§3a, `sync`).
        self.track_leader(now, obs);
        self.note_poll_windows(now, obs);
        self.watchdog_unusable.clone_from(&obs.watchdog_unusable);
        self.note_epochs(obs);
        self.note_sync_names(now, obs);
        // 2. The leader's clocks from the shell's reports: a wall-clock jump (S5), a
        //    counted renewal, a pet (`lease`).
        self.take_lease_reports(obs);
        // 3. S1/S5 first: whatever else happened, a leader that lost its key or is
        //    past `F - B` fences now (`fence`).
        let reason = match self.check_leadership(now, obs, &mut p) {
            Some(reason) => reason,
            // 4. The state's own step.
            None => self.act(now, obs, &mut p),
        };
        // 5. Last, so it never delays a fence: the rollback marker (`epoch`).
        self.plan_rollback_marker(obs, &mut p);
        self.last_step = Some(now);
        Plan {
            actions: p.actions,
            reason,
            again: p.again,
            wake_at: p.wake_at,
        }
    }

    /// Phase 4 of `step`: what the current state does.
    fn act(&mut self, now: Instant, obs: &Observation, p: &mut Planner) -> Reason {
        match self.state.clone() {
            State::Fencing {
                lease,
                epoch,
                release,
                why,
            } => self.fencing(obs, p, lease, epoch, release, why),
            State::Stopping => self.stopping(obs, p),
            State::Leader(l) => self.lead(now, obs, p, l),
            State::Adopting {
                lease,
                epoch,
                poll: None,
            } => self.adopting_poll(now, obs, p, lease, epoch),
            State::Adopting {
                lease,
                epoch,
                poll: Some(poll),
            } => self.adopting(now, obs, p, lease, epoch, poll),
            State::Bootstrapping { lease } => self.bootstrapping(obs, p, lease),
            State::Init | State::Follower => self.follow(now, obs, p),
        }
    }
}

/// Collects a plan's actions.
#[derive(Default)]
struct Planner {
    actions: Vec<Action>,
    again: bool,
    wake_at: Option<Instant>,
}

impl Planner {
    fn push(&mut self, a: Action) {
        self.actions.push(a);
    }

    /// Ask for an iteration no later than `t` (the earliest of all asked wins).
    fn wake_by(&mut self, t: Instant) {
        self.wake_at = Some(self.wake_at.map_or(t, |w| w.min(t)));
    }
}

impl Core {
    /// `AcquireOutcome::Unanswered` (the txn's answer did not come in time), kept
    /// until a read decides it: if the read shows the key naming us on the lease
    /// granted for that txn, the txn was applied and the observation is the one its
    /// answer would have given: `Won`, with the key's create revision as the epoch.
    /// Any other read: lost, its lease to be revoked (`unanswered_revoke`). No read:
    /// kept, until the lease could have expired (`granted_at + ttl`).
    // INVARIANT (S3): the lease was granted for this one txn and no other request of
    // ours puts the key, so the key naming us on it proves that txn succeeded, bound
    // to the read it was decided on (the txn compared that read's `config` and
    // `release` revisions); `granted_at` precedes the grant, so the first horizon
    // counted from it is no later than etcd's (S1).
    fn acquire_answered_by_read(&mut self, now: Instant, obs: &Observation) -> Option<Observation> {
        if let Some(AcquireOutcome::Unanswered {
            lease,
            granted_ttl,
            granted_at,
            ..
        }) = &obs.acquire
        {
            self.unanswered = Some((*lease, *granted_ttl, *granted_at));
        }
        let (lease, granted_ttl, granted_at) = self.unanswered?;
        let Ok(view) = &obs.cluster else {
            // S5: a wall-clock jump counts against the lease as for a leader's.
            let granted_at = granted_at.sub(obs.clock_jump);
            if now < granted_at.add(Duration::from_secs(u64::from(granted_ttl))) {
                self.unanswered = Some((lease, granted_ttl, granted_at));
            } else {
                // Too late to be a win; revoked all the same (second review, L1: an
                // etcd leader change may have extended the lease, and the key a late
                // txn made on it would hold the cluster).
                self.unanswered = None;
                self.unanswered_revoke = Some(lease);
            }
            return None;
        };
        self.unanswered = None;
        let shown = view
            .leader
            .as_ref()
            .filter(|k| k.name == self.cfg.name && k.lease == lease);
        // Only a Follower that is not stopping takes the win; a shutdown revokes
        // instead. (While fencing no read answers, so a Follower that fenced a
        // local primary meanwhile may still win: its fence is done, and `won`'s
        // checks run as for any win.)
        let (Some(k), State::Follower, false) = (shown, &self.state, obs.shutdown) else {
            self.unanswered_revoke = Some(lease);
            return None;
        };
        let mut o = obs.clone();
        o.acquire = Some(AcquireOutcome::Won {
            lease,
            granted_ttl,
            granted_at,
            epoch: k.epoch,
        });
        Some(o)
    }
}
