//! Fresh-eyes review of S6(f) (`ttl - 2W - R + B >= floor(L_w + R) + 1 s`,
//! `src/config.rs` `f_upper2`, docs/timing.md (f)): is one `R` enough?
//!
//! The concern: a replica's `E_max` is `poll.sent_at + ttl_answered`
//! (`core::vacancy::track_leader`), but etcd computes the TTL when the request
//! *arrives*, up to `R` after `sent_at`, so `E_max` can be as low as
//! `exp - R - 1 s`; a DELETE at or after it (last poll at most `L_w + R` old) is
//! judged on time and costs no promote delay. Then the host of an old leader whose
//! agent died just before `F - B` (reset at up to `s + R + 2W - B`) would have to be
//! gone by `s + ttl - R - 1 s`: `ttl - 2W - 2R + B >= 1 s`, one `R` more than S6(f).
//! DESIGN's second worked example (ttl 7, `L_w` 0.5, R 0.25, M 0.5, B 0.3, W 3)
//! passes S6(f) (1.05 >= 1) and not that (0.8 < 1).
//!
//! The schedule, on one timeline (seconds): pg1's last counted renewal is sent at
//! `s = 0` and etcd applies its keepalive at once (`exp = 7.0`); pg1 pets at 0.25
//! (`F = 3.25`, fence start `F - B = 2.95`); its agent dies just before, at 2.94,
//! so the kernel's close ping resets the host at 5.94 (5.95 at the limit). pg2, a
//! replica with the same timing and W 3, polls pg1's lease; an early DELETE (a
//! lease revoke by someone else: the lease is gone at once) comes at about 5.77.
//!
//! What these tests show (all pass on the code they were written against, main at
//! cb23f17): the `E_max` half of the concern is right — a poll sent at 5.76 and
//! computed at 6.01 gives `E_max = 5.76` and the DELETE "at 5.77" is judged on time,
//! no promote delay — but the window is not real: the replica can only act on that
//! TTL-0 answer after etcd computed it, and a TTL of `n` is computed after
//! `exp - n - 1 s`. An on-time judgement needs the last poll's TTL
//! `n <= floor(L_w + R)` (the DELETE is at or after `sent_at + n` and at most
//! `L_w + R` after `sent_at`), so the core decides no earlier than
//! `exp - floor(L_w + R) - 1 s >= s + ttl - floor(L_w + R) - 1 s`, which S6(f), with
//! its one `R` (the pet's), puts at or after the reset. The poll's own transit time
//! is already paid for by the replica's waiting for the answer.
//!
//! Outcomes: every test passing means S6(f) as shipped closes this schedule (the
//! window in the concern is not real). `late_ttl0_poll_is_judged_on_time_but_acts_after_the_reset`
//! failing on its on-time assertion means the core now judges that DELETE early
//! (safer; update the test); failing on the reset assertion, or
//! `no_poll_schedule_promotes_before_the_reset` failing, means a promotion before the
//! old host's reset: the window is real (S1/S3 violated) and S6(f) or `E_max` needs
//! the fix the review discussed.

use std::time::Duration;

use tenure::core::Core;
use tenure::core::model::*;

#[path = "support/core_builders.rs"]
mod core_builders;
use core_builders::{core_with, deleted, key, lease_poll, member, obs, pg, t, view, won};

/// ttl 7, loop 0.5, retry 0.25, margin 0.5, budget 0.3: DESIGN S6's second worked
/// example, for every node.
fn timing7() -> Timing {
    Timing {
        ttl: 7,
        loop_wait: Duration::from_millis(500),
        retry_timeout: Duration::from_millis(250),
        safety_margin: Duration::from_millis(500),
        demote_budget: Duration::from_millis(300),
        promote_delay: None,
        maximum_lag_on_failover: 1 << 20,
        primary_start_timeout: Duration::from_secs(30),
        synchronous: SyncMode::Off,
        synchronous_node_count: 1,
        maximum_lag_on_syncnode: None,
    }
}

const L_W: f64 = 0.5;
const R: f64 = 0.25;
const W: f64 = 3.0;
const B: f64 = 0.3;
/// etcd's expiry of pg1's lease 0xA: its last keepalive (sent at `s = 0`) applied
/// at once.
const EXP: f64 = 7.0;
/// The latest pg1's host can be reset: pet at `s + R`, agent dead just before
/// `F - B`, kernel close ping, then `W`: `s + R + 2W - B`.
const RESET: f64 = R + 2.0 * W - B;
/// The answer's way back from etcd to pg2.
const BACK: f64 = 0.002;

/// pg1 the leader (epoch 5, lease 0xA of 7 s, W 3, promoted under its epoch), pg2
/// the replica (W 3).
fn members() -> Vec<Member> {
    let mut pg1 = member("pg1", 8, "primary", 1000, Some(3));
    pg1.info.epoch = Some(5);
    pg1.info.leader_lease = Some(0xA);
    pg1.info.leader_ttl = Some(7);
    vec![pg1, member("pg2", 9, "replica", 1000, Some(3))]
}

fn replica() -> PgStatus {
    pg(PgRole::Replica, 1000, Some("pg1"))
}

fn present() -> ClusterView {
    view(40, Some(key("pg1", 5, 0xA)), members())
}

/// etcd's `LeaseTimeToLive` of lease 0xA computed at `at`: the remaining time
/// truncated to whole seconds, while it lives.
fn etcd_ttl(at: f64) -> i64 {
    (EXP - at + 1e-9).floor() as i64
}

/// Drive pg2 from the step that first shows the key vanished (at `now`, the watch
/// having handed the DELETE to the shell at `seen`; this iteration's poll finds the
/// revoked lease gone) through its acquire, its win and its arm. Returns the
/// instant `Promote` is planned (or, for a delayed promotion, the instant the delay
/// ends) and whether it was delayed, with the reasons seen.
fn take_over(c: &mut Core, seen: f64, now: f64) -> (f64, bool, Vec<String>) {
    let mut reasons = Vec::new();
    let mut o = obs(view(41, None, members()), replica());
    o.leader_deleted_at = Some(t(seen));
    o.leader_deleted_revision = Some(41);
    o.leader_changes = vec![deleted(seen, 41)];
    o.lease_poll = Some(lease_poll(0xA, now - 0.002, None, None, false));
    let mut now = now;
    let mut p = c.step(t(now), &o);
    let mine = view(42, Some(key("pg2", 42, 0xB)), members());
    for _ in 0..8 {
        reasons.push(format!("{:.3}: {:?} / {}", now, p.actions, p.reason));
        if p.actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. }))
        {
            return (now, false, reasons);
        }
        if let Reason::PromoteDelayed { remaining, .. } = &p.reason {
            return (now + remaining.as_secs_f64(), true, reasons);
        }
        let mut o = obs(mine.clone(), replica());
        if p.actions.contains(&Action::Acquire) {
            now += 0.004;
            o.acquire = won(0xB, 7, now - 0.002, 42);
        } else if p
            .actions
            .iter()
            .any(|a| matches!(a, Action::PetWatchdog { .. }))
        {
            now += 0.002;
            o.pet = Some(PetReport {
                at: t(now - 0.001),
                outcome: PetOutcome::Done,
            });
        } else {
            panic!("unexpected plan: {reasons:#?}");
        }
        p = c.step(t(now), &o);
    }
    panic!("no promotion planned: {reasons:#?}");
}

/// What becomes of one poll pg2 sends at `sent`: `None` it fails (times out at
/// `sent + R`, nothing reported), `Some(d)` etcd computes its answer at `sent + d`.
type Fate = dyn Fn(f64) -> Option<f64>;

/// pg2 starts at `start` (a restart, or the end of an etcd outage: no poll of 0xA
/// before it counts, the kindest case for the concern) and reads the key; it then
/// ticks every `L_w` at `phase + k L_w`, each iteration a read (at the tick) and a
/// poll (sent 1 ms later) whose fate `fate` decides, its step when the answer came
/// back. The lease is revoked (and the key deleted) at `d`: the shell hands the
/// DELETE over at `d` if idle, else when the iteration in flight ends. Returns
/// [`take_over`]'s answer.
fn run(start: f64, phase: f64, d: f64, fate: &Fate) -> (f64, bool, Vec<String>) {
    let mut c = core_with("pg2", Some(3), timing7());
    let p = c.step(t(start), &obs(present(), replica()));
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    assert_eq!(c.lease_to_poll(), Some(0xA));
    let mut busy_until = start;
    let mut k = ((start - phase) / L_W).floor() as i64 + 1;
    loop {
        let tick = phase + k as f64 * L_W;
        if tick >= d {
            break;
        }
        let sent = tick + 0.001;
        let mut o = obs(present(), replica());
        let end = match fate(sent) {
            None => sent + R,
            Some(delay) => {
                let at = sent + delay;
                let ttl = (at < d).then(|| etcd_ttl(at));
                o.lease_poll = Some(lease_poll(0xA, sent, ttl, ttl.map(|_| 7), ttl.is_some()));
                at + BACK
            }
        };
        c.step(t(end), &o);
        busy_until = end;
        k += 1;
    }
    let seen = d.max(busy_until);
    take_over(&mut c, seen, seen + 0.003)
}

/// The brief's schedule as the concern states it, pg2 polling all along: the poll
/// sent at 5.761 is computed at 6.008 (TTL 0), every other poll is answered at once.
/// Each poll answered at once gives 6.26 here (0.261 + 6, ..., 5.261 + 1): the DELETE seen at 6.010
/// (pg2 was waiting for its 5.76 poll's answer when it came at 5.77) is early and
/// waits `2W + R + M = 6.75 s`.
#[test]
fn brief_schedule_with_every_poll_answered_is_early() {
    let fate = |sent: f64| {
        Some(if (sent - 5.761).abs() < 1e-6 {
            0.247
        } else {
            0.0
        })
    };
    assert_eq!(etcd_ttl(5.761 + 0.247), 0);
    let (at, delayed, reasons) = run(0.01, 0.26, 5.77, &fate);
    eprintln!("{reasons:#?}");
    assert!(delayed, "{reasons:#?}");
    // The delay counts from the DELETE as the shell saw it: 6.008 + BACK.
    assert!(
        (at - (6.008 + BACK + 6.75)).abs() < 1e-6,
        "{at} {reasons:#?}"
    );
    assert!(at >= RESET, "{reasons:#?}");
}

/// The concern's case at its kindest: pg2's only poll of the last lease period is
/// the late TTL-0 one (it restarted at 5.5, or every earlier poll failed), so
/// `E_max = 5.76`; and the shell is taken to have stamped the DELETE at 5.77 even
/// though it was waiting for that poll's answer. The core judges the DELETE on
/// time (no promote delay: the `E_max` half of the concern holds), yet it cannot
/// decide before that answer is back, and etcd computed it at 6.01 > `exp - 1 s`:
/// `Promote` comes after the reset (5.94; 5.95 at the limit).
#[test]
fn late_ttl0_poll_is_judged_on_time_but_acts_after_the_reset() {
    let mut c = core_with("pg2", Some(3), timing7());
    let p = c.step(t(5.51), &obs(present(), replica()));
    assert!(matches!(p.reason, Reason::Following { .. }), "{}", p.reason);
    // The poll sent at 5.76 (read at 5.75 showed the key), computed at 6.01.
    assert_eq!(etcd_ttl(6.01), 0);
    let mut o = obs(present(), replica());
    o.lease_poll = Some(lease_poll(0xA, 5.76, Some(0), Some(7), true));
    c.step(t(6.01 + BACK), &o);
    // The next iteration reads the key gone, the lease revoked.
    let (at, delayed, reasons) = take_over(&mut c, 5.77, 6.015);
    eprintln!("{reasons:#?}");
    assert!(!delayed, "judged early after all: {reasons:#?}");
    assert!(at < 6.05, "{at} {reasons:#?}");
    assert!(
        at > RESET,
        "promoted at {at}, before the reset at {RESET}: {reasons:#?}"
    );
}

/// Every schedule of this family: pg2 from a restart at 0.01 (polls all along) or
/// at 5.0 (only the last second's polls), poll phases 0.00..0.49, each poll
/// answered at once, late (computed 0.246 after sending) or failed in patterns,
/// DELETE instants 5.50..6.30. No `Promote` is ever planned before the latest reset
/// (`s + R + 2W - B` = 5.95), and the family does contain on-time judgements (a
/// promotion without delay), the closest `exp - 1 s` plus the take-over's steps.
#[test]
fn no_poll_schedule_promotes_before_the_reset() {
    let at_once = |_: f64| Some(0.0);
    let late = |_: f64| Some(0.246);
    // Polls on one half of the grid fail, the others are late.
    let alternate = |sent: f64| {
        let half = ((sent / L_W).floor() as i64) % 2 == 0;
        if half { None } else { Some(0.246) }
    };
    let mixed = |sent: f64| {
        Some(if ((sent * 100.0) as i64) % 3 == 0 {
            0.0
        } else {
            0.2
        })
    };
    let fates: [(&str, &Fate); 4] = [
        ("at once", &at_once),
        ("late", &late),
        ("alternate", &alternate),
        ("mixed", &mixed),
    ];
    let (mut on_time, mut runs) = (0, 0);
    let mut closest = f64::MAX;
    for start in [0.01, 5.0] {
        for ph in 0..50 {
            let phase = f64::from(ph) * 0.01;
            for (name, fate) in fates {
                for di in 0..=80 {
                    let d = 5.5 + f64::from(di) * 0.01;
                    let (at, delayed, reasons) = run(start, phase, d, fate);
                    runs += 1;
                    assert!(
                        at > RESET,
                        "start {start} phase {phase} {name} DELETE {d}: promoted at {at}, \
                         before the reset at {RESET}: {reasons:#?}"
                    );
                    if !delayed {
                        on_time += 1;
                        closest = closest.min(at);
                    }
                }
            }
        }
    }
    eprintln!(
        "{runs} schedules, {on_time} judged on time; earliest on-time Promote at {closest:.3} \
         (reset by {RESET}, exp - 1 s = {})",
        EXP - 1.0
    );
    assert!(
        on_time > 0,
        "no schedule judged on time: the sweep proves nothing"
    );
    assert!(closest > EXP - 1.0, "{closest}");
}
