//! The simulated shell around a real `Core`: the loop the lead's `src/agent.rs`
//! runs, written as an `async fn` so that every blocking call is a point where the
//! world's other events interleave. Per iteration: at fixed-rate ticks a confirmed
//! renewal (keepalive, then a linearizable read of `leader`), a read of the scope,
//! `LeaseTimeToLive`, a probe of PostgreSQL, publish the member key, `step`, then
//! carry out the actions in order, feeding outcomes into the next observation.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use tenure::core::model::*;
use tenure::core::time::Instant;
use tenure::core::{Core, CoreConfig};

use super::etcd::{Op, Resp};
use super::world::{LogWhat, Payload, World};

/// `TENURE_SIM_OLD_AGENTS` (finding L1): the even-numbered nodes run an agent older
/// than the acquisition record (their acquire txn as `etcd::OldAgent` says; their
/// decisions are still this core's). Its value lists words: `hidden` leaves their
/// member keys without the mark (as before the capability: nothing tells them
/// apart), `deletes` makes them delete a record alone (as before records carried
/// marker fields). `1`: shown, rewriting. Returns the agent's txn and whether its
/// member key shows it.
pub fn old_agent(words: Option<&str>, node: usize) -> Option<(super::etcd::OldAgent, bool)> {
    let v = words?;
    if !node.is_multiple_of(2) || v.is_empty() || v == "0" {
        return None;
    }
    Some((
        super::etcd::OldAgent {
            deletes: v.contains("deletes"),
        },
        !v.contains("hidden"),
    ))
}

pub struct Cx {
    pub w: Rc<RefCell<World>>,
    pub node: usize,
}

struct Park {
    w: Rc<RefCell<World>>,
    node: usize,
    token: u64,
}

impl Future for Park {
    type Output = Payload;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Payload> {
        let mut w = self.w.borrow_mut();
        let n = &mut w.nodes[self.node];
        match n.mailbox.take() {
            Some((t, p)) if t == self.token => Poll::Ready(p),
            other => {
                n.mailbox = other;
                Poll::Pending
            }
        }
    }
}

impl Cx {
    /// This node as `Schedule::old_agents` makes it (see [`old_agent`]).
    fn old_agent(&self) -> Option<(super::etcd::OldAgent, bool)> {
        old_agent(self.w.borrow().sched.old_agents.as_deref(), self.node)
    }

    fn now(&self) -> Instant {
        self.w.borrow().now
    }

    fn park(&self, token: u64) -> Park {
        Park {
            w: self.w.clone(),
            node: self.node,
            token,
        }
    }

    async fn call(&self, op: Op, deadline: Instant) -> Result<Resp, String> {
        let token = self.w.borrow_mut().send(self.node, op, deadline);
        match self.park(token).await {
            // An answer read after the deadline (the agent was frozen) is a timeout.
            Payload::Etcd(Ok(_)) if self.now() > deadline => {
                Err("answer arrived after the deadline".into())
            }
            Payload::Etcd(r) => r,
            other => Err(format!("unexpected wake-up {other:?}")),
        }
    }

    async fn sleep_until(&self, t: Instant) {
        let token = self.w.borrow_mut().sleep(self.node, t);
        self.park(token).await;
    }

    async fn idle_until(&self, t: Instant) {
        let token = self.w.borrow_mut().idle(self.node, t);
        self.park(token).await;
    }
}

#[derive(Default)]
struct Outcomes {
    acquire: Option<AcquireOutcome>,
    claim: Option<ClaimOutcome>,
    recorded_initialize: Option<bool>,
    fence: Option<FenceOutcome>,
    promoted: Option<bool>,
    released: Option<bool>,
    /// A guarded write refused by the epoch guard (names it).
    guard_refused: Option<String>,
    /// The last pet made or skipped (DESIGN §5: reported, never assumed).
    pet: Option<PetReport>,
    handed_over: Option<HandOverOutcome>,
}

/// What one pass of `ApiServer::service` costs the loop in this model: it never
/// blocks, and its work is bounded (16 accepts, one read and one write per slot).
const API_SERVICE_COST: Duration = Duration::from_micros(100);

/// Pet (or open) the device at an instant no later than `not_after`, after the
/// descheduling the schedule may impose, and report what happened. `h` is the
/// horizon the pet is justified by: S2 is checked at the instant the ping really
/// reaches the device.
async fn do_pet(
    cx: &Cx,
    name: &str,
    wd: Option<Duration>,
    not_after: Instant,
    h: Option<Instant>,
) -> PetReport {
    let (fails, delay) = cx.w.borrow_mut().pet_fault();
    if !delay.is_zero() {
        let t = cx.now().add(delay);
        cx.sleep_until(t).await;
    }
    let at = cx.now();
    if at > not_after {
        return PetReport {
            at,
            outcome: PetOutcome::Skipped(format!("{at} past {not_after}")),
        };
    }
    let mut w = cx.w.borrow_mut();
    if fails {
        w.text(Some(cx.node), "pet refused by the device".into());
        return PetReport {
            at,
            outcome: PetOutcome::Failed("refused by the device (simulated)".into()),
        };
    }
    if let (Some(wt), Some(h)) = (wd, h)
        && at.add(wt).add(wt) > h
    {
        w.violation(format!(
            "S2: {name} pets at {at} but t + 2W = {} > H = {h}",
            at.add(wt).add(wt)
        ));
    }
    w.pet(cx.node);
    PetReport {
        at,
        outcome: PetOutcome::Done,
    }
}

/// A call's deadline: `R` after `t`, never past the core's cap (`F - B`).
fn cap(core: &Core, r: Duration, t: Instant) -> Instant {
    let d = t.add(r);
    core.call_cap().map_or(d, |c| d.min(c))
}

pub async fn run(cx: Cx) {
    let (name, wd, mut timing) = {
        let w = cx.w.borrow();
        let n = &w.nodes[cx.node];
        (n.name.clone(), n.wd_timeout, w.sched.profile.timing.clone())
    };
    let mut core = Core::new(
        CoreConfig {
            name: name.clone(),
            nofailover: false,
            watchdog: wd,
            move_aside_unusable: true,
        },
        timing.clone(),
    );
    // Per `config` change of the timing: whether this run's reads saw it come, and
    // whether it refused it (`TimingChange::except_holder`).
    let changes = cx.w.borrow().sched.timing_changes.len();
    let mut timing_seen = vec![false; changes];
    let mut timing_refused = vec![false; changes];
    let mut r = timing.retry_timeout;
    let mut lw = timing.loop_wait;
    let mut next_tick = cx.now();
    let mut out = Outcomes::default();
    let mut again = false;
    // The last plan's `wake_at` (the agent's `schedule::wait_end`).
    let mut wake: Option<Instant> = None;
    // (4): leases/epochs this incarnation fenced on.
    let mut fenced: Vec<(LeaseId, Epoch)> = Vec::new();
    let mut iterations: u64 = 0;
    let mut last_info: Option<MemberInfo> = None;
    // The loop before issue 8's fix (`LoopFaults::legacy_loop`,
    // `TENURE_SIM_LEGACY_LOOP=1`): an API connection was served before the timer (a
    // `biased` select with `accept` ahead of the sleep) and held the loop for up to
    // `min(200 ms, next_tick - now)`, a bound that ignores `F - B`.
    let legacy = cx.w.borrow().sched.loop_faults.legacy_loop;
    // API connections up to this instant have been taken (accepted or served).
    let mut api_cursor = Instant::ZERO;

    loop {
        if again {
            // Re-running at once still costs a little time.
            let t = cx.now().add(Duration::from_micros(200));
            cx.sleep_until(t).await;
        } else if !core.renew_now() {
            // The agent's `wait` (src/agent.rs): until the next tick or `F - B`,
            // whichever comes first (S1), woken early by a watch event or a job
            // exit; API connections are served in between. Fixed order: a due
            // deadline first, then input, each service non-blocking and bounded.
            loop {
                let until = core.call_cap().map_or(next_tick, |c| next_tick.min(c));
                let until = wake.map_or(until, |w| until.min(w));
                let now = cx.now();
                let pending =
                    cx.w.borrow()
                        .next_api(cx.node, api_cursor)
                        .filter(|&a| a <= now);
                if legacy && let Some(a) = pending {
                    // The old order: the connection first, held by an idle client
                    // for min(200 ms, next_tick - now).
                    api_cursor = a.add(Duration::from_nanos(1));
                    let hold = Duration::from_millis(200)
                        .min(now.until(next_tick))
                        .max(Duration::from_micros(1));
                    cx.sleep_until(now.add(hold)).await;
                    continue;
                }
                if now >= until {
                    break;
                }
                if !legacy && pending.is_some() {
                    api_cursor = now.add(Duration::from_nanos(1));
                    cx.sleep_until(now.add(API_SERVICE_COST)).await;
                    continue;
                }
                let next_api = cx.w.borrow().next_api(cx.node, api_cursor);
                match next_api {
                    Some(a) if a < until => {
                        cx.idle_until(a).await;
                        if cx.now() < a {
                            // A watch event or a job exit: run the iteration.
                            break;
                        }
                    }
                    _ => {
                        cx.idle_until(until).await;
                        break;
                    }
                }
            }
        }
        iterations += 1;
        let now = cx.now();
        let tick = now >= next_tick;
        if tick {
            // Fixed rate: the next multiple of loop_wait not yet past.
            while next_tick <= now {
                next_tick = next_tick.add(lw);
            }
        }

        // The confirmed renewal (DESIGN §1 step 2).
        let mut renewal = None;
        if let Some((lease, epoch)) = core.lease_to_renew()
            && (tick || core.renew_now())
        {
            let s = cx.now();
            let deadline = cap(&core, r, s);
            let outcome = match cx.call(Op::KeepAlive { lease }, deadline).await {
                Err(e) => RenewalOutcome::Failed(e),
                Ok(Resp::Ttl(t)) if t <= 0 => RenewalOutcome::LeaseGone,
                Ok(Resp::Ttl(t)) => match cx.call(Op::ReadLeader, deadline).await {
                    Err(e) => RenewalOutcome::Failed(e),
                    Ok(Resp::Leader(k)) => match k {
                        Some(k) if k.name == name && k.epoch == epoch && k.lease == lease => {
                            RenewalOutcome::Counted { ttl: t }
                        }
                        found => RenewalOutcome::KeyLost { found },
                    },
                    Ok(other) => RenewalOutcome::Failed(format!("{other:?}")),
                },
                Ok(other) => RenewalOutcome::Failed(format!("{other:?}")),
            };
            let r = Renewal {
                lease,
                sent_at: s,
                outcome,
            };
            // S2 right after the renewal, as the agent does: the core decides, the
            // shell pets and reports.
            if let Some(not_after) = core.pet_on_renewal(cx.now(), &r) {
                let h = match r.outcome {
                    RenewalOutcome::Counted { ttl } => Some(
                        s.add(Duration::from_secs(ttl.unsigned_abs()))
                            .sub(timing.safety_margin),
                    ),
                    _ => None,
                };
                let report = do_pet(&cx, &name, wd, not_after, h).await;
                out.pet = Some(PetReport::fold(out.pet.take(), report));
            }
            renewal = Some(r);
        }
        if let Some(lease) = core.lease_to_keep_alive()
            && tick
        {
            let d = cap(&core, r, cx.now());
            let _ = cx.call(Op::KeepAlive { lease }, d).await;
        }
        let d = cap(&core, r, cx.now());
        // The watch's coverage as of the read; reopened after a successful read
        // from its revision + 1 (`Agent::observe`).
        let watch_from = cx.w.borrow().nodes[cx.node].watch_from;
        let cluster = match cx.call(Op::ReadScope, d).await {
            Ok(Resp::Scope(v)) => Ok(*v),
            Ok(other) => Err(format!("{other:?}")),
            Err(e) => Err(e),
        };
        // A `config` change of the timing, applied when a read shows it
        // (`Agent::apply_cluster_config`: after the read, before the member key).
        if cluster.is_ok() {
            let now = cx.now();
            let want = {
                let mut w = cx.w.borrow_mut();
                for i in 0..changes {
                    let c = &w.sched.timing_changes[i];
                    if c.apply_at[cx.node] <= now && !timing_seen[i] {
                        timing_seen[i] = true;
                        timing_refused[i] = c.except_holder && core.leadership().is_some();
                        if timing_refused[i] {
                            w.retimes.2 += 1;
                            w.text(Some(cx.node), format!("refuses timing change {i}"));
                        }
                    }
                }
                w.sched.timing_for(cx.node, now, &timing_refused).clone()
            };
            if want.loop_wait != timing.loop_wait || want.retry_timeout != timing.retry_timeout {
                cx.w.borrow_mut().text(
                    Some(cx.node),
                    format!(
                        "applies loop_wait {:?} retry_timeout {:?}",
                        want.loop_wait, want.retry_timeout
                    ),
                );
                {
                    let mut w = cx.w.borrow_mut();
                    w.retimes.0 += 1;
                    w.retimes.1 += u64::from(core.leadership().is_some());
                }
                core.set_timing(now, want.clone());
                lw = want.loop_wait;
                r = want.retry_timeout;
                timing = want;
            }
        }
        if let Ok(v) = &cluster
            && watch_from.is_none()
        {
            let mut w = cx.w.borrow_mut();
            if w.nodes[cx.node].watch_from.is_none() {
                w.set_watch(cx.node, Some(v.revision + 1));
            }
        }
        let mut lease_poll = None;
        if let Some(lease) = core.lease_to_poll() {
            let sent_at = cx.now();
            let d = cap(&core, r, sent_at);
            if let Ok(Resp::TimeToLive {
                ttl,
                granted_ttl,
                has_keys,
            }) = cx.call(Op::TimeToLive { lease }, d).await
            {
                lease_poll = Some(LeasePoll {
                    lease,
                    sent_at,
                    ttl,
                    granted_ttl,
                    has_keys,
                });
            }
        }
        let (pg, job, leader_deleted_at, leader_deleted_revision, shutdown, leader_changes) = {
            let mut w = cx.w.borrow_mut();
            let pg = w.probe(cx.node);
            let job = w.job_obs(cx.node);
            let n = &mut w.nodes[cx.node];
            (
                pg,
                job,
                n.watch_deleted_at.take(),
                n.watch_deleted_rev.take(),
                n.shutdown,
                std::mem::take(&mut n.watch_changes),
            )
        };
        // Closed since the read (a change lost): no gapless coverage to report.
        let watch_from = {
            let w = cx.w.borrow();
            watch_from.filter(|f| w.nodes[cx.node].watch_from == Some(*f))
        };
        if cluster.is_ok() {
            let l = core.leadership();
            let info = MemberInfo {
                conn_url: format!("postgres://{name}:5432/postgres"),
                api_url: format!("http://{name}:8008"),
                state: "running".into(),
                role: match pg.role {
                    PgRole::Primary => "primary".into(),
                    PgRole::Replica => "replica".into(),
                    _ => String::new(),
                },
                version: env!("CARGO_PKG_VERSION").into(),
                xlog_location: pg.lsn,
                receive_lsn: None,
                replay_lsn: None,
                replication_state: None,
                timeline: pg.timeline,
                // As the agent: none while bootstrapping.
                sysid: pg.data.sysid().filter(|_| !core.is_bootstrapping()),
                tags: Tags::default(),
                epoch: l.map(|l| l.epoch),
                watchdog_timeout: wd.map(|w| w.as_secs() as u32),
                leader_lease: l.map(|l| l.lease),
                leader_ttl: l.map(|l| l.ttl),
                leader_ttl_seen: core.leader_ttl_seen(),
                poll_window: Some(core.poll_window()),
                pg_healthy: matches!(pg.role, PgRole::Primary | PgRole::Replica),
                released: core.released_epoch(),
                // Finding L1: an older agent's key lacks the capability, unless
                // the mode hides it (the cluster as before the capability).
                lacks_acquire_record: cx.old_agent().is_some_and(|(_, shown)| shown),
                parse_error: None,
            };
            last_info = Some(info.clone());
            let d = cap(&core, r, cx.now());
            let _ = cx
                .call(
                    Op::PutMember {
                        name: name.clone(),
                        info: Box::new(info),
                    },
                    d,
                )
                .await;
        }
        let obs = Observation {
            cluster,
            renewal,
            acquire: out.acquire.take(),
            claim: out.claim.take(),
            recorded_initialize: out.recorded_initialize.take(),
            fence: out.fence.take(),
            promoted: out.promoted.take(),
            released: out.released.take(),
            lease_poll,
            leader_deleted_at,
            leader_deleted_revision,
            leader_changes,
            watch_from,
            pg,
            job,
            shutdown,
            watchdog_failed: None,
            watchdog_unusable: None,
            clock_jump: std::time::Duration::ZERO,
            guard_refused: out.guard_refused.take(),
            pet: out.pet.take(),
            guardian_holds: None,
            handed_over: out.handed_over.take(),
        };
        let members_seen = if let Ok(v) = &obs.cluster {
            v.members
                .iter()
                .map(|m| {
                    format!(
                        "{}@{} {} tl{} {} {}",
                        m.name,
                        m.mod_revision,
                        m.info.role,
                        m.info.timeline,
                        m.info.xlog_location,
                        if m.info.pg_healthy { "up" } else { "down" }
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            String::new()
        };
        let now = cx.now();
        let before = core.leadership().map(|l| (l.lease, l.epoch));
        let f_before = core.fence_deadline();
        let plan = core.step(now, &obs);
        if let Some(AcquireOutcome::Unanswered { lease, .. }) = &obs.acquire {
            let won = core.leadership().is_some_and(|l| l.lease == *lease);
            let mut w = cx.w.borrow_mut();
            w.unanswered.0 += 1;
            w.unanswered.1 += u64::from(won);
        }
        // Like the real agent: the member key is published after the step and before
        // the actions, so a clean release's marker precedes the key's deletion.
        if let (Some(epoch), Some(mut info)) = (core.released_epoch(), last_info.take())
            && plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::Release { .. }))
        {
            info.released = Some(epoch);
            info.pg_healthy = matches!(obs.pg.role, PgRole::Primary | PgRole::Replica);
            let d = cap(&core, r, cx.now());
            let _ = cx
                .call(
                    Op::PutMember {
                        name: name.clone(),
                        info: Box::new(info),
                    },
                    d,
                )
                .await;
        }
        {
            let mut w = cx.w.borrow_mut();
            w.note(
                Some(cx.node),
                LogWhat::Step(plan.reason.clone(), plan.actions.clone()),
            );
            if plan.actions.contains(&Action::Acquire) {
                let rev = obs.cluster.as_ref().map_or(0, |v| v.revision);
                w.text(
                    Some(cx.node),
                    format!("acquire decided on scope rev {rev}: [{members_seen}]"),
                );
            }
            if let (Some(b), None) = (before, core.leadership())
                && plan.actions.contains(&Action::Fence)
            {
                fenced.push(b);
            }
            if let Some((lease, epoch)) = core.lease_to_renew()
                && fenced.contains(&(lease, epoch))
            {
                w.violation(format!(
                    "(4) {name} resumes on lease {lease:x} epoch {epoch} after fencing on it"
                ));
            }
            // DESIGN §5 / issue 8 finding 3: the core's `F` is never later than the
            // device's own deadline (it counts only pets that reached the device).
            if let (Some(f), Some(dev)) = (core.fence_deadline(), w.device_deadline(cx.node))
                && f > dev
            {
                w.violation(format!(
                    "{name}: the core's fence deadline F = {f} is after the device's {dev}"
                ));
            }
            if iterations > 2_000_000 {
                w.violation(format!("{name}: runaway loop"));
                return;
            }
        }
        again = plan.again;
        wake = plan.wake_at;
        // Like src/agent.rs after the step: the `tenure.epoch` row of a primary under
        // this leadership (the proof an adoption after a restart reads, seed 253898).
        if let Some(epoch) = core.epoch_to_write(&obs.pg)
            && let Some(lease) = core.leadership().map(|l| l.lease)
        {
            cx.w.borrow_mut().write_epoch(cx.node, epoch, &name, lease);
        }

        for a in plan.actions {
            if out.guard_refused.is_some() {
                // Like the agent: leadership is lost, nothing planned under it runs;
                // the core fences at the next step, which comes at once.
                again = true;
                continue;
            }
            match a {
                Action::ClaimInitialize => {
                    let d = cx.now().add(r);
                    out.claim = Some(match cx.call(Op::Grant { ttl: timing.ttl }, d).await {
                        Ok(Resp::Granted { id, .. }) => {
                            let d = cx.now().add(r);
                            let op = Op::ClaimInit {
                                me: name.clone(),
                                lease: id,
                            };
                            match cx.call(op, d).await {
                                Ok(Resp::Created(Some(_))) => ClaimOutcome::Won { lease: id },
                                Ok(_) => {
                                    let d = cx.now().add(r);
                                    let _ = cx.call(Op::Revoke { lease: id }, d).await;
                                    ClaimOutcome::Lost
                                }
                                Err(e) => ClaimOutcome::Failed(e),
                            }
                        }
                        Ok(other) => ClaimOutcome::Failed(format!("{other:?}")),
                        Err(e) => ClaimOutcome::Failed(e),
                    });
                }
                Action::RecordInitialize { sysid, lease } => {
                    let d = cx.now().add(r);
                    match cx.call(Op::RecordInit { lease, sysid }, d).await {
                        Ok(Resp::Done(b)) => {
                            out.recorded_initialize = Some(b);
                            if b {
                                let d = cx.now().add(r);
                                let _ = cx.call(Op::Revoke { lease }, d).await;
                            }
                        }
                        _ => out.recorded_initialize = None,
                    }
                }
                Action::CreateInitialize { sysid, rollback } => {
                    let d = cx.now().add(r);
                    let op = Op::CreateInit {
                        sysid,
                        by: name.clone(),
                        rollback,
                    };
                    if let Ok(Resp::Done(b)) = cx.call(op, d).await {
                        out.recorded_initialize = Some(b);
                    }
                }
                Action::HoldDataDir { why } => {
                    // The model has no mark: its node keeps its data as it was
                    // (what the core did before the mark, the less careful path).
                    // Its schedules start every agent within a loop of the others,
                    // inside the bootstrap grace, so no bootstrap is given up for a
                    // data member after initdb here (the scenario tests cover that).
                    // What it checks: a hold never takes the data `initialize` names
                    // (a record whose answer was lost read as a lost lock did).
                    let mut w = cx.w.borrow_mut();
                    let named = w.etcd.kv.get("initialize").and_then(|k| match k.val {
                        super::etcd::Val::InitDone(s) => Some(s),
                        _ => None,
                    });
                    if named.is_some() && named == w.nodes[cx.node].pg.sysid {
                        w.violation(format!(
                            "{name} held the data directory initialize names ({named:?}): {why}"
                        ));
                    }
                }
                Action::MarkRollback(seen) => {
                    // The simulated etcd is never wiped or restored: a rollback seen
                    // here is a false positive (it would stop every failover).
                    cx.w.borrow_mut().violation(format!(
                        "{name} saw etcd go back in time in a run without a wipe: {}",
                        seen.reason
                    ));
                    let d = cx.now().add(r);
                    let op = Op::MarkRollback {
                        by: name.clone(),
                        seen,
                    };
                    let _ = cx.call(op, d).await;
                }
                Action::Acquire => {
                    // Bound to the read this decision was made on (review F1).
                    let release_rev = obs.cluster.as_ref().map_or(0, |v| v.release_revision);
                    let g = cx.now();
                    let d = g.add(r);
                    out.acquire = Some(match cx.call(Op::Grant { ttl: timing.ttl }, d).await {
                        Ok(Resp::Granted { id, ttl }) => {
                            let d = cx.now().add(r);
                            let op = Op::CreateLeader {
                                me: name.clone(),
                                lease: id,
                                release_rev,
                                old: cx.old_agent().map(|(o, _)| o),
                            };
                            match cx.call(op, d).await {
                                Ok(Resp::Created(Some(epoch))) => AcquireOutcome::Won {
                                    lease: id,
                                    granted_ttl: ttl as u32,
                                    granted_at: g,
                                    epoch,
                                },
                                Ok(_) => {
                                    let d = cx.now().add(r);
                                    let _ = cx.call(Op::Revoke { lease: id }, d).await;
                                    AcquireOutcome::Lost
                                }
                                // As `Etcd::acquire_seen`: no answer in time, the
                                // lease kept, the core's next read decides.
                                Err(why) => AcquireOutcome::Unanswered {
                                    lease: id,
                                    granted_ttl: ttl as u32,
                                    granted_at: g,
                                    why,
                                },
                            }
                        }
                        Ok(other) => AcquireOutcome::Failed(format!("{other:?}")),
                        Err(e) => AcquireOutcome::Failed(e),
                    });
                }
                Action::StartJob(kind) => {
                    let mut w = cx.w.borrow_mut();
                    if w.nodes[cx.node].job.is_none() {
                        w.start_job(cx.node, kind);
                    }
                }
                Action::Promote { .. } => {
                    let done = cx.w.borrow_mut().promote(cx.node);
                    // pg_promote() waits; the call is still capped at F - B.
                    let until = core.call_cap().unwrap_or(done).min(done).max(cx.now());
                    cx.sleep_until(until).await;
                    let ok = {
                        let w = cx.w.borrow();
                        w.nodes[cx.node].pg.run == super::world::Run::Primary
                    };
                    // The `history` entry comes from a later `AppendHistory` (F2).
                    out.promoted = Some(ok);
                }
                Action::Retarget { leader } => {
                    cx.w.borrow_mut().retarget(cx.node, &leader);
                }
                Action::Fence => {
                    let now = cx.now();
                    let deadline = f_before.unwrap_or(now.add(timing.demote_budget)).max(now);
                    let gone = cx.w.borrow_mut().fence(cx.node);
                    cx.sleep_until(gone.min(deadline)).await;
                    out.fence = Some(if gone <= deadline {
                        FenceOutcome::Complete
                    } else {
                        FenceOutcome::Incomplete
                    });
                }
                Action::Release { lease, epoch } => {
                    let d = cx.now().add(r);
                    let op = Op::DeleteLeader {
                        me: name.clone(),
                        epoch,
                    };
                    out.released = Some(matches!(cx.call(op, d).await, Ok(Resp::Done(true))));
                    let d = cx.now().add(r);
                    let _ = cx.call(Op::Revoke { lease }, d).await;
                }
                Action::Revoke { lease } => {
                    let d = cx.now().add(r);
                    let _ = cx.call(Op::Revoke { lease }, d).await;
                }
                Action::HandOver {
                    lease,
                    epoch,
                    candidate,
                } => {
                    // As the agent: pg_control, then the guarded txn, then the revoke.
                    let ck = cx.w.borrow().shutdown_checkpoint(cx.node);
                    let outcome = match ck {
                        Err(e) => HandOverOutcome::NotSent(e),
                        Ok((timeline, lsn)) => {
                            let marker = ReleaseMarker {
                                epoch,
                                lsn,
                                timeline,
                                candidate,
                                by: name.clone(),
                                taken_by: None,
                            };
                            let d = cap(&core, r, cx.now());
                            let op = Op::HandOver {
                                me: name.clone(),
                                epoch,
                                marker: marker.clone(),
                            };
                            match cx.call(op, d).await {
                                Ok(Resp::Done(true)) => {
                                    let d = cx.now().add(r);
                                    let _ = cx.call(Op::Revoke { lease }, d).await;
                                    let now = cx.now();
                                    let mut w = cx.w.borrow_mut();
                                    w.handovers += 1;
                                    w.handover_at = Some(now);
                                    HandOverOutcome::Released(marker)
                                }
                                Ok(Resp::Done(false)) => {
                                    out.guard_refused = Some("the release txn".into());
                                    HandOverOutcome::NotSent("the epoch guard refused".into())
                                }
                                Ok(other) => HandOverOutcome::Unknown(format!("{other:?}")),
                                Err(e) => HandOverOutcome::Unknown(e),
                            }
                        }
                    };
                    out.handed_over = Some(outcome);
                }
                Action::ClearFailover {
                    epoch,
                    mod_revision,
                } => {
                    let d = cap(&core, r, cx.now());
                    let op = Op::ClearFailover {
                        me: name.clone(),
                        epoch,
                        mod_revision,
                    };
                    let _ = cx.call(op, d).await;
                }
                Action::AppendHistory { epoch, timeline } => {
                    // The fork as PostgreSQL's history file records it; none (the
                    // data came from elsewhere): nothing appended, as in the shell.
                    let fork = cx.w.borrow().nodes[cx.node]
                        .pg
                        .forks
                        .iter()
                        .find(|f| f.0 == timeline)
                        .copied();
                    let Some((_, parent, lsn)) = fork else {
                        continue;
                    };
                    let entry = HistoryEntry {
                        timeline: parent,
                        lsn,
                        reason: "no recovery target specified".into(),
                        timestamp: format!("{}", cx.now()),
                        new_leader: name.clone(),
                    };
                    let d = cap(&core, r, cx.now());
                    let op = Op::AppendHistory {
                        me: name.clone(),
                        epoch,
                        entry,
                    };
                    if let Ok(Resp::Done(false)) = cx.call(op, d).await {
                        out.guard_refused = Some("the history append".into());
                    }
                }
                Action::SyncSlots { .. } | Action::CopySlots { .. } => {}
                Action::WriteSync {
                    epoch,
                    leader,
                    sync_standbys,
                } => {
                    let d = cap(&core, r, cx.now());
                    let key = SyncKey {
                        leader,
                        sync_standbys,
                    };
                    let what = format!("the sync key write {key:?}");
                    let op = Op::WriteSync {
                        me: name.clone(),
                        epoch,
                        key,
                    };
                    // A timeout changes nothing here (the write may still have
                    // landed): the core reads the key next iteration.
                    if let Ok(Resp::Done(false)) = cx.call(op, d).await {
                        out.guard_refused = Some(what);
                    }
                }
                Action::DeleteSync { epoch } => {
                    let d = cap(&core, r, cx.now());
                    let op = Op::DeleteSync {
                        me: name.clone(),
                        epoch,
                    };
                    if let Ok(Resp::Done(false)) = cx.call(op, d).await {
                        out.guard_refused = Some("the sync key delete".into());
                    }
                }
                Action::SetSyncNames { names } => {
                    let mut w = cx.w.borrow_mut();
                    if let Err(e) = w.set_sync_names(cx.node, &names) {
                        w.text(Some(cx.node), format!("SetSyncNames {names:?}: {e}"));
                    }
                }
                Action::MoveDataAside => cx.w.borrow_mut().move_aside(cx.node),
                Action::PetWatchdog { not_after } => {
                    let h = core.horizon();
                    let report = do_pet(&cx, &name, wd, not_after, h).await;
                    out.pet = Some(PetReport::fold(out.pet.take(), report));
                }
                Action::DisarmWatchdog => cx.w.borrow_mut().disarm(cx.node),
                Action::Exit => return,
            }
        }
    }
}
