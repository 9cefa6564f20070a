//! Benchmark: nanoseconds and heap allocations per `Core::step` (the pure decision
//! core) for the observations a running cluster feeds it every loop.
//!
//! Scenarios (timing of the test bed, DESIGN §6: ttl 7, loop 0.5 s):
//! - a steady leader: counted renewal, 3 members, synchronous mode off, then on
//!   (the sync key lists a standby that streams and is `sync`);
//! - a following replica: streaming from the leader, polling its lease;
//! - a candidate judging a vacancy among 5 members (the old lease confirmed gone,
//!   every rival published a fresh position; the plan is `Acquire` every time).
//!
//! Each scenario first drives a fresh `Core` into that state, checks the plan is the
//! one described (a wrong setup is a broken benchmark: it exits non-zero), then
//! times many steps with the same observation, advancing `now` (and the renewal's
//! or the poll's send instant) by `loop_wait` per step, as the agent would.
//!
//! Allocations are counted by a counting `#[global_allocator]` in this binary.
//! `TENURE_BENCH_TRACE_ALLOCS=1` also prints, for one step of each scenario, where
//! in `src/core` every allocation came from (a backtrace per allocation: slow, so
//! only one step, outside the timing).

#[path = "harness.rs"]
mod harness;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use harness::{STATS_HEAD, Stats, Table, stats_row, time_batched};
use tenure::core::model::*;
use tenure::core::time::Instant;
use tenure::core::{Core, CoreConfig};

// ----- the counting allocator ----------------------------------------------------

/// Counts every allocation of this process (the benchmark is one thread, so the
/// counts between two reads are the step's own).
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static REALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Record a backtrace per allocation (trace mode, one step only).
static TRACING: AtomicBool = AtomicBool::new(false);
static TRACES: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());

thread_local! {
    /// Set while a trace is being recorded: the backtrace itself allocates.
    static IN_TRACE: Cell<bool> = const { Cell::new(false) };
}

fn trace(size: usize) {
    if !TRACING.load(Ordering::Relaxed) || IN_TRACE.with(|c| c.replace(true)) {
        return;
    }
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    if let Ok(mut t) = TRACES.lock() {
        t.push((size, bt));
    }
    IN_TRACE.with(|c| c.set(false));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged;
// the counters and the trace only observe (the trace's own allocations re-enter
// with IN_TRACE set and are forwarded without recursion).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        trace(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        trace(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through us) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(
            new_size.saturating_sub(layout.size()) as u64,
            Ordering::Relaxed,
        );
        trace(new_size);
        // SAFETY: `ptr`/`layout` come from `System` through us; the caller upholds
        // `realloc`'s contract for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counts() -> (u64, u64, u64) {
    (
        ALLOCS.load(Ordering::Relaxed),
        REALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    )
}

// ----- observations --------------------------------------------------------------

const SYSID: u64 = 7_000_000_000_000_000_042;
const LOOP_NS: u64 = 500_000_000;

fn t(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

/// The test bed's timing (DESIGN §6).
fn timing(sync: SyncMode) -> Timing {
    Timing {
        ttl: 7,
        loop_wait: Duration::from_millis(500),
        retry_timeout: Duration::from_millis(250),
        safety_margin: Duration::from_millis(500),
        demote_budget: Duration::from_secs(1),
        promote_delay: None,
        maximum_lag_on_failover: 1 << 20,
        primary_start_timeout: Duration::from_secs(30),
        synchronous: sync,
        synchronous_node_count: 1,
        maximum_lag_on_syncnode: None,
    }
}

fn core(name: &str, sync: SyncMode) -> Core {
    Core::new(
        CoreConfig {
            name: name.into(),
            nofailover: false,
            watchdog: None,
            move_aside_unusable: false,
        },
        timing(sync),
    )
}

fn pg(role: PgRole, lsn: Lsn, following: Option<&str>) -> PgStatus {
    PgStatus {
        data: DataDir::Present {
            sysid: SYSID,
            was_primary: role == PgRole::Primary,
        },
        role,
        timeline: 1,
        lsn,
        following: following.map(String::from),
        streaming: following.is_some(),
        epoch: Some(5),
        epoch_row: EpochRow::default(),
        sync_names: Some(String::new()),
        standbys: Vec::new(),
        report: Default::default(),
    }
}

fn member(name: &str, rev: i64, role: &str, xlog: Lsn) -> Member {
    Member {
        name: name.into(),
        mod_revision: rev,
        lease: 0x100,
        info: MemberInfo {
            conn_url: format!("postgres://127.0.0.1:5432/postgres?name={name}"),
            api_url: format!("http://127.0.0.1:8008/{name}"),
            state: "running".into(),
            role: role.into(),
            version: "0.1.0".into(),
            xlog_location: xlog,
            timeline: 1,
            epoch: Some(5),
            leader_lease: (role == "primary").then_some(0xA),
            pg_healthy: true,
            ..MemberInfo::default()
        },
    }
}

fn view(revision: i64, leader: Option<LeaderKey>, members: Vec<Member>) -> ClusterView {
    ClusterView {
        revision,
        leader,
        members,
        initialize: Some(Initialize::Done { sysid: SYSID }),
        config: Some(r#"{"ttl":7,"loop_wait":0.5,"retry_timeout":0.25}"#.into()),
        ..ClusterView::default()
    }
}

fn key_pg1() -> LeaderKey {
    LeaderKey {
        name: "pg1".into(),
        epoch: 5,
        mod_revision: 5,
        lease: 0xA,
    }
}

fn obs(cluster: ClusterView, pg: PgStatus) -> Observation {
    Observation::reading(Ok(cluster), pg)
}

fn standby(name: &str, sync: bool) -> StandbyStat {
    StandbyStat {
        name: name.into(),
        streaming: true,
        sync,
        flush: 1000,
    }
}

/// A scenario: a core in the described state, the observation it gets every loop,
/// and how to advance that observation to the instant `now` (no allocation).
struct Scenario {
    name: &'static str,
    core: Core,
    obs: Observation,
    advance: fn(&mut Observation, Instant),
    /// What the plan must look like in steady state (else the setup is wrong).
    expect: fn(&Plan) -> bool,
    /// Steps are taken from here on, `LOOP_NS` apart.
    start: u64,
}

fn advance_renewal(o: &mut Observation, now: Instant) {
    if let Some(r) = &mut o.renewal {
        r.sent_at = now;
    }
}

fn advance_poll(o: &mut Observation, now: Instant) {
    if let Some(p) = &mut o.lease_poll {
        p.sent_at = now;
    }
}

fn advance_nothing(_: &mut Observation, _: Instant) {}

/// pg1 leads (adopted through a counted renewal), PostgreSQL primary, pg2 and pg3
/// streaming. With `sync`, the `sync` key lists pg2, which is `sync`.
fn leader(sync: SyncMode) -> Scenario {
    let mut c = core("pg1", sync);
    let members = vec![
        member("pg1", 90, "primary", 1000),
        member("pg2", 91, "replica", 1000),
        member("pg3", 92, "replica", 1000),
    ];
    let mut v = view(100, Some(key_pg1()), members);
    let mut p = pg(PgRole::Primary, 1000, None);
    p.standbys = vec![standby("pg2", sync != SyncMode::Off), standby("pg3", false)];
    if sync != SyncMode::Off {
        v.sync = Some(Ok(SyncKey {
            leader: "pg1".into(),
            sync_standbys: vec!["pg2".into()],
        }));
        p.sync_names = Some(tenure::core::sync_names_for(&["pg2".to_string()]));
    }
    let mut o = obs(v, p);
    c.step(t(10.0), &o);
    o.renewal = Some(Renewal {
        lease: 0xA,
        sent_at: t(10.0),
        outcome: RenewalOutcome::Counted { ttl: 7 },
    });
    Scenario {
        name: if sync == SyncMode::Off {
            "leader, 3 members, sync off"
        } else {
            "leader, 3 members, sync on"
        },
        core: c,
        obs: o,
        advance: advance_renewal,
        expect: |p| {
            matches!(&p.reason, Reason::Leading { .. } | Reason::Other(_))
                && p.reason.to_string().contains("leader with the lock")
        },
        start: 10_000_000_000,
    }
}

/// pg2 follows pg1: PostgreSQL a streaming replica of pg1; each loop polls pg1's lease.
fn replica() -> Scenario {
    let c = core("pg2", SyncMode::Off);
    let members = vec![
        member("pg1", 90, "primary", 1000),
        member("pg2", 91, "replica", 1000),
        member("pg3", 92, "replica", 1000),
    ];
    let mut o = obs(
        view(100, Some(key_pg1()), members),
        pg(PgRole::Replica, 1000, Some("pg1")),
    );
    o.lease_poll = Some(LeasePoll {
        lease: 0xA,
        sent_at: t(10.0),
        ttl: Some(6),
        granted_ttl: None,
        has_keys: true,
    });
    Scenario {
        name: "replica following, 3 members",
        core: c,
        obs: o,
        advance: advance_poll,
        expect: |p| matches!(p.reason, Reason::Following { .. }) && p.actions.is_empty(),
        start: 10_000_000_000,
    }
}

/// pg2, following pg1, sees the key vanish and the old lease gone; pg3..pg5 have
/// published fresh positions behind pg2's: every step judges all rivals and plans
/// `Acquire` (the outcome is never fed back, so the judgement repeats).
fn candidate() -> Scenario {
    let mut c = core("pg2", SyncMode::Off);
    let names = ["pg1", "pg2", "pg3", "pg4", "pg5"];
    let old: Vec<Member> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            member(
                n,
                90 + i as i64,
                if i == 0 { "primary" } else { "replica" },
                1000,
            )
        })
        .collect();
    let o = obs(
        view(100, Some(key_pg1()), old.clone()),
        pg(PgRole::Replica, 1000, Some("pg1")),
    );
    c.step(t(10.0), &o);
    // The key is gone; the poll says the old lease is too.
    let mut o = obs(view(200, None, old), pg(PgRole::Replica, 1000, Some("pg1")));
    o.leader_deleted_at = Some(t(10.2));
    o.lease_poll = Some(LeasePoll {
        lease: 0xA,
        sent_at: t(10.3),
        ttl: None,
        granted_ttl: None,
        has_keys: false,
    });
    c.step(t(10.4), &o);
    // Fresh positions (mod revisions after the vacancy's read), all behind pg2's.
    let fresh: Vec<Member> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut m = member(n, 201 + i as i64, "replica", 900);
            if i == 0 {
                m.info.pg_healthy = false;
                m.info.role = "primary".into();
            }
            if *n == "pg2" {
                m.info.xlog_location = 1000;
            }
            m
        })
        .collect();
    let o = obs(view(210, None, fresh), pg(PgRole::Replica, 1000, None));
    Scenario {
        name: "candidate judging a vacancy, 5 members",
        core: c,
        obs: o,
        advance: advance_nothing,
        expect: |p| p.actions == vec![Action::Acquire],
        start: 11_000_000_000,
    }
}

// ----- measuring -----------------------------------------------------------------

struct Measured {
    name: &'static str,
    stats: Stats,
    allocs: f64,
    reallocs: f64,
    bytes: f64,
    actions: usize,
    reason: String,
}

fn run(mut s: Scenario, samples: usize, batch: u64) -> Result<Measured, String> {
    let start = s.start;
    let now = move |i: u64| Instant::from_nanos(start + i * LOOP_NS);
    // Warm-up steps and the check that the scenario is what it says.
    let mut last = None;
    for i in 0..1000 {
        (s.advance)(&mut s.obs, now(i));
        last = Some(s.core.step(now(i), &s.obs));
    }
    let Some(plan) = last else {
        return Err("no step ran".into());
    };
    if !(s.expect)(&plan) {
        return Err(format!(
            "{}: the steady-state plan is not the one this scenario describes: {:?} ({})",
            s.name, plan.actions, plan.reason
        ));
    }
    // Allocations: a separate pass (same steps), counted between two reads.
    let n_alloc = 100_000u64;
    let (a0, r0, b0) = counts();
    for i in 1000..1000 + n_alloc {
        (s.advance)(&mut s.obs, now(i));
        black_box(s.core.step(now(i), black_box(&s.obs)));
    }
    let (a1, r1, b1) = counts();
    // Optional: where one step's allocations come from.
    if std::env::var_os("TENURE_BENCH_TRACE_ALLOCS").is_some() {
        let i = 1000 + n_alloc;
        (s.advance)(&mut s.obs, now(i));
        if let Ok(mut t) = TRACES.lock() {
            t.clear();
        }
        TRACING.store(true, Ordering::SeqCst);
        let plan = s.core.step(now(i), &s.obs);
        drop(plan);
        TRACING.store(false, Ordering::SeqCst);
        print_traces(s.name);
    }
    // Timing.
    let base = 2000 + n_alloc;
    let samples_ns = time_batched(10_000, samples, batch, |i| {
        (s.advance)(&mut s.obs, now(base + i));
        black_box(s.core.step(now(base + i), black_box(&s.obs)));
    });
    let stats = Stats::of(&samples_ns).ok_or("no samples")?;
    Ok(Measured {
        name: s.name,
        stats,
        allocs: (a1 - a0) as f64 / n_alloc as f64,
        reallocs: (r1 - r0) as f64 / n_alloc as f64,
        bytes: (b1 - b0) as f64 / n_alloc as f64,
        actions: plan.actions.len(),
        reason: plan.reason.to_string(),
    })
}

/// The innermost frame in `src/core` (or in this file) of each recorded allocation.
fn print_traces(name: &str) {
    let traces = TRACES.lock().map(|t| t.clone()).unwrap_or_default();
    println!("allocations of one step, {name}: {}", traces.len());
    for (size, bt) in traces {
        let lines: Vec<&str> = bt.lines().map(str::trim).collect();
        // "N: symbol" followed by "at path:line:col": the innermost frames in
        // src/core (up to two, innermost first), else the first in the bench's own
        // code outside the allocator.
        let mut core_frames = Vec::new();
        let mut bench_frame = None;
        for w in lines.windows(2) {
            let Some(at) = w[1].strip_prefix("at ") else {
                continue;
            };
            let sym = w[0].split_once(": ").map_or(w[0], |(_, s)| s);
            let short = sym.rsplit("::").take(2).collect::<Vec<_>>();
            let short = format!("{}::{}", short.get(1).unwrap_or(&""), short[0]);
            let file = at.rsplit("/src/").next().unwrap_or(at);
            if at.contains("/src/core/") && core_frames.len() < 2 {
                core_frames.push(format!("{short} ({file})"));
            } else if bench_frame.is_none()
                && at.contains("/bench/")
                && !sym.contains("trace")
                && !sym.contains("alloc")
            {
                bench_frame = Some(format!("{short} ({})", at.rsplit('/').next().unwrap_or(at)));
            }
        }
        let site = if core_frames.is_empty() {
            bench_frame
        } else {
            Some(core_frames.join(" <- "))
        };
        println!(
            "  {size:>5} B  {}",
            site.unwrap_or_else(|| "(no frame in src/core)".into())
        );
    }
}

fn main() {
    println!(
        "core_step: Core::step per observation ({})",
        harness::machine_line()
    );
    let samples = harness::env_num("TENURE_BENCH_SAMPLES", 300) as usize;
    let batch = harness::env_num("TENURE_BENCH_BATCH", 2000);
    let scenarios = [
        leader(SyncMode::Off),
        leader(SyncMode::On),
        replica(),
        candidate(),
    ];
    let mut results = Vec::new();
    for s in scenarios {
        match run(s, samples, batch) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!("core_step: broken benchmark: {e}");
                std::process::exit(1);
            }
        }
    }
    let mut head: Vec<&str> = STATS_HEAD.to_vec();
    head[1] = "samples";
    let mut t = Table::new(&head);
    for r in &results {
        t.row(stats_row(r.name, &r.stats));
    }
    println!();
    println!(
        "time per step ({samples} samples, each the mean of a batch of {batch} steps; \
         1,000 + 10,000 warm-up steps)"
    );
    print!("{}", t.render());
    let mut a = Table::new(&[
        "what",
        "allocs/step",
        "reallocs/step",
        "bytes/step",
        "actions",
    ]);
    for r in &results {
        a.row(vec![
            r.name.to_string(),
            format!("{:.2}", r.allocs),
            format!("{:.2}", r.reallocs),
            format!("{:.0}", r.bytes),
            r.actions.to_string(),
        ]);
    }
    println!();
    println!("heap allocations per step (counting global allocator, 100,000 steps)");
    print!("{}", a.render());
    println!();
    for r in &results {
        println!("{}: plan reason {:?}", r.name, r.reason);
    }
}
