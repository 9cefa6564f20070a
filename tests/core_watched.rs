//! Issue 13 item 5: which steps may decide on the cluster view kept from the scope
//! watch instead of a linearizable read (`Core::watched_view_serves`). Pure: no
//! clock, no etcd, no PostgreSQL.
//!
//! The rule: only a plain follower of the leader key it already followed at its
//! last step, with no vacancy open, no rollback in play; never the first step, a
//! candidate, an adopter or a leader (DESIGN §1, §3: their reads are linearizable).

#[path = "support/core_builders.rs"]
mod core_builders;

use core_builders::{core, counted, key, lease_poll, member, pg, polled, reading, t, view, won};
use tenure::core::model::*;
use tenure::core::{Core, KeptViewCheck};

/// pg1 the primary and pg2 a replica, both at 500 (where this file's PostgreSQL
/// runs) and written at revision 3: the members of every view here (the shared
/// `two()` has them at 1000, revisions 8 and 9).
fn members() -> Vec<Member> {
    vec![
        member("pg1", 3, "primary", 500, None),
        member("pg2", 3, "replica", 500, None),
    ]
}

/// pg2, a replica of pg1 (key on lease 0xA), after `steps` steps on reads.
fn follower(steps: usize) -> Core {
    let mut c = core("pg2", None);
    for i in 0..steps {
        let v = view(10 + i as i64, Some(key("pg1", 5, 0xA)), members());
        c.step(
            t(i as f64 * 2.0),
            &reading(Ok(v), pg(PgRole::Replica, 500, Some("pg1"))),
        );
    }
    c
}

#[test]
fn only_a_follower_of_the_key_it_already_follows_decides_on_a_kept_view() {
    let following = view(20, Some(key("pg1", 5, 0xA)), members());
    // The first decision (S4: adopt or fence) is never taken on a kept view.
    assert!(!follower(0).watched_view_serves(&following));
    let c = follower(1);
    assert!(c.watched_view_serves(&following));
    assert_eq!(c.lease_to_poll(), Some(0xA), "the poll backs that very key");
    // The key changed hands since the last step (another lease): read.
    assert!(!c.watched_view_serves(&view(20, Some(key("pg3", 15, 0xB)), members())));
    // No key: a vacancy, whatever the watch says — candidates read (DESIGN §1).
    assert!(!c.watched_view_serves(&view(20, None, members())));
    // The key names this node: adopting or revoking a stale key of its own reads.
    assert!(!c.watched_view_serves(&view(20, Some(key("pg2", 15, 0xB)), members())));
}

#[test]
fn an_open_vacancy_needs_a_read_until_a_leader_is_followed_again() {
    let mut c = follower(2);
    // The key is gone: the vacancy opens (on a read, as every candidate step is).
    c.step(
        t(10.0),
        &reading(
            Ok(view(30, None, members())),
            pg(PgRole::Replica, 500, Some("pg1")),
        ),
    );
    let back = view(31, Some(key("pg1", 5, 0xA)), members());
    assert!(
        !c.watched_view_serves(&back),
        "a vacancy is open: the candidate's decisions rest on reads"
    );
    // A read shows a new leader: the next step follows it, then the kept view serves.
    let new = view(40, Some(key("pg3", 35, 0xC)), members());
    c.step(
        t(12.0),
        &reading(Ok(new.clone()), pg(PgRole::Replica, 500, Some("pg1"))),
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
    let mut v = view(20, Some(key("pg1", 5, 0xA)), members());
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
    let mut c = core("pg1", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), members());
    c.step(
        t(0.0),
        &polled(
            reading(Ok(v.clone()), pg(PgRole::Primary, 500, None)),
            0xA,
            0.0,
        ),
    );
    assert!(!c.watched_view_serves(&v), "adopting (S4)");
    let mut o = reading(Ok(v.clone()), pg(PgRole::Primary, 500, None));
    o.renewal = counted(0xA, 0.0);
    c.step(t(0.01), &o);
    assert!(c.leadership().is_some());
    assert!(
        !c.watched_view_serves(&v),
        "a leader decides on its renewal's read"
    );
}

/// pg2 following pg1 (as `follower(1)`), then a step at `at` whose poll of the
/// followed lease (0xA) answered `ttl` seconds left (`None`: no poll answered).
fn follower_polled(at: f64, ttl: Option<i64>) -> Core {
    let mut c = follower(1);
    let mut o = reading(
        Ok(view(20, Some(key("pg1", 5, 0xA)), members())),
        pg(PgRole::Replica, 500, Some("pg1")),
    );
    o.lease_poll = ttl.map(|ttl| lease_poll(0xA, at, Some(ttl), Some(30), true));
    c.step(t(at), &o);
    c
}

/// A follower on the kept view sends only `LeaseTimeToLive`, which etcd 3.4 answers
/// without checking the auth token (and from its leader's lessor, not a quorum
/// read): at least every `ttl / 3` (less `R`) it reads the scope instead, so a
/// refused token shows within that bound (real_tls: `auth disable`/`enable`).
/// Timing: ttl 30, loop 2, retry 1 → a read due 9 s after the last one.
#[test]
fn a_follower_on_the_kept_view_reads_the_scope_every_third_of_the_ttl() {
    let c = follower_polled(10.0, Some(29));
    assert_eq!(
        c.kept_view_check(t(10.0), None),
        KeptViewCheck::Read,
        "no read answered yet: read"
    );
    for (now, want) in [
        (10.0, KeptViewCheck::Poll),
        (12.0, KeptViewCheck::Poll),
        (14.9, KeptViewCheck::Poll),
        (15.0, KeptViewCheck::Read),
        (17.0, KeptViewCheck::Read),
    ] {
        assert_eq!(
            c.kept_view_check(t(now), Some(t(6.0))),
            want,
            "last read at 6 s, now {now} s"
        );
    }
}

/// The read stands in for the poll (one request a loop) only while `E_max` is at
/// least `2 (L_w + R)` ahead: a DELETE before the next poll is then judged early
/// anyway, so a skipped poll never makes one look on time (DESIGN §1 step 4).
/// Closer to `E_max` (a leader that stopped renewing) the poll comes with the read.
#[test]
fn the_read_replaces_the_poll_only_while_e_max_is_far_enough() {
    // E_max = 10 + 29 = 39 s; 2 (L_w + R) = 6 s.
    let c = follower_polled(10.0, Some(29));
    assert_eq!(c.kept_view_check(t(33.0), None), KeptViewCheck::Read);
    assert_eq!(c.kept_view_check(t(33.5), None), KeptViewCheck::ReadAndPoll);
    // A lease about to expire: E_max = 12 s.
    let c = follower_polled(10.0, Some(2));
    assert_eq!(c.kept_view_check(t(10.0), None), KeptViewCheck::ReadAndPoll);
    // Never polled: no prediction to lean on.
    let c = follower_polled(10.0, None);
    assert_eq!(c.kept_view_check(t(10.0), None), KeptViewCheck::ReadAndPoll);
}

/// pg2 sees the key deleted at `deleted` (the poll right after says the lease is
/// gone), acquires and wins: the plan of the step after the win.
fn take_over(c: &mut Core, deleted: f64) -> Plan {
    let mut o = reading(
        Ok(view(30, None, members())),
        pg(PgRole::Replica, 500, Some("pg1")),
    );
    o.leader_deleted_at = Some(t(deleted));
    o.lease_poll = Some(lease_poll(0xA, deleted + 0.05, None, None, false));
    let p = c.step(t(deleted + 0.1), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = reading(
        Ok(view(31, Some(key("pg2", 31, 0xB)), members())),
        pg(PgRole::Replica, 500, Some("pg1")),
    );
    o.acquire = won(0xB, 30, deleted + 0.15, 31);
    c.step(t(deleted + 0.2), &o);
    c.step(
        t(deleted + 0.3),
        &reading(
            Ok(view(32, Some(key("pg2", 31, 0xB)), members())),
            pg(PgRole::Replica, 500, Some("pg1")),
        ),
    )
}

/// The gate's point, end to end in the core: after the read replaced the poll, a
/// DELETE before the next poll is judged early even at `E_max` (the last poll is
/// then older than `L_w + R`), so the winner waits `promote_delay`; the same
/// DELETE right after a poll that saw the lease run out is on time.
#[test]
fn a_delete_before_the_next_poll_after_a_skipped_one_is_judged_early() {
    // The poll at 10 s answered 7 s left: E_max = 17 s, 6 s ahead at 11 s.
    let mut c = follower_polled(10.0, Some(7));
    assert_eq!(c.kept_view_check(t(11.0), None), KeptViewCheck::Read);
    // The read at 11 s, no poll: the key still there.
    c.step(
        t(11.0),
        &reading(
            Ok(view(21, Some(key("pg1", 5, 0xA)), members())),
            pg(PgRole::Replica, 500, Some("pg1")),
        ),
    );
    let p = take_over(&mut c, 17.0);
    assert!(
        matches!(p.reason, Reason::PromoteDelayed { .. }),
        "a DELETE at E_max, 7 s after the last poll, must be early: {}",
        p.reason
    );

    // Control: polled at 16.5 s (0 s left), the same DELETE is on time.
    let mut c = follower_polled(10.0, Some(7));
    let mut o = reading(
        Ok(view(21, Some(key("pg1", 5, 0xA)), members())),
        pg(PgRole::Replica, 500, Some("pg1")),
    );
    o.lease_poll = Some(lease_poll(0xA, 16.5, Some(0), Some(30), true));
    c.step(t(16.5), &o);
    let p = take_over(&mut c, 17.0);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 31 }],
        "{}",
        p.reason
    );
}
