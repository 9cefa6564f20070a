//! Readable scenarios of the HA core: given this state and this observation, the plan
//! is X and the `Reason` says Y. Pure: no clock, no etcd, no PostgreSQL.

#[path = "support/core_builders.rs"]
mod core_builders;

use std::time::Duration;

use core_builders::{
    SYSID, core, core_with, counted, deleted, key, lease_poll, member, obs, pg, poll, polled, put,
    reading, sync_actions, t, three, timing30, two, view, won,
};
use tenure::core::Core;
use tenure::core::model::*;

/// pg1 starts with its primary running and the key naming it (lease 0xA, epoch 5),
/// and adopts it through a counted renewal sent at `s`.
fn adopted_leader(s: f64) -> Core {
    let mut c = core("pg1", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let p = c.step(
        t(s),
        &polled(obs(v.clone(), pg(PgRole::Primary, 500, None)), 0xA, s),
    );
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let mut o = obs(v, pg(PgRole::Primary, 500, None));
    o.renewal = counted(0xA, s);
    c.step(t(s + 0.01), &o);
    assert!(c.leadership().is_some());
    c
}

/// pg2 follows pg1 (lease 0xA, whose member JSON publishes watchdog `old_wd`) and
/// polls its lease at 102 s: TTL 1 s, so E_max = 103 s.
fn follower_with_poll(old_wd: Option<u32>) -> Core {
    let mut c = core("pg2", None);
    // pg1 publishes its leadership's epoch, as a promoted leader does (review F2:
    // only then does its `W` size the delay after its early DELETE).
    let mut pg1 = member("pg1", 8, "primary", 1000, old_wd);
    pg1.info.epoch = Some(5);
    let members = vec![pg1, member("pg2", 9, "replica", 1000, None)];
    let v = view(10, Some(key("pg1", 5, 0xA)), members);
    let p = c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    assert_eq!(c.lease_to_poll(), Some(0xA));
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = Some(lease_poll(0xA, 102.0, Some(1), None, true));
    c.step(t(102.01), &o);
    c
}

/// The key is seen deleted at `deleted`; the next poll says the lease is gone; pg2
/// acquires and wins (epoch 21). Returns the plan of the step after the win.
fn take_over(c: &mut Core, deleted: f64) -> Plan {
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    win_after_delete_granted(c, members, deleted, 30)
}

/// The key is seen deleted at `at` (pg1's lease 0xA reported gone), pg2 acquires and
/// wins a lease of `granted_ttl` (epoch 21): the plan of the step after the win.
fn win_after_delete_granted(c: &mut Core, members: Vec<Member>, at: f64, granted_ttl: u32) -> Plan {
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(at));
    o.lease_poll = Some(lease_poll(0xA, at + 0.05, None, None, false));
    let p = c.step(t(at + 0.1), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, granted_ttl, at + 0.15, 21);
    let p = c.step(t(at + 0.2), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 });
    let o = obs(
        view(22, Some(key("pg2", 21, 0xB)), members),
        pg(PgRole::Replica, 1000, None),
    );
    c.step(t(at + 0.3), &o)
}

fn empty_pg() -> PgStatus {
    let mut empty = pg(PgRole::Stopped, 0, None);
    empty.data = DataDir::Empty;
    empty
}

/// An empty member key (no data directory yet) of `name`.
fn empty_member(name: &str, rev: i64) -> Member {
    let mut m = member(name, rev, "replica", 0, None);
    m.info.sysid = None;
    m.info.pg_healthy = false;
    m
}

/// The first read without `initialize` starts the wait; the claim comes at the first
/// step `L_w + R` (3 s on timing30) after it, not before.
#[test]
fn bootstrap_race_winner_runs_initdb() {
    let mut c = core("pg1", None);
    let v = ClusterView {
        members: vec![empty_member("pg2", 3)],
        ..ClusterView::default()
    };
    for s in [1.0, 2.0, 3.0, 3.99] {
        let p = c.step(t(s), &obs(v.clone(), empty_pg()));
        assert!(p.actions.is_empty(), "at {s}: {:?}", p.actions);
        assert!(
            matches!(&p.reason, Reason::Waiting(w) if w.contains("racing for the bootstrap lock in")),
            "{}",
            p.reason
        );
    }
    let p = c.step(t(4.0), &obs(v.clone(), empty_pg()));
    assert_eq!(p.actions, vec![Action::ClaimInitialize]);
    assert!(matches!(p.reason, Reason::Bootstrapping(_)), "{}", p.reason);

    let mut o = obs(v, empty_pg());
    o.claim = Some(ClaimOutcome::Won { lease: 0x1 });
    let p = c.step(t(4.1), &o);
    assert_eq!(p.actions, vec![Action::StartJob(JobKind::InitDb)]);
    assert_eq!(c.lease_to_keep_alive(), Some(0x1));

    // A node that lost the race waits, naming the lock (its value names nobody).
    let mut other = core("pg2", None);
    let locked = ClusterView {
        members: vec![empty_member("pg1", 3)],
        initialize: Some(Initialize::Locked {
            lease: 0x1f,
            holder: String::new(),
        }),
        ..ClusterView::default()
    };
    let p = other.step(t(4.2), &obs(locked, empty_pg()));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        matches!(&p.reason, Reason::Waiting(w)
            if w == "another member is bootstrapping the cluster (it holds the initialize lock, lease 1f)"),
        "{}",
        p.reason
    );
}

/// The bootstrap's lock expired while initdb (or `post_bootstrap`) ran: the record
/// is refused, and the new directory, a cluster nobody agreed on, is held, so no
/// later loop re-creates `initialize` from it (review of 5f50b75, M2).
#[test]
fn a_bootstrap_whose_lock_was_lost_holds_its_directory() {
    let mut c = core("pg1", None);
    let v = ClusterView {
        members: vec![empty_member("pg2", 3)],
        ..ClusterView::default()
    };
    c.step(t(1.0), &obs(v.clone(), empty_pg()));
    c.step(t(4.0), &obs(v.clone(), empty_pg()));
    let mut o = obs(v.clone(), empty_pg());
    o.claim = Some(ClaimOutcome::Won { lease: 0x1 });
    assert_eq!(
        c.step(t(4.1), &o).actions,
        vec![Action::StartJob(JobKind::InitDb)]
    );
    let mut o = obs(v.clone(), pg(PgRole::Stopped, 0, None));
    o.job = Job::Finished {
        kind: JobKind::InitDb,
        ok: true,
        detail: "done".into(),
    };
    let p = c.step(t(30.0), &o);
    assert_eq!(
        p.actions,
        vec![Action::RecordInitialize {
            sysid: SYSID,
            lease: 0x1
        }]
    );
    let mut o = obs(v, pg(PgRole::Stopped, 0, None));
    o.recorded_initialize = Some(false);
    let p = c.step(t(30.1), &o);
    match &p.actions[..] {
        [Action::HoldDataDir { why }] => {
            assert!(why.contains("initialize lock was lost"), "{why}")
        }
        a => panic!("{a:?}"),
    }
    assert!(
        matches!(&p.reason, Reason::Refusing(r) if r.contains("lost the initialize lock")),
        "{}",
        p.reason
    );
    assert_eq!(c.lease_to_keep_alive(), None);
}

/// A host with data (a restore) showed itself while this node's initdb ran: the
/// new cluster is not recorded; the lock goes back and the new directory is held,
/// so the restored host re-creates `initialize` from its data. Before, the new
/// cluster was recorded and the restored host refused (system identifier
/// mismatch).
#[test]
fn a_data_member_shown_during_initdb_makes_the_bootstrap_give_up() {
    let mut c = core("pg1", None);
    let v = ClusterView {
        members: vec![empty_member("pg2", 3)],
        ..ClusterView::default()
    };
    c.step(t(1.0), &obs(v.clone(), empty_pg()));
    c.step(t(4.0), &obs(v.clone(), empty_pg()));
    let mut o = obs(v, empty_pg());
    o.claim = Some(ClaimOutcome::Won { lease: 0x1 });
    assert_eq!(
        c.step(t(4.1), &o).actions,
        vec![Action::StartJob(JobKind::InitDb)]
    );
    let mut restored = member("pg2", 5, "replica", 0, None);
    restored.info.sysid = Some(42);
    let shown = ClusterView {
        members: vec![restored],
        ..ClusterView::default()
    };
    let mut o = obs(shown, pg(PgRole::Stopped, 0, None));
    o.job = Job::Finished {
        kind: JobKind::InitDb,
        ok: true,
        detail: "done".into(),
    };
    let p = c.step(t(6.0), &o);
    match &p.actions[..] {
        [Action::HoldDataDir { why }, Action::Revoke { lease: 0x1 }] => {
            assert!(why.contains("pg2 has data (system identifier 42)"), "{why}")
        }
        a => panic!("{a:?}"),
    }
    assert!(
        matches!(&p.reason, Reason::Refusing(r) if r.contains("gave the bootstrap up")),
        "{}",
        p.reason
    );
    assert_eq!(c.lease_to_keep_alive(), None);
    // Given up for this run: with `initialize` gone (the lock revoked) and the
    // mark unwritten (a full disk), the directory is still not re-registered.
    let mut v = view(9, None, vec![]);
    v.initialize = None;
    let p = c.step(t(7.0), &obs(v, pg(PgRole::Stopped, 0, None)));
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::CreateInitialize { .. })),
        "{:?}",
        p.actions
    );
    assert!(
        matches!(&p.reason, Reason::Refusing(r) if r.contains("bootstrap was given up")),
        "{}",
        p.reason
    );
}

/// A bootstrapping node at the end of its job, holding lock 0x1.
fn bootstrapped_job(c: &mut Core) {
    let v = ClusterView {
        members: vec![empty_member("pg2", 3)],
        ..ClusterView::default()
    };
    c.step(t(1.0), &obs(v.clone(), empty_pg()));
    c.step(t(4.0), &obs(v.clone(), empty_pg()));
    let mut o = obs(v, empty_pg());
    o.claim = Some(ClaimOutcome::Won { lease: 0x1 });
    assert_eq!(
        c.step(t(4.1), &o).actions,
        vec![Action::StartJob(JobKind::InitDb)]
    );
}

fn job_done(v: ClusterView) -> Observation {
    let mut o = obs(v, pg(PgRole::Stopped, 0, None));
    o.job = Job::Finished {
        kind: JobKind::InitDb,
        ok: true,
        detail: "done".into(),
    };
    o
}

/// The give-up's limits (review of ad64cf0): a record whose answer was lost
/// (`initialize` already names our data) is recorded, not given up; a failed read
/// decides nothing; our own identifier under another member's name is not
/// another member's data.
#[test]
fn the_bootstrap_gives_up_only_on_a_read_that_shows_another_cluster() {
    let mut other = member("pg2", 5, "replica", 0, None);
    other.info.sysid = Some(42);
    let record = vec![Action::RecordInitialize {
        sysid: SYSID,
        lease: 0x1,
    }];

    let mut c = core("pg1", None);
    bootstrapped_job(&mut c);
    let lost_answer = ClusterView {
        members: vec![other.clone()],
        initialize: Some(Initialize::Done { sysid: SYSID }),
        ..ClusterView::default()
    };
    assert_eq!(c.step(t(6.0), &job_done(lost_answer)).actions, record);

    let mut c = core("pg1", None);
    bootstrapped_job(&mut c);
    let mut o = job_done(ClusterView::default());
    o.cluster = Err("etcd unreachable".into());
    let p = c.step(t(6.0), &o);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(c.lease_to_keep_alive(), Some(0x1), "still bootstrapping");

    let mut c = core("pg1", None);
    bootstrapped_job(&mut c);
    let mut renamed = member("pg9", 5, "replica", 0, None);
    renamed.info.sysid = Some(SYSID);
    let v = ClusterView {
        members: vec![renamed],
        ..ClusterView::default()
    };
    assert_eq!(c.step(t(6.0), &job_done(v)).actions, record);
}

/// A restore started on every host at once: a host with data (its member key shows
/// its system identifier) re-creates `initialize` from it; an empty host never races
/// for the bootstrap lock meanwhile, however long it waits, and follows the restored
/// identifier once it is there. Before, the empty host could win the lock first and
/// initdb a new cluster, over which the restored data was refused.
#[test]
fn an_empty_node_never_bootstraps_while_a_member_shows_data() {
    let mut c = core("pg1", None);
    let v = ClusterView {
        members: vec![member("pg2", 3, "replica", 0, None)],
        ..ClusterView::default()
    };
    for s in [1.0, 5.0, 50.0] {
        let p = c.step(t(s), &obs(v.clone(), empty_pg()));
        assert!(p.actions.is_empty(), "at {s}: {:?}", p.actions);
        assert!(
            matches!(&p.reason, Reason::Waiting(w) if w.contains("not bootstrapping while pg2 has data")
                && w.contains(&SYSID.to_string())),
            "{}",
            p.reason
        );
    }
    // The member goes away without re-creating the key (its host died): the wait
    // starts over from that read, so an agent started with it still goes first.
    let gone = ClusterView::default();
    let p = c.step(t(60.0), &obs(gone.clone(), empty_pg()));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let p = c.step(t(62.9), &obs(gone.clone(), empty_pg()));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // It did re-create it: the empty node builds from the cluster's leader.
    let mut done = view(
        9,
        Some(key("pg2", 8, 0xA)),
        vec![member("pg2", 3, "primary", 0, None)],
    );
    done.initialize = Some(Initialize::Done { sysid: SYSID });
    let p = c.step(t(63.0), &obs(done, empty_pg()));
    assert!(
        !p.actions.iter().any(|a| matches!(
            a,
            Action::ClaimInitialize | Action::StartJob(JobKind::InitDb)
        )),
        "{:?} ({})",
        p.actions,
        p.reason
    );
}

/// A failed read restarts the wait (review M1): a restored host started while etcd
/// was unreachable reads for the first time when the empty host does, so the grace
/// counts from the first read after the outage, not from one before it.
#[test]
fn a_failed_read_restarts_the_bootstrap_grace() {
    let mut c = core("pg1", None);
    let p = c.step(t(1.0), &obs(ClusterView::default(), empty_pg()));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    for s in [2.0, 6.0, 10.0] {
        let p = c.step(
            t(s),
            &reading(Err("etcd unreachable: timed out".into()), empty_pg()),
        );
        assert!(p.actions.is_empty(), "at {s}: {:?}", p.actions);
    }
    // 10 s after the first read, but the first read after the outage.
    let p = c.step(t(11.0), &obs(ClusterView::default(), empty_pg()));
    assert!(p.actions.is_empty(), "{:?} ({})", p.actions, p.reason);
    let p = c.step(t(13.9), &obs(ClusterView::default(), empty_pg()));
    assert!(p.actions.is_empty(), "{:?} ({})", p.actions, p.reason);
    let p = c.step(t(14.0), &obs(ClusterView::default(), empty_pg()));
    assert_eq!(p.actions, vec![Action::ClaimInitialize], "{}", p.reason);
}

/// A host with data that shows itself between an empty host's read and its claim:
/// the empty host gives the lock back before initdb touches its directory.
#[test]
fn a_claim_won_while_a_member_shows_data_is_given_back_before_initdb() {
    let mut c = core("pg1", None);
    let p = c.step(t(1.0), &obs(ClusterView::default(), empty_pg()));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let p = c.step(t(4.0), &obs(ClusterView::default(), empty_pg()));
    assert_eq!(p.actions, vec![Action::ClaimInitialize]);
    let v = ClusterView {
        members: vec![member("pg2", 3, "replica", 0, None)],
        initialize: Some(Initialize::Locked {
            lease: 0x1,
            holder: "pg1".into(),
        }),
        ..ClusterView::default()
    };
    let mut o = obs(v, empty_pg());
    o.claim = Some(ClaimOutcome::Won { lease: 0x1 });
    let p = c.step(t(4.1), &o);
    assert_eq!(
        p.actions,
        vec![Action::Revoke { lease: 0x1 }],
        "{}",
        p.reason
    );
    assert!(
        matches!(&p.reason, Reason::Waiting(w) if w.contains("gave the bootstrap lock back")),
        "{}",
        p.reason
    );
    assert_eq!(c.lease_to_keep_alive(), None);
}

#[test]
fn delete_observed_on_time_promotes_at_once() {
    let mut c = follower_with_poll(None);
    // 103.5 >= E_max (103) and the last poll (102) is within L_w + R = 3 s.
    let p = take_over(&mut c, 103.5);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// pg2 (following pg1's lease 0xA) reads the key gone, the DELETE received at
/// `deleted`, with a poll of 0xA sent 0.05 s later answering `after`; 0.5 s later
/// the lease is gone, pg2 acquires and wins (epoch 21): the plan of the step after
/// the win (`deleted + 0.8`).
fn win_after_delete_polled_after(c: &mut Core, deleted: f64, after: Option<i64>) -> Plan {
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let replica = || pg(PgRole::Replica, 1000, None);
    let mut o = obs(view(20, None, members.clone()), replica());
    o.leader_deleted_at = Some(t(deleted));
    o.lease_poll = Some(lease_poll(0xA, deleted + 0.05, after, None, false));
    let p = c.step(t(deleted + 0.1), &o);
    assert!(p.actions.is_empty(), "{:?} ({})", p.actions, p.reason);
    let mut o = obs(view(20, None, members.clone()), replica());
    o.lease_poll = Some(lease_poll(0xA, deleted + 0.55, None, None, false));
    let p = c.step(t(deleted + 0.6), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members.clone()),
        replica(),
    );
    o.acquire = won(0xB, 30, deleted + 0.65, 21);
    c.step(t(deleted + 0.7), &o);
    let o = obs(view(22, Some(key("pg2", 21, 0xB)), members), replica());
    c.step(t(deleted + 0.8), &o)
}

/// `ttl + R` (31 s) from the DELETE at `deleted`, seen 0.8 s after it.
fn delayed_from_the_delete(p: &Plan, case: &str) {
    assert!(p.actions.is_empty(), "{case}: {:?}", p.actions);
    match &p.reason {
        Reason::PromoteDelayed { remaining, .. } => assert!(
            (remaining.as_secs_f64() - 30.2).abs() < 1e-6,
            "{case}: {remaining:?}"
        ),
        other => panic!("{case}: expected PromoteDelayed, got {other}"),
    }
}

/// A DELETE is judged on the polls sent before it (DESIGN §1 step 4). pg2's polls
/// put `E_max` at 103.2 (TTL 0 there: under a second left, or expired with its
/// revoke in flight); the key is deleted at 103.5 (an operator's `etcdctl del`
/// while the revoke is in flight). The shell's next poll, sent at 103.55 before the
/// read that shows the key gone, still finds the lease: TTL 0 says nothing new,
/// and must not make the DELETE early by its own send instant (simulation seed
/// 552750413: the winner waited `ttl + R` after a lease that had expired; the
/// printed worst case missed by 4.6 s). An answer of TTL 1 there shows the lease
/// outliving the DELETE: early, `ttl + R` from it.
#[test]
fn a_poll_sent_after_the_delete_answering_ttl_0_does_not_make_it_early() {
    for (after, early) in [(Some(0), false), (Some(1), true)] {
        let mut c = follower_with_poll(None);
        let held = view(10, Some(key("pg1", 5, 0xA)), two());
        let mut o = obs(held, pg(PgRole::Replica, 1000, Some("pg1")));
        o.lease_poll = Some(lease_poll(0xA, 103.2, Some(0), None, true));
        c.step(t(103.25), &o);
        let p = win_after_delete_polled_after(&mut c, 103.5, after);
        let case = format!("TTL {after:?} after the DELETE");
        if early {
            delayed_from_the_delete(&p, &case);
        } else {
            assert_eq!(
                p.actions,
                vec![Action::Promote { epoch: 21 }],
                "{case}: {}",
                p.reason
            );
        }
    }
}

/// The other half of `judged_at` (review LOW-4): leaving out a TTL 0 answer sent
/// after the DELETE never lends the judgement its freshness. pg2's last poll before
/// the DELETE at 105.5 was at 102 (older than `L_w + R` = 3 s): early, whatever the
/// poll sent after it (TTL 0 at 105.55) says; `ttl + R` from the DELETE.
#[test]
fn a_poll_after_the_delete_does_not_freshen_a_stale_prediction() {
    let mut c = follower_with_poll(None);
    let p = win_after_delete_polled_after(&mut c, 105.5, Some(0));
    delayed_from_the_delete(&p, "stale prediction");
}

#[test]
fn early_delete_delays_promotion_by_ttl_plus_r_without_a_watchdog() {
    let mut c = follower_with_poll(None);
    // 102.5 < E_max (103): early. The delay is ttl + R = 31 s from the DELETE.
    let p = take_over(&mut c, 102.5);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    match p.reason {
        Reason::PromoteDelayed { remaining, .. } => {
            // 102.5 + 31 - 102.8
            assert!(
                (remaining.as_secs_f64() - 30.7).abs() < 1e-6,
                "{remaining:?}"
            )
        }
        other => panic!("expected PromoteDelayed, got {other}"),
    }
}

#[test]
fn early_delete_delays_promotion_by_2w_r_m_with_the_old_leaders_watchdog() {
    // The old leader publishes W = 13: delay 2W + R + M = 26 + 1 + 2 = 29 s.
    let mut c = follower_with_poll(Some(13));
    let p = take_over(&mut c, 102.5);
    match p.reason {
        Reason::PromoteDelayed { remaining, .. } => {
            assert!(
                (remaining.as_secs_f64() - 28.7).abs() < 1e-6,
                "{remaining:?}"
            )
        }
        other => panic!("expected PromoteDelayed, got {other}"),
    }
}

#[test]
fn renewal_key_lost_fences() {
    let mut c = adopted_leader(100.0);
    let mut o = obs(
        view(30, Some(key("pg3", 29, 0xC)), vec![]),
        pg(PgRole::Primary, 600, None),
    );
    o.renewal = Some(Renewal {
        lease: 0xA,
        sent_at: t(102.0),
        outcome: RenewalOutcome::KeyLost {
            found: Some(key("pg3", 29, 0xC)),
        },
    });
    let p = c.step(t(102.01), &o);
    assert_eq!(p.actions, vec![Action::Fence]);
    assert!(matches!(p.reason, Reason::Fencing(_)), "{}", p.reason);
    assert!(c.leadership().is_none());
}

#[test]
fn no_renewal_until_f_minus_b_fences() {
    // Adopted at s = 100, no watchdog: H = 100 + 30 - 2 = 128, and F the earlier
    // unwatched deadline s + ttl - (L_w + R + 1 s) = 126; F - B = 125.
    let mut c = adopted_leader(100.0);
    assert_eq!(c.horizon(), Some(t(128.0)));
    assert_eq!(c.fence_deadline(), Some(t(126.0)));
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let p = c.step(t(124.9), &obs(v.clone(), pg(PgRole::Primary, 600, None)));
    assert!(matches!(p.reason, Reason::Leading { .. }), "{}", p.reason);
    let p = c.step(t(125.0), &obs(v, pg(PgRole::Primary, 600, None)));
    assert_eq!(p.actions, vec![Action::Fence]);
    assert!(matches!(p.reason, Reason::Fencing(_)), "{}", p.reason);
}

#[test]
fn local_primary_at_start_up_with_a_key_naming_another_fences() {
    let mut c = core("pg1", None);
    let v = view(
        10,
        Some(key("pg2", 7, 0xB)),
        vec![member("pg2", 9, "primary", 900, None)],
    );
    let p = c.step(t(5.0), &obs(v, pg(PgRole::Primary, 1000, None)));
    assert_eq!(p.actions, vec![Action::Fence]);
    match p.reason {
        Reason::Fencing(why) => assert!(why.contains("S4"), "{why}"),
        other => panic!("expected Fencing, got {other}"),
    }
}

#[test]
fn key_naming_me_at_start_up_is_adopted_after_a_counted_renewal() {
    let mut c = core("pg1", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let p = c.step(t(5.0), &obs(v.clone(), pg(PgRole::Primary, 500, None)));
    assert!(p.actions.is_empty());
    assert!(
        matches!(p.reason, Reason::Waiting(ref s) if s.contains("S4")),
        "{}",
        p.reason
    );
    // Seed 9982: the lease is polled first; no renewal before that poll.
    assert!(!c.renew_now());
    assert_eq!(c.lease_to_renew(), None);
    assert_eq!(c.lease_to_poll(), Some(0xA));
    let p = c.step(
        t(5.005),
        &polled(obs(v.clone(), pg(PgRole::Primary, 500, None)), 0xA, 5.0),
    );
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(c.renew_now());
    assert_eq!(c.lease_to_renew(), Some((0xA, 5)));
    assert!(c.leadership().is_none());

    let mut o = obs(v, pg(PgRole::Primary, 500, None));
    o.renewal = counted(0xA, 5.01);
    let p = c.step(t(5.02), &o);
    assert!(
        matches!(p.reason, Reason::Other(ref s) if s.contains("adopted")),
        "{}",
        p.reason
    );
    let l = c.leadership().expect("leader after adopting");
    assert_eq!((l.lease, l.epoch, l.renewed_at), (0xA, 5, t(5.01)));
}

#[test]
fn a_better_fresh_candidate_makes_me_wait() {
    let mut c = follower_with_poll(None);
    let stale = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
        member("pg3", 9, "replica", 900, None),
    ];
    let mut o = obs(view(20, None, stale), pg(PgRole::Replica, 1000, None));
    o.leader_deleted_at = Some(t(103.5));
    o.lease_poll = Some(lease_poll(0xA, 103.55, None, None, false));
    let p = c.step(t(103.6), &o);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // pg3 publishes a fresher, better position after the vacancy was seen.
    let fresh = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 21, "replica", 1000, None),
        member("pg3", 22, "replica", 1200, None),
    ];
    let p = c.step(
        t(104.0),
        &obs(view(22, None, fresh), pg(PgRole::Replica, 1000, None)),
    );
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        matches!(p.reason, Reason::Waiting(ref s) if s.contains("pg3 is a better candidate")),
        "{}",
        p.reason
    );
    // A head start, not a veto: pg3 never takes the key (its host died right after
    // it published; its member key lives on for a member-lease TTL). Within
    // 2 (L_w + R) = 6 s of the vacancy pg1 still defers; after it, pg1 acquires
    // (simulation seed 29722 waited for the member key to expire instead).
    let fresh = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 21, "replica", 1000, None),
        member("pg3", 22, "replica", 1200, None),
    ];
    let p = c.step(
        t(109.0),
        &obs(
            view(22, None, fresh.clone()),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    let p = c.step(
        t(110.0),
        &obs(view(22, None, fresh), pg(PgRole::Replica, 1000, None)),
    );
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    assert!(
        matches!(p.reason, Reason::Acquiring(ref s) if s.contains("pg3 placed better")),
        "{}",
        p.reason
    );
}

#[test]
fn sigterm_on_a_leader_stops_then_releases_and_exits() {
    let mut c = adopted_leader(100.0);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let mut o = obs(v.clone(), pg(PgRole::Primary, 600, None));
    o.shutdown = true;
    let p = c.step(t(101.0), &o);
    assert_eq!(p.actions, vec![Action::StartJob(JobKind::Stop)]);
    assert!(matches!(p.reason, Reason::ShuttingDown(_)), "{}", p.reason);

    let mut o = obs(v.clone(), pg(PgRole::Stopped, 600, None));
    o.shutdown = true;
    o.job = Job::Finished {
        kind: JobKind::Stop,
        ok: true,
        detail: String::new(),
    };
    let p = c.step(t(101.5), &o);
    // DESIGN §1 step 4, S1: the key goes (and `released` with it) only once the
    // fail-closed fence check found no process left, orphan backends included.
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert_eq!(c.released_epoch(), None);

    let mut o = obs(v, pg(PgRole::Stopped, 600, None));
    o.shutdown = true;
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(101.6), &o);
    assert_eq!(
        p.actions,
        vec![
            Action::HandOver {
                lease: 0xA,
                epoch: 5,
                candidate: None
            },
            Action::Release {
                lease: 0xA,
                epoch: 5
            },
            Action::Exit
        ]
    );
    assert_eq!(c.released_epoch(), Some(5));
}

/// DESIGN §3a: a backend can outlive its postmaster and commit. A leader whose
/// postmaster died (probe: Stopped) while a backend lives on is told to shut down:
/// no `Release` (which publishes `released` and lets a replica skip the promote
/// delay) and no disarm until a fence reported Complete; an Incomplete one is retried.
#[test]
fn clean_shutdown_with_an_orphan_backend_releases_only_after_a_complete_fence() {
    let mut c = core("pg1", Some(10));
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    c.step(
        t(100.0),
        &polled(obs(v.clone(), pg(PgRole::Primary, 500, None)), 0xA, 100.0),
    );
    let mut o = obs(v.clone(), pg(PgRole::Primary, 500, None));
    o.renewal = counted(0xA, 100.0);
    let p = c.step(t(100.01), &o);
    assert_eq!(
        p.actions,
        vec![Action::PetWatchdog {
            not_after: t(108.0)
        }],
        "{}",
        p.reason
    );
    assert!(c.leadership().is_some());

    // The postmaster is gone (SIGKILL, OOM): the probe says Stopped; the orphan
    // backend is invisible to it.
    let stopped = || {
        let mut o = obs(v.clone(), pg(PgRole::Stopped, 600, None));
        o.shutdown = true;
        o
    };
    let p = c.step(t(101.0), &stopped());
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert!(p.again, "the check runs at once, not a loop later");
    assert!(matches!(p.reason, Reason::ShuttingDown(_)), "{}", p.reason);
    assert_eq!(c.released_epoch(), None, "nothing published yet");

    // The orphan survived this fence: still no release, no disarm; fence again.
    let mut o = stopped();
    o.fence = Some(FenceOutcome::Incomplete);
    let p = c.step(t(102.0), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert_eq!(c.released_epoch(), None);
    assert!(c.leadership().is_some(), "the key is still held");

    let mut o = stopped();
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(102.5), &o);
    assert_eq!(
        p.actions,
        vec![
            Action::DisarmWatchdog,
            Action::HandOver {
                lease: 0xA,
                epoch: 5,
                candidate: None
            },
            Action::Release {
                lease: 0xA,
                epoch: 5
            },
            Action::Exit
        ],
        "{}",
        p.reason
    );
    assert_eq!(c.released_epoch(), Some(5));
}

/// A replica's clean shutdown exits only after a complete fence check: an orphan
/// backend of its stopped PostgreSQL must not outlive the agent unnoticed.
#[test]
fn replica_shutdown_exits_only_after_a_complete_fence() {
    let mut c = follower_with_poll(None);
    let v = view(12, Some(key("pg1", 5, 0xA)), vec![]);
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1")));
    o.shutdown = true;
    let p = c.step(t(103.0), &o);
    assert_eq!(p.actions, vec![Action::StartJob(JobKind::Stop)]);

    let mut o = obs(v.clone(), pg(PgRole::Stopped, 1000, None));
    o.shutdown = true;
    o.job = Job::Finished {
        kind: JobKind::Stop,
        ok: true,
        detail: String::new(),
    };
    let p = c.step(t(104.0), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);

    let mut o = obs(v.clone(), pg(PgRole::Stopped, 1000, None));
    o.shutdown = true;
    o.fence = Some(FenceOutcome::Incomplete);
    let p = c.step(t(104.5), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);

    let mut o = obs(v, pg(PgRole::Stopped, 1000, None));
    o.shutdown = true;
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(105.0), &o);
    assert_eq!(p.actions, vec![Action::Exit], "{}", p.reason);
}

/// A replica whose data carries epoch `local` wins the key at epoch `key_epoch`
/// after etcd was wiped (DESIGN §3): returns the core, now leader, and the view.
/// An observation with a counted renewal of the wipe winner's lease (0xB) sent at `at`.
fn renewed(v: ClusterView, pg: PgStatus, at: f64) -> Observation {
    let mut o = obs(v, pg);
    o.renewal = counted(0xB, at);
    o
}

fn won_after_wipe(local: Epoch, key_epoch: Epoch) -> (Core, ClusterView) {
    let mut c = core("pg2", None);
    let mut rep = pg(PgRole::Replica, 900, None);
    rep.epoch = Some(local);
    let empty = view(4, None, vec![]);
    let _ = c.step(t(100.0), &obs(empty.clone(), rep.clone()));
    let mut o = obs(view(5, Some(key("pg2", key_epoch, 0xB)), vec![]), rep);
    o.acquire = won(0xB, 30, 101.0, key_epoch);
    let p = c.step(t(101.0), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: key_epoch });
    (c, view(6, Some(key("pg2", key_epoch, 0xB)), vec![]))
}

#[test]
fn a_node_with_data_recreates_initialize_and_never_claims_the_bootstrap() {
    let mut c = core("pg2", None);
    let mut v = view(4, None, vec![]);
    v.initialize = None;
    let p = c.step(t(100.0), &obs(v, pg(PgRole::Replica, 900, None)));
    // The rollback marker goes in the same txn: `initialize` is never deleted.
    match &p.actions[..] {
        [Action::CreateInitialize { sysid, rollback }] => {
            assert_eq!(*sysid, SYSID);
            assert_eq!(rollback.found_revision, 4);
            assert!(
                rollback.reason.contains("initialize was missing"),
                "{rollback:?}"
            );
        }
        a => panic!("{a:?}"),
    }
}

fn marker(key: &str) -> RollbackMarker {
    RollbackMarker {
        key: key.into(),
        seen_revision: 300,
        found_revision: 4,
        by: "pg1".into(),
        at: "2026-01-01T00:00:00Z".into(),
        reason: "a read's revision went from 300 back to 4".into(),
        parse_error: None,
    }
}

fn no_acquire_nor_promote(p: &Plan) {
    assert!(
        !p.actions.iter().any(|a| matches!(
            a,
            Action::Acquire | Action::Promote { .. } | Action::StartJob(JobKind::StartPrimary)
        )),
        "{:?} ({})",
        p.actions,
        p.reason
    );
}

fn refusing_with(p: &Plan, words: &[&str]) {
    match &p.reason {
        Reason::Refusing(s) => {
            for w in words {
                assert!(s.contains(w), "{w:?} not in {s}");
            }
        }
        r => panic!("not refusing: {r:?}"),
    }
}

/// The vacancy `take_over` sets up, read from a store whose revision (4) is below
/// the 10 pg2 had seen: etcd went back in time. pg2 writes the marker and never
/// acquires, until the marker has been read and then deleted by the operator.
#[test]
fn revision_going_back_writes_the_marker_and_refuses_the_key_until_confirmed() {
    let mut c = follower_with_poll(None);
    let members = vec![
        member("pg1", 3, "replica", 1000, None),
        member("pg2", 4, "replica", 1000, None),
    ];
    let mut o = obs(
        view(4, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.5));
    o.lease_poll = Some(lease_poll(0xA, 103.55, None, None, false));
    let p = c.step(t(103.6), &o);
    no_acquire_nor_promote(&p);
    refusing_with(&p, &["went from 10 back to 4", "confirm-epoch"]);
    assert_eq!(
        p.actions.last(),
        Some(&Action::MarkRollback(RollbackSeen {
            seen_revision: 10,
            found_revision: 4,
            reason: "a read's revision went from 10 back to 4".into(),
        }))
    );
    // Not read back yet (the write failed): written again, still refusing. The new
    // store's revisions are the reference now: 5 is no second rollback.
    let p = c.step(
        t(110.0),
        &obs(
            view(5, None, members.clone()),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    no_acquire_nor_promote(&p);
    assert!(matches!(p.actions.last(), Some(Action::MarkRollback(s)) if s.found_revision == 4));
    // The marker is in etcd: it governs (and is not written again).
    let mut v = view(6, None, members.clone());
    v.rollback = Some(marker("/service/s/rollback"));
    let p = c.step(t(111.0), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let mut v = view(6, None, members.clone());
    v.rollback = Some(marker("/service/s/rollback"));
    for at in [112.0, 140.0, 400.0] {
        let p = c.step(t(at), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
        no_acquire_nor_promote(&p);
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        refusing_with(
            &p,
            &["/service/s/rollback", "tenure confirm-epoch", "by pg1"],
        );
    }
    // The operator confirmed: the marker is gone, pg2 is a candidate again.
    let p = c.step(
        t(401.0),
        &obs(view(8, None, members), pg(PgRole::Replica, 1000, None)),
    );
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
}

/// A restore (even one that bumps revisions forward) brings back member keys older
/// than what was read before: a rollback, though the read's revision is higher.
#[test]
fn a_member_key_going_back_is_a_rollback_even_when_the_revision_passed() {
    let mut c = follower_with_poll(None);
    let members = vec![
        member("pg1", 5, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let p = c.step(
        t(103.0),
        &obs(
            view(500, Some(key("pg1", 5, 0xA)), members),
            pg(PgRole::Replica, 1000, Some("pg1")),
        ),
    );
    match p.actions.last() {
        Some(Action::MarkRollback(s)) => {
            assert!(s.reason.contains("members/pg1"), "{s:?}");
            assert_eq!((s.seen_revision, s.found_revision), (10, 500));
        }
        a => panic!("{a:?}"),
    }
}

/// A rollback seen in the read that also shows another node's marker is still
/// reported once (the shell logs it), then the marker governs.
#[test]
fn a_rollback_seen_next_to_a_marker_is_reported_once() {
    let mut c = follower_with_poll(None);
    let mut v = view(4, None, vec![]);
    v.rollback = Some(marker("/service/s/rollback"));
    let p = c.step(t(103.0), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
    assert!(matches!(p.actions.last(), Some(Action::MarkRollback(s)) if s.seen_revision == 10));
    refusing_with(&p, &["/service/s/rollback"]);
    let p = c.step(t(104.0), &obs(v, pg(PgRole::Replica, 1000, None)));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

/// No false alarms: a read without a header revision (0) says nothing, and a
/// member key re-created at a higher revision is not a rollback.
#[test]
fn no_rollback_without_a_revision_going_back() {
    let mut c = follower_with_poll(None);
    let members = vec![member("pg1", 11, "primary", 1000, None)];
    for (at, rev) in [(103.0, 0), (104.0, 12), (105.0, 12)] {
        let p = c.step(
            t(at),
            &obs(
                view(rev, Some(key("pg1", 5, 0xA)), members.clone()),
                pg(PgRole::Replica, 1000, Some("pg1")),
            ),
        );
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::MarkRollback(_))),
            "{:?}",
            p.actions
        );
    }
}

/// A node that was not running when etcd went back (it remembers nothing) honours
/// the marker others wrote, garbled or not.
#[test]
fn a_fresh_node_honours_a_marker_it_did_not_write() {
    let mut garbled = marker("/service/s/rollback");
    garbled.parse_error = Some("not JSON".into());
    for m in [marker("/service/s/rollback"), garbled] {
        let mut c = core("pg3", None);
        let mut v = view(40, None, vec![member("pg3", 39, "replica", 1000, None)]);
        v.rollback = Some(m.clone());
        let mut rep = pg(PgRole::Replica, 1000, None);
        rep.epoch = Some(7);
        for at in [100.0, 110.0, 200.0] {
            let p = c.step(t(at), &obs(v.clone(), rep.clone()));
            no_acquire_nor_promote(&p);
            refusing_with(
                &p,
                &[
                    "/service/s/rollback",
                    "confirm-epoch",
                    "data carries epoch 7",
                ],
            );
            if m.parse_error.is_some() {
                refusing_with(&p, &["does not parse"]);
            }
        }
        v.rollback = None;
        let p = c.step(t(201.0), &obs(v, rep));
        assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    }
}

/// The gap the marker closes: the key was taken after the new store's revisions
/// passed the data's epoch (60 > 50), so the epoch comparison sees nothing; the
/// marker alone keeps the holder from promoting until it is deleted.
#[test]
fn a_holder_under_the_marker_keeps_the_key_and_does_not_promote() {
    let (mut c, mut v) = won_after_wipe(50, 60);
    v.rollback = Some(marker("/service/s/rollback"));
    let mut rep = pg(PgRole::Replica, 900, None);
    rep.epoch = Some(50);
    for i in 0..3 {
        let at = 140.0 + 10.0 * f64::from(i);
        let p = c.step(t(at), &renewed(v.clone(), rep.clone(), at));
        no_acquire_nor_promote(&p);
        refusing_with(&p, &["/service/s/rollback", "confirm-epoch"]);
        assert!(c.leadership().is_some(), "keeps the key");
    }
    // Stopped meanwhile: restarted as a standby, never as primary.
    let stopped = pg(PgRole::Stopped, 900, None);
    let p = c.step(t(175.0), &renewed(v.clone(), stopped, 175.0));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::StartReplica {
            leader: String::new()
        })]
    );
    v.rollback = None;
    let p = c.step(t(180.0), &renewed(v, rep, 180.0));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 60 }],
        "{}",
        p.reason
    );
}

/// A primary already running under a key etcd still confirms (a restore that kept
/// its key and lease) is not promoting: it keeps leading; the marker stops failovers.
#[test]
fn a_running_primary_keeps_leading_under_the_marker() {
    let mut c = adopted_leader(100.0);
    let mut v = view(11, Some(key("pg1", 5, 0xA)), vec![]);
    v.rollback = Some(marker("/service/s/rollback"));
    let mut o = obs(v, pg(PgRole::Primary, 500, None));
    o.renewal = counted(0xA, 101.0);
    let p = c.step(t(101.01), &o);
    assert!(matches!(p.reason, Reason::Leading { .. }), "{}", p.reason);
    assert!(!p.actions.contains(&Action::Fence));
}

#[test]
fn epoch_regression_refuses_to_promote_and_keeps_the_key() {
    let (mut c, v) = won_after_wipe(50, 3);
    let mut rep = pg(PgRole::Replica, 900, None);
    rep.epoch = Some(50);
    for i in 0..5 {
        let at = 102.0 + 10.0 * f64::from(i);
        let p = c.step(t(at), &renewed(v.clone(), rep.clone(), at));
        assert!(
            !p.actions.iter().any(|a| matches!(
                a,
                Action::Promote { .. } | Action::Release { .. } | Action::Revoke { .. }
            )),
            "{:?}",
            p.actions
        );
        match &p.reason {
            Reason::Refusing(s) => {
                assert!(s.contains("epoch 50") && s.contains("is 3") && s.contains("confirm-epoch"))
            }
            r => panic!("{r:?}"),
        }
        assert!(c.leadership().is_some(), "keeps the key");
    }
    assert_eq!(c.epoch_to_write(&rep), None);
}

#[test]
fn a_confirmation_below_the_local_epoch_does_not_lift_the_refusal() {
    let (mut c, mut v) = won_after_wipe(50, 3);
    v.confirm_epoch = Some(ConfirmEpoch {
        up_to: 49,
        by: "op".into(),
        at: String::new(),
    });
    let mut rep = pg(PgRole::Replica, 900, None);
    rep.epoch = Some(50);
    let p = c.step(t(140.0), &renewed(v, rep, 140.0));
    assert!(matches!(p.reason, Reason::Refusing(_)), "{:?}", p.reason);
}

#[test]
fn confirmed_regression_promotes_and_the_smaller_epoch_is_written() {
    let (mut c, mut v) = won_after_wipe(50, 3);
    v.confirm_epoch = Some(ConfirmEpoch {
        up_to: 50,
        by: "op".into(),
        at: String::new(),
    });
    let mut rep = pg(PgRole::Replica, 900, None);
    rep.epoch = Some(50);
    let p = c.step(t(140.0), &renewed(v.clone(), rep, 140.0));
    assert_eq!(p.actions, vec![Action::Promote { epoch: 3 }]);
    let mut prim = pg(PgRole::Primary, 1000, None);
    prim.epoch = Some(50);
    let mut o = renewed(v.clone(), prim.clone(), 141.0);
    o.promoted = Some(true);
    let p = c.step(t(141.0), &o);
    assert!(matches!(p.reason, Reason::Leading { .. }), "{:?}", p.reason);
    assert_eq!(c.epoch_to_write(&prim), Some(3));
    // Once the row says 3 the regression is gone, confirmation or not. (The row
    // names its writer and lease too: until it does it is written again.)
    prim.epoch = Some(3);
    assert_eq!(c.epoch_to_write(&prim), Some(3));
    prim.epoch_row.member = Some("pg2".into());
    prim.epoch_row.lease = Some(0xB);
    v.confirm_epoch = None;
    let p = c.step(t(142.0), &renewed(v, prim.clone(), 142.0));
    assert!(matches!(p.reason, Reason::Leading { .. }), "{:?}", p.reason);
    assert_eq!(c.epoch_to_write(&prim), None);
}

#[test]
fn no_regression_when_the_key_epoch_is_higher() {
    let (mut c, v) = won_after_wipe(50, 60);
    let mut rep = pg(PgRole::Replica, 900, None);
    rep.epoch = Some(50);
    let p = c.step(t(140.0), &renewed(v, rep, 140.0));
    assert_eq!(p.actions, vec![Action::Promote { epoch: 60 }]);
}

#[test]
fn an_adopted_primary_whose_data_is_ahead_of_the_key_is_fenced_but_keeps_the_key() {
    let mut c = core("pg1", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let mut prim = pg(PgRole::Primary, 500, None);
    prim.epoch = Some(50);
    c.step(t(100.0), &polled(obs(v.clone(), prim.clone()), 0xA, 100.0));
    let mut o = obs(v.clone(), prim.clone());
    o.renewal = counted(0xA, 100.0);
    c.step(t(100.01), &o);
    assert!(c.leadership().is_some());
    assert_eq!(c.epoch_to_write(&prim), None);
    let p = c.step(t(100.02), &obs(v.clone(), prim));
    assert_eq!(p.actions, vec![Action::Fence]);
    assert!(matches!(p.reason, Reason::Refusing(_)), "{:?}", p.reason);
    // Stopped now: restarted as a standby (never as primary), still holding the key.
    let mut stopped = pg(PgRole::Stopped, 500, None);
    stopped.epoch = None;
    let p = c.step(t(100.03), &obs(v, stopped));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::StartReplica {
            leader: String::new()
        })]
    );
    assert!(c.leadership().is_some());
}

// ---------------------------------------------------------------------------
// Synchronous mode (DESIGN §3a): the order of the `sync` key and the names.
// ---------------------------------------------------------------------------

fn sync_timing(mode: SyncMode) -> Timing {
    Timing {
        synchronous: mode,
        synchronous_node_count: 1,
        maximum_lag_on_syncnode: None,
        ..timing30()
    }
}

fn sync_key(leader: &str, standby: Option<&str>) -> Option<Result<SyncKey, String>> {
    Some(Ok(SyncKey {
        leader: leader.into(),
        sync_standbys: standby.map(String::from).into_iter().collect(),
    }))
}

fn standby(name: &str, streaming: bool, sync: bool, flush: Lsn) -> StandbyStat {
    StandbyStat {
        name: name.into(),
        streaming,
        sync,
        flush,
    }
}

/// pg1 leads (adopted, epoch 5) with replicas pg2 and pg3 as members; `mode` is on.
fn sync_leader(mode: SyncMode) -> Core {
    let mut c = adopted_leader(5.0);
    c.set_timing(t(5.0), sync_timing(mode));
    c
}

/// A leader observation: the key still ours, a counted renewal, the sync key, the
/// names in effect and `pg_stat_replication`.
fn leader_obs(
    sync: Option<Result<SyncKey, String>>,
    names: &str,
    standbys: Vec<StandbyStat>,
    at: f64,
) -> Observation {
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
        member("pg3", 9, "replica", 1000, None),
    ];
    let mut v = view(30, Some(key("pg1", 5, 0xA)), members);
    v.sync = sync;
    let mut p = pg(PgRole::Primary, 1000, None);
    p.sync_names = Some(names.into());
    p.standbys = standbys;
    let mut o = obs(v, p);
    o.renewal = counted(0xA, at);
    o
}

fn write_sync(standby: Option<&str>) -> Action {
    Action::WriteSync {
        epoch: 5,
        leader: "pg1".into(),
        sync_standbys: standby.map(String::from).into_iter().collect(),
    }
}

fn names(n: &str) -> Action {
    Action::SetSyncNames { names: n.into() }
}

#[test]
fn sync_mode_leader_writes_the_key_naming_itself_before_anything_else() {
    let mut c = sync_leader(SyncMode::On);
    let o = leader_obs(None, "", vec![standby("pg2", true, false, 900)], 6.0);
    let p = c.step(t(6.0), &o);
    assert_eq!(sync_actions(&p), vec![write_sync(None)], "{}", p.reason);
    // A key another writer garbled is rewritten the same way.
    let o = leader_obs(Some(Err("not JSON".into())), "", vec![], 7.0);
    let p = c.step(t(7.0), &o);
    assert_eq!(sync_actions(&p), vec![write_sync(None)], "{}", p.reason);
}

#[test]
fn a_standby_is_listed_only_after_the_names_hold_it_and_it_is_sync() {
    let mut c = sync_leader(SyncMode::On);
    // Listed nobody; pg2 streams (flushed more than pg3): the names come first.
    let st = vec![
        standby("pg2", true, false, 900),
        standby("pg3", true, false, 800),
    ];
    let p = c.step(t(6.0), &leader_obs(sync_key("pg1", None), "", st, 6.0));
    assert_eq!(sync_actions(&p), vec![names("\"pg2\"")], "{}", p.reason);
    // Names in effect but pg2 not yet reported sync: wait, never list it.
    let st = vec![standby("pg2", true, false, 900)];
    let o = leader_obs(sync_key("pg1", None), "\"pg2\"", st, 8.0);
    let p = c.step(t(8.0), &o);
    assert_eq!(sync_actions(&p), vec![], "{}", p.reason);
    // Reported sync, but the names were seen for less than a loop: still wait.
    // (It flushed all the primary wrote, 1000: the catch-up rule is tested below.)
    let st = vec![standby("pg2", true, true, 1000)];
    let o = leader_obs(sync_key("pg1", None), "\"pg2\"", st.clone(), 9.0);
    let p = c.step(t(9.0), &o);
    assert_eq!(sync_actions(&p), vec![], "{}", p.reason);
    // A loop later: list it.
    let o = leader_obs(sync_key("pg1", None), "\"pg2\"", st.clone(), 10.5);
    let p = c.step(t(10.5), &o);
    assert_eq!(
        sync_actions(&p),
        vec![write_sync(Some("pg2"))],
        "{}",
        p.reason
    );
    // Listed and in effect: steady, nothing to do.
    let o = leader_obs(sync_key("pg1", Some("pg2")), "\"pg2\"", st, 11.0);
    let p = c.step(t(11.0), &o);
    assert_eq!(sync_actions(&p), vec![], "{}", p.reason);
    assert!(
        p.reason.to_string().contains("synchronous standby pg2"),
        "{}",
        p.reason
    );
}

/// `leader_obs` with the primary at WAL position `lsn`.
fn leader_obs_at(
    sync: Option<Result<SyncKey, String>>,
    names: &str,
    standbys: Vec<StandbyStat>,
    lsn: Lsn,
    at: f64,
) -> Observation {
    let mut o = leader_obs(sync, names, standbys, at);
    o.pg.lsn = lsn;
    o
}

/// Issue 8, finding 10: commits acknowledged through the old synchronous standby
/// (here pg2, until it is lost) may be missing on the new one (pg3) though it
/// reports `sync`: the key names pg3 only once its flush reached the primary's
/// position when the new names took effect, so a primary lost right after the
/// switch cannot leave only a standby without them allowed to take over.
#[test]
fn a_switched_standby_is_listed_only_once_it_flushed_what_was_acknowledged_before() {
    for mode in [SyncMode::On, SyncMode::Strict] {
        let mut c = sync_leader(mode);
        let key_pg2 = || sync_key("pg1", Some("pg2"));
        let key_none = || sync_key("pg1", None);
        // pg2, the synchronous standby, is gone: unlisted first.
        let st = vec![standby("pg3", true, false, 0x0200_0000)];
        let o = leader_obs_at(key_pg2(), "\"pg2\"", st.clone(), 0x0300_0000, 6.0);
        let p = c.step(t(6.0), &o);
        assert_eq!(
            sync_actions(&p),
            vec![write_sync(None)],
            "{mode:?}: {}",
            p.reason
        );
        // The key lists nobody: the names switch to pg3.
        let o = leader_obs_at(key_none(), "\"pg2\"", st, 0x0300_0010, 7.0);
        let p = c.step(t(7.0), &o);
        assert_eq!(
            sync_actions(&p),
            vec![names("\"pg3\"")],
            "{mode:?}: {}",
            p.reason
        );
        // The names read pg3 and pg3 reports sync, but they held less than a loop.
        let st = vec![standby("pg3", true, true, 0x0200_0000)];
        let o = leader_obs_at(key_none(), "\"pg3\"", st.clone(), 0x0300_0020, 8.0);
        let p = c.step(t(8.0), &o);
        assert_eq!(sync_actions(&p), vec![], "{mode:?}: {}", p.reason);
        // Settled: the primary wrote up to 0/3000060, pg3 flushed only 0/2000000:
        // the key must not name it; the reason says what is awaited.
        let o = leader_obs_at(key_none(), "\"pg3\"", st, 0x0300_0060, 10.5);
        let p = c.step(t(10.5), &o);
        assert_eq!(sync_actions(&p), vec![], "{mode:?}: {}", p.reason);
        assert!(
            p.reason
                .to_string()
                .contains("waiting for pg3 to flush to 0/3000060 before naming it synchronous"),
            "{mode:?}: {}",
            p.reason
        );
        // A flush that did not parse (read as 0) is never caught up.
        let st = vec![standby("pg3", true, true, 0)];
        let o = leader_obs_at(key_none(), "\"pg3\"", st, 0x0400_0000, 11.0);
        let p = c.step(t(11.0), &o);
        assert_eq!(sync_actions(&p), vec![], "{mode:?}: {}", p.reason);
        // Just short of the target, with the primary further on: still not.
        let st = vec![standby("pg3", true, true, 0x0300_005F)];
        let o = leader_obs_at(key_none(), "\"pg3\"", st, 0x0500_0000, 12.0);
        let p = c.step(t(12.0), &o);
        assert_eq!(sync_actions(&p), vec![], "{mode:?}: {}", p.reason);
        // At the target (the primary has moved on; the target has not): listed.
        let st = vec![standby("pg3", true, true, 0x0300_0060)];
        let o = leader_obs_at(key_none(), "\"pg3\"", st, 0x0600_0000, 13.0);
        let p = c.step(t(13.0), &o);
        assert_eq!(
            sync_actions(&p),
            vec![write_sync(Some("pg3"))],
            "{mode:?}: {}",
            p.reason
        );
    }
}

#[test]
fn a_lost_standby_is_unlisted_before_the_names_drop_it_and_a_failed_write_never_degrades() {
    for (mode, empty) in [(SyncMode::On, ""), (SyncMode::Strict, "*")] {
        let mut c = sync_leader(mode);
        // pg2 is listed but no longer streams: the key changes first, the names not.
        let o = leader_obs(sync_key("pg1", Some("pg2")), "\"pg2\"", vec![], 6.0);
        let p = c.step(t(6.0), &o);
        assert_eq!(
            sync_actions(&p),
            vec![write_sync(None)],
            "{mode:?}: {}",
            p.reason
        );
        // The write failed (the key still lists pg2): try again, keep the names.
        let o = leader_obs(sync_key("pg1", Some("pg2")), "\"pg2\"", vec![], 7.0);
        let p = c.step(t(7.0), &o);
        assert_eq!(
            sync_actions(&p),
            vec![write_sync(None)],
            "{mode:?}: {}",
            p.reason
        );
        // The key lists nobody now: the names follow.
        let o = leader_obs(sync_key("pg1", None), "\"pg2\"", vec![], 8.0);
        let p = c.step(t(8.0), &o);
        assert_eq!(
            sync_actions(&p),
            vec![names(empty)],
            "{mode:?}: {}",
            p.reason
        );
        let o = leader_obs(sync_key("pg1", None), empty, vec![], 9.0);
        let p = c.step(t(9.0), &o);
        assert_eq!(sync_actions(&p), vec![], "{mode:?}: {}", p.reason);
        let said = p.reason.to_string();
        match mode {
            SyncMode::Strict => assert!(said.contains("commits wait"), "{said}"),
            _ => assert!(said.contains("degraded to asynchronous"), "{said}"),
        }
    }
}

#[test]
fn a_standby_tagged_nofailover_or_unknown_is_never_made_synchronous() {
    let mut c = sync_leader(SyncMode::On);
    let mut o = leader_obs(
        sync_key("pg1", None),
        "",
        vec![
            standby("pg2", true, false, 900),
            standby("pg_basebackup", true, false, 950),
        ],
        6.0,
    );
    if let Ok(v) = &mut o.cluster {
        for m in &mut v.members {
            if m.name == "pg2" {
                m.info.tags.nofailover = true;
            }
        }
    }
    let p = c.step(t(6.0), &o);
    assert_eq!(sync_actions(&p), vec![], "{}", p.reason);
}

#[test]
fn turning_synchronous_mode_off_deletes_the_key_then_clears_the_names() {
    let mut c = sync_leader(SyncMode::Off);
    let o = leader_obs(sync_key("pg1", Some("pg2")), "\"pg2\"", vec![], 6.0);
    let p = c.step(t(6.0), &o);
    assert_eq!(
        sync_actions(&p),
        vec![Action::DeleteSync { epoch: 5 }],
        "{}",
        p.reason
    );
    let o = leader_obs(None, "\"pg2\"", vec![], 7.0);
    let p = c.step(t(7.0), &o);
    assert_eq!(sync_actions(&p), vec![names("")], "{}", p.reason);
    let o = leader_obs(None, "", vec![], 8.0);
    let p = c.step(t(8.0), &o);
    assert_eq!(sync_actions(&p), vec![], "{}", p.reason);
    assert!(matches!(p.reason, Reason::Leading { .. }), "{}", p.reason);
}

#[test]
fn a_refused_guard_fences_at_once() {
    let mut c = sync_leader(SyncMode::On);
    let mut o = leader_obs(sync_key("pg1", None), "", vec![], 6.0);
    o.guard_refused = Some("the sync key write".into());
    let p = c.step(t(6.0), &o);
    assert!(p.actions.contains(&Action::Fence), "{:?}", p.actions);
    assert!(
        matches!(p.reason, Reason::Fencing(ref s) if s.contains("epoch guard refused")),
        "{}",
        p.reason
    );
}

/// A follower of pg1 (sync mode `mode`) sees the key deleted and the lease gone,
/// with members pg1 (old primary), pg2 and pg3 at the given positions, all fresh.
fn vacancy_step(
    me: &str,
    my_lsn: Lsn,
    sync: Option<Result<SyncKey, String>>,
    pg3_lsn: Lsn,
) -> Plan {
    let mut c = core(me, None);
    c.set_timing(t(0.0), sync_timing(SyncMode::On));
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
        member("pg3", 9, "replica", pg3_lsn, None),
    ];
    let mut v = view(10, Some(key("pg1", 5, 0xA)), members);
    v.sync = sync.clone();
    let _ = c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, my_lsn, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, my_lsn, Some("pg1")));
    o.lease_poll = Some(lease_poll(0xA, 102.0, Some(1), None, true));
    c.step(t(102.01), &o);
    // Fresh positions, published after the vacancy (revision 20) was seen.
    let fresh = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 21, "replica", 1000, None),
        member("pg3", 22, "replica", pg3_lsn, None),
    ];
    let mut v = view(20, None, fresh);
    v.sync = sync;
    let mut o = obs(v, pg(PgRole::Replica, my_lsn, None));
    o.leader_deleted_at = Some(t(103.5));
    o.lease_poll = Some(lease_poll(0xA, 103.55, None, None, false));
    let _ = c.step(t(103.6), &o);
    let mut v2 = o.cluster.clone().expect("view");
    v2.revision = 23;
    let o2 = obs(v2, pg(PgRole::Replica, my_lsn, None));
    c.step(t(106.0), &o2)
}

#[test]
fn in_synchronous_mode_only_the_listed_standby_or_the_old_leader_may_take_the_key() {
    // pg3 is further ahead but asynchronous: it may not take the key ...
    let p = vacancy_step("pg3", 1200, sync_key("pg1", Some("pg2")), 1200);
    assert!(!p.actions.contains(&Action::Acquire), "{}", p.reason);
    assert!(
        p.reason.to_string().contains("synchronous mode"),
        "{}",
        p.reason
    );
    // ... and it is no rival to the synchronous standby, which takes it.
    let p = vacancy_step("pg2", 1000, sync_key("pg1", Some("pg2")), 1200);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    // A degraded key (no standby listed) allows only the old leader.
    let p = vacancy_step("pg2", 1000, sync_key("pg1", None), 900);
    assert!(!p.actions.contains(&Action::Acquire), "{}", p.reason);
    // A garbled key allows nobody.
    let p = vacancy_step("pg2", 1000, Some(Err("not JSON".into())), 900);
    assert!(!p.actions.contains(&Action::Acquire), "{}", p.reason);
    // No key at all: no leader ever listed a standby; asynchronous rules.
    let p = vacancy_step("pg2", 1000, None, 900);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
}

#[test]
fn a_synchronous_winner_names_itself_in_the_key_and_sets_the_names_before_promoting() {
    for (mode, want) in [(SyncMode::On, ""), (SyncMode::Strict, "*")] {
        let mut c = follower_with_poll(None);
        c.set_timing(t(0.0), sync_timing(mode));
        let members = vec![
            member("pg1", 8, "primary", 1000, None),
            member("pg2", 9, "replica", 1000, None),
        ];
        let with_sync = |rev: i64, leader: Option<LeaderKey>, s| {
            let mut v = view(rev, leader, members.clone());
            v.sync = s;
            v
        };
        let old = sync_key("pg1", Some("pg2"));
        let mut rep = pg(PgRole::Replica, 1000, None);
        rep.sync_names = Some("\"pg2\"".into());
        let mut o = obs(with_sync(20, None, old.clone()), rep.clone());
        o.leader_deleted_at = Some(t(103.5));
        o.lease_poll = Some(lease_poll(0xA, 103.55, None, None, false));
        let p = c.step(t(103.6), &o);
        assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
        let mut o = obs(
            with_sync(21, Some(key("pg2", 21, 0xB)), old.clone()),
            rep.clone(),
        );
        o.acquire = won(0xB, 30, 103.7, 21);
        c.step(t(103.8), &o);
        // The old key names pg1: rewrite it naming me, no promotion yet.
        let mine = Some(key("pg2", 21, 0xB));
        let p = c.step(
            t(104.0),
            &obs(with_sync(22, mine.clone(), old.clone()), rep.clone()),
        );
        let w = Action::WriteSync {
            epoch: 21,
            leader: "pg2".into(),
            sync_standbys: Vec::new(),
        };
        assert_eq!(p.actions, vec![w], "{mode:?}: {}", p.reason);
        // Key names me: the names next (stale "pg2" from following).
        let me_key = sync_key("pg2", None);
        let p = c.step(
            t(104.1),
            &obs(with_sync(23, mine.clone(), me_key.clone()), rep.clone()),
        );
        assert_eq!(p.actions, vec![names(want)], "{mode:?}: {}", p.reason);
        // Names in effect, but not yet for a loop.
        rep.sync_names = Some(want.into());
        let p = c.step(
            t(104.2),
            &obs(with_sync(24, mine.clone(), me_key.clone()), rep.clone()),
        );
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::Promote { .. })),
            "{}",
            p.reason
        );
        let p = c.step(t(106.5), &obs(with_sync(25, mine, me_key), rep.clone()));
        assert!(
            p.actions.contains(&Action::Promote { epoch: 21 }),
            "{mode:?}: {}",
            p.reason
        );
    }
}

/// A synchronous winner that must wait a promote delay sets the names its first
/// write needs while the delay runs, so they have held for a loop at its end, and
/// writes the `sync` key only then: after the delay the names cost up to two loops
/// past the printed worst case (simulation seed 920018050); a key rewritten early
/// would leave, if the winner died inside the delay, a key only it may take over
/// under (the old one still allows the old leader).
#[test]
fn a_delayed_synchronous_winner_sets_the_names_during_the_delay_and_the_key_after() {
    let mut c = follower_with_poll(None);
    c.set_timing(t(0.0), sync_timing(SyncMode::On));
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let at = |rev: i64, s: Option<Result<SyncKey, String>>| {
        let mut v = view(rev, Some(key("pg2", 21, 0xB)), members.clone());
        v.sync = s;
        v
    };
    let old = sync_key("pg1", Some("pg2"));
    let mut rep = pg(PgRole::Replica, 1000, None);
    rep.sync_names = Some("\"pg2\"".into());
    // 102.5 < E_max (103): early, the delay runs to 102.5 + ttl + R = 133.5.
    let mut v = view(20, None, members.clone());
    v.sync = old.clone();
    let mut o = obs(v, rep.clone());
    o.leader_deleted_at = Some(t(102.5));
    o.lease_poll = Some(lease_poll(0xA, 102.55, None, None, false));
    let p = c.step(t(102.6), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(at(21, old.clone()), rep.clone());
    o.acquire = won(0xB, 30, 102.65, 21);
    c.step(t(102.7), &o);
    let delayed = |p: &Plan| matches!(p.reason, Reason::PromoteDelayed { .. });
    // In the delay: the names, not the key.
    let p = c.step(t(102.8), &obs(at(22, old.clone()), rep.clone()));
    assert!(delayed(&p), "{}", p.reason);
    assert_eq!(sync_actions(&p), vec![names("")], "{}", p.reason);
    rep.sync_names = Some(String::new());
    let p = c.step(t(103.0), &obs(at(23, old.clone()), rep.clone()));
    assert!(delayed(&p) && sync_actions(&p).is_empty(), "{}", p.reason);
    // The delay's end: the key, read back at once, then the promotion.
    let mut o = obs(at(24, old), rep.clone());
    o.renewal = counted(0xB, 133.5);
    let p = c.step(t(133.6), &o);
    assert_eq!(
        sync_actions(&p),
        vec![Action::WriteSync {
            epoch: 21,
            leader: "pg2".into(),
            sync_standbys: Vec::new(),
        }],
        "{}",
        p.reason
    );
    assert!(p.again, "the key is read back at once");
    let mut o = obs(at(25, sync_key("pg2", None)), rep);
    o.renewal = counted(0xB, 133.5);
    let p = c.step(t(133.65), &o);
    assert!(
        p.actions.contains(&Action::Promote { epoch: 21 }),
        "{}",
        p.reason
    );
}

/// Review L1: with synchronous mode off, a winner that finds a `sync` key left
/// from synchronous mode deletes it before its names are cleared and before it
/// promotes (a key still listing standbys after commits stopped waiting for them
/// would be trusted if the mode came back on).
#[test]
fn with_synchronous_mode_off_a_winner_deletes_a_left_sync_key_first() {
    let mut c = follower_with_poll(None);
    c.set_timing(t(0.0), sync_timing(SyncMode::Off));
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let with_sync = |rev: i64, leader: Option<LeaderKey>, s| {
        let mut v = view(rev, leader, members.clone());
        v.sync = s;
        v
    };
    let left = sync_key("pg2", Some("pg3"));
    let mut rep = pg(PgRole::Replica, 1000, None);
    rep.sync_names = Some("\"pg3\"".into());
    let mut o = obs(with_sync(20, None, left.clone()), rep.clone());
    o.leader_deleted_at = Some(t(103.5));
    o.lease_poll = Some(lease_poll(0xA, 103.55, None, None, false));
    let p = c.step(t(103.6), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mine = Some(key("pg2", 21, 0xB));
    let mut o = obs(with_sync(21, mine.clone(), left.clone()), rep.clone());
    o.acquire = won(0xB, 30, 103.7, 21);
    c.step(t(103.8), &o);
    let p = c.step(
        t(104.0),
        &obs(with_sync(22, mine.clone(), left), rep.clone()),
    );
    assert_eq!(
        sync_actions(&p),
        vec![Action::DeleteSync { epoch: 21 }],
        "{}",
        p.reason
    );
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. })),
        "{}",
        p.reason
    );
    // The key is gone: the stale names are cleared next, then it promotes.
    let p = c.step(
        t(104.1),
        &obs(with_sync(23, mine.clone(), None), rep.clone()),
    );
    assert_eq!(sync_actions(&p), vec![names("")], "{}", p.reason);
    rep.sync_names = Some(String::new());
    let p = c.step(t(104.2), &obs(with_sync(24, mine, None), rep));
    assert!(
        p.actions.contains(&Action::Promote { epoch: 21 }),
        "{}",
        p.reason
    );
}

/// pg3 follows pg2, the new leader on timeline 2 (history: timeline 1 ended at
/// 1200). pg3 is still on timeline 1 at `lsn`, `streaming` or not, at `at`.
fn third_node_obs(lsn: Lsn, streaming: bool) -> Observation {
    let mut leader = member("pg2", 30, "primary", 2000, None);
    leader.info.timeline = 2;
    leader.info.pg_healthy = true;
    let mut v = view(
        31,
        Some(key("pg2", 21, 0xB)),
        vec![leader, member("pg3", 30, "replica", lsn, None)],
    );
    v.history = vec![HistoryEntry {
        timeline: 1,
        lsn: 1200,
        reason: "no leader".into(),
        timestamp: String::new(),
        new_leader: "pg2".into(),
    }];
    let mut r = pg(PgRole::Replica, lsn, Some("pg2"));
    r.streaming = streaming;
    obs(v, r)
}

#[test]
fn a_replica_whose_wal_forked_off_the_new_timeline_stops_and_rewinds() {
    let mut c = core("pg3", None);
    // Streaming: never judged diverged, whatever its position.
    let p = c.step(t(100.0), &third_node_obs(1500, true));
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    // Not streaming and past the switch point: stop, then rewind.
    let p = c.step(t(101.0), &third_node_obs(1500, false));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::Stop)],
        "{}",
        p.reason
    );
    assert!(
        p.reason.to_string().contains("switch point"),
        "{}",
        p.reason
    );
    let mut o = third_node_obs(1500, false);
    o.pg.role = PgRole::Stopped;
    let p = c.step(t(102.0), &o);
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::Rewind { from: "pg2".into() })],
        "{}",
        p.reason
    );
}

#[test]
fn a_replica_behind_the_switch_point_waits_a_ttl_before_rewinding() {
    let mut c = core("pg3", None);
    // Before the switch point and not streaming (reconnecting after a retarget):
    // nothing for a lease TTL (30 s here), then a rewind.
    let p = c.step(t(100.0), &third_node_obs(1100, false));
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    let p = c.step(t(120.0), &third_node_obs(1100, false));
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    // Streaming again resets the clock.
    let _ = c.step(t(125.0), &third_node_obs(1100, true));
    let p = c.step(t(140.0), &third_node_obs(1100, false));
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    let p = c.step(t(170.5), &third_node_obs(1100, false));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::Stop)],
        "{}",
        p.reason
    );
}

#[test]
fn an_unreachable_rewind_source_is_retried_but_a_failed_rewind_counts() {
    let mut c = core("pg3", None);
    let _ = c.step(t(100.0), &third_node_obs(1500, false));
    let stopped = |job: Job| {
        let mut o = third_node_obs(1500, false);
        o.pg.role = PgRole::Stopped;
        o.job = job;
        o
    };
    let rewind = Action::StartJob(JobKind::Rewind { from: "pg2".into() });
    let failed = |detail: String| Job::Finished {
        kind: JobKind::Rewind { from: "pg2".into() },
        ok: false,
        detail,
    };
    // The source did not answer (a partition): retried, however often.
    for i in 0..5 {
        let detail = format!("{REWIND_SOURCE_STEP} failed (exit status: 2): timeout");
        let p = c.step(t(101.0 + f64::from(i)), &stopped(failed(detail)));
        assert_eq!(p.actions, vec![rewind.clone()], "{}", p.reason);
    }
    // pg_rewind itself failed twice: give up (no move_aside_unusable).
    let p = c.step(
        t(110.0),
        &stopped(failed("pg_rewind failed (exit status: 1)".into())),
    );
    assert_eq!(p.actions, vec![rewind.clone()], "{}", p.reason);
    let p = c.step(
        t(111.0),
        &stopped(failed("pg_rewind failed (exit status: 1)".into())),
    );
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        matches!(p.reason, Reason::Refusing(ref s) if s.contains("pg_rewind failed twice")),
        "{}",
        p.reason
    );
}

/// Issue 12: a basebackup that fails at once (a wrong root certificate: "SSL error:
/// certificate verify failed" within milliseconds) is retried at the next loop,
/// not at every wake-up its child's exit causes (after more failures in a row,
/// later: `failed_replica_builds_back_off_up_to_a_minute`).
#[test]
fn a_failed_basebackup_is_retried_once_per_loop() {
    let mut c = core("pg3", None);
    let empty = |job: Job| {
        let mut o = third_node_obs(1500, false);
        o.pg = pg(PgRole::Stopped, 0, None);
        o.pg.data = DataDir::Empty;
        o.job = job;
        o
    };
    let clone = Action::StartJob(JobKind::Basebackup { from: "pg2".into() });
    let failed = Job::Finished {
        kind: JobKind::Basebackup { from: "pg2".into() },
        ok: false,
        detail: "pg_basebackup failed (exit status: 1): SSL error: certificate verify failed"
            .into(),
    };
    let p = c.step(t(100.0), &empty(Job::Idle));
    assert_eq!(p.actions, vec![clone.clone()], "{}", p.reason);
    // The failure 30 ms later, and wake-ups after it within the loop: no retry.
    for at in [100.03, 100.5, 100.99] {
        let job = if at == 100.03 {
            failed.clone()
        } else {
            Job::Idle
        };
        let p = c.step(t(at), &empty(job));
        assert!(p.actions.is_empty(), "at {at}: {:?}", p.actions);
        assert!(
            p.reason.to_string().contains("1 in a row failed"),
            "{}",
            p.reason
        );
    }
    // At the next tick (loop_wait 2 s; from half of it on): again.
    let p = c.step(t(102.0), &empty(Job::Idle));
    assert_eq!(p.actions, vec![clone], "{}", p.reason);
}

/// Patroni's `clonefrom` tag: a new replica is built from a tagged replica that
/// streams close to the leader, sparing the primary; the most advanced one; never
/// one that does not stream, is on another timeline, lags past
/// `maximum_lag_on_failover` or is not running; and one whose builds kept failing
/// for a lease TTL gives way to the leader until a build succeeds.
#[test]
fn a_new_replica_clones_a_clonefrom_member_that_streams_close_to_the_leader() {
    let tagged = |name: &str, xlog: Lsn| {
        let mut m = member(name, 30, "replica", xlog, None);
        m.info.timeline = 2;
        m.info.state = "running".into();
        m.info.replication_state = Some("streaming".into());
        m.info.tags.clonefrom = true;
        m
    };
    let obs_with = |members: Vec<Member>, job: Job| {
        let mut leader = member("pg2", 30, "primary", 10_000_000, None);
        leader.info.timeline = 2;
        let mut all = vec![leader, member("pg3", 30, "replica", 0, None)];
        all.extend(members);
        let v = view(31, Some(key("pg2", 21, 0xB)), all);
        let mut o = obs(v, pg(PgRole::Stopped, 0, None));
        o.pg.data = DataDir::Empty;
        o.job = job;
        o
    };
    let from = |p: &Plan| match p.actions.as_slice() {
        [Action::StartJob(JobKind::Basebackup { from })] => from.clone(),
        other => panic!("{other:?}: {}", p.reason),
    };
    // The two tagged ones stream; pg5 is further ahead: it is the source.
    let mut c = core("pg3", None);
    let p = c.step(
        t(100.0),
        &obs_with(
            vec![tagged("pg4", 9_999_990), tagged("pg5", 9_999_995)],
            Job::Idle,
        ),
    );
    assert_eq!(from(&p), "pg5");
    assert!(
        p.reason.to_string().contains("tagged clonefrom"),
        "{}",
        p.reason
    );
    // None qualifies: the leader.
    let unfit = [
        ("not streaming", {
            let mut m = tagged("pg4", 9_999_990);
            m.info.replication_state = Some("stopped".into());
            m
        }),
        ("another timeline", {
            let mut m = tagged("pg4", 9_999_990);
            m.info.timeline = 1;
            m
        }),
        ("too far behind", tagged("pg4", 10_000_000 - 1_048_576 - 1)),
        ("not running", {
            let mut m = tagged("pg4", 9_999_990);
            m.info.state = "starting".into();
            m
        }),
        ("unhealthy", {
            let mut m = tagged("pg4", 9_999_990);
            m.info.pg_healthy = false;
            m
        }),
        ("untagged", {
            let mut m = tagged("pg4", 9_999_990);
            m.info.tags.clonefrom = false;
            m
        }),
    ];
    for (i, (what, m)) in unfit.into_iter().enumerate() {
        let mut c = core("pg3", None);
        let p = c.step(t(100.0 + i as f64), &obs_with(vec![m], Job::Idle));
        assert_eq!(from(&p), "pg2", "{what}");
    }
    // Builds from pg5 fail: retried from pg5 until they have failed for a TTL
    // (30 s here), then pg4 is cloned; a success makes pg5 the source again.
    let members = || vec![tagged("pg4", 9_999_990), tagged("pg5", 9_999_995)];
    let failed = |from: &str| Job::Finished {
        kind: JobKind::Basebackup { from: from.into() },
        ok: false,
        detail: "pg_basebackup failed (exit status: 1): no pg_hba.conf entry".into(),
    };
    let mut c = core("pg3", None);
    assert_eq!(
        from(&c.step(t(100.0), &obs_with(members(), Job::Idle))),
        "pg5"
    );
    assert_eq!(
        from(&c.step(t(110.0), &obs_with(members(), failed("pg5")))),
        "pg5",
        "one failure does not pass it over"
    );
    assert_eq!(
        from(&c.step(t(125.0), &obs_with(members(), failed("pg5")))),
        "pg5"
    );
    assert_eq!(
        from(&c.step(t(140.5), &obs_with(members(), failed("pg5")))),
        "pg4",
        "failing for a TTL: passed over"
    );
    let done = Job::Finished {
        kind: JobKind::Basebackup { from: "pg4".into() },
        ok: true,
        detail: "done".into(),
    };
    // (The build succeeded; the data directory is gone again, a reinit.)
    assert_eq!(from(&c.step(t(150.0), &obs_with(members(), done))), "pg5");

    // Review of session 18, L2: with the only tagged member passed over, a
    // failure from the leader keeps it passed over (before, the leader's failure
    // replaced its record and it was cloned again at once).
    let one = || vec![tagged("pg5", 9_999_995)];
    let mut c = core("pg3", None);
    assert_eq!(from(&c.step(t(200.0), &obs_with(one(), Job::Idle))), "pg5");
    assert_eq!(
        from(&c.step(t(210.0), &obs_with(one(), failed("pg5")))),
        "pg5"
    );
    assert_eq!(
        from(&c.step(t(240.5), &obs_with(one(), failed("pg5")))),
        "pg2",
        "failing for a TTL: the leader"
    );
    assert_eq!(
        from(&c.step(t(300.0), &obs_with(one(), failed("pg2")))),
        "pg2",
        "the leader's failure does not bring pg5 back"
    );
}

/// Review of session 18, M3: a replica build that keeps failing is retried
/// after 2^n half loops (n failures in a row), up to a minute, not every half
/// loop (each attempt is a checkpoint on its source); one that succeeds resets
/// the count; a build that could not start counts as a failure.
#[test]
fn failed_replica_builds_back_off_up_to_a_minute() {
    let obs_job = |job: Job| {
        let leader = member("pg2", 30, "primary", 10_000_000, None);
        let v = view(
            31,
            Some(key("pg2", 21, 0xB)),
            vec![leader, member("pg3", 30, "replica", 0, None)],
        );
        let mut o = obs(v, pg(PgRole::Stopped, 0, None));
        o.pg.data = DataDir::Empty;
        o.job = job;
        o
    };
    let failed = || Job::Finished {
        kind: JobKind::Basebackup { from: "pg2".into() },
        ok: false,
        detail: "did not start: data directory /d is a mount point".into(),
    };
    let starts = |p: &Plan| {
        matches!(
            p.actions.as_slice(),
            [Action::StartJob(JobKind::Basebackup { .. })]
        )
    };
    let mut c = core("pg3", None);
    // loop_wait 2 s: half a loop is 1 s; after n failures 2^n s, up to 60 s.
    let mut at = 100.0;
    assert!(starts(&c.step(t(at), &obs_job(Job::Idle))));
    for (n, wait) in [
        (1, 2.0),
        (2, 4.0),
        (3, 8.0),
        (4, 16.0),
        (5, 32.0),
        (6, 60.0),
        (7, 60.0),
    ] {
        let p = c.step(t(at + 0.01), &obs_job(failed()));
        assert!(
            !starts(&p),
            "after {n} failures: retried at once ({})",
            p.reason
        );
        assert!(
            p.reason
                .to_string()
                .contains(&format!("{n} in a row failed")),
            "{}",
            p.reason
        );
        let p = c.step(t(at + wait - 0.01), &obs_job(Job::Idle));
        assert!(
            !starts(&p),
            "after {n} failures: before {wait} s ({})",
            p.reason
        );
        at += wait;
        let p = c.step(t(at), &obs_job(Job::Idle));
        assert!(
            starts(&p),
            "after {n} failures: not at {wait} s ({})",
            p.reason
        );
    }
    // A success resets it: the next failure waits 2 s again.
    let done = Job::Finished {
        kind: JobKind::Basebackup { from: "pg2".into() },
        ok: true,
        detail: "done".into(),
    };
    c.step(t(at + 0.5), &obs_job(done));
    at += 1.0;
    assert!(starts(&c.step(t(at), &obs_job(Job::Idle))));
    c.step(t(at + 0.01), &obs_job(failed()));
    assert!(starts(&c.step(t(at + 2.0), &obs_job(Job::Idle))));
}

// ----- Issue 8, the safety review: each test failed before its fix -----

/// pg2 under a `config` whose ttl was lowered to 10 (its own leases are 10 s).
fn core_at_ttl10() -> Core {
    let mut timing = timing30();
    timing.ttl = 10;
    core_with("pg2", None, timing)
}

/// `win_after_delete_granted` with a 10 s lease (the ttl in force).
fn win_after_delete(c: &mut Core, members: Vec<Member>, at: f64) -> Plan {
    win_after_delete_granted(c, members, at, 10)
}

/// pg2 follows pg1 (lease 0xA) at ttl 10; pg1's lease was granted 30 s, which its
/// member key (`leader_ttl`) or the poll's `grantedTTL` says; the key vanishes early
/// (a revoke at 103, long before E_max = 122) and pg2 wins.
fn early_takeover_after_ttl_lowered(published: Option<u32>, granted: Option<i64>) -> Plan {
    let mut c = core_at_ttl10();
    let mut old = member("pg1", 8, "primary", 1000, None);
    old.info.leader_lease = Some(0xA);
    old.info.leader_ttl = published;
    let members = vec![old, member("pg2", 9, "replica", 1000, None)];
    let v = view(10, Some(key("pg1", 5, 0xA)), members.clone());
    c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = Some(lease_poll(0xA, 102.0, Some(20), granted, true));
    c.step(t(102.01), &o);
    win_after_delete(&mut c, members, 103.0)
}

fn delayed_by(p: &Plan) -> f64 {
    match &p.reason {
        Reason::PromoteDelayed { remaining, .. } => remaining.as_secs_f64(),
        other => panic!("expected PromoteDelayed, got {other} ({:?})", p.actions),
    }
}

#[test]
fn early_expiry_waits_the_old_leases_granted_ttl_from_its_member_key() {
    // Finding 2: 30 + R = 31 s from the DELETE at 103, not the config's 10 + R.
    let p = early_takeover_after_ttl_lowered(Some(30), None);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!((delayed_by(&p) - (103.0 + 31.0 - 103.3)).abs() < 1e-6);
}

#[test]
fn early_expiry_waits_the_old_leases_granted_ttl_from_the_poll() {
    // The holder published nothing (an older agent); LeaseTimeToLive's grantedTTL.
    let p = early_takeover_after_ttl_lowered(None, Some(30));
    assert!((delayed_by(&p) - (103.0 + 31.0 - 103.3)).abs() < 1e-6);
}

#[test]
fn early_expiry_without_the_old_ttl_waits_the_largest_leader_ttl_seen() {
    // Neither known for the holder: another member published a leadership of 30 s
    // earlier in the run, so 30 s is what an old lease may have had.
    let mut c = core_at_ttl10();
    let mut earlier = member("pg3", 7, "replica", 1000, None);
    earlier.info.leader_ttl = Some(30);
    let v = view(
        9,
        Some(key("pg1", 5, 0xA)),
        vec![
            member("pg1", 8, "primary", 1000, None),
            member("pg2", 9, "replica", 1000, None),
            earlier,
        ],
    );
    c.step(t(99.0), &obs(v, pg(PgRole::Replica, 1000, Some("pg1"))));
    // pg3's key is gone now; pg1 publishes no TTL; the poll gives none.
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let p = win_after_delete(&mut c, members, 100.0);
    assert!((delayed_by(&p) - (100.0 + 31.0 - 100.3)).abs() < 1e-6);
}

/// pg2 wins the key with a watchdog W = 13 (no early expiry): the plan arms it.
fn won_with_watchdog() -> (Core, ClusterView) {
    let mut c = core("pg2", Some(13));
    let members = vec![member("pg2", 9, "replica", 1000, None)];
    let v = view(20, None, members.clone());
    c.step(t(50.0), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
    let v2 = view(21, Some(key("pg2", 21, 0xB)), members);
    let mut o = obs(v2.clone(), pg(PgRole::Replica, 1000, None));
    o.acquire = won(0xB, 30, 100.0, 21);
    let p = c.step(t(100.1), &o);
    // H = 100 + 30 - 2 = 128: the arm may happen until H - 2W = 102.
    assert_eq!(
        p.actions,
        vec![Action::PetWatchdog {
            not_after: t(102.0)
        }],
        "{}",
        p.reason
    );
    // Until the report, F counts from the planned instant, never later.
    assert_eq!(c.fence_deadline(), Some(t(113.1)));
    (c, v2)
}

#[test]
fn a_pet_skipped_at_its_real_instant_blocks_promotion_and_f_stays_at_h() {
    // Finding 3: the arm never reached the device: no promotion (S3), and F no later
    // than without a watchdog: min(H = 128, s + ttl - (L_w + R + 1 s) = 126) (review
    // of the unwatched deadline, M1: an adoption keeps a running primary meanwhile).
    let (mut c, v) = won_with_watchdog();
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, None));
    o.pet = Some(PetReport {
        at: t(102.5),
        outcome: PetOutcome::Skipped("late".into()),
    });
    let p = c.step(t(102.6), &o);
    assert!(
        !p.actions.contains(&Action::Promote { epoch: 21 }),
        "{:?}",
        p.actions
    );
    assert!(
        matches!(p.reason, Reason::Waiting(ref s) if s.contains("arm the watchdog")),
        "{}",
        p.reason
    );
    assert_eq!(c.horizon(), Some(t(128.0)));
    assert_eq!(c.fence_deadline(), Some(t(126.0)));
    // The next counted renewal's pet (made by the shell right after it) arms it.
    let r = Renewal {
        lease: 0xB,
        sent_at: t(102.7),
        outcome: RenewalOutcome::Counted { ttl: 30 },
    };
    // H' = 102.7 + 28 = 130.7: a pet is allowed until H' - 2W = 104.7.
    assert_eq!(c.pet_on_renewal(t(102.75), &r), Some(t(104.7)));
    assert_eq!(c.pet_on_renewal(t(104.8), &r), None);
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.renewal = Some(r);
    o.pet = Some(PetReport {
        at: t(102.76),
        outcome: PetOutcome::Done,
    });
    let p = c.step(t(102.8), &o);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
    // F from the real pet's instant.
    assert_eq!(c.fence_deadline(), Some(t(115.76)));
}

#[test]
fn a_failed_pet_keeps_f_at_the_last_pet_that_reached_the_device() {
    let (mut c, v) = won_with_watchdog();
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, None));
    o.pet = Some(PetReport {
        at: t(100.2),
        outcome: PetOutcome::Done,
    });
    c.step(t(100.3), &o);
    assert_eq!(c.fence_deadline(), Some(t(113.2)));
    let mut o = obs(v, pg(PgRole::Primary, 1000, None));
    o.renewal = counted(0xB, 102.0);
    o.pet = Some(PetReport {
        at: t(102.01),
        outcome: PetOutcome::Failed("EIO".into()),
    });
    c.step(t(102.1), &o);
    // The renewal moved H, but the device was last pinged at 100.2.
    assert_eq!(c.fence_deadline(), Some(t(113.2)));
    // A pet folded after a done one never hides it.
    let done = PetReport {
        at: t(1.0),
        outcome: PetOutcome::Done,
    };
    let failed = PetReport {
        at: t(2.0),
        outcome: PetOutcome::Failed("EIO".into()),
    };
    assert_eq!(PetReport::fold(Some(done.clone()), failed), done);
}

#[test]
fn a_watchdog_too_large_for_the_granted_ttl_gives_the_key_back() {
    // Finding 4's dead end: W = 13 armed, a ttl of 20 granted: 2W = 26 > 20 - 2 - 1.
    let mut c = core("pg2", Some(13));
    let members = vec![member("pg2", 9, "replica", 1000, None)];
    c.step(
        t(50.0),
        &obs(
            view(20, None, members.clone()),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 20, 100.0, 21);
    let p = c.step(t(100.1), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    refusing_with(&p, &["2W", "granted TTL 20"]);
    // A ttl change raced the acquire: the next grant is for the ttl in force, so this
    // node stays a candidate (a two-node cluster must not lose its only one).
    assert!(!c.refuses_leadership());
}

fn wedged_primary() -> PgStatus {
    let mut p = pg(PgRole::Unresponsive, 0, None);
    p.data = DataDir::Present {
        sysid: SYSID,
        was_primary: true,
    };
    p
}

#[test]
fn a_wedged_local_primary_is_fenced_when_another_node_leads() {
    // Finding 8: a probe that times out on a data directory that says "primary".
    let mut c = core("pg1", None);
    let v = view(
        10,
        Some(key("pg2", 7, 0xB)),
        vec![member("pg2", 9, "primary", 900, None)],
    );
    let p = c.step(t(5.0), &obs(v, wedged_primary()));
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    // A replica still starting up (standby.signal: was_primary false) is left alone.
    let mut c = core("pg1", None);
    let v = view(
        10,
        Some(key("pg2", 7, 0xB)),
        vec![member("pg2", 9, "primary", 900, None)],
    );
    let p = c.step(t(5.0), &obs(v, pg(PgRole::Unresponsive, 0, None)));
    assert!(!p.actions.contains(&Action::Fence), "{:?}", p.actions);
}

#[test]
fn a_local_primary_is_fenced_before_any_early_return() {
    // Finding 8: every early return of `follow` came before the S4 fence.
    let leader = Some(key("pg2", 7, 0xB));
    let cases: Vec<(&str, ClusterView, PgStatus, Job)> = vec![
        (
            "initialize missing",
            ClusterView {
                initialize: None,
                ..view(10, leader.clone(), vec![])
            },
            pg(PgRole::Primary, 1, None),
            Job::Idle,
        ),
        (
            "initialize locked",
            ClusterView {
                initialize: Some(Initialize::Locked {
                    holder: "pg3".into(),
                    lease: 0xC,
                }),
                ..view(10, leader.clone(), vec![])
            },
            pg(PgRole::Primary, 1, None),
            Job::Idle,
        ),
        (
            "initialize garbage",
            ClusterView {
                initialize: Some(Initialize::Garbage("x".into())),
                ..view(10, leader.clone(), vec![])
            },
            pg(PgRole::Primary, 1, None),
            Job::Idle,
        ),
        (
            "system identifier mismatch",
            ClusterView {
                initialize: Some(Initialize::Done { sysid: SYSID + 1 }),
                ..view(10, leader.clone(), vec![])
            },
            pg(PgRole::Primary, 1, None),
            Job::Idle,
        ),
        (
            "a job running",
            view(10, leader.clone(), vec![]),
            wedged_primary(),
            Job::Running {
                kind: JobKind::Stop,
                since: t(4.0),
            },
        ),
    ];
    for (what, v, p, job) in cases {
        let mut c = core("pg1", None);
        let mut o = obs(v, p);
        o.job = job;
        let plan = c.step(t(5.0), &o);
        assert_eq!(plan.actions, vec![Action::Fence], "{what}: {}", plan.reason);
    }
}

#[test]
fn a_primary_starts_only_with_the_watchdog_armed() {
    // Finding 9: the StartPrimary path had no "armed" check (bootstrap reaches it).
    let (mut c, v) = won_with_watchdog();
    let stopped = pg(PgRole::Stopped, 1000, None);
    let mut o = obs(v.clone(), stopped.clone());
    o.pet = Some(PetReport {
        at: t(103.0),
        outcome: PetOutcome::Skipped("late".into()),
    });
    // Read the epoch row first (the data's epoch is unknown in this run).
    let p = c.step(t(103.1), &o);
    assert!(
        !p.actions.contains(&Action::StartJob(JobKind::StartPrimary)),
        "{:?}",
        p.actions
    );
    let mut replica = pg(PgRole::Replica, 1000, None);
    replica.epoch = Some(3);
    c.step(t(103.2), &obs(v.clone(), replica));
    let p = c.step(t(103.3), &obs(v.clone(), stopped.clone()));
    assert!(
        !p.actions.contains(&Action::StartJob(JobKind::StartPrimary)),
        "{:?} {}",
        p.actions,
        p.reason
    );
    assert!(
        p.reason.to_string().contains("arm the watchdog"),
        "{}",
        p.reason
    );
    let mut o = obs(v, stopped);
    o.renewal = counted(0xB, 103.4);
    o.pet = Some(PetReport {
        at: t(103.41),
        outcome: PetOutcome::Done,
    });
    let p = c.step(t(103.5), &o);
    assert!(
        p.actions.contains(&Action::StartJob(JobKind::StartPrimary)),
        "{:?} {}",
        p.actions,
        p.reason
    );
}

#[test]
fn adoption_without_a_cluster_read_fences_a_local_primary() {
    // Finding 11: the timeline check took `unwrap_or(1)` when the read failed.
    let mut c = core("pg1", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    c.step(
        t(5.0),
        &polled(obs(v, pg(PgRole::Primary, 500, None)), 0xA, 5.0),
    );
    assert!(c.renew_now());
    let mut o = obs(ClusterView::default(), pg(PgRole::Primary, 500, None));
    o.cluster = Err("timed out".into());
    o.renewal = counted(0xA, 5.01);
    let p = c.step(t(5.02), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert!(c.leadership().is_none());
    // A replica may wait for the next read instead.
    let mut c = core("pg1", None);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    c.step(
        t(5.0),
        &polled(obs(v, pg(PgRole::Replica, 500, None)), 0xA, 5.0),
    );
    let mut o = obs(ClusterView::default(), pg(PgRole::Replica, 500, None));
    o.cluster = Err("timed out".into());
    o.renewal = counted(0xA, 5.01);
    let p = c.step(t(5.02), &o);
    assert!(!p.actions.contains(&Action::Fence), "{:?}", p.actions);
    // A standby has no timeline to check: it adopts (a read that keeps failing must
    // not keep the cluster without a primary).
    assert!(c.leadership().is_some(), "{}", p.reason);
}

#[test]
fn a_primary_is_fenced_when_initialize_does_not_match_even_with_the_key_naming_it() {
    // Finding 8's last gap: the adoption exemption must not let a running primary
    // return early (initialize missing, or another cluster's) without a fence.
    for init in [None, Some(Initialize::Done { sysid: SYSID + 1 })] {
        let mut c = core("pg1", None);
        let v = ClusterView {
            initialize: init.clone(),
            ..view(10, Some(key("pg1", 5, 0xA)), vec![])
        };
        let p = c.step(t(5.0), &obs(v, pg(PgRole::Primary, 500, None)));
        assert_eq!(p.actions, vec![Action::Fence], "{init:?}: {}", p.reason);
    }
}

// ---------------------------------------------------------------------------------
// The guardian (DESIGN §2 "The guardian"): G = F - B_g while leading (F without a
// device: the unwatched deadline s + ttl - (L_w + R + 1 s), before H), promotion
// only once the guardian holds a G (S3), stand-down (`DisarmWatchdog`) after a
// complete fence or a clean stop.
// ---------------------------------------------------------------------------------

const B_G: Duration = Duration::from_millis(500);

#[test]
fn guardian_deadline_is_f_minus_b_g_while_leading_only() {
    let mut c = core("pg1", None);
    c.set_guardian(Some(B_G));
    assert_eq!(c.guardian_deadline(), None, "not leading");
    let mut c = adopted_leader(100.0);
    assert_eq!(c.guardian_deadline(), None, "no guardian");
    c.set_guardian(Some(B_G));
    // Adopted at s = 100: H = 128, F = 126 (the unwatched deadline), G = 125.5.
    assert_eq!(c.guardian_deadline(), Some(t(125.5)));
    assert_eq!(c.fence_deadline(), Some(t(126.0)));
    assert_eq!(
        c.call_cap(),
        Some(t(125.0)),
        "the agent's own fence starts first"
    );
    // Each counted renewal moves G.
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let mut o = obs(v.clone(), pg(PgRole::Primary, 600, None));
    o.renewal = counted(0xA, 102.0);
    o.guardian_holds = Some(t(125.5));
    c.step(t(102.01), &o);
    assert_eq!(c.guardian_deadline(), Some(t(127.5)));
    // A wall-clock jump (S5) moves it back.
    let mut o = obs(v, pg(PgRole::Primary, 600, None));
    o.clock_jump = Duration::from_secs(3);
    o.guardian_holds = Some(t(127.5));
    c.step(t(102.5), &o);
    assert_eq!(c.guardian_deadline(), Some(t(124.5)));
    // After a fence: none.
    c.set_guardian(None);
    assert_eq!(c.guardian_deadline(), None);
}

#[test]
fn with_the_guardian_promotion_waits_until_it_holds_g() {
    let mut c = follower_with_poll(None);
    c.set_guardian(Some(B_G));
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.5));
    o.lease_poll = Some(lease_poll(0xA, 103.55, None, None, false));
    let p = c.step(t(103.6), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let v = view(21, Some(key("pg2", 21, 0xB)), members);
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, None));
    o.acquire = won(0xB, 30, 103.65, 21);
    let p = c.step(t(103.7), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 }, "won");
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // The step after the win, before the shell delivered any G.
    let p = c.step(t(103.75), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
    assert!(
        !p.actions.contains(&Action::Promote { epoch: 21 }),
        "promoted before the guardian held a G: {:?}",
        p.actions
    );
    assert!(
        matches!(p.reason, Reason::Waiting(ref s) if s.contains("guardian")),
        "{}",
        p.reason
    );
    assert!(p.again, "the next step follows at once");
    let g = c.guardian_deadline().expect("leading: a G to hand over");
    // F = s + ttl - (L_w + R + 1 s) = 103.65 + 26 (no device), G = F - B_g.
    assert_eq!(g, t(103.65 + 26.0 - 0.5));
    // The shell delivered it: now it promotes.
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.guardian_holds = Some(g);
    let p = c.step(t(103.8), &o);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

#[test]
fn with_the_guardian_a_complete_fence_stands_it_down() {
    let mut c = adopted_leader(100.0);
    c.set_guardian(Some(B_G));
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let mut o = obs(v.clone(), pg(PgRole::Primary, 600, None));
    o.guardian_holds = c.guardian_deadline();
    let p = c.step(t(127.0), &o);
    assert_eq!(p.actions, vec![Action::Fence], "at F - B: {}", p.reason);
    assert_eq!(c.guardian_deadline(), None, "no new G once fencing");
    let mut o = obs(v, pg(PgRole::Stopped, 600, None));
    o.fence = Some(FenceOutcome::Complete);
    o.guardian_holds = Some(t(127.5));
    let p = c.step(t(127.1), &o);
    assert_eq!(
        p.actions,
        vec![Action::DisarmWatchdog, Action::Revoke { lease: 0xA }],
        "{}",
        p.reason
    );
}

#[test]
fn with_the_guardian_a_clean_stop_stands_it_down_before_the_release() {
    let mut c = adopted_leader(100.0);
    c.set_guardian(Some(B_G));
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let mut o = obs(v.clone(), pg(PgRole::Stopped, 600, None));
    o.shutdown = true;
    o.guardian_holds = c.guardian_deadline();
    o.job = Job::Finished {
        kind: JobKind::Stop,
        ok: true,
        detail: String::new(),
    };
    // The fail-closed check that no process remains comes first (finding 7).
    let p = c.step(t(101.5), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    let mut o = obs(v, pg(PgRole::Stopped, 600, None));
    o.shutdown = true;
    o.guardian_holds = c.guardian_deadline();
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(101.6), &o);
    assert_eq!(
        p.actions,
        vec![
            Action::DisarmWatchdog,
            Action::HandOver {
                lease: 0xA,
                epoch: 5,
                candidate: None
            },
            Action::Release {
                lease: 0xA,
                epoch: 5
            },
            Action::Exit
        ]
    );
}

#[test]
fn a_required_guardian_that_died_releases_the_key() {
    let mut c = adopted_leader(100.0);
    c.set_guardian(Some(B_G));
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    let mut o = obs(v, pg(PgRole::Primary, 600, None));
    o.watchdog_failed = Some("the guardian (pid 7) died".into());
    let p = c.step(t(101.0), &o);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert!(c.leadership().is_none());
    assert!(c.refuses_leadership());
}

// ----- maintenance mode (pause), DESIGN §3 "Configuration" -------------------------

/// The vacancy of `take_over`, seen by a paused pg2: the plan of that step.
fn paused_vacancy_step(c: &mut Core, at: f64, pg_st: PgStatus) -> Plan {
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let mut o = obs(view(20, None, members), pg_st);
    o.leader_deleted_at = Some(t(at));
    o.lease_poll = Some(lease_poll(0xA, at + 0.05, None, None, false));
    c.step(t(at + 0.1), &o)
}

#[test]
fn a_paused_cluster_never_takes_the_vacant_key_and_resume_fails_over() {
    let mut c = follower_with_poll(None);
    c.set_pause(true);
    // The leader's key expired (host crash), its lease is gone: normally pg2 races.
    for i in 0..20 {
        let p = paused_vacancy_step(
            &mut c,
            104.0 + f64::from(i),
            pg(PgRole::Replica, 1000, None),
        );
        no_acquire_nor_promote(&p);
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        assert!(
            p.reason.to_string().contains("paused (maintenance mode)"),
            "{}",
            p.reason
        );
    }
    // A stopped PostgreSQL stays stopped while paused (no standby start either).
    let p = paused_vacancy_step(&mut c, 130.0, pg(PgRole::Stopped, 1000, None));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // Resume: the same facts lead to the race at once, no other failover.
    c.set_pause(false);
    let p = paused_vacancy_step(&mut c, 131.0, pg(PgRole::Replica, 1000, None));
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
}

#[test]
fn a_paused_replica_neither_restarts_nor_rewinds_a_stopped_postgresql() {
    let mut c = follower_with_poll(None);
    c.set_pause(true);
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let v = view(30, Some(key("pg1", 5, 0xA)), members);
    let p = c.step(t(110.0), &obs(v.clone(), pg(PgRole::Stopped, 1000, None)));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        p.reason
            .to_string()
            .contains("not starting the stopped PostgreSQL"),
        "{}",
        p.reason
    );
    c.set_pause(false);
    let p = c.step(t(111.0), &obs(v, pg(PgRole::Stopped, 1000, None)));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::StartReplica {
            leader: "pg1".into()
        })]
    );
}

#[test]
fn a_paused_leader_keeps_its_key_and_still_fences_by_f_minus_b() {
    // S1 holds under a pause (unlike Patroni): no renewal by F - B is a fence.
    let mut c = adopted_leader(100.0);
    c.set_pause(true);
    let v = view(11, Some(key("pg1", 5, 0xA)), vec![]);
    // PostgreSQL stops while paused: not restarted, the key is not given up, even
    // long past primary_start_timeout (renewals keep counting).
    for i in 0..6 {
        let at = 101.0 + f64::from(i) * 10.0;
        let mut o = obs(v.clone(), pg(PgRole::Stopped, 500, None));
        o.renewal = counted(0xA, at);
        let p = c.step(t(at + 0.01), &o);
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::StartJob(_) | Action::Fence)),
            "{:?}",
            p.actions
        );
        assert!(c.leadership().is_some());
    }
    // Renewals stop: at F - B the paused leader fences all the same.
    let f = c.fence_deadline().expect("leading");
    let b = timing30().demote_budget;
    let at = f.sub(b).add(Duration::from_millis(1));
    let p = c.step(at, &obs(v, pg(PgRole::Primary, 500, None)));
    assert!(
        p.actions.contains(&Action::Fence),
        "{:?} {}",
        p.actions,
        p.reason
    );
}

// ----- Planned switchover and manual failover (issue 9, docs/design.md "the release
// marker") -----

/// The `failover` key as `patronictl switchover` writes it.
fn failover(leader: Option<&str>, member: Option<&str>, rev: i64) -> Option<FailoverRequest> {
    Some(FailoverRequest {
        leader: leader.map(String::from),
        member: member.map(String::from),
        mod_revision: rev,
        ..FailoverRequest::default()
    })
}

/// pg1 leads (epoch 5, lease 0xA, adopted at 100 s) with its primary at `lsn`; pg2
/// streams from it with `flush`. The view holds `req` as the `failover` key.
fn switchover_obs(req: Option<FailoverRequest>, lsn: Lsn, flush: Lsn) -> Observation {
    let mut v = view(
        30,
        Some(key("pg1", 5, 0xA)),
        vec![
            member("pg1", 8, "primary", lsn, None),
            member("pg2", 9, "replica", flush, None),
        ],
    );
    v.failover = req;
    let mut p = pg(PgRole::Primary, lsn, None);
    p.standbys = vec![standby("pg2", true, false, flush)];
    obs(v, p)
}

fn no_hand_over(p: &Plan) {
    assert!(
        !p.actions.iter().any(|a| matches!(
            a,
            Action::StartJob(JobKind::Stop) | Action::Fence | Action::HandOver { .. }
        )),
        "{:?} ({})",
        p.actions,
        p.reason
    );
}

/// A request the leader cannot carry out (unknown, lagging, not streaming, named
/// leader not me) changes nothing: no stop, no fence, no release, the same
/// leadership; only the request is deleted (guarded by epoch and its revision) and
/// the reason says why. Before issue 9 the `failover` key was not read at all.
#[test]
fn a_refused_switchover_changes_nothing_but_the_request() {
    let cases: [(Option<FailoverRequest>, Lsn, Lsn, &str); 5] = [
        (
            failover(Some("pg1"), Some("pg9"), 41),
            500,
            500,
            "pg9 is not a member",
        ),
        (
            failover(Some("pg1"), Some("pg2"), 41),
            5 << 20,
            500,
            "maximum_lag_on_failover",
        ),
        (
            failover(Some("pg3"), Some("pg2"), 41),
            500,
            500,
            "names pg3 as the leader",
        ),
        (
            failover(None, Some("pg1"), 41),
            500,
            500,
            "already the leader",
        ),
        (
            Some(FailoverRequest {
                parse_error: Some("not JSON".into()),
                mod_revision: 41,
                ..FailoverRequest::default()
            }),
            500,
            500,
            "does not parse",
        ),
    ];
    for (req, lsn, flush, why) in cases {
        let mut c = adopted_leader(100.0);
        let before = c.leadership().cloned();
        let p = c.step(t(101.0), &switchover_obs(req, lsn, flush));
        no_hand_over(&p);
        assert!(
            p.actions.contains(&Action::ClearFailover {
                epoch: 5,
                mod_revision: 41
            }),
            "{:?}",
            p.actions
        );
        let text = p.reason.to_string();
        assert!(text.contains("refused") && text.contains(why), "{text}");
        assert_eq!(c.leadership().cloned(), before, "{why}: leadership changed");
    }
    // Not streaming: also refused.
    let mut c = adopted_leader(100.0);
    let mut o = switchover_obs(failover(Some("pg1"), Some("pg2"), 41), 500, 500);
    o.pg.standbys = vec![standby("pg2", false, false, 500)];
    let p = c.step(t(101.0), &o);
    no_hand_over(&p);
    assert!(
        p.reason.to_string().contains("not streaming"),
        "{}",
        p.reason
    );
}

/// Synchronous mode: only the synchronous standby may be the candidate.
#[test]
fn a_switchover_to_a_standby_the_sync_key_does_not_list_is_refused() {
    let mut c = adopted_leader(100.0);
    let mut tm = timing30();
    tm.synchronous = SyncMode::On;
    c.set_timing(t(100.0), tm);
    let mut o = switchover_obs(failover(Some("pg1"), Some("pg2"), 41), 500, 500);
    if let Ok(v) = &mut o.cluster {
        v.sync = sync_key("pg1", Some("pg3"));
    }
    let p = c.step(t(101.0), &o);
    no_hand_over(&p);
    assert!(
        p.reason.to_string().contains("not a synchronous standby"),
        "{}",
        p.reason
    );
}

/// The whole hand-over on the leader, in DESIGN §1 step 4's order: fast stop, the
/// fence as the check that no process remains (retried while incomplete), then one
/// `HandOver` (marker + guarded delete), and only after it was released the leader
/// becomes a follower that needs no rewind. The key stays held until then.
#[test]
fn a_switchover_stops_checks_then_releases_with_the_marker() {
    let mut c = adopted_leader(100.0);
    let req = failover(Some("pg1"), Some("pg2"), 41);
    let p = c.step(t(101.0), &switchover_obs(req.clone(), 500, 500));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::Stop)],
        "{}",
        p.reason
    );

    let mut o = switchover_obs(req.clone(), 500, 500);
    o.job = Job::Running {
        kind: JobKind::Stop,
        since: t(101.0),
    };
    let p = c.step(t(101.1), &o);
    assert!(p.actions.is_empty(), "{:?}", p.actions);

    let stopped = |job: Job, fence: Option<FenceOutcome>| {
        let mut o = switchover_obs(req.clone(), 500, 500);
        o.pg = pg(PgRole::Stopped, 0, None);
        o.job = job;
        o.fence = fence;
        o
    };
    let done = Job::Finished {
        kind: JobKind::Stop,
        ok: true,
        detail: String::new(),
    };
    let p = c.step(t(101.2), &stopped(done, None));
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    // Fail closed: an incomplete check publishes nothing and keeps the key.
    let p = c.step(
        t(101.3),
        &stopped(Job::Idle, Some(FenceOutcome::Incomplete)),
    );
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert!(c.leadership().is_some());
    let p = c.step(t(101.4), &stopped(Job::Idle, Some(FenceOutcome::Complete)));
    assert_eq!(
        p.actions,
        vec![Action::HandOver {
            lease: 0xA,
            epoch: 5,
            candidate: Some("pg2".into())
        }],
        "{}",
        p.reason
    );
    assert!(c.leadership().is_some(), "the key is ours until the txn");

    // The txn went through; the watch's DELETE and the revoked lease are ours.
    let mut o = stopped(Job::Idle, None);
    if let Ok(v) = &mut o.cluster {
        v.leader = None;
    }
    o.leader_deleted_at = Some(t(101.45));
    o.renewal = Some(Renewal {
        lease: 0xA,
        sent_at: t(101.45),
        outcome: RenewalOutcome::LeaseGone,
    });
    o.handed_over = Some(HandOverOutcome::Released(ReleaseMarker {
        epoch: 5,
        lsn: 500,
        timeline: 1,
        candidate: Some("pg2".into()),
        by: "pg1".into(),
        taken_by: None,
    }));
    let p = c.step(t(101.5), &o);
    assert!(!p.actions.contains(&Action::Fence), "{:?}", p.actions);
    assert!(c.leadership().is_none());
    assert!(
        p.reason.to_string().contains("released epoch 5"),
        "{}",
        p.reason
    );

    // The new leader appears: the old primary starts as its replica, no rewind.
    let v = view(
        40,
        Some(key("pg2", 39, 0xB)),
        vec![
            member("pg1", 8, "replica", 500, None),
            member("pg2", 39, "primary", 600, None),
        ],
    );
    let p = c.step(t(102.0), &obs(v, pg(PgRole::Stopped, 500, None)));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::StartReplica {
            leader: "pg2".into()
        })],
        "{}",
        p.reason
    );
}

/// A hand-over whose release was not sent (the control file does not say `shut
/// down`, etcd unreachable) is called off: the key is still ours, the request is
/// deleted, and the leader restarts its PostgreSQL as primary by the usual path. A
/// failed fast stop calls it off the same way.
#[test]
fn a_switchover_called_off_before_the_release_keeps_leading() {
    for at_release in [true, false] {
        let mut c = adopted_leader(100.0);
        let req = failover(Some("pg1"), Some("pg2"), 41);
        c.step(t(101.0), &switchover_obs(req.clone(), 500, 500));
        let mut o = switchover_obs(req.clone(), 500, 500);
        o.pg = pg(PgRole::Stopped, 0, None);
        if at_release {
            o.job = Job::Finished {
                kind: JobKind::Stop,
                ok: true,
                detail: String::new(),
            };
            c.step(t(101.2), &o);
            o.job = Job::Idle;
            o.fence = Some(FenceOutcome::Complete);
            let p = c.step(t(101.3), &o);
            assert!(matches!(p.actions[..], [Action::HandOver { .. }]));
            o.fence = None;
            o.handed_over = Some(HandOverOutcome::NotSent("pg_control says state 6".into()));
        } else {
            o.pg = pg(PgRole::Primary, 500, None);
            o.pg.standbys = vec![standby("pg2", true, false, 500)];
            o.job = Job::Finished {
                kind: JobKind::Stop,
                ok: false,
                detail: "timed out".into(),
            };
        }
        let p = c.step(t(101.4), &o);
        assert!(
            p.actions.contains(&Action::ClearFailover {
                epoch: 5,
                mod_revision: 41
            }),
            "{:?}",
            p.actions
        );
        assert!(p.reason.to_string().contains("called off"), "{}", p.reason);
        assert!(c.leadership().is_some_and(|l| l.handover.is_none()));
    }
}

/// Once the release txn was sent and its answer is unknown, the marker may exist:
/// PostgreSQL is never started as primary again under this epoch; the release is
/// retried.
#[test]
fn an_unknown_release_never_restarts_the_primary() {
    let mut c = adopted_leader(100.0);
    let req = failover(Some("pg1"), Some("pg2"), 41);
    c.step(t(101.0), &switchover_obs(req.clone(), 500, 500));
    let mut o = switchover_obs(req, 500, 500);
    o.pg = pg(PgRole::Stopped, 0, None);
    o.job = Job::Finished {
        kind: JobKind::Stop,
        ok: true,
        detail: String::new(),
    };
    c.step(t(101.2), &o);
    o.job = Job::Idle;
    o.fence = Some(FenceOutcome::Complete);
    c.step(t(101.3), &o);
    o.fence = None;
    for i in 0..5 {
        o.handed_over = Some(HandOverOutcome::Unknown("timed out".into()));
        let p = c.step(t(101.4 + f64::from(i)), &o);
        no_acquire_nor_promote(&p);
        assert!(
            matches!(p.actions[..], [Action::HandOver { epoch: 5, .. }]),
            "{:?} ({})",
            p.actions,
            p.reason
        );
    }
}

/// A scheduled switchover waits for its time (the leader leads as usual until
/// then, and says so), then happens.
#[test]
fn a_scheduled_switchover_happens_at_its_time_not_before() {
    let mut c = adopted_leader(100.0);
    let mut req = failover(Some("pg1"), Some("pg2"), 41);
    if let Some(r) = &mut req {
        r.scheduled_at = Some(t(110.0));
        r.scheduled_text = Some("2026-12-01T10:00:10+00:00".into());
    }
    for s in [101.0, 105.0, 109.9] {
        let mut o = switchover_obs(req.clone(), 500, 500);
        o.renewal = counted(0xA, s);
        let p = c.step(t(s), &o);
        no_hand_over(&p);
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::ClearFailover { .. }))
        );
        assert!(
            p.reason.to_string().contains("scheduled at"),
            "{}",
            p.reason
        );
    }
    let p = c.step(t(110.0), &switchover_obs(req, 500, 500));
    assert_eq!(
        p.actions,
        vec![Action::StartJob(JobKind::Stop)],
        "{}",
        p.reason
    );
}

/// Pause: a switchover is refused while paused (the request deleted, nothing else),
/// scheduled or immediate: the pause holds every candidate back, so a leader that
/// stopped for it would leave the cluster without a primary (review finding F3).
#[test]
fn while_paused_a_switchover_is_refused() {
    let mut c = adopted_leader(100.0);
    c.set_pause(true);
    let mut req = failover(Some("pg1"), Some("pg2"), 41);
    if let Some(r) = &mut req {
        r.scheduled_at = Some(t(110.0));
        r.scheduled_text = Some("2026-12-01T10:00:10+00:00".into());
    }
    let p = c.step(t(101.0), &switchover_obs(req, 500, 500));
    no_hand_over(&p);
    assert!(
        p.actions.contains(&Action::ClearFailover {
            epoch: 5,
            mod_revision: 41
        }),
        "{:?} {}",
        p.actions,
        p.reason
    );
    assert!(p.reason.to_string().contains("paused"), "{}", p.reason);

    let mut c = adopted_leader(100.0);
    c.set_pause(true);
    let p = c.step(
        t(101.0),
        &switchover_obs(failover(Some("pg1"), Some("pg2"), 42), 500, 500),
    );
    no_hand_over(&p);
    assert!(
        p.actions.contains(&Action::ClearFailover {
            epoch: 5,
            mod_revision: 42
        }),
        "{:?} {}",
        p.actions,
        p.reason
    );
}

/// The marker pg1 published for the switchover to pg2 (epoch 5, shutdown checkpoint
/// at 1000), with pg2 at `my_lsn`. The key is seen deleted at 102.5, before E_max
/// (103): an early DELETE. Returns the plan of the step after pg2 won.
fn take_over_after_release(marker: ReleaseMarker, my_lsn: Lsn) -> Plan {
    take_over_with(Some(marker), None, my_lsn)
}

/// As `take_over_after_release`, with the marker optional and the old leader's
/// member key saying `released: old_released` (its PostgreSQL down).
fn take_over_with(marker: Option<ReleaseMarker>, old_released: Option<Epoch>, my_lsn: Lsn) -> Plan {
    take_over_seeing(marker, old_released, my_lsn, vec![])
}

/// As `take_over_with`, with `extra` members in every view. After the win the
/// reads show the marker taken by pg2, as the acquire txn leaves it (review F1).
fn take_over_seeing(
    marker: Option<ReleaseMarker>,
    old_released: Option<Epoch>,
    my_lsn: Lsn,
    extra: Vec<Member>,
) -> Plan {
    let after = marker.clone().map(|m| ReleaseMarker {
        taken_by: Some("pg2".into()),
        ..m
    });
    take_over_reading(marker, after, old_released, my_lsn, extra)
}

/// As `take_over_seeing`, with the marker pg2 decided on (`marker`) and the one
/// the reads after its win show (`after`) given apart.
fn take_over_reading(
    marker: Option<ReleaseMarker>,
    after: Option<ReleaseMarker>,
    old_released: Option<Epoch>,
    my_lsn: Lsn,
    extra: Vec<Member>,
) -> Plan {
    let mut c = follower_with_poll(None);
    let mut old = member("pg1", 8, "primary", 1000, None);
    if old_released.is_some() {
        old.info.released = old_released;
        old.info.pg_healthy = false;
    }
    let mut members = vec![old, member("pg2", 9, "replica", my_lsn, None)];
    members.extend(extra);
    let mut v = view(20, None, members.clone());
    v.release = marker.clone().map(Ok);
    let mut o = obs(v, pg(PgRole::Replica, my_lsn, Some("pg1")));
    o.leader_deleted_at = Some(t(102.5));
    o.lease_poll = Some(lease_poll(0xA, 102.55, None, None, false));
    let p = c.step(t(102.6), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut v = view(21, Some(key("pg2", 21, 0xB)), members.clone());
    v.release = after.clone().map(Ok);
    let mut o = obs(v, pg(PgRole::Replica, my_lsn, None));
    o.acquire = won(0xB, 30, 102.65, 21);
    let p = c.step(t(102.7), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 });
    let mut v = view(22, Some(key("pg2", 21, 0xB)), members);
    v.release = after.map(Ok);
    c.step(t(102.8), &obs(v, pg(PgRole::Replica, my_lsn, None)))
}

fn release(epoch: Epoch, lsn: Lsn, candidate: Option<&str>) -> ReleaseMarker {
    ReleaseMarker {
        epoch,
        lsn,
        timeline: 1,
        candidate: candidate.map(String::from),
        by: "pg1".into(),
        taken_by: None,
    }
}

fn delayed(p: &Plan) {
    match &p.reason {
        Reason::PromoteDelayed { why, .. } => {
            assert!(why.contains("before its lease could have expired"), "{why}")
        }
        r => panic!("expected the early-expiry delay, got {r}"),
    }
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

/// The exception of DESIGN §1 step 4: the named candidate whose WAL reaches the
/// marker's LSN, for the vacated epoch, promotes at once after an early DELETE. So
/// do all candidates when the marker names none.
#[test]
fn the_named_candidate_with_the_proof_promotes_without_the_delay() {
    for named in [Some("pg2"), None] {
        let p = take_over_after_release(release(5, 1000, named), 1000);
        assert_eq!(
            p.actions,
            vec![Action::Promote { epoch: 21 }],
            "{}",
            p.reason
        );
    }
}

/// A marker of another epoch proves nothing about this DELETE (a stale leader's, or
/// an earlier switchover's): the normal early-expiry delay.
#[test]
fn a_release_marker_from_a_stale_epoch_is_ignored() {
    delayed(&take_over_after_release(
        release(4, 1000, Some("pg2")),
        1000,
    ));
}

/// Review finding F1: pg2 missed a whole leadership (pg3's, epoch 7, which took the
/// key at once on pg1's marker and lost it early, its PostgreSQL perhaps still
/// writable). pg2's last key was pg1's epoch 5, so pg1's marker of epoch 5 would
/// match; a member publishing the newer epoch 7 shows it proves nothing about this
/// DELETE: the normal early-expiry delay.
#[test]
fn a_release_marker_older_than_a_published_epoch_proves_nothing() {
    let mut pg3 = member("pg3", 10, "primary", 1000, None);
    pg3.info.epoch = Some(7);
    pg3.info.pg_healthy = false;
    delayed(&take_over_seeing(
        Some(release(5, 1000, Some("pg2"))),
        None,
        1000,
        vec![pg3],
    ));
}

/// Review finding F1, the binding: a marker another acquisition has taken (pg3's,
/// which then lost the key early, its PostgreSQL perhaps still writable) speaks for
/// an older DELETE, even when nobody published pg3's epoch: the normal delay.
#[test]
fn a_release_marker_taken_by_an_acquisition_proves_nothing() {
    let mut m = release(5, 1000, Some("pg2"));
    m.taken_by = Some("pg3".into());
    delayed(&take_over_with(Some(m), None, 1000));
}

/// Review of F1, mixed versions: a member whose tenure does not take release
/// markers when it acquires (an older build; they published PostgreSQL's `15` as
/// their version) could have led since without a trace on the marker: no proof.
#[test]
fn no_release_marker_proves_anything_beside_a_member_that_does_not_take_them() {
    let mut old = member("pg3", 10, "replica", 1000, None);
    old.info.version = "15".into();
    delayed(&take_over_seeing(
        Some(release(5, 1000, Some("pg2"))),
        None,
        1000,
        vec![old],
    ));
}

/// Review finding F1: the win is judged on the marker the acquire txn was bound to
/// (the one read when `Acquire` was planned), never on one a later read shows: pg2
/// decided without a marker, so a marker read after its win proves nothing.
#[test]
fn only_the_marker_the_acquire_was_decided_on_skips_the_delay() {
    delayed(&take_over_reading(
        None,
        Some(release(5, 1000, Some("pg2"))),
        None,
        1000,
        vec![],
    ));
    // And the other way round: decided on the proof, the win keeps it although the
    // reads after it show the marker taken (by pg2 itself, as the txn leaves it).
    let p = take_over_with(Some(release(5, 1000, Some("pg2"))), None, 1000);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// A candidate whose WAL falls short of the shutdown checkpoint may lack
/// acknowledged commits' neighbours and, above all, has no proof: normal delay.
#[test]
fn a_candidate_behind_the_markers_lsn_uses_the_normal_delay() {
    delayed(&take_over_after_release(
        release(5, 1200, Some("pg2")),
        1000,
    ));
}

/// The marker names another candidate: this one is no exception.
#[test]
fn a_candidate_the_marker_does_not_name_uses_the_normal_delay() {
    delayed(&take_over_after_release(
        release(5, 1000, Some("pg3")),
        1000,
    ));
}

/// Issue 9 item 2: a clean stop's `released` field in the old leader's member key is
/// not epoch-guarded and carries no LSN: without the release marker the early
/// DELETE is judged as any other (DESIGN §1 step 4). With the marker naming nobody
/// (what a clean stop now writes) the candidate promotes at once.
#[test]
fn a_clean_stop_proves_itself_only_with_the_release_marker() {
    delayed(&take_over_with(None, Some(5), 1000));
    let p = take_over_with(Some(release(5, 1000, None)), Some(5), 1000);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// The marker is on another timeline than the candidate: positions do not compare.
#[test]
fn a_candidate_on_another_timeline_than_the_marker_uses_the_normal_delay() {
    let mut m = release(5, 1000, Some("pg2"));
    m.timeline = 2;
    delayed(&take_over_after_release(m, 1000));
}

/// Manual failover with no leader: the named replica is preferred (the better-placed
/// pg3 waits for it), but it is checked like any candidate: the old lease must be
/// gone and an early DELETE still delays its promotion.
#[test]
fn a_manual_failover_prefers_the_named_replica_but_keeps_every_check() {
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 21, "replica", 900, None),
        member("pg3", 21, "replica", 1000, None),
    ];
    let mut v = view(20, None, members.clone());
    v.failover = failover(None, Some("pg2"), 19);
    // pg3, better placed, defers to the requested candidate.
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1")));
    o.leader_deleted_at = Some(t(102.5));
    o.lease_poll = Some(lease_poll(0xA, 102.55, None, None, false));
    // pg3 follows pg1 and polled its lease at 102 s (E_max 103 s), like pg2 below.
    let mut c3 = core("pg3", None);
    let mut f = obs(
        view(10, Some(key("pg1", 5, 0xA)), members.clone()),
        pg(PgRole::Replica, 1000, Some("pg1")),
    );
    c3.step(t(100.0), &f);
    f.lease_poll = Some(lease_poll(0xA, 102.0, Some(1), None, true));
    c3.step(t(102.01), &f);
    let p = c3.step(t(102.6), &o);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        p.reason
            .to_string()
            .contains("pg2 is the requested candidate"),
        "{}",
        p.reason
    );

    // pg2, behind pg3, acquires; the old lease still lives at first: it waits.
    let mut c2 = follower_with_poll(None);
    let mut o2 = obs(v.clone(), pg(PgRole::Replica, 900, Some("pg1")));
    o2.leader_deleted_at = Some(t(102.5));
    o2.lease_poll = Some(lease_poll(0xA, 102.55, Some(5), None, false));
    let p = c2.step(t(102.6), &o2);
    no_acquire_nor_promote(&p);
    o2.lease_poll = Some(lease_poll(0xA, 102.65, None, None, false));
    o2.leader_deleted_at = None;
    let p = c2.step(t(102.7), &o2);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut w = view(21, Some(key("pg2", 21, 0xB)), members);
    w.failover = failover(None, Some("pg2"), 19);
    let mut o = obs(w.clone(), pg(PgRole::Replica, 900, None));
    o.acquire = won(0xB, 30, 102.75, 21);
    c2.step(t(102.8), &o);
    let p = c2.step(t(102.9), &obs(w, pg(PgRole::Replica, 900, None)));
    delayed(&p);
}

/// pg3's reason at 102.6 s, 0.1 s into a vacancy of pg1's key (lease 0xA), after
/// following pg1 and polling its lease at 102 s, with `v` the view of the vacancy
/// and pg3's PostgreSQL on `timeline` at `lsn`: its plan.
fn pg3_in_a_vacancy(v: ClusterView, timeline: u32, lsn: Lsn) -> Plan {
    pg3_entering_a_vacancy(v, timeline, lsn, 1, None).2
}

/// [`pg3_in_a_vacancy`] with the old lease's TTL as pg3's polls read it, at 102 s
/// (`ttl_before`) and at 102.55 s (`ttl_then`; `None`: gone): pg3's core, the
/// observation of the vacancy (its DELETE and poll taken out, for later steps),
/// and the plan at 102.6 s.
fn pg3_entering_a_vacancy(
    v: ClusterView,
    timeline: u32,
    lsn: Lsn,
    ttl_before: i64,
    ttl_then: Option<i64>,
) -> (Core, Observation, Plan) {
    let mut mine = pg(PgRole::Replica, lsn, Some("pg1"));
    mine.timeline = timeline;
    let mut c3 = core("pg3", None);
    let mut f = obs(
        view(10, Some(key("pg1", 5, 0xA)), v.members.clone()),
        mine.clone(),
    );
    f.cluster.as_mut().expect("view").history = v.history.clone();
    c3.step(t(100.0), &f);
    f.lease_poll = Some(lease_poll(0xA, 102.0, Some(ttl_before), None, true));
    c3.step(t(102.01), &f);
    let mut o = obs(v, mine);
    o.leader_deleted_at = Some(t(102.5));
    o.lease_poll = Some(lease_poll(0xA, 102.55, ttl_then, None, ttl_then.is_some()));
    let p = c3.step(t(102.6), &o);
    o.leader_deleted_at = None;
    o.lease_poll = None;
    (c3, o, p)
}

/// A manual failover's candidate that never takes the key (its host was lost while
/// its member key, outliving it by up to a member-lease TTL, still reads a healthy
/// replica) holds the others only for a rival's head start, `2 (L_w + R)` after
/// the vacancy, not for a TTL (simulation seed 990011717: four nodes waited 17 s
/// and the printed worst-case failover was missed).
#[test]
fn a_requested_candidate_that_does_not_act_holds_the_others_only_for_a_head_start() {
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 21, "replica", 900, None),
        member("pg3", 21, "replica", 1000, None),
    ];
    let mut v = view(20, None, members);
    v.failover = failover(None, Some("pg2"), 19);
    let (mut c3, o, p) = pg3_entering_a_vacancy(v, 1, 1000, 1, None);
    assert!(
        p.reason
            .to_string()
            .contains("pg2 is the requested candidate"),
        "{}",
        p.reason
    );
    // Head start: 2 (L_w + R) = 6 s from the vacancy (seen at 102.6 s).
    let mut acquired = None;
    for i in 1..=60 {
        let at = 102.6 + f64::from(i) * 0.5;
        let p = c3.step(t(at), &o);
        if p.actions.contains(&Action::Acquire) {
            acquired = Some(at);
            break;
        }
        assert!(
            p.reason
                .to_string()
                .contains("pg2 is the requested candidate"),
            "at {at}: {}",
            p.reason
        );
    }
    let at = acquired.expect("pg3 never took the key: it waited for pg2 for good");
    assert!(
        (108.6..=109.1).contains(&at),
        "pg3 acquired at {at}, not right after the 6 s head start"
    );
}

/// A switchover whose revoke did not land (the old agent died right after the
/// release txn, or the revoke ran out of its deadline): the old lease lives until
/// its TTL and nobody may acquire before it is gone. The head start of the named
/// candidate counts from then, so a live, caught-up pg2 is not raced by pg3 the
/// moment the lease goes (a fresh-eyes review of the first form of the head start,
/// which counted from the DELETE; this test failed with it). After the head start
/// from the lease's end, pg3 takes the key (pg2 never acted).
#[test]
fn a_requested_candidate_s_head_start_counts_from_the_old_lease_s_end() {
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 21, "replica", 1000, None),
        member("pg3", 21, "replica", 1000, None),
    ];
    let mut v = view(20, None, members);
    v.release = Some(Ok(ReleaseMarker {
        epoch: 5,
        lsn: 1000,
        timeline: 1,
        candidate: Some("pg2".into()),
        by: "pg1".into(),
        taken_by: None,
    }));
    let (mut c3, mut o, p) = pg3_entering_a_vacancy(v, 1, 1000, 29, Some(28));
    no_acquire_nor_promote(&p);
    // Polls every 2 s; the lease's TTL reads 0 at 130.55 s: gone, first seen in
    // the step at 130.6 s. pg3 waits for pg2 until 6 s after that (2 (L_w + R)),
    // then takes the key at its next step.
    let mut at = 104.6;
    let mut acquired = None;
    while at < 150.0 {
        let ttl = (131.0 - at) as i64;
        o.lease_poll = Some(lease_poll(
            0xA,
            at - 0.05,
            if ttl > 0 { Some(ttl) } else { None },
            None,
            true,
        ));
        let p = c3.step(t(at), &o);
        if p.actions.contains(&Action::Acquire) {
            acquired = Some(at);
            break;
        }
        at += 2.0;
    }
    let at = acquired.expect("pg3 never took the key");
    assert!(
        (130.6 + 6.0..=130.6 + 6.0 + 2.0).contains(&at),
        "pg3 took the key at {at}: not right after pg2's head start from the lease's end"
    );
}

/// A manual failover's candidate that took the key and lost it before clearing
/// the request (a partition, a stall) is not waited for again at the next vacancy:
/// the request was served (simulation seeds 1725165121, 1725169102: three nodes
/// waited a ttl for the gone holder, whose member key still read "replica").
#[test]
fn a_served_failover_request_does_not_hold_the_next_vacancy() {
    let members = vec![
        member("pg1", 8, "replica", 1000, None),
        member("pg2", 21, "replica", 900, None),
        member("pg3", 21, "replica", 1000, None),
    ];
    // Control: a request naming pg2 holds pg3.
    let mut v = view(20, None, members.clone());
    v.failover = failover(None, Some("pg2"), 19);
    let p = pg3_in_a_vacancy(v, 1, 1000);
    no_acquire_nor_promote(&p);
    let r = p.reason.to_string();
    assert!(r.contains("pg2 is the requested candidate"), "{r}");
    // The request names pg1, the holder of the vacated key.
    let mut v = view(20, None, members);
    v.failover = failover(None, Some("pg1"), 19);
    let p = pg3_in_a_vacancy(v, 1, 1000);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
}

/// The leader won in the vacancy of a manual failover's candidate that took the key
/// and lost it before it could delete the request (review LOW-2 of ee3df9e): the
/// request, written before that key was gone, was served and is deleted, not
/// carried out as a second switchover to the old holder once it streams again. A
/// request written after the key was gone is the operator's own and is carried out.
#[test]
fn a_served_failover_request_is_deleted_by_the_next_leader_not_carried_out() {
    for (rev, served) in [(19, true), (25, false)] {
        let mut c = follower_with_poll(None);
        let p = take_over(&mut c, 103.5);
        assert_eq!(
            p.actions,
            vec![Action::Promote { epoch: 21 }],
            "{}",
            p.reason
        );
        let mut v = view(
            30,
            Some(key("pg2", 21, 0xB)),
            vec![
                member("pg1", 28, "replica", 1000, None),
                member("pg2", 27, "primary", 1000, None),
            ],
        );
        v.failover = failover(None, Some("pg1"), rev);
        let mut mine = pg(PgRole::Primary, 1000, None);
        mine.standbys = vec![standby("pg1", true, false, 1000)];
        let p = c.step(t(104.0), &renewed(v, mine, 103.9));
        let text = p.reason.to_string();
        if served {
            no_hand_over(&p);
            assert!(
                p.actions.contains(&Action::ClearFailover {
                    epoch: 21,
                    mod_revision: rev
                }),
                "{:?} ({text})",
                p.actions
            );
            assert!(
                text.contains("refused") && text.contains("served"),
                "{text}"
            );
        } else {
            assert_eq!(
                p.actions,
                vec![Action::StartJob(JobKind::Stop)],
                "revision {rev}: {text}"
            );
        }
    }
}

/// The others judge a requested candidate by what it published, with the checks
/// it applies to itself: one on an older timeline than `history`'s newest (it
/// cannot take the key) is not waited for (simulation seed 1725160487: a
/// switchover's named replica left on the old timeline had four nodes wait a ttl);
/// nor one further behind the old leader's position than `maximum_lag_on_failover`.
/// Only a publication fresher than the vacancy is judged so (review LOW-1: a
/// clean hand-over's candidate catches up to the shutdown checkpoint at the end).
#[test]
fn a_requested_candidate_that_cannot_take_the_key_is_not_waited_for() {
    let entry = HistoryEntry {
        timeline: 1,
        lsn: 400,
        reason: "r".into(),
        timestamp: "t".into(),
        new_leader: "pg1".into(),
    };
    let on = |m: Member, tl: u32| {
        let mut m = m;
        m.info.timeline = tl;
        m
    };
    let members = |pg2_tl: u32| {
        vec![
            on(member("pg1", 8, "primary", 1000, None), 2),
            on(member("pg2", 21, "replica", 900, None), pg2_tl),
            on(member("pg3", 21, "replica", 1000, None), 2),
        ]
    };
    for (pg2_tl, waits) in [(2, true), (1, false)] {
        let mut v = view(20, None, members(pg2_tl));
        v.history = vec![entry.clone()];
        v.failover = failover(None, Some("pg2"), 19);
        let p = pg3_in_a_vacancy(v, 2, 1000);
        let r = p.reason.to_string();
        assert_eq!(
            r.contains("pg2 is the requested candidate"),
            waits,
            "pg2 on timeline {pg2_tl}: {r}"
        );
        let want = if waits { vec![] } else { vec![Action::Acquire] };
        assert_eq!(p.actions, want, "pg2 on timeline {pg2_tl}: {r}");
    }
    // Judged only on a publication fresher than the vacancy (revision 20): one
    // from before it may predate the candidate's catching up, and is waited for.
    let mut stale = members(1);
    stale[1].mod_revision = 19;
    let mut v = view(20, None, stale);
    v.history = vec![entry.clone()];
    v.failover = failover(None, Some("pg2"), 19);
    let p = pg3_in_a_vacancy(v, 2, 1000);
    no_acquire_nor_promote(&p);
    assert!(
        p.reason
            .to_string()
            .contains("pg2 is the requested candidate"),
        "{}",
        p.reason
    );
    // The old leader published 2 MiB + 1000; pg3 is there, pg2 at 1000 is further
    // behind than maximum_lag_on_failover (1 MiB); at 1 MiB + 1000 it is not.
    let top = (2 << 20) + 1000;
    for (pg2_at, waits) in [(top - (1 << 20), true), (1000, false)] {
        let mut v = view(
            20,
            None,
            vec![
                member("pg1", 8, "primary", top, None),
                member("pg2", 21, "replica", pg2_at, None),
                member("pg3", 21, "replica", top, None),
            ],
        );
        v.failover = failover(None, Some("pg2"), 19);
        let p = pg3_in_a_vacancy(v, 1, top);
        let r = p.reason.to_string();
        assert_eq!(
            r.contains("pg2 is the requested candidate"),
            waits,
            "pg2 at {pg2_at}: {r}"
        );
        let want = if waits { vec![] } else { vec![Action::Acquire] };
        assert_eq!(p.actions, want, "pg2 at {pg2_at}: {r}");
    }
}

/// S4 with the marker: an agent that stopped in the middle of its hand-over finds,
/// at start-up, the key of its own epoch still there and its own marker for it: it
/// never adopts that epoch (its PostgreSQL must not run as primary under it again).
#[test]
fn a_key_whose_epoch_my_marker_released_is_never_adopted() {
    let mut c = core("pg1", None);
    let mut v = view(10, Some(key("pg1", 5, 0xA)), vec![]);
    v.release = Some(Ok(release(5, 500, Some("pg2"))));
    let p = c.step(t(100.0), &obs(v, pg(PgRole::Stopped, 500, None)));
    assert_eq!(
        p.actions,
        vec![Action::Revoke { lease: 0xA }],
        "{}",
        p.reason
    );
    assert_eq!(c.lease_to_renew(), None);
}

/// Review F2: the leader records the fork into its timeline in `history` whenever
/// `history` does not know it, not only right after `pg_promote()`: an append lost
/// with its answer, or an entry an operator deleted, is planned again each
/// iteration until a read shows it. The switch point is the shell's to read (from
/// PostgreSQL's timeline history file).
#[test]
fn the_leader_appends_the_fork_history_lacks_until_it_is_there() {
    let entry = |tl: u32| HistoryEntry {
        timeline: tl,
        lsn: 400,
        reason: "r".into(),
        timestamp: "t".into(),
        new_leader: "pg1".into(),
    };
    let appends = |p: &Plan| -> Vec<Action> {
        p.actions
            .iter()
            .filter(|a| matches!(a, Action::AppendHistory { .. }))
            .cloned()
            .collect()
    };
    let mut c = adopted_leader(100.0);
    for (i, (tl, history, want)) in [
        // Timeline 1 needs no entry (initdb's).
        (1, vec![], None),
        // Promoted to 2, the append lost: planned, and again next iteration.
        (2, vec![], Some(2)),
        (2, vec![], Some(2)),
        // The read shows it: nothing more.
        (2, vec![entry(1)], None),
        // A later fork (3) while history knows only the first.
        (3, vec![entry(1)], Some(3)),
        (3, vec![entry(1), entry(2)], None),
    ]
    .into_iter()
    .enumerate()
    {
        let mut v = view(30 + i as i64, Some(key("pg1", 5, 0xA)), vec![]);
        v.history = history;
        let mut g = pg(PgRole::Primary, 500, None);
        g.timeline = tl;
        let mut o = obs(v, g);
        let at = 101.0 + i as f64;
        o.renewal = counted(0xA, at);
        let p = c.step(t(at + 0.01), &o);
        let expect: Vec<Action> = want
            .map(|timeline| Action::AppendHistory { epoch: 5, timeline })
            .into_iter()
            .collect();
        assert_eq!(appends(&p), expect, "step {i}: {}", p.reason);
    }
}

/// Issue 13 item 4 (seen in bench/failover_dist: a 1.2 s election): a rival's
/// position written after the DELETE is fresh (DESIGN §3a), even when it came
/// before this node's own first read of the vacancy. Judged against that read, pg3's
/// key (written at 22, after the DELETE at 21, before pg2's read at 25) never
/// counted, and pg3, having published once, had no reason to publish again.
#[test]
fn a_position_written_after_the_delete_is_fresh_whatever_my_first_read() {
    let step = |deleted_revision: Option<i64>| {
        let mut c = follower_with_poll(None);
        let members = vec![
            member("pg1", 8, "primary", 1000, None),
            member("pg2", 9, "replica", 1000, None),
            member("pg3", 22, "replica", 900, None),
        ];
        let mut o = obs(view(25, None, members), pg(PgRole::Replica, 1000, None));
        o.leader_deleted_at = Some(t(103.2));
        o.leader_deleted_revision = deleted_revision;
        o.lease_poll = Some(lease_poll(0xA, 103.25, None, None, false));
        c.step(t(103.3), &o)
    };
    let p = step(Some(21));
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    // Without the DELETE's revision (no watch event): this read is the bound, and
    // pg3's key is older than it.
    let p = step(None);
    assert!(
        p.reason
            .to_string()
            .contains("waiting for pg3 to publish a fresh position"),
        "{}",
        p.reason
    );
    // A revision that is not of the key we followed (older than its epoch) is not used.
    let p = step(Some(4));
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
}

// ----- The residual race of the release-marker work (DESIGN §1 step 4, S3) -----

/// pg2 polled pg1's lease at 102 s (E_max 103 s). pg1's key expires at 103.2 s (on
/// time for pg2), pg3 takes it at 103.3 s (epoch 12, lease 0xC), and an operator's
/// `etcdctl del` removes pg3's key at 103.5 s: a whole leadership between two of
/// pg2's reads, with pg3's lease (and pg3's primary) alive. pg2's read at 104 s
/// shows the key absent; the watch reported all three changes; its agent's first
/// DELETE is pg1's (103.2 s).
fn missed_leadership(c: &mut Core, marker: Option<ReleaseMarker>) -> Plan {
    let mut v = view(14, None, three());
    v.release = marker.map(Ok);
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(13);
    o.leader_changes = vec![
        deleted(103.2, 11),
        put(103.3, "pg3", 12, 0xC),
        deleted(103.5, 13),
    ];
    o.lease_poll = poll(0xA, 104.05, None);
    c.step(t(104.1), &o)
}

/// The residual case docs/failure-modes.md named: before the fix pg2 judged the
/// vacancy on its poll of pg1's lease (on time: 103.2 >= E_max, poll 1.2 s old) and
/// took the key at once, beside pg3's possibly writable primary. Now the watch's PUT
/// makes the vacancy pg3's: its lease must be seen gone, and after the win the
/// promotion waits the early-expiry delay from pg3's DELETE (ttl + R, pg3 published
/// no watchdog).
#[test]
fn a_leadership_missed_between_two_reads_and_deleted_early_waits_the_promote_delay() {
    let mut c = follower_with_poll(None);
    let p = missed_leadership(&mut c, None);
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    // The lease to confirm gone is pg3's, never polled before.
    assert_eq!(c.lease_to_poll(), Some(0xC));
    // The operator's delete left pg3's lease alive: wait (DESIGN §1 step 4).
    let mut o = obs(view(15, None, three()), pg(PgRole::Replica, 1000, None));
    o.lease_poll = poll(0xC, 106.0, Some(27));
    let p = c.step(t(106.05), &o);
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    assert!(p.reason.to_string().contains("still lives"), "{}", p.reason);
    // It expired: take the key, then wait ttl + R = 31 s from pg3's DELETE (103.5).
    let mut o = obs(view(16, None, three()), pg(PgRole::Replica, 1000, None));
    o.lease_poll = poll(0xC, 134.0, None);
    let p = c.step(t(134.05), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), three()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 30, 134.1, 21);
    let p = c.step(t(134.2), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 });
    let p = c.step(
        t(134.3),
        &obs(
            view(22, Some(key("pg2", 21, 0xB)), three()),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    delayed(&p);
    match p.reason {
        Reason::PromoteDelayed { remaining, .. } => assert!(
            (remaining.as_secs_f64() - (103.5 + 31.0 - 134.3)).abs() < 1e-6,
            "{remaining:?}"
        ),
        other => panic!("{other}"),
    }
}

/// The missed leadership ended cleanly: pg3's release marker of epoch 12, bound to
/// its DELETE, proves the hand-over (the exception of DESIGN §1 step 4), and a
/// marker of pg1's epoch would not (it would have been taken by pg3's acquire).
#[test]
fn a_missed_leadership_released_with_its_own_marker_skips_the_delay() {
    let mut c = follower_with_poll(None);
    let mut o_marker = release(12, 900, None);
    o_marker.by = "pg3".into();
    let mut v = view(14, None, three());
    v.release = Some(Ok(o_marker.clone()));
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.leader_changes = vec![
        deleted(103.2, 11),
        put(103.3, "pg3", 12, 0xC),
        deleted(103.5, 13),
    ];
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(13);
    o.lease_poll = poll(0xA, 104.05, None);
    c.step(t(104.1), &o);
    let mut v = view(15, None, three());
    v.release = Some(Ok(o_marker.clone()));
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.lease_poll = poll(0xC, 104.5, None);
    let p = c.step(t(104.55), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut v = view(21, Some(key("pg2", 21, 0xB)), three());
    v.release = Some(Ok(ReleaseMarker {
        taken_by: Some("pg2".into()),
        ..o_marker
    }));
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, None));
    o.acquire = won(0xB, 30, 104.6, 21);
    c.step(t(104.7), &o);
    let p = c.step(t(104.8), &obs(v, pg(PgRole::Replica, 1000, None)));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );

    // pg1's marker (epoch 5) proves nothing about pg3's DELETE.
    let mut c = follower_with_poll(None);
    let p = missed_leadership(&mut c, Some(release(5, 900, None)));
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
}

/// A PUT that arrives in an observation after the read that showed the vacancy (the
/// watch trails the read) still counts: here it arrives with the win, and the
/// promotion waits the delay from the missed leadership's DELETE.
#[test]
fn a_missed_leadership_reported_only_after_the_win_still_delays_the_promotion() {
    let mut c = follower_with_poll(None);
    let mut o = obs(view(14, None, two()), pg(PgRole::Replica, 1000, None));
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(11);
    o.leader_changes = vec![deleted(103.2, 11)];
    o.lease_poll = poll(0xA, 104.05, None);
    let p = c.step(t(104.1), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), two()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_changes = vec![
        put(103.3, "pg3", 12, 0xC),
        deleted(103.5, 13),
        put(104.15, "pg2", 21, 0xB),
    ];
    o.acquire = won(0xB, 30, 104.15, 21);
    c.step(t(104.2), &o);
    let p = c.step(
        t(104.3),
        &obs(
            view(22, Some(key("pg2", 21, 0xB)), two()),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    delayed(&p);
}

/// The gap case: the watch broke and was reopened after the last read that showed
/// pg1's key, so a leadership may have come and gone unseen. The expiry looks on
/// time by pg2's poll, but the vacancy is untimeable (S3), counted from the read
/// that showed it. A read after the reopen that still shows pg1's key (same create
/// revision) proves nothing was missed: then the on-time expiry promotes at once.
#[test]
fn a_gap_in_the_watch_makes_a_vacancy_untimeable_unless_a_read_closes_it() {
    let take = |gap_closed: bool| {
        let mut c = follower_with_poll(None);
        // follower_with_poll read pg1's key at revision 10. The watch broke after
        // it and was reopened at revision 13, after a read at 12...
        let members = vec![
            member("pg1", 8, "primary", 1000, None),
            member("pg2", 9, "replica", 1000, None),
        ];
        if gap_closed {
            // ... that still showed pg1's key (create revision 5): nothing missed.
            let mut o = obs(
                view(12, Some(key("pg1", 5, 0xA)), members.clone()),
                pg(PgRole::Replica, 1000, Some("pg1")),
            );
            o.watch_from = None;
            o.lease_poll = poll(0xA, 102.5, Some(0));
            c.step(t(102.55), &o);
        }
        let mut o = obs(view(20, None, members), pg(PgRole::Replica, 1000, None));
        o.watch_from = Some(13);
        o.leader_deleted_at = Some(t(103.2));
        o.leader_changes = vec![deleted(103.2, 14)];
        o.lease_poll = poll(0xA, 103.25, None);
        let p = c.step(t(103.3), &o);
        assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
        let mut o = obs(
            view(21, Some(key("pg2", 21, 0xB)), vec![]),
            pg(PgRole::Replica, 1000, None),
        );
        o.acquire = won(0xB, 30, 103.35, 21);
        c.step(t(103.4), &o);
        c.step(
            t(103.5),
            &obs(
                view(22, Some(key("pg2", 21, 0xB)), vec![]),
                pg(PgRole::Replica, 1000, None),
            ),
        )
    };
    let p = take(false);
    delayed(&p);
    match p.reason {
        // From the read (103.3), not from the DELETE pg2 saw (103.2).
        Reason::PromoteDelayed { remaining, .. } => assert!(
            (remaining.as_secs_f64() - (103.3 + 31.0 - 103.5)).abs() < 1e-6,
            "{remaining:?}"
        ),
        other => panic!("{other}"),
    }
    let p = take(true);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// A gap while the vacancy is open: judged on time at first, it becomes untimeable
/// at the first read after a gap (a leadership may have come and gone inside it).
#[test]
fn a_gap_in_the_watch_during_a_vacancy_makes_it_untimeable() {
    let mut c = follower_with_poll(None);
    let members = two();
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(14);
    o.leader_changes = vec![deleted(103.2, 14)];
    o.lease_poll = poll(0xA, 103.25, None);
    c.step(t(103.3), &o);
    // The watch broke after the read at 20; reopened at 26 after a read at 25.
    let mut o = obs(
        view(25, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.watch_from = None;
    c.step(t(105.0), &o);
    let mut o = obs(
        view(30, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.watch_from = Some(26);
    let p = c.step(t(107.0), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(31, Some(key("pg2", 31, 0xB)), members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 30, 107.05, 31);
    c.step(t(107.1), &o);
    let p = c.step(
        t(107.2),
        &obs(
            view(32, Some(key("pg2", 31, 0xB)), members),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    delayed(&p);
}

// ----- Finding R1: a missed leadership never hides an earlier early DELETE -----

/// The promotion instant a `PromoteDelayed` plan taken at `now` waits for.
fn promote_at(p: &Plan, now: f64) -> f64 {
    delayed(p);
    match &p.reason {
        Reason::PromoteDelayed { remaining, .. } => now + remaining.as_secs_f64(),
        r => panic!("{r}"),
    }
}

/// pg2 (the review's N, no watchdog of its own) reads pg1's key (A: epoch 5, lease
/// 0xA, watchdog 13) and polls its lease at 99.9 s: TTL 29 s, so E_max = 128.9 s.
fn follower_of_a() -> Core {
    let mut c = core("pg2", None);
    let members = vec![
        member("pg1", 8, "primary", 1000, Some(13)),
        member("pg2", 9, "replica", 1000, None),
    ];
    let v = view(10, Some(key("pg1", 5, 0xA)), members);
    c.step(
        t(99.8),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = poll(0xA, 99.9, Some(29));
    c.step(t(99.95), &o);
    c
}

/// A member that held (or holds) the key with `lease`, watchdog `wd`.
fn holder(name: &str, rev: i64, wd: u32, lease: LeaseId) -> Member {
    let mut m = member(name, rev, "replica", 1000, Some(wd));
    m.info.leader_lease = Some(lease);
    m
}

/// After the vacancy pg2 is in: the lease `lease` is seen gone, pg2 acquires at
/// `at` and wins (epoch 21), its rivals behind it. Returns the plan of the step after the win and its
/// instant. `marker` is shown by every read (taken by pg2's win).
fn acquire_and_win(
    c: &mut Core,
    members: Vec<Member>,
    lease: LeaseId,
    at: f64,
    marker: Option<ReleaseMarker>,
) -> (Plan, f64) {
    // Every rival published a fresh position (after the DELETE), behind pg2's.
    let members: Vec<Member> = members
        .into_iter()
        .map(|mut m| {
            if m.name != "pg2" {
                m.mod_revision = 19;
                m.info.xlog_location = 900;
            }
            m
        })
        .collect();
    let mut v = view(20, None, members.clone());
    v.release = marker.clone().map(Ok);
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.lease_poll = poll(lease, at, None);
    let p = c.step(t(at + 0.05), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut v = view(21, Some(key("pg2", 21, 0xB)), members);
    v.release = marker.map(|m| {
        Ok(ReleaseMarker {
            taken_by: Some("pg2".into()),
            ..m
        })
    });
    let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, None));
    o.acquire = won(0xB, 30, at + 0.1, 21);
    let p = c.step(t(at + 0.15), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 });
    v.revision = 22;
    (
        c.step(t(at + 0.2), &obs(v, pg(PgRole::Replica, 1000, None))),
        at + 0.2,
    )
}

/// The review's scenario (ttl 30, loop 2, retry 1, margin 2, budget 1). A (pg1,
/// W 13) makes its last counted renewal at 99.5 s and stalls; pg2 read A's key at
/// 99.9 s. A's lease is revoked early at 100.1 s (etcd #15247); C (pg3, W 5) takes
/// the key at 100.2 s and releases it at 100.5 s without promoting (its watchdog
/// could not be armed), its member key still naming its lease. pg2's read at 101.9 s
/// shows the key absent; the watch reported DEL(A), PUT(C), DEL(C). Before the fix
/// the vacancy was C's alone: promotion at 100.5 + 2·5 + 1 + 2 = 113.5 s, while A,
/// dying just before its F = 112.5 s, is reset only at about 125.5 s (two writable
/// primaries). The delay must cover A: A's DELETE + 2·13 + R + M = 129.1 s. A
/// release marker of C's epoch proves C's clean exit, not A's fence: no skip.
#[test]
fn r1_a_missed_leadership_after_an_early_delete_still_waits_for_the_tracked_leader() {
    for marker in [None, Some(12)] {
        let mut c = follower_of_a();
        let members = vec![
            member("pg1", 8, "primary", 1000, Some(13)),
            member("pg2", 9, "replica", 1000, None),
            holder("pg3", 12, 5, 0xC),
        ];
        let marker = marker.map(|e| ReleaseMarker {
            by: "pg3".into(),
            ..release(e, 900, None)
        });
        let mut v = view(14, None, members.clone());
        v.release = marker.clone().map(Ok);
        let mut o = obs(v, pg(PgRole::Replica, 1000, None));
        o.leader_deleted_at = Some(t(100.1));
        o.leader_deleted_revision = Some(13);
        o.leader_changes = vec![
            deleted(100.1, 11),
            put(100.2, "pg3", 12, 0xC),
            deleted(100.5, 13),
        ];
        o.lease_poll = poll(0xA, 101.9, None);
        let p = c.step(t(101.95), &o);
        assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
        // The lease still to be seen gone is C's, the newest holder's.
        assert_eq!(c.lease_to_poll(), Some(0xC));
        let (p, now) = acquire_and_win(&mut c, members, 0xC, 104.0, marker.clone());
        let at = promote_at(&p, now);
        assert!(
            at >= 100.1 + 2.0 * 13.0 + 1.0 + 2.0,
            "marker {marker:?}: promotes at {at}, before A's own bound 129.1"
        );
    }
}

/// The same with two missed leaderships: pg1's key (W 5) expires on time for pg2
/// (103.2 s >= E_max 103 s); B (pg3, W 13) takes it at 103.3 s and loses it early
/// at 103.4 s (stalled, its lease revoked); C (pg4, W 5) takes it at 103.5 s and
/// releases it at 103.6 s without promoting. The watch keeps the newest, C: before
/// the fix B's larger W was lost (promotion at 103.6 + 13 = 116.6 s). The delay must
/// cover B: 103.4 + 2·13 + R + M = 132.4 s.
#[test]
fn r1_two_missed_leaderships_wait_for_the_older_ones_watchdog_too() {
    let mut c = follower_with_poll(Some(5));
    let members = vec![
        member("pg1", 8, "primary", 1000, Some(5)),
        member("pg2", 9, "replica", 1000, None),
        holder("pg3", 12, 13, 0xC),
        holder("pg4", 14, 5, 0xD),
    ];
    let mut o = obs(
        view(16, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.2));
    o.leader_deleted_revision = Some(15);
    o.leader_changes = vec![
        deleted(103.2, 11),
        put(103.3, "pg3", 12, 0xC),
        deleted(103.4, 13),
        put(103.5, "pg4", 14, 0xD),
        deleted(103.6, 15),
    ];
    o.lease_poll = poll(0xA, 104.05, None);
    let p = c.step(t(104.1), &o);
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    assert_eq!(c.lease_to_poll(), Some(0xD));
    let (p, now) = acquire_and_win(&mut c, members, 0xD, 106.0, None);
    let at = promote_at(&p, now);
    assert!(
        at >= 103.4 + 2.0 * 13.0 + 1.0 + 2.0,
        "promotes at {at}, before B's own bound 132.4"
    );
}

/// The pre-existing path "a member publishes a newer epoch" (seed 16393) had the
/// same replace-without-merge: pg2's vacancy of A (W 13, revoked early at 100.1 s)
/// is open, waiting for an answer about A's lease, when C (pg3, W 5) takes the key
/// at 100.4 s and releases it at 100.6 s, publishing its epoch 12. pg2's read at
/// 102.35 s replaced A's vacancy by C's, from now: promotion at 102.35 + 13 =
/// 115.35 s, before A's bound 129.1 s. Whether or not the watch reported C (here it
/// did; or it broke and no event came).
#[test]
fn r1_a_member_publishing_a_newer_epoch_keeps_the_open_early_vacancy_covered() {
    for watch_reported in [true, false] {
        let mut c = follower_of_a();
        let two = vec![
            member("pg1", 8, "primary", 1000, Some(13)),
            member("pg2", 9, "replica", 1000, None),
        ];
        let mut o = obs(view(11, None, two.clone()), pg(PgRole::Replica, 1000, None));
        o.leader_deleted_at = Some(t(100.1));
        o.leader_deleted_revision = Some(11);
        o.leader_changes = vec![deleted(100.1, 11)];
        let p = c.step(t(100.35), &o);
        assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
        let mut c_member = holder("pg3", 12, 5, 0xC);
        c_member.info.epoch = Some(12);
        let mut members = two;
        members.push(c_member);
        let mut o = obs(
            view(14, None, members.clone()),
            pg(PgRole::Replica, 1000, None),
        );
        if watch_reported {
            o.leader_changes = vec![put(100.4, "pg3", 12, 0xC), deleted(100.6, 13)];
        } else {
            o.watch_from = None;
        }
        o.lease_poll = poll(0xA, 102.3, None);
        let p = c.step(t(102.35), &o);
        assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
        assert_eq!(c.lease_to_poll(), Some(0xC));
        let (p, now) = acquire_and_win(&mut c, members, 0xC, 104.0, None);
        let at = promote_at(&p, now);
        assert!(
            at >= 100.1 + 2.0 * 13.0 + 1.0 + 2.0,
            "watch reported {watch_reported}: promotes at {at}, before A's own bound 129.1"
        );
    }
}

// ---------------------------------------------------------------------------
// Simulation seed 253898: a winner that crashed during its promote delay and
// restarted adopted its own key and promoted at once, beside the old primary.
// ---------------------------------------------------------------------------

/// pg2 restarts (fresh core) and finds the key naming it (epoch 21, lease 0xB), won
/// before the restart; its PostgreSQL is a standby whose data carries epoch
/// `data_epoch`. It adopts through a counted renewal at 200 s: the core after it.
fn restarted_winner(data_epoch: Epoch) -> (Core, ClusterView, PgStatus) {
    // The row as this node's own primary under the key's lease would have written it.
    restarted_winner_with(core("pg2", None), data_epoch, Some(("pg2", 0xB)), None, 30)
}

/// `restarted_winner` with the core, the row's writer and lease, what pg2's own
/// member key (from before the restart) publishes as `leader_ttl_seen`, and the TTL
/// the adopting renewal's keepalive answers.
fn restarted_winner_with(
    mut c: Core,
    data_epoch: Epoch,
    row_by: Option<(&str, LeaseId)>,
    ttl_seen: Option<u32>,
    renewed_ttl: i64,
) -> (Core, ClusterView, PgStatus) {
    let mut own = member("pg2", 9, "replica", 1000, None);
    own.info.leader_ttl_seen = ttl_seen;
    let members = vec![member("pg1", 8, "primary", 1000, None), own];
    let v = view(30, Some(key("pg2", 21, 0xB)), members);
    let mut rep = pg(PgRole::Replica, 1000, None);
    rep.epoch = Some(data_epoch);
    rep.epoch_row.member = row_by.map(|(m, _)| m.to_string());
    rep.epoch_row.lease = row_by.map(|(_, l)| l);
    let p = c.step(t(200.0), &polled(obs(v.clone(), rep.clone()), 0xB, 200.0));
    assert!(c.renew_now(), "{}", p.reason);
    let mut o = obs(v.clone(), rep.clone());
    o.renewal = Some(Renewal {
        lease: 0xB,
        sent_at: t(200.0),
        outcome: RenewalOutcome::Counted { ttl: renewed_ttl },
    });
    let p = c.step(t(200.01), &o);
    assert!(
        matches!(p.reason, Reason::Other(ref s) if s.contains("adopted")),
        "{}",
        p.reason
    );
    (c, v, rep)
}

/// DESIGN §1 step 4 and S3 (seed 253898): the promote delay of a key won after an
/// early DELETE lives only in memory. A winner that crashes during it and restarts
/// adopts the key (S4) with nothing to tell whether the delay passed, while the old
/// primary may still accept writes. Its data's epoch is older than the key's: it
/// never promoted under this leadership, so it waits the whole conservative delay
/// (`ttl + R` = 31 s here: no watchdog known) from the adoption before promoting.
#[test]
fn seed_253898_a_restarted_winner_that_never_promoted_waits_the_delay_before_promoting() {
    let (mut c, v, rep) = restarted_winner(5);
    for at in [200.1, 201.0, 215.0, 230.9] {
        let p = c.step(t(at), &renewed(v.clone(), rep.clone(), at));
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::Promote { .. })),
            "promoted at {at} s: {:?} ({})",
            p.actions,
            p.reason
        );
        assert!(
            matches!(p.reason, Reason::PromoteDelayed { .. }),
            "{}",
            p.reason
        );
        assert!(c.leadership().is_some(), "keeps the key");
    }
    let p = c.step(t(231.1), &renewed(v, rep, 231.1));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// The other side of the same rule: data written under the key's own epoch proves
/// this node promoted under it before the restart, so the delay had passed then
/// (S3): it promotes again at once (a leader's quick host restart keeps its speed).
#[test]
fn seed_253898_a_restarted_winner_whose_data_carries_the_key_epoch_promotes_at_once() {
    let (mut c, v, rep) = restarted_winner(21);
    // No adoption delay; only the confirming renewal sent `L_w + R + M` (5 s) after
    // the adoption at 200.01 (review of seed 9982, and of 88463a7 F2) comes first.
    let p = c.step(t(200.1), &renewed(v.clone(), rep.clone(), 200.1));
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    let p = c.step(t(204.9), &renewed(v.clone(), rep.clone(), 204.9));
    assert!(p.actions.is_empty(), "{:?} {}", p.actions, p.reason);
    let p = c.step(t(205.1), &renewed(v, rep, 205.1));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

// ---------------------------------------------------------------------------
// Seed 253898, the fresh-eyes review of its fix: each test failed before its fix.
// ---------------------------------------------------------------------------

/// Steps a leader that has not promoted through `ats` (renewed each time) and
/// asserts it never promotes, then one step at `promote_at` that must promote.
fn promotes_only_at(c: &mut Core, v: &ClusterView, rep: &PgStatus, ats: &[f64], promote_at: f64) {
    for &at in ats {
        let p = c.step(t(at), &renewed(v.clone(), rep.clone(), at));
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::Promote { .. })),
            "promoted at {at} s: {:?} ({})",
            p.actions,
            p.reason
        );
        assert!(
            matches!(p.reason, Reason::PromoteDelayed { .. }),
            "at {at} s: {}",
            p.reason
        );
    }
    let p = c.step(t(promote_at), &renewed(v.clone(), rep.clone(), promote_at));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// Review item 1 (DESIGN §1 step 4, §5, S3): `ttl` was lowered to 10 while the old
/// leader kept its lease granted 30 s; pg2 won after an early DELETE, crashed in its
/// promote delay and restarted. Its memory of the old TTL is gone, its own lease
/// and the config say 10, but its member key from before the crash (bound to its
/// member lease, which outlived the restart) still publishes `leader_ttl_seen` 30:
/// the adoption waits 30 + R = 31 s, not 10 + R (before the fix it promoted at
/// 211 s, while the old primary may write until its horizon ~20 s later).
#[test]
fn seed_253898_review_an_adoption_waits_the_old_ttl_its_member_key_published() {
    let (mut c, v, rep) = restarted_winner_with(core_at_ttl10(), 5, None, Some(30), 10);
    promotes_only_at(&mut c, &v, &rep, &[200.1, 211.1, 220.0, 230.9], 231.1);
}

/// Review item 1, the same gap in `won` (on main): a candidate that restarted after
/// the old leader's key went (early: it never saw the lease) never polled the old
/// lease (revoked: no `grantedTTL`), and the old leader's member key no longer
/// publishes its TTL; another member, which polled the old lease, publishes
/// `leader_ttl_seen` 30. The winner waits 30 + R from the DELETE, not 10 + R.
#[test]
fn seed_253898_review_a_restarted_candidate_waits_the_ttl_another_member_saw() {
    let mut c = core_at_ttl10();
    let mut old = member("pg1", 8, "primary", 1000, None);
    old.info.leader_lease = Some(0xA);
    let mut saw = member("pg3", 7, "replica", 1000, None);
    saw.info.leader_ttl_seen = Some(30);
    // Not a candidate: no fresh position to wait for (DESIGN §3a).
    saw.info.tags.nofailover = true;
    let members = vec![old, member("pg2", 9, "replica", 1000, None), saw];
    let p = win_after_delete(&mut c, members, 100.0);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        (delayed_by(&p) - (100.0 + 31.0 - 100.3)).abs() < 1e-6,
        "{}",
        p.reason
    );
}

/// Review item 1, what a node publishes: the largest leader-lease TTL it saw itself,
/// steady while that lease lives (an idle cluster writes nothing: issue 13 item 5),
/// kept `ttl + R + M` past the last sighting, then the newer, shorter one.
#[test]
fn seed_253898_review_leader_ttl_seen_is_published_steady_and_decays() {
    let mut c = core_at_ttl10();
    let members = vec![
        member("pg1", 8, "primary", 1000, None),
        member("pg2", 9, "replica", 1000, None),
    ];
    let v = view(10, Some(key("pg1", 5, 0xA)), members.clone());
    c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    assert_eq!(c.leader_ttl_seen(), None, "nothing seen yet");
    for at in [102.0, 104.0, 106.0] {
        let mut o = obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1")));
        o.lease_poll = Some(lease_poll(0xA, at, Some(25), Some(30), true));
        c.step(t(at + 0.01), &o);
        assert_eq!(c.leader_ttl_seen(), Some(30), "at {at}");
    }
    // pg3 leads now, on a lease granted under the lowered ttl.
    let mut pg3 = member("pg3", 11, "primary", 1000, None);
    pg3.info.leader_lease = Some(0xC);
    pg3.info.leader_ttl = Some(10);
    let v = view(12, Some(key("pg3", 12, 0xC)), vec![members[1].clone(), pg3]);
    // Last sighting of the 30 s lease at 106.01: kept until 106.01 + 30 + R + M.
    for (at, want) in [(110.0, 30), (139.0, 30), (139.1, 10), (150.0, 10)] {
        c.step(
            t(at),
            &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg3"))),
        );
        assert_eq!(c.leader_ttl_seen(), Some(want), "at {at}");
    }
}

/// Review item 1, a chain: pg3 won after pg1's early DELETE and vanished before
/// promoting (its key deleted early too); pg1, on a lease granted 30 s before the
/// ttl was lowered to 10, may still write until its own horizon. pg2 knows pg3's
/// lease (10 s) but saw pg1's 30 s lease moments ago: it waits 30 + R, not 10 + R.
#[test]
fn seed_253898_review_a_vacancy_after_an_unpromoted_leader_waits_the_ttl_before_it() {
    let mut c = core_at_ttl10();
    let mut pg1 = member("pg1", 8, "primary", 1000, None);
    pg1.info.leader_lease = Some(0xA);
    pg1.info.leader_ttl = Some(30);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![pg1.clone()]);
    c.step(t(100.0), &obs(v, pg(PgRole::Replica, 1000, Some("pg1"))));
    let mut pg3 = member("pg3", 11, "replica", 1000, None);
    pg3.info.leader_lease = Some(0xC);
    pg3.info.leader_ttl = Some(10);
    let members = vec![pg1, member("pg2", 9, "replica", 1000, None), pg3];
    let v = view(12, Some(key("pg3", 12, 0xC)), members.clone());
    c.step(t(101.0), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.lease_poll = Some(lease_poll(0xC, 102.0, Some(9), Some(10), true));
    c.step(t(102.01), &o);
    // pg3's key goes early (E_max = 111); win_after_delete reports lease 0xA gone,
    // so no poll answers for 0xC: the vacancy's old TTL is pg3's known 10 s.
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.0));
    o.lease_poll = Some(lease_poll(0xC, 103.05, None, None, false));
    let p = c.step(t(103.1), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 10, 103.15, 21);
    let p = c.step(t(103.2), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 });
    let p = c.step(
        t(103.3),
        &obs(
            view(22, Some(key("pg2", 21, 0xB)), members),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    assert!(
        (delayed_by(&p) - (103.0 + 31.0 - 103.3)).abs() < 1e-6,
        "{}",
        p.reason
    );
}

/// Review item 2 (DESIGN §1 step 4, §3): the row shows the key's epoch number but
/// another member wrote it (an etcd wiped and refilled reuses revisions): no proof
/// that this node promoted under this leadership, so the adoption delay stays
/// (before the fix it promoted at once).
#[test]
fn seed_253898_review_a_row_of_the_same_epoch_by_another_member_keeps_the_delay() {
    let (mut c, v, rep) =
        restarted_winner_with(core("pg2", None), 21, Some(("pg9", 0xB)), None, 30);
    promotes_only_at(&mut c, &v, &rep, &[200.1, 230.9], 231.1);
}

/// Review item 2: this node's name but another lease: another leadership of ours
/// with the same epoch number (a wiped etcd): the delay stays too.
#[test]
fn seed_253898_review_a_row_of_the_same_epoch_under_another_lease_keeps_the_delay() {
    let (mut c, v, rep) =
        restarted_winner_with(core("pg2", None), 21, Some(("pg2", 0xC)), None, 30);
    promotes_only_at(&mut c, &v, &rep, &[200.1, 230.9], 231.1);
}

/// Review item 2, the other side: a row written by an older version (no lease
/// column) by this node under the key's epoch still lifts the delay.
#[test]
fn seed_253898_review_an_own_row_without_a_lease_lifts_the_delay() {
    let (mut c, v, mut rep) =
        restarted_winner_with(core("pg2", None), 21, Some(("pg2", 0)), None, 30);
    rep.epoch_row.lease = None;
    // After the confirming renewal `L_w + R + M` past the adoption (review of seed
    // 9982, and of 88463a7 F2).
    let p = c.step(t(205.1), &renewed(v, rep, 205.1));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// Review item 3 (DESIGN §3): a failed read of the epoch row on a running
/// PostgreSQL is no answer. The data was read at epoch 50 (the key's is 3: etcd
/// wiped); a later read fails: the refusal stands (before the fix the failed read
/// counted as "no row" and the node promoted on the regression).
#[test]
fn seed_253898_review_a_failed_epoch_read_keeps_the_regression_refusal() {
    let (mut c, v) = won_after_wipe(50, 3);
    let mut failed = pg(PgRole::Replica, 900, None);
    failed.epoch_row.unread = true;
    for at in [102.0, 112.0, 122.0] {
        let p = c.step(t(at), &renewed(v.clone(), failed.clone(), at));
        no_acquire_nor_promote(&p);
        assert!(
            matches!(p.reason, Reason::Refusing(ref s) if s.contains("epoch 50")),
            "{}",
            p.reason
        );
    }
    assert_eq!(c.local_epoch(), Some(50));
}

/// Review item 3: with no successful read in this run, a leader does not promote
/// until one succeeds (before the fix a failed read counted as "no row").
#[test]
fn seed_253898_review_a_leader_whose_epoch_row_never_read_waits_for_a_read() {
    let mut c = core("pg2", None);
    let mut failed = pg(PgRole::Replica, 900, None);
    failed.epoch_row.unread = true;
    let _ = c.step(t(100.0), &obs(view(4, None, vec![]), failed.clone()));
    let v = view(5, Some(key("pg2", 3, 0xB)), vec![]);
    let mut o = obs(v.clone(), failed.clone());
    o.acquire = won(0xB, 30, 101.0, 3);
    let p = c.step(t(101.0), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 3 });
    // After the early-expiry delay (a key never seen: 31 s from 100).
    for at in [132.0, 142.0] {
        let p = c.step(t(at), &renewed(v.clone(), failed.clone(), at));
        no_acquire_nor_promote(&p);
        assert!(
            matches!(p.reason, Reason::Waiting(ref s) if s.contains("tenure.epoch")),
            "{}",
            p.reason
        );
    }
    let mut read = pg(PgRole::Replica, 900, None);
    read.epoch = Some(2);
    let p = c.step(t(152.0), &renewed(v, read, 152.0));
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 3 }],
        "{}",
        p.reason
    );
}

/// Review item 1: a restarted node's first publish overwrites its member key from
/// before the crash, the one record of the old TTL a second crash would need: the
/// value read there at the first read of the run is carried on for one TTL (+ R + M)
/// and then decays.
#[test]
fn seed_253898_review_a_restarted_node_carries_on_its_own_published_ttl() {
    let mut c = core_at_ttl10();
    let mut own = member("pg2", 9, "replica", 1000, None);
    own.info.leader_ttl_seen = Some(30);
    let v = view(10, None, vec![own.clone()]);
    c.step(t(100.0), &obs(v, pg(PgRole::Replica, 1000, None)));
    assert_eq!(c.leader_ttl_seen(), Some(30));
    // Our own key now says what we published since (nothing): carried, not renewed.
    own.info.leader_ttl_seen = None;
    let v = view(11, None, vec![own]);
    for (at, want) in [(120.0, Some(30)), (132.9, Some(30)), (133.1, None)] {
        c.step(t(at), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
        assert_eq!(c.leader_ttl_seen(), want, "at {at}");
    }
}

/// Review item 1: the restarted winner adopts while its cluster read fails (an
/// adoption without a primary goes ahead on a failed read), so it sizes the delay
/// from the ttl in force (10 + R). The next read shows a member that saw the old
/// lease's 30 s: the delay grows to 30 + R, still counted from the adoption (before
/// the fix it promoted at 211 s).
#[test]
fn seed_253898_review_a_later_read_lengthens_an_adoption_delay() {
    let mut c = core_at_ttl10();
    let v = view(
        30,
        Some(key("pg2", 21, 0xB)),
        vec![member("pg2", 9, "replica", 1000, None)],
    );
    let mut rep = pg(PgRole::Replica, 1000, None);
    rep.epoch = Some(5);
    let p = c.step(t(200.0), &polled(obs(v, rep.clone()), 0xB, 200.0));
    assert!(c.renew_now(), "{}", p.reason);
    let mut o = obs(ClusterView::default(), rep.clone());
    o.cluster = Err("timed out".into());
    o.renewal = Some(Renewal {
        lease: 0xB,
        sent_at: t(200.0),
        outcome: RenewalOutcome::Counted { ttl: 10 },
    });
    let p = c.step(t(200.01), &o);
    assert!(
        matches!(p.reason, Reason::Other(ref s) if s.contains("adopted")),
        "{}",
        p.reason
    );
    let mut saw = member("pg3", 7, "replica", 1000, None);
    saw.info.leader_ttl_seen = Some(30);
    saw.info.tags.nofailover = true;
    let v = view(
        31,
        Some(key("pg2", 21, 0xB)),
        vec![member("pg2", 9, "replica", 1000, None), saw],
    );
    promotes_only_at(&mut c, &v, &rep, &[200.1, 211.1, 230.9], 231.1);
}

/// Seed 9982 as the shell drives it: pg1's agent restarts after a host reset while
/// the key still names it (lease 0xA, epoch 18) and its data already shows epoch 18;
/// the lease is nearly expired. A replica that polled it just before saw TTL 0, so
/// its `E_max` is that poll, and an early revoke right after an adopting renewal
/// would be judged on time while pg1's `F` lies `W` later. Each step carries what
/// the shell sends for the core's state: the renewal if `lease_to_renew`, the poll
/// (`ttl_left`) if `lease_to_poll`. Returns the actions planned, the leadership.
fn restart_on_a_lease_with(ttl_left: i64, poll_lag: f64) -> (Vec<Action>, Core) {
    restart_on_a_lease_for(ttl_left, poll_lag, 6, 0.01)
}

/// As `restart_on_a_lease_with`, `steps` iterations `dt` apart (one renewal each).
fn restart_on_a_lease_for(
    ttl_left: i64,
    poll_lag: f64,
    steps: usize,
    dt: f64,
) -> (Vec<Action>, Core) {
    let mut c = core("pg1", Some(3));
    let v = view(40, Some(key("pg1", 18, 0xA)), vec![]);
    let mut rep = pg(PgRole::Replica, 1000, None);
    rep.epoch = Some(18);
    rep.epoch_row.member = Some("pg1".into());
    rep.epoch_row.lease = Some(0xA);
    let mut actions = Vec::new();
    let mut now = 39.09;
    for _ in 0..steps {
        let mut o = obs(v.clone(), rep.clone());
        if let Some((lease, _)) = c.lease_to_renew() {
            o.renewal = counted(lease, now);
            // A leader's shell pets right after a counted renewal (`pet_on_renewal`)
            // and reports it in the same observation.
            if c.leadership().is_some() {
                o.pet = Some(PetReport {
                    at: t(now + 0.001),
                    outcome: PetOutcome::Done,
                });
            }
        }
        if let Some(lease) = c.lease_to_poll() {
            o.lease_poll = Some(LeasePoll {
                lease,
                sent_at: t(now - poll_lag),
                ttl: Some(ttl_left),
                granted_ttl: Some(7),
                has_keys: true,
            });
        }
        let p = c.step(t(now + 0.005), &o);
        actions.extend(p.actions.iter().cloned());
        if let Some(pet) = p.actions.iter().find_map(|a| match a {
            Action::PetWatchdog { .. } => Some(PetReport {
                at: t(now + 0.006),
                outcome: PetOutcome::Done,
            }),
            _ => None,
        }) {
            let mut o = obs(v.clone(), rep.clone());
            o.pet = Some(pet);
            let p = c.step(t(now + 0.007), &o);
            actions.extend(p.actions.iter().cloned());
        }
        now += dt;
    }
    (actions, c)
}

#[test]
fn seed_9982_an_adoption_never_resurrects_a_lease_a_replica_counts_as_running_out() {
    // TTL 0 at the poll: no renewal, no pet, no promotion; the lease is revoked
    // (no local primary runs) and the node competes afresh.
    let (actions, c) = restart_on_a_lease_with(0, 0.0);
    assert!(c.leadership().is_none(), "{actions:?}");
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. } | Action::PetWatchdog { .. })),
        "{actions:?}"
    );
    assert!(
        actions.contains(&Action::Revoke { lease: 0xA }),
        "{actions:?}"
    );
    // TTL 4 s: 4 < (s - q) + L_w + R + 1 s = 4 s + the 5 ms to the renewal.
    let (actions, c) = restart_on_a_lease_with(4, 0.0);
    assert!(c.leadership().is_none(), "{actions:?}");
    // A poll sent 3.1 s before (more than L_w + R): no fresh prediction, no adoption.
    let (actions, c) = restart_on_a_lease_with(25, 3.1);
    assert!(c.leadership().is_none(), "{actions:?}");
    assert!(!actions.iter().any(|a| matches!(a, Action::Promote { .. })));
    // The quick restart of a leader whose lease has plenty left still adopts (its
    // data shows the key's epoch: no adoption delay).
    let (actions, c) = restart_on_a_lease_with(5, 0.0);
    assert!(c.leadership().is_some(), "{actions:?}");
}

/// Review of the seed 9982 fix: the adopter's own poll proves nothing about what a
/// replica polled before it. An etcd leader change resets every lease to its full
/// TTL (DESIGN §1 step 3) and etcd #17642 reports a bogus TTL, so a poll showing
/// 7 s (or 9223372036 s) can follow a replica's poll that saw TTL 0. With no primary
/// running, the adopter writes only after a counted renewal sent `L_w + R + M` (5 s
/// here: loop 2, retry 1, margin 2; `M` for the two hosts' clock-rate drift, review
/// of 88463a7 F2) after the adoption: a replica's poll served before the adopting
/// renewal is stale by then, and a DELETE it could judge on time came before the
/// write. Before this, it promoted within 10 ms of adopting; before F2's fix, 3 s
/// after.
#[test]
fn seed_9982_review_an_adopter_with_no_primary_writes_only_after_a_later_renewal() {
    for ttl in [5, 7, 9_223_372_036] {
        // 60 steps 0.1 s apart from 39.09: the adoption at 39.295.
        let (actions, c) = restart_on_a_lease_for(ttl, 0.0, 60, 0.1);
        assert!(c.leadership().is_some(), "TTL {ttl}: {actions:?}");
        let promote_at = actions
            .iter()
            .position(|a| matches!(a, Action::Promote { .. }));
        assert!(
            promote_at.is_some(),
            "TTL {ttl}: never promoted: {actions:?}"
        );
        // Up to the renewal sent at 44.19 (before 39.295 + 5 s), none.
        let (early, _) = restart_on_a_lease_for(ttl, 0.0, 52, 0.1);
        assert!(
            !early.iter().any(|a| matches!(a, Action::Promote { .. })),
            "TTL {ttl}: promoted before a renewal sent L_w + R + M after the adoption: {early:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Review of the seed 253898 fix, finding R3: closed by the F2 rule (a holder never
// seen primary under its epoch is judged by the horizon bound, ttl + R).
// ---------------------------------------------------------------------------
/// R3 (safety, the "chain case with watchdogs" of the note's Left open, here with
/// one constant ttl): ttl 30, L_w 1, R 0.5, M 1, B 0.5 (S6 b: 2 < W <= 14.25). pg1
/// leads with W = 14 and stalls (SIGSTOP) after a pet at 101.9; its key is revoked
/// early at 102. pg3 (W = 3) wins and, before its promote delay ends, loses its key
/// early too (104) and its host. pg2 judges only pg3's vacancy: 2*3 + R + M = 7.5 s
/// from 104, promoting at 111.5 while pg1's PostgreSQL accepts writes until its
/// device fires at 101.9 + 14 = 115.9.
#[test]
fn review_r3_chain_with_a_shorter_watchdog_waits_for_the_first_leaders_reset() {
    let timing = Timing {
        ttl: 30,
        loop_wait: Duration::from_secs(1),
        retry_timeout: Duration::from_millis(500),
        safety_margin: Duration::from_secs(1),
        demote_budget: Duration::from_millis(500),
        promote_delay: None,
        maximum_lag_on_failover: 1 << 20,
        primary_start_timeout: Duration::from_secs(30),
        synchronous: SyncMode::Off,
        synchronous_node_count: 1,
        maximum_lag_on_syncnode: None,
    };
    let mut c = core_with("pg2", None, timing);
    let mut pg1 = member("pg1", 8, "primary", 1000, Some(14));
    pg1.info.leader_lease = Some(0xA);
    pg1.info.leader_ttl = Some(30);
    let v = view(10, Some(key("pg1", 5, 0xA)), vec![pg1.clone()]);
    c.step(
        t(100.0),
        &obs(v.clone(), pg(PgRole::Replica, 1000, Some("pg1"))),
    );
    let mut o = obs(v, pg(PgRole::Replica, 1000, Some("pg1")));
    o.lease_poll = Some(lease_poll(0xA, 101.5, Some(29), Some(30), true));
    c.step(t(101.51), &o);
    // pg1's key revoked early at 102; pg3 won it (lease 0xC, W 3).
    let mut pg3 = member("pg3", 11, "replica", 1000, Some(3));
    pg3.info.leader_lease = Some(0xC);
    pg3.info.leader_ttl = Some(30);
    let members = vec![pg1, member("pg2", 9, "replica", 1000, None), pg3];
    let v = view(12, Some(key("pg3", 12, 0xC)), members.clone());
    c.step(t(103.0), &obs(v.clone(), pg(PgRole::Replica, 1000, None)));
    let mut o = obs(v, pg(PgRole::Replica, 1000, None));
    o.lease_poll = Some(lease_poll(0xC, 103.5, Some(29), Some(30), true));
    c.step(t(103.51), &o);
    // pg3's key revoked early at 104 (E_max 132.5); its host is gone.
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(104.0));
    o.lease_poll = Some(lease_poll(0xC, 104.05, None, None, false));
    let p = c.step(t(104.1), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = won(0xB, 30, 104.15, 21);
    c.step(t(104.2), &o);
    let v = view(22, Some(key("pg2", 21, 0xB)), members);
    let rep = pg(PgRole::Replica, 1000, None);
    let mut promoted_at = None;
    let mut at = 104.3;
    while at < 140.0 {
        let p = c.step(t(at), &renewed(v.clone(), rep.clone(), at));
        if p.actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. }))
        {
            promoted_at = Some(at);
            break;
        }
        at += 0.1;
    }
    let promoted_at = promoted_at.expect("promotes eventually");
    // pg1's device fires at its last pet + W = 101.9 + 14 = 115.9.
    assert!(
        promoted_at >= 115.9,
        "promoted at {promoted_at:.1} s, before the stalled old primary's reset at 115.9 s"
    );
}

// ---------------------------------------------------------------------------
// Fresh-eyes review of the seed 253898 fix: each test failed before its fix.
// ---------------------------------------------------------------------------

/// R1 (liveness, DESIGN §1 step 4, §4: values others wrote may be garbage): a
/// `leader_ttl_seen` of 4e9 in another member's key sized the adoption delay
/// (~127 years) and was republished by the adopter (its own key then carried it
/// through restarts). A TTL above `MAX_TTL` is left out: the adoption waits
/// `ttl + R` (31 s) while the junk key stays, and publishes only its own 30.
#[test]
fn review_r1_a_huge_leader_ttl_seen_neither_blocks_an_adoption_nor_is_republished() {
    let mut c = core("pg2", None);
    let mut junk = member("pgx", 7, "replica", 0, Some(u32::MAX));
    junk.info.leader_ttl_seen = Some(4_000_000_000);
    junk.info.leader_ttl = Some(4_000_000_000);
    junk.info.tags.nofailover = true;
    let mut own = member("pg2", 9, "replica", 1000, None);
    // Our own key from before a restart (another writer may have garbled it too).
    own.info.leader_ttl_seen = Some(3601);
    let v = view(30, Some(key("pg2", 21, 0xB)), vec![own, junk]);
    let mut rep = pg(PgRole::Replica, 1000, None);
    rep.epoch = Some(5);
    // Seed 9982: the adopter polls its lease before the confirming renewal.
    let p = c.step(t(200.0), &polled(obs(v.clone(), rep.clone()), 0xB, 200.0));
    assert!(c.renew_now(), "{}", p.reason);
    let mut o = obs(v.clone(), rep.clone());
    o.renewal = counted(0xB, 200.0);
    c.step(t(200.01), &o);
    promotes_only_at(&mut c, &v, &rep, &[200.1, 230.9], 231.1);
    assert_eq!(c.leader_ttl_seen(), Some(30), "publishes only what it saw");
}

/// R1b: the same garbage in `won` (a takeover after an early DELETE, the old
/// leader without a watchdog figure): a floor above `MAX_TTL` is left out, the
/// delay is `ttl + R` from the DELETE (11 s at ttl 10), and it is not republished.
#[test]
fn review_r1b_a_huge_leader_ttl_seen_neither_blocks_an_early_takeover_nor_spreads() {
    let mut c = core_at_ttl10();
    let mut old = member("pg1", 8, "primary", 1000, None);
    old.info.leader_lease = Some(0xA);
    let mut junk = member("pgx", 7, "replica", 1000, None);
    junk.info.leader_ttl_seen = Some(4_000_000_000);
    junk.info.tags.nofailover = true;
    let members = vec![old, member("pg2", 9, "replica", 1000, None), junk];
    let p = win_after_delete(&mut c, members, 100.0);
    assert!(
        (delayed_by(&p) - (100.0 + 11.0 - 100.3)).abs() < 1e-6,
        "{}",
        p.reason
    );
    assert_eq!(c.leader_ttl_seen(), Some(10), "publishes only what it saw");
}

/// R2 (liveness, S3, DESIGN §3): a leader whose `tenure.epoch` row never reads in
/// this run (a standby replaying a crashed primary's lock on the table) waited for
/// good: `primary_start_timeout` (30 s) after its wait began (the promote delay's
/// end, 131 s), it gives the key up (fence, then a guarded release) without
/// promoting, naming the cause, so a member that can read its row may lead.
#[test]
fn review_r2_a_leader_whose_epoch_row_never_reads_gives_the_key_up() {
    let mut c = core("pg2", None);
    let mut failed = pg(PgRole::Replica, 900, None);
    failed.epoch_row.unread = true;
    let _ = c.step(t(100.0), &obs(view(4, None, vec![]), failed.clone()));
    let v = view(5, Some(key("pg2", 3, 0xB)), vec![]);
    let mut o = obs(v.clone(), failed.clone());
    o.acquire = won(0xB, 30, 101.0, 3);
    c.step(t(101.0), &o);
    for at in [132.0, 150.0, 162.0] {
        let p = c.step(t(at), &renewed(v.clone(), failed.clone(), at));
        no_acquire_nor_promote(&p);
        assert!(
            matches!(p.reason, Reason::Waiting(ref s) if s.contains("tenure.epoch")),
            "at {at}: {}",
            p.reason
        );
        assert!(c.leadership().is_some(), "at {at}");
    }
    let p = c.step(t(162.1), &renewed(v.clone(), failed.clone(), 162.1));
    no_acquire_nor_promote(&p);
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert!(
        matches!(p.reason, Reason::Fencing(ref s) if s.contains("tenure.epoch") && s.contains("primary_start_timeout")),
        "{}",
        p.reason
    );
    assert!(c.leadership().is_none(), "{}", p.reason);
    let mut o = renewed(v, failed, 162.2);
    o.renewal = None;
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(162.2), &o);
    assert!(
        p.actions.contains(&Action::Release {
            lease: 0xB,
            epoch: 3
        }),
        "{:?} ({})",
        p.actions,
        p.reason
    );
    no_acquire_nor_promote(&p);
}

/// Review of the caps (`MAX_TTL`): etcd's own `grantedTTL` of the leader's lease is
/// its real TTL, never another writer's garbage. A lease granted 7200 s before an
/// upgrade that lowered the ttl keeps its holder that long, so a replica's poll
/// must keep 7200, or an early DELETE is judged on a shorter bound. (It is not
/// published: members read a published value above the cap as garbage.)
#[test]
fn a_granted_ttl_above_the_cap_from_etcd_is_kept() {
    // 7200 + R = 7201 s from the DELETE at 103 (before: the cap left it out and the
    // winner waited the config's 10 + R).
    let p = early_takeover_after_ttl_lowered(None, Some(7200));
    assert!(
        (delayed_by(&p) - (103.0 + 7201.0 - 103.3)).abs() < 1e-6,
        "{}",
        p.reason
    );
}
