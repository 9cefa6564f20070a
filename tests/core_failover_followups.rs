//! Issue 13 item 4 follow-ups (what `bench/failover_dist` found), in the core:
//! the promotion comes when the promote delay ends, not at the first tick after
//! it; a node whose required watchdog failed its check is no candidate.
//! Pure: no clock, no etcd, no PostgreSQL.

#[path = "support/core_builders.rs"]
mod core_builders;

use core_builders::{core, counted, key, lease_poll, obs, pg, t, two, view, won};
use tenure::core::Core;
use tenure::core::model::*;

/// pg2 follows pg1 (lease 0xA) and polls its lease at 102 s: TTL 1 s, so
/// E_max = 103 s; a DELETE before that is early (DESIGN §1 step 4).
fn follower(watchdog: Option<u64>) -> Core {
    let mut c = core("pg2", watchdog);
    let v = view(10, Some(key("pg1", 5, 0xA)), two());
    c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = Some(lease_poll(0xA, 102.0, Some(1), None, true));
    c.step(t(102.01), &o);
    c
}

/// The key is seen deleted at `at` and the next poll finds pg1's lease gone.
fn vacancy(at: f64) -> Observation {
    let mut o = obs(view(20, None, two()), pg(PgRole::Replica, 1000, None));
    o.leader_deleted_at = Some(t(at));
    o.lease_poll = Some(lease_poll(0xA, at + 0.05, None, None, false));
    o
}

/// pg2 as the key's holder (lease 0xB, epoch 21), its renewal sent at `s` counted.
fn holding(s: f64) -> Observation {
    let mut o = obs(
        view(22, Some(key("pg2", 21, 0xB)), two()),
        pg(PgRole::Replica, 1000, None),
    );
    o.renewal = counted(0xB, s);
    o
}

#[test]
fn the_promotion_comes_when_the_promote_delay_ends_not_at_the_next_tick() {
    // The DELETE at 102.5 comes before E_max (103): early, so the delay is
    // ttl + R = 31 s from it (no watchdog on the old leader): promote_after = 133.5.
    let mut c = follower(None);
    let p = c.step(t(102.6), &vacancy(102.5));
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), two()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 30, 102.65, 21);
    let p = c.step(t(102.7), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 });

    // Holding the key during the delay: the plan asks to be woken at its end.
    let p = c.step(t(102.8), &holding(102.75));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        matches!(p.reason, Reason::PromoteDelayed { .. }),
        "{}",
        p.reason
    );
    assert_eq!(p.wake_at, Some(t(133.5)), "{}", p.reason);
    // Ticks of loop_wait (2 s) from 102.8 fall at ..., 132.8, 134.8: the last
    // tick inside the delay still asks for the same wake-up, and does not promote
    // (S3: the delay itself never shrinks).
    let p = c.step(t(132.8), &holding(132.75));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.wake_at, Some(t(133.5)), "{}", p.reason);
    // Woken at 133.5, between ticks and without a renewal in that iteration: the
    // promote action comes now, not at the tick of 134.8.
    let mut o = holding(132.75);
    o.renewal = None;
    let p = c.step(t(133.5), &o);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
    assert_eq!(p.wake_at, None, "nothing left to wake for");
}

#[test]
fn a_leader_without_a_promote_delay_asks_for_no_wake_up() {
    // An on-time DELETE (after E_max = 103): no delay, no wake-up, the promote
    // comes at the first step holding the key.
    let mut c = follower(None);
    let p = c.step(t(104.1), &vacancy(104.0));
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), two()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 30, 104.15, 21);
    c.step(t(104.2), &o);
    let p = c.step(t(104.3), &holding(104.25));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
    assert_eq!(p.wake_at, None);
}

#[test]
fn a_required_watchdog_that_failed_its_check_withholds_candidacy() {
    // pg2 runs with a required watchdog (W 13) whose check failed: the vacancy is
    // real (the old lease is gone) and pg2 is the best placed, yet it must not
    // acquire (S3: it could not arm the fence; a win would be given back and cost
    // the next winner a promote delay). It follows on as a replica and says why.
    let mut c = follower(Some(13));
    let mut o = vacancy(104.0);
    o.watchdog_unusable = Some("open /dev/watchdog: ENODEV".into());
    let p = c.step(t(104.1), &o);
    assert!(
        !p.actions.contains(&Action::Acquire),
        "acquired with an unusable required watchdog: {:?} ({})",
        p.actions,
        p.reason
    );
    let said = p.reason.to_string();
    assert!(
        said.contains("not a candidate") && said.contains("required watchdog unusable"),
        "{said}"
    );
    assert!(
        said.contains("ENODEV"),
        "the reason names the failure: {said}"
    );
    // The member key publishes it (`nofailover`), so rivals do not wait for it.
    assert!(c.refuses_leadership());

    // A later check passes: a candidate again (the refusal lasts while reported).
    let p = c.step(t(106.1), &vacancy(104.0));
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    assert!(!c.refuses_leadership());
}

#[test]
fn a_required_watchdog_that_failed_its_check_withholds_the_bootstrap_too() {
    // A new cluster: no `initialize`, empty data. The node whose check failed does
    // not race for the bootstrap lock (it would run initdb, then be the only node
    // with data and refuse the key: a cluster without a primary).
    let mut c = core("pg1", Some(13));
    let v = ClusterView {
        revision: 1,
        ..ClusterView::default()
    };
    let mut empty = pg(PgRole::Replica, 0, None);
    empty.data = DataDir::Empty;
    empty.role = PgRole::Stopped;
    let mut o = obs(v.clone(), empty.clone());
    o.watchdog_unusable = Some("open /dev/watchdog: ENODEV".into());
    let p = c.step(t(1.0), &o);
    assert!(
        !p.actions.contains(&Action::ClaimInitialize),
        "{:?} ({})",
        p.actions,
        p.reason
    );
    assert!(
        p.reason.to_string().contains("not bootstrapping"),
        "{}",
        p.reason
    );
    // Usable again: it races once the bootstrap grace (`L_w + R`, 3 s) from its
    // first read without `initialize` has run.
    let p = c.step(t(2.0), &obs(v.clone(), empty.clone()));
    assert!(p.actions.is_empty(), "{:?} ({})", p.actions, p.reason);
    let p = c.step(t(4.0), &obs(v, empty));
    assert_eq!(p.actions, vec![Action::ClaimInitialize], "{}", p.reason);
}
