//! The acquisition record (docs/design.md "the acquisition record"; DESIGN §1 step
//! 1 and step 4, S3): every acquire txn writes `release` with its holder, lease and
//! TTL, at the new epoch's revision, so a read shows a leadership that no read and
//! no watch event showed yet. The race it closes (docs/failure-modes.md): a whole
//! leadership between two of a replica's reads, ended by an early DELETE, whose
//! watch PUT reaches the replica only after it won, promoted at once beside the
//! missed leader's primary. Numbers: ttl 30, loop 2, retry R 1, margin 2 (the
//! style of tests/core_scenarios.rs). Pure: no clock, no etcd, no PostgreSQL.

use tenure::core::Core;
use tenure::core::model::*;

#[path = "support/core_builders.rs"]
mod core_builders;
use core_builders::{core, deleted, key, member, obs, pg, poll, put, t, view};

/// pg1 publishes its leadership's epoch, as a promoted leader does. pg3, the
/// missed leader, never published a member key the reads showed.
fn members() -> Vec<Member> {
    let mut pg1 = member("pg1", 8, "primary", 1000, None);
    pg1.info.epoch = Some(5);
    vec![pg1, member("pg2", 9, "replica", 1000, None)]
}

/// The scope read at `revision` with [`members`].
fn scope(revision: i64, leader: Option<LeaderKey>) -> ClusterView {
    view(revision, leader, members())
}

/// `release` as the acquire txn of `by` at epoch `epoch` left it.
fn record(mut v: ClusterView, epoch: Epoch, by: &str, lease: LeaseId) -> ClusterView {
    v.release_acquired = Some(AcquiredRecord {
        by: by.into(),
        lease,
        ttl: 30,
    });
    v.release_revision = epoch;
    v
}

/// pg2 follows pg1 (lease 0xA, epoch 5, its record at revision 5) and polls its
/// lease at 102 s: TTL 1 s, so E_max = 103 s.
fn follower() -> Core {
    let mut c = core("pg2", None);
    let v = record(scope(10, Some(key("pg1", 5, 0xA))), 5, "pg1", 0xA);
    let p = c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = poll(0xA, 102.0, Some(1));
    c.step(t(102.01), &o);
    c
}

/// pg1's key expires at 103.2 s (revision 11: on time for pg2, past E_max, its poll
/// 1.2 s old), and the watch reported that DELETE. The read at 104 s (revision 14)
/// shows the key absent and `release` as `rel` left it; pg1's lease is gone.
fn vacancy_read(c: &mut Core, rel: impl FnOnce(ClusterView) -> ClusterView) -> Plan {
    let mut o = obs(rel(scope(14, None)), pg(PgRole::Replica, 1000, None));
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(11);
    o.leader_changes = vec![deleted(103.2, 11)];
    o.lease_poll = poll(0xA, 104.05, None);
    c.step(t(104.1), &o)
}

/// pg2 wins (epoch 21, lease 0xB) with `changes` reported by the watch in the step of
/// the win; returns the plan of the step after it, where the watch reports `late`.
fn win(c: &mut Core, at: f64, changes: Vec<LeaderChange>, late: Vec<LeaderChange>) -> Plan {
    let v = record(scope(21, Some(key("pg2", 21, 0xB))), 21, "pg2", 0xB);
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, None));
    o.leader_changes = changes;
    o.acquire = Some(AcquireOutcome::Won {
        lease: 0xB,
        granted_ttl: 30,
        granted_at: t(at),
        epoch: 21,
    });
    let p = c.step(t(at + 0.05), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 });
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.leader_changes = late;
    c.step(t(at + 0.15), &o)
}

fn remaining(p: &Plan) -> f64 {
    match &p.reason {
        Reason::PromoteDelayed { remaining, why } => {
            assert!(why.contains("before its lease could have expired"), "{why}");
            assert!(p.actions.is_empty(), "{:?}", p.actions);
            remaining.as_secs_f64()
        }
        other => panic!(
            "expected the early-expiry delay, got {other} ({:?})",
            p.actions
        ),
    }
}

/// The residual race: pg3 took the key at 103.3 s (epoch 12, lease 0xC) and an
/// operator's `lease revoke` ended it at 103.5 s, between two of pg2's reads; etcd
/// had not sent pg3's PUT when pg2's drain after the read ended, and it arrives only
/// after the winning step. The read shows pg3's acquisition record: the vacancy is
/// untimeable from that read (104.1 s), pg3's lease must be seen gone, and the
/// promotion waits ttl + R = 31 s from the read. Before the record pg2 acquired at
/// once and promoted right after its win, beside pg3's possibly writable primary.
#[test]
fn a_missed_leadership_shown_only_by_its_record_delays_the_promotion() {
    let mut c = follower();
    let p = vacancy_read(&mut c, |v| record(v, 12, "pg3", 0xC));
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    assert_eq!(c.lease_to_poll(), Some(0xC), "pg3's lease is owed gone");
    let mut o = obs(
        record(scope(15, None), 12, "pg3", 0xC),
        pg(PgRole::Replica, 1000, None),
    );
    o.lease_poll = poll(0xC, 104.5, None);
    let p = c.step(t(104.55), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    // pg3's PUT and DELETE reach pg2 only after the winning step.
    let p = win(
        &mut c,
        104.6,
        vec![put(104.6, "pg2", 21, 0xB)],
        vec![put(103.3, "pg3", 12, 0xC), deleted(103.5, 13)],
    );
    assert!((remaining(&p) - (104.1 + 31.0 - 104.75)).abs() < 1e-6);
}

/// The same missed leadership's lease still lives (an `etcdctl del` of its key): no
/// acquire until it is seen gone (DESIGN §1 step 4).
#[test]
fn a_missed_leadership_shown_by_its_record_owes_its_lease_gone() {
    let mut c = follower();
    vacancy_read(&mut c, |v| record(v, 12, "pg3", 0xC));
    let mut o = obs(
        record(scope(15, None), 12, "pg3", 0xC),
        pg(PgRole::Replica, 1000, None),
    );
    o.lease_poll = poll(0xC, 106.0, Some(27));
    let p = c.step(t(106.05), &o);
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    assert!(p.reason.to_string().contains("still lives"), "{}", p.reason);
}

/// No false alarm: the tracked leadership's own record (revision 5 = its epoch), and
/// its own clean-stop marker written later with its DELETE (revision 11, epoch 5),
/// are accounted for: an on-time expiry promotes at once, and the marker still
/// skips nothing it should not (here it names nobody and pg2's WAL reaches it).
#[test]
fn the_tracked_leaders_own_record_and_marker_change_nothing() {
    let own_record = |v| record(v, 5, "pg1", 0xA);
    let own_marker = |mut v: ClusterView| {
        v.release = Some(Ok(ReleaseMarker {
            epoch: 5,
            lsn: 900,
            timeline: 1,
            candidate: None,
            by: "pg1".into(),
            taken_by: None,
        }));
        v.release_revision = 11;
        v
    };
    for rel in [
        &own_record as &dyn Fn(ClusterView) -> ClusterView,
        &own_marker as &dyn Fn(ClusterView) -> ClusterView,
    ] {
        let mut c = follower();
        let p = vacancy_read(&mut c, rel);
        assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
        let p = win(&mut c, 104.15, vec![put(104.15, "pg2", 21, 0xB)], vec![]);
        assert_eq!(
            p.actions,
            vec![Action::Promote { epoch: 21 }],
            "{}",
            p.reason
        );
    }
}

/// What other writers leave proves nothing and counts as an unknown leadership
/// when written after the tracked one's acquisition: garbage, an older agent's
/// taken marker (its acquisition wrote no record). Both delay the promotion; the
/// same garbage written before the tracked leadership changes nothing.
#[test]
fn garbage_or_an_older_agents_taken_marker_after_the_tracked_epoch_delays() {
    let garbage = |rev: i64| {
        move |mut v: ClusterView| {
            v.release = Some(Err("not JSON".into()));
            v.release_revision = rev;
            v
        }
    };
    let old_taken = |mut v: ClusterView| {
        v.release = Some(Ok(ReleaseMarker {
            epoch: 3,
            lsn: 900,
            timeline: 1,
            candidate: None,
            by: "pg1".into(),
            taken_by: Some("pg3".into()),
        }));
        v.release_revision = 12;
        v
    };
    for (rel, delayed) in [
        (&garbage(12) as &dyn Fn(ClusterView) -> ClusterView, true),
        (&old_taken, true),
        (&garbage(4), false),
    ] {
        let mut c = follower();
        let p = vacancy_read(&mut c, rel);
        assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
        let p = win(&mut c, 104.15, vec![put(104.15, "pg2", 21, 0xB)], vec![]);
        if delayed {
            assert!((remaining(&p) - (104.1 + 31.0 - 104.3)).abs() < 1e-6);
        } else {
            assert_eq!(
                p.actions,
                vec![Action::Promote { epoch: 21 }],
                "{}",
                p.reason
            );
        }
    }
}

/// Weighed once: garbage read again at the same revision does not move the delay's
/// start to each later read (the vacancy stays untimeable from the first).
#[test]
fn garbage_at_one_revision_is_weighed_once() {
    let garbage = |mut v: ClusterView| {
        v.release = Some(Err("not JSON".into()));
        v.release_revision = 12;
        v
    };
    let mut c = follower();
    vacancy_read(&mut c, garbage);
    let mut o = obs(garbage(scope(15, None)), pg(PgRole::Replica, 1000, None));
    o.lease_poll = poll(0xA, 106.0, None);
    let p = c.step(t(106.05), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let p = win(&mut c, 106.1, vec![put(106.1, "pg2", 21, 0xB)], vec![]);
    assert!((remaining(&p) - (104.1 + 31.0 - 106.25)).abs() < 1e-6);
}

/// The watch reported the missed leadership in time (the usual case): the record of
/// the same epoch adds nothing, and pg3's own marker still proves its clean exit
/// (DESIGN §1 step 4's exception, unchanged by the record).
#[test]
fn a_missed_leadership_the_watch_reported_keeps_its_marker_proof() {
    let mut c = follower();
    let marker = ReleaseMarker {
        epoch: 12,
        lsn: 900,
        timeline: 1,
        candidate: None,
        by: "pg3".into(),
        taken_by: None,
    };
    let with_marker = |mut v: ClusterView| {
        v.release = Some(Ok(marker.clone()));
        v.release_revision = 13;
        v
    };
    let mut o = obs(
        with_marker(scope(14, None)),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(11);
    o.leader_changes = vec![
        deleted(103.2, 11),
        put(103.3, "pg3", 12, 0xC),
        deleted(103.5, 13),
    ];
    o.lease_poll = poll(0xA, 104.05, None);
    c.step(t(104.1), &o);
    let mut o = obs(
        with_marker(scope(15, None)),
        pg(PgRole::Replica, 1000, None),
    );
    o.lease_poll = poll(0xC, 104.5, None);
    let p = c.step(t(104.55), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let p = win(&mut c, 104.6, vec![put(104.6, "pg2", 21, 0xB)], vec![]);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// Review of the record, F1: `maximum_lag_on_failover` is measured against the
/// missed leader's position when its member key (under the recorded lease)
/// published one. pg3 ran 2 MiB ahead of pg2 (limit 1 MiB): pg2 is no candidate,
/// where before it judged its lag against pg1's old position only and acquired.
#[test]
fn a_missed_leader_s_published_position_bounds_the_lag() {
    let mut c = follower();
    let ahead = |v: ClusterView| {
        let mut v = record(v, 12, "pg3", 0xC);
        let mut pg3 = member("pg3", 12, "primary", 1000 + (2 << 20), None);
        pg3.info.epoch = Some(12);
        pg3.info.leader_lease = Some(0xC);
        v.members.push(pg3);
        v
    };
    vacancy_read(&mut c, ahead);
    let mut o = obs(ahead(scope(15, None)), pg(PgRole::Replica, 1000, None));
    o.lease_poll = poll(0xC, 104.5, None);
    let mut now = 104.55;
    while now < 140.0 {
        let p = c.step(t(now), &o);
        assert!(
            !p.actions.contains(&Action::Acquire),
            "acquired at {now} although 2 MiB behind the missed leader: {}",
            p.reason
        );
        now += 2.0;
        o.lease_poll = None;
    }
}

/// Review of the record, L4: a member key publishing an epoch above the read's
/// revision (garbage) appears while the vacancy is open; it must not raise what the
/// vacancy accounts for (`judged`), or the missed leadership the next read's record
/// shows (pg3, epoch 16, its lease 0xC still alive: an `etcdctl del` of its key)
/// would be ignored and pg2 would acquire while pg3's lease lives.
#[test]
fn a_garbage_member_epoch_does_not_hide_a_missed_leadership() {
    let mut c = follower();
    let p = vacancy_read(&mut c, |v| v);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let with_garbage = |mut v: ClusterView| {
        let mut pg9 = member("pg9", 15, "replica", 900, None);
        pg9.info.epoch = Some(1 << 40);
        v.members.push(pg9);
        v
    };
    // pg3 acquired in between: pg2's compare-and-set lost; its read shows the
    // garbage epoch, not yet pg3's record.
    let mut o = obs(
        with_garbage(scope(15, None)),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = Some(AcquireOutcome::Lost);
    c.step(t(104.3), &o);
    let mut now = 104.5;
    let mut o = obs(
        record(with_garbage(scope(17, None)), 16, "pg3", 0xC),
        pg(PgRole::Replica, 1000, None),
    );
    while now < 110.0 {
        if let Some(l) = c.lease_to_poll() {
            o.lease_poll = poll(l, now - 0.01, if l == 0xC { Some(25) } else { None });
        }
        let p = c.step(t(now), &o);
        assert!(
            !p.actions.contains(&Action::Acquire),
            "acquired at {now} while the missed leader's lease 0xC lives: {}",
            p.reason
        );
        now += 0.5;
    }
}
