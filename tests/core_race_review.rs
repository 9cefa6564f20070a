//! Findings F2, F3 and F4 of the second safety review of the scope-watch work (S3,
//! DESIGN §1 step 4): paths to a promotion before an old leader's horizon. Numbers
//! with ttl 30, loop 2, retry R 1, margin M 2: an old leader with `W` 13 revoked
//! early at 100.1 s is reset by 100.1 + 2W + R + M = 129.1 s at the latest (it dies
//! just before its `F`), so nobody may promote before. Pure: no clock, no etcd, no
//! PostgreSQL (the style of tests/core_scenarios.rs).

#[path = "support/core_builders.rs"]
mod core_builders;

use core_builders::{core, deleted, key, member, obs, pg, poll, put, t, view, won};
use tenure::core::Core;
use tenure::core::model::*;

/// A leader's member key as the agent publishes it: its lease and epoch, `primary`
/// only once its PostgreSQL runs as one.
fn leader_member(
    name: &str,
    rev: i64,
    role: &str,
    wd: u32,
    epoch: Epoch,
    lease: LeaseId,
) -> Member {
    let mut m = member(name, rev, role, 1000, Some(wd));
    m.info.epoch = Some(epoch);
    m.info.leader_lease = Some(lease);
    m
}

/// The instant pg2 promotes at, from the plan of the step after its win (epoch `e`).
fn promote_instant(p: &Plan, now: f64, e: Epoch) -> f64 {
    if p.actions.contains(&Action::Promote { epoch: e }) {
        return now;
    }
    match &p.reason {
        Reason::PromoteDelayed { remaining, .. } => now + remaining.as_secs_f64(),
        r => panic!("unexpected {r} {:?}", p.actions),
    }
}

/// Rivals publish fresh positions behind ours.
fn behind(members: &[Member], me: &str, rev: i64) -> Vec<Member> {
    let mut ms = members.to_vec();
    for m in &mut ms {
        if m.name != me {
            m.mod_revision = rev;
            m.info.xlog_location = 900;
        }
    }
    ms
}

/// From an open vacancy at `now`: one step a second (every lease the core asks
/// about answered gone) until `me` plans `Acquire`; it wins epoch 40 and the
/// instant it would promote at is returned, with the leases it polled.
fn acquire_and_promote(
    c: &mut Core,
    me: &str,
    members: &[Member],
    mut now: f64,
) -> (f64, Vec<LeaseId>) {
    let mut polled = Vec::new();
    let mut rev = 20;
    loop {
        now += 1.0;
        rev += 1;
        let mut o = obs(
            view(rev, None, behind(members, me, rev)),
            pg(PgRole::Replica, 1000, None),
        );
        if let Some(l) = c.lease_to_poll() {
            polled.push(l);
            o.lease_poll = poll(l, now - 0.02, None);
        }
        let p = c.step(t(now), &o);
        if p.actions.contains(&Action::Acquire) {
            break;
        }
        assert!(now < 140.0, "never acquires: {}", p.reason);
    }
    let ms = behind(members, me, rev);
    let mut o = obs(
        view(40, Some(key(me, 40, 0xB)), ms.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 30, now + 0.05, 40);
    o.leader_changes = vec![put(now + 0.05, me, 40, 0xB)];
    let p = c.step(t(now + 0.1), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 40 });
    let p = c.step(
        t(now + 0.2),
        &obs(
            view(41, Some(key(me, 40, 0xB)), ms),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    (promote_instant(&p, now + 0.2, 40), polled)
}

/// Review F2: pg2 reads A's key (pg1, `W` 13, promoted under epoch 5) and polls it;
/// A is revoked early at 100.1 s. C (pg3, `W` 5) wins at 100.2 s; pg2 READS C's key
/// at 100.3 s and polls its lease (TTL 29); C gives the key up at 100.6 s before it
/// ever promoted (SIGTERM in its promote delay: a plain guarded delete, no marker).
/// Judged on C alone (C's `W`: 100.6 + 13), pg2 promoted at 113.6 s, while A, dying
/// just before its `F`, is reset only by 129.1 s. C never ran as a primary under
/// its epoch, so its `W` says nothing about A: the horizon bound of the largest TTL
/// known, `ttl + R` from C's DELETE (131.6 s). A C that did promote under epoch 12
/// (its member key says so) waited out A's delay first: then its own `W` counts.
#[test]
fn f2_a_read_leadership_that_never_promoted_does_not_hide_the_early_delete_before_it() {
    for c_promoted in [false, true] {
        let mut c = core("pg2", None);
        let a = leader_member("pg1", 8, "primary", 13, 5, 0xA);
        let me = member("pg2", 9, "replica", 1000, None);
        let v = view(10, Some(key("pg1", 5, 0xA)), vec![a.clone(), me.clone()]);
        c.step(
            t(99.8),
            &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
        );
        let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
        o.lease_poll = poll(0xA, 99.9, Some(29));
        c.step(t(99.95), &o);
        // A's key revoked early at 100.1 (rev 11).
        let mut o = obs(
            view(11, None, vec![a.clone(), me.clone()]),
            pg(PgRole::Replica, 1000, None),
        );
        o.leader_deleted_at = Some(t(100.1));
        o.leader_deleted_revision = Some(11);
        o.leader_changes = vec![deleted(100.1, 11)];
        o.lease_poll = poll(0xA, 100.12, None);
        let p = c.step(t(100.15), &o);
        // C won at 100.2 (rev 12); pg2's next read shows C's key.
        let role = if c_promoted { "primary" } else { "replica" };
        let cm = leader_member("pg3", 12, role, 5, 12, 0xC);
        let members = vec![a.clone(), me.clone(), cm];
        let mut o = obs(
            view(13, Some(key("pg3", 12, 0xC)), members.clone()),
            pg(PgRole::Replica, 1000, None),
        );
        o.leader_changes = vec![put(100.2, "pg3", 12, 0xC)];
        if p.actions.contains(&Action::Acquire) {
            o.acquire = Some(AcquireOutcome::Lost);
        }
        c.step(t(100.3), &o);
        let mut o = obs(
            view(13, Some(key("pg3", 12, 0xC)), members.clone()),
            pg(PgRole::Replica, 1000, Some("pg3")),
        );
        o.lease_poll = poll(0xC, 100.35, Some(29));
        c.step(t(100.4), &o);
        // C gives the key up at 100.6 (rev 14), its lease revoked right after.
        let mut o = obs(
            view(15, None, behind(&members, "pg2", 15)),
            pg(PgRole::Replica, 1000, None),
        );
        o.leader_deleted_at = Some(t(100.6));
        o.leader_deleted_revision = Some(14);
        o.leader_changes = vec![deleted(100.6, 14)];
        o.lease_poll = poll(0xC, 100.62, None);
        c.step(t(100.65), &o);
        let (at, _) = acquire_and_promote(&mut c, "pg2", &members, 100.65);
        if c_promoted {
            // Liveness kept: C's own `W` (2 * 5 + 1 + 2 = 13 s from 100.6).
            assert!((at - 113.6).abs() < 1e-6, "C promoted: promotes at {at}");
        } else {
            assert!(
                at >= 100.1 + 2.0 * 13.0 + 1.0 + 2.0,
                "promotes at {at}, before A's bound 129.1"
            );
            assert!((at - 131.6).abs() < 1e-6, "ttl + R from C's DELETE: {at}");
        }
    }
}

/// Review F2, a node that never saw A's DELETE: pg4 starts during C's short
/// leadership (C won at 100.2 s after A's early revoke at 100.1 s, never promoted),
/// reads C's key and polls its lease, and judges C's DELETE at 100.6 s. With C's
/// `W` 5 it promoted at 113.6 s; C never ran as a primary under epoch 12, so it
/// waits `ttl + R` from that DELETE (131.6 s, past A's 129.1 s).
#[test]
fn f2_a_replica_that_never_saw_the_first_delete_judges_a_never_promoted_holder_by_its_horizon() {
    let mut c = core("pg4", None);
    let cm = leader_member("pg3", 12, "replica", 5, 12, 0xC);
    let members = vec![
        member("pg1", 8, "primary", 1000, Some(13)),
        member("pg4", 9, "replica", 1000, None),
        cm,
    ];
    let v = view(13, Some(key("pg3", 12, 0xC)), members.clone());
    let p = c.step(
        t(100.3),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg3"))),
    );
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg3")));
    o.lease_poll = poll(0xC, 100.35, Some(29));
    c.step(t(100.4), &o);
    let mut o = obs(
        view(15, None, behind(&members, "pg4", 15)),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(100.6));
    o.leader_deleted_revision = Some(14);
    o.leader_changes = vec![deleted(100.6, 14)];
    o.lease_poll = poll(0xC, 100.62, None);
    c.step(t(100.65), &o);
    let (at, _) = acquire_and_promote(&mut c, "pg4", &members, 100.65);
    assert!(at >= 129.1, "promotes at {at}, before A's bound 129.1");
}

/// The leader's key of pg2, won after an early DELETE (promote delay `ttl + R` from
/// 102.5 s): pg2 is a leader that has not promoted.
fn winner_in_its_promote_delay() -> Core {
    let mut c = core("pg2", None);
    let mut pg1 = member("pg1", 8, "primary", 1000, None);
    pg1.info.epoch = Some(5);
    let members = vec![pg1, member("pg2", 9, "replica", 1000, None)];
    let v = view(10, Some(key("pg1", 5, 0xA)), members.clone());
    c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = poll(0xA, 102.0, Some(1));
    c.step(t(102.01), &o);
    let mut o = obs(
        view(20, None, behind(&members, "pg2", 20)),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(102.5));
    o.lease_poll = poll(0xA, 102.55, None);
    let p = c.step(t(102.6), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let members = behind(&members, "pg2", 20);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 30, 102.65, 21);
    c.step(t(102.7), &o);
    let p = c.step(
        t(102.8),
        &obs(
            view(22, Some(key("pg2", 21, 0xB)), members),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    assert!(
        matches!(p.reason, Reason::PromoteDelayed { .. }),
        "{}",
        p.reason
    );
    c
}

/// Review F2, the hand-over path: a leader that never promoted (SIGTERM in its
/// promote delay) stops its standby and releases the key without a release marker:
/// a marker proves its own clean stop, not that the early-expired leader before it
/// has fenced, and its successor would skip the delay on it. The core plans only
/// the guarded `Release` (it used to plan `HandOver` and leave the refusal to the
/// shell's `pg_control` check).
#[test]
fn f2_a_leader_that_never_promoted_releases_without_a_marker() {
    let mut c = winner_in_its_promote_delay();
    let v = view(23, Some(key("pg2", 21, 0xB)), vec![]);
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, None));
    o.shutdown = true;
    let p = c.step(t(103.0), &o);
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::Stop)],
        "{}",
        p.reason
    );
    let mut o = obs(v.clone(), pg(PgRole::Stopped, 1000, None));
    o.shutdown = true;
    o.job = Job::Finished {
        kind: JobKind::Stop,
        ok: true,
        detail: String::new(),
    };
    let p = c.step(t(103.5), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    let mut o = obs(v, pg(PgRole::Stopped, 1000, None));
    o.shutdown = true;
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(103.6), &o);
    assert_eq!(
        p.actions,
        vec![
            Action::Release {
                lease: 0xB,
                epoch: 21
            },
            Action::Exit
        ],
        "{}",
        p.reason
    );
}

/// Review F3: pg2 tracks A (pg1, `W` 5). The watch breaks; in the gap C (pg3, `W`
/// 13; its epoch 12 and lease published, or not at all) takes the key and loses it
/// early. pg2's read at 103.3 s shows the key absent: untimeable, but it was judged
/// with A's `W` (promotion at 116.3 s, C's bound 132.25 s), and C's lease was never
/// checked (only A's). Now: no `W` of a holder the gap may hide (`ttl + R` from the
/// read), and every lease a member publishes for a newer leadership is seen gone
/// before the acquire.
#[test]
fn f3_a_gap_in_the_watch_does_not_keep_the_tracked_holders_watchdog() {
    for published in [true, false] {
        let mut c = core("pg2", None);
        let mut members = vec![
            leader_member("pg1", 8, "primary", 5, 5, 0xA),
            member("pg2", 9, "replica", 1000, None),
        ];
        let v = view(10, Some(key("pg1", 5, 0xA)), members.clone());
        c.step(
            t(100.0),
            &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
        );
        let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
        o.lease_poll = poll(0xA, 102.0, Some(1));
        c.step(t(102.01), &o);
        if published {
            members.push(leader_member("pg3", 12, "primary", 13, 12, 0xC));
        }
        // The watch broke after the read at revision 10; this read (revision 20)
        // shows the key absent, and A's lease gone.
        let mut o = obs(
            view(20, None, members.clone()),
            pg(PgRole::Replica, 1000, None),
        );
        o.watch_from = None;
        o.lease_poll = poll(0xA, 103.28, None);
        c.step(t(103.3), &o);
        let (at, polled) = acquire_and_promote(&mut c, "pg2", &members, 103.3);
        assert!(
            at >= 103.25 + 2.0 * 13.0 + 3.0,
            "published {published}: promotes at {at}, before C's bound 132.25"
        );
        if published {
            assert!(
                polled.contains(&0xC),
                "C's lease never checked: {polled:x?}"
            );
        }
    }
}

/// Review F4: pg2 judged A's expiry on time at revision 20 and acquired; the watch
/// broke during the acquire, and in the gap C took the key (rev 21) and lost it to a
/// quick delete (rev 22), C having judged A's expiry on time too and promoted at
/// once. pg2's acquire (rev 23) wins: the step of the win must check the watch's
/// coverage since the vacancy's read, not only the PUTs it reported.
#[test]
fn f4_a_gap_between_the_vacancy_read_and_the_win_makes_the_vacancy_untimeable() {
    let mut c = core("pg2", None);
    let mut pg1 = member("pg1", 8, "primary", 1000, None);
    pg1.info.epoch = Some(5);
    let members = vec![pg1, member("pg2", 9, "replica", 1000, None)];
    let v = view(10, Some(key("pg1", 5, 0xA)), members.clone());
    c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = poll(0xA, 102.0, Some(1));
    c.step(t(102.01), &o);
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(20);
    o.leader_changes = vec![deleted(103.2, 20)];
    o.lease_poll = poll(0xA, 103.25, None);
    let p = c.step(t(103.3), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(24, Some(key("pg2", 23, 0xB)), members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.watch_from = None; // broken during the acquire, nothing delivered
    o.acquire = won(0xB, 30, 103.35, 23);
    let p = c.step(t(103.4), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 23 });
    let mut o = obs(
        view(25, Some(key("pg2", 23, 0xB)), members),
        pg(PgRole::Replica, 1000, None),
    );
    o.watch_from = Some(25);
    let p = c.step(t(103.5), &o);
    let at = promote_instant(&p, 103.5, 23);
    // Untimeable from the read that showed the win: `ttl + R`.
    assert!(
        (at - (103.4 + 31.0)).abs() < 1e-6,
        "promotes at {at}: {}",
        p.reason
    );
}

/// DESIGN §1 step 4's "previous holder's lease gone", when vacancies merge (the
/// review's note on `after_open`): A's key (pg1) was deleted early at 100.1 s while
/// its lease lived on (an operator's delete); C (pg3) came and went unseen but for
/// the watch. The merged vacancy kept only C's lease to check: once C's was gone,
/// pg2 acquired with A's lease still alive. Both must be seen gone, C's first.
#[test]
fn merged_vacancies_wait_for_every_old_lease_to_be_gone() {
    let mut c = core("pg2", None);
    let a = leader_member("pg1", 8, "primary", 13, 5, 0xA);
    let me = member("pg2", 9, "replica", 1000, None);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![a.clone(), me.clone()]);
    c.step(
        t(99.8),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = poll(0xA, 99.9, Some(29));
    c.step(t(99.95), &o);
    let mut o = obs(
        view(11, None, vec![a.clone(), me.clone()]),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(100.1));
    o.leader_deleted_revision = Some(11);
    o.leader_changes = vec![deleted(100.1, 11)];
    o.lease_poll = poll(0xA, 100.12, Some(28));
    let p = c.step(t(100.15), &o);
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    let members = vec![a, me, leader_member("pg3", 12, "primary", 13, 12, 0xC)];
    let mut o = obs(
        view(14, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_changes = vec![put(100.4, "pg3", 12, 0xC), deleted(100.6, 13)];
    o.lease_poll = poll(0xA, 102.3, Some(26));
    let p = c.step(t(102.35), &o);
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    assert_eq!(c.lease_to_poll(), Some(0xC));
    let mut o = obs(
        view(16, None, behind(&members, "pg2", 15)),
        pg(PgRole::Replica, 1000, None),
    );
    o.lease_poll = poll(0xC, 104.3, None);
    let p = c.step(t(104.35), &o);
    assert!(
        !p.actions.contains(&Action::Acquire),
        "A's lease still lives: {}",
        p.reason
    );
    assert_eq!(c.lease_to_poll(), Some(0xA));
    let mut o = obs(
        view(17, None, behind(&members, "pg2", 15)),
        pg(PgRole::Replica, 1000, None),
    );
    o.lease_poll = poll(0xA, 106.3, None);
    let p = c.step(t(106.35), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
}

/// Review F3, without a gap: the watch is open and covered the read, but C's PUT
/// has not reached the agent yet (the residual the agent's drain leaves); C (pg3,
/// `W` 13) publishes its epoch 12 and lease. pg2 judged A's DELETE at 103.2 s on
/// its fresh poll of A and promoted at once beside C. A member publishing a
/// leadership newer than the key read makes the vacancy untimeable like a gap: no
/// `W` of A, `ttl + R` from the read, and C's lease must be seen gone.
#[test]
fn f3_a_member_publishing_a_newer_leadership_makes_the_new_vacancy_untimeable() {
    let mut c = core("pg2", None);
    let mut members = vec![
        leader_member("pg1", 8, "primary", 5, 5, 0xA),
        member("pg2", 9, "replica", 1000, None),
    ];
    let v = view(10, Some(key("pg1", 5, 0xA)), members.clone());
    c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = poll(0xA, 102.0, Some(1));
    c.step(t(102.01), &o);
    members.push(leader_member("pg3", 12, "primary", 13, 12, 0xC));
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(11);
    o.leader_changes = vec![deleted(103.2, 11)];
    o.lease_poll = poll(0xA, 103.25, None);
    c.step(t(103.3), &o);
    let (at, polled) = acquire_and_promote(&mut c, "pg2", &members, 103.3);
    assert!(
        at >= 103.3 + 31.0 - 1e-6,
        "promotes at {at}, before C's bound"
    );
    assert!(
        polled.contains(&0xC),
        "C's lease never checked: {polled:x?}"
    );
}
