//! The core's answers to an operator's restart and reinitialize (`core::manage`),
//! and what a leader does while its PostgreSQL restarts: keeps the key, renews,
//! and still fences by `F - B` (S1). Pure: no clock, no etcd, no PostgreSQL.

#[path = "support/core_builders.rs"]
mod core_builders;

use core_builders::{SYSID, core, counted, key, polled, t, view};
use tenure::core::Core;
use tenure::core::model::*;

/// The shared `pg` at 500, but with `was_primary` given rather than read off `role`:
/// a leader whose PostgreSQL is stopped or restarting still has a primary's data.
fn pg(role: PgRole, following: Option<&str>, was_primary: bool) -> PgStatus {
    let mut status = core_builders::pg(role, 500, following);
    status.data = DataDir::Present {
        sysid: SYSID,
        was_primary,
    };
    status
}

/// The shared `member` at 500, written at revision 9, but with `healthy` given and
/// no agent version published (the shared one publishes this build's): these tests
/// were written on such members, so their inputs stay as they were.
fn member(name: &str, role: &str, healthy: bool) -> Member {
    let mut m = core_builders::member(name, 9, role, 500, None);
    m.info.pg_healthy = healthy;
    m.info.version = MemberInfo::default().version;
    m
}

fn members() -> Vec<Member> {
    vec![
        member("pg1", "primary", true),
        member("pg2", "replica", true),
    ]
}

/// A read with no scope watch open (`watch_from` `None`), unlike the shared `obs`:
/// these tests never time a vacancy and were written on plain reads, so their
/// inputs stay as they were.
fn obs(v: ClusterView, pg: PgStatus) -> Observation {
    Observation::reading(Ok(v), pg)
}

/// pg1 adopts the key naming it (lease 0xA, epoch 5) with a counted renewal at `s`.
fn leader(s: f64) -> Core {
    let mut c = core("pg1", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), members());
    c.step(
        t(s),
        &polled(obs(v.clone(), pg(PgRole::Primary, None, true)), 0xA, s),
    );
    let mut o = obs(v, pg(PgRole::Primary, None, true));
    o.renewal = counted(0xA, s);
    c.step(t(s + 0.01), &o);
    assert!(c.leadership().is_some());
    c
}

/// pg2 follows pg1 with its replica streaming.
fn follower() -> Core {
    let mut c = core("pg2", None);
    let p = c.step(
        t(100.0),
        &obs(
            view(10, Some(key("pg1", 5, 0xA)), members()),
            pg(PgRole::Replica, Some("pg1"), false),
        ),
    );
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    c
}

#[test]
fn a_running_primary_or_replica_may_restart_and_nothing_else_may() {
    let l = leader(100.0);
    let primary = pg(PgRole::Primary, None, true);
    assert_eq!(
        l.restart_job(&primary, None, Some(7)),
        Ok(JobKind::Restart {
            start_timeout: Some(7)
        })
    );
    // One job at a time, as Patroni's "restart already in progress".
    let busy = l.restart_job(
        &primary,
        Some(&JobKind::Restart {
            start_timeout: None,
        }),
        None,
    );
    assert_eq!(busy, Err("restart already in progress".into()));
    // A leader whose PostgreSQL is down: the core brings it up, not the operator.
    let down = l.restart_job(&pg(PgRole::Stopped, None, true), None, None);
    assert!(down.unwrap_err().contains("not running as the primary"));

    let f = follower();
    let replica = pg(PgRole::Replica, Some("pg1"), false);
    assert_eq!(
        f.restart_job(&replica, None, None),
        Ok(JobKind::Restart {
            start_timeout: None
        })
    );
    let stopped = f.restart_job(&pg(PgRole::Stopped, None, false), None, None);
    assert!(stopped.unwrap_err().contains("not running"));
    // A primary without the key is the fence's (S4), not the operator's.
    let s4 = f.restart_job(&primary, None, None);
    assert!(s4.unwrap_err().contains("S4"));
    // Nothing is decided before the first observation.
    let fresh = core("pg3", None);
    assert!(fresh.restart_job(&replica, None, None).is_err());
}

#[test]
fn reinitialize_only_on_a_replica_of_a_running_leader() {
    let f = follower();
    let replica = pg(PgRole::Replica, Some("pg1"), false);
    let v = view(10, Some(key("pg1", 5, 0xA)), members());
    assert_eq!(
        f.reinitialize_job(Some(&v), &replica, None, false),
        Ok(JobKind::Reinitialize)
    );
    // Patroni's refusals.
    let l = leader(100.0);
    assert_eq!(
        l.reinitialize_job(Some(&v), &pg(PgRole::Primary, None, true), None, true),
        Err("I am the leader, can not reinitialize".into())
    );
    let unlocked = view(10, None, members());
    assert_eq!(
        f.reinitialize_job(Some(&unlocked), &replica, None, false),
        Err("Cluster has no leader, can not reinitialize".into())
    );
    let rewind = JobKind::Rewind { from: "pg1".into() };
    assert_eq!(
        f.reinitialize_job(Some(&v), &replica, Some(&rewind), false),
        Err("pg_rewind already in progress".into())
    );
    // `force` takes over a running job.
    assert_eq!(
        f.reinitialize_job(Some(&v), &replica, Some(&rewind), true),
        Ok(JobKind::Reinitialize)
    );
    // Ours: nothing to clone from a leader that does not run as a primary.
    let down = view(
        10,
        Some(key("pg1", 5, 0xA)),
        vec![
            member("pg1", "primary", false),
            member("pg2", "replica", true),
        ],
    );
    let why = f
        .reinitialize_job(Some(&down), &replica, None, false)
        .unwrap_err();
    assert!(why.contains("nothing to clone from"), "{why}");
    assert!(f.reinitialize_job(None, &replica, None, false).is_err());
}

/// S1 through a restart of the primary: while the job runs the leader keeps the
/// key and plans nothing; its renewals still count; without them it still fences
/// at `F - B`, and the fence comes first.
#[test]
fn a_leader_restarting_its_primary_keeps_the_key_and_still_fences_by_f_minus_b() {
    let mut c = leader(100.0);
    let v = view(10, Some(key("pg1", 5, 0xA)), members());
    let restarting = |role| {
        let mut o = obs(v.clone(), pg(role, None, true));
        o.job = Job::Running {
            kind: JobKind::Restart {
                start_timeout: None,
            },
            since: t(101.0),
        };
        o
    };
    let p = c.step(t(101.0), &restarting(PgRole::Stopped));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        p.reason.to_string().contains("Restart"),
        "the reason names the job: {}",
        p.reason
    );
    // A renewal during the job counts: F moves on (no watchdog: s + ttl - (L_w + R
    // + 1 s) = 102 + 30 - 4, before H = 130).
    let mut o = restarting(PgRole::Stopped);
    o.renewal = counted(0xA, 102.0);
    c.step(t(102.01), &o);
    assert_eq!(c.fence_deadline(), Some(t(128.0)));
    assert!(c.leadership().is_some());
    // No renewal after that: at F - B = 127 the fence comes, job or not.
    let p = c.step(t(126.9), &restarting(PgRole::Unresponsive));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let p = c.step(t(127.0), &restarting(PgRole::Unresponsive));
    assert_eq!(p.actions, vec![Action::Fence]);
    assert!(c.leadership().is_none());
}

/// A reinitialized former primary (its data moved aside) clones the leader and
/// then starts as a replica: no rewind of the fresh copy.
#[test]
fn a_reinitialized_former_primary_clones_and_starts_without_a_rewind() {
    let mut c = core("pg2", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), members());
    // First seen stopped with data that ran as a primary: a rewind is due.
    let p = c.step(t(100.0), &obs(v.clone(), pg(PgRole::Stopped, None, true)));
    assert!(
        matches!(&p.actions[..], [Action::StartJob(JobKind::Rewind { .. })]),
        "{:?}",
        p.actions
    );
    // The operator's reinitialize moved the data aside instead.
    let mut empty = pg(PgRole::Stopped, None, false);
    empty.data = DataDir::Empty;
    let p = c.step(t(101.0), &obs(v.clone(), empty));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::Basebackup { from: "pg1".into() })]
    );
    let p = c.step(t(102.0), &obs(v, pg(PgRole::Stopped, None, false)));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::StartReplica {
            leader: "pg1".into()
        })]
    );
}
