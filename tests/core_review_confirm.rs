//! Fresh-eyes review of commit 88463a7 (the `confirm_after` gate), the seed 9982
//! adoption rule (`src/core/adopt.rs`) and the uncapped `grantedTTL`. Pure scenarios
//! of the core in the style of `core_scenarios.rs`: observations and `now` in, plans
//! out. Some of these pin the gate down as regression tests (they pass); the ones
//! named `review_finding_*` show a finding of the review and fail on the code they
//! were written against (see each doc).

use std::time::Duration;

use tenure::core::Core;
use tenure::core::model::*;
use tenure::core::time::Instant;

#[path = "support/core_builders.rs"]
mod core_builders;
use core_builders::{SYSID, core_with, key, obs, pg, t, view};

/// ttl 7, loop 0.5, retry 0.25, margin 0.5, with `budget` (DESIGN S6's second
/// worked example has 0.3).
fn timing7(budget: f64) -> Timing {
    Timing {
        ttl: 7,
        loop_wait: Duration::from_millis(500),
        retry_timeout: Duration::from_millis(250),
        safety_margin: Duration::from_millis(500),
        demote_budget: Duration::from_secs_f64(budget),
        promote_delay: None,
        maximum_lag_on_failover: 1 << 20,
        primary_start_timeout: Duration::from_secs(30),
        synchronous: SyncMode::Off,
        synchronous_node_count: 1,
        maximum_lag_on_syncnode: None,
    }
}

/// A standby whose `tenure.epoch` row shows epoch 18 written by pg1 under lease 0xA
/// (so the seed-253898 adoption delay is lifted and only the gate holds it).
fn own_standby() -> PgStatus {
    let mut rep = pg(PgRole::Replica, 1000, None);
    rep.epoch = Some(18);
    rep.epoch_row.member = Some("pg1".into());
    rep.epoch_row.lease = Some(0xA);
    rep
}

fn poll(lease: LeaseId, at: Instant, ttl: Option<i64>, granted: Option<i64>) -> LeasePoll {
    LeasePoll {
        lease,
        sent_at: at,
        ttl,
        granted_ttl: granted,
        has_keys: ttl.is_some(),
    }
}

fn counted(lease: LeaseId, at: Instant, ttl: i64) -> Option<Renewal> {
    Some(Renewal {
        lease,
        sent_at: at,
        outcome: RenewalOutcome::Counted { ttl },
    })
}

fn promotes(p: &Plan) -> bool {
    p.actions.iter().any(|a| {
        matches!(
            a,
            Action::Promote { .. } | Action::StartJob(JobKind::StartPrimary)
        )
    })
}

/// pg1 (W 3) restarts with no primary running while the key names it (lease 0xA,
/// epoch 18, its data shows that epoch): a poll at `start` shows `ttl_left` (etcd
/// reset the TTL, or #17642), the adopting renewal is sent at `start + 0.005` and the
/// adoption step runs at `start + 0.01`. Returns the core, the adoption step's
/// instant and whether any step so far promoted.
fn adopt_with_no_primary(start: f64, ttl_left: i64) -> (Core, Instant) {
    let mut c = core_with("pg1", Some(3), timing7(0.3));
    let v = view(40, Some(key("pg1", 18, 0xA)), vec![]);
    let mut o = obs(v.clone(), own_standby());
    o.lease_poll = Some(poll(0xA, t(start), Some(ttl_left), Some(7)));
    let p = c.step(t(start + 0.001), &o);
    assert!(!promotes(&p), "{:?}", p.actions);
    assert_eq!(c.lease_to_renew(), Some((0xA, 18)), "{}", p.reason);
    let mut o = obs(v.clone(), own_standby());
    o.renewal = counted(0xA, t(start + 0.005), 7);
    let adoption = t(start + 0.01);
    let p = c.step(adoption, &o);
    assert!(c.leadership().is_some(), "{}", p.reason);
    assert!(!promotes(&p), "{:?}", p.actions);
    // The arm planned with the adoption, reported done.
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::PetWatchdog { .. })),
        "{:?}",
        p.actions
    );
    let mut o = obs(v, own_standby());
    o.pet = Some(PetReport {
        at: t(start + 0.011),
        outcome: PetOutcome::Done,
    });
    let p = c.step(t(start + 0.012), &o);
    assert!(!promotes(&p), "{:?}", p.actions);
    (c, adoption)
}

/// One leader step after a renewal `outcome` sent at `sent`, answered and stepped
/// 5 ms later, the pet reported right after it (as the shell does).
fn renewal_step(c: &mut Core, sent: Instant, outcome: RenewalOutcome) -> Plan {
    let v = view(41, Some(key("pg1", 18, 0xA)), vec![]);
    let mut o = obs(v, own_standby());
    let counted = matches!(outcome, RenewalOutcome::Counted { .. });
    o.renewal = Some(Renewal {
        lease: 0xA,
        sent_at: sent,
        outcome,
    });
    if counted {
        o.pet = Some(PetReport {
            at: sent.add(Duration::from_millis(4)),
            outcome: PetOutcome::Done,
        });
    }
    c.step(sent.add(Duration::from_millis(5)), &o)
}

/// Regression (passes): the gate's boundary is the renewal's *send* instant against
/// `adoption step + L_w + R + M` (M for the hosts' clock-rate drift, F2), inclusive; a counted renewal sent 1 ns before does not
/// open it, failed renewals in between neither open it nor block it for good (the
/// first counted one sent at or after the bound opens it, with the watchdog
/// required and petted only on counted renewals).
#[test]
fn the_gate_opens_on_the_first_counted_renewal_sent_at_or_after_the_bound() {
    let (mut c, adoption) = adopt_with_no_primary(39.2, 7);
    let bound = adoption.add(Duration::from_millis(1250));
    // A counted renewal sent 0.5 s after the adoption: no write.
    let p = renewal_step(
        &mut c,
        adoption.add(Duration::from_millis(500)),
        RenewalOutcome::Counted { ttl: 7 },
    );
    assert!(!promotes(&p), "{}: {:?}", p.reason, p.actions);
    // One sent 1 ns before the bound: still none.
    let p = renewal_step(
        &mut c,
        bound.sub(Duration::from_nanos(1)),
        RenewalOutcome::Counted { ttl: 7 },
    );
    assert!(!promotes(&p), "{}: {:?}", p.reason, p.actions);
    assert!(p.reason.to_string().contains("L_w + R"), "{}", p.reason);
    // A failed renewal sent after the bound: none (and no fence yet: F - B is later).
    let p = renewal_step(
        &mut c,
        bound.add(Duration::from_millis(100)),
        RenewalOutcome::Failed("timed out".into()),
    );
    assert!(!promotes(&p), "{}: {:?}", p.reason, p.actions);
    assert!(c.leadership().is_some(), "{}", p.reason);
    // The next counted one, sent after the bound: the promotion.
    let p = renewal_step(
        &mut c,
        bound.add(Duration::from_millis(500)),
        RenewalOutcome::Counted { ttl: 7 },
    );
    assert!(promotes(&p), "{}: {:?}", p.reason, p.actions);
}

/// Regression (passes): a counted renewal sent exactly at the bound opens the gate.
#[test]
fn a_renewal_sent_exactly_at_the_bound_opens_the_gate() {
    let (mut c, adoption) = adopt_with_no_primary(39.2, 7);
    let bound = adoption.add(Duration::from_millis(1250));
    let p = renewal_step(&mut c, bound, RenewalOutcome::Counted { ttl: 7 });
    assert!(promotes(&p), "{}: {:?}", p.reason, p.actions);
}

/// Regression (passes): a wall-clock jump (S5) moves the last renewal back; it never
/// opens the gate early, and a renewal reported in the same observation as the jump
/// counts with its own send instant.
#[test]
fn a_clock_jump_never_opens_the_gate() {
    let (mut c, adoption) = adopt_with_no_primary(39.2, 7);
    let v = view(41, Some(key("pg1", 18, 0xA)), vec![]);
    let mut o = obs(v, own_standby());
    o.clock_jump = Duration::from_millis(200);
    let p = c.step(adoption.add(Duration::from_millis(900)), &o);
    assert!(!promotes(&p), "{}: {:?}", p.reason, p.actions);
    let p = renewal_step(
        &mut c,
        adoption.add(Duration::from_millis(700)),
        RenewalOutcome::Counted { ttl: 7 },
    );
    assert!(!promotes(&p), "{}: {:?}", p.reason, p.actions);
}

/// Review finding F1 (HIGH under a timing S6 (a)-(e) allowed; fixed by S6(f)): the poll
/// check is the only guard of an adoption with a **running** primary, and the gate's
/// own premise (an etcd leader change resets the TTL, #17642 reports a bogus one)
/// defeats it. The old incarnation's crash ping bounds its host only to
/// `x + W < s + R + 2W - B`; with ttl 7, L_w 0.5, R 0.25, M 0.5, **B 0.2**, W 3 (S6
/// (a)-(e) hold: 0.95 < 3 <= 3.125, 3 > 1.25, R + P <= L_w) a replica can poll the
/// lease with TTL 0 while that host still runs.
///
/// | time | who | event |
/// |---|---|---|
/// | 0.000 | pg1 | last counted renewal (keepalive applied at 0.005, X = 7.005; read slow, pet at 0.25, F = 3.25) |
/// | 3.040 | pg1 | agent killed before F - B = 3.05 while renewals fail: kernel ping, device due at 6.04; PostgreSQL keeps running |
/// | 4.51..5.51 | pg0 | polls every L_w: TTL 2, 1, 1 (E_max 6.51) |
/// | 6.010 | pg0 | poll: TTL 0 (0.995 s left), last poll |
/// | 6.012 | etcd | leader transfer (graceful stop of its leader): every lease reset to 7 s + ET |
/// | 6.013 | pg1 | new agent polls: TTL 7; adopts (renewal sent 6.02), pets at 6.026: F = 9.026 |
/// | 6.510 | pg0 | poll fails (its endpoint was the stopped member) |
/// | 6.600 | etcd | early DELETE (operator revoke, #15247) |
/// | 6.6.. | pg0 | DELETE at 6.6 >= E_max 6.51, last poll 0.59 s < L_w + R old: **on time**, promotes at once |
///
/// pg1's primary writes until its own fence after the DELETE (watch latency + up to
/// B), and its `F` (9.026) is 2.4 s after the DELETE the replica judged on time:
/// DESIGN §1 step 4's "an on-time DELETE costs no delay: S6(e) puts the old leader's
/// fence deadline before it" fails. Needed besides the timing: pg0's poll right after
/// the etcd leader change fails, and the early DELETE lands in `[E_max, last poll +
/// L_w + R]` (0.25 s). The root: S6 bounds `F`, not the crash ping's
/// `x + W < F - B + W`, so a poll before `x + W` may show TTL 0; without an adoption
/// the regular polls keep `E_max` past `x + W`, the adopter's pet stretches the
/// host's life past it. Fix: an S6 rule `ttl - 2W - R + B >= floor(L_w + R) + 1 s`
/// (every poll before `x + W` then shows more than `L_w + R`), or withhold the
/// adopter's arm and pets (leave the device on the old `x + W`) until a renewal sent
/// `L_w + R` after the adoption counted, as the gate does for writes.
///
/// The pure core cannot hold this case off (nothing it observes tells it that the
/// lease's TTL was reset, and the two agents each act on what they saw), so the fix
/// is the configuration's: S6(f) `ttl - 2W - R + B >= floor(L_w + R) + 1 s` refuses
/// this timing (0.95 s < 1 s). Under it the crashed agent's host is reset before
/// any replica can poll TTL 0, so an agent restarted on a host whose primary still
/// runs adopts before any replica's prediction ran out. The worked examples of DESIGN
/// §6 still pass (the second, B 0.3, by 0.05 s). (Review finding F3, the cap of
/// `leader_ttl_seen` at `MAX_TTL` across restarts, was settled in docs/design.md.)
#[test]
fn review_finding_f1_s6_refuses_a_timing_whose_crash_ping_outlives_e_max() {
    let mut t = tenure::config::TimingConfig {
        ttl: 7,
        loop_wait: Duration::from_millis(500),
        retry_timeout: Duration::from_millis(250),
        safety_margin: Duration::from_millis(500),
        demote_budget: Duration::from_millis(200),
        promote_delay: None,
        iteration_budget: Duration::from_millis(250),
    };
    let e = tenure::config::validate_timing(&t, 7, Some(3)).expect_err(
        "S6 accepts ttl 7, W 3, R 0.25, B 0.2: ttl - 2W - R + B = 0.95 s < floor(L_w + R) + 1 s",
    );
    assert_eq!(e.rule, tenure::config::TimingRule::F, "{e}");
    assert!(e.to_string().contains("S6(f)"), "{e}");
    // The second worked example (B 0.3): 1.05 s, accepted; and W 3 is the top of the
    // range the agent asks a driver for.
    t.demote_budget = Duration::from_millis(300);
    tenure::config::validate_timing(&t, 7, Some(3)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tenure::config::watchdog_range(&t, 7), Some((2, 3)));
    // B 0.2: W 3 is refused, so the range ends at 2 (S6(e) keeps W above 1.25 s).
    t.demote_budget = Duration::from_millis(200);
    assert_eq!(tenure::config::watchdog_range(&t, 7), Some((2, 2)));
}

/// Review finding F4 (fails on 88463a7, S1, DESIGN §3a): a refused adoption with
/// PostgreSQL *stopped* revoked the key at once. A backend can outlive its postmaster
/// and still commit, so the key must not go before a fence found no process left:
/// the refusal fences first (for a stopped server a process scan) and revokes only
/// once the fence is complete.
#[test]
fn review_finding_f4_a_refused_adoption_fences_a_stopped_postgres_before_revoking() {
    let mut c = core_with("pg1", Some(3), timing7(0.3));
    let v = view(40, Some(key("pg1", 18, 0xA)), vec![]);
    let stopped = || {
        let mut s = pg(PgRole::Stopped, 1000, None);
        s.data = DataDir::Present {
            sysid: SYSID,
            was_primary: true,
        };
        s
    };
    // The poll before adopting shows the lease at TTL 0: too late to adopt.
    let mut o = obs(v.clone(), stopped());
    o.lease_poll = Some(poll(0xA, t(50.0), Some(0), Some(7)));
    let p = c.step(t(50.001), &o);
    assert!(c.leadership().is_none(), "{}", p.reason);
    assert!(
        p.actions.contains(&Action::Fence),
        "no fence before the revoke: {:?} ({})",
        p.actions,
        p.reason
    );
    assert!(
        !p.actions.iter().any(|a| matches!(a, Action::Revoke { .. })),
        "revoked before the fence completed: {:?}",
        p.actions
    );
    // The fence completes: now the lease goes.
    let mut o = obs(v, stopped());
    o.fence = Some(FenceOutcome::Complete);
    let p = c.step(t(50.05), &o);
    assert!(
        p.actions.contains(&Action::Revoke { lease: 0xA }),
        "{:?} ({})",
        p.actions,
        p.reason
    );
    assert!(!promotes(&p), "{:?}", p.actions);
}
