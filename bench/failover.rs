//! Benchmark: failover and switchover times on real parts. One 3-node test cluster
//! (3 etcd members, 3 agents built in this profile, PostgreSQL 15, DESIGN §6's
//! timing: ttl 7, loop 0.5 s, retry 0.25 s, margin 0.5 s, no watchdog), then:
//!
//! - `TENURE_BENCH_ROUNDS` (default 5) host crashes of the primary (agent,
//!   postmaster and every backend SIGKILLed at once through the node's freezer
//!   cgroup, `TestCluster::host_crash`). Per round: crash → the new primary's
//!   `/primary` answers 200 (polled every 20 ms), crash → its first acknowledged
//!   write (the `WriteProbe`, one write per node every 20 ms), and restart of the
//!   crashed node's agent → it streams from the new primary (rewind included).
//! - `TENURE_BENCH_SWITCHOVERS` (default 3) clean switchovers: SIGTERM to the
//!   leader's agent (it stops PostgreSQL, then releases the key) → the agent exits,
//!   → the new primary's first acknowledged write; then the old node is restarted
//!   and streams again.
//!
//! Each round runs on a fresh cluster (a boot takes a few seconds), so every round
//! measures the same state. `TENURE_BENCH_RECOVERED=1` runs every round on one
//! cluster instead, each on the one the previous round left recovered (every node
//! streaming again); see docs/benchmarks.md for what that currently finds.
//!
//! The ordering invariant is checked every round (no write acknowledged by the old
//! primary after the first write was sent to the new one); a violation, a round
//! without a new primary, or a node that never streams again is a broken cluster
//! and fails the benchmark. Times are reported, never asserted. Needs root, etcd
//! and PostgreSQL 15 (skips with a message otherwise).

#[path = "harness.rs"]
mod harness;

use std::time::{Duration, Instant};

use harness::{STATS_HEAD, Stats, Table, stats_row};
use tenure::testbed::cluster::{ClusterOptions, TestCluster};
use tenure::testbed::probe::WriteProbe;
use tenure::testbed::wait_for;

const FAILOVER: Duration = Duration::from_secs(60);
const REJOIN: Duration = Duration::from_secs(120);

fn main() {
    println!(
        "failover: host crash and clean switchover on real parts ({})",
        harness::machine_line()
    );
    if let Some(why) = harness::real_parts_missing() {
        println!("failover: SKIPPED: {why}");
        return;
    }
    if let Err(e) = run() {
        eprintln!("failover: broken benchmark: {e}");
        std::process::exit(1);
    }
}

/// Start the probe on every node and wait until primary `p` acknowledged a write.
fn probe_on(c: &TestCluster, p: usize) -> Result<WriteProbe, String> {
    let probe = c.write_probe(p, Duration::from_millis(20))?;
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        (probe.ack_count(p) > 0).then_some(())
    })
    .ok_or_else(|| format!("the probe got no write through on {}", c.name(p)))?;
    // A little history before the fault.
    std::thread::sleep(Duration::from_millis(300));
    Ok(probe)
}

/// After a fault at `at` that took `old` away: the new primary (its API), its first
/// acknowledged write, and the ordering check. `(new, api 200 after, first ack after)`.
fn new_primary(
    c: &TestCluster,
    probe: &mut WriteProbe,
    old: usize,
    at: Instant,
) -> Result<(usize, Duration, Duration), String> {
    let np = c
        .wait_new_primary(old, FAILOVER)
        .ok_or_else(|| format!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)))?;
    let api = at.elapsed();
    let first = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, at)
    })
    .ok_or_else(|| {
        format!(
            "new primary {} acknowledged no write{}",
            c.name(np),
            c.logs_tail(30)
        )
    })?;
    probe.stop(Duration::from_secs(2));
    probe.check_no_overlap(old, np, at)?;
    let ack = first.acked.unwrap_or(at).saturating_duration_since(at);
    Ok((np, api, ack))
}

/// Restart node `i`'s agent and time until it streams from the primary again.
fn rejoin(c: &mut TestCluster, i: usize) -> Result<Duration, String> {
    let t0 = Instant::now();
    c.start_agent(i)?;
    wait_for(REJOIN, Duration::from_millis(50), || {
        c.is_streaming_replica(i).then_some(())
    })
    .ok_or_else(|| {
        format!(
            "{} did not stream again within {REJOIN:?}{}",
            c.name(i),
            c.logs_tail(40)
        )
    })?;
    Ok(t0.elapsed())
}

/// What was measured so far (printed even when a later round finds the cluster broken).
#[derive(Default)]
struct Measured {
    api: Vec<Duration>,
    ack: Vec<Duration>,
    back: Vec<Duration>,
    exit: Vec<Duration>,
    sw: Vec<Duration>,
    sw_back: Vec<Duration>,
}

fn start_cluster(round: usize) -> Result<(TestCluster, usize), String> {
    let mut opts = ClusterOptions::new(env!("CARGO_BIN_EXE_tenure"));
    opts.tag = format!("bench-failover-{round}");
    opts.scope = format!("bench-failover-{round}");
    opts.log_level = Some("info".into());
    harness::start_settled(opts, "")
}

/// One host crash of the primary `p`; returns the new primary.
fn crash_round(
    c: &mut TestCluster,
    p: usize,
    label: &str,
    m: &mut Measured,
) -> Result<usize, String> {
    c.wait_replicas(p, &[], REJOIN)?;
    let mut probe = probe_on(c, p)?;
    let crash = c.host_crash(p)?;
    let (np, a, w) = new_primary(c, &mut probe, p, crash)?;
    drop(probe);
    m.api.push(a);
    m.ack.push(w);
    let r = rejoin(c, p)?;
    m.back.push(r);
    println!(
        "crash {label}: {} -> {}: /primary 200 after {:.2} s, first write acked after {:.2} s; \
         {} streams {:.2} s after its restart",
        c.name(p),
        c.name(np),
        a.as_secs_f64(),
        w.as_secs_f64(),
        c.name(p),
        r.as_secs_f64()
    );
    Ok(np)
}

/// One clean switchover (SIGTERM to the leader `p`'s agent); returns the new primary.
fn switchover_round(
    c: &mut TestCluster,
    p: usize,
    label: &str,
    m: &mut Measured,
) -> Result<usize, String> {
    c.wait_replicas(p, &[], REJOIN)?;
    let mut probe = probe_on(c, p)?;
    let t0 = Instant::now();
    let st = c.term_agent(p, Duration::from_secs(30))?;
    let exited = t0.elapsed();
    if !st.success() {
        return Err(format!(
            "agent of {} exited {st} after SIGTERM{}",
            c.name(p),
            c.logs_tail(30)
        ));
    }
    let (np, _, w) = new_primary(c, &mut probe, p, t0)?;
    drop(probe);
    m.exit.push(exited);
    m.sw.push(w);
    let r = rejoin(c, p)?;
    m.sw_back.push(r);
    println!(
        "switchover {label}: {} -> {}: agent exited after {:.2} s, first write acked after \
         {:.2} s; {} streams {:.2} s after its restart",
        c.name(p),
        c.name(np),
        exited.as_secs_f64(),
        w.as_secs_f64(),
        c.name(p),
        r.as_secs_f64()
    );
    Ok(np)
}

fn run() -> Result<(), String> {
    let rounds = harness::env_num("TENURE_BENCH_ROUNDS", 5) as usize;
    let switchovers = harness::env_num("TENURE_BENCH_SWITCHOVERS", 3) as usize;
    let recovered = std::env::var("TENURE_BENCH_RECOVERED").is_ok_and(|v| v == "1");
    let mut m = Measured::default();
    let result = if recovered {
        run_recovered(rounds, switchovers, &mut m)
    } else {
        run_fresh(rounds, switchovers, &mut m)
    };
    report(rounds, switchovers, recovered, &m);
    result
}

/// Every round on a fresh cluster (the default): each measures the same state.
fn run_fresh(rounds: usize, switchovers: usize, m: &mut Measured) -> Result<(), String> {
    for round in 1..=rounds {
        let (mut c, p) = start_cluster(round)?;
        crash_round(&mut c, p, &format!("{round}/{rounds}"), m)?;
        c.check_agents()?;
    }
    for round in 1..=switchovers {
        let (mut c, p) = start_cluster(rounds + round)?;
        switchover_round(&mut c, p, &format!("{round}/{switchovers}"), m)?;
        c.check_agents()?;
    }
    Ok(())
}

/// `TENURE_BENCH_RECOVERED=1`: one cluster for every round, each on the cluster the
/// previous round left recovered (every node streaming again).
fn run_recovered(rounds: usize, switchovers: usize, m: &mut Measured) -> Result<(), String> {
    let (mut c, mut p) = start_cluster(0)?;
    for round in 1..=rounds {
        p = crash_round(&mut c, p, &format!("{round}/{rounds}"), m)?;
    }
    for round in 1..=switchovers {
        p = switchover_round(&mut c, p, &format!("{round}/{switchovers}"), m)?;
    }
    c.check_agents()
}

fn report(rounds: usize, switchovers: usize, recovered: bool, m: &Measured) {
    let mut t = Table::new(&STATS_HEAD);
    let rows: [(&str, &[Duration]); 6] = [
        ("host crash -> new /primary 200", &m.api),
        ("host crash -> first acked write", &m.ack),
        ("crashed node restart -> streams", &m.back),
        ("SIGTERM leader -> agent exited", &m.exit),
        ("SIGTERM leader -> first acked write", &m.sw),
        ("old leader restart -> streams", &m.sw_back),
    ];
    for (name, d) in rows {
        if let Some(s) = Stats::of_durations(d) {
            t.row(stats_row(name, &s));
        }
    }
    println!();
    println!(
        "{} of {rounds} host crashes, {} of {switchovers} switchovers, {} (ttl 7 s, \
         loop_wait 0.5 s, no watchdog; with so few rounds p99 is the max)",
        m.ack.len(),
        m.sw.len(),
        if recovered {
            "one cluster, each round on the one the last left recovered"
        } else {
            "each round on a fresh cluster"
        }
    );
    print!("{}", t.render());
}
