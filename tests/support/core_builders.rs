//! Builders for the pure tests of the HA core (`tests/core_*.rs`, each includes it
//! as `#[path = "support/core_builders.rs"] mod core_builders;`): a `Core` on DESIGN
//! S6's first worked timing, PostgreSQL statuses, member entries, leader keys,
//! cluster views, observations, lease polls, renewals and leader changes. Pure: no
//! clock, no etcd, no PostgreSQL.
//!
//! The defaults are tests/core_scenarios.rs's, where these builders were first
//! written. A test file whose inputs differ passes its own values or keeps a local
//! variant that says how and why it differs: a test's inputs never change by moving
//! a builder here.

// Each test file is its own crate and uses a different subset of these builders.
#![allow(dead_code)]

use std::time::Duration;

use tenure::core::model::*;
use tenure::core::time::Instant;
use tenure::core::{Core, CoreConfig};

/// The system identifier of every node's data and of the cluster's `initialize`.
pub const SYSID: u64 = 7_000_000_000_000_000_042;

/// The instant `s` seconds after boot.
pub fn t(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

/// ttl 30, loop 2, retry 1, margin 2, budget 1 (DESIGN S6's first worked example).
pub fn timing30() -> Timing {
    Timing {
        ttl: 30,
        loop_wait: Duration::from_secs(2),
        retry_timeout: Duration::from_secs(1),
        safety_margin: Duration::from_secs(2),
        demote_budget: Duration::from_secs(1),
        promote_delay: None,
        maximum_lag_on_failover: 1 << 20,
        primary_start_timeout: Duration::from_secs(30),
        synchronous: SyncMode::Off,
        synchronous_node_count: 1,
        maximum_lag_on_syncnode: None,
    }
}

/// The core of node `name` with a watchdog of `watchdog` seconds (`None`: none) on
/// `timing`.
pub fn core_with(name: &str, watchdog: Option<u64>, timing: Timing) -> Core {
    Core::new(
        CoreConfig {
            name: name.into(),
            nofailover: false,
            watchdog: watchdog.map(Duration::from_secs),
            move_aside_unusable: false,
        },
        timing,
    )
}

/// The core of node `name` on [`timing30`].
pub fn core(name: &str, watchdog: Option<u64>) -> Core {
    core_with(name, watchdog, timing30())
}

/// A PostgreSQL of the cluster's system on timeline 1 at `lsn`, streaming from
/// `following` when it names one; its data ran as a primary only if it runs as one.
pub fn pg(role: PgRole, lsn: Lsn, following: Option<&str>) -> PgStatus {
    PgStatus {
        data: DataDir::Present {
            sysid: SYSID,
            was_primary: role == PgRole::Primary,
        },
        role,
        timeline: 1,
        lsn,
        following: following.map(String::from),
        streaming: following.is_some(),
        epoch: None,
        epoch_row: EpochRow::default(),
        sync_names: Some(String::new()),
        standbys: Vec::new(),
        report: Default::default(),
    }
}

/// A member key (no lease) of a healthy PostgreSQL on timeline 1 at `xlog`, run by
/// this build's agent, publishing a watchdog of `wd` seconds.
pub fn member(name: &str, rev: i64, role: &str, xlog: Lsn, wd: Option<u32>) -> Member {
    Member {
        name: name.into(),
        mod_revision: rev,
        lease: 0,
        info: MemberInfo {
            conn_url: format!("postgres://{name}:5432/postgres"),
            role: role.into(),
            xlog_location: xlog,
            timeline: 1,
            sysid: Some(SYSID),
            watchdog_timeout: wd,
            pg_healthy: true,
            version: env!("CARGO_PKG_VERSION").into(),
            ..MemberInfo::default()
        },
    }
}

/// pg1 the primary (revision 8) and pg2 a replica (revision 9), both at 1000.
pub fn two() -> Vec<Member> {
    vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ]
}

/// [`two`] and pg3, another replica (revision 9) at 1000.
pub fn three() -> Vec<Member> {
    vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
        member("pg3", 9, "replica", 1000, None),
    ]
}

/// The leader key naming `name`, created (and last modified) at revision `epoch`.
pub fn key(name: &str, epoch: Epoch, lease: LeaseId) -> LeaderKey {
    LeaderKey {
        name: name.into(),
        epoch,
        mod_revision: epoch,
        lease,
    }
}

/// The scope read at `revision`, the cluster bootstrapped with [`SYSID`].
pub fn view(revision: i64, leader: Option<LeaderKey>, members: Vec<Member>) -> ClusterView {
    ClusterView {
        revision,
        leader,
        members,
        initialize: Some(Initialize::Done { sysid: SYSID }),
        ..ClusterView::default()
    }
}

/// An observation with this iteration's read and the scope watch open from revision
/// 0, so it has reported every `leader` change (`Observation::watch_from`: without
/// it every vacancy is untimeable, S3). The tests that need a gap or a change say so.
pub fn reading(cluster: Result<ClusterView, String>, pg: PgStatus) -> Observation {
    let mut o = Observation::reading(cluster, pg);
    o.watch_from = Some(0);
    o
}

/// [`reading`] of a read that answered `cluster`.
pub fn obs(cluster: ClusterView, pg: PgStatus) -> Observation {
    reading(Ok(cluster), pg)
}

/// A `LeaseTimeToLive` answer for `lease` sent at `at` s (`ttl` `None`: gone).
pub fn lease_poll(
    lease: LeaseId,
    at: f64,
    ttl: Option<i64>,
    granted_ttl: Option<i64>,
    has_keys: bool,
) -> LeasePoll {
    LeasePoll {
        lease,
        sent_at: t(at),
        ttl,
        granted_ttl,
        has_keys,
    }
}

/// A [`lease_poll`] without `grantedTTL`, the lease holding keys while it lives.
pub fn poll(lease: LeaseId, at: f64, ttl: Option<i64>) -> Option<LeasePoll> {
    Some(lease_poll(lease, at, ttl, None, ttl.is_some()))
}

/// Seed 9982: the `LeaseTimeToLive` poll an adoption needs before its renewal
/// (25 s left, sent at `at`).
pub fn polled(mut o: Observation, lease: LeaseId, at: f64) -> Observation {
    o.lease_poll = Some(lease_poll(lease, at, Some(25), None, true));
    o
}

/// A renewal of `lease` sent at `at` s that counted (ttl 30).
pub fn counted(lease: LeaseId, at: f64) -> Option<Renewal> {
    Some(Renewal {
        lease,
        sent_at: t(at),
        outcome: RenewalOutcome::Counted { ttl: 30 },
    })
}

/// The acquire txn's answer: won `lease` of `granted_ttl` s granted at `at` s, the
/// key created under `epoch`.
pub fn won(lease: LeaseId, granted_ttl: u32, at: f64, epoch: Epoch) -> Option<AcquireOutcome> {
    Some(AcquireOutcome::Won {
        lease,
        granted_ttl,
        granted_at: t(at),
        epoch,
    })
}

/// The scope watch's report of the leader key deleted at `at` s (revision
/// `revision`).
pub fn deleted(at: f64, revision: i64) -> LeaderChange {
    LeaderChange {
        at: t(at),
        revision,
        put: None,
    }
}

/// The scope watch's report of [`key`]`(name, epoch, lease)` created at `at` s.
pub fn put(at: f64, name: &str, epoch: Epoch, lease: LeaseId) -> LeaderChange {
    LeaderChange {
        at: t(at),
        revision: epoch,
        put: Some(key(name, epoch, lease)),
    }
}

/// The plan's actions of synchronous mode (DESIGN §3a): the `sync` key's writes
/// and `synchronous_standby_names`.
pub fn sync_actions(p: &Plan) -> Vec<Action> {
    p.actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::WriteSync { .. } | Action::DeleteSync { .. } | Action::SetSyncNames { .. }
            )
        })
        .cloned()
        .collect()
}
