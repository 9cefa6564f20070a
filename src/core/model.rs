//! The vocabulary between the core and the shell: what the shell observed, what the
//! core plans. Plain data, no behaviour beyond parsing helpers.
//!
//! Owns: the observation and plan types, and the parsed form of values in etcd.
//! Must never: do I/O, or trust a value another writer left in etcd (every field
//! parsed from etcd has a safe default and a parse problem is carried, not raised).

use std::time::Duration;

use super::time::Instant;

/// etcd lease id.
pub type LeaseId = i64;
/// An epoch: the `create_revision` of the `leader` key for one leadership.
pub type Epoch = i64;
/// A WAL position (PostgreSQL LSN as an integer).
pub type Lsn = u64;

/// The largest lease `ttl` tenure accepts, in whole seconds: in the configuration
/// (file and `config` key), as granted by etcd (`validate_timing`), and in what other
/// members publish (`leader_ttl`, `leader_ttl_seen`). A published TTL above it no
/// configuration could have granted: it is garbled and left out, so a garbage value
/// cannot size a promote delay (fresh-eyes review of seed 253898, R1: a
/// `leader_ttl_seen` of 4e9 blocked failover for good and spread).
pub const MAX_TTL: u32 = 3600;
/// The largest watchdog timeout `W` a member may publish: S6(b) keeps
/// `2W <= ttl - M - R`, so no validated `W` reaches `MAX_TTL / 2`.
pub const MAX_WATCHDOG: u32 = MAX_TTL / 2;

/// The `leader` key as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderKey {
    /// The member name stored as the key's value.
    pub name: String,
    /// The key's `create_revision`: the leadership's epoch.
    pub epoch: Epoch,
    pub mod_revision: i64,
    /// The lease the key is bound to (0 = none, which only a foreign writer does).
    pub lease: LeaseId,
}

/// A change of `leader` reported by the scope watch (DESIGN §1 step 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderChange {
    /// When the shell received it.
    pub at: Instant,
    /// The change's etcd revision.
    pub revision: i64,
    /// A PUT: the key as written (its `epoch` is its create revision, `lease` the
    /// lease it is bound to); `None`: a DELETE.
    pub put: Option<LeaderKey>,
}

/// Tags a member publishes (Patroni's names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tags {
    /// Never take the leader key.
    pub nofailover: bool,
    /// Patroni's: health endpoints for read traffic (`/replica`, `/read-only`, ...)
    /// answer 503 on this member. Informational for the core.
    pub noloadbalance: bool,
    /// Patroni's: never made a synchronous standby (a replica behind a slow link
    /// would slow every commit). It may still take over in asynchronous mode.
    pub nosync: bool,
    /// Patroni's: a replica new replicas are built from (`pg_basebackup` from it,
    /// not from the primary), while it streams close to the leader
    /// (`Core::clone_source`).
    pub clonefrom: bool,
    /// Operators' own tags (`[tags] dc = "east"`), string-valued, sorted by name:
    /// matched by the health endpoints' `?tag_<name>=<value>`.
    pub custom: Vec<(String, String)>,
}

/// The parsed JSON of `members/<name>`. Missing or garbled fields take their
/// default; `parse_error` says what was wrong so the shell can log it once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberInfo {
    /// `postgres://host:port/postgres`
    pub conn_url: String,
    pub api_url: String,
    /// `running`, `starting`, `stopped`, `fenced`, ... (informational)
    pub state: String,
    /// `primary` or `replica`.
    pub role: String,
    pub version: String,
    /// The member's WAL position: current LSN on a primary, the larger of receive and
    /// replay LSN on a replica.
    pub xlog_location: Lsn,
    /// Replica: `pg_last_wal_receive_lsn()` and `pg_last_wal_replay_lsn()`
    /// (Patroni's `receive_lsn`/`replay_lsn`, which `patronictl list` shows).
    pub receive_lsn: Option<Lsn>,
    pub replay_lsn: Option<Lsn>,
    /// Replica: Patroni's `replication_state` (`streaming`, ...).
    pub replication_state: Option<String>,
    pub timeline: u32,
    /// The system identifier of the member's data directory, while it has one
    /// (`database_system_identifier`, a string as in Patroni's API: it does not
    /// fit a double). An empty node never races for the bootstrap lock while a
    /// member shows data and `initialize` is missing (`core::bootstrap`).
    pub sysid: Option<u64>,
    pub tags: Tags,
    /// The epoch of the primary this member runs under (its own if it leads).
    pub epoch: Option<Epoch>,
    /// Read-back watchdog timeout `W` in whole seconds, if this member runs one
    /// (candidates need it for DESIGN §1 step 4's promote delay).
    pub watchdog_timeout: Option<u32>,
    /// The lease of the `leader` key when this member holds it (lets a candidate that
    /// never saw the key check the old lease is gone).
    pub leader_lease: Option<LeaseId>,
    /// The TTL etcd granted for `leader_lease` (whole seconds): after an early expiry
    /// a candidate without a watchdog figure waits the *old* lease's TTL, never the
    /// current config's (DESIGN §5, issue 8 finding 2).
    pub leader_ttl: Option<u32>,
    /// The largest granted TTL of a leader lease this member saw recently (its own,
    /// a polled one, a vacated one it judged), kept until that TTL (+ `R` + `M`) after
    /// it last saw the lease. A node that lost its memory in a crash folds in the
    /// largest one published (never shorter than what it knows): after a ttl lowered
    /// by `config`, an old leader may still hold a lease granted under the old ttl
    /// (DESIGN §1 step 4, §5; seed 253898 review). Written only when it changes.
    pub leader_ttl_seen: Option<u32>,
    /// The member's own `L_w + R` (`loop_wait + retry_timeout` as it applied
    /// them): a replica judges its leader's DELETE with no wider window, a leader
    /// keeps its earlier one until its own shows this (review L2, `core::window`).
    pub poll_window: Option<Duration>,
    /// PostgreSQL running and answering queries.
    pub pg_healthy: bool,
    /// Set by a leader that stopped its PostgreSQL cleanly and is about to release the
    /// key of this epoch. Shown only (ctl, tools): it is not epoch-guarded and carries
    /// no LSN, so no candidate skips the early-expiry delay on it — the `release`
    /// marker is the one proof (DESIGN §1 step 4).
    pub released: Option<Epoch>,
    /// The member key does not publish `"acquire_record": true` (or is not a JSON
    /// object): its agent is older than the acquisition record, which its
    /// acquisitions may not write (finding L1, docs/design.md "the acquisition
    /// record"). Set by the parser; `false` for a value this version builds.
    pub lacks_acquire_record: bool,
    pub parse_error: Option<String>,
}

/// `members/<name>` as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub mod_revision: i64,
    pub lease: LeaseId,
    pub info: MemberInfo,
}

/// The `initialize` key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Initialize {
    /// A bootstrap is under way: the key is a lock bound to the bootstrapper's lease.
    Locked { lease: LeaseId, holder: String },
    /// The cluster's database system identifier.
    Done { sysid: u64 },
    /// Something we cannot parse. Never bootstrap over it.
    Garbage(String),
}

/// PostgreSQL's text form of an LSN (`16/B374D848`), as Patroni prints it too.
/// The one formatter of the crate.
pub fn lsn_text(l: Lsn) -> String {
    format!("{:X}/{:X}", l >> 32, l & 0xFFFF_FFFF)
}

/// PostgreSQL's `X/Y` LSN text (two hex numbers of up to 32 bits each; spaces
/// around it allowed). The one parser of the crate.
pub fn parse_lsn(s: &str) -> Option<Lsn> {
    let (hi, lo) = s.trim().split_once('/')?;
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some((u64::from(hi) << 32) | u64::from(lo))
}

/// One `history` entry: `[timeline, lsn, reason, timestamp, new_leader]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    pub timeline: u32,
    pub lsn: Lsn,
    pub reason: String,
    pub timestamp: String,
    pub new_leader: String,
}

/// The dynamic configuration (`config` key), already parsed and validated by the
/// shell against this node's `W`, `M`, `B` (DESIGN §3). The core only uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// The ttl to request at the next grant (etcd may grant more; the granted value
    /// is what the core uses for the lease it holds).
    pub ttl: u32,
    pub loop_wait: Duration,
    pub retry_timeout: Duration,
    pub safety_margin: Duration,
    pub demote_budget: Duration,
    /// `Some(d)`: always wait `d` before promoting, early expiry or not.
    pub promote_delay: Option<Duration>,
    pub maximum_lag_on_failover: u64,
    pub primary_start_timeout: Duration,
    /// `synchronous_mode` / `synchronous_mode_strict` of the `config` key.
    pub synchronous: SyncMode,
    /// `synchronous_node_count` of the `config` key (Patroni's name): how many
    /// synchronous standbys the primary keeps when that many are fit, at least 1.
    pub synchronous_node_count: u32,
    /// `maximum_lag_on_syncnode` (Patroni's name): bytes a synchronous standby may
    /// fall behind the most advanced fit standby (for a loop) before a healthy one
    /// is added and it goes (`None`: never; Patroni's -1). A performance rule that
    /// adds before it removes: the key never lists fewer standbys for it.
    pub maximum_lag_on_syncnode: Option<u64>,
}

/// Synchronous replication (DESIGN §3a, `config` key `synchronous_mode` and
/// `synchronous_mode_strict`, Patroni's names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// Asynchronous replication: any healthy, fresh-enough replica may take over.
    #[default]
    Off,
    /// Up to `synchronous_node_count` synchronous standbys, as many as are fit;
    /// with none left the primary degrades to asynchronous and the `sync` key says
    /// so (no standby listed).
    On,
    /// As `On`, but with no standby left commits wait (`synchronous_standby_names =
    /// '*'`): no write is acknowledged by the primary alone.
    Strict,
}

/// The `sync` key: who may take the leader key in synchronous mode (the leader
/// that wrote it, or a standby it lists).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncKey {
    pub leader: String,
    /// The synchronous standbys, sorted, no duplicates (Patroni's comma-separated
    /// `sync_standby`). Empty: no synchronous standby (strict: commits wait;
    /// otherwise degraded to asynchronous); only `leader` may take over then.
    /// INVARIANT (DESIGN §3a, kept by `Core::manage_sync`): every standby listed
    /// here is named in `synchronous_standby_names` in a form that makes every
    /// commit wait for each named standby, and had flushed every commit
    /// acknowledged before it was named; so each listed standby holds every
    /// acknowledged commit, and any of them may take over.
    pub sync_standbys: Vec<String>,
}

impl SyncKey {
    /// May `name` take the leader key under this sync state?
    pub fn allows(&self, name: &str) -> bool {
        self.leader == name || self.lists(name)
    }

    /// Does the key list `name` as a synchronous standby?
    pub fn lists(&self, name: &str) -> bool {
        self.sync_standbys.iter().any(|s| s == name)
    }

    /// The standbys for a human: `pg2, pg3`, or `none`.
    pub fn standbys_text(&self) -> String {
        if self.sync_standbys.is_empty() {
            "none".into()
        } else {
            self.sync_standbys.join(", ")
        }
    }
}

/// One row of `pg_stat_replication` on the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbyStat {
    /// `application_name`: the member name (tenure's replicas set it so).
    pub name: String,
    /// `state = 'streaming'`.
    pub streaming: bool,
    /// `sync_state = 'sync'`: commits wait for this standby's flush.
    pub sync: bool,
    pub flush: Lsn,
}

/// A linearizable read of the whole scope (one range request).
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    /// Header revision of the read.
    pub revision: i64,
    pub leader: Option<LeaderKey>,
    pub members: Vec<Member>,
    pub initialize: Option<Initialize>,
    pub history: Vec<HistoryEntry>,
    /// The raw `config` key (parsed and validated by the shell, not the core).
    pub config: Option<String>,
    /// The `config` key's mod revision (0: absent). The acquire txn compares it, so
    /// a candidate that missed a change (a pause) cannot take the key.
    pub config_revision: i64,
    /// An operator's `confirm_epoch` (garbage is logged by the shell and left out).
    pub confirm_epoch: Option<ConfirmEpoch>,
    /// The `sync` key: `Err` names what is wrong with a value another writer left
    /// (in synchronous mode that allows nobody but a leader to rewrite it).
    pub sync: Option<Result<SyncKey, String>>,
    /// The `rollback` marker: etcd went back in time (wiped or restored) and no
    /// operator has confirmed it yet. Garbage in the key is still a marker.
    pub rollback: Option<RollbackMarker>,
    /// The `status` key's `optime`: the leader's last published WAL position
    /// (what replicas' lag is measured against, as Patroni does). Informational:
    /// the core never reads it; garbage is logged by the shell and left out.
    pub status_optime: Option<Lsn>,
    /// The `status` key's `slots`: the physical slots the leader keeps and their
    /// restart positions, sorted by name, which replicas copy ahead of a failover
    /// (`None`: not published, or garbage the shell logged; replicas then leave
    /// their slots alone). Informational for the core, like `status_optime`.
    pub status_slots: Option<Vec<(String, Lsn)>>,
    /// The `status` key's `retain_slots`: the member slots the leader keeps,
    /// departed members' among them (`member_slots_ttl`); a new leader keeps them
    /// too. Informational for the core.
    pub status_retain_slots: Option<Vec<String>>,
    /// The `status` key's mod revision (0: absent). A replica copies the slots
    /// only from a value written after the current leader's key was made (its
    /// epoch): the last leadership's list can name positions past the switch.
    pub status_revision: i64,
    /// The `failover` key (Patroni's switchover / manual failover request).
    pub failover: Option<FailoverRequest>,
    /// The `release` key: the marker of the last planned hand-over (DESIGN §1 step 4);
    /// `Err` says what is wrong with a value that does not parse (it proves nothing).
    pub release: Option<Result<ReleaseMarker, String>>,
    /// The `release` key's mod revision (0: absent). The acquire txn compares it and
    /// marks the marker taken in the same txn, so a marker still at this revision
    /// proves no acquisition came between its DELETE and ours (review F1).
    pub release_revision: i64,
    /// The acquisition record in the `release` key (`None`: absent, or a value
    /// without one: a hand-over marker, an older agent's, garbage). Every acquire
    /// txn writes it, so its acquisition's epoch is `release_revision` and a read
    /// shows the last acquisition even if no read showed its key (DESIGN §1 step 1,
    /// docs/design.md "the acquisition record").
    pub release_acquired: Option<AcquiredRecord>,
}

/// The `failover` key as Patroni writes it (`{"leader", "member", "scheduled_at"}`):
/// a switchover from `leader` (or from whoever leads) to `member` (or to any fit
/// replica), or, with no leader in the cluster, a manual failover to `member`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailoverRequest {
    pub leader: Option<String>,
    pub member: Option<String>,
    /// `scheduled_at` on the core's clock: the shell converts the RFC 3339 time with
    /// its offset against the wall clock of the same iteration.
    pub scheduled_at: Option<Instant>,
    /// `scheduled_at` as written, for messages.
    pub scheduled_text: Option<String>,
    /// The key's `mod_revision`: a refusal deletes exactly this request.
    pub mod_revision: i64,
    /// The value does not parse (or its time does not): the leader deletes it.
    pub parse_error: Option<String>,
}

/// The `release` marker (DESIGN §1 step 4 "A clean hand-over skips the delay only
/// with proof"; docs/design.md "the release marker"): written by the holder of
/// `epoch`, in the txn (guarded by that epoch) that deletes the key, after its
/// PostgreSQL stopped with a shutdown checkpoint at `lsn` on `timeline` and a
/// fail-closed fence check found no process of it left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseMarker {
    pub epoch: Epoch,
    /// The shutdown checkpoint's location: every commit the old primary acknowledged
    /// precedes it.
    pub lsn: Lsn,
    pub timeline: u32,
    /// The candidate the switchover names (`None`: any).
    pub candidate: Option<String>,
    /// The member that wrote it.
    pub by: String,
    /// Set by the acquire txn that took the key after this marker (in the same txn):
    /// the marker no longer proves anything about a later DELETE. Shown to
    /// operators; `None` while the vacancy it records is still open.
    pub taken_by: Option<String>,
}

/// What an acquire txn writes into the `release` key besides the leader key (one
/// txn, so one revision: the key's mod revision is the new leadership's epoch). The
/// txn compares `release`'s mod revision with the one its candidate read, so no
/// candidate wins on a read older than another acquisition, and a read that never
/// showed a leadership's key still shows its record until the next acquisition or
/// hand-over (docs/design.md "the acquisition record").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquiredRecord {
    /// The member that acquired.
    pub by: String,
    /// Its leader lease: must be seen gone like any old leader's (DESIGN §1 step 4).
    pub lease: LeaseId,
    /// The TTL etcd granted that lease, in seconds (as written: the core caps it).
    pub ttl: i64,
}

/// The `confirm_epoch` key, written by `tenure confirm-epoch` after an operator
/// checked that etcd was wiped or restored (DESIGN §3): a node whose data carries an
/// epoch `<= up_to` may lead under a smaller leader-key epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfirmEpoch {
    pub up_to: Epoch,
    pub by: String,
    pub at: String,
}

/// The `rollback` key (DESIGN §3): written create-only by the first node that saw
/// etcd go back in time (a read's revision below one it had seen, a member key older
/// than one it had seen, or `initialize` missing while it has data); deleted only by
/// `tenure confirm-epoch`. While it exists no node takes the leader key or promotes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollbackMarker {
    /// The full key, for messages (`<namespace>/<scope>/rollback`).
    pub key: String,
    /// The highest cluster revision the writer had seen before (0: none remembered).
    pub seen_revision: i64,
    /// The revision of the read that showed the rollback.
    pub found_revision: i64,
    /// The member that wrote it.
    pub by: String,
    /// When (RFC 3339, the writer's wall clock).
    pub at: String,
    /// What the writer saw, in words.
    pub reason: String,
    /// The value did not parse: it still counts as a marker (never an unsafe
    /// promotion), and this says what was wrong.
    pub parse_error: Option<String>,
}

/// What this node saw that shows etcd went back in time: the content of the
/// `rollback` marker it asks the shell to write (the shell adds who and when).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackSeen {
    pub seen_revision: i64,
    pub found_revision: i64,
    pub reason: String,
}

impl ClusterView {
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// The newest timeline in `history` (a promotion to timeline N+1 appends
    /// `[N, ...]`), or 1 with no history.
    pub fn newest_timeline(&self) -> u32 {
        self.history
            .iter()
            .map(|h| h.timeline.saturating_add(1))
            .max()
            .unwrap_or(1)
    }
}

/// Result of a confirmed renewal (DESIGN §1 step 2): a keepalive followed by a
/// linearizable read of `leader`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    pub lease: LeaseId,
    /// Send instant of the keepalive.
    pub sent_at: Instant,
    pub outcome: RenewalOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewalOutcome {
    /// Both succeeded in time; keepalive TTL > 0; the read showed `value == me`,
    /// `create_revision == epoch`, `lease == L`.
    Counted { ttl: i64 },
    /// The keepalive answered TTL <= 0 / lease not found.
    LeaseGone,
    /// The read showed the key missing, foreign, or with another epoch or lease.
    KeyLost { found: Option<LeaderKey> },
    /// Timed out or failed (etcd unreachable, no quorum, ...).
    Failed(String),
}

/// Outcome of an `Acquire` action (DESIGN §1 step 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    Won {
        lease: LeaseId,
        /// TTL etcd granted (whole seconds), never the configured number.
        granted_ttl: u32,
        /// Send instant of the grant: the first horizon is measured from here.
        granted_at: Instant,
        epoch: Epoch,
    },
    /// Someone else holds the key (the txn's If failed). The granted lease was revoked
    /// by the shell.
    Lost,
    /// Nothing was sent that could have created the key (the grant failed, no read
    /// to bind to), or the txn was refused; any granted lease was revoked.
    Failed(String),
    /// The lease was granted but the txn got no answer in time (or an error that
    /// does not say it was not applied): etcd may have applied it. The shell kept
    /// the lease. The next read that answers decides (`Core::step`): the key naming
    /// us on this lease is the win (the answer was lost on its way back), anything
    /// else a failure, and the lease is revoked.
    Unanswered {
        lease: LeaseId,
        granted_ttl: u32,
        granted_at: Instant,
        why: String,
    },
}

/// Outcome of a `ClaimInitialize` action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    Won { lease: LeaseId },
    Lost,
    Failed(String),
}

/// A `LeaseTimeToLive` answer about the leader's lease (DESIGN §1 step 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasePoll {
    pub lease: LeaseId,
    /// Send instant of the request.
    pub sent_at: Instant,
    /// `None`: the lease does not exist (TTL -1). `Some(ttl)`: remaining TTL in whole
    /// seconds (truncated; may be <= 0 while a revoke is in flight).
    pub ttl: Option<i64>,
    /// The TTL the lease was granted with (`grantedTTL`), when it exists.
    pub granted_ttl: Option<i64>,
    /// Whether the lease still has keys attached.
    pub has_keys: bool,
}

/// The local data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataDir {
    /// Absent or empty: safe to initdb or basebackup into.
    Empty,
    /// A cluster with this system identifier. `was_primary`: pg_control says it last
    /// ran as a primary (in production, or shut down / crashed out of it), so its WAL
    /// may have forked from the new leader's: rewind before following.
    Present { sysid: u64, was_primary: bool },
    /// Non-empty but not a usable cluster (a half-written basebackup, garbage).
    /// Never overwrite: move aside only when configured.
    Unusable(String),
    /// Held for the operator: not empty while a replica build's mark is there
    /// (`pg::job`: a method wrote into it instead of its build directory, or the
    /// build was cut short by a crash, a fence or a forced reinit while a method
    /// ran), so what it holds was never checked; or a bootstrap's (initdb or the
    /// roles failed, or the agent died before they were done), so it is a cluster
    /// nobody agreed on. Never started, built into or
    /// moved aside by tenure (not even with `move_aside_unusable`: a method that
    /// always does so would fill the disk with moved copies) until the operator
    /// removes the mark, `<data_dir>.`[`BUILD_MARK`], or empties the directory.
    Held(String),
}

impl DataDir {
    /// The system identifier of a usable data directory (published in the member
    /// key and the API; an empty node's bootstrap waits for members that show one).
    pub fn sysid(&self) -> Option<u64> {
        match self {
            DataDir::Present { sysid, .. } => Some(*sysid),
            _ => None,
        }
    }
}

/// The suffix of the file next to the data directory that a replica build
/// writes before any method runs and removes only once its checked copy is
/// about to be moved in (or the build ended with the directory still empty),
/// and a bootstrap writes before initdb and removes as its last step:
/// while it is there, a data directory that is not empty is
/// [`DataDir::Held`]. Its text says why.
pub const BUILD_MARK: &str = "building";

/// What the local PostgreSQL is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgRole {
    Stopped,
    /// A postmaster runs but does not answer queries (starting, recovering, wedged).
    Unresponsive,
    Primary,
    Replica,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgStatus {
    pub data: DataDir,
    pub role: PgRole,
    pub timeline: u32,
    /// Primary: current LSN. Replica: max(receive, replay).
    pub lsn: Lsn,
    /// Replica: the member name it is configured to follow (application of our own
    /// standby config), if any.
    pub following: Option<String>,
    /// Replica: the WAL receiver is streaming.
    pub streaming: bool,
    /// The epoch in the data's `tenure.epoch` row (on a replica: its primary's,
    /// replicated). `None`: PostgreSQL not answering, or no row yet.
    pub epoch: Option<Epoch>,
    /// Who wrote that row, and whether the read failed (`EpochRow::unread`).
    pub epoch_row: EpochRow,
    /// `synchronous_standby_names` in effect (`None`: not answering).
    pub sync_names: Option<String>,
    /// Primary: `pg_stat_replication`.
    pub standbys: Vec<StandbyStat>,
    /// What the health API reports and the core never reads.
    pub report: PgReport,
}

/// The rest of the `tenure.epoch` row as read (DESIGN §1 step 5, §3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochRow {
    /// The member that wrote the row (`None`: no row, or not read).
    pub member: Option<String>,
    /// The leader lease it held then (`None`: no row, or a row written before the
    /// column existed).
    pub lease: Option<LeaseId>,
    /// The table exists but the read of the row failed (a timeout, an error): the
    /// epoch is unknown, not absent. The core keeps what it knew (a failed read must
    /// never pass the epoch-regression check, DESIGN §3).
    pub unread: bool,
}

/// Facts of the probe that only the health API reports (Patroni's status fields).
/// The core must not decide anything on them: they are for operators and load
/// balancers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgReport {
    /// `server_version_num`, e.g. 150004.
    pub server_version: Option<u32>,
    /// `pg_postmaster_start_time()` as Patroni prints it
    /// (`2024-05-01 10:00:00.123456+00:00`).
    pub postmaster_start_time: Option<String>,
    /// Replica: `pg_last_wal_receive_lsn()`.
    pub receive_lsn: Option<Lsn>,
    /// Replica: `pg_last_wal_replay_lsn()`.
    pub replay_lsn: Option<Lsn>,
    /// Replica: `pg_stat_wal_receiver.latest_end_lsn`, the primary's WAL end as its
    /// sender last reported it (Patroni measures lag against the larger of this and
    /// the `status` key's `optime`).
    pub latest_end_lsn: Option<Lsn>,
    /// Replica: `pg_last_xact_replay_timestamp()`, formatted like the start time.
    pub replayed_timestamp: Option<String>,
    /// Replica: `pg_is_wal_replay_paused()`.
    pub replay_paused: Option<bool>,
    /// Primary: `pg_stat_replication` as a JSON array of Patroni's objects
    /// (`usename`, `application_name`, `client_addr`, `state`, `sync_state`,
    /// `sync_priority`), as PostgreSQL rendered it.
    pub replication_json: Option<String>,
    /// `pg_settings.pending_restart` is set for some parameter (Patroni's
    /// `pending_restart`; `POST /restart`'s `restart_pending` condition).
    pub pending_restart: bool,
    /// The local physical, non-temporary replication slots as the probe's JSON
    /// column (`pg::slots::parse_local`; `None`: none). Read by the shell's slot
    /// upkeep and copies and by `/metrics`; the core never decides on it.
    pub slots_json: Option<String>,
}

impl PgStatus {
    /// Whether this PostgreSQL may accept writes: it answers as a primary, or a
    /// postmaster runs without answering while its data directory says it last ran
    /// as a primary (`pg_control` in production or crash recovery, no
    /// `standby.signal`): a wedged or recovering primary is one (S4).
    pub fn may_accept_writes(&self) -> bool {
        match self.role {
            PgRole::Primary => true,
            PgRole::Unresponsive => matches!(
                self.data,
                DataDir::Present {
                    was_primary: true,
                    ..
                }
            ),
            PgRole::Replica | PgRole::Stopped => false,
        }
    }

    /// What is known of a PostgreSQL that did not answer a query (stopped, not
    /// answering, or not asked at all): its data directory and role, nothing else.
    pub fn unanswered(data: DataDir, role: PgRole) -> PgStatus {
        PgStatus {
            data,
            role,
            timeline: 0,
            lsn: 0,
            following: None,
            streaming: false,
            epoch: None,
            epoch_row: EpochRow::default(),
            sync_names: None,
            standbys: Vec::new(),
            report: PgReport::default(),
        }
    }
}

/// The first step of a `Rewind` job (a `CHECKPOINT` on the source, see `pg::job`).
/// A job that fails there never touched the data directory: the source was not
/// reachable (a partition, the leader restarting), which is no failed rewind.
pub const REWIND_SOURCE_STEP: &str = "CHECKPOINT on the rewind source (psql)";

/// A long PostgreSQL action that runs as a supervised child process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobKind {
    InitDb,
    Basebackup {
        from: String,
    },
    Rewind {
        from: String,
    },
    StartPrimary,
    StartReplica {
        leader: String,
    },
    /// A clean stop (`pg_ctl stop -m fast`): switchovers and shutdown only.
    /// (`StartReplica { leader: "" }` starts a standby with no upstream: it replays
    /// its own WAL so it can publish a position while no leader exists.)
    Stop,
    /// An operator's restart (`POST /restart`, `Core::restart_job`): a fast stop,
    /// then a start with the files as they are, so a primary starts again as a
    /// primary under the same leadership and a standby as a standby.
    /// `start_timeout`: `pg_ctl start -t`, in seconds (the request's `timeout`).
    Restart {
        start_timeout: Option<u32>,
    },
    /// An operator's reinitialize (`POST /reinitialize`, `Core::reinitialize_job`)
    /// of a replica: a fast stop if PostgreSQL runs, then the data directory is
    /// moved aside (never deleted, DESIGN §3a); the follower then finds it empty and
    /// clones the leader afresh (`Basebackup`).
    Reinitialize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    Idle,
    Running {
        kind: JobKind,
        since: Instant,
    },
    /// Finished since the last observation.
    Finished {
        kind: JobKind,
        ok: bool,
        detail: String,
    },
}

/// Outcome of a fence (DESIGN S1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceOutcome {
    /// No process of that PostgreSQL remains.
    Complete,
    /// Some process survived until the deadline.
    Incomplete,
}

/// What became of a pet of the watchdog (DESIGN §5: the shell reports what really
/// happened; the core's `last_pet` and `F` come only from these reports).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PetReport {
    /// The instant read just before the ping (or the open) was sent to the device.
    /// Never later than the ping itself, so `last_pet + W` is never later than the
    /// device's own deadline.
    pub at: Instant,
    pub outcome: PetOutcome,
}

impl PetReport {
    /// Fold a new report into the one not yet observed: the last pet that reached
    /// the device is what its deadline counts from, so a later skipped or failed pet
    /// never hides an earlier one that was done.
    pub fn fold(prev: Option<PetReport>, new: PetReport) -> PetReport {
        match prev {
            Some(p) if p.outcome == PetOutcome::Done && new.outcome != PetOutcome::Done => p,
            _ => new,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PetOutcome {
    /// Every watchdog in use accepted the ping (or the open).
    Done,
    /// Not sent: the instant had passed the core's `not_after` (S2).
    Skipped(String),
    /// The device refused or failed: nothing is known to have been pinged.
    Failed(String),
}

/// Everything the shell learned in one iteration.
#[derive(Clone, Debug)]
pub struct Observation {
    /// This iteration's linearizable read of the scope; `Err` = etcd unreachable.
    pub cluster: Result<ClusterView, String>,
    /// A confirmed renewal attempted this iteration (only when the core holds a lease
    /// and this iteration was a renewal tick).
    pub renewal: Option<Renewal>,
    /// Outcome of the previous plan's `Acquire`.
    pub acquire: Option<AcquireOutcome>,
    /// Outcome of the previous plan's `ClaimInitialize`.
    pub claim: Option<ClaimOutcome>,
    /// Outcome of the previous plan's `RecordInitialize` or `CreateInitialize`
    /// (true = written).
    pub recorded_initialize: Option<bool>,
    /// Outcome of the previous plan's `Fence`.
    pub fence: Option<FenceOutcome>,
    /// Outcome of the previous plan's `Promote` (true = promoted).
    pub promoted: Option<bool>,
    /// Outcome of the previous plan's `Release` (true = key deleted by us).
    pub released: Option<bool>,
    /// `LeaseTimeToLive` of the lease named by `lease_to_poll()`.
    pub lease_poll: Option<LeasePoll>,
    /// The watch saw `leader` deleted (or taken by another) since the last iteration,
    /// at this instant (first such event).
    pub leader_deleted_at: Option<Instant>,
    /// That event's etcd revision: the same for every node, so every candidate
    /// judges its rivals' positions fresh against the same DELETE (DESIGN §3a:
    /// "compare only entries written after the DELETE").
    pub leader_deleted_revision: Option<i64>,
    /// Every change of `leader` the scope watch reported since the last step, in
    /// etcd's order (DESIGN §1 step 4): a PUT names a leadership this node may never
    /// have read (one shorter than a loop), whose lease it never polled.
    pub leader_changes: Vec<LeaderChange>,
    /// The start revision of the scope watch, if it was open when this iteration's
    /// read was sent and had delivered every event since that revision without a
    /// gap (`None`: not open, broken since, or events dropped). A leadership inside
    /// a gap may have come and gone unseen: the core then judges the vacancy
    /// untimeable unless a read proves the key unchanged (`core::vacancy`).
    pub watch_from: Option<i64>,
    pub pg: PgStatus,
    pub job: Job,
    /// SIGTERM/SIGINT arrived: shut down cleanly.
    pub shutdown: bool,
    /// The previous plan's `PetWatchdog` could not arm a usable watchdog and the
    /// watchdog is required (S3: release the key, do not promote). In `automatic`
    /// mode the shell runs without one instead and never reports this.
    pub watchdog_failed: Option<String>,
    /// The required watchdog device failed the shell's last check (an open, the
    /// read-back `W` against S6, a magic close, made while no PostgreSQL of this
    /// node may accept writes): why. Reported every iteration until a check
    /// passes. Such a node is no candidate (S3: it could not arm the fence, so a
    /// win would only be given back, and the next winner would wait a whole
    /// promote delay for that DELETE); it still follows as a replica.
    pub watchdog_unusable: Option<String>,
    /// How much further `CLOCK_REALTIME` moved than `CLOCK_BOOTTIME` since the last
    /// iteration (a hypervisor pause, S5): lease time lost without `now` showing it.
    pub clock_jump: Duration,
    /// A guarded write of the previous plan (or the history append after a promote)
    /// was refused by the epoch guard: leadership is lost, fence at once (DESIGN §1
    /// step 5). Names the write.
    pub guard_refused: Option<String>,
    /// The pet the shell made (or skipped) since the last step: right after this
    /// iteration's counted renewal (`Core::pet_on_renewal`) or for the previous
    /// plan's `PetWatchdog`.
    pub pet: Option<PetReport>,
    /// The deadline `G` the guardian holds, as the shell last delivered it whole to
    /// its pipe (DESIGN §2 "The guardian"); `None`: no guardian, none handed yet in
    /// this leadership, or stood down. A fact, not a plan: the core promotes with the
    /// guardian as its fence only once it holds one (S3).
    pub guardian_holds: Option<Instant>,
    /// Outcome of the previous plan's `HandOver`.
    pub handed_over: Option<HandOverOutcome>,
}

/// What became of a `HandOver` (the switchover's release).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandOverOutcome {
    /// The marker is written and the key deleted (one guarded txn); the lease was
    /// revoked (or its revoke failed: it expires).
    Released(ReleaseMarker),
    /// Nothing was written (the control file does not say `shut down`, etcd could not
    /// be reached before the txn was sent): the hand-over may be called off.
    NotSent(String),
    /// The txn was sent and its answer is unknown: the marker may exist, so the local
    /// PostgreSQL must never run as primary again under this epoch.
    Unknown(String),
}

impl Observation {
    /// A reading with no outcome of an earlier action: the cluster as read and the
    /// local PostgreSQL, nothing else (tests, the simulation and benchmarks build on
    /// it; the agent fills every field itself).
    pub fn reading(cluster: Result<ClusterView, String>, pg: PgStatus) -> Observation {
        Observation {
            cluster,
            renewal: None,
            acquire: None,
            claim: None,
            recorded_initialize: None,
            fence: None,
            promoted: None,
            released: None,
            lease_poll: None,
            leader_deleted_at: None,
            leader_deleted_revision: None,
            leader_changes: Vec::new(),
            watch_from: None,
            pg,
            job: Job::Idle,
            shutdown: false,
            watchdog_failed: None,
            watchdog_unusable: None,
            clock_jump: Duration::ZERO,
            guard_refused: None,
            pet: None,
            guardian_holds: None,
            handed_over: None,
        }
    }
}

/// What the core asks the shell to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Grant a lease and create `initialize` bound to it (bootstrap lock).
    ClaimInitialize,
    /// Write the system identifier into `initialize` (guarded by our lock lease) and
    /// drop the lock lease.
    RecordInitialize { sysid: u64, lease: LeaseId },
    /// Create-only `initialize` = sysid (a node with data re-creating a lost key;
    /// never initdb because a key is missing, DESIGN §3), and in the same txn the
    /// `rollback` marker, create-only: `initialize` is never deleted, so its absence
    /// next to data means etcd lost its memory.
    CreateInitialize { sysid: u64, rollback: RollbackSeen },
    /// Create-only `rollback` marker (the first writer wins): etcd went back in time.
    MarkRollback(RollbackSeen),
    /// Hold the local data directory for the operator (`<data_dir>.`[`BUILD_MARK`]
    /// with `why`): what it holds is no cluster `initialize` names, e.g. a
    /// bootstrap that finished after its lock was lost.
    HoldDataDir { why: String },
    /// Grant a fresh lease and try the acquire txn.
    Acquire,
    /// Start a supervised job.
    StartJob(JobKind),
    /// `pg_promote()`. The `history` entry follows from `AppendHistory`, planned
    /// while the leader's timeline is newer than `history` knows.
    Promote { epoch: Epoch },
    /// Point a running replica at another leader (rewrite its conninfo, reload).
    Retarget { leader: String },
    /// Immediate fence: SIGQUIT to the postmaster, wait until no process remains.
    Fence,
    /// Delete `leader` (guarded by epoch) and revoke the lease.
    Release { lease: LeaseId, epoch: Epoch },
    /// Revoke a lease we no longer use (after a fence, never resume on it).
    Revoke { lease: LeaseId },
    /// Append to `history` (guarded by epoch) the fork into `timeline`: its parent
    /// timeline and switch point, which the shell reads from PostgreSQL's own
    /// timeline history file (`pg_wal/<timeline>.history`), not from a position
    /// probed around the promotion (review F2).
    AppendHistory { epoch: Epoch, timeline: u32 },
    /// Write the `sync` key (guarded by epoch). DESIGN §3a's order: a standby is
    /// listed only after it is `sync`; it is unlisted before the names drop it.
    WriteSync {
        epoch: Epoch,
        leader: String,
        /// Sorted, no duplicates.
        sync_standbys: Vec<String>,
    },
    /// Delete the `sync` key (guarded by epoch; synchronous mode turned off).
    DeleteSync { epoch: Epoch },
    /// Set `synchronous_standby_names` (the agent's own config file, then reload;
    /// while stopped, the value the next start uses).
    SetSyncNames { names: String },
    /// Create a physical replication slot per listed member, drop other tenure slots.
    SyncSlots { members: Vec<String> },
    /// On a replica following the leader: keep copies of the slots the leader
    /// publishes in the `status` key, so they survive a failover (`copies` false:
    /// tagged `nofailover`, keep none). The shell plans the SQL (`pg::slots`).
    CopySlots { copies: bool },
    /// Move an unusable data directory aside (never delete) — only when configured.
    MoveDataAside,
    /// Arm (open) or pet the watchdog, only at an instant `<= not_after` (S2: the core
    /// computed `not_after = H - 2W`); the shell reports what happened in
    /// `Observation::pet`. Pets after a renewal go through `Core::pet_on_renewal`.
    PetWatchdog { not_after: Instant },
    /// Disarm the watchdog (only after a complete fence or clean stop, S1).
    DisarmWatchdog,
    /// Exit the process (clean shutdown finished).
    Exit,
    /// The switchover's release: read the shutdown checkpoint (`pg_controldata`; the
    /// control file must say `shut down`), then one txn guarded by `epoch` that writes
    /// the `release` marker and deletes `leader`, then revoke `lease`. Only after a
    /// fast stop and a complete fence check (docs/design.md "the release marker").
    HandOver {
        lease: LeaseId,
        epoch: Epoch,
        candidate: Option<String>,
    },
    /// Delete the `failover` key (guarded by `epoch` and by its `mod_revision`): a
    /// request refused, or consumed by the new leader.
    ClearFailover { epoch: Epoch, mod_revision: i64 },
}

/// Why the plan is what it is: logged once per iteration, asserted in tests.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    Leading { me: String, valid_for: Duration },
    Following { me: String, leader: String },
    Waiting(String),
    Bootstrapping(String),
    Acquiring(String),
    Promoting { epoch: Epoch },
    PromoteDelayed { remaining: Duration, why: String },
    Fencing(String),
    Refusing(String),
    ShuttingDown(String),
    Other(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Leading { me, valid_for } => write!(
                f,
                "no action: I am {me}, leader with the lock, lease valid {:.1} s",
                valid_for.as_secs_f64()
            ),
            Reason::Following { me, leader } => {
                write!(f, "no action: I am {me}, a replica following {leader}")
            }
            Reason::Waiting(s) => write!(f, "waiting: {s}"),
            Reason::Bootstrapping(s) => write!(f, "bootstrap: {s}"),
            Reason::Acquiring(s) => write!(f, "acquiring the leader key: {s}"),
            Reason::Promoting { epoch } => {
                write!(f, "promoting: won the leader key, epoch {epoch}")
            }
            Reason::PromoteDelayed { remaining, why } => write!(
                f,
                "promotion delayed {:.1} s more: {why}",
                remaining.as_secs_f64()
            ),
            Reason::Fencing(s) => write!(f, "fencing: {s}"),
            Reason::Refusing(s) => write!(f, "refusing: {s}"),
            Reason::ShuttingDown(s) => write!(f, "shutting down: {s}"),
            Reason::Other(s) => f.write_str(s),
        }
    }
}

/// The core's answer to one observation.
#[derive(Clone, Debug)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub reason: Reason,
    /// Run the next iteration at once (an action's outcome is awaited).
    pub again: bool,
    /// Run an iteration no later than this instant, even between renewal ticks: a
    /// deadline the core waits for (the end of the promote delay), so what it holds
    /// back comes when it ends, not at the first tick after it. The shell only wakes
    /// then; it is no renewal tick, and it never moves the tick grid (S6 d).
    pub wake_at: Option<Instant>,
}
