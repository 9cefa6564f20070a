//! An acquire txn whose answer did not come in time (`AcquireOutcome::Unanswered`):
//! the next read decides. Before, the shell revoked the lease (rarely sent, past
//! the deadline) and reported a failure; the read then showed a key naming the node
//! that it never took, which it revoked as a stale key of its own, and the next win
//! waited the promote delay for that early DELETE: a failover about `ttl` slower
//! whenever etcd answered the winner's txn late (docs/failure-modes.md). Pure.

#[path = "support/core_builders.rs"]
mod core_builders;

use core_builders::{core, key, lease_poll, member, obs, pg, t, view};
use tenure::core::Core;
use tenure::core::model::*;

/// pg2 follows pg1 (lease 0xA), polls it at 102 s (TTL 1: `E_max` 103 s), sees the
/// key deleted on time at 103.5 s and plans `Acquire`: the members of the read.
fn acquiring() -> (Core, Vec<Member>) {
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
    o.lease_poll = Some(lease_poll(0xA, 102.0, Some(1), None, true));
    c.step(t(102.01), &o);
    let mut o = obs(
        view(20, None, members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.leader_deleted_at = Some(t(103.5));
    o.lease_poll = Some(lease_poll(0xA, 103.55, None, None, false));
    let p = c.step(t(103.6), &o);
    assert_eq!(p.actions, vec![Action::Acquire], "{}", p.reason);
    (c, members)
}

/// A read that failed (etcd too slow again), PostgreSQL in `role`.
fn unread(role: PgRole) -> Observation {
    Observation::reading(Err("timed out".into()), pg(role, 1000, None))
}

/// The step after `Acquire`: the txn unanswered (lease 0xB) and the read failed.
fn unanswered_unread() -> Observation {
    let mut o = unread(PgRole::Replica);
    o.acquire = unanswered(0xB);
    o
}

/// The plan revokes `lease`.
fn assert_revokes(p: &Plan, lease: LeaseId) {
    assert!(
        p.actions.contains(&Action::Revoke { lease }),
        "{:?} {}",
        p.actions,
        p.reason
    );
}

/// The plan revokes nothing.
fn assert_no_revoke(p: &Plan) {
    assert!(
        !p.actions.iter().any(|a| matches!(a, Action::Revoke { .. })),
        "{:?} {}",
        p.actions,
        p.reason
    );
}

fn unanswered(lease: LeaseId) -> Option<AcquireOutcome> {
    Some(AcquireOutcome::Unanswered {
        lease,
        granted_ttl: 30,
        granted_at: t(103.65),
        why: "acquire txn on leader: timed out".into(),
    })
}

/// The read after it shows the key naming us on the lease granted for it: the txn
/// was applied, the answer lost. That is the win, with the on-time DELETE's
/// judgement: promotion at once, under the key's create revision.
#[test]
fn an_unanswered_acquire_the_read_shows_won_is_the_win() {
    let (mut c, members) = acquiring();
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members.clone()),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = unanswered(0xB);
    let p = c.step(t(104.0), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 }, "{:?}", p.actions);
    assert_no_revoke(&p);
    let l = c.leadership().expect("leadership from the unanswered win");
    assert_eq!((l.lease, l.epoch), (0xB, 21));
    // S1: the first horizon counts from the grant's send instant, as for `Won`.
    assert_eq!(l.renewed_at, t(103.65));
    let o = obs(
        view(22, Some(key("pg2", 21, 0xB)), members),
        pg(PgRole::Replica, 1000, None),
    );
    let p = c.step(t(104.1), &o);
    assert_eq!(
        p.actions,
        vec![Action::Promote { epoch: 21 }],
        "{}",
        p.reason
    );
}

/// The read does not show the key: a failure; the lease kept for the txn is revoked
/// (if etcd applies the txn after this read, that deletes the key it made).
#[test]
fn an_unanswered_acquire_the_read_does_not_show_revokes_its_lease() {
    let (mut c, members) = acquiring();
    let mut o = obs(view(21, None, members), pg(PgRole::Replica, 1000, None));
    o.acquire = unanswered(0xB);
    let p = c.step(t(104.0), &o);
    assert!(c.leadership().is_none());
    assert_revokes(&p, 0xB);
}

/// A key naming us on another lease is no proof that this txn was applied: no win;
/// it is a stale key of ours (revoked) and the txn's lease is revoked too.
#[test]
fn an_unanswered_acquire_with_our_key_on_another_lease_is_no_win() {
    let (mut c, members) = acquiring();
    let mut o = obs(
        view(21, Some(key("pg2", 19, 0xC)), members),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = unanswered(0xB);
    let p = c.step(t(104.0), &o);
    assert!(c.leadership().is_none());
    assert!(
        p.actions.contains(&Action::Revoke { lease: 0xB })
            && p.actions.contains(&Action::Revoke { lease: 0xC }),
        "{:?} {}",
        p.actions,
        p.reason
    );
}

/// A read that failed decides nothing (review of b59d65c, MEDIUM: it was dropped,
/// and the next read revoked the key as a stale one): the next read that answers
/// does. Here it shows the key: the win.
#[test]
fn an_unanswered_acquire_is_decided_by_the_next_read_that_answers() {
    let (mut c, members) = acquiring();
    let p = c.step(t(104.0), &unanswered_unread());
    assert!(c.leadership().is_none());
    assert_no_revoke(&p);
    let o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members),
        pg(PgRole::Replica, 1000, None),
    );
    let p = c.step(t(104.6), &o);
    assert_eq!(p.reason, Reason::Promoting { epoch: 21 }, "{:?}", p.actions);
    assert_eq!(c.leadership().map(|l| l.renewed_at), Some(t(103.65)));
}

/// The same, the read that answers shows no key: the lease is revoked then.
#[test]
fn an_unanswered_acquire_a_later_read_shows_lost_revokes_its_lease() {
    let (mut c, members) = acquiring();
    c.step(t(104.0), &unanswered_unread());
    let p = c.step(
        t(104.6),
        &obs(view(21, None, members), pg(PgRole::Replica, 1000, None)),
    );
    assert!(c.leadership().is_none());
    assert_revokes(&p, 0xB);
}

/// Kept only while its lease could live: past `granted_at + ttl` no read makes it a
/// win, and its lease is revoked all the same (second review, L1: an etcd leader
/// change may have extended it).
#[test]
fn an_unanswered_acquire_is_forgotten_once_its_lease_could_have_expired() {
    let (mut c, members) = acquiring();
    c.step(t(104.0), &unanswered_unread());
    let o = unread(PgRole::Replica);
    c.step(t(134.0), &o);
    let p = c.step(
        t(134.5),
        &obs(
            view(21, Some(key("pg2", 21, 0xB)), members),
            pg(PgRole::Replica, 1000, None),
        ),
    );
    assert!(c.leadership().is_none(), "{}", p.reason);
    assert_revokes(&p, 0xB);
}

/// A shutdown before the read decided: no win; the lease goes with the stop.
#[test]
fn an_unanswered_acquire_during_a_shutdown_is_revoked() {
    let (mut c, members) = acquiring();
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members),
        pg(PgRole::Replica, 1000, None),
    );
    o.acquire = unanswered(0xB);
    o.shutdown = true;
    let p = c.step(t(104.0), &o);
    assert!(c.leadership().is_none());
    assert_revokes(&p, 0xB);
}

/// S5 (review of b59d65c, LOW 1): a wall-clock jump the winning observation found
/// (a paused VM) moves the first renewal back, as it moves a leader's; so does one
/// found while the acquire waited for a read.
#[test]
fn a_clock_jump_moves_an_unanswered_win_back() {
    let (mut c, members) = acquiring();
    let mut o = unanswered_unread();
    o.clock_jump = std::time::Duration::from_secs(2);
    c.step(t(104.0), &o);
    let mut o = obs(
        view(21, Some(key("pg2", 21, 0xB)), members),
        pg(PgRole::Replica, 1000, None),
    );
    o.clock_jump = std::time::Duration::from_secs(3);
    c.step(t(104.6), &o);
    assert_eq!(c.leadership().map(|l| l.renewed_at), Some(t(98.65)));
}

/// A shutdown while reads keep failing: a stopping node never takes the win, so the
/// undecided acquire's lease is revoked at once (second review, L3).
#[test]
fn an_undecided_unanswered_acquire_is_revoked_by_a_shutdown() {
    let (mut c, _) = acquiring();
    c.step(t(104.0), &unanswered_unread());
    let mut o = unread(PgRole::Stopped);
    o.shutdown = true;
    let p = c.step(t(104.5), &o);
    assert!(c.leadership().is_none());
    assert_revokes(&p, 0xB);
}

/// The steps of an S4 fence while the acquire waits for a read: the local
/// PostgreSQL turns up writable (promoted by hand) while etcd does not answer, so
/// the node fences it; the fence completes. The acquire stays undecided through
/// it (no read answered) and no revoke is planned before the fence is done.
fn fenced_while_undecided(c: &mut Core) {
    c.step(t(104.0), &unanswered_unread());
    let p = c.step(t(104.5), &unread(PgRole::Primary));
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert!(c.fence_in_progress());
    let mut o = unread(PgRole::Stopped);
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(104.8), &o);
    assert!(!c.fence_in_progress(), "{}", p.reason);
    assert_no_revoke(&p);
}

/// The fence's round trip, lost: the first read after it does not show the key, so
/// the acquire failed and its lease is revoked, after the fence (S4 first).
#[test]
fn an_unanswered_acquire_lost_across_a_fence_revokes_its_lease() {
    let (mut c, members) = acquiring();
    fenced_while_undecided(&mut c);
    let p = c.step(
        t(105.0),
        &obs(view(21, None, members), pg(PgRole::Stopped, 1000, None)),
    );
    assert!(c.leadership().is_none());
    assert_revokes(&p, 0xB);
}

/// The fence's round trip, won: the first read after it shows the key naming us on
/// the lease granted for the txn. The fenced PostgreSQL has no process left, so
/// the win is taken as any win is (`won`'s checks), with the first horizon counted
/// from the grant's send instant (S1), and the lease is not revoked.
#[test]
fn an_unanswered_acquire_won_across_a_fence_is_the_win() {
    let (mut c, members) = acquiring();
    fenced_while_undecided(&mut c);
    let p = c.step(
        t(105.0),
        &obs(
            view(21, Some(key("pg2", 21, 0xB)), members),
            pg(PgRole::Stopped, 1000, None),
        ),
    );
    assert_no_revoke(&p);
    let l = c
        .leadership()
        .expect("leadership from the win after the fence");
    assert_eq!((l.lease, l.epoch, l.renewed_at), (0xB, 21, t(103.65)));
}
