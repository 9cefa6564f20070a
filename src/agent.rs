//! The loop: wait → observe → core → act, one thread, a deadline on every step.
//!
//! Owns: the schedule (fixed-rate renewal ticks), the single blocking point (the
//! wait, woken by the next tick, a watch event on `leader`, an API connection, a
//! signal or a child exiting), carrying out the core's plan, and the member key.
//!
//! Must never: decide (the core does), block past the deadline it computed (every
//! call is capped at `F - B` while leading, S1), let anything but the renewal delay
//! the renewal (S6 d), spawn a thread, or resolve a host name.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use log::{debug, error, info, warn};
use tokio::runtime::Runtime;

use crate::api;
use crate::clock;
use crate::config::Config;
use crate::config::WatchdogMode;
use crate::core::model::*;
use crate::core::time::Instant;
use crate::core::{Core, CoreConfig};
use crate::dcs::{AcquireBasis, Etcd, WatchEvent};
use crate::pg::{ConnTarget, PgCtl};
use crate::watchdog::{Device, Notifier, OpenTry, WatchdogError};

mod cluster_config;
mod events_hooks;
mod guardian_hooks;
mod intents;
mod leader_watch;
mod looptrace;
mod manage;
mod names;
mod schedule;
mod secure;
mod slots;
mod steadylog;
mod switchover;
mod view;
mod wdcheck;

/// The cluster "read" of an iteration cut short past `F - B` after its renewal.
const PAST_CAP: &str = "not read: past F - B";

/// Why the wait returned.
enum Wake {
    /// The wait's own deadline: the next renewal tick or `F - B` (S1).
    Tick,
    Signal,
    Watch(WatchEvent),
    /// The API listener or a connection can make progress, or a connection's
    /// deadline passed: `ApiServer::service`, which never blocks.
    Api,
}

/// Signals, as flags set by signal-hook's handlers plus a self-pipe that wakes the wait.
struct Signals {
    term: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
    pipe: tokio::net::UnixStream,
}

/// The watchdogs leadership is tied to (DESIGN S1, S2): the device and systemd's.
struct Watchdogs {
    mode: WatchdogMode,
    path: PathBuf,
    /// `W` to request: the top of the range S6 allows for the configured ttl.
    requested: u32,
    /// The device is in use for this run (mode not off, present, not found unusable).
    use_device: bool,
    device: Option<Device>,
    /// After a fence under `nowayout` the device cannot be disarmed: keep it open and
    /// keep petting it (harmless once no primary runs, DESIGN S1).
    keep_petting: bool,
    notifier: Notifier,
    /// `WATCHDOG_USEC`: systemd's watchdog, playing `W` on the leader (S2).
    systemd_w: Option<Duration>,
    ready_sent: bool,
    last_status: String,
    /// `WATCHDOG_RESET` was said this run (sysfs at start-up or the first open).
    boot_reset_said: bool,
    /// How long this leadership's arming found the device busy (review of
    /// 677a682, M1): busy for `retry_timeout` across attempts is a device that
    /// cannot be used; an attempt whose retries the loop cut shorter is tried
    /// again at the next counted renewal.
    busy_since: crate::watchdog::BusySince,
    /// The required device's check before candidacy (agent/wdcheck.rs).
    check: wdcheck::WdCheck,
}

/// Outcomes of this iteration's actions, reported in the next observation.
#[derive(Default)]
struct Pending {
    acquire: Option<AcquireOutcome>,
    claim: Option<ClaimOutcome>,
    recorded_initialize: Option<bool>,
    fence: Option<FenceOutcome>,
    promoted: Option<bool>,
    released: Option<bool>,
    /// A required watchdog could not be armed (S3).
    watchdog_failed: Option<String>,
    /// A guarded write the epoch guard refused (DESIGN §1 step 5): which one.
    guard_refused: Option<String>,
    /// The last pet made or skipped (DESIGN §5: a fact for the core).
    pet: Option<PetReport>,
    /// What became of a switchover's release (`HandOver`).
    handed_over: Option<HandOverOutcome>,
}

/// How often the leader's slot upkeep runs again with unchanged inputs.
const SLOTS_RECHECK: Duration = Duration::from_secs(60);

/// What the last `sync_slots` made on the running primary, and from what: the
/// postmaster, the members, the `slots` and `ignore_slots` config values.
#[derive(Debug, PartialEq)]
struct SlotsMade {
    /// When: the upkeep also runs again after [`SLOTS_RECHECK`], for what changes
    /// without an input changing (a slot PostgreSQL invalidated, a removed
    /// permanent slot whose consumer has since let go of it).
    at: crate::core::time::Instant,
    postmaster: u32,
    members: Vec<String>,
    permanent: Vec<String>,
    ignore: Vec<crate::config::IgnoreSlot>,
    /// The leadership it was made under.
    epoch: Epoch,
    /// `member_slots_ttl` then.
    ttl: Duration,
    /// Departed members' slots kept (`member_slots_ttl`), and when the first of
    /// them expires: the upkeep runs again then.
    retained: Vec<String>,
    retained_until: Option<crate::core::time::Instant>,
    /// What failed (creates refused), said once.
    error: Option<String>,
}

struct Agent {
    cfg: Config,
    config_path: PathBuf,
    prefix: String,
    rt: Runtime,
    etcd: Option<Etcd>,
    /// The one etcd endpoint `etcd` talks to (an index into `[etcd] endpoints`).
    endpoint: usize,
    /// `[etcd] srv`: the URL of the member the client talks to when a newer SRV
    /// answer no longer lists it (names.rs): kept until a call to it fails, and
    /// `endpoint` then starts the new list from its first entry.
    endpoint_unlisted: Option<String>,
    /// Endpoint names, their last good addresses and the resolver child (names.rs).
    names: names::Names,
    /// The last certificate/auth error logged (agent/secure.rs: once per distinct text).
    security_error: Option<String>,
    /// The last failure of the cluster-wide PostgreSQL settings logged (once per
    /// distinct text), and when `maintain_cluster_params` may try again (at most
    /// once a `loop_wait`, and never faster than a second).
    params_error: Option<String>,
    params_retry_at: Option<Instant>,
    /// When a reload's node settings that failed to be written or reloaded are
    /// tried again (`maintain_node_params`).
    node_params_retry_at: Option<Instant>,
    /// A `config` key was applied in this run: only then does this node know the
    /// cluster-wide PostgreSQL settings (before, `tenure.params.conf` stays as
    /// an earlier run left it: etcd may be down at start-up).
    params_known: bool,
    pg: PgCtl,
    core: Core,
    api: api::server::ApiServer,
    signals: Signals,
    member_lease: Option<LeaseId>,
    /// The member key as last written (lease, JSON): an idle cluster writes nothing
    /// (issue 13 item 5); `publish_member` says when it is written anyway.
    member_written: Option<(LeaseId, MemberInputs, String)>,
    /// When the member lease was last kept alive: at a third of its TTL, not every
    /// tick (it is no part of any safety rule: a lost member key is re-published).
    member_kept_at: Option<Instant>,
    /// Send instant of the last linearizable read of the scope that answered
    /// (agent/view.rs: a follower on the kept view reads at least every `ttl / 3`).
    scope_read_at: Option<Instant>,
    /// The member lease's granted TTL (`None`: reused from an earlier run, unknown).
    member_ttl: Option<u32>,
    next_tick: Instant,
    /// The plan's wake-up and a non-leader's etcd budget (agent/schedule.rs).
    schedule: schedule::Schedule,
    /// Boottime and realtime at the start of the last iteration (S5).
    last_iteration: Option<(Instant, Duration)>,
    pending: Pending,
    leader_deleted_at: Option<Instant>,
    /// The latest such watch event's revision (`Observation::leader_deleted_revision`).
    leader_deleted_revision: Option<i64>,
    /// Every `leader` change the watch reported, and its coverage (leader_watch.rs).
    leader_watch: leader_watch::LeaderWatch,
    last_view: Option<ClusterView>,
    /// Immediate switchover/failover requests waiting for their outcome (issue 9).
    awaiting: Vec<switchover::Awaiting>,
    last_pg: Option<PgStatus>,
    applied_config: Option<String>,
    /// The slots last made on the running primary. A change re-runs `sync_slots`,
    /// and so does [`SLOTS_RECHECK`]; a new postmaster, a promotion, a fence or a
    /// job forgets it (pg_rewind and basebackup leave pg_replslot empty; a node
    /// that left leadership by a clean switchover keeps its slots as a standby,
    /// and they may have been invalidated by the time it leads again).
    slots: Option<SlotsMade>,
    status: api::ApiStatus,
    /// The `status` key this leadership last wrote (`slots::StatusWritten`).
    status_written: Option<slots::StatusWritten>,
    /// A replica's last slot copy run (`slots::CopyRun`).
    slot_copies: Option<slots::CopyRun>,
    /// Departed members' slots the leader keeps (`member_slots_ttl`).
    retention: crate::pg::slots::Retention,
    last_reason: String,
    /// Which iterations' reasons go to the log (`steadylog`).
    steady_log: steadylog::SteadyLog,
    shutdown: bool,
    /// Iterations that took longer than `P` (+ `R` with a renewal), since start.
    budget_overruns: u64,
    state_file: PathBuf,
    /// The etcd cluster the first answer came from: with endpoints from DNS every
    /// client's every answer is checked against it for the rest of the run
    /// (dcs/pin.rs).
    etcd_cluster: crate::dcs::ClusterPin,
    wd: Watchdogs,
    /// The guardian, where it is the fence (DESIGN §2, `guardian_hooks`).
    guardian: guardian_hooks::GuardianSlot,
    /// What the events last said (edge-triggered, `events_hooks`).
    ev: events_hooks::EventState,
    /// `[hooks]`: children reaped and killed on the loop's wake-ups, never waited on.
    hooks: crate::hooks::Hooks,
    /// The operator's restart and reinitialize (`manage`).
    ops: manage::OperatorJobs,
    /// The last failed `history` append's text (logged once per distinct text).
    history_warned: Option<String>,
    /// The timeline whose fork `history` was seen to hold (`append_history`).
    history_recorded: Option<(u32, (u32, Lsn))>,
    /// Benchmarks' per-iteration trace (`TENURE_LOOP_TRACE`; off by default).
    trace: looptrace::LoopTrace,
    /// Certificate expiry: the `notAfter`s `Config::load` read, and when the
    /// alerts are due next (crate::certs).
    certs: crate::certs::CertWatch,
}

/// Run the agent until a clean shutdown. Errors are start-up failures; once the loop
/// runs, failures are observations.
pub fn run(cfg: Config, config_path: &Path) -> Result<(), String> {
    let mut agent = Agent::new(cfg, config_path)?;
    agent.run()
}

/// `tenure confirm-epoch`: after an operator checked that etcd was wiped or
/// restored (DESIGN §3), in one txn write `confirm_epoch` = `{"up_to": N, "by": ...,
/// "at": ...}` (a leader whose data carries an epoch `<= N` may promote under the
/// smaller epoch of the new leader key) and delete the `rollback` marker (no node
/// leads while it exists). `N` is `epoch`, or else the local `tenure.epoch` row
/// (PostgreSQL must be running). Returns `N` and the marker cleared, if any.
/// Bounded (10 s).
pub fn confirm_epoch(
    cfg: &Config,
    epoch: Option<Epoch>,
    by: &str,
) -> Result<(Epoch, Option<RollbackMarker>), String> {
    let deadline = clock::now().add(Duration::from_secs(10));
    let up_to = match epoch {
        Some(e) if e > 0 => e,
        Some(e) => return Err(format!("--epoch {e}: an epoch is a positive integer")),
        None => {
            let mut pg = PgCtl::new(&cfg.postgresql, &cfg.name).map_err(|e| e.to_string())?;
            let st = pg.probe(clock::now().add(Duration::from_secs(5)));
            st.epoch.ok_or_else(|| {
                format!(
                    "cannot read the epoch row of the local PostgreSQL (role {:?}): is it \
                     running? Pass --epoch N with the number the agent's refusal names",
                    st.role
                )
            })?
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot build the event loop: {e}"))?;
    let prefix = format!("{}/{}/", cfg.namespace.trim_end_matches('/'), cfg.scope);
    let sec = crate::dcs::Security::of(&cfg.etcd);
    let endpoints = crate::resolve::endpoints_now(&cfg.etcd, deadline)?;
    let mut etcd = Etcd::connect_authenticated(&rt, &endpoints, &prefix, &sec, deadline)
        .map_err(|e| e.to_string())?;
    let c = ConfirmEpoch {
        up_to,
        by: by.to_string(),
        at: clock::rfc3339_utc(clock::realtime()),
    };
    let cleared = etcd
        .confirm_epoch(&rt, &c, deadline)
        .map_err(|e| e.to_string())?;
    Ok((up_to, cleared))
}

fn timing_of(cfg: &Config) -> Timing {
    Config::core_timing(&cfg.timing, &cfg.dynamic)
}

impl Agent {
    fn new(cfg: Config, config_path: &Path) -> Result<Agent, String> {
        // DESIGN §5: one OS thread. The current-thread runtime runs etcd-client and is
        // the loop's poller; nothing here may use spawn_blocking.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("cannot build the event loop: {e}"))?;

        let term = Arc::new(AtomicBool::new(false));
        let hup = Arc::new(AtomicBool::new(false));
        let (rx, tx) = UnixStream::pair().map_err(|e| format!("signal pipe: {e}"))?;
        rx.set_nonblocking(true)
            .map_err(|e| format!("signal pipe: {e}"))?;
        tx.set_nonblocking(true)
            .map_err(|e| format!("signal pipe: {e}"))?;
        use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
        for sig in [SIGTERM, SIGINT] {
            signal_hook::flag::register(sig, Arc::clone(&term))
                .map_err(|e| format!("register signal {sig}: {e}"))?;
        }
        signal_hook::flag::register(SIGHUP, Arc::clone(&hup))
            .map_err(|e| format!("register SIGHUP: {e}"))?;
        for sig in [SIGTERM, SIGINT, SIGHUP, SIGCHLD] {
            let tx = tx.try_clone().map_err(|e| format!("signal pipe: {e}"))?;
            signal_hook::low_level::pipe::register(sig, tx)
                .map_err(|e| format!("register signal {sig}: {e}"))?;
        }
        let (pipe, api) = {
            let _g = rt.enter();
            let pipe =
                tokio::net::UnixStream::from_std(rx).map_err(|e| format!("signal pipe: {e}"))?;
            let std_l = std::net::TcpListener::bind(&cfg.api.listen)
                .map_err(|e| format!("cannot listen on [api] listen = {}: {e}", cfg.api.listen))?;
            let mut api =
                api::server::ApiServer::new(std_l).map_err(|e| format!("api socket: {e}"))?;
            api.set_auth(cfg.api.auth.clone());
            // Issue 12: https:// only when [api] certfile is set.
            let tls = api::server::tls_of(&cfg.api)?;
            let verify = cfg.api.tls.as_ref().map(|t| t.verify_client);
            api.set_tls(tls, verify.unwrap_or_default(), cfg.api.read_auth);
            (pipe, api)
        };

        let mut pg =
            PgCtl::new(&cfg.postgresql, &cfg.name).map_err(|e| format!("postgresql: {e}"))?;
        pg.set_loop_wait(cfg.timing.loop_wait);
        // Orphaned postmasters and backends (after a fence, or pg_ctl's exit) are
        // reparented to us rather than to a pid 1 that may not reap them.
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes no pointers; it only sets a
        // flag on this process.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            warn!(
                "prctl(PR_SET_CHILD_SUBREAPER): {}",
                std::io::Error::last_os_error()
            );
        }
        let core = Core::new(
            CoreConfig {
                name: cfg.name.clone(),
                nofailover: cfg.nofailover,
                watchdog: None,
                move_aside_unusable: cfg.postgresql.move_aside_unusable,
            },
            timing_of(&cfg),
        );
        let (wd, mut core) = Watchdogs::setup(&cfg, core)?;
        // DESIGN §2: forked at start-up, before any leadership.
        let guardian = guardian_hooks::start(&cfg, &wd, &mut core);
        let prefix = format!("{}/{}/", cfg.namespace.trim_end_matches('/'), cfg.scope);
        let state_file = cfg.postgresql.socket_dir.join("tenure.member-lease");
        let status = api::fill::initial(&cfg);
        Ok(Agent {
            prefix,
            rt,
            etcd: None,
            endpoint: 0,
            endpoint_unlisted: None,
            names: names::Names::new(&cfg.etcd),
            security_error: None,
            params_error: None,
            params_retry_at: None,
            node_params_retry_at: None,
            params_known: false,
            pg,
            core,
            api,
            signals: Signals { term, hup, pipe },
            member_lease: None,
            member_written: None,
            member_kept_at: None,
            scope_read_at: None,
            member_ttl: None,
            next_tick: clock::now(),
            schedule: schedule::Schedule::default(),
            last_iteration: None,
            pending: Pending::default(),
            leader_deleted_at: None,
            leader_deleted_revision: None,
            leader_watch: Default::default(),
            last_view: None,
            awaiting: Vec::new(),
            last_pg: None,
            applied_config: None,
            slots: None,
            status,
            status_written: None,
            slot_copies: None,
            retention: Default::default(),
            last_reason: String::new(),
            steady_log: steadylog::SteadyLog::default(),
            shutdown: false,
            budget_overruns: 0,
            state_file,
            etcd_cluster: crate::dcs::ClusterPin::default(),
            wd,
            guardian,
            ev: events_hooks::EventState::default(),
            hooks: events_hooks::hooks(&cfg),
            ops: manage::OperatorJobs::default(),
            history_warned: None,
            history_recorded: None,
            trace: looptrace::LoopTrace::from_env(&cfg.name),
            certs: crate::certs::CertWatch::new(&cfg.certs),
            config_path: config_path.to_path_buf(),
            cfg,
        })
    }

    fn run(&mut self) -> Result<(), String> {
        info!(
            "tenure {} starting: member {} of scope {} (pid {})",
            env!("CARGO_PKG_VERSION"),
            self.cfg.name,
            self.cfg.scope,
            std::process::id()
        );
        tune_process(&self.cfg.agent);
        nonblocking_log_pipe();
        // Before any lease: the only place the agent waits for a resolver.
        self.resolve_at_startup();
        self.startup_member_check()?;
        let mut again_budget = 0u32;
        let mut again = false;
        loop {
            let wake = if again && again_budget < 8 {
                again_budget += 1;
                Wake::Tick
            } else {
                // The run of immediate steps is over: the next one waits for the tick.
                // (An API wake must not restart it: a stream of connections would
                // turn a plan that always says `again` into back-to-back steps.)
                again = false;
                again_budget = 0;
                // S1: while leading, also wake at `F - B`, not at the next tick after it.
                let until = if self.core.renew_now() {
                    clock::now()
                } else {
                    match self.core.call_cap() {
                        Some(cap) => self.next_tick.min(cap),
                        None => self.next_tick,
                    }
                };
                // The core's own deadline (the promote delay's end), if sooner.
                let until = self.wait_end(until);
                // A hook's deadline wakes the wait too, but only to kill the hook:
                // it runs no iteration (the renewal keeps its fixed schedule, S6 d).
                match self.hooks.deadline() {
                    Some(h) if h < until => {
                        let w = self.wait(h);
                        self.service_hooks();
                        if matches!(w, Wake::Tick) {
                            continue;
                        }
                        w
                    }
                    _ => self.wait(until),
                }
            };
            self.service_hooks();
            match wake {
                Wake::Api => {
                    // Non-blocking and bounded (issue 8 finding 1): the wait serves
                    // every due deadline before any input, so no client can hold
                    // the loop or starve the timer.
                    self.serve_api();
                    continue;
                }
                Wake::Watch(ev) => {
                    if !self.on_watch(ev) {
                        continue;
                    }
                }
                Wake::Signal => {
                    self.drain_signals();
                    self.reap_orphans();
                    if self.signals.hup.swap(false, Ordering::SeqCst) {
                        self.reload();
                    }
                    if self.signals.term.load(Ordering::SeqCst) && !self.shutdown {
                        info!("SIGTERM: shutting down cleanly");
                        self.wd.notifier.stopping();
                        self.shutdown = true;
                    }
                }
                Wake::Tick => {}
            }
            let now = clock::now();
            let iteration_start = now;
            let tick = now >= self.next_tick || self.core.renew_now();
            self.trace.begin(now, tick);
            if now >= self.next_tick {
                let lw = self.core.timing().loop_wait;
                let late = now.since(self.next_tick);
                self.status.metrics.loop_lateness.observe(late);
                self.trace.late(late);
                self.next_tick = self.next_tick.add(lw);
                if self.next_tick <= now {
                    // INVARIANT: ticks stay on a fixed grid unless we fell a whole period
                    // behind, which is an overrun worth saying out loud.
                    self.deadline_overrun(crate::events::Event::DeadlineOverrun {
                        what: "renewal schedule",
                        took: now.since(self.next_tick),
                        budget: Duration::ZERO,
                    });
                    self.next_tick = now.add(lw);
                    self.status.metrics.schedule_overruns += 1;
                    self.trace.schedule_overrun();
                }
            }
            // S5: stalls are lease loss. CLOCK_BOOTTIME counts through suspend; a
            // hypervisor pause freezes it too and shows only as CLOCK_REALTIME moving
            // further than CLOCK_BOOTTIME did: that excess is lease time lost.
            let real = clock::realtime();
            let mut clock_jump = Duration::ZERO;
            if let Some((last, last_real)) = self.last_iteration {
                let gap = now.since(last);
                let real_gap = real.saturating_sub(last_real);
                let excess = real_gap.saturating_sub(gap);
                if excess > Duration::from_millis(50) {
                    clock_jump = excess;
                    error!(
                        "ALERT: wall clock moved {:.3} s more than CLOCK_BOOTTIME since the last \
                         iteration (a paused VM?): counting it as lease time lost",
                        excess.as_secs_f64()
                    );
                }
                let limit = self.core.timing().loop_wait + self.cfg.timing.iteration_budget;
                if gap > limit + self.core.timing().loop_wait {
                    self.deadline_overrun(crate::events::Event::DeadlineOverrun {
                        what: "stall between iterations",
                        took: gap,
                        budget: limit,
                    });
                }
            }
            self.last_iteration = Some((now, real));
            self.check_guardian();

            // S5: past `F - B` nothing else may come first: skip every call and let the
            // core fence on what it already knows.
            let late = self
                .core
                .call_cap()
                .is_some_and(|cap| now.add(clock_jump) >= cap);
            let obs = if late {
                warn!("woke past the fence start F - B: fencing before anything else (S5)");
                self.stalled_observation(clock_jump)
            } else if self.core.fence_in_progress() {
                // Issue 8 finding 6: a fence under way (retrying) comes before any
                // call: nothing is read or written until it is complete.
                self.stalled_observation(clock_jump)
            } else {
                let mut o = self.observe(now, tick);
                o.clock_jump = clock_jump;
                // A stall inside the iteration's calls (each capped at `F - B`, so
                // none outlived it): say so; the step below fences first.
                let said = matches!(&o.cluster, Err(e) if e == PAST_CAP);
                if !said
                    && self
                        .core
                        .call_cap()
                        .is_some_and(|cap| clock::now().add(clock_jump) >= cap)
                {
                    warn!(
                        "woke past the fence start F - B during the iteration's calls (a \
                         stall): fencing before anything else (S5)"
                    );
                }
                o
            };
            let now = clock::now();
            let plan = self.core.step(now, &obs);
            self.plan_wake(plan.wake_at);
            self.guardian_after_step();
            self.events_after_step(now, &obs, &plan);
            self.trace.phase(looptrace::Phase::Step);
            let reason = plan.reason.to_string();
            let changed = reason != self.last_reason;
            if let Some(level) = self.steady_log.level(now, &plan.reason, changed, tick) {
                log::log!(level, "{reason}");
            }
            self.update_status(now, &obs, &reason);
            self.last_reason = reason;
            self.trace.phase(looptrace::Phase::Log);
            // A plan that fences runs the fence before any call (issue 8 finding
            // 6): the member key is published after it. Otherwise before the
            // actions, so a clean release's marker precedes the key's deletion.
            let fences = plan.actions.contains(&Action::Fence);
            if !fences {
                self.publish_member(&obs);
            }
            let exit = self.act(plan.actions, &obs);
            if fences && !self.core.fence_in_progress() {
                self.publish_member(&obs);
            }
            // A refused guard is lost leadership: fence in the very next step.
            again = plan.again || self.pending.guard_refused.is_some();
            if !exit && let Some(epoch) = self.core.epoch_to_write(&obs.pg) {
                // A primary under this leadership whose row does not say so yet
                // (bootstrap start, adoption, or a failed write earlier).
                self.write_epoch(epoch);
            }
            if !exit && tick {
                self.publish_status(&obs);
            }
            if let Ok(view) = &obs.cluster {
                self.maintain_hba(view);
            }
            // Not while a fence runs, nor on the way out.
            if !exit && !self.core.fence_in_progress() {
                self.maintain_cluster_params();
                self.maintain_node_params();
            }
            self.notify_after_iteration(&obs);
            self.check_iteration_budget(iteration_start, tick);
            // Certificate expiry alerts when due: the stored notAfter and the clock
            // already read, no I/O (crate::certs; said at start-up, reload, daily).
            self.certs.check(real.as_secs() as i64);
            // The API's write intents deferred because a deadline was near.
            self.carry_out_intents();
            self.run_scheduled_restart();
            self.keep_schedule();
            if exit {
                self.hooks.finish();
                self.stop_guardian();
                self.wd.notifier.stopping();
                info!("exiting");
                return Ok(());
            }
            // Kept for the next iteration (a stalled one reads nothing): moved, not
            // copied, once this iteration is done with them.
            if let Ok(v) = obs.cluster {
                self.last_view = Some(v);
            }
            self.last_pg = Some(obs.pg);
        }
    }

    /// Refuse to start if another live lease holds `members/<me>` (another agent with
    /// our name). A lease recorded by our own previous run is ours to reuse.
    fn startup_member_check(&mut self) -> Result<(), String> {
        let mine: Option<LeaseId> = std::fs::read_to_string(&self.state_file)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let deadline = clock::now().add(Duration::from_secs(5));
        let name = self.cfg.name.clone();
        let attempt = match self.connect(deadline) {
            Some((etcd, rt)) => etcd
                .authenticate(rt, deadline)
                .and_then(|()| etcd.member_held_elsewhere(rt, &name, mine, deadline))
                .map_err(|e| e.to_string()),
            None => Err("etcd unreachable".to_string()),
        };
        match attempt {
            Ok(true) => Err(format!(
                "another live lease holds {}members/{}: is another agent running as {}?",
                self.prefix, self.cfg.name, self.cfg.name
            )),
            Ok(false) => {
                self.member_lease = mine;
                Ok(())
            }
            Err(e) => {
                // etcd down at start-up is not fatal: the loop retries; S4 fences a
                // local primary that cannot adopt.
                warn!("start-up member check skipped: {e}");
                Ok(())
            }
        }
    }

    /// The etcd client (connecting first if needed) and the runtime that drives it.
    /// The etcd client, connected to one endpoint at a time (Patroni's way). A
    /// client over all endpoints balances requests across them, so with one member
    /// dead a share of every iteration's calls went to it and failed, and a leader
    /// could miss renewals until it fenced (seen in the real-parts soak). One
    /// endpoint, and the next one after any failure (`switch_endpoint`), costs at
    /// most one failed call per dead member.
    fn connect(&mut self, deadline: Instant) -> Option<(&mut Etcd, &Runtime)> {
        if self.etcd_budget_spent() {
            // A non-leader's observation waited out its etcd time: nothing more is
            // sent in it (agent/schedule.rs).
            return None;
        }
        if self.etcd.is_none() {
            let eps = &self.cfg.etcd.endpoints;
            let i = self.endpoint % eps.len().max(1);
            // A name connects to its last good address (names.rs).
            let label = eps.get(i).cloned().unwrap_or_default();
            // DNS names the members (`srv`, host names), and may name another
            // cluster's later (a wrong or forged record): every answer of every
            // client must then come from the etcd cluster this agent first used
            // (dcs/pin.rs; review of the SRV change, finding 1: agents split
            // between two clusters would each elect a leader). A call answered by
            // another cluster fails, and its caller moves on to the next endpoint
            // as after any failure. Endpoints given as addresses are not pinned:
            // a new id there is etcd restored under a new token, which the
            // rollback marker catches from the agents' memory of revisions — a
            // refusal would have every agent restarted, and that memory lost.
            // Those are still noted: a changed id is said (an ALERT, DESIGN §3's
            // "extra signal"), never refused.
            let enforce = self.names.named_by_dns();
            let pin = self.etcd_cluster.clone();
            let connected = self.etcd_target(i).and_then(|(url, sec)| {
                Etcd::connect_with(&self.rt, &[url], &self.prefix, &sec, deadline)
                    .map(|e| {
                        if enforce {
                            e.pinned(pin, &label)
                        } else {
                            e.observed(pin, &label)
                        }
                    })
                    .map_err(|e| e.to_string())
            });
            match connected {
                Ok(e) => self.etcd = Some(e),
                Err(e) => {
                    // `[etcd] srv` before its first answer: no endpoint at all.
                    let ep = self
                        .cfg
                        .etcd
                        .endpoints
                        .get(i)
                        .map_or("(no endpoint)", String::as_str);
                    let msg = format!("etcd connect to {ep}: {e}");
                    self.etcd_failed(&msg);
                    self.switch_endpoint();
                    return None;
                }
            }
        }
        let Agent { etcd, rt, .. } = self;
        etcd.as_mut().map(|e| (e, &*rt))
    }

    /// Drop the client (and its watch) and use the next endpoint from the next call
    /// on; the watch is reopened after the next successful read.
    fn switch_endpoint(&mut self) {
        if !self.may_switch_endpoint() {
            return;
        }
        self.etcd = None;
        if self.endpoint_unlisted.take().is_some() {
            // A member the SRV records no longer list failed: the new list from
            // its first entry, none of which failed (names.rs).
            self.endpoint = 0;
        } else {
            // Its name is resolved again in `resolve_step`, never here (names.rs).
            self.names.failed(self.endpoint);
            let n = self.cfg.etcd.endpoints.len().max(1);
            self.endpoint = (self.endpoint + 1) % n;
        }
        self.status.metrics.etcd_endpoint_unlisted = None;
        self.status.metrics.endpoint_switched(self.endpoint);
        debug!(
            "etcd: switching to endpoint {}",
            self.cfg
                .etcd
                .endpoints
                .get(self.endpoint)
                .map_or("(none yet)", String::as_str)
        );
    }

    /// Deadline for a call of at most `d`, capped at `F - B` while leading (S1), and
    /// at the next renewal tick while leading (S6 d: nothing an iteration does may
    /// delay the next keepalive; issue 8 finding 5).
    fn deadline(&self, d: Duration) -> Instant {
        let t = self.deadline_past_tick(d);
        if self.core.leadership().is_some() {
            t.min(self.next_tick)
        } else {
            self.within_etcd_budget(t)
        }
    }

    /// `min(now + d, F - B)`, not capped at the next tick: for the few one-off
    /// actions whose failure costs more than a late keepalive — `pg_promote()` —
    /// so a promotion that starts
    /// just before a tick is not cut short (review of issue 8). S1 still caps them.
    fn deadline_past_tick(&self, d: Duration) -> Instant {
        let t = clock::now().add(d);
        match self.core.call_cap() {
            Some(cap) => t.min(cap),
            None => t,
        }
    }

    /// Whether a call of at most `d` starting now is cut short by the next tick: its
    /// timeout is then no evidence against the etcd member it went to.
    fn cut_by_tick(&self, d: Duration) -> bool {
        self.core.leadership().is_some() && self.next_tick < clock::now().add(d)
    }

    /// `P` (S6 d): everything an iteration does besides the renewal must fit in it;
    /// an iteration that took longer is said, so a slow disk or PostgreSQL shows in
    /// the log before it shows as a late renewal.
    fn check_iteration_budget(&mut self, start: Instant, tick: bool) {
        let took = clock::now().since(start);
        let budget = self.cfg.timing.iteration_budget
            + if tick {
                self.core.timing().retry_timeout
            } else {
                Duration::ZERO
            };
        self.trace
            .end(took, took > budget, self.core.leadership().is_some());
        if took > budget {
            self.budget_overruns += 1;
            self.status.metrics.iteration_overruns += 1;
            self.deadline_overrun(crate::events::Event::DeadlineOverrun {
                what: if tick {
                    "iteration (P + R)"
                } else {
                    "iteration (P)"
                },
                took,
                budget,
            });
        } else {
            self.on_time();
        }
    }

    /// The loop's one blocking point. Order of service (DESIGN §5, issue 8 finding
    /// 1): a due deadline first — if `until` has passed nothing else is even polled —
    /// then signals, the watch, and the API last. The API branch only reports
    /// readiness; the work happens in `serve_api`, which never blocks.
    fn wait(&mut self, until: Instant) -> Wake {
        let now = clock::now();
        if now >= until {
            return Wake::Tick;
        }
        let d = now.until(until);
        let api_d = self.api.next_deadline().map(|t| now.until(t));
        let Agent {
            rt,
            etcd,
            api,
            signals,
            ..
        } = self;
        rt.block_on(async {
            let watch = async {
                match etcd.as_mut() {
                    Some(e) => e.next_watch_event().await,
                    None => std::future::pending().await,
                }
            };
            let api_deadline = async {
                match api_d {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = tokio::time::sleep(d) => Wake::Tick,
                _ = signals.pipe.readable() => Wake::Signal,
                ev = watch => Wake::Watch(ev),
                _ = api.ready() => Wake::Api,
                _ = api_deadline => Wake::Api,
            }
        })
    }

    /// Reap zombie children that are not the running job's (which `poll_job` reaps).
    fn reap_orphans(&self) {
        let job = self.pg.job_pid();
        for pid in crate::pg::procs::zombie_children(std::process::id()) {
            if Some(pid) != job
                && !self.hooks.owns(pid)
                && !self.names.owns(pid)
                && !self.pg.owns_child(pid)
            {
                let _ = nix::sys::wait::waitpid(
                    nix::unistd::Pid::from_raw(pid as i32),
                    Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                );
            }
        }
    }

    fn drain_signals(&mut self) {
        let mut buf = [0u8; 64];
        while let Ok(n) = self.signals.pipe.try_read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    }

    /// What a watch event means for this node; `false`: no iteration for it.
    fn on_watch(&mut self, ev: WatchEvent) -> bool {
        match ev {
            WatchEvent::LeaderDeleted { revision } => {
                debug!("watch: leader deleted at revision {revision}");
                self.note_leader_change(revision, None);
                if self.is_fresh_event(revision) {
                    self.leader_deleted_at.get_or_insert(clock::now());
                    self.leader_deleted_revision = self.leader_deleted_revision.max(Some(revision));
                }
            }
            WatchEvent::LeaderPut {
                name,
                revision,
                epoch,
                lease,
            } => {
                debug!("watch: leader = {name} at revision {revision}");
                // DESIGN §1 step 4, S3: a leadership no read may show (core::vacancy).
                let key = LeaderKey {
                    name: name.clone(),
                    epoch,
                    mod_revision: revision,
                    lease,
                };
                self.note_leader_change(revision, Some(key));
                if name != self.cfg.name
                    && self.core.leadership().is_some()
                    && self.is_fresh_event(revision)
                {
                    self.leader_deleted_at.get_or_insert(clock::now());
                }
            }
            WatchEvent::Broken(why) => {
                debug!("watch broken: {why}; reopening at the next read");
            }
            // Issue 13 item 4: during a vacancy a candidate waits for its rivals'
            // fresh positions (DESIGN §3a); it looks again the moment one is
            // published instead of at its next tick. Any other member write wakes
            // nothing (an idle cluster writes none; a busy one, positions).
            WatchEvent::MemberPut { name, revision } => {
                return name != self.cfg.name
                    && self
                        .core
                        .vacancy_revision()
                        .is_some_and(|seen| revision > seen);
            }
        }
        true
    }

    /// An event older than our own leadership says nothing about it.
    fn is_fresh_event(&self, revision: i64) -> bool {
        match self.core.leadership() {
            Some(l) => revision > l.epoch,
            None => true,
        }
    }

    fn reload(&mut self) {
        match self.reload_config() {
            Ok(()) => info!(
                "SIGHUP: configuration reloaded from {}",
                self.config_path.display()
            ),
            Err(e) => config_refused(format!(
                "SIGHUP: reload refused, keeping the running configuration: {e}"
            )),
        }
    }

    /// The configuration file again (SIGHUP, `POST /reload`): the new `M`, `B`, `P`
    /// checked with S6 against what is armed before anything moves. `Err`: why it
    /// was refused; nothing changed then.
    fn reload_config(&mut self) -> Result<(), String> {
        let new = Config::load(&self.config_path).map_err(|e| e.to_string())?;
        // `[postgresql]` changes take a restart, but libpq reads the certificate
        // files afresh at every connection: the files at the running paths must
        // satisfy the running `hba_clientcert` (a renewed certificate with another
        // commonName would fail the next rewind or basebackup, not this reload).
        let running = &self.cfg.postgresql;
        let rule = |pg: &crate::config::PgConfig| {
            pg.client_cert_rule()
                .unwrap_or_else(|| "no client certificate".into())
        };
        if new.postgresql.client_cert_rule() != running.client_cert_rule() {
            warn!(
                "[postgresql] member lines: {} in the file, {} running: \
                 hba_clientcert and hba_method change at the agent's restart (set \
                 them alike on every member, after every member has its client \
                 certificates)",
                rule(&new.postgresql),
                rule(running)
            );
        }
        if running.client_certs_required() {
            let now = crate::clock::realtime().as_secs() as i64;
            crate::config::check_pg_tls_files(running, now).map_err(|(key, problem)| {
                format!("{key} (as running, {}): {problem}", rule(running))
            })?;
        }
        // The API's certificates before anything moves: a bad one keeps the old.
        // Switching between http:// and https:// changes the published api_url:
        // that takes a restart.
        if new.api.tls.is_some() != self.cfg.api.tls.is_some() {
            return Err(
                "[api] certfile was added or removed: switching the API between \
                        http:// and https:// needs a restart"
                    .into(),
            );
        }
        let api_tls = api::server::tls_of(&new.api)?;
        if new.name != self.cfg.name || new.scope != self.cfg.scope {
            return Err("name and scope cannot change at runtime".into());
        }
        // The endpoints' scheme and the SRV records asked stay as started: TLS on
        // or off, or other records, would leave every connect failing (review of
        // the SRV change, finding 4).
        if new.etcd.srv != self.cfg.etcd.srv {
            return Err("[etcd] srv or srv_suffix changed: that takes a restart".into());
        }
        if new.etcd.tls.is_some() != self.cfg.etcd.tls.is_some() {
            return Err(
                "[etcd] TLS was turned on or off (cacert, https:// endpoints): that takes a \
                 restart"
                    .into(),
            );
        }
        // The node's own PostgreSQL settings, judged before anything moves
        // (against the cluster-wide ones as last judged here).
        let node_params = self.judge_node_params(&new.postgresql)?;
        // The cluster-wide PostgreSQL settings are judged again at the next
        // iteration (a library installed since a refusal).
        self.pg.forget_params_verdict();
        self.params_retry_at = None;
        // S6 against what is armed (issue 8 finding 4): the new M, B, P with
        // the timing in force and the watchdogs in use, before anything moves.
        let mut t = self.cfg.timing.clone();
        t.safety_margin = new.timing.safety_margin;
        t.demote_budget = new.timing.demote_budget;
        t.iteration_budget = new.timing.iteration_budget;
        self.timing_fits_node(&t)?;
        self.cfg.timing = t;
        self.core.set_timing(clock::now(), timing_of(&self.cfg));
        self.guardian_reloaded(&new);
        self.api.set_auth(new.api.auth.clone());
        self.cfg.api.auth = new.api.auth;
        let verify = new.api.tls.as_ref().map(|t| t.verify_client);
        self.api
            .set_tls(api_tls, verify.unwrap_or_default(), new.api.read_auth);
        self.cfg.api.tls = new.api.tls;
        self.cfg.api.read_auth = new.api.read_auth;
        // The certificates just read: gauge and alerts afresh (crate::certs).
        self.certs = crate::certs::CertWatch::new(&new.certs);
        self.status.cert_expiry = self.certs.gauges();
        self.hooks.set_config(new.hooks.clone());
        self.cfg.hooks = new.hooks;
        self.etcd_reloaded(new.etcd);
        if let Some(params) = node_params {
            self.apply_node_params(params);
        }
        self.applied_config = None; // re-apply the cluster's config with new local values
        Ok(())
    }

    /// A reload's `[postgresql.parameters]` (`new`), when they differ from the
    /// running ones: `Some` to apply once the rest of the reload is accepted,
    /// `Err` (the whole reload refused) when PostgreSQL's parser or a start's
    /// cross-check refuses one, when the check gives no answer, or when a TLS
    /// setting (`ssl*`) changed: `pg_hba.conf`'s member lines and the certificate
    /// checks follow those, at the agent's restart. The rest of `[postgresql]`
    /// takes the agent's restart, said. Bounded like every call of the loop (S1,
    /// S6 d): the check's children are killed at the deadline.
    fn judge_node_params(
        &mut self,
        new: &crate::config::PgConfig,
    ) -> Result<Option<Vec<(String, String)>>, String> {
        let running = &self.cfg.postgresql;
        // `Debug` leaves the passwords out: what it shows is what is compared.
        let mut rest = new.clone();
        rest.parameters = running.parameters.clone();
        if format!("{rest:?}") != format!("{running:?}") {
            warn!(
                "[postgresql] (or [bootstrap]) settings other than [postgresql.parameters] \
                 changed in {}: they take effect at the agent's restart",
                self.config_path.display()
            );
        }
        if new.parameters == running.parameters {
            return Ok(None);
        }
        let differs = |(k, v): &(String, String), other: &[(String, String)]| {
            !other.iter().any(|(n, w)| n == k && w == v)
        };
        let mut ssl: Vec<&str> = new
            .parameters
            .iter()
            .filter(|p| differs(p, &running.parameters))
            .chain(
                running
                    .parameters
                    .iter()
                    .filter(|p| differs(p, &new.parameters)),
            )
            .map(|(k, _)| k.as_str())
            .filter(|k| k.starts_with("ssl"))
            .collect();
        ssl.sort_unstable();
        ssl.dedup();
        if !ssl.is_empty() {
            return Err(format!(
                "[postgresql.parameters] {ssl:?} changed: PostgreSQL's TLS settings change \
                 at the agent's restart (its pg_hba.conf member lines and certificate \
                 checks follow them)"
            ));
        }
        let changed: Vec<(String, String)> = new
            .parameters
            .iter()
            .filter(|p| differs(p, &running.parameters))
            .cloned()
            .collect();
        let deadline = self.deadline(Duration::from_secs(1));
        let old = running.parameters.clone();
        let refused = self
            .pg
            .check_node_parameters(&changed, &new.parameters, &old, deadline)
            .map_err(|e| {
                format!(
                    "[postgresql.parameters]: PostgreSQL's check gave no answer ({e}); \
                     nothing changed, reload again"
                )
            })?;
        if !refused.is_empty() {
            let said: Vec<String> = refused
                .iter()
                .map(|r| format!("{} = {:?}: {}", r.name, r.value, r.why))
                .collect();
            return Err(format!(
                "[postgresql.parameters] refused: {}",
                said.join("; ")
            ));
        }
        Ok(Some(new.parameters.clone()))
    }

    /// [`Self::judge_node_params`]' verdict carried out: `tenure.node.conf` and a
    /// reload of PostgreSQL (`PgCtl::set_node_params`); the cluster-wide settings
    /// are judged again at the next iteration.
    fn apply_node_params(&mut self, params: Vec<(String, String)>) {
        self.node_params_retry_at = None;
        let deadline = self.deadline(Duration::from_secs(1));
        let r = self.pg.set_node_params(params.clone(), deadline);
        // Taken (PgCtl's copy too) unless the list itself was refused.
        if !matches!(r, Err(crate::pg::PgError::Config(_))) {
            self.cfg.postgresql.parameters = params;
        }
        self.node_params_said(r, true);
    }

    /// A reload's node settings that could not be written or reloaded yet (a
    /// job ran, a write or PostgreSQL's reload failed): again, a `loop_wait`
    /// after a failure. Bounded like every call of the loop (S1, S6 d).
    fn maintain_node_params(&mut self) {
        if !self.pg.node_params_pending()
            || self.pg.running_job().is_some()
            || self.node_params_retry_at.is_some_and(|t| clock::now() < t)
        {
            return;
        }
        let deadline = self.deadline(Duration::from_secs(1));
        let r = self.pg.finish_node_params(deadline);
        self.node_params_said(r, false);
    }

    /// What became of the node's settings, said (`reload`: a reload asked for
    /// them; otherwise the check an agent makes once at its start, quiet when
    /// there is nothing to do); a failure tried again later.
    fn node_params_said(
        &mut self,
        r: Result<crate::pg::NodeParamsApplied, crate::pg::PgError>,
        reload: bool,
    ) {
        use crate::pg::NodeParamsApplied as A;
        let names: Vec<&str> = self
            .cfg
            .postgresql
            .parameters
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        match r {
            Ok(A::Reloaded) => info!(
                "[postgresql.parameters] {names:?} written to tenure.node.conf; PostgreSQL \
                 reloaded (a setting that needs a restart shows as pending_restart)"
            ),
            Ok(A::Written) => info!(
                "[postgresql.parameters] {names:?} written to tenure.node.conf; \
                 PostgreSQL's next start reads them"
            ),
            Ok(A::AfterTheJob) => info!(
                "[postgresql.parameters] {names:?}: written and reloaded once the running \
                 PostgreSQL job has finished"
            ),
            Ok(A::Unchanged | A::Reread) if !reload => {}
            Ok(A::Reread) => {
                info!("[postgresql.parameters] {names:?}: PostgreSQL re-read tenure.node.conf")
            }
            Ok(A::Unchanged) => {
                info!("[postgresql.parameters] {names:?}: tenure.node.conf holds them already")
            }
            Ok(A::NoCluster) if !reload => {}
            Ok(A::NoCluster) => info!(
                "[postgresql.parameters] {names:?}: no cluster in the data directory yet; \
                 its first start writes them"
            ),
            Ok(A::AtNextStart) if !reload => info!(
                "this data directory's tenure.conf was written by an older tenure (the \
                 node's settings inline): PostgreSQL's next start or restart writes \
                 tenure.node.conf"
            ),
            Ok(A::AtNextStart) => warn!(
                "[postgresql.parameters] {names:?}: this data directory's tenure.conf was \
                 written by an older tenure (the settings inline): they take effect at \
                 PostgreSQL's next start or restart (tenure ctl restart), which writes \
                 tenure.node.conf"
            ),
            Err(e) => {
                let wait = self.cfg.timing.loop_wait.max(Duration::from_secs(1));
                self.node_params_retry_at = Some(clock::now().add(wait));
                warn!(
                    "[postgresql.parameters] {names:?}: {e}; tried again in {} s",
                    wait.as_secs_f64()
                );
            }
        }
    }

    fn observe(&mut self, now: Instant, tick: bool) -> Observation {
        let r = self.core.timing().retry_timeout;
        let me = self.cfg.name.clone();
        self.etcd_budget_begin(now);
        let o = self.observe_calls(now, tick, r, me);
        self.etcd_budget_end();
        o
    }

    /// `observe`'s calls, in order (a non-leader's within one etcd budget).
    fn observe_calls(&mut self, now: Instant, tick: bool, r: Duration, me: String) -> Observation {
        // The renewal first: nothing else in the iteration may delay it (S6 d).
        let mut renewal = None;
        if tick {
            if let Some((lease, epoch)) = self.core.lease_to_renew() {
                let deadline = self.deadline(r);
                let r = match self.connect(deadline) {
                    // Never authenticate on the renewal path (agent/secure.rs): a
                    // client without a token fails this renewal at once.
                    Some((etcd, _)) if !etcd.authenticated() => Renewal {
                        lease,
                        sent_at: now,
                        outcome: RenewalOutcome::Failed(
                            "etcd: not authenticated yet (authentication is its own step)".into(),
                        ),
                    },
                    Some((etcd, rt)) => etcd.confirmed_renew(rt, lease, epoch, &me, deadline),
                    None => Renewal {
                        lease,
                        sent_at: now,
                        outcome: RenewalOutcome::Failed("etcd unreachable".into()),
                    },
                };
                let counted = matches!(r.outcome, RenewalOutcome::Counted { .. });
                let rtt = clock::now().since(r.sent_at);
                self.status.metrics.renewal(counted, rtt);
                self.trace.renewal(rtt);
                if let RenewalOutcome::Failed(e) = &r.outcome {
                    self.etcd_failed(&format!("renewal: {e}"));
                    // The read below already tries the next member.
                    self.switch_endpoint();
                }
                // S2 "right after the renewal" (issue 8 finding 5): nothing comes
                // between a counted renewal and its pet. The core decides whether
                // and until when; the shell pets and reports what happened.
                if let Some(not_after) = self.core.pet_on_renewal(clock::now(), &r) {
                    let report = self.pet_watchdog(not_after);
                    self.pending.pet = Some(PetReport::fold(self.pending.pet.take(), report));
                    self.trace.pet(clock::now().since(r.sent_at));
                }
                renewal = Some(r);
            }
            self.trace.phase(looptrace::Phase::Renew);
            // S5 inside an iteration: a stall (SIGSTOP, a swap storm) can land after
            // the renewal and its pet. Past `F - B` nothing else may come first.
            if self.core.call_cap().is_some_and(|cap| clock::now() >= cap) {
                warn!(
                    "woke past the fence start F - B in the middle of an iteration (a stall \
                     after the renewal): fencing before anything else (S5)"
                );
                let pg = self
                    .last_pg
                    .clone()
                    .unwrap_or_else(|| PgStatus::unanswered(DataDir::Empty, PgRole::Unresponsive));
                let cluster = Err(PAST_CAP.into());
                return self.assemble(cluster, renewal, None, pg, Job::Idle, Duration::ZERO);
            }
            self.keep_alive_side_leases();
        }
        // Authentication in its own step, after the renewal, with its own deadline
        // (capped at the next tick and `F - B` like every call: S1, S6 d).
        self.authenticate_step(self.deadline(r));
        // Endpoint names: poll or start the resolver child; never waits (names.rs).
        self.resolve_step();

        // Issue 13 item 5: the cluster view is the renewal's read (leader), the
        // view kept from the watch (a follower of a known leader, backed by its
        // lease poll), or a read (view.rs says which, the core says when a kept
        // view may serve).
        self.drain_watch();
        // DESIGN §1 step 4 (S3): the watch's coverage as of the view; a watch
        // reopened since the view's read starts later and the core sees the gap.
        let from = self.etcd.as_ref().and_then(|e| e.watch_from());
        let (mut cluster, source, polled) = self.cluster_view(tick, renewal.is_some());
        self.note_watch_at_read(from);
        if cluster.is_ok() {
            // A certificate or permission error logged before is over: log the next.
            self.security_error = None;
        }
        if let Ok(view) = &mut cluster {
            switchover::schedule_on_boottime(view, clock::now());
        }
        if cluster.as_ref().is_ok_and(|v| v.leader.is_none()) {
            self.drain_leader_watch(self.deadline(r));
        }
        if let Ok(view) = &cluster {
            self.apply_cluster_config(view);
            let deadline = self.deadline(r);
            if source.is_read()
                && let Some((etcd, rt)) = self.connect(deadline)
                && !etcd.watch_is_open()
                && let Err(e) = etcd.watch_leader(rt, view.revision + 1, deadline)
            {
                debug!("watch: {e}");
            }
        }

        let mut lease_poll = polled;
        // After a failed read the poll would only wait out another timeout: etcd is
        // not answering this iteration (and an unanswered poll proves nothing).
        if cluster.is_ok()
            && lease_poll.is_none()
            && source.poll_after()
            && let Some(lease) = self.core.lease_to_poll()
        {
            let deadline = self.deadline(r);
            if let Some((etcd, rt)) = self.connect(deadline) {
                match etcd.lease_ttl(rt, lease, deadline) {
                    Ok(p) => lease_poll = Some(p),
                    Err(e) => debug!("lease poll {lease:x}: {e}"),
                }
            }
        }

        // Not capped at the next tick: after a slow renewal and read the probe would
        // get no time and report a healthy primary as not answering (a leader then
        // counts towards `primary_start_timeout`). `F - B` still caps it (S1).
        let pg_deadline = self.deadline_past_tick(
            self.cfg
                .timing
                .iteration_budget
                .max(Duration::from_millis(100)),
        );
        self.trace.phase(looptrace::Phase::Etcd);
        let mut pg = self.pg.probe(pg_deadline);
        let job = self.pg.poll_job(clock::now());
        if let Job::Finished { kind, ok, detail } = &job {
            if *ok {
                info!("{kind:?} finished: {detail}");
            } else {
                error!("{kind:?} failed: {detail}");
            }
            if matches!(kind, JobKind::Basebackup { .. }) {
                self.status.metrics.replica_build(*ok);
            }
            self.operator_job_ended(kind, *ok, detail);
            // A job that changed the data directory: probe again for the new state.
            pg = self.pg.probe(pg_deadline);
        }
        self.trace.phase(looptrace::Phase::Probe);
        self.check_required_watchdog(&pg);
        self.assemble(cluster, renewal, lease_poll, pg, job, Duration::ZERO)
    }

    /// What the core needs to fence at once after a stall: no calls at all (each
    /// would only delay the fence), the last known PostgreSQL state.
    fn stalled_observation(&mut self, clock_jump: Duration) -> Observation {
        let pg = self
            .last_pg
            .clone()
            .unwrap_or_else(|| PgStatus::unanswered(DataDir::Empty, PgRole::Unresponsive));
        let cluster = Err("not read: the loop woke past F - B".into());
        self.assemble(cluster, None, None, pg, Job::Idle, clock_jump)
    }

    /// An observation from this iteration's readings plus the outcomes of the last
    /// plan's actions (each reported exactly once).
    fn assemble(
        &mut self,
        cluster: Result<ClusterView, String>,
        renewal: Option<Renewal>,
        lease_poll: Option<LeasePoll>,
        pg: PgStatus,
        job: Job,
        clock_jump: Duration,
    ) -> Observation {
        let pending = std::mem::take(&mut self.pending);
        let (leader_changes, watch_from) = self.take_leader_watch();
        Observation {
            cluster,
            renewal,
            acquire: pending.acquire,
            claim: pending.claim,
            recorded_initialize: pending.recorded_initialize,
            fence: pending.fence,
            promoted: pending.promoted,
            released: pending.released,
            lease_poll,
            leader_deleted_at: self.leader_deleted_at.take(),
            leader_deleted_revision: self.leader_deleted_revision.take(),
            leader_changes,
            watch_from,
            pg,
            job,
            shutdown: self.shutdown,
            watchdog_failed: pending.watchdog_failed,
            watchdog_unusable: self.wd.check.unusable.clone(),
            clock_jump,
            guard_refused: pending.guard_refused,
            pet: pending.pet,
            guardian_holds: self.guardian_holds(),
            handed_over: pending.handed_over,
        }
    }

    /// The bootstrap lock, kept alive at every tick, and the member lease, at a third
    /// of its TTL.
    fn keep_alive_side_leases(&mut self) {
        let r = self.core.timing().retry_timeout;
        let ttl = self.core.timing().ttl;
        let deadline = self.deadline(r);
        let cut = self.cut_by_tick(r);
        // Not once the record answered: `record_initialize` revoked the lock's lease
        // (the core leaves Bootstrapping only at this iteration's step).
        let side = self
            .core
            .lease_to_keep_alive()
            .filter(|_| self.pending.recorded_initialize.is_none());
        let member_lease0 = self.member_lease;
        let mut kept_at = self.member_kept_at;
        let mut member_ttl = self.member_ttl;
        let state_file = self.state_file.clone();
        let Some((etcd, rt)) = self.connect(deadline) else {
            return;
        };
        if let Some(lease) = side
            && let Err(e) = etcd.keep_alive_once(rt, lease, deadline)
        {
            warn!("bootstrap lock lease {lease:x}: {e}");
        }
        let mut member_lease = member_lease0;
        // Issue 13 item 5: the member lease (TTL `ttl`) is kept alive at a third of
        // its TTL, not every tick: two keepalives may fail before it expires, and a
        // member key lost with it is written again (`publish_member`).
        let now = clock::now();
        let lease_ttl = member_ttl.map_or(ttl, |g| g.min(ttl));
        let every = Duration::from_secs(u64::from(lease_ttl)) / 3;
        let due = kept_at.is_none_or(|at| now.since(at) >= every.saturating_sub(r));
        if let Some(lease) = member_lease
            && due
        {
            match etcd.keep_alive_once(rt, lease, deadline) {
                Ok(_) => kept_at = Some(now),
                // A keepalive that only ran out of the time left before the tick
                // says nothing about the lease: keep it (a new one would churn the
                // member key).
                Err(_) if cut => {}
                Err(_) => member_lease = None,
            }
        }
        if member_lease.is_none() {
            match etcd.grant(rt, ttl, deadline) {
                Ok((lease, granted)) => {
                    member_lease = Some(lease);
                    member_ttl = Some(granted);
                    kept_at = Some(now);
                    if let Err(e) = std::fs::write(&state_file, format!("{lease}\n")) {
                        warn!(
                            "cannot record the member lease in {}: {e}",
                            state_file.display()
                        );
                    }
                }
                Err(e) => debug!("member lease grant: {e}"),
            }
        }
        self.member_lease = member_lease;
        self.member_kept_at = kept_at;
        self.member_ttl = member_ttl;
    }

    /// DESIGN §3: `config` wins once it exists; a change that breaks S6 for this node
    /// is refused (old values kept) and said.
    fn apply_cluster_config(&mut self, view: &ClusterView) {
        let Some(raw) = &view.config else { return };
        if self.applied_config.as_deref() == Some(raw.as_str()) {
            return;
        }
        let checked = self
            .cfg
            .apply_dynamic(raw)
            .and_then(|(t, d)| self.timing_fits_node(&t).map(|()| (t, d)));
        match checked {
            Ok((t, d)) => {
                info!("applying the cluster's dynamic configuration: {raw}");
                for (name, why) in &d.pg_parameters.ignored {
                    warn!("config key: postgresql.parameters {name:?} is not applied: {why}");
                }
                if !d.logical_slots.is_empty() {
                    warn!(
                        "config key: permanent logical slots {:?} are not managed by tenure \
                         (physical slots only; logical slots are never touched)",
                        d.logical_slots
                    );
                }
                self.cfg.timing = t;
                self.cfg.dynamic = d;
                self.params_known = true;
                self.core.set_timing(clock::now(), timing_of(&self.cfg));
                self.pg.set_loop_wait(self.cfg.timing.loop_wait);
                self.follow_ttl_with_w();
                self.status.config_refused = None;
                self.status.pause = self.cfg.dynamic.pause;
                if self.core.paused() != self.cfg.dynamic.pause {
                    warn!(
                        "maintenance mode {}: {}",
                        if self.cfg.dynamic.pause { "on" } else { "off" },
                        if self.cfg.dynamic.pause {
                            "no automatic failover, no restart of a stopped PostgreSQL, no \
                             rewind; the lease, the fence (S1) and the watchdog (S2) go on"
                        } else {
                            "automatic failover again"
                        }
                    );
                }
                self.core.set_pause(self.cfg.dynamic.pause);
            }
            Err(e) => {
                // A refused value still pauses (review finding F4): a pause holds back
                // only health-driven actions, never a fence or an S1–S4 check, so
                // honouring `pause: true` from a value refused for its other fields is
                // the safe side (and the acquire's compare on the key's revision would
                // otherwise let this node take the key the operator meant to hold).
                // Without `pause: true` the last good state stays.
                let pauses = serde_json::from_str::<serde_json::Value>(raw)
                    .ok()
                    .and_then(|v| v.get("pause").and_then(serde_json::Value::as_bool))
                    == Some(true);
                if pauses && !self.core.paused() {
                    warn!(
                        "maintenance mode on, from a dynamic configuration refused for its \
                         other values: no automatic failover, no restart of a stopped \
                         PostgreSQL, no rewind; the lease, the fence (S1) and the watchdog \
                         (S2) go on"
                    );
                    self.core.set_pause(true);
                    self.status.pause = true;
                }
                // Once per distinct value (`applied_config` below), in the log and in
                // the status JSON's `config_refused` until a good value replaces it.
                crate::events::emit(&crate::events::Event::ConfigRefused {
                    source: "config key",
                    error: format!(
                        "refusing the cluster's dynamic configuration {raw} (keeping the last \
                         good values): {e}"
                    ),
                });
                self.status.config_refused = Some(e);
            }
        }
        self.applied_config = Some(raw.clone());
    }

    /// S6 for this node as it runs (issue 8 finding 4; DESIGN §5 "every timing change
    /// is checked against what is armed"): `t` against the TTL it asks for and the
    /// TTL of the lease held, with the read-back `W` of an open device, systemd's
    /// `WATCHDOG_USEC`, and — for a device not opened yet — some `W` it could arm.
    /// The error names the inequality and the numbers.
    fn timing_fits_node(&self, t: &crate::config::TimingConfig) -> Result<(), String> {
        let mut ttls = vec![t.ttl];
        if let Some(l) = self.core.leadership() {
            ttls.push(l.ttl);
        }
        let mut ws: Vec<(String, u32)> = Vec::new();
        if let Some(dev) = &self.wd.device {
            ws.push((
                format!("armed watchdog W = {} s", dev.timeout()),
                dev.timeout(),
            ));
        }
        if let Some(w) = self.wd.systemd_w {
            let secs =
                u32::try_from(w.as_secs() + u64::from(w.subsec_nanos() > 0)).unwrap_or(u32::MAX);
            ws.push((format!("systemd WatchdogSec = {secs} s"), secs));
        }
        for &ttl in &ttls {
            crate::config::validate_timing(t, ttl, None)
                .map_err(|e| format!("refused for ttl {ttl} s: {e}"))?;
            for (what, w) in &ws {
                crate::config::validate_timing(t, ttl, Some(*w))
                    .map_err(|e| format!("refused for the {what} and ttl {ttl} s: {e}"))?;
            }
            if self.wd.use_device
                && self.wd.device.is_none()
                && crate::config::watchdog_range(t, ttl).is_none()
            {
                return Err(format!(
                    "refused: no watchdog timeout W satisfies S6 (b) and (e) for ttl {ttl} s \
                     with these values, and this node arms {}",
                    self.wd.path.display()
                ));
            }
        }
        Ok(())
    }

    /// A device not opened yet will be asked for the top of the range the ttl in
    /// force allows (issue 8 finding 4): the core's `W` follows, so every pet rule
    /// and promote delay uses what will be armed.
    fn follow_ttl_with_w(&mut self) {
        if !self.wd.use_device || self.wd.device.is_some() {
            return;
        }
        if let Some((_, hi)) = crate::config::watchdog_range(&self.cfg.timing, self.cfg.timing.ttl)
        {
            self.wd.requested = hi;
            let d = Duration::from_secs(u64::from(hi));
            self.core.set_watchdogs(Some(d), self.wd.systemd_w);
        }
    }

    fn publish_member(&mut self, obs: &Observation) {
        let Some(lease) = self.member_lease else {
            return;
        };
        // Seed 253898 review: our member key from before a restart may carry the
        // `leader_ttl_seen` the core folds in (and carries on) at its first read: not
        // overwritten before one read in this run.
        if obs.cluster.is_err() && self.last_view.is_none() {
            return;
        }
        let pg = &obs.pg;
        let leadership = self.core.leadership();
        // Derived once per iteration by `update_status`, which runs just before.
        let epoch = self.status.epoch;
        let (receive_lsn, replay_lsn, replication_state) = api::fill::member_positions(pg);
        let info = MemberInfo {
            conn_url: crate::pg::conn_url(&self.cfg.postgresql.connect_address),
            api_url: format!("{}/patroni", self.cfg.api.connect_url.trim_end_matches('/')),
            state: api::fill::pg_state(pg.role, &obs.job).into(),
            role: match pg.role {
                PgRole::Primary => "primary",
                _ => "replica",
            }
            .into(),
            // The agent's own version, as Patroni publishes its own: release markers
            // prove something only when every member binds them (`release_proves`).
            version: env!("CARGO_PKG_VERSION").into(),
            xlog_location: pg.lsn,
            receive_lsn,
            replay_lsn,
            replication_state,
            timeline: pg.timeline,
            // An empty host never bootstraps over a member that shows data. Not
            // while this node bootstraps: its new data is no cluster yet, and a
            // bootstrapper that saw it would give its own up (two given up, no
            // cluster; review of ad64cf0).
            sysid: pg.data.sysid().filter(|_| !self.core.is_bootstrapping()),
            tags: api::fill::tags(&self.cfg, self.core.refuses_leadership()),
            epoch,
            // Only an armed device counts: candidates size the early-expiry delay
            // from it (2W + R + M), and systemd's watchdog is no host reset.
            watchdog_timeout: self.wd.device.as_ref().map(|d| d.timeout()),
            leader_lease: leadership.map(|l| l.lease),
            leader_ttl: leadership.map(|l| l.ttl),
            // Seed 253898 review: changes only with a ttl change or its decay, so an
            // idle cluster still writes nothing (issue 13 item 5).
            leader_ttl_seen: self.core.leader_ttl_seen(),
            // Review L2: changes only with a `loop_wait`/`retry_timeout` change.
            poll_window: Some(self.core.poll_window()),
            pg_healthy: matches!(pg.role, PgRole::Primary | PgRole::Replica),
            released: self.core.released_epoch(),
            // Finding L1: our acquisitions write the record (`"acquire_record": true`).
            lacks_acquire_record: false,
            parse_error: None,
        };
        let inputs = MemberInputs {
            info,
            timing: self.published_timing(),
            operator: self.operator_member_fields(pg.report.pending_restart),
            paused: self.core.paused(),
        };
        let me = self.cfg.name.clone();
        // Issue 13 item 5: written when it changed, not every iteration (a Raft
        // round and an fsync on every etcd member each time). Written anyway while
        // no leader key is seen: candidates wait for positions published after the
        // vacancy (DESIGN §3a), identical or not. And when the read lacks it (deleted
        // by an operator, its lease expired).
        // Issue 13 item 2: "changed" is judged on the inputs, so an unchanged key
        // costs a comparison, not a JSON encoding, every iteration.
        let unchanged = self
            .member_written
            .as_ref()
            .is_some_and(|(l, i, _)| *l == lease && *i == inputs);
        let needed_anyway = match &obs.cluster {
            Ok(view) => member_write_needed(
                view.member(&me),
                view.leader.is_none(),
                self.core.vacancy_revision(),
                self.core.poll_window(),
            ),
            Err(_) => false,
        };
        if unchanged && !needed_anyway {
            return;
        }
        let deadline = self.deadline(self.core.timing().retry_timeout);
        if self.etcd.is_none() {
            return;
        }
        let json = match &self.member_written {
            Some((_, _, json)) if unchanged => json.clone(),
            _ => inputs.encode(),
        };
        let put = self
            .connect(deadline)
            .map(|(etcd, rt)| etcd.put_member(rt, &me, &json, lease, deadline));
        match put {
            Some(Ok(())) => self.member_written = Some((lease, inputs, json)),
            Some(Err(e)) => {
                // A refused token is dropped here too: else a replica whose only
                // authenticated request is this write retries it with that token
                // for ever (agent/secure.rs).
                self.write_failed(&format!("member key: {e}"));
                // Written again next iteration; and if the lease is gone, the
                // next tick's keepalive finds out and a new one is granted.
                self.member_written = None;
                self.member_kept_at = None;
            }
            None => {}
        }
    }

    fn update_status(&mut self, now: Instant, obs: &Observation, reason: &str) {
        api::fill::update(
            &mut self.status,
            &self.cfg,
            &self.core,
            obs,
            reason,
            now,
            clock::realtime(),
        );
        self.status.watchdog = self.wd.device.as_ref().map(|d| d.timeout());
    }

    /// Make progress on the API's connections without blocking (issue 8 finding 1).
    fn serve_api(&mut self) {
        let now = clock::now();
        // `/primary` answers from the time left to `F` now, not at the last iteration.
        let last = self.last_iteration.map(|(t, _)| t);
        api::fill::refresh(&mut self.status, &self.core, now, last);
        let _g = self.rt.enter();
        let served = self.api.service(now, &self.status);
        self.carry_out_intents();
        if served.refused > 0 {
            debug!(
                "api: {} connection(s) over the cap of {} closed unanswered ({} in all)",
                served.refused,
                api::server::MAX_CONNS,
                self.api.refused_total
            );
        }
    }

    /// Carry out a plan in order. Returns true when the agent must exit.
    fn act(&mut self, actions: Vec<Action>, obs: &Observation) -> bool {
        let r = self.core.timing().retry_timeout;
        let ttl = self.core.timing().ttl;
        let me = self.cfg.name.clone();
        // Issue 8 finding 9: writes must not start under names that did not land.
        let mut sync_names_failed: Option<String> = None;
        for action in actions {
            if let Some(why) = &sync_names_failed
                && matches!(
                    action,
                    Action::Promote { .. } | Action::StartJob(JobKind::StartPrimary)
                )
            {
                warn!("skipping {action:?}: synchronous_standby_names could not be set ({why})");
                continue;
            }
            if let Some(what) = &self.pending.guard_refused {
                // Leadership is lost: nothing planned under it may run; the core
                // fences at the next step (at once, see below).
                warn!("skipping {action:?}: the epoch guard refused {what}");
                continue;
            }
            debug!("action: {action:?}");
            let deadline = self.deadline(r);
            match action {
                Action::ClaimInitialize => {
                    self.pending.claim = Some(match self.connect(deadline) {
                        Some((etcd, rt)) => etcd.claim_initialize(rt, ttl, deadline),
                        None => ClaimOutcome::Failed("etcd unreachable".into()),
                    });
                }
                Action::RecordInitialize { sysid, lease } => {
                    let ok = self
                        .connect(deadline)
                        .map(|(etcd, rt)| etcd.record_initialize(rt, sysid, lease, deadline));
                    self.pending.recorded_initialize = match ok {
                        Some(Ok(written)) => Some(written),
                        Some(Err(e)) => {
                            warn!("recording initialize: {e}");
                            None
                        }
                        None => None,
                    };
                    if self.pending.recorded_initialize == Some(true) {
                        self.seed_config(deadline);
                    }
                }
                Action::CreateInitialize { sysid, rollback } => {
                    let at = clock::rfc3339_utc(clock::realtime());
                    if let Some((etcd, rt)) = self.connect(deadline) {
                        match etcd.create_initialize(rt, sysid, &rollback, &me, &at, deadline) {
                            Ok(true) => {
                                crate::events::emit(&crate::events::Event::RollbackMarked {
                                    reason: format!(
                                        "initialize was missing: re-created from local data (system \
                                     identifier {sysid}); no node leads until `tenure confirm-epoch`"
                                    ),
                                })
                            }
                            Ok(false) => info!("initialize exists already; not re-created"),
                            Err(e) => warn!("re-creating initialize: {e}"),
                        }
                    }
                }
                Action::HoldDataDir { why } => match self.pg.hold_data_dir(&why) {
                    Ok(true) => warn!("data directory held for the operator: {why}"),
                    Ok(false) => {}
                    Err(e) => error!("ALERT: cannot hold the data directory ({why}): {e}"),
                },
                Action::MarkRollback(seen) => {
                    let at = clock::rfc3339_utc(clock::realtime());
                    if let Some((etcd, rt)) = self.connect(deadline) {
                        match etcd.mark_rollback(rt, &seen, &me, &at, deadline) {
                            Ok(true) => {
                                crate::events::emit(&crate::events::Event::RollbackMarked {
                                    reason: format!(
                                        "etcd went back in time ({}); no node leads until `tenure \
                                     confirm-epoch`",
                                        seen.reason
                                    ),
                                })
                            }
                            Ok(false) => error!(
                                "ALERT: etcd went back in time ({}); the rollback marker was \
                                 already written; no node leads until `tenure confirm-epoch`",
                                seen.reason
                            ),
                            Err(e) => warn!("writing the rollback marker: {e}"),
                        }
                    }
                }
                Action::Acquire => {
                    // DESIGN §3 (pause) and the release marker (review F1): the txn
                    // also compares the `config` and `release` keys' revisions this
                    // decision was made on, and marks the marker taken.
                    // INVARIANT: no acquire without the read it was decided on
                    // (fail closed; the core plans none without one today).
                    let basis = obs.cluster.as_ref().ok().map(AcquireBasis::of);
                    let out = match (basis, self.connect(deadline)) {
                        (None, _) => {
                            AcquireOutcome::Failed("no cluster read to bind the acquire to".into())
                        }
                        (Some(b), Some((etcd, rt))) => {
                            etcd.acquire_seen(rt, &me, ttl, &b, deadline)
                        }
                        (Some(_), None) => AcquireOutcome::Failed("etcd unreachable".into()),
                    };
                    match &out {
                        AcquireOutcome::Won {
                            epoch, granted_ttl, ..
                        } => {
                            info!(
                                "acquired the leader key: epoch {epoch}, granted TTL {granted_ttl} s"
                            )
                        }
                        AcquireOutcome::Lost => info!("lost the race for the leader key"),
                        AcquireOutcome::Failed(e) => warn!("acquire failed: {e}"),
                        AcquireOutcome::Unanswered { lease, why, .. } => warn!(
                            "acquire txn unanswered ({why}): the next read decides (won if \
                             it shows the key on lease {lease:x}, else the lease is revoked)"
                        ),
                    }
                    self.pending.acquire = Some(out);
                }
                Action::StartJob(kind) => {
                    self.slots = None;
                    let source = match &kind {
                        JobKind::Basebackup { from } | JobKind::Rewind { from } => {
                            self.target(obs, from)
                        }
                        JobKind::StartReplica { leader } if !leader.is_empty() => {
                            self.target(obs, leader)
                        }
                        _ => None,
                    };
                    if matches!(kind, JobKind::Basebackup { .. }) {
                        // The copy a replica method builds must be of this cluster
                        // (`pg::job::check_copy`): the `initialize` key's id.
                        let sysid = obs.cluster.as_ref().ok().and_then(|v| match v.initialize {
                            Some(crate::core::model::Initialize::Done { sysid }) => Some(sysid),
                            _ => None,
                        });
                        self.pg.set_cluster(&self.cfg.scope, sysid);
                    }
                    info!("starting job {kind:?}");
                    if let Err(e) = self.pg.start_job(&kind, source.as_ref(), clock::now()) {
                        error!("cannot start {kind:?}: {e}");
                    }
                }
                Action::Promote { epoch } => {
                    self.slots = None;
                    let pg_deadline = self.deadline_past_tick(Duration::from_secs(5));
                    match self.pg.promote(pg_deadline) {
                        Ok(()) => {
                            info!("promoted PostgreSQL at epoch {epoch}");
                            // Without a watchdog, say what that costs, every time.
                            if self.core.watchdog().is_none() && self.core.guardian().is_none() {
                                warn!(
                                    "promoted without a watchdog: if this agent freezes (SIGSTOP, \
                                     swap storm, paused VM) its primary stays writable until it thaws"
                                );
                            }
                            self.pending.promoted = Some(true);
                            self.status.metrics.promotion(true);
                            self.write_epoch(epoch);
                            // The `history` entry: the next iteration (at once,
                            // `again`) sees the new timeline and plans it (F2).
                            self.promoted_events(epoch);
                        }
                        Err(e) => {
                            error!("promote failed: {e}");
                            self.pending.promoted = Some(false);
                            self.status.metrics.promotion(false);
                        }
                    }
                }
                Action::Retarget { leader } => match self.target(obs, &leader) {
                    Some(t) => {
                        if let Err(e) = self.pg.retarget(&t, self.deadline(Duration::from_secs(2)))
                        {
                            warn!("retarget to {leader}: {e}");
                        }
                    }
                    None => warn!("retarget: no conn_url for {leader}"),
                },
                Action::Fence => {
                    self.slots = None;
                    let b = self.cfg.timing.demote_budget;
                    let fence_start = clock::now();
                    let fence_deadline = fence_start.add(b);
                    warn!(
                        "fencing PostgreSQL (SIGQUIT to the postmaster; budget {:.1} s)",
                        b.as_secs_f64()
                    );
                    let out = self.pg.fence(fence_deadline);
                    info!("fence: {out:?}");
                    let took = clock::now().since(fence_start);
                    self.status
                        .metrics
                        .fence(out == FenceOutcome::Complete, took);
                    self.fence_events(&out, took, b);
                    if out == FenceOutcome::Complete {
                        // S2: once no process of the primary remains, a pet proves
                        // nothing and harms nothing; systemd must not wait for the next
                        // (possibly slow, etcd-less) iteration, or it would kill us.
                        self.wd.notifier.watchdog();
                    }
                    self.pending.fence = Some(out);
                }
                Action::Release { .. }
                    if matches!(self.pending.handed_over, Some(HandOverOutcome::Released(_))) =>
                {
                    // A clean stop's hand-over just deleted the key with the marker; this
                    // plain release is only its fallback (agent/switchover.rs).
                }
                Action::Release { lease, epoch } => {
                    let out = self
                        .connect(deadline)
                        .map(|(etcd, rt)| etcd.release(rt, &me, epoch, lease, deadline));
                    match out {
                        Some(Ok(true)) => info!("released the leader key (epoch {epoch})"),
                        Some(Ok(false)) => warn!("release refused: the key is no longer ours"),
                        Some(Err(e)) => warn!("release failed: {e}"),
                        None => warn!("release failed: etcd unreachable"),
                    }
                    self.pending.released = Some(true);
                }
                Action::Revoke { lease } => {
                    if let Some((etcd, rt)) = self.connect(deadline)
                        && let Err(e) = etcd.revoke(rt, lease, deadline)
                    {
                        debug!("revoke {lease:x}: {e}");
                    }
                }
                Action::AppendHistory { epoch, timeline } => {
                    let history = obs.cluster.as_ref().map_or(&[][..], |v| &v.history[..]);
                    self.append_history(epoch, timeline, history, deadline);
                }
                Action::WriteSync {
                    epoch,
                    leader,
                    sync_standbys,
                } => {
                    let value = crate::dcs::encode_sync(&SyncKey {
                        leader,
                        sync_standbys,
                    });
                    match self.connect(deadline) {
                        Some((etcd, rt)) => {
                            match etcd.guarded_put(rt, "sync", &value, &me, epoch, deadline) {
                                Ok(true) => info!("sync key: {value}"),
                                Ok(false) => {
                                    self.pending.guard_refused =
                                        Some(format!("the sync key write {value}"))
                                }
                                // DESIGN §3a: a failed write changes nothing else; the
                                // core retries from the key it reads next.
                                Err(e) => warn!("sync key write {value}: {e}"),
                            }
                        }
                        None => warn!("sync key write {value}: etcd unreachable"),
                    }
                }
                Action::DeleteSync { epoch } => {
                    if let Some((etcd, rt)) = self.connect(deadline) {
                        match etcd.guarded_delete(rt, "sync", &me, epoch, deadline) {
                            Ok(true) => info!("sync key deleted (synchronous mode is off)"),
                            Ok(false) => {
                                self.pending.guard_refused = Some("the sync key delete".into())
                            }
                            Err(e) => warn!("sync key delete: {e}"),
                        }
                    }
                }
                Action::SetSyncNames { names } => {
                    match self
                        .pg
                        .set_sync_names(&names, self.deadline(Duration::from_secs(1)))
                    {
                        Ok(()) => info!("synchronous_standby_names = {names:?}"),
                        Err(e) => {
                            warn!("setting synchronous_standby_names to {names:?}: {e}");
                            sync_names_failed = Some(e.to_string());
                        }
                    }
                }
                Action::SyncSlots { members } => {
                    self.sync_slots(members, obs);
                    if self.applied_config.is_none() {
                        self.seed_config(deadline);
                    }
                }
                Action::CopySlots { copies } => self.copy_slots(copies, obs),
                Action::MoveDataAside => match self.pg.move_data_aside() {
                    Ok(p) => warn!("moved the data directory aside to {}", p.display()),
                    Err(e) => error!("cannot move the data directory aside: {e}"),
                },
                Action::PetWatchdog { not_after } => {
                    let report = self.pet_watchdog(not_after);
                    self.pending.pet = Some(PetReport::fold(self.pending.pet.take(), report));
                }
                Action::DisarmWatchdog => self.disarm_watchdog(),
                Action::HandOver {
                    lease,
                    epoch,
                    candidate,
                } => self.hand_over(lease, epoch, candidate, deadline),
                Action::ClearFailover {
                    epoch,
                    mod_revision,
                } => self.clear_failover(epoch, mod_revision, deadline),
                Action::Exit => return true,
            }
        }
        false
    }

    /// DESIGN §3a: `pg_hba.conf` admits the replication and admin roles from each
    /// member's address (its `conn_url` host) and this node's, nothing wider. Only
    /// a change rewrites the file; a failure is logged and retried next iteration.
    fn maintain_hba(&mut self, view: &ClusterView) {
        let mut hosts: Vec<String> = view
            .members
            .iter()
            .filter_map(|m| ConnTarget::from_conn_url(&m.name, &m.info.conn_url).ok())
            .map(|t| t.host)
            .collect();
        if let Ok((own, _)) = crate::pg::conf::split_host_port(&self.cfg.postgresql.connect_address)
        {
            hosts.push(own);
        }
        let deadline = self.deadline(Duration::from_secs(1));
        match self.pg.set_hba_hosts(hosts, deadline) {
            Ok(true) => info!("pg_hba.conf rewritten for the members' addresses"),
            Ok(false) => {}
            Err(e) => warn!("pg_hba.conf: {e}"),
        }
    }

    /// The config key's `postgresql.parameters` on this node's PostgreSQL: those
    /// PostgreSQL's parser accepts into `tenure.params.conf`, then a reload
    /// (`PgCtl::set_cluster_params`; only when the key's list changed). One it
    /// refuses is left out and said (`CONFIG_REFUSED`), as is one the node's own
    /// `[postgresql.parameters]` overrides. Nothing before a `config` key was
    /// applied in this run. A failure is logged when its text changes and tried
    /// again a `loop_wait` later (each check's child exits with a SIGCHLD that
    /// wakes the loop: no retry right behind it). Bounded like every call of the
    /// loop (S1, S6 d): the check's child is killed at the deadline.
    fn maintain_cluster_params(&mut self) {
        if !self.params_known || self.params_retry_at.is_some_and(|t| clock::now() < t) {
            return;
        }
        let deadline = self.deadline(Duration::from_secs(1));
        match self
            .pg
            .set_cluster_params(&self.cfg.dynamic.pg_parameters.set, deadline)
        {
            Ok(None) => {}
            Ok(Some(a)) => {
                self.params_error = None;
                self.params_retry_at = None;
                for r in &a.refused {
                    crate::events::emit(&crate::events::Event::ConfigRefused {
                        source: "config key",
                        error: format!(
                            "postgresql.parameters.{} = {:?} left out of tenure.params.conf: \
                             refused on this node ({})",
                            r.name, r.value, r.why
                        ),
                    });
                }
                let own: Vec<&str> = a
                    .set
                    .iter()
                    .filter(|k| {
                        self.cfg
                            .postgresql
                            .parameters
                            .iter()
                            .any(|(n, _)| n.eq_ignore_ascii_case(k))
                    })
                    .map(String::as_str)
                    .collect();
                if !own.is_empty() {
                    info!(
                        "config key: postgresql.parameters {own:?} are overridden on this node \
                         by its own [postgresql.parameters]"
                    );
                }
                if a.written {
                    info!(
                        "tenure.params.conf: {} cluster-wide PostgreSQL setting(s) from the \
                         config key{}; {}",
                        a.set.len(),
                        if a.set.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", a.set.join(", "))
                        },
                        if a.reloaded {
                            "PostgreSQL reloaded (a setting that needs a restart shows as \
                             pending_restart)"
                        } else {
                            "PostgreSQL is not running: its next start reads them"
                        }
                    );
                }
            }
            Err(e) => {
                let wait = self.cfg.timing.loop_wait.max(Duration::from_secs(1));
                self.params_retry_at = Some(clock::now().add(wait));
                let e = format!(
                    "cluster-wide PostgreSQL settings: {e}; trying again in {} s",
                    wait.as_secs_f64()
                );
                if self.params_error.as_deref() != Some(e.as_str()) {
                    warn!("{e}");
                    self.params_error = Some(e);
                }
            }
        }
    }

    /// The bootstrapping node (or a leader finding the key missing) seeds `config`
    /// from its `[timing]`/`[dynamic]` values; a leader's write is guarded by its
    /// epoch.
    fn seed_config(&mut self, deadline: Instant) {
        let json = self.cfg.dynamic_json();
        let me = self.cfg.name.clone();
        let leader = self.core.leadership().map(|l| l.epoch);
        if let Some((etcd, rt)) = self.connect(deadline) {
            match etcd.put_config_if_absent(rt, &json, leader.map(|e| (me.as_str(), e)), deadline) {
                Ok(true) => info!("seeded the cluster's dynamic configuration: {json}"),
                Ok(false) => {}
                Err(e) => debug!("seeding config: {e}"),
            }
        }
    }

    /// Record the leadership's epoch in the local `tenure.epoch` row (DESIGN §1 step
    /// 5, §3). Bounded; a failure is logged and retried next iteration (the core asks
    /// again while the row differs), never blocks the loop.
    fn write_epoch(&mut self, epoch: Epoch) {
        // Capped at the next tick like every call on the leader's path (S6 d; fresh-
        // eyes review of seed 253898, R3): it is retried every iteration until it
        // succeeds, so a write that waits must never delay a keepalive.
        let deadline = self.deadline(Duration::from_secs(2));
        let me = self.cfg.name.clone();
        // The row names the lease too: an adoption lifts its delay only on a row of
        // this very leadership (`Core::lift_adoption_delay`, seed 253898 review).
        let lease = self.core.leadership().map(|l| l.lease);
        match self.pg.write_epoch(epoch, &me, lease, deadline) {
            Ok(()) => info!("recorded epoch {epoch} in tenure.epoch"),
            Err(e) => {
                warn!("recording epoch {epoch} in tenure.epoch: {e}; retrying next iteration")
            }
        }
    }

    /// The `history` entry for the fork into `timeline` (review F2): its parent and
    /// switch point from PostgreSQL's timeline history file, appended under the
    /// epoch guard. A failure is logged when its text changes; the core plans the
    /// append again next iteration while `history` lacks it.
    ///
    /// Idempotent: the core asks while `history`'s newest timeline is below ours,
    /// which stays true when PostgreSQL skipped a timeline number (it takes the
    /// newest history file it finds, + 1), so an entry already in `history` (the
    /// same parent and switch point) is not appended again, and that fork is not
    /// read again.
    fn append_history(
        &mut self,
        epoch: Epoch,
        timeline: u32,
        history: &[HistoryEntry],
        deadline: Instant,
    ) {
        let holds = |(parent, lsn): (u32, Lsn)| {
            history.iter().any(|h| h.timeline == parent && h.lsn == lsn)
        };
        if let Some((tl, fork)) = self.history_recorded
            && tl == timeline
            && holds(fork)
        {
            return;
        }
        let (parent, lsn) = match self.pg.timeline_fork(timeline) {
            Ok(f) => f,
            Err(e) => {
                self.history_problem(format!(
                    "cannot record the fork into timeline {timeline} in history: {e}; retrying"
                ));
                return;
            }
        };
        if holds((parent, lsn)) {
            self.history_recorded = Some((timeline, (parent, lsn)));
            return;
        }
        let entry = HistoryEntry {
            timeline: parent,
            lsn,
            reason: format!("no leader: promoted by tenure at epoch {epoch}"),
            timestamp: clock::rfc3339_utc(clock::realtime()),
            new_leader: self.cfg.name.clone(),
        };
        let me = self.cfg.name.clone();
        let Some((etcd, rt)) = self.connect(deadline) else {
            return;
        };
        match etcd.append_history(rt, &entry, &me, epoch, deadline) {
            Ok(true) => {
                info!(
                    "history: timeline {timeline} forked from {parent} at {}",
                    crate::core::model::lsn_text(lsn)
                );
                self.history_warned = None;
            }
            Ok(false) => {
                warn!("history append refused by the epoch guard");
                self.pending.guard_refused = Some("the history append".into());
            }
            Err(e) => self.history_problem(format!("history append failed: {e}; retrying")),
        }
    }

    /// Log a failed `history` append once per distinct text (it is retried every
    /// iteration).
    fn history_problem(&mut self, why: String) {
        if self.history_warned.as_deref() != Some(why.as_str()) {
            warn!("{why}");
            self.history_warned = Some(why);
        } else {
            debug!("{why}");
        }
    }

    /// Pet every watchdog leadership uses — systemd's `WATCHDOG=1` and the device,
    /// opened now if it is not yet (the open is the pet, and happens only after
    /// adopting or winning, S4) — at an instant no later than the core's `not_after`
    /// (S2: `t + 2W <= H`), and report what happened (DESIGN §5). The report's
    /// instant is read before the ping, so the core's `F` is never later than the
    /// device's deadline.
    fn pet_watchdog(&mut self, not_after: Instant) -> PetReport {
        let at = clock::now();
        if at > not_after {
            // An iteration slower than the margin: skip (the device then fires early,
            // the safe side) rather than pet past `t + 2W <= H`.
            let why = format!("now {at} is past the last instant allowed, {not_after} (S2)");
            warn!("watchdog pet skipped: {why}");
            return PetReport {
                at,
                outcome: PetOutcome::Skipped(why),
            };
        }
        if self.wd.systemd_w.is_some() {
            self.wd.notifier.watchdog();
        }
        if !self.wd.use_device {
            return PetReport {
                at,
                outcome: PetOutcome::Done,
            };
        }
        let result = match self.wd.device.as_mut() {
            Some(dev) => dev
                .keepalive()
                .map(|()| at)
                .map_err(|e| OpenError::Unusable(e.to_string())),
            None => self.open_watchdog(not_after),
        };
        match result {
            Ok(at) => PetReport {
                at,
                outcome: PetOutcome::Done,
            },
            Err(OpenError::Late(why)) => {
                // Not tried, nothing wrong with the device: no pet, so the core
                // waits to promote and the next counted renewal's pet opens it.
                warn!("watchdog arm skipped: {why}");
                PetReport {
                    at,
                    outcome: PetOutcome::Skipped(why),
                }
            }
            Err(OpenError::Unusable(why)) => {
                self.watchdog_unusable(why.clone());
                PetReport {
                    at,
                    outcome: PetOutcome::Failed(why),
                }
            }
        }
    }

    /// Open the device, retrying EBUSY briefly (a crashed predecessor's release may
    /// still be in flight) but never past `not_after` (each attempt is a pet if it
    /// succeeds, S2; issue 8 finding 11), then check the read-back `W` against S6
    /// for the TTL in force. Returns the instant read just before the open that
    /// succeeded. The first attempt is made even past the tick or `F - B` (one
    /// non-blocking `open(2)` and its `ioctl`s, as long as the keepalive an armed
    /// device gets at the same point; F until its report is `pet_pending + W` or the
    /// unwatched deadline, and a done open moves it to `at + W <= H - W`, S2).
    fn open_watchdog(&mut self, not_after: Instant) -> Result<Instant, OpenError> {
        let retry_until = self.deadline(self.core.timing().retry_timeout);
        let ttl = self
            .core
            .leadership()
            .map_or(self.core.timing().ttl, |l| l.ttl);
        // The W the core planned this arm with (it follows the ttl in force,
        // `follow_ttl_with_w`); the read-back is checked against S2 below.
        let requested = self.wd.requested;
        let (path, sysfs) = (&self.wd.path, &self.cfg.watchdog.sysfs_dir);
        let first_try = clock::now();
        let (dev, at) = match crate::watchdog::open_within(
            not_after,
            retry_until,
            clock::now,
            || Device::open_with_sysfs(path, requested, sysfs),
            std::thread::sleep,
        ) {
            OpenTry::Opened(d, at) => {
                self.wd.busy_since.opened();
                (d, at)
            }
            OpenTry::Late => {
                return Err(OpenError::Late(format!(
                    "{}: not opened, the instant was past the last one a pet was allowed, \
                     {not_after} (S2)",
                    path.display()
                )));
            }
            OpenTry::Busy => {
                let epoch = self.core.leadership().map(|l| l.epoch);
                let busy_for = self.wd.busy_since.busy(epoch, first_try, clock::now());
                let retry = self.core.timing().retry_timeout;
                if busy_for < retry {
                    // The loop's tick, `F - B` or S2 cut the retries short: not yet
                    // evidence against the device (a predecessor's release may be
                    // in flight). No pet: the next counted renewal tries again.
                    return Err(OpenError::Late(format!(
                        "{} busy for {:.3} s, under retry_timeout ({:.3} s), when the \
                         retries had to stop",
                        path.display(),
                        busy_for.as_secs_f64(),
                        retry.as_secs_f64()
                    )));
                }
                return Err(OpenError::Unusable(format!(
                    "{} stayed busy for {:.3} s (retry_timeout {:.3} s)",
                    path.display(),
                    busy_for.as_secs_f64(),
                    retry.as_secs_f64()
                )));
            }
            OpenTry::Failed(e) => return Err(OpenError::Unusable(e.to_string())),
        };
        if dev.boot_status_watchdog_reset() && !self.wd.boot_reset_said {
            self.wd.boot_reset_said = true;
            crate::events::emit(&crate::events::Event::WatchdogReset {
                device: self.wd.path.display().to_string(),
                via: "WDIOC_GETBOOTSTATUS",
            });
        }
        // S2 at the instant of this open with the W the device really took (review of
        // issue 8: the planned `not_after` assumed the requested W; a device that
        // rounds up, or a request for another ttl, could otherwise break t + 2W <= H).
        // Judged at the open's last ping (after its ioctls), the latest instant it
        // may have pinged; the core's F counts from `at`, before it (review of
        // 677a682, L3).
        let w_read = Duration::from_secs(u64::from(dev.timeout()));
        let pinged = dev.last_ping();
        let s2 = match self.core.horizon() {
            Some(h) if pinged.add(w_read).add(w_read) > h => Err(format!(
                "{} took W = {} s: the open at {pinged} + 2W passes H = {h} (S2)",
                self.wd.path.display(),
                dev.timeout()
            )),
            _ => Ok(()),
        };
        if let Err(why) = s2.and_then(|()| {
            crate::watchdog::check_usable(&dev, &self.cfg.timing, ttl, &self.wd.mode)
        }) {
            // Hand the device back disarmed: it must not reset a host that runs without it.
            match dev.disarm() {
                Ok(_) => {}
                Err(WatchdogError::NoWayOut(dev))
                | Err(WatchdogError::DisarmWrite { device: dev, .. }) => {
                    // Issue 8 finding 11: it cannot be disarmed, so it is armed with a
                    // W we refused. Keep it (never drop an armed device) and give up
                    // leadership for this run: the fence runs, then the device is
                    // petted freely once no primary runs (DESIGN S1, `nowayout`).
                    error!(
                        "ALERT: the refused watchdog {} cannot be disarmed (nowayout): keeping \
                         it open; this node gives up leadership for this run",
                        self.wd.path.display()
                    );
                    self.wd.device = Some(*dev);
                    self.wd.keep_petting = true;
                    self.core
                        .refuse_leadership(format!("watchdog refused and armed: {why}"));
                    self.pending.watchdog_failed = Some(why.clone());
                }
                Err(e) => error!("could not disarm the refused watchdog: {e}"),
            }
            return Err(OpenError::Unusable(why));
        }
        let w = Duration::from_secs(u64::from(dev.timeout()));
        crate::events::emit(&crate::events::Event::WatchdogArmed {
            device: self.wd.path.display().to_string(),
            w: dev.timeout(),
        });
        info!(
            "watchdog {} ({}) armed: W = {} s (requested {} s), nowayout {:?}",
            self.wd.path.display(),
            dev.identity(),
            dev.timeout(),
            self.wd.requested,
            dev.nowayout()
        );
        // INVARIANT: the core's W is the read-back, never the request: pets judged by
        // the longest of it and systemd's, F by the shortest.
        self.core.set_watchdogs(Some(w), self.wd.systemd_w);
        self.wd.device = Some(dev);
        // A change refused for the old W is judged again for this one.
        self.applied_config = None;
        Ok(at)
    }

    fn watchdog_unusable(&mut self, why: String) {
        match self.wd.mode {
            WatchdogMode::Required => {
                error!("ALERT: required watchdog unusable: {why}; giving up leadership (S3)");
                self.pending.watchdog_failed = Some(why);
            }
            _ => {
                error!(
                    "watchdog unusable ({why}); mode automatic: running WITHOUT a watchdog: a \
                     frozen agent would leave its primary writable until it thaws"
                );
                self.wd.use_device = false;
                self.core.set_watchdog(self.wd.systemd_w);
            }
        }
    }

    /// `DisarmWatchdog` (only after a complete fence or a clean stop, S1).
    fn disarm_watchdog(&mut self) {
        self.guardian_stand_down();
        let Some(dev) = self.wd.device.take() else {
            return;
        };
        match dev.disarm() {
            Ok(d) => {
                crate::events::emit(&crate::events::Event::WatchdogDisarmed {
                    device: d.path.display().to_string(),
                });
                // A change refused for the armed W is judged again without it.
                self.applied_config = None;
            }
            Err(WatchdogError::NoWayOut(dev)) => {
                warn!(
                    "watchdog has nowayout: it stays open and petted (no primary runs); \
                     stopping this agent will reboot the host"
                );
                self.wd.device = Some(*dev);
                self.wd.keep_petting = true;
            }
            Err(WatchdogError::DisarmWrite { device, errno }) => {
                error!("watchdog magic close failed ({errno}); keeping it open and petted");
                self.wd.device = Some(*device);
                self.wd.keep_petting = true;
            }
            Err(e) => error!("watchdog disarm: {e}"),
        }
    }

    /// systemd: READY=1 after the first loop, STATUS= on change, and WATCHDOG=1 at the
    /// loop's pace on a node whose PostgreSQL cannot accept writes (a liveness proof
    /// only: an etcd blip must never get replicas killed). A leader's WATCHDOG=1 is
    /// sent only by `PetWatchdog` (S2).
    fn notify_after_iteration(&mut self, obs: &Observation) {
        if !self.wd.ready_sent {
            self.wd.notifier.ready();
            self.wd.ready_sent = true;
        }
        if self.wd.last_status != self.last_reason {
            self.wd.notifier.status(&self.last_reason);
            self.wd.last_status = self.last_reason.clone();
        }
        // Not while a PostgreSQL that may accept writes runs (a wedged primary too,
        // issue 8 finding 8): systemd must be free to kill an agent that cannot fence.
        let free = !self.core.pets_need_proof() && !obs.pg.may_accept_writes();
        if free {
            self.wd.notifier.watchdog();
            if self.wd.keep_petting
                && let Some(dev) = self.wd.device.as_mut()
                && let Err(e) = dev.keepalive()
            {
                error!("watchdog keepalive after fence: {e}");
            }
        }
    }

    /// Where member `name`'s PostgreSQL listens, from this iteration's read (or the
    /// last one that succeeded).
    fn target(&self, obs: &Observation, name: &str) -> Option<ConnTarget> {
        let view = obs.cluster.as_ref().ok().or(self.last_view.as_ref())?;
        let m = view.member(name)?;
        ConnTarget::from_conn_url(name, &m.info.conn_url).ok()
    }
}

impl Watchdogs {
    /// Decide at start-up which watchdogs leadership will use; nothing is opened here
    /// (S4: the device is opened only after adopting or winning the key).
    fn setup(cfg: &Config, mut core: Core) -> Result<(Watchdogs, Core), String> {
        let mut notifier = match Notifier::from_env() {
            Ok(n) => n,
            Err(e) => {
                warn!("systemd notify disabled: {e}");
                Notifier::from_values(None, None, None, std::process::id())
                    .map_err(|e| format!("systemd notify: {e}"))?
            }
        };
        // The W systemd enforces from here on: our own, sent with WATCHDOG_USEC=,
        // unless it could not be sent (S2, S6(b); watchdog::own_systemd_timeout).
        let systemd_w = crate::watchdog::own_systemd_timeout(&mut notifier, &cfg.timing);
        if let Some(w) = systemd_w {
            // S6 is checked against WATCHDOG_USEC playing W (rounded up: the upper
            // bound is the safety side).
            let secs =
                u32::try_from(w.as_secs() + u64::from(w.subsec_nanos() > 0)).unwrap_or(u32::MAX);
            crate::config::validate_timing(&cfg.timing, cfg.timing.ttl, Some(secs)).map_err(
                |e| {
                    format!(
                        "systemd WatchdogSec= ({} s) breaks the timing contract: {e}",
                        w.as_secs_f64()
                    )
                },
            )?;
        }
        let mode = cfg.watchdog.mode.clone();
        let path = cfg.watchdog.device.clone();
        let range = crate::config::watchdog_range(&cfg.timing, cfg.timing.ttl);
        let mut use_device = false;
        let mut requested = 0;
        let mut boot_reset_said = false;
        // Where no device will be used, the guardian may be the fence (DESIGN §2): it
        // is started and said right after this, by `guardian_hooks::start`.
        let guardian = cfg.watchdog.guardian_applies(false, systemd_w.is_some());
        match (&mode, range) {
            (WatchdogMode::Off, _) => {}
            (_, None) if guardian => {}
            (_, None) => {
                let why = format!(
                    "no watchdog timeout W satisfies the timing contract for ttl {} s",
                    cfg.timing.ttl
                );
                if mode == WatchdogMode::Required {
                    core.refuse_leadership(why);
                } else {
                    warn!("watchdog: {why}; running without one");
                }
            }
            (_, Some((_, hi))) if path.exists() => {
                use_device = true;
                requested = hi;
                // Say it at start-up, not only when leadership opens the device.
                if crate::watchdog::device::sysfs_boot_reset(&cfg.watchdog.sysfs_dir, &path)
                    == Some(true)
                {
                    boot_reset_said = true;
                    crate::events::emit(&crate::events::Event::WatchdogReset {
                        device: path.display().to_string(),
                        via: "sysfs bootstatus",
                    });
                }
            }
            (_, Some(_)) if guardian => {
                info!(
                    "watchdog device {} does not exist; the guardian is the fence",
                    path.display()
                );
            }
            (_, Some(_)) => {
                let why = format!("watchdog device {} does not exist", path.display());
                if mode == WatchdogMode::Required {
                    error!("ALERT: {why}; watchdog mode required: this node will never lead");
                    core.refuse_leadership(why);
                } else {
                    warn!(
                        "{why}; mode automatic: running WITHOUT a watchdog: a frozen agent \
                         would leave its primary writable until it thaws"
                    );
                }
            }
        }
        let device_w = use_device.then(|| Duration::from_secs(u64::from(requested)));
        core.set_watchdogs(device_w, systemd_w);
        Ok((
            Watchdogs {
                mode,
                path,
                requested,
                use_device,
                device: None,
                keep_petting: false,
                notifier,
                systemd_w,
                ready_sent: false,
                last_status: String::new(),
                boot_reset_said,
                busy_since: Default::default(),
                check: wdcheck::WdCheck::default(),
            },
            core,
        ))
    }
}

/// `[agent] lock_memory` and `realtime_priority`, reported at start-up either way
/// (DESIGN S5: a swap storm or a starved CPU is a stall, and stalls are lease loss).
fn tune_process(cfg: &crate::config::AgentConfig) {
    use nix::sys::mman::{MlockAllFlags, mlockall};
    if cfg.lock_memory {
        match mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE) {
            Ok(()) => info!("memory locked (mlockall): the loop cannot be swapped out"),
            Err(e) => error!(
                "ALERT: [agent] lock_memory: mlockall failed ({e}); running with swappable \
                 memory (raise LimitMEMLOCK= in the unit)"
            ),
        }
    } else {
        info!("memory not locked ([agent] lock_memory = false)");
    }
    match cfg.realtime_priority {
        Some(prio) => {
            let param = libc::sched_param {
                sched_priority: i32::from(prio),
            };
            // SCHED_RESET_ON_FORK: PostgreSQL and every other child we start must run
            // under the normal scheduler, never at our real-time priority.
            // SAFETY: `param` is a valid, initialised sched_param that outlives the
            // call; pid 0 names this process only.
            let rc = unsafe {
                libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
            };
            if rc == 0 {
                info!("scheduling: SCHED_FIFO priority {prio} (children reset on fork)");
            } else {
                error!(
                    "ALERT: [agent] realtime_priority {prio}: sched_setscheduler failed ({}); \
                     running under the normal scheduler",
                    std::io::Error::last_os_error()
                );
            }
        }
        None => info!("scheduling: normal (no [agent] realtime_priority)"),
    }
}

/// A log line must never stall the loop: when stderr is a pipe or a socket (journald,
/// a supervisor), make it non-blocking so a reader that stops reading costs lines,
/// not deadlines. A terminal or a file is left alone (a write to a file does not
/// block on a reader, and a terminal shared with a shell must stay blocking).
fn nonblocking_log_pipe() {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use nix::sys::stat::{SFlag, fstat};
    let fd = std::io::stderr();
    let Ok(st) = fstat(&fd) else { return };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFSOCK {
        return;
    }
    if let Ok(flags) = fcntl(&fd, FcntlArg::F_GETFL) {
        let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
        if let Err(e) = fcntl(&fd, FcntlArg::F_SETFL(flags)) {
            warn!("cannot make the stderr pipe non-blocking: {e}");
        }
    }
}

/// `CONFIG_REFUSED` for a SIGHUP reload (the running configuration stays).
fn config_refused(error: String) {
    crate::events::emit(&crate::events::Event::ConfigRefused {
        source: "reload",
        error,
    });
}

/// What the member key's JSON is made of. `encode` is a pure function of it, so
/// equal inputs mean an equal key: the loop compares these instead of encoding the
/// JSON every iteration to compare it (issue 13 item 2).
#[derive(Clone, Debug, PartialEq)]
struct MemberInputs {
    info: MemberInfo,
    /// The member JSON's `timing` (`PATCH /config` checks members against it).
    timing: crate::config::cluster::PublishedTiming,
    /// `pending_restart`, `scheduled_restart` (Patroni's names), when set.
    operator: Vec<(&'static str, serde_json::Value)>,
    /// Every agent says it saw the pause (Patroni's status JSON `pause`).
    paused: bool,
}

impl MemberInputs {
    fn encode(&self) -> String {
        let mut extra = vec![("timing", self.timing.to_json())];
        extra.extend(self.operator.iter().cloned());
        if self.paused {
            extra.push(("pause", serde_json::Value::Bool(true)));
        }
        crate::dcs::encode_member_with(&self.info, extra)
    }
}

/// Whether our member key must be written although its content did not change
/// since our last write (issue 13 item 5 writes it only on a change), given the
/// read's view of it: `shown` our member key in the read, `no_leader` the read
/// shows no leader key, `vacancy_seen` the revision at which this node found the
/// vacancy, `own_window` our `L_w + R`.
fn member_write_needed(
    shown: Option<&crate::core::model::Member>,
    no_leader: bool,
    vacancy_seen: Option<i64>,
    own_window: Duration,
) -> bool {
    match shown {
        // Deleted by an operator, or its lease expired.
        None => true,
        // Review L2: the read shows another `poll_window` than ours (written
        // before a restart, or by another writer): a leader's rules keep such a
        // value until our key shows ours (`core::window`), so repair it now.
        Some(m) if m.info.poll_window != Some(own_window) => true,
        // Once per vacancy: candidates wait for positions published after it
        // (DESIGN §3a); the first write past the read that showed it is this
        // node's fresh position, later ones add nothing.
        Some(m) => no_leader && vacancy_seen.is_none_or(|seen| m.mod_revision <= seen),
    }
}

/// Why a leadership's open of its watchdog gave no pet (`Agent::open_watchdog`).
enum OpenError {
    /// Not tried: too late for a pet (S2). The pet is skipped, the device kept.
    Late(String),
    /// The device cannot serve (busy for good, an error, refused): S3 for `required`,
    /// no watchdog for the run in `automatic`.
    Unusable(String),
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::model::{Member, MemberInfo};

    fn shown(rev: i64, window: Option<f64>) -> Member {
        Member {
            name: "pg1".into(),
            mod_revision: rev,
            lease: 7,
            info: MemberInfo {
                poll_window: window.map(Duration::from_secs_f64),
                ..MemberInfo::default()
            },
        }
    }

    #[test]
    fn an_unchanged_member_key_is_written_only_when_the_read_needs_it() {
        let own = Duration::from_millis(750);
        // Steady state: a leader is seen, our key shows our window: no write.
        assert!(!member_write_needed(
            Some(&shown(9, Some(0.75))),
            false,
            None,
            own
        ));
        // Gone: written.
        assert!(member_write_needed(None, false, None, own));
        // Review L2: another window, or none, in our key: written back.
        assert!(member_write_needed(
            Some(&shown(9, Some(3600.0))),
            false,
            None,
            own
        ));
        assert!(member_write_needed(Some(&shown(9, None)), false, None, own));
        // A vacancy: once past the read that showed it.
        assert!(member_write_needed(
            Some(&shown(9, Some(0.75))),
            true,
            Some(12),
            own
        ));
        assert!(!member_write_needed(
            Some(&shown(13, Some(0.75))),
            true,
            Some(12),
            own
        ));
    }

    /// Issue 13 item 2: the loop compares `MemberInputs` instead of the encoded
    /// JSON; each part of them shows in the JSON, so a change of any is a write.
    /// (The other way is harmless: `timing.leader_ttl` is published as the
    /// member's `leader_ttl`, so inputs may differ with the same JSON, which costs
    /// one write the JSON comparison would have skipped.)
    #[test]
    fn member_inputs_decide_the_member_json() {
        let base = MemberInputs {
            info: MemberInfo {
                conn_url: "postgres://10.0.0.1:5432/postgres".into(),
                role: "replica".into(),
                xlog_location: 100,
                poll_window: Some(Duration::from_millis(750)),
                ..MemberInfo::default()
            },
            timing: crate::config::cluster::PublishedTiming {
                watchdogs: vec![3],
                arms_watchdog: false,
                safety_margin: Duration::from_millis(500),
                demote_budget: Duration::from_secs(1),
                iteration_budget: Duration::from_millis(250),
                iteration_budget_default: true,
                leader_ttl: None,
            },
            operator: Vec::new(),
            paused: false,
        };
        let json = base.encode();
        assert_eq!(base.clone().encode(), json, "equal inputs, equal JSON");
        let mut changed = Vec::new();
        let mut c = base.clone();
        c.info.xlog_location = 101;
        changed.push(c);
        let mut c = base.clone();
        c.info.poll_window = Some(Duration::from_secs(1));
        changed.push(c);
        let mut c = base.clone();
        c.timing.demote_budget = Duration::from_secs(2);
        changed.push(c);
        let mut c = base.clone();
        c.operator = vec![("pending_restart", serde_json::Value::Bool(true))];
        changed.push(c);
        let mut c = base.clone();
        c.paused = true;
        changed.push(c);
        for c in changed {
            assert_ne!(c, base);
            assert_ne!(c.encode(), json, "{c:?}");
        }
    }
}
