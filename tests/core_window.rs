//! The poll window `L_w + R` across a `config` change of `loop_wait` or
//! `retry_timeout` (review L2; `core::window`). Each member applies such a change
//! when its own view shows it, or refuses it for good when it breaks S6 for its own
//! `W`, `M`, `B`. The on-time rule pairs a replica's window with its leader's
//! unwatched fence deadline `F = s + ttl - (L_w + R + 1 s)`: a replica judging with
//! a wider window than the leader's `F` assumes loses the difference of the margin.
//! Pure: no clock, no etcd, no PostgreSQL.

#[path = "support/core_builders.rs"]
mod core_builders;

use std::time::Duration;

use core_builders::{core, key, lease_poll, member, obs, pg, polled, t, timing30, view, won};
use tenure::core::Core;
use tenure::core::model::*;

/// timing30 with `loop_wait` `lw` s (`retry_timeout` 1 s): `L_w + R = lw + 1`.
fn timing_lw(lw: f64) -> Timing {
    Timing {
        loop_wait: Duration::from_secs_f64(lw),
        ..timing30()
    }
}

/// pg1's member key (the primary, epoch 5), publishing `window` as its `L_w + R`.
fn pg1_publishing(window: Option<f64>) -> Member {
    let mut m = member("pg1", 8, "primary", 1000, None);
    m.info.epoch = Some(5);
    m.info.poll_window = window.map(Duration::from_secs_f64);
    m
}

/// pg2 follows pg1 (lease 0xA; pg1's member key publishes `window`) and polls its
/// lease at 102 s: TTL 1 s, so `E_max` = 103 s. `change`: pg2 applies that timing
/// at that instant first.
fn follower(window: Option<f64>, change: Option<(f64, Timing)>) -> Core {
    let mut c = core("pg2", None);
    if let Some((at, tm)) = change {
        c.set_timing(t(at), tm);
    }
    let members = vec![
        pg1_publishing(window),
        member("pg2", 9, "replica", 1000, None),
    ];
    let v = view(10, Some(key("pg1", 5, 0xA)), members);
    let p = c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = Some(lease_poll(0xA, 102.0, Some(1), None, true));
    c.step(t(102.01), &o);
    c
}

/// The key is seen deleted at `at` (pg1's lease reported gone), pg2 acquires and
/// wins (epoch 21): whether the step after the win promotes at once (the DELETE was
/// on time) or holds the promote delay (early).
fn on_time(c: &mut Core, at: f64, window: Option<f64>) -> bool {
    let members = vec![
        pg1_publishing(window),
        member("pg2", 9, "replica", 1000, None),
    ];
    let replica = || pg(PgRole::Replica, 1000, None);
    let mut o = obs(view(20, None, members.clone()), replica());
    o.leader_deleted_at = Some(t(at));
    o.lease_poll = Some(lease_poll(0xA, at + 0.05, None, None, false));
    let p = c.step(t(at + 0.1), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members.clone()),
        replica(),
    );
    o.acquire = won(0xB, 30, at + 0.15, 21);
    c.step(t(at + 0.2), &o);
    let o = obs(view(22, Some(key("pg2", 21, 0xB)), members), replica());
    let p = c.step(t(at + 0.3), &o);
    match (&p.actions[..], &p.reason) {
        ([Action::Promote { epoch: 21 }], _) => true,
        ([], Reason::PromoteDelayed { .. }) => false,
        other => panic!("neither a promotion nor a promote delay: {other:?}"),
    }
}

/// A leader that refused a wider window (its `F` still assumes `L_w + R` = 3 s)
/// while this replica applied it (5 s): a DELETE 3.5 s after the last poll is
/// early. The same DELETE under a leader publishing 5 s, or publishing nothing
/// long after the change, is on time.
#[test]
fn a_replica_judges_with_no_wider_window_than_its_leader_publishes() {
    let wider = Some((0.0, timing_lw(4.0)));
    // 105.5 >= E_max (103); the last poll (102) is 3.5 s old.
    let mut c = follower(Some(3.0), wider.clone());
    assert!(
        !on_time(&mut c, 105.5, Some(3.0)),
        "the leader's 3 s must bind"
    );
    let mut c = follower(Some(5.0), wider.clone());
    assert!(
        on_time(&mut c, 105.5, Some(5.0)),
        "the leader applied 5 s too"
    );
    // The change applied at 0 s: its hold (ttl 30 + 5 + M 2) ended at 37 s.
    let mut c = follower(None, wider);
    assert!(on_time(&mut c, 105.5, None), "nothing published, hold over");
    // Without the change both sides have 3 s: early (the old rule).
    let mut c = follower(Some(3.0), None);
    assert!(!on_time(&mut c, 105.5, Some(3.0)));
}

/// A narrower window published by the leader binds a replica that refused it
/// (3 s here, the leader 2 s): a DELETE 2.5 s after the last poll is early, on
/// time under a leader publishing 3 s.
#[test]
fn a_leaders_narrower_window_binds_a_replica_that_kept_a_wider_one() {
    let mut c = follower(Some(2.0), None);
    assert!(!on_time(&mut c, 104.5, Some(2.0)));
    let mut c = follower(Some(3.0), None);
    assert!(on_time(&mut c, 104.5, Some(3.0)));
}

/// A replica that applied a wider window whose leader publishes none (an older
/// agent) keeps its earlier window for `ttl + L_w + R + M` after the change: the
/// leader may still count on the earlier one until its own view shows the change.
#[test]
fn with_nothing_published_a_widened_window_waits_its_hold() {
    // Applied at 90 s: the hold (30 + 5 + 2 s) lasts until 127 s.
    let mut c = follower(None, Some((90.0, timing_lw(4.0))));
    assert!(!on_time(&mut c, 105.5, None), "within the hold: 3 s binds");
}

/// pg1, its primary running and the key naming it (lease 0xA, epoch 5), adopts it
/// through a counted renewal sent at 100 s; its member key publishes `published`
/// as its `L_w + R`.
fn adopt_running_primary(c: &mut Core, published: f64) {
    let v = view(
        10,
        Some(key("pg1", 5, 0xA)),
        vec![pg1_publishing(Some(published))],
    );
    c.step(
        t(100.0),
        &polled(obs(v.clone(), pg(PgRole::Primary, 500, None)), 0xA, 100.0),
    );
    let mut o = obs(v, pg(PgRole::Primary, 500, None));
    o.renewal = core_builders::counted(0xA, 100.0);
    c.step(t(100.01), &o);
}

/// A leader step at `at` whose read shows pg1's member key publishing `published`.
fn leader_step(c: &mut Core, at: f64, published: f64) {
    let v = view(
        12,
        Some(key("pg1", 5, 0xA)),
        vec![pg1_publishing(Some(published))],
    );
    c.step(t(at), &obs(v, pg(PgRole::Primary, 500, None)));
}

/// pg1 leads (adopted, lease 0xA, renewal sent at 100 s) with no watchdog, on
/// `L_w + R` = 3 s: `F = 100 + 30 - (3 + 1)` = 126 s.
fn unwatched_leader() -> Core {
    let mut c = core("pg1", None);
    adopt_running_primary(&mut c, 3.0);
    assert_eq!(c.fence_deadline(), Some(t(126.0)));
    c
}

/// A leader narrowing its window (3 s to 1.5 s) keeps the earlier one in `F` until
/// a read shows its own member key publishing the new one: replicas still on 3 s
/// judge with it until they can see the leader's. A widening applies at once.
#[test]
fn a_leader_keeps_its_wider_window_until_its_member_key_shows_the_narrower_one() {
    let mut c = unwatched_leader();
    c.set_timing(t(100.5), timing_lw(0.5));
    leader_step(&mut c, 101.0, 3.0);
    assert_eq!(c.fence_deadline(), Some(t(126.0)), "not published yet");
    leader_step(&mut c, 101.5, 1.5);
    assert_eq!(c.fence_deadline(), Some(t(127.5)), "100 + 30 - (1.5 + 1)");

    let mut c = unwatched_leader();
    c.set_timing(t(100.5), timing_lw(4.0));
    assert_eq!(
        c.fence_deadline(),
        Some(t(124.0)),
        "100 + 30 - (5 + 1), at once"
    );
}

/// Review of c776472, M1: a leader published 2 s; the read that shows its key
/// gone shows its member key's `poll_window` garbled (another writer; parsed as
/// absent). The good value is kept: a DELETE 2.5 s after the last poll is early,
/// not judged with the replica's own 3 s. A larger value later in the leadership
/// does not replace the smaller either.
#[test]
fn a_garbled_or_larger_published_window_never_widens_the_judgement() {
    let mut c = follower(Some(2.0), None);
    assert!(!on_time(&mut c, 104.5, None), "garbled: 2 s kept");
    let mut c = follower(Some(2.0), None);
    assert!(!on_time(&mut c, 104.5, Some(3.0)), "larger: 2 s kept");
}

/// Review of c776472, L5: the followed leader publishes nothing (an older agent,
/// which may have refused the change for good) and is the same leadership as when
/// this replica widened its window: the earlier window binds past the hold.
#[test]
fn a_silent_leader_keeps_the_earlier_window_binding_past_the_hold() {
    let mut c = follower(None, None);
    c.set_timing(t(101.0), timing_lw(4.0));
    // The hold (30 + 5 + 2 s) ended at 138 s; poll at 140 (TTL 1: E_max 141), the
    // DELETE at 143.5, 3.5 s after it.
    let v = view(11, Some(key("pg1", 5, 0xA)), vec![pg1_publishing(None)]);
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = Some(lease_poll(0xA, 140.0, Some(1), None, true));
    c.step(t(140.01), &o);
    assert!(!on_time(&mut c, 143.5, None), "pg1 may still count on 3 s");
}

/// pg1's own adoption with no primary running waits for a renewal `L_w + R + M`
/// after it (`confirm_after`): with a narrowing not yet published, the earlier
/// (wider) window counts.
#[test]
fn an_adoptions_confirm_wait_uses_the_earlier_wider_window() {
    for (narrowed, want) in [(true, 105.01), (false, 105.01)] {
        let mut c = core("pg1", None);
        if narrowed {
            c.set_timing(t(90.0), timing_lw(0.5));
        }
        let mut standby = pg(PgRole::Replica, 1000, None);
        standby.epoch = Some(5);
        standby.epoch_row.member = Some("pg1".into());
        standby.epoch_row.lease = Some(0xA);
        let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
        let mut o = obs(v.clone(), standby.clone());
        o.lease_poll = Some(lease_poll(0xA, 100.0, Some(25), Some(30), true));
        c.step(t(100.001), &o);
        let mut o = obs(v, standby);
        o.renewal = core_builders::counted(0xA, 100.005);
        let p = c.step(t(100.01), &o);
        let l = c
            .leadership()
            .unwrap_or_else(|| panic!("not adopted: {}", p.reason));
        let got = l
            .confirm_after
            .expect("an adoption with no primary")
            .secs_f64();
        // 100.01 + 3 + 2 either way: unnarrowed the window is 3 s, narrowed to
        // 1.5 s the unpublished 3 s still counts (else 103.51).
        assert!((got - want).abs() < 1e-6, "narrowed {narrowed}: {got}");
    }
}

/// Review of c776472, L2 and L4: a leader restarted with its member key still
/// publishing the wider window of before (20 s; its own is now 3 s) keeps it in
/// `F` until its key shows 3 s, with a watchdog too: `F = min(p + W, s + ttl -
/// (20 + 1 s))`. Only the value found at the run's first read counts: one another
/// writer puts there later moves nothing (a huge one would fence a healthy leader).
#[test]
fn a_wider_window_left_in_our_member_key_counts_until_ours_replaces_it() {
    let mut c = core_builders::core_with("pg1", Some(13), timing30());
    adopt_running_primary(&mut c, 20.0);
    assert!(c.leadership().is_some());
    assert_eq!(c.fence_deadline(), Some(t(109.0)), "100 + 30 - (20 + 1)");
    leader_step(&mut c, 100.5, 20.0);
    assert_eq!(c.fence_deadline(), Some(t(109.0)), "still shown");
    leader_step(&mut c, 101.0, 3.0);
    assert_eq!(c.fence_deadline(), Some(t(113.01)), "ours shown: p + W");
    // The same restart with the `config` key's timing applied before the first
    // read (the file said loop 1 s: 2 s; the key 2 s: 3 s): 20 s still counts.
    let mut c = core_builders::core_with("pg1", Some(13), timing_lw(1.0));
    c.set_timing(t(99.0), timing30());
    adopt_running_primary(&mut c, 20.0);
    assert_eq!(c.fence_deadline(), Some(t(109.0)), "config applied first");

    // A leader whose first read showed its own value (no earlier one kept): a
    // huge value another writer puts there later moves nothing.
    let mut c = unwatched_leader();
    leader_step(&mut c, 100.5, 3600.0);
    assert_eq!(c.fence_deadline(), Some(t(126.0)), "another writer's value");
}

/// The adoption rule (seed 9982): a poll showing `TTL` left allows adopting only
/// if `TTL >= (s - q) + L_w + R + 1 s`. With 4 s left and `L_w + R` 1.5 s it
/// allows it; with 1.5 s narrowed from 3 s and not yet published, 3 s counts and it
/// refuses (replicas may still judge with 3 s).
#[test]
fn the_adoption_window_uses_the_earlier_wider_window() {
    for (narrowed, adopts) in [(false, true), (true, false)] {
        let mut c = if narrowed {
            let mut c = core("pg1", None);
            c.set_timing(t(90.0), timing_lw(0.5));
            c
        } else {
            core_builders::core_with("pg1", None, timing_lw(0.5))
        };
        let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
        let mut o = obs(v, pg(PgRole::Replica, 1000, None));
        o.lease_poll = Some(lease_poll(0xA, 100.0, Some(4), Some(30), true));
        let p = c.step(t(100.001), &o);
        assert_eq!(
            c.lease_to_renew().is_some(),
            adopts,
            "narrowed {narrowed}: {}",
            p.reason
        );
    }
}
