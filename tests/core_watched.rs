//! Issue 13 item 5: which steps may decide on the cluster view kept from the scope
//! watch instead of a linearizable read (`Core::watched_view_serves`). Pure: no
//! clock, no etcd, no PostgreSQL.
//!
//! The rule: only a plain follower of the leader key it already followed at its
//! last step, with no vacancy open, no rollback in play; never the first step, a
//! candidate, an adopter or a leader (DESIGN §1, §3: their reads are linearizable).

use std::time::Duration;

use tenure::core::model::*;
use tenure::core::time::Instant;
use tenure::core::{Core, CoreConfig};

const SYSID: u64 = 7_000_000_000_000_000_042;

fn t(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

fn core(name: &str) -> Core {
    Core::new(
        CoreConfig {
            name: name.into(),
            nofailover: false,
            watchdog: None,
            move_aside_unusable: false,
        },
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
        },
    )
}

fn pg(role: PgRole, following: Option<&str>) -> PgStatus {
    PgStatus {
        data: DataDir::Present {
            sysid: SYSID,
            was_primary: role == PgRole::Primary,
        },
        role,
        timeline: 1,
        lsn: 500,
        following: following.map(String::from),
        streaming: following.is_some(),
        epoch: None,
        sync_names: Some(String::new()),
        standbys: Vec::new(),
        report: Default::default(),
    }
}

fn member(name: &str, role: &str) -> Member {
    Member {
        name: name.into(),
        mod_revision: 3,
        lease: 0,
        info: MemberInfo {
            conn_url: format!("postgres://{name}:5432/postgres"),
            role: role.into(),
            xlog_location: 500,
            timeline: 1,
            pg_healthy: true,
            version: env!("CARGO_PKG_VERSION").into(),
            ..MemberInfo::default()
        },
    }
}

fn key(name: &str, epoch: Epoch, lease: LeaseId) -> LeaderKey {
    LeaderKey {
        name: name.into(),
        epoch,
        mod_revision: epoch,
        lease,
    }
}

fn view(revision: i64, leader: Option<LeaderKey>) -> ClusterView {
    ClusterView {
        revision,
        leader,
        members: vec![member("pg1", "primary"), member("pg2", "replica")],
        initialize: Some(Initialize::Done { sysid: SYSID }),
        ..ClusterView::default()
    }
}

/// pg2, a replica of pg1 (key on lease 0xA), after `steps` steps on reads.
fn follower(steps: usize) -> Core {
    let mut c = core("pg2");
    for i in 0..steps {
        let v = view(10 + i as i64, Some(key("pg1", 5, 0xA)));
        c.step(
            t(i as f64 * 2.0),
            &Observation::reading(Ok(v), pg(PgRole::Replica, Some("pg1"))),
        );
    }
    c
}

#[test]
fn only_a_follower_of_the_key_it_already_follows_decides_on_a_kept_view() {
    let following = view(20, Some(key("pg1", 5, 0xA)));
    // The first decision (S4: adopt or fence) is never taken on a kept view.
    assert!(!follower(0).watched_view_serves(&following));
    let c = follower(1);
    assert!(c.watched_view_serves(&following));
    assert_eq!(c.lease_to_poll(), Some(0xA), "the poll backs that very key");
    // The key changed hands since the last step (another lease): read.
    assert!(!c.watched_view_serves(&view(20, Some(key("pg3", 15, 0xB)))));
    // No key: a vacancy, whatever the watch says — candidates read (DESIGN §1).
    assert!(!c.watched_view_serves(&view(20, None)));
    // The key names this node: adopting or revoking a stale key of its own reads.
    assert!(!c.watched_view_serves(&view(20, Some(key("pg2", 15, 0xB)))));
}

#[test]
fn an_open_vacancy_needs_a_read_until_a_leader_is_followed_again() {
    let mut c = follower(2);
    // The key is gone: the vacancy opens (on a read, as every candidate step is).
    c.step(
        t(10.0),
        &Observation::reading(Ok(view(30, None)), pg(PgRole::Replica, Some("pg1"))),
    );
    let back = view(31, Some(key("pg1", 5, 0xA)));
    assert!(
        !c.watched_view_serves(&back),
        "a vacancy is open: the candidate's decisions rest on reads"
    );
    // A read shows a new leader: the next step follows it, then the kept view serves.
    let new = view(40, Some(key("pg3", 35, 0xC)));
    c.step(
        t(12.0),
        &Observation::reading(Ok(new.clone()), pg(PgRole::Replica, Some("pg1"))),
    );
    assert!(c.watched_view_serves(&new));
    assert!(
        !c.watched_view_serves(&back),
        "the old key's lease is not tracked"
    );
}

#[test]
fn a_rollback_marker_needs_reads() {
    let c = follower(1);
    let mut v = view(20, Some(key("pg1", 5, 0xA)));
    v.rollback = Some(RollbackMarker {
        key: "/service/t/rollback".into(),
        seen_revision: 100,
        found_revision: 20,
        reason: "test".into(),
        by: "pg3".into(),
        at: "now".into(),
        parse_error: None,
    });
    assert!(!c.watched_view_serves(&v));
}

#[test]
fn a_leader_never_decides_on_a_kept_view() {
    // pg1 adopts its own key through a counted renewal, then leads.
    let mut c = core("pg1");
    let v = view(10, Some(key("pg1", 5, 0xA)));
    c.step(
        t(0.0),
        &Observation::reading(Ok(v.clone()), pg(PgRole::Primary, None)),
    );
    assert!(!c.watched_view_serves(&v), "adopting (S4)");
    let mut o = Observation::reading(Ok(v.clone()), pg(PgRole::Primary, None));
    o.renewal = Some(Renewal {
        lease: 0xA,
        sent_at: t(0.0),
        outcome: RenewalOutcome::Counted { ttl: 30 },
    });
    c.step(t(0.01), &o);
    assert!(c.leadership().is_some());
    assert!(
        !c.watched_view_serves(&v),
        "a leader decides on its renewal's read"
    );
}
