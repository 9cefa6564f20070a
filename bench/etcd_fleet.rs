//! Benchmark: one etcd, many clusters (issue 13 item 5). A load generator speaks to a
//! real 3-member etcd 3.4 on loopback (the test bed's `EtcdCluster`,
//! `--election-timeout=500`, data on `/dev/shm`) exactly as N agents would, in
//! clusters of 3 (scopes `/service/fleet-<k>/`), and N is stepped up until the p99
//! renewal round trip exceeds `retry_timeout / 4` (62.5 ms at retry 0.25 s) or the
//! generator itself can no longer keep its schedule.
//!
//! Each simulated agent mirrors `src/dcs/mod.rs` and the order of `Agent::observe`:
//! - its own etcd client (the agent's `ConnectOptions`: require-leader, 1 s connect
//!   timeout, HTTP/2 pings every 6 s), so one set of connections per agent;
//! - a member key `members/<name>` (~255 bytes of JSON, `encode_member`) bound to its
//!   own member lease (TTL 7), kept alive when a third of the TTL less
//!   `retry_timeout` has passed (checked every loop, so every 5th loop at 0.5 s), on a
//!   fresh keepalive stream (two messages, as `keep_alive_once`);
//! - a watch on its scope prefix (created, then polled; silent in steady state);
//! - per leader loop: the confirmed renewal (`confirmed_renew`: a fresh keepalive
//!   stream of the leader lease, two keepalives, then a linearizable get of `leader`,
//!   its value, create revision and lease checked): the pair's wall time is "the
//!   renewal round trip"; then, pattern `today`, the cluster read (a linearizable
//!   range over the scope: `leader`, 3 members, `initialize`, `config`, a 3-entry
//!   `history`);
//! - per replica loop: pattern `today`, the cluster read, then one
//!   `LeaseTimeToLive(leader's lease, keys)`; pattern `watchview` (the cluster view
//!   kept from the scope watch, being built in another branch): the poll alone.
//!
//! Loops run on a fixed grid (`loop_wait`, 0.5 s), each agent at its own phase, spread
//! evenly (a van der Corput sequence, so every prefix of the agents is spread evenly
//! too: agents added by a step fill the gaps between the earlier ones). A loop that
//! overran its period skips to the next grid point, as the agent does.
//!
//! The generator: `TENURE_BENCH_FLEET_THREADS` (2) OS threads, each with its own
//! current-thread tokio runtime (the crate builds tokio without the multi-thread
//! scheduler; two single-threaded runtimes do the same work without work stealing),
//! clusters dealt round-robin between them. Its own CPU (utime + stime of this
//! process) is printed per step: it shares the two cores with etcd.
//!
//! Per step: a few seconds of warm-up after every new agent is set up, then a window
//! in which every loop whose tick falls inside it is counted (loops still in flight
//! at the end are waited for). Printed per step: N, etcd's gRPC messages/s (its own
//! `grpc_server_msg_received_total`, all members), the generator's calls/s, the
//! renewal round trip min / median / p99 / max with n, renewals over
//! `retry_timeout` or failed, the generator's late loops (woken more than 50 ms after
//! their tick: the generator's own lag) and overruns (a loop longer than `loop_wait`:
//! etcd's slowness), etcd CPU (the 3 members' utime + stime, seconds per second) and
//! per agent, the p99 of etcd's WAL fsync and backend commit durations in the window
//! (bucket bounds of the summed histograms' deltas), committed proposals/s, etcd
//! leader changes, leaderships lost (a renewal found its lease gone or its key
//! changed: the simulated leader stops, as a real one would fence; this ends the
//! stepping), scope watches broken (reopened, as the agent does), the load average.
//! Nothing is asserted: the benchmark fails only when etcd does not start, its
//! `/metrics` cannot be read, or an agent cannot be set up.
//!
//! Knobs (environment):
//! - `TENURE_BENCH_FLEET_STEPS` (`3,30,90,180,360,720,1440,2880`): agents per step
//!   (rounded up to a multiple of 3; agents are added, never removed, within a pattern);
//! - `TENURE_BENCH_FLEET_SECONDS` (20): the window of each step;
//! - `TENURE_BENCH_FLEET_WARMUP` (4): seconds after the new agents are set up;
//! - `TENURE_BENCH_FLEET_PATTERNS` (`today,watchview`): each on a fresh etcd;
//! - `TENURE_BENCH_FLEET_LOOP_MS` (500): `loop_wait`;
//! - `TENURE_BENCH_FLEET_THREADS` (2): generator threads;
//! - `TENURE_BENCH_FLEET_BUDGET` (540): seconds for the whole run; a step that would
//!   not fit is skipped and the output says so (the default run stays under 10 min).

#[path = "harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseTimeToLiveOptions, PutOptions,
    Txn, TxnOp, WatchOptions, WatchStream,
};
use harness::{Stats, Table, fmt_ns};
use tenure::core::model::{MemberInfo, Tags};
use tenure::dcs::encode_member;
use tenure::testbed::etcd::EtcdCluster;
use tenure::testbed::scratch_dir;

/// The agent's timing in the test bed (DESIGN §2's second worked example).
const TTL: i64 = 7;
const RETRY: Duration = Duration::from_millis(250);
/// The bound the issue sets on the p99 renewal round trip: `retry_timeout / 4`.
const RTT_LIMIT: Duration = Duration::from_micros(62_500);
/// A loop woken this much after its tick is late: the generator's own lag.
const LATE: Duration = Duration::from_millis(50);
/// More than this share of late loops: the generator cannot keep its schedule.
const LATE_SHARE_LIMIT: f64 = 0.01;
/// Every call's deadline. Generous (the agent's is `retry_timeout`) so the tail is
/// measured rather than cut; a renewal over `RETRY` is counted apart.
const CALL_LIMIT: Duration = Duration::from_secs(2);
/// The agent's `ConnectOptions` (src/dcs/mod.rs: private constants there).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const H2_PING_INTERVAL: Duration = Duration::from_secs(6);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(3);
/// New clusters set up at once per generator thread (a burst of connects, grants and
/// puts; the measurement starts only after all of them).
const SETUP_PARALLEL: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pattern {
    /// As the agent speaks today: a cluster read every loop.
    Today,
    /// The target of the scope-watch view: no per-loop cluster read.
    WatchView,
}

impl Pattern {
    fn parse(s: &str) -> Option<Pattern> {
        match s.trim() {
            "today" => Some(Pattern::Today),
            "watchview" => Some(Pattern::WatchView),
            _ => None,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Pattern::Today => "today",
            Pattern::WatchView => "watchview",
        }
    }
}

fn main() {
    println!(
        "etcd_fleet: one etcd, many clusters ({})",
        harness::machine_line()
    );
    if !std::path::Path::new("/usr/bin/etcd").is_file() {
        println!("etcd_fleet: SKIPPED: /usr/bin/etcd not found (run `make deps`)");
        return;
    }
    if let Err(e) = run() {
        eprintln!("etcd_fleet: broken benchmark: {e}");
        std::process::exit(1);
    }
}

struct Settings {
    steps: Vec<usize>,
    window: Duration,
    warmup: Duration,
    patterns: Vec<Pattern>,
    loop_wait: Duration,
    threads: usize,
    budget: Duration,
}

fn settings() -> Result<Settings, String> {
    let steps_text = std::env::var("TENURE_BENCH_FLEET_STEPS")
        .unwrap_or_else(|_| "3,30,90,180,360,720,1440,2880".into());
    let mut steps = Vec::new();
    for s in steps_text.split(',').filter(|s| !s.trim().is_empty()) {
        let n: usize = s
            .trim()
            .parse()
            .map_err(|_| format!("TENURE_BENCH_FLEET_STEPS: {s:?} is not a whole number"))?;
        let n = n.max(1).div_ceil(3) * 3;
        if steps.last().is_some_and(|&l| l >= n) {
            return Err(format!(
                "TENURE_BENCH_FLEET_STEPS: {steps_text:?} must increase (agents are only added)"
            ));
        }
        steps.push(n);
    }
    let pat_text =
        std::env::var("TENURE_BENCH_FLEET_PATTERNS").unwrap_or_else(|_| "today,watchview".into());
    let mut patterns = Vec::new();
    for p in pat_text.split(',').filter(|s| !s.trim().is_empty()) {
        patterns.push(Pattern::parse(p).ok_or_else(|| {
            format!("TENURE_BENCH_FLEET_PATTERNS: {p:?} is neither today nor watchview")
        })?);
    }
    Ok(Settings {
        steps,
        window: Duration::from_secs(harness::env_num("TENURE_BENCH_FLEET_SECONDS", 20).max(1)),
        warmup: Duration::from_secs(harness::env_num("TENURE_BENCH_FLEET_WARMUP", 4)),
        patterns,
        loop_wait: Duration::from_millis(
            harness::env_num("TENURE_BENCH_FLEET_LOOP_MS", 500).max(10),
        ),
        threads: harness::env_num("TENURE_BENCH_FLEET_THREADS", 2).clamp(1, 64) as usize,
        budget: Duration::from_secs(harness::env_num("TENURE_BENCH_FLEET_BUDGET", 540)),
    })
}

fn run() -> Result<(), String> {
    let s = settings()?;
    raise_fd_limit();
    println!(
        "steps {:?} agents, window {} s after {} s warm-up, loop_wait {} ms, ttl {TTL}, \
         retry_timeout {} ms (limit: p99 renewal > {:.1} ms), {} generator threads, budget {} s",
        s.steps,
        s.window.as_secs(),
        s.warmup.as_secs(),
        s.loop_wait.as_millis(),
        RETRY.as_millis(),
        RTT_LIMIT.as_secs_f64() * 1e3,
        s.threads,
        s.budget.as_secs()
    );
    let began = Instant::now();
    let mut results = Vec::new();
    for &p in &s.patterns {
        let dir = scratch_dir(&format!("bench-fleet-{}", p.name()))
            .map_err(|e| format!("scratch dir: {e}"))?;
        println!();
        println!(
            "=== pattern {} (fresh etcd, data in {}) ===",
            p.name(),
            dir.display()
        );
        let r = run_pattern(&s, p, &dir, began);
        let _ = std::fs::remove_dir_all(&dir);
        results.push((p, r?));
    }
    for (p, (rows, stop)) in &results {
        print_tables(&s, *p, rows, stop);
    }
    println!(
        "\nwhole run {:.0} s ({})",
        began.elapsed().as_secs_f64(),
        harness::machine_line()
    );
    Ok(())
}

/// The generator shares the machine's fd table with etcd: 3 connections per agent
/// on both ends. Raise the soft limit to the hard one (etcd inherits it).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable `rlimit` for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid `rlimit`; raising the soft limit up to the hard one
    // needs no privilege and touches only this process (and its later children).
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
}

// ---------------------------------------------------------------------------------
// What the agents report.

/// Counters of one measurement window, filled by the agents.
#[derive(Default)]
struct Window {
    renewal_ns: Vec<f64>,
    /// Renewals that failed or took longer than `retry_timeout`.
    renewal_over_r: u64,
    loops: u64,
    late: u64,
    wake_lag_ns: Vec<f64>,
    overruns: u64,
    calls: u64,
    errors: u64,
    first_error: Option<String>,
}

struct Shared {
    /// Loops whose tick falls while this is set are counted.
    measuring: AtomicBool,
    /// Counted loops not yet reported.
    in_flight: AtomicUsize,
    window: Mutex<Window>,
    /// Agents set up and running.
    ready: AtomicUsize,
    /// A setup or a renewal found something broken (not slowness): the text.
    broken: Mutex<Option<String>>,
    stop: AtomicBool,
    /// Watch events seen (none expected in steady state).
    watch_events: AtomicU64,
    /// Scope watches that ended (cancelled: no leader, or a broken stream); the
    /// agent reopens them, as `Agent` does.
    watches_broken: AtomicU64,
    /// Leaderships lost: a renewal found its lease gone or its key changed. The
    /// agent would fence; the simulated one stops renewing. Overload, not a broken
    /// benchmark: it ends the stepping.
    lost: AtomicU64,
    lost_first: Mutex<Option<String>>,
}

impl Shared {
    fn lose(&self, why: String) {
        self.lost.fetch_add(1, Ordering::SeqCst);
        let mut f = self.lost_first.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(why);
        }
    }

    fn broke(&self, why: String) {
        let mut b = self.broken.lock().unwrap_or_else(|e| e.into_inner());
        if b.is_none() {
            *b = Some(why);
        }
    }
}

// ---------------------------------------------------------------------------------
// One pattern: a fresh etcd, steps of N.

struct Row {
    agents: usize,
    setup_s: f64,
    secs: f64,
    msgs_per_s: f64,
    calls_per_s: f64,
    renewal: Option<Stats>,
    over_r: u64,
    loops: u64,
    late: u64,
    wake_p99_ns: f64,
    overruns: u64,
    errors: u64,
    etcd_cpu: f64,
    gen_cpu: f64,
    fsync_p99: Option<f64>,
    fsyncs_per_s: f64,
    commit_p99: Option<f64>,
    proposals_per_s: f64,
    leader_changes: f64,
    /// In the whole step (setup, warm-up, window).
    lost: u64,
    watches_broken: u64,
    load: String,
}

enum Command {
    /// Set up these clusters (first agent index of each) and run them.
    Spawn(Vec<usize>),
    Quit,
}

fn run_pattern(
    s: &Settings,
    p: Pattern,
    dir: &std::path::Path,
    began: Instant,
) -> Result<(Vec<Row>, String), String> {
    let etcd = EtcdCluster::start(dir, 3)?;
    let endpoints = etcd.endpoints();
    let pids: Vec<u32> = (0..3).filter_map(|i| etcd.pid(i)).collect();
    let ports: Vec<u16> = etcd.members.iter().map(|m| m.plain_port).collect();
    let shared = Arc::new(Shared {
        measuring: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        window: Mutex::new(Window::default()),
        ready: AtomicUsize::new(0),
        broken: Mutex::new(None),
        stop: AtomicBool::new(false),
        watch_events: AtomicU64::new(0),
        watches_broken: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        lost_first: Mutex::new(None),
    });
    let calls = Arc::new(AtomicU64::new(0));
    // The grid every agent's ticks are on (phase offsets from it).
    let base = tokio::time::Instant::now();
    let mut senders = Vec::new();
    let mut threads = Vec::new();
    for t in 0..s.threads {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Command>();
        let ctx = AgentCtx {
            endpoints: endpoints.clone(),
            shared: shared.clone(),
            calls: calls.clone(),
            pattern: p,
            loop_wait: s.loop_wait,
            base,
        };
        let h = std::thread::Builder::new()
            .name(format!("fleet-gen-{t}"))
            .spawn(move || generator_thread(ctx, rx))
            .map_err(|e| format!("generator thread: {e}"))?;
        senders.push(tx);
        threads.push(h);
    }
    let result = steps(s, &shared, &calls, &senders, &pids, &ports, began);
    shared.stop.store(true, Ordering::SeqCst);
    for tx in &senders {
        let _ = tx.send(Command::Quit);
    }
    for h in threads {
        let _ = h.join();
    }
    drop(etcd);
    result
}

#[allow(clippy::too_many_arguments)]
fn steps(
    s: &Settings,
    shared: &Shared,
    calls: &AtomicU64,
    senders: &[tokio::sync::mpsc::UnboundedSender<Command>],
    pids: &[u32],
    ports: &[u16],
    began: Instant,
) -> Result<(Vec<Row>, String), String> {
    let mut rows = Vec::new();
    let mut have = 0usize;
    let mut last_setup_per_agent = 0.01f64;
    for &n in &s.steps {
        // Will the step fit in the budget? Setup estimated from the last one.
        let est = Duration::from_secs_f64(
            (n - have) as f64 * last_setup_per_agent
                + s.warmup.as_secs_f64()
                + s.window.as_secs_f64()
                + 5.0,
        );
        if began.elapsed() + est > s.budget {
            return Ok((
                rows,
                format!(
                    "stopped before {n} agents: the step (~{:.0} s) would pass the time budget \
                     (TENURE_BENCH_FLEET_BUDGET={} s)",
                    est.as_secs_f64(),
                    s.budget.as_secs()
                ),
            ));
        }
        let t0 = Instant::now();
        let lost0 = shared.lost.load(Ordering::SeqCst);
        let broken0 = shared.watches_broken.load(Ordering::SeqCst);
        let clusters: Vec<usize> = (have / 3..n / 3).map(|k| k * 3).collect();
        for (i, c) in clusters.iter().enumerate() {
            let _ = senders[i % senders.len()].send(Command::Spawn(vec![*c]));
        }
        // Wait until every new agent is running (setup is a burst of writes).
        let limit = Duration::from_secs(30) + Duration::from_millis(100) * (n - have) as u32;
        while shared.ready.load(Ordering::SeqCst) < n {
            if let Some(b) = shared
                .broken
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return Err(b);
            }
            if t0.elapsed() > limit {
                return Err(format!(
                    "only {} of {n} agents set up after {:.0} s",
                    shared.ready.load(Ordering::SeqCst),
                    limit.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let setup = t0.elapsed();
        last_setup_per_agent = setup.as_secs_f64() / (n - have) as f64;
        have = n;
        std::thread::sleep(s.warmup);

        // The window.
        let before = Snapshot::take(pids, ports)?;
        let calls0 = calls.load(Ordering::Relaxed);
        {
            let mut w = shared.window.lock().unwrap_or_else(|e| e.into_inner());
            *w = Window::default();
        }
        let w0 = Instant::now();
        shared.measuring.store(true, Ordering::SeqCst);
        std::thread::sleep(s.window);
        shared.measuring.store(false, Ordering::SeqCst);
        let secs = w0.elapsed().as_secs_f64();
        let after = Snapshot::take(pids, ports)?;
        let calls1 = calls.load(Ordering::Relaxed);
        let load = std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default();
        // Loops counted but still in flight: their tail is what matters most.
        let waited = Instant::now();
        while shared.in_flight.load(Ordering::SeqCst) > 0
            && waited.elapsed() < CALL_LIMIT * 4 + s.loop_wait
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let w = std::mem::take(&mut *shared.window.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(b) = shared
            .broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(b);
        }
        let row = Row {
            agents: n,
            setup_s: setup.as_secs_f64(),
            secs,
            msgs_per_s: (after.grpc_msgs - before.grpc_msgs) / secs,
            calls_per_s: (calls1 - calls0) as f64 / secs,
            renewal: Stats::of(&w.renewal_ns),
            over_r: w.renewal_over_r,
            loops: w.loops,
            late: w.late,
            wake_p99_ns: Stats::of(&w.wake_lag_ns).map_or(0.0, |s| s.p99),
            overruns: w.overruns,
            errors: w.errors,
            etcd_cpu: (after.etcd_ticks - before.etcd_ticks) as f64
                / harness::ticks_per_second()
                / secs,
            gen_cpu: (after.own_ticks - before.own_ticks) as f64
                / harness::ticks_per_second()
                / secs,
            fsync_p99: hist_p99(&before.fsync, &after.fsync),
            fsyncs_per_s: hist_count(&before.fsync, &after.fsync) / secs,
            commit_p99: hist_p99(&before.commit, &after.commit),
            proposals_per_s: after
                .proposals
                .iter()
                .zip(&before.proposals)
                .map(|(a, b)| a - b)
                .fold(0.0, f64::max)
                / secs,
            leader_changes: after
                .leader_changes
                .iter()
                .zip(&before.leader_changes)
                .map(|(a, b)| a - b)
                .fold(0.0, f64::max),
            lost: shared.lost.load(Ordering::SeqCst) - lost0,
            watches_broken: shared.watches_broken.load(Ordering::SeqCst) - broken0,
            load,
        };
        print_step(&row);
        if let Some(e) = &w.first_error {
            println!("    first call error in the window: {e}");
        }
        if row.lost > 0 || row.watches_broken > 0 || row.leader_changes > 0.0 {
            println!(
                "    in this step: {} leaderships lost (first: {}), {} scope watches broken, \
                 {} etcd leader changes in the window",
                row.lost,
                shared
                    .lost_first
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .unwrap_or_default(),
                row.watches_broken,
                row.leader_changes
            );
        }
        let p99 = row.renewal.as_ref().map_or(0.0, |s| s.p99);
        let late_share = row.late as f64 / row.loops.max(1) as f64;
        let stop = if row.lost > 0 {
            Some(format!(
                "limit passed at {n} agents: {} leaderships lost (a renewal found its lease \
                 gone or its key changed: a failover in a real fleet)",
                row.lost
            ))
        } else if p99 > RTT_LIMIT.as_nanos() as f64 {
            Some(format!(
                "limit reached at {n} agents: p99 renewal round trip {} > retry_timeout / 4 = {}",
                fmt_ns(p99),
                fmt_ns(RTT_LIMIT.as_nanos() as f64)
            ))
        } else if late_share > LATE_SHARE_LIMIT {
            Some(format!(
                "generator limit at {n} agents: {:.1} % of loops woke more than {} ms late \
                 (the limit of the measurement, not of etcd)",
                late_share * 100.0,
                LATE.as_millis()
            ))
        } else {
            None
        };
        rows.push(row);
        if let Some(why) = stop {
            return Ok((rows, why));
        }
    }
    Ok((
        rows,
        format!(
            "no limit reached up to {have} agents (the last step); raise TENURE_BENCH_FLEET_STEPS"
        ),
    ))
}

fn print_step(r: &Row) {
    let (n, med, p99, max) = r
        .renewal
        .as_ref()
        .map_or((0, 0.0, 0.0, 0.0), |s| (s.n, s.median, s.p99, s.max));
    println!(
        "  N={:>5} setup {:.1} s window {:.1} s | {:.0} msg/s | renewal n={n} median {} p99 {} max {} \
         (>R {}) | late {}/{} overrun {} | etcd CPU {:.2} s/s ({:.3} ms/agent/s) gen CPU {:.2} s/s \
         | fsync p99 {} commit p99 {} | {:.0} proposals/s | load {}",
        r.agents,
        r.setup_s,
        r.secs,
        r.msgs_per_s,
        fmt_ns(med),
        fmt_ns(p99),
        fmt_ns(max),
        r.over_r,
        r.late,
        r.loops,
        r.overruns,
        r.etcd_cpu,
        r.etcd_cpu * 1e3 / r.agents as f64,
        r.gen_cpu,
        fmt_le(r.fsync_p99),
        fmt_le(r.commit_p99),
        r.proposals_per_s,
        r.load
    );
}

fn fmt_le(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x.is_infinite() => "> max bucket".into(),
        Some(x) => format!("<= {}", fmt_ns(x * 1e9)),
    }
}

fn print_tables(s: &Settings, p: Pattern, rows: &[Row], stop: &str) {
    println!();
    println!(
        "pattern {} (loop_wait {} ms, ttl {TTL}, clusters of 3, window {} s per step): renewal \
         round trip (fresh keepalive stream + linearizable get of leader) and the generator",
        p.name(),
        s.loop_wait.as_millis(),
        s.window.as_secs()
    );
    let mut t = Table::new(&[
        "agents",
        "etcd msg/s",
        "calls/s",
        "renewals n",
        "min",
        "median",
        "p99",
        "max",
        ">R or failed",
        "loops",
        "late (gen)",
        "wake p99",
        "overruns",
        "errors",
    ]);
    for r in rows {
        let st = r.renewal.as_ref();
        let f = |g: fn(&Stats) -> f64| st.map_or("-".to_string(), |s| fmt_ns(g(s)));
        t.row(vec![
            r.agents.to_string(),
            format!("{:.0}", r.msgs_per_s),
            format!("{:.0}", r.calls_per_s),
            st.map_or(0, |s| s.n).to_string(),
            f(|s| s.min),
            f(|s| s.median),
            f(|s| s.p99),
            f(|s| s.max),
            r.over_r.to_string(),
            r.loops.to_string(),
            r.late.to_string(),
            fmt_ns(r.wake_p99_ns),
            r.overruns.to_string(),
            r.errors.to_string(),
        ]);
    }
    print!("{}", t.render());
    println!(
        "pattern {}: what it cost (etcd CPU: the 3 members' utime + stime; marginal: \
         the step's added CPU over its added agents, ms/agent/s; fsync and commit p99: the \
         upper bound of the histogram bucket holding it, all members)",
        p.name()
    );
    let mut t = Table::new(&[
        "agents",
        "etcd CPU s/s",
        "etcd CPU ms/agent/s",
        "marginal",
        "gen CPU s/s",
        "fsync/s",
        "fsync p99",
        "commit p99",
        "proposals/s",
        "etcd leader changes",
        "leaderships lost",
        "watches broken",
        "msg/agent/s",
        "load average",
    ]);
    let mut prev: Option<&Row> = None;
    for r in rows {
        // What the agents added by this step cost (the idle cluster's own CPU, its
        // heartbeats and lessor, cancels out).
        let marginal = prev.map_or("-".to_string(), |q| {
            format!(
                "{:.3}",
                (r.etcd_cpu - q.etcd_cpu) * 1e3 / (r.agents - q.agents) as f64
            )
        });
        prev = Some(r);
        t.row(vec![
            r.agents.to_string(),
            format!("{:.2}", r.etcd_cpu),
            format!("{:.3}", r.etcd_cpu * 1e3 / r.agents as f64),
            marginal,
            format!("{:.2}", r.gen_cpu),
            format!("{:.1}", r.fsyncs_per_s),
            fmt_le(r.fsync_p99),
            fmt_le(r.commit_p99),
            format!("{:.1}", r.proposals_per_s),
            format!("{:.0}", r.leader_changes),
            r.lost.to_string(),
            r.watches_broken.to_string(),
            format!("{:.2}", r.msgs_per_s / r.agents as f64),
            r.load.clone(),
        ]);
    }
    print!("{}", t.render());
    println!("pattern {}: {stop}", p.name());
}

// ---------------------------------------------------------------------------------
// /proc and etcd's /metrics.

struct Snapshot {
    etcd_ticks: u64,
    own_ticks: u64,
    grpc_msgs: f64,
    /// `le` -> cumulative count, summed over the members.
    fsync: BTreeMap<u64, f64>,
    commit: BTreeMap<u64, f64>,
    /// Per member.
    proposals: Vec<f64>,
    leader_changes: Vec<f64>,
}

impl Snapshot {
    fn take(pids: &[u32], ports: &[u16]) -> Result<Snapshot, String> {
        let mut s = Snapshot {
            etcd_ticks: 0,
            own_ticks: cpu_ticks("self")?,
            grpc_msgs: 0.0,
            fsync: BTreeMap::new(),
            commit: BTreeMap::new(),
            proposals: Vec::new(),
            leader_changes: Vec::new(),
        };
        for pid in pids {
            s.etcd_ticks += cpu_ticks(&pid.to_string())?;
        }
        for &port in ports {
            let text = scrape(port)?;
            let mut proposals = 0.0;
            let mut changes = 0.0;
            for line in text.lines() {
                if let Some(v) = metric(line, "grpc_server_msg_received_total{") {
                    s.grpc_msgs += v;
                } else if let Some(v) = metric(line, "etcd_server_proposals_committed_total ") {
                    proposals = v;
                } else if let Some(v) = metric(line, "etcd_server_leader_changes_seen_total ") {
                    changes = v;
                } else if let Some((le, v)) =
                    bucket(line, "etcd_disk_wal_fsync_duration_seconds_bucket{")
                {
                    *s.fsync.entry(le).or_insert(0.0) += v;
                } else if let Some((le, v)) =
                    bucket(line, "etcd_disk_backend_commit_duration_seconds_bucket{")
                {
                    *s.commit.entry(le).or_insert(0.0) += v;
                }
            }
            s.proposals.push(proposals);
            s.leader_changes.push(changes);
        }
        Ok(s)
    }
}

/// etcd's `/metrics`, whole. The test bed's `http_get` stops silently at a 1 s read
/// timeout; a busy etcd can take longer, and a cut body would make every delta
/// wrong. Three tries of up to 10 s each; after that the benchmark is broken.
fn scrape(port: u16) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut last = String::new();
    for _ in 0..3 {
        let attempt = || -> std::io::Result<String> {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.set_write_timeout(Some(Duration::from_secs(2)))?;
            write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf)?;
            Ok(String::from_utf8_lossy(&buf).into_owned())
        };
        match attempt() {
            Ok(t)
                if t.starts_with("HTTP/1.")
                    && t.contains("etcd_server_proposals_committed_total") =>
            {
                return Ok(t);
            }
            Ok(t) => last = format!("unexpected answer of {} bytes", t.len()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("etcd on port {port}: /metrics: {last}"))
}

/// The value of a sample line starting with `prefix`.
fn metric(line: &str, prefix: &str) -> Option<f64> {
    if !line.starts_with(prefix) {
        return None;
    }
    line.rsplit_once(' ')?.1.trim().parse().ok()
}

/// A histogram bucket line: (`le` as f64 bits, so it sorts and keys a map; +Inf
/// sorts last), cumulative count.
fn bucket(line: &str, prefix: &str) -> Option<(u64, f64)> {
    let rest = line.strip_prefix(prefix)?;
    let le = rest.split("le=\"").nth(1)?.split('"').next()?;
    let le: f64 = if le == "+Inf" {
        f64::INFINITY
    } else {
        le.parse().ok()?
    };
    let v: f64 = rest.rsplit_once(' ')?.1.trim().parse().ok()?;
    // Positive finite f64s and +Inf order like their bit patterns.
    Some((le.to_bits(), v))
}

/// Observations in the window.
fn hist_count(before: &BTreeMap<u64, f64>, after: &BTreeMap<u64, f64>) -> f64 {
    let inf = f64::INFINITY.to_bits();
    after.get(&inf).copied().unwrap_or(0.0) - before.get(&inf).copied().unwrap_or(0.0)
}

/// The upper bound (seconds) of the bucket holding the 99th percentile of the
/// observations in the window; `None` when there were none.
fn hist_p99(before: &BTreeMap<u64, f64>, after: &BTreeMap<u64, f64>) -> Option<f64> {
    let total = hist_count(before, after);
    if total <= 0.0 {
        return None;
    }
    after.iter().find_map(|(le, cum)| {
        let d = cum - before.get(le).copied().unwrap_or(0.0);
        (d >= 0.99 * total).then(|| f64::from_bits(*le))
    })
}

/// utime + stime of `/proc/<who>/stat`, in clock ticks.
fn cpu_ticks(who: &str) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{who}/stat"))
        .map_err(|e| format!("/proc/{who}/stat: {e}"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("/proc/{who}/stat: no command name"))?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let num = |i: usize| -> Result<u64, String> {
        f.get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("/proc/{who}/stat: field {} unreadable", i + 3))
    };
    Ok(num(11)? + num(12)?)
}

// ---------------------------------------------------------------------------------
// The generator: one current-thread runtime per thread, an async task per agent.

#[derive(Clone)]
struct AgentCtx {
    endpoints: Vec<String>,
    shared: Arc<Shared>,
    calls: Arc<AtomicU64>,
    pattern: Pattern,
    loop_wait: Duration,
    base: tokio::time::Instant,
}

fn generator_thread(ctx: AgentCtx, mut rx: tokio::sync::mpsc::UnboundedReceiver<Command>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            ctx.shared.broke(format!("generator runtime: {e}"));
            return;
        }
    };
    rt.block_on(async move {
        let sem = Arc::new(tokio::sync::Semaphore::new(SETUP_PARALLEL));
        while let Some(cmd) = rx.recv().await {
            match cmd {
                Command::Quit => break,
                Command::Spawn(firsts) => {
                    for first in firsts {
                        let ctx = ctx.clone();
                        let sem = sem.clone();
                        tokio::spawn(async move {
                            let agents = {
                                let _permit = sem.acquire().await;
                                match setup_cluster(&ctx, first).await {
                                    Ok(a) => a,
                                    Err(e) => {
                                        ctx.shared
                                            .broke(format!("setting up fleet-{}: {e}", first / 3));
                                        return;
                                    }
                                }
                            };
                            for a in agents {
                                let ctx = ctx.clone();
                                tokio::spawn(async move { agent_loop(ctx, a).await });
                            }
                        });
                    }
                }
            }
        }
    });
    // Dropping the runtime cancels every agent and closes its connections.
    drop(rt);
}

enum Role {
    Leader { epoch: i64 },
    Replica,
}

struct Agent {
    index: usize,
    name: String,
    prefix: String,
    client: Client,
    role: Role,
    /// The leader's lease (a replica polls it).
    leader_lease: i64,
    member_lease: i64,
    member_kept: tokio::time::Instant,
    watch: Option<WatchStream>,
}

/// The agent's `ConnectOptions` (src/dcs/mod.rs `Etcd::connect_with`).
fn connect_options() -> ConnectOptions {
    ConnectOptions::new()
        .with_require_leader(true)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_keep_alive(H2_PING_INTERVAL, H2_PING_TIMEOUT)
        .with_keep_alive_while_idle(false)
}

async fn bounded<T, F>(what: &str, fut: F) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    match tokio::time::timeout(CALL_LIMIT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {CALL_LIMIT:?}")),
    }
}

fn member_json(name: &str, leader: bool) -> String {
    encode_member(&MemberInfo {
        conn_url: format!("postgres://127.0.0.1:25432/postgres?application_name={name}"),
        api_url: "http://127.0.0.1:28008".into(),
        state: "running".into(),
        role: if leader { "primary" } else { "replica" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        xlog_location: 50_331_648,
        receive_lsn: (!leader).then_some(50_331_648),
        replay_lsn: (!leader).then_some(50_331_648),
        replication_state: (!leader).then(|| "streaming".into()),
        timeline: 2,
        sysid: Some(7_298_031_012_345_678_901),
        tags: Tags::default(),
        epoch: Some(12),
        watchdog_timeout: None,
        leader_lease: leader.then_some(0x694d_8b2f_1a2b_3c4d),
        leader_ttl: leader.then_some(7),
        leader_ttl_seen: Some(7),
        poll_window: Some(Duration::from_millis(750)),
        pg_healthy: true,
        released: None,
        lacks_acquire_record: false,
        parse_error: None,
    })
}

/// One cluster of three: the leader's key (grant + the acquire txn), `initialize`,
/// `config`, `history`, and per agent its client, member lease, member key, watch.
async fn setup_cluster(ctx: &AgentCtx, first: usize) -> Result<Vec<Agent>, String> {
    let k = first / 3;
    let prefix = format!("/service/fleet-{k}/");
    let mut agents = Vec::with_capacity(3);
    let mut leader_lease = 0;
    for j in 0..3 {
        let name = format!("pg{}", j + 1);
        let client = bounded(
            "connect",
            Client::connect(ctx.endpoints.clone(), Some(connect_options())),
        )
        .await?;
        let mut kv = client.kv_client();
        let mut lc = client.lease_client();
        let role = if j == 0 {
            for (key, value) in [
                ("initialize", "7391528044917362913"),
                (
                    "config",
                    r#"{"ttl":7,"loop_wait":0.5,"retry_timeout":0.25,"maximum_lag_on_failover":1048576}"#,
                ),
                (
                    "history",
                    r#"[[1,50331648,"no recovery target specified","2026-11-01T10:00:00+00:00","pg2"],[2,67108864,"no recovery target specified","2026-11-01T10:05:00+00:00","pg3"],[3,83886080,"no recovery target specified","2026-11-01T10:09:00+00:00","pg1"]]"#,
                ),
            ] {
                bounded("put", kv.put(format!("{prefix}{key}"), value, None)).await?;
            }
            // The acquire txn (DESIGN §1 step 1), as `Etcd::acquire_txn`.
            let g = bounded("grant", lc.grant(TTL, None)).await?;
            leader_lease = g.id();
            let key = format!("{prefix}leader");
            let txn = Txn::new()
                .when(vec![Compare::version(key.clone(), CompareOp::Equal, 0)])
                .and_then(vec![TxnOp::put(
                    key,
                    name.as_str(),
                    Some(PutOptions::new().with_lease(leader_lease)),
                )]);
            let r = bounded("acquire txn", kv.txn(txn)).await?;
            if !r.succeeded() {
                return Err("acquire txn lost on an empty scope".into());
            }
            let epoch = r.header().map(|h| h.revision()).unwrap_or(0);
            Role::Leader { epoch }
        } else {
            Role::Replica
        };
        let g = bounded("grant", lc.grant(TTL, None)).await?;
        let member_lease = g.id();
        bounded(
            "put member",
            kv.put(
                format!("{prefix}members/{name}"),
                member_json(&name, j == 0),
                Some(PutOptions::new().with_lease(member_lease)),
            ),
        )
        .await?;
        let watch = open_watch(&client, &prefix).await?;
        agents.push(Agent {
            index: first + j,
            name,
            prefix: prefix.clone(),
            client,
            role,
            leader_lease,
            member_lease,
            member_kept: tokio::time::Instant::now(),
            watch: Some(watch),
        });
    }
    Ok(agents)
}

/// The scope watch (`Etcd::watch_leader`): prefix, created before it counts.
async fn open_watch(client: &Client, prefix: &str) -> Result<WatchStream, String> {
    let mut wc = client.watch_client();
    let opts = WatchOptions::new().with_prefix();
    let mut stream = bounded("watch", wc.watch(prefix.to_string(), Some(opts))).await?;
    match bounded("watch created", stream.message()).await? {
        Some(r) if r.created() && !r.canceled() => Ok(stream),
        _ => Err("watch not created".into()),
    }
}

/// The `i`-th element of the base-2 van der Corput sequence, in [0, 1): every prefix
/// of it is spread evenly.
fn van_der_corput(mut i: usize) -> f64 {
    let mut x = 0.0;
    let mut f = 0.5;
    while i > 0 {
        if i & 1 == 1 {
            x += f;
        }
        i >>= 1;
        f /= 2.0;
    }
    x
}

/// `Etcd::fresh_keepalive`: a fresh stream; etcd-client sends the first keepalive
/// and checks it; a second one on the same stream gives the TTL.
async fn fresh_keepalive(client: &Client, lease: i64) -> Result<i64, etcd_client::Error> {
    let mut lc = client.lease_client();
    let (mut keeper, mut stream) = lc.keep_alive(lease).await?;
    keeper.keep_alive().await?;
    match stream.message().await? {
        Some(r) => Ok(r.ttl()),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "keepalive stream ended without an answer".into(),
        )),
    }
}

/// What one loop reports.
#[derive(Default)]
struct LoopReport {
    renewal: Option<(Duration, bool)>,
    calls: u64,
    errors: u64,
    error: Option<String>,
}

impl LoopReport {
    fn call<T>(&mut self, r: Result<T, String>) -> Option<T> {
        self.calls += 1;
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors += 1;
                self.error.get_or_insert(e);
                None
            }
        }
    }
}

async fn agent_loop(ctx: AgentCtx, mut a: Agent) {
    let shared = &ctx.shared;
    shared.ready.fetch_add(1, Ordering::SeqCst);
    let period = ctx.loop_wait;
    let phase = period.mul_f64(van_der_corput(a.index));
    // The first grid point of this agent's phase after now.
    let grid0 = ctx.base + phase;
    let next_after = |t: tokio::time::Instant| -> tokio::time::Instant {
        let since = t.saturating_duration_since(grid0);
        let k = (since.as_nanos() / period.as_nanos()) as u32 + 1;
        grid0 + period * k
    };
    let mut tick = next_after(tokio::time::Instant::now());
    let member_every = Duration::from_secs(TTL as u64) / 3 - RETRY;
    while !shared.stop.load(Ordering::Relaxed) {
        // Wait for the tick; the watch is served meanwhile (silent in steady state).
        loop {
            let Some(w) = a.watch.as_mut() else {
                tokio::time::sleep_until(tick).await;
                break;
            };
            tokio::select! {
                _ = tokio::time::sleep_until(tick) => break,
                m = w.message() => match m {
                    Ok(Some(_)) => { shared.watch_events.fetch_add(1, Ordering::Relaxed); }
                    _ => {
                        a.watch = None;
                        shared.watches_broken.fetch_add(1, Ordering::Relaxed);
                    }
                },
            }
        }
        let woke = tokio::time::Instant::now();
        let lag = woke.saturating_duration_since(tick);
        let counted = shared.measuring.load(Ordering::SeqCst);
        if counted {
            shared.in_flight.fetch_add(1, Ordering::SeqCst);
        }
        let mut rep = LoopReport::default();
        // The order of `Agent::observe`: renewal, side leases, cluster read, poll.
        let mut gone = false;
        if let Role::Leader { epoch } = a.role {
            let t0 = Instant::now();
            let ka = bounded(
                "renewal keepalive",
                fresh_keepalive(&a.client, a.leader_lease),
            );
            let ok = match ka.await {
                Ok(ttl) if ttl > 0 => {
                    rep.calls += 1;
                    let mut kv = a.client.kv_client();
                    let get = bounded("renewal read", kv.get(format!("{}leader", a.prefix), None));
                    match rep.call(get.await) {
                        Some(r) => match r.kvs().first() {
                            Some(k)
                                if k.value() == a.name.as_bytes()
                                    && k.create_revision() == epoch
                                    && k.lease() == a.leader_lease =>
                            {
                                true
                            }
                            other => {
                                gone = true;
                                shared.lose(format!(
                                    "{}leader no longer ours: {:?}",
                                    a.prefix,
                                    other.map(|k| (
                                        k.value_str().ok().map(str::to_string),
                                        k.create_revision(),
                                        k.lease()
                                    ))
                                ));
                                false
                            }
                        },
                        None => false,
                    }
                }
                Ok(ttl) => {
                    rep.calls += 1;
                    gone = true;
                    shared.lose(format!("{}leader: lease answered TTL {ttl}", a.prefix));
                    false
                }
                Err(e) if e.contains("lease not found") => {
                    rep.calls += 1;
                    gone = true;
                    shared.lose(format!("{}leader: {e}", a.prefix));
                    false
                }
                Err(e) => {
                    rep.call::<()>(Err(e));
                    false
                }
            };
            rep.renewal = Some((t0.elapsed(), ok));
        }
        if woke.saturating_duration_since(a.member_kept) >= member_every {
            let ka = bounded(
                "member keepalive",
                fresh_keepalive(&a.client, a.member_lease),
            );
            if rep.call(ka.await).is_some() {
                a.member_kept = woke;
            }
        }
        if ctx.pattern == Pattern::Today {
            let mut kv = a.client.kv_client();
            let read = bounded(
                "cluster read",
                kv.get(a.prefix.clone(), Some(GetOptions::new().with_prefix())),
            );
            if let Some(r) = rep.call(read.await) {
                std::hint::black_box(r.kvs().len());
            }
        }
        if matches!(a.role, Role::Replica) {
            let mut lc = a.client.lease_client();
            let poll = bounded(
                "lease poll",
                lc.time_to_live(
                    a.leader_lease,
                    Some(LeaseTimeToLiveOptions::new().with_keys()),
                ),
            );
            if let Some(r) = rep.call(poll.await) {
                std::hint::black_box(r.ttl());
            }
        }
        if a.watch.is_none() {
            // As the agent: a broken watch is reopened (here at the loop's end).
            if let Some(w) = rep.call(open_watch(&a.client, &a.prefix).await) {
                a.watch = Some(w);
            }
        }
        ctx.calls.fetch_add(rep.calls, Ordering::Relaxed);
        let done = tokio::time::Instant::now();
        let next = tick + period;
        let overran = done > next;
        tick = if overran { next_after(done) } else { next };
        if counted {
            {
                let mut w = shared.window.lock().unwrap_or_else(|e| e.into_inner());
                w.loops += 1;
                w.calls += rep.calls;
                w.wake_lag_ns.push(lag.as_nanos() as f64);
                if lag > LATE {
                    w.late += 1;
                }
                if overran {
                    w.overruns += 1;
                }
                w.errors += rep.errors;
                if w.first_error.is_none() {
                    w.first_error = rep.error.take();
                }
                if let Some((took, ok)) = rep.renewal {
                    w.renewal_ns.push(took.as_nanos() as f64);
                    if !ok || took > RETRY {
                        w.renewal_over_r += 1;
                    }
                }
            }
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if gone {
            // A real leader would fence and go back to candidacy; this one stops.
            break;
        }
    }
}
