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

mod catchup;
pub mod model;
pub mod time;

use std::time::Duration;

use model::*;
use time::Instant;

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

/// Leadership held by this node.
#[derive(Clone, Debug, PartialEq)]
pub struct Leadership {
    pub lease: LeaseId,
    pub epoch: Epoch,
    /// TTL etcd granted for `lease` (never the configured number).
    pub ttl: u32,
    /// Send instant of the last counted renewal (or of the grant).
    pub renewed_at: Instant,
    /// Last pet of the watchdog in this leadership that the shell reported done
    /// (DESIGN §5: a fact, never a plan).
    pub last_pet: Option<Instant>,
    /// A `PetWatchdog` planned at this instant whose report has not come back yet.
    /// Until it does, `F` is measured from it when no pet was reported before: the
    /// real pet (if any) comes no earlier, so `F` is never later than the device's
    /// deadline.
    pub pet_pending: Option<Instant>,
    /// Earliest instant promotion may start (DESIGN §1 step 4).
    pub promote_after: Instant,
    /// Why promotion waits, for the log.
    pub delay_reason: Option<String>,
    /// PostgreSQL runs as primary under this leadership.
    pub promoted: bool,
    /// When this node last found its PostgreSQL not running while leading.
    pub down_since: Option<Instant>,
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

/// What a replica knows about the current or last leader's lease.
#[derive(Clone, Debug, Default)]
struct LeaseTrack {
    holder: Option<String>,
    lease: Option<LeaseId>,
    epoch: Option<Epoch>,
    /// Largest lower bound on the lease's expiry seen (`E_max`).
    e_max: Option<Instant>,
    /// Send instant of the last successful poll.
    last_poll: Option<Instant>,
    /// The holder's published watchdog timeout.
    holder_watchdog: Option<u32>,
    /// The TTL the holder's lease was granted with (`grantedTTL` from a poll, or the
    /// holder's published `leader_ttl`).
    holder_ttl: Option<u32>,
    /// The holder's last published WAL position.
    holder_xlog: Lsn,
}

/// The key was found absent after we knew a leader (or never knew one).
#[derive(Clone, Debug)]
struct Vacancy {
    /// When we first learned of the absence.
    at: Instant,
    /// Cluster revision of the first read that showed it absent: member entries
    /// written after it carry fresh positions (DESIGN §3a).
    seen_revision: i64,
    /// The lease the previous holder had, if known (must be confirmed gone).
    old_lease: Option<LeaseId>,
    old_holder: Option<String>,
    /// The expiry came early (or we cannot tell): promotion waits.
    early: bool,
    old_watchdog: Option<u32>,
    /// The granted TTL of the old lease, if known.
    old_ttl: Option<u32>,
    old_xlog: Lsn,
    /// The old lease was confirmed gone (TTL -1).
    lease_gone: bool,
    /// Newest leadership epoch a member published when this vacancy was judged.
    seen_epoch: Epoch,
}

/// The HA core of one node.
pub struct Core {
    cfg: CoreConfig,
    timing: Timing,
    state: State,
    track: LeaseTrack,
    vacancy: Option<Vacancy>,
    /// A former primary's WAL may have forked: rewind before following.
    needs_rewind: bool,
    /// This node recorded `initialize` itself in this run: no previous leader exists.
    bootstrapped_here: bool,
    /// Consecutive failed rewinds (for the basebackup fallback).
    rewind_failures: u32,
    /// Epoch this node released after a clean stop (published in its member key).
    released: Option<Epoch>,
    /// Why this node may not take leadership (a required watchdog is missing or
    /// unusable). It still runs as a replica.
    lead_refusal: Option<String>,
    /// The watch's DELETE of the key that this iteration's read (sent before it)
    /// still showed: the vacancy the next read finds began then, not at that read.
    late_delete: Option<Instant>,
    /// Instant of the previous step.
    last_step: Option<Instant>,
    /// The epoch in the local data's `tenure.epoch` row, as last read while
    /// PostgreSQL answered (`None`: no row). DESIGN §3: the last epoch, remembered
    /// locally, so a wiped or restored etcd cannot make it go backwards unnoticed.
    local_epoch: Option<Epoch>,
    /// `local_epoch` was read in this run (or the data directory is empty).
    local_epoch_known: bool,
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
    /// The shortest `W` of the watchdogs in use when they differ (a device and
    /// systemd's): `F` counts from it, while every pet must satisfy S2 for the
    /// longest (`cfg.watchdog`). `None`: the same as `cfg.watchdog`.
    watchdog_fence: Option<Duration>,
    /// `B_g` while the guardian process is this node's fence (DESIGN §2 "The
    /// guardian"); `None`: no guardian (a device, systemd's watchdog, or no fence).
    guardian: Option<Duration>,
}

/// At most this many member keys are remembered for the rollback check (a scope full
/// of garbage member keys must not grow memory without bound).
const MEMBER_REVISIONS_CAP: usize = 1024;

impl Core {
    pub fn new(cfg: CoreConfig, timing: Timing) -> Core {
        Core {
            cfg,
            timing,
            state: State::Init,
            track: LeaseTrack::default(),
            vacancy: None,
            needs_rewind: false,
            bootstrapped_here: false,
            rewind_failures: 0,
            released: None,
            lead_refusal: None,
            late_delete: None,
            last_step: None,
            local_epoch: None,
            local_epoch_known: false,
            confirm: None,
            led_from_bootstrap: false,
            names_seen: None,
            sync_catchup: None,
            stuck_since: None,
            max_revision: 0,
            prior_max_revision: 0,
            member_revisions: std::collections::BTreeMap::new(),
            rollback_seen: None,
            rollback_marker: None,
            max_leader_ttl_seen: 0,
            watchdog_fence: None,
            guardian: None,
        }
    }

    /// The guardian is this node's fence, with kill budget `B_g` (`None`: it is not,
    /// or it died in `automatic` mode). With it `F = H` still (S1, S6(c)): the
    /// guardian adds a deadline for a frozen agent, it changes none of the agent's.
    pub fn set_guardian(&mut self, kill_budget: Option<Duration>) {
        self.guardian = kill_budget;
    }

    pub fn guardian(&self) -> Option<Duration> {
        self.guardian
    }

    /// DESIGN §2: the deadline the guardian holds, `G = H - B_g`, while this node
    /// leads with the guardian as its fence. It moves with every counted renewal (and
    /// back with a wall-clock jump, S5); the shell hands it over when it changed.
    pub fn guardian_deadline(&self) -> Option<Instant> {
        let bg = self.guardian?;
        self.horizon().map(|h| h.sub(bg))
    }

    /// A device (or systemd's watchdog) or the guardian stands behind leadership:
    /// `DisarmWatchdog` (the guardian's stand-down) is planned after a complete fence
    /// or a clean stop.
    fn has_fence(&self) -> bool {
        self.cfg.watchdog.is_some() || self.guardian.is_some()
    }

    /// S3 with the guardian: PostgreSQL may accept writes under this leadership
    /// only once the guardian holds a deadline (the shell hands it one right after
    /// the step that made this node leader).
    fn guardian_unarmed(&self, obs: &Observation) -> bool {
        self.guardian.is_some() && obs.guardian_holds.is_none()
    }

    /// The watchdog `W` leadership uses from now on (a read-back that differs from
    /// the request, or `None` when `automatic` mode found no usable device).
    pub fn set_watchdog(&mut self, w: Option<Duration>) {
        self.cfg.watchdog = w;
        self.watchdog_fence = None;
    }

    /// Two watchdogs with different timeouts (the device's read-back and systemd's
    /// `WATCHDOG_USEC`): pets are judged by the longest (S2 must hold for both), `F`
    /// by the shortest (the first to fire is the one the fence must beat, S1).
    pub fn set_watchdogs(&mut self, a: Option<Duration>, b: Option<Duration>) {
        let (longest, shortest) = match (a, b) {
            (Some(x), Some(y)) => (Some(x.max(y)), Some(x.min(y))),
            (x, y) => (x.or(y), x.or(y)),
        };
        self.cfg.watchdog = longest;
        self.watchdog_fence = shortest;
    }

    pub fn watchdog(&self) -> Option<Duration> {
        self.cfg.watchdog
    }

    /// Never take leadership in this run (S3: a required watchdog cannot be armed).
    pub fn refuse_leadership(&mut self, why: String) {
        self.lead_refusal = Some(why);
    }

    /// Whether this run refuses leadership (S3), so the member key can say so.
    pub fn refuses_leadership(&self) -> bool {
        self.lead_refusal.is_some()
    }

    /// The epoch this node gave up cleanly (PostgreSQL stopped first), if any.
    pub fn released_epoch(&self) -> Option<Epoch> {
        self.released
    }

    /// Replace the timing (a validated `config` change). A ttl change applies at the
    /// next grant; the lease held keeps its granted TTL.
    pub fn set_timing(&mut self, timing: Timing) {
        self.timing = timing;
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The lease (and epoch) the shell must renew with a confirmed renewal at the next
    /// renewal tick; in `Adopting`, at once.
    pub fn lease_to_renew(&self) -> Option<(LeaseId, Epoch)> {
        match &self.state {
            State::Leader(l) => Some((l.lease, l.epoch)),
            State::Adopting { lease, epoch, .. } => Some((*lease, *epoch)),
            _ => None,
        }
    }

    /// True while adopting: the renewal must not wait for the tick.
    pub fn renew_now(&self) -> bool {
        matches!(self.state, State::Adopting { .. })
    }

    /// A lease other than the leader lease that must be kept alive (the bootstrap lock).
    pub fn lease_to_keep_alive(&self) -> Option<LeaseId> {
        match &self.state {
            State::Bootstrapping { lease } => Some(*lease),
            _ => None,
        }
    }

    /// The leader lease a replica should poll with `LeaseTimeToLive` this iteration.
    pub fn lease_to_poll(&self) -> Option<LeaseId> {
        if matches!(self.state, State::Leader(_)) {
            return None;
        }
        if let Some(v) = &self.vacancy {
            if !v.lease_gone {
                return v.old_lease;
            }
            return None;
        }
        self.track.lease
    }

    /// True while this node leads, is adopting, or is fencing: its PostgreSQL may
    /// accept writes, so no watchdog may be petted except right after a counted
    /// renewal (S2). Otherwise a pet only proves the loop is alive.
    pub fn pets_need_proof(&self) -> bool {
        matches!(
            self.state,
            State::Leader(_) | State::Adopting { .. } | State::Fencing { .. }
        )
    }

    /// The current leadership, if any.
    pub fn leadership(&self) -> Option<&Leadership> {
        match &self.state {
            State::Leader(l) => Some(l),
            _ => None,
        }
    }

    /// `H = s + ttl - M` for the leadership held.
    pub fn horizon(&self) -> Option<Instant> {
        self.leadership().map(|l| self.horizon_of(l))
    }

    fn horizon_of(&self, l: &Leadership) -> Instant {
        l.renewed_at
            .add(Duration::from_secs(u64::from(l.ttl)))
            .sub(self.timing.safety_margin)
    }

    /// The fence deadline `F` (S1): `last_pet + W` with a watchdog, else `H`.
    pub fn fence_deadline(&self) -> Option<Instant> {
        self.leadership().map(|l| self.fence_deadline_of(l))
    }

    fn fence_deadline_of(&self, l: &Leadership) -> Instant {
        let h = self.horizon_of(l);
        // A reported pet, else a planned one not reported yet (the real one is no
        // earlier): either way `F` is never later than the device's deadline.
        match (
            self.watchdog_fence.or(self.cfg.watchdog),
            l.last_pet.or(l.pet_pending),
        ) {
            (Some(w), Some(p)) => p.add(w).min(h),
            _ => h,
        }
    }

    /// S1/S3: the fence the contract requires is in place: no watchdog is in use, or
    /// the shell reported a pet (the open is one) in this leadership.
    fn fence_armed(&self, l: &Leadership) -> bool {
        self.cfg.watchdog.is_none() || l.last_pet.is_some()
    }

    /// S2, asked by the shell right after a renewal, before anything else in the
    /// iteration: may it pet now, and until which instant (`H' - 2W`, with `H'` the
    /// horizon this renewal gives)? `None`: no pet (no watchdog, not leading, the
    /// renewal did not count for our lease, or `now + 2W > H'`). Pure: the pet
    /// itself, and whether it happened, come back in `Observation::pet`.
    pub fn pet_on_renewal(&self, now: Instant, r: &Renewal) -> Option<Instant> {
        let (State::Leader(l), Some(w)) = (&self.state, self.cfg.watchdog) else {
            return None;
        };
        let RenewalOutcome::Counted { ttl } = r.outcome else {
            return None;
        };
        if r.lease != l.lease {
            return None;
        }
        let ttl = if ttl > 0 {
            u32::try_from(ttl).unwrap_or(u32::MAX)
        } else {
            l.ttl
        };
        let s = r.sent_at.max(l.renewed_at);
        let h = s
            .add(Duration::from_secs(u64::from(ttl)))
            .sub(self.timing.safety_margin);
        let not_after = h.sub(w).sub(w);
        (now <= not_after).then_some(not_after)
    }

    /// True while a fence is under way: the shell makes no call before the fence
    /// (each would only delay it, issue 8 finding 6).
    pub fn fence_in_progress(&self) -> bool {
        matches!(self.state, State::Fencing { .. })
    }

    /// Latest instant a blocking call may run to before a fence would be late:
    /// `F - B` while leading (S1: every blocking call's deadline is capped here).
    pub fn call_cap(&self) -> Option<Instant> {
        self.fence_deadline()
            .map(|f| f.sub(self.timing.demote_budget))
    }

    /// Is this node the leader with a lease still valid at `now`?
    pub fn leads_at(&self, now: Instant) -> bool {
        match &self.state {
            State::Leader(l) => now < self.fence_deadline_of(l),
            _ => false,
        }
    }

    /// DESIGN §3: the local data was written under a higher epoch than `key_epoch`
    /// (etcd wiped or restored) and no operator confirmed it: the refusal text.
    fn epoch_regression(&self, key_epoch: Epoch) -> Option<String> {
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
        if pg.role != PgRole::Primary || pg.epoch == Some(l.epoch) {
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
    fn note_revisions(&mut self, view: &ClusterView) {
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
            let r = self.member_revisions.entry(m.name.clone()).or_insert(0);
            *r = (*r).max(m.mod_revision);
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
    fn rollback_refusal(&self) -> Option<String> {
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

    /// One decision. Pure: same state + same inputs = same plan.
    pub fn step(&mut self, now: Instant, obs: &Observation) -> Plan {
        let mut p = Planner::default();
        let reason = self.decide(now, obs, &mut p);
        // Last in the plan, so it never delays a fence: write the marker until a read
        // shows it (create-only; `CreateInitialize` may already have written it).
        if let Some(s) = &self.rollback_seen
            && obs.cluster.is_ok()
            && !p.actions.contains(&Action::Exit)
        {
            p.push(Action::MarkRollback(s.clone()));
        }
        self.last_step = Some(now);
        Plan {
            actions: p.actions,
            reason,
            again: p.again,
        }
    }

    fn decide(&mut self, now: Instant, obs: &Observation, p: &mut Planner) -> Reason {
        // Keep our view of the leader's lease current (replica side, §1 step 4).
        self.track_leader(now, obs);
        // The local epoch row: only an answering PostgreSQL can tell (a stopped one
        // keeps what we last read); an empty data directory carries none.
        match (&obs.pg.data, obs.pg.role) {
            (_, PgRole::Primary | PgRole::Replica) => {
                self.local_epoch = obs.pg.epoch;
                self.local_epoch_known = true;
            }
            (DataDir::Empty, _) => {
                self.local_epoch = None;
                self.local_epoch_known = true;
            }
            _ => {}
        }
        if let Ok(view) = &obs.cluster {
            self.confirm = view.confirm_epoch.clone();
            self.note_revisions(view);
        }
        match &obs.pg.sync_names {
            Some(n) if self.names_seen.as_ref().is_some_and(|(seen, _)| seen == n) => {}
            Some(n) => self.names_seen = Some((n.clone(), now)),
            None => self.names_seen = None,
        }

        // S1/S5 first: whatever else happened, a leader past `F - B` fences now.
        // S5: time the wall clock saw pass but CLOCK_BOOTTIME did not (a paused VM) is
        // lease time lost: move the last renewal and pet back by it, so `H` and `F`
        // come earlier, never later.
        if !obs.clock_jump.is_zero()
            && let State::Leader(l) = &mut self.state
        {
            l.renewed_at = l.renewed_at.sub(obs.clock_jump);
            l.last_pet = l.last_pet.map(|p| p.sub(obs.clock_jump));
        }
        if let State::Leader(l) = &mut self.state
            && let Some(r) = &obs.renewal
            && r.lease == l.lease
            && let RenewalOutcome::Counted { ttl } = r.outcome
        {
            if r.sent_at > l.renewed_at {
                l.renewed_at = r.sent_at;
            }
            if ttl > 0 {
                l.ttl = u32::try_from(ttl).unwrap_or(u32::MAX);
            }
        }
        // DESIGN §5: `last_pet` moves only on a pet the shell reports done.
        if let State::Leader(l) = &mut self.state
            && let Some(pet) = &obs.pet
        {
            l.pet_pending = None;
            if pet.outcome == PetOutcome::Done {
                l.last_pet = Some(l.last_pet.map_or(pet.at, |p| p.max(pet.at)));
            }
        }
        if let Some(reason) = self.check_leadership(now, obs, p) {
            return reason;
        }

        match self.state.clone() {
            State::Fencing {
                lease,
                epoch,
                release,
                why,
            } => self.fencing(obs, p, lease, epoch, release, why),
            State::Stopping => self.stopping(obs, p),
            State::Leader(l) => self.lead(now, obs, p, l),
            State::Adopting { lease, epoch, .. } => self.adopting(now, obs, p, lease, epoch),
            State::Bootstrapping { lease } => self.bootstrapping(obs, p, lease),
            State::Init | State::Follower => self.follow(now, obs, p),
        }
    }

    /// Leader-side checks that override everything: lost key, stale renewal, deadline.
    fn check_leadership(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
    ) -> Option<Reason> {
        let State::Leader(l) = &self.state else {
            return None;
        };
        let me = &self.cfg.name;
        let mut lost: Option<String> = None;
        if let Some(r) = &obs.renewal {
            match &r.outcome {
                RenewalOutcome::LeaseGone => {
                    lost = Some("the lease is gone (keepalive TTL <= 0)".into())
                }
                RenewalOutcome::KeyLost { found } => {
                    lost = Some(match found {
                        None => "the leader key vanished while the lease lived".into(),
                        Some(k) => format!(
                            "the leader key now names {} (epoch {}, lease {:x})",
                            k.name, k.epoch, k.lease
                        ),
                    })
                }
                _ => {}
            }
        }
        if lost.is_none()
            && let Ok(view) = &obs.cluster
        {
            match &view.leader {
                None if obs.released.is_none() => {
                    lost = Some("a linearizable read shows no leader key".into())
                }
                Some(k) if k.name != *me || k.epoch != l.epoch => {
                    lost = Some(format!(
                        "the leader key names {} at epoch {}",
                        k.name, k.epoch
                    ))
                }
                _ => {}
            }
        }
        if lost.is_none()
            && let Some(why) = &obs.watchdog_failed
        {
            // S3: a required watchdog could not be armed: give the key back.
            self.lead_refusal = Some(format!("required watchdog unusable: {why}"));
            let why = format!("required watchdog unusable ({why}); releasing the key");
            let (lease, epoch) = (l.lease, l.epoch);
            self.needs_rewind = self.needs_rewind || l.promoted;
            self.enter_fencing(Some(lease), Some(epoch), true, why.clone());
            return Some(self.fencing(obs, p, Some(lease), Some(epoch), true, why));
        }
        if lost.is_none()
            && let Some(what) = &obs.guard_refused
        {
            // DESIGN §1 step 5: the guard compares the key's create revision and value
            // with ours; a refusal is proof the key is no longer this leadership's.
            lost = Some(format!(
                "the epoch guard refused {what}: leadership is lost"
            ));
        }
        if lost.is_none() && obs.leader_deleted_at.is_some() && obs.released.is_none() {
            lost = Some("the watch saw the leader key deleted or overwritten".into());
        }
        let f = self.fence_deadline_of(l);
        if lost.is_none() && now >= f.sub(self.timing.demote_budget) {
            lost = Some(format!(
                "no renewal counted since {}; fence deadline F = {} is within the demote budget",
                l.renewed_at, f
            ));
        }
        let why = lost?;
        let (lease, epoch, promoted) = (l.lease, l.epoch, l.promoted);
        let must_fence = promoted || obs.pg.role != PgRole::Replica;
        if must_fence {
            self.needs_rewind = true;
        }
        self.enter_fencing(Some(lease), Some(epoch), false, why.clone());
        Some(self.fencing(obs, p, Some(lease), Some(epoch), false, why))
    }

    /// Drive a fence to completion, then revoke or release and become a follower.
    fn fencing(
        &mut self,
        obs: &Observation,
        p: &mut Planner,
        lease: Option<LeaseId>,
        epoch: Option<Epoch>,
        release: bool,
        why: String,
    ) -> Reason {
        match obs.fence {
            Some(FenceOutcome::Complete) => {}
            Some(FenceOutcome::Incomplete) => {
                // S1: stay armed; try again at once. The host resets at F if it never
                // completes.
                p.push(Action::Fence);
                p.again = true;
                return Reason::Fencing(format!("{why}; the fence is not complete yet, retrying"));
            }
            None => {
                // Even a "stopped" PostgreSQL is fenced: a backend can outlive its
                // postmaster and still commit (DESIGN §3a); the fence finds it.
                p.push(Action::Fence);
                p.again = true;
                return Reason::Fencing(why);
            }
        }
        // INVARIANT: no process of the local PostgreSQL remains from here on.
        if self.has_fence() {
            p.push(Action::DisarmWatchdog);
        }
        match (lease, epoch, release) {
            (Some(lease), Some(epoch), true) => p.push(Action::Release { lease, epoch }),
            (Some(lease), _, _) => p.push(Action::Revoke { lease }),
            _ => {}
        }
        self.state = State::Follower;
        p.again = true;
        Reason::Fencing(format!("{why}; fence complete, leadership dropped"))
    }

    /// INVARIANT: the only way into `Fencing`: the lease (if any) is never renewed
    /// again, and the next steps drive the fence to completion before revoking it.
    fn enter_fencing(
        &mut self,
        lease: Option<LeaseId>,
        epoch: Option<Epoch>,
        release: bool,
        why: String,
    ) {
        self.state = State::Fencing {
            lease,
            epoch,
            release,
            why,
        };
    }

    fn stopping(&mut self, obs: &Observation, p: &mut Planner) -> Reason {
        match (&obs.job, obs.pg.role) {
            (Job::Running { .. }, _) => {
                Reason::ShuttingDown("waiting for PostgreSQL to stop".into())
            }
            // DESIGN §5: the stop is done only when a fail-closed fence check found no
            // process left (orphan backends of a dead postmaster included, §3a).
            (_, PgRole::Stopped) if stop_checked(obs) => {
                p.push(Action::Exit);
                Reason::ShuttingDown(
                    "PostgreSQL stopped and no process of it remains; exiting".into(),
                )
            }
            (_, PgRole::Stopped) => {
                p.push(Action::Fence);
                p.again = true;
                Reason::ShuttingDown(
                    "PostgreSQL stopped; checking that no process of it remains (fence)".into(),
                )
            }
            (
                Job::Finished {
                    ok: false, detail, ..
                },
                _,
            ) => {
                // A clean stop failed: fall back to the fence so we never exit with a
                // primary running and no agent.
                p.push(Action::Fence);
                Reason::ShuttingDown(format!("clean stop failed ({detail}); fencing"))
            }
            _ => {
                p.push(Action::StartJob(JobKind::Stop));
                Reason::ShuttingDown("stopping PostgreSQL cleanly".into())
            }
        }
    }

    fn lead(
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

        let me = self.cfg.name.clone();
        let valid_for = now.until(self.fence_deadline_of(&l));

        if obs.promoted == Some(true) {
            l.promoted = true;
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
                if let Ok(view) = &obs.cluster {
                    let others: Vec<String> = view
                        .members
                        .iter()
                        .filter(|m| m.name != me)
                        .map(|m| m.name.clone())
                        .collect();
                    p.push(Action::SyncSlots { members: others });
                    sync_note = self.manage_sync(now, view, &obs.pg, l.epoch, p);
                }
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
                    Reason::PromoteDelayed {
                        remaining: now.until(l.promote_after),
                        why: l.delay_reason.clone().unwrap_or_default(),
                    }
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

    fn lead_shutdown(&mut self, obs: &Observation, p: &mut Planner, l: Leadership) -> Reason {
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
            // Clean stop finished: release the key so a replica takes over at once.
            if self.has_fence() {
                p.push(Action::DisarmWatchdog);
            }
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

    fn adopting(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        lease: LeaseId,
        epoch: Epoch,
    ) -> Reason {
        let Some(r) = &obs.renewal else {
            p.again = true;
            return Reason::Waiting("confirming the leader key that names me (S4)".into());
        };
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
                let l = Leadership {
                    lease,
                    epoch,
                    ttl: u32::try_from(ttl).unwrap_or(u32::MAX),
                    renewed_at: r.sent_at,
                    last_pet: None,
                    pet_pending: None,
                    promote_after: now,
                    delay_reason: None,
                    promoted: obs.pg.role == PgRole::Primary,
                    down_since: None,
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

    fn bootstrapping(&mut self, obs: &Observation, p: &mut Planner, lease: LeaseId) -> Reason {
        if let Some(written) = obs.recorded_initialize {
            if written {
                self.bootstrapped_here = true;
                // Any vacancy seen so far predates the cluster: nobody led before us.
                self.vacancy = None;
                self.state = State::Follower;
                p.again = true;
                return Reason::Bootstrapping(
                    "recorded the system identifier in initialize".into(),
                );
            }
            // Our lock expired under us: our data is of a cluster nobody agreed on.
            self.state = State::Follower;
            return Reason::Refusing(
                "lost the initialize lock before recording the system identifier; \
                 the new data directory must be moved aside by an operator"
                    .into(),
            );
        }
        match (&obs.job, &obs.pg.data) {
            (Job::Running { .. }, _) => Reason::Bootstrapping("initdb running".into()),
            (
                Job::Finished {
                    kind: JobKind::InitDb,
                    ok: false,
                    detail,
                },
                _,
            ) => {
                // Leave the lock to expire; another node (or we) may retry.
                p.push(Action::Revoke { lease });
                self.state = State::Follower;
                Reason::Refusing(format!("initdb failed: {detail}"))
            }
            (_, DataDir::Present { sysid, .. }) => {
                p.push(Action::RecordInitialize {
                    sysid: *sysid,
                    lease,
                });
                p.again = true;
                Reason::Bootstrapping(format!("initdb done, system identifier {sysid}"))
            }
            (_, DataDir::Empty) => {
                p.push(Action::StartJob(JobKind::InitDb));
                Reason::Bootstrapping("won the initialize lock; running initdb".into())
            }
            (_, DataDir::Unusable(why)) => {
                p.push(Action::Revoke { lease });
                self.state = State::Follower;
                Reason::Refusing(format!("data directory unusable: {why}"))
            }
        }
    }

    /// Replica-side lease tracking: `E_max`, the holder, and the vacancy record.
    fn track_leader(&mut self, now: Instant, obs: &Observation) {
        if let Some(poll) = &obs.lease_poll
            && self.track.lease == Some(poll.lease)
            && let Some(ttl) = poll.ttl
        {
            // A lower bound on the expiry: etcd truncates the TTL to whole
            // seconds and cannot expire the lease before poll + ttl. An answer of
            // 0 or less (expired, revoke in flight) is still a successful poll
            // (DESIGN §1 step 4): it keeps the prediction fresh. Counting only
            // TTL >= 1 would leave the last poll >= 1 s before expiry, older than
            // L_w + R with short loops, and make every expiry look early.
            let e = poll
                .sent_at
                .add(Duration::from_secs(ttl.max(0).unsigned_abs()));
            self.track.e_max = Some(self.track.e_max.map_or(e, |m| m.max(e)));
            self.track.last_poll = Some(poll.sent_at);
        }
        // The old lease's own TTL (issue 8 finding 2): from `grantedTTL`, whichever
        // lease was polled, and from every leader's published `leader_ttl`.
        if let Some(poll) = &obs.lease_poll
            && let Some(g) = poll.granted_ttl.and_then(|g| u32::try_from(g).ok())
        {
            self.max_leader_ttl_seen = self.max_leader_ttl_seen.max(g);
            if self.track.lease == Some(poll.lease) {
                self.track.holder_ttl = Some(self.track.holder_ttl.map_or(g, |t| t.max(g)));
            }
            if let Some(v) = &mut self.vacancy
                && v.old_lease == Some(poll.lease)
            {
                v.old_ttl = Some(v.old_ttl.map_or(g, |t| t.max(g)));
            }
        }
        if let Ok(view) = &obs.cluster {
            for m in &view.members {
                if let Some(t) = m.info.leader_ttl {
                    self.max_leader_ttl_seen = self.max_leader_ttl_seen.max(t);
                }
            }
        }
        self.track_vacancy(now, obs);
        // After the vacancy is known: this iteration's poll may already show the old
        // lease gone (the poll runs after the read that showed the key absent).
        if let (Some(poll), Some(v)) = (&obs.lease_poll, &mut self.vacancy)
            && v.old_lease == Some(poll.lease)
            && poll.ttl.is_none()
        {
            v.lease_gone = true;
        }
    }

    fn track_vacancy(&mut self, now: Instant, obs: &Observation) {
        let me = self.cfg.name.clone();
        let Ok(view) = &obs.cluster else { return };
        match &view.leader {
            Some(k) => {
                // A DELETE the watch reported after the previous step, of a key our
                // reads showed before too, is this key's: keep its instant for the
                // vacancy the next read shows (else the DELETE is dated a loop late,
                // the last poll looks stale and the expiry early: seed 11713).
                let known = self.track.lease == Some(k.lease);
                self.late_delete = match (obs.leader_deleted_at, self.last_step) {
                    (Some(d), Some(prev)) if known && d > prev => Some(d),
                    _ => None,
                };
                if k.name != me || !matches!(self.state, State::Leader(_)) {
                    if self.track.lease != Some(k.lease) {
                        self.track = LeaseTrack {
                            holder: Some(k.name.clone()),
                            lease: Some(k.lease),
                            epoch: Some(k.epoch),
                            ..LeaseTrack::default()
                        };
                    }
                    if let Some(m) = view.member(&k.name) {
                        self.track.holder_watchdog = m.info.watchdog_timeout;
                        if m.info.leader_lease == Some(k.lease)
                            && let Some(t) = m.info.leader_ttl
                        {
                            self.track.holder_ttl =
                                Some(self.track.holder_ttl.map_or(t, |h| h.max(t)));
                        }
                        self.track.holder_xlog = self.track.holder_xlog.max(m.info.xlog_location);
                    }
                }
                // The read that follows our own winning acquire shows our new key:
                // the vacancy it ends must survive until `won` has taken its promote
                // delay from it (DESIGN §1 step 4).
                let won_now = k.name == me
                    && matches!(
                        &obs.acquire,
                        Some(AcquireOutcome::Won { lease, .. }) if *lease == k.lease
                    );
                if !won_now {
                    self.vacancy = None;
                }
            }
            None => {
                // A member publishing a newer leadership epoch held the key after this
                // vacancy began, unseen by us (it came and went between two reads): its
                // DELETE is a new vacancy, judged early (DESIGN §1 step 4; seed 16393:
                // else we promote at once beside it).
                let newest = view
                    .members
                    .iter()
                    .filter(|m| m.name != me)
                    .filter_map(|m| m.info.epoch.map(|e| (e, m)))
                    .max_by_key(|(e, _)| *e);
                if let (Some(v), Some((e, m))) = (&self.vacancy, newest)
                    && e > v.seen_epoch
                    && Some(e) > self.track.epoch
                {
                    self.vacancy = Some(Vacancy {
                        at: now,
                        seen_revision: view.revision,
                        old_lease: m.info.leader_lease,
                        old_holder: Some(m.name.clone()),
                        early: true,
                        old_watchdog: m.info.watchdog_timeout,
                        old_ttl: m.info.leader_ttl,
                        old_xlog: v.old_xlog.max(m.info.xlog_location),
                        lease_gone: m.info.leader_lease.is_none(),
                        seen_epoch: e,
                    });
                }
                if self.vacancy.is_none() {
                    let at = obs
                        .leader_deleted_at
                        .or(self.late_delete.take())
                        .map_or(now, |d| d.min(now));
                    let l_w_r = self.timing.loop_wait + self.timing.retry_timeout;
                    // DESIGN §1 step 4: early if before E_max, or if our last poll is too
                    // old to predict anything, or if we never knew the lease at all.
                    let early = match (self.track.lease, self.track.e_max, self.track.last_poll) {
                        (Some(_), Some(e), Some(lp)) => at < e || at.since(lp) > l_w_r,
                        _ => !self.bootstrapped_here,
                    };
                    // A clean release: the old leader published, before deleting the key,
                    // that its PostgreSQL had stopped under this epoch. Nothing to wait for.
                    let released = match (&self.track.holder, self.track.epoch) {
                        (Some(h), Some(e)) => view
                            .member(h)
                            .is_some_and(|m| m.info.released == Some(e) && !m.info.pg_healthy),
                        _ => false,
                    };
                    let early = early && !released;
                    // A holder we never watched may have published its lease.
                    let old_lease = self.track.lease.or_else(|| {
                        view.members
                            .iter()
                            .filter(|m| m.info.role == "primary")
                            .find_map(|m| m.info.leader_lease)
                    });
                    let seen_epoch = view
                        .members
                        .iter()
                        .filter_map(|m| m.info.epoch)
                        .chain(self.track.epoch)
                        .max()
                        .unwrap_or(0);
                    self.vacancy = Some(Vacancy {
                        at,
                        seen_revision: view.revision,
                        seen_epoch,
                        old_lease,
                        old_holder: self.track.holder.clone(),
                        early,
                        old_watchdog: self.track.holder_watchdog,
                        old_ttl: self.track.holder_ttl,
                        old_xlog: self.track.holder_xlog,
                        // This observation's poll may already have answered TTL -1
                        // for that lease (polled before the read showed the key gone).
                        lease_gone: old_lease.is_none()
                            || obs
                                .lease_poll
                                .as_ref()
                                .is_some_and(|lp| Some(lp.lease) == old_lease && lp.ttl.is_none()),
                    });
                }
            }
        }
    }

    /// Everything a node without leadership does.
    fn follow(&mut self, now: Instant, obs: &Observation, p: &mut Planner) -> Reason {
        let me = self.cfg.name.clone();
        let first = self.state == State::Init;
        if obs.shutdown {
            self.state = State::Stopping;
            return self.stopping(obs, p);
        }
        let view = match &obs.cluster {
            Ok(v) => v,
            Err(e) => {
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

        // The bootstrap.
        let sysid = match &view.initialize {
            None => {
                return match &obs.pg.data {
                    DataDir::Empty if self.lead_refusal.is_some() => Reason::Refusing(format!(
                        "not bootstrapping: {}",
                        self.lead_refusal.clone().unwrap_or_default()
                    )),
                    DataDir::Empty => {
                        p.push(Action::ClaimInitialize);
                        p.again = true;
                        Reason::Bootstrapping(
                            "no initialize key: racing for the bootstrap lock".into(),
                        )
                    }
                    DataDir::Present { sysid, .. } => {
                        // `initialize` is never deleted: missing next to data, etcd
                        // lost its memory. The marker goes in the same txn.
                        let rollback = self.rollback_seen.clone().unwrap_or(RollbackSeen {
                            seen_revision: self.prior_max_revision,
                            found_revision: view.revision,
                            reason: format!(
                                "initialize was missing while {me} has data (system identifier {sysid})"
                            ),
                        });
                        p.push(Action::CreateInitialize {
                            sysid: *sysid,
                            rollback,
                        });
                        p.again = true;
                        Reason::Bootstrapping(format!(
                            "initialize key missing; re-creating it from my data (system identifier {sysid})"
                        ))
                    }
                    DataDir::Unusable(why) => self.unusable(p, why),
                };
            }
            Some(Initialize::Locked { holder, .. }) => {
                return Reason::Waiting(format!("{holder} is bootstrapping the cluster"));
            }
            Some(Initialize::Garbage(raw)) => {
                return Reason::Refusing(format!(
                    "the initialize key holds something that is not a system identifier: {raw:?}"
                ));
            }
            Some(Initialize::Done { sysid }) => *sysid,
        };

        let leader = view.leader.clone();
        match (&obs.pg.data, &leader) {
            (DataDir::Present { sysid: mine, .. }, _) if *mine != sysid => {
                return Reason::Refusing(format!(
                    "system identifier mismatch: my data is {mine}, the cluster's is {sysid}"
                ));
            }
            (DataDir::Unusable(why), _) => return self.unusable(p, why),
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
                if first {
                    // S4: adopt only through a confirmed renewal of the key's lease.
                    self.state = State::Adopting {
                        lease: k.lease,
                        epoch: k.epoch,
                    };
                    p.again = true;
                    return Reason::Waiting(format!(
                        "the leader key names me (epoch {}); confirming before adopting (S4)",
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
                self.candidate(now, obs, p, view)
            }
        }
    }

    fn unusable(&mut self, p: &mut Planner, why: &str) -> Reason {
        if self.cfg.move_aside_unusable {
            p.push(Action::MoveDataAside);
            Reason::Other(format!("data directory unusable ({why}); moving it aside"))
        } else {
            Reason::Refusing(format!(
                "data directory unusable ({why}); set move_aside_unusable or fix it by hand"
            ))
        }
    }

    fn start_fence(&mut self, p: &mut Planner, why: String) -> Reason {
        self.needs_rewind = true;
        self.enter_fencing(None, None, false, why.clone());
        p.push(Action::Fence);
        p.again = true;
        Reason::Fencing(why)
    }

    fn follow_leader(
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
                p.push(Action::StartJob(JobKind::Basebackup {
                    from: k.name.clone(),
                }));
                Reason::Other(format!("cloning from leader {} with pg_basebackup", k.name))
            }
            (_, PgRole::Stopped) => {
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
                if let Some(why) = self.diverged(now, obs, view, &lm.info) {
                    // DESIGN §3a: rewind whenever the local WAL ran past the switch
                    // point. A replica that kept streaming from a frozen old primary
                    // can hold WAL the new timeline never had; it would never stream
                    // again. Stop cleanly, then the Stopped arm rewinds.
                    self.needs_rewind = true;
                    self.stuck_since = None;
                    p.push(Action::StartJob(JobKind::Stop));
                    return Reason::Other(format!("{why}; stopping to rewind from {}", k.name));
                }
                Reason::Following {
                    me: me.clone(),
                    leader: k.name.clone(),
                }
            }
            (_, PgRole::Unresponsive) => Reason::Waiting("PostgreSQL is not answering yet".into()),
            (_, PgRole::Primary) => Reason::Other("local primary: fencing first (S4)".into()),
        }
    }

    /// A replica that follows the right leader but cannot stream from it because
    /// its WAL forked off (DESIGN §3a): the leader runs a newer timeline, the WAL
    /// receiver is not streaming, and either the local position is past the switch
    /// point `history` recorded for the local timeline, or the receiver has not
    /// streamed for a lease TTL (the recorded point is the promoted node's position
    /// when it decided, which can be a little short of the real one). A streaming
    /// replica is never judged diverged; a rewind that finds nothing to do is
    /// harmless.
    fn diverged(
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
                "my WAL (position {}) runs past timeline {mine}'s switch point {} to timeline {}",
                obs.pg.lsn,
                h.lsn,
                mine + 1
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

    /// The key is absent: may this node take it? (§1 step 4, §3a)
    fn candidate(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        view: &ClusterView,
    ) -> Reason {
        let me = self.cfg.name.clone();
        // The node that just ran initdb: no other node has data, nobody led before.
        if self.bootstrapped_here
            && self.lead_refusal.is_none()
            && self.rollback_refusal().is_none()
            && obs.pg.role == PgRole::Stopped
            && matches!(obs.pg.data, DataDir::Present { .. })
            && view.history.is_empty()
        {
            p.push(Action::Acquire);
            p.again = true;
            return Reason::Acquiring("bootstrapped the cluster; taking the leader key".into());
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
        if let Some(why) = &self.lead_refusal {
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
        if !v.lease_gone {
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
        // Fresh positions only: members that published after the vacancy was seen.
        let fresh_wait = self.timing.loop_wait + self.timing.retry_timeout;
        let waited_enough = now.since(v.at) >= fresh_wait;
        let mine = (obs.pg.timeline, obs.pg.lsn);
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
                return Reason::Waiting(format!(
                    "{} is a better candidate (timeline {}, position {})",
                    m.name, i.timeline, i.xlog_location
                ));
            }
        }
        p.push(Action::Acquire);
        p.again = true;
        Reason::Acquiring(format!(
            "best candidate at timeline {}, position {}",
            mine.0, mine.1
        ))
    }

    /// Synchronous mode (DESIGN §3a): only the leader that wrote the `sync` key or
    /// the standby it lists may take the leader key. `Err` says why `name` may not.
    /// No key at all: no leader ever listed a standby (a leader writes the key
    /// before its PostgreSQL accepts a write in synchronous mode), so asynchronous
    /// rules apply.
    fn sync_allows(&self, view: &ClusterView, name: &str) -> Result<(), String> {
        if self.timing.synchronous == SyncMode::Off {
            return Ok(());
        }
        match &view.sync {
            None => Ok(()),
            Some(Err(e)) => Err(format!(
                "synchronous mode, and the sync key is unreadable ({e}): nobody may take over \
                 until a leader rewrites it"
            )),
            Some(Ok(k)) if k.allows(name) => Ok(()),
            Some(Ok(k)) => Err(format!(
                "synchronous mode: the sync key allows only {}{}",
                k.leader,
                k.sync_standby
                    .as_ref()
                    .map(|s| format!(" and {s}"))
                    .unwrap_or_default()
            )),
        }
    }

    /// The standby the `sync` key lists when it names this node as the leader. Any
    /// other key (missing, another leader's, garbled) is rewritten to name this node
    /// with no standby, and `Err` says so: nothing may go on until it is read back.
    fn sync_key_for_me(
        &self,
        view: &ClusterView,
        epoch: Epoch,
        p: &mut Planner,
    ) -> Result<Option<String>, String> {
        let me = &self.cfg.name;
        match &view.sync {
            Some(Ok(k)) if k.leader == *me => Ok(k.sync_standby.clone()),
            other => {
                p.push(Action::WriteSync {
                    epoch,
                    leader: me.clone(),
                    sync_standby: None,
                });
                p.again = true;
                Err(match other {
                    Some(Err(e)) => format!("the sync key is unreadable ({e}); rewriting it"),
                    _ => "writing the sync key that names me".into(),
                })
            }
        }
    }

    /// `synchronous_standby_names` while the `sync` key lists `standby` (or none).
    fn sync_names_wanted(&self, standby: Option<&str>) -> String {
        match (self.timing.synchronous, standby) {
            (SyncMode::Off, _) | (SyncMode::On, None) => String::new(),
            (_, Some(s)) => sync_names_for(s),
            (SyncMode::Strict, None) => "*".into(),
        }
    }

    /// Has `synchronous_standby_names` read `want` for at least a loop?
    fn names_settled(&self, now: Instant, want: &str) -> bool {
        self.names_seen
            .as_ref()
            .is_some_and(|(n, since)| n == want && now.since(*since) >= self.timing.loop_wait)
    }

    /// Before this leadership's PostgreSQL may accept a write (a promotion, or a
    /// start as primary): in synchronous mode the `sync` key names this node as the
    /// leader (so no former leader or its standby can take over behind writes it
    /// acknowledges), and `synchronous_standby_names` is what that key allows: `*`
    /// in strict mode, empty otherwise (Patroni's order). `running`: PostgreSQL runs
    /// (the names must be seen in effect); else the value is set for the start.
    /// `Err` says what is awaited; the actions that advance it are pushed.
    fn sync_before_writes(
        &mut self,
        now: Instant,
        obs: &Observation,
        epoch: Epoch,
        p: &mut Planner,
        running: bool,
    ) -> Result<(), String> {
        let standby = if self.timing.synchronous == SyncMode::Off {
            None
        } else {
            let Ok(view) = &obs.cluster else {
                return Err(
                    "synchronous mode: the sync key must name me first, etcd unreadable".into(),
                );
            };
            self.sync_key_for_me(view, epoch, p)
                .map_err(|why| format!("synchronous mode: {why}"))?
        };
        let want = self.sync_names_wanted(standby.as_deref());
        if !running {
            p.push(Action::SetSyncNames { names: want });
            return Ok(());
        }
        if self.timing.synchronous == SyncMode::Off {
            // Only a stale non-empty value (from an earlier synchronous leadership)
            // would hold commits back; an unknown one is not waited for.
            if obs.pg.sync_names.as_deref().is_some_and(|n| !n.is_empty()) {
                p.push(Action::SetSyncNames { names: want });
                return Err("clearing synchronous_standby_names (synchronous mode is off)".into());
            }
            return Ok(());
        }
        if obs.pg.sync_names.as_deref() != Some(want.as_str()) {
            p.push(Action::SetSyncNames {
                names: want.clone(),
            });
            return Err(format!("setting synchronous_standby_names to {want:?}"));
        }
        if !self.names_settled(now, &want) {
            return Err(format!(
                "synchronous_standby_names {want:?} takes effect in every process"
            ));
        }
        Ok(())
    }

    /// The running primary's synchronous replication, one step per iteration in
    /// DESIGN §3a's order: a standby is listed in the `sync` key only after
    /// `synchronous_standby_names` names it, PostgreSQL reports it `sync` and it
    /// flushed the WAL written before the names took effect (`catchup`); it is
    /// unlisted (guarded write) before the names stop naming it. A failed write
    /// changes nothing: the names keep what the key promises. Returns a note for the
    /// log line, `None` when synchronous mode is off and nothing is left to undo.
    fn manage_sync(
        &mut self,
        now: Instant,
        view: &ClusterView,
        pg: &PgStatus,
        epoch: Epoch,
        p: &mut Planner,
    ) -> Option<String> {
        let me = self.cfg.name.clone();
        let names = pg.sync_names.as_deref();
        if self.timing.synchronous == SyncMode::Off {
            if view.sync.is_some() {
                p.push(Action::DeleteSync { epoch });
                return Some("synchronous mode is off: deleting the sync key".into());
            }
            if names.is_some_and(|n| !n.is_empty()) {
                p.push(Action::SetSyncNames {
                    names: String::new(),
                });
                return Some("synchronous mode is off: clearing synchronous_standby_names".into());
            }
            return None;
        }
        let listed = match self.sync_key_for_me(view, epoch, p) {
            Ok(listed) => listed,
            Err(why) => return Some(why),
        };
        // A standby fit to be synchronous: streaming from us, a live member that may
        // take over (so listing it keeps a failover possible).
        let fit = |name: &str| {
            pg.standbys.iter().any(|s| s.name == name && s.streaming)
                && view.member(name).is_some_and(|m| {
                    m.name != me && !m.info.tags.nofailover && m.info.parse_error.is_none()
                })
        };
        if let Some(s) = listed {
            if fit(&s) {
                let want = sync_names_for(&s);
                if names != Some(want.as_str()) {
                    // Stricter than needed is safe: the key already lists it.
                    p.push(Action::SetSyncNames { names: want });
                    return Some(format!(
                        "synchronous standby {s}: restoring synchronous_standby_names"
                    ));
                }
                return Some(format!("synchronous standby {s}"));
            }
            // Unlist first (guarded); the names change only once the key says so.
            p.push(Action::WriteSync {
                epoch,
                leader: me,
                sync_standby: None,
            });
            p.again = true;
            return Some(format!(
                "synchronous standby {s} is not streaming; unlisting it before changing synchronous_standby_names"
            ));
        }
        // None listed: pick one (the one the names already name first, then the most
        // WAL flushed, then the name).
        let best = pg.standbys.iter().filter(|s| fit(&s.name)).max_by(|a, b| {
            let pending = |s: &StandbyStat| names == Some(sync_names_for(&s.name).as_str());
            (pending(a), a.flush, std::cmp::Reverse(&a.name)).cmp(&(
                pending(b),
                b.flush,
                std::cmp::Reverse(&b.name),
            ))
        });
        match best {
            Some(c) => {
                let want = sync_names_for(&c.name);
                if names != Some(want.as_str()) {
                    p.push(Action::SetSyncNames { names: want });
                    Some(format!("adding {} as synchronous standby", c.name))
                } else if c.sync && self.names_settled(now, &want) {
                    // Commits acknowledged before the names took effect need not be
                    // on `c` yet: it is listed only once it flushed past them.
                    let since = self.names_seen.as_ref().map_or(now, |(_, at)| *at);
                    let caught_up = catchup::standby_caught_up(
                        &mut self.sync_catchup,
                        epoch,
                        &want,
                        since,
                        pg.lsn,
                        c,
                    );
                    if let Err(why) = caught_up {
                        return Some(why);
                    }
                    p.push(Action::WriteSync {
                        epoch,
                        leader: me,
                        sync_standby: Some(c.name.clone()),
                    });
                    p.again = true;
                    Some(format!(
                        "{} is synchronous; listing it in the sync key",
                        c.name
                    ))
                } else {
                    Some(format!("waiting for {} to become synchronous", c.name))
                }
            }
            None => {
                let want = self.sync_names_wanted(None);
                if names != Some(want.as_str()) {
                    p.push(Action::SetSyncNames { names: want });
                }
                Some(if self.timing.synchronous == SyncMode::Strict {
                    "no synchronous standby: commits wait (synchronous_mode_strict)".into()
                } else {
                    "no synchronous standby: degraded to asynchronous replication".into()
                })
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn won(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        lease: LeaseId,
        granted_ttl: u32,
        granted_at: Instant,
        epoch: Epoch,
    ) -> Reason {
        let t = &self.timing;
        // DESIGN §1 step 4: after an early (or unknowable) expiry the old primary may
        // not know yet; wait until it has fenced or been reset.
        let (mut after, mut why) = (now, None);
        if let Some(v) = &self.vacancy
            && v.early
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
                    let old = v.old_ttl.unwrap_or(self.max_leader_ttl_seen);
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
        let mut l = Leadership {
            lease,
            epoch,
            ttl: granted_ttl,
            renewed_at: granted_at,
            last_pet: None,
            pet_pending: None,
            promote_after: after,
            delay_reason: why,
            promoted: obs.pg.role == PgRole::Primary,
            down_since: None,
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

impl Core {
    /// Plan the watchdog's arming (the open is a pet, S2) for a leadership just
    /// won or adopted, if `now + 2W <= H`; `F` counts from the planned instant until
    /// the shell's report comes back.
    fn plan_arm(&self, now: Instant, l: &mut Leadership, p: &mut Planner) {
        if let Some(w) = self.cfg.watchdog {
            let not_after = self.horizon_of(l).sub(w).sub(w);
            if now <= not_after {
                p.push(Action::PetWatchdog { not_after });
                l.pet_pending = Some(now);
            }
        }
    }
}

/// A clean stop is over: the last fence, planned after the stop job ended (no job
/// has run since: `Idle`), reported that no process of the PostgreSQL remains.
fn stop_checked(obs: &Observation) -> bool {
    obs.fence == Some(FenceOutcome::Complete) && matches!(obs.job, Job::Idle)
}

/// `synchronous_standby_names` that makes `standby` the one synchronous standby
/// (a quoted name: member names may hold characters the list syntax reserves).
pub fn sync_names_for(standby: &str) -> String {
    format!("\"{}\"", standby.replace('"', "\"\""))
}

/// Collects a plan's actions.
#[derive(Default)]
struct Planner {
    actions: Vec<Action>,
    again: bool,
}

impl Planner {
    fn push(&mut self, a: Action) {
        self.actions.push(a);
    }
}
