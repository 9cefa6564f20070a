//! Soak: an hour of a loaded host with tight timing and no spurious failover
//! (issue 13 item 3). `make soak-hour` runs it; it is not part of `make test` or
//! `make bench` (it takes an hour).
//!
//! Per configuration (`TENURE_SOAK_CONFIGS`, comma-separated, default `ttl7`; several
//! run side by side on the same host, under the same load, each with its own etcd):
//! - `ttl7`: ttl 7, loop_wait 0.5, retry_timeout 0.25, safety_margin 0.5,
//!   demote_budget 1.0, the watchdog stand-in in `required` mode (the agent asks for
//!   `W` = 3 s) — README's recommended settings;
//! - `ttl5`: ttl 5, loop_wait 0.25, retry_timeout 0.1, safety_margin 0.25,
//!   demote_budget 0.3, the stand-in `required` (`W` = 2 s) — the tighter setting
//!   under evaluation (S6 (b): 0.25 + 0.1 + 0.3 < 2 <= (5 - 0.25 - 0.1) / 2).
//!
//! Each: a real 3-node test cluster (3 etcd members moved to SCHED_FIFO 10 — they
//! stand for dedicated etcd hosts —, 3 agents as shipped by default, no `[agent]`
//! settings, PostgreSQL 15), a write probe on every node every 200 ms (only the
//! primary may acknowledge one), then `stress-ng --cpu 2 --io 1 --vm 1 --vm-bytes
//! 20%` on the host for the whole window (`TENURE_SOAK_SECONDS`, 3600).
//!
//! Every 10 s: each agent's RSS, open fds and CPU (/proc), that it still runs, the
//! leader key (holder and epoch = create revision) and whether a stand-in fired.
//! Every 60 s: which node is the primary (SQL). At the start and the end: every
//! agent's `/metrics` (renewals counted and failed, fences, promotions, deadline
//! overruns, endpoint switches, the renewal round trip and loop lateness
//! histograms) and every etcd member's `/metrics` (WAL fsync, backend commit, peer
//! round trip, leader changes, slow applies).
//!
//! Fails (exit 1) only on what the hour must not show: a failover (the primary or
//! the leader key's holder or epoch changed), a fence, a promotion, a stand-in that
//! fired, an agent that died, a write acknowledged by a node that was not the
//! primary, or a cluster that never settled. Everything else is reported, with the
//! load average, never asserted.
//!
//! `TENURE_SOAK_FENCES=N` (default 0) adds, after the window and still under the
//! same load, N fences per configuration: the leader's lease revoked behind its
//! back (an operator's `etcdctl lease revoke`), so the leader fences at once; each
//! fence's `took` (SIGQUIT → no PostgreSQL process left, the `FENCED` event) is
//! set beside the configuration's `demote_budget` `B`, and the next leader's first
//! write must come after the old one's last (the probe's ordering check). This
//! phase changes leaders by design, so it runs after the hour's verdict.
//!
//! Needs root, etcd, PostgreSQL 15, `stress-ng` (`make soak-hour` installs it) and the
//! watchdog stand-in (`cargo build --example wdt_standin`; the target builds it).

#[path = "harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{ProcSample, Table, etcd_realtime, loadavg, proc_sample, start_stress, stop_stress};
use tenure::testbed::cluster::{ClusterOptions, NodeWatchdog, TestCluster};
use tenure::testbed::probe::WriteProbe;

/// Where the stress-ng log goes.
const OUT_DIR: &str = "/dev/shm/tenure-soak-hour";
/// How often the processes and the leader key are sampled.
const SAMPLE: Duration = Duration::from_secs(10);
/// How often the primary is checked with SQL (every sixth sample).
const PRIMARY_EVERY: u64 = 6;
/// The probe's write interval per node.
const PROBE_EVERY: Duration = Duration::from_millis(200);

#[derive(Clone, Copy)]
struct Soak {
    key: &'static str,
    ttl: u32,
    loop_ms: u64,
    retry_ms: u64,
    margin_ms: u64,
    budget_ms: u64,
}

const SOAKS: [Soak; 2] = [
    Soak {
        key: "ttl7",
        ttl: 7,
        loop_ms: 500,
        retry_ms: 250,
        margin_ms: 500,
        budget_ms: 1000,
    },
    Soak {
        key: "ttl5",
        ttl: 5,
        loop_ms: 250,
        retry_ms: 100,
        margin_ms: 250,
        budget_ms: 300,
    },
];

/// One running configuration and what was seen of it.
struct Run {
    soak: Soak,
    c: TestCluster,
    probe: WriteProbe,
    primary: usize,
    holder: String,
    epoch: i64,
    pids: Vec<u32>,
    names: Vec<String>,
    metrics0: Vec<String>,
    etcd0: Vec<String>,
    /// (seconds into the window, per agent: sample, open fds).
    samples: Vec<(u64, Vec<(ProcSample, usize)>)>,
    /// What broke, with the second it was seen.
    broken: Vec<String>,
    /// Reads of the leader key that got no answer (etcd busy or down).
    key_unread: usize,
    /// `/primary` checks no node answered 200 to in time.
    primary_unread: usize,
}

fn main() {
    println!(
        "soak_hour: an hour under load with no spurious failover ({})",
        harness::machine_line()
    );
    if let Some(why) = harness::real_parts_missing() {
        println!("soak_hour: SKIPPED: {why}");
        return;
    }
    // Before any thread exists (it may set TENURE_WDT_STANDIN).
    if let Err(why) = harness::find_standin() {
        eprintln!("soak_hour: {why}");
        std::process::exit(1);
    }
    if !Path::new("/usr/bin/stress-ng").is_file() {
        eprintln!("soak_hour: /usr/bin/stress-ng not found (`make soak-hour` installs it)");
        std::process::exit(1);
    }
    let seconds = harness::env_num("TENURE_SOAK_SECONDS", 3600);
    let wanted = std::env::var("TENURE_SOAK_CONFIGS").unwrap_or_else(|_| "ttl7".into());
    let mut soaks = Vec::new();
    for k in wanted.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        match SOAKS.iter().find(|s| s.key == k) {
            Some(s) => soaks.push(*s),
            None => {
                eprintln!(
                    "soak_hour: unknown configuration {k:?} in TENURE_SOAK_CONFIGS (ttl7, ttl5)"
                );
                std::process::exit(2);
            }
        }
    }
    let _ = std::fs::create_dir_all(OUT_DIR);

    let mut runs = Vec::new();
    for s in soaks {
        match start(s) {
            Ok(r) => runs.push(r),
            Err(e) => {
                eprintln!("soak_hour: {}: broken: {e}", s.key);
                std::process::exit(1);
            }
        }
    }
    let out = PathBuf::from(format!("{OUT_DIR}/stress-ng.log"));
    let stress = match start_stress(seconds + 60, &out) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("soak_hour: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "load: stress-ng {} --timeout {}s (pid {}), log {}",
        harness::STRESS.join(" "),
        seconds + 60,
        stress.id(),
        out.display()
    );
    let load0 = loadavg();
    let t0 = Instant::now();
    let mut next = t0;
    let mut k = 0u64;
    let mut last_print = 0u64;
    while t0.elapsed() < Duration::from_secs(seconds) {
        let at = t0.elapsed().as_secs();
        for r in &mut runs {
            sample(r, at, k.is_multiple_of(PRIMARY_EVERY));
        }
        if at >= last_print + 300 {
            last_print = at;
            progress(&runs, at);
        }
        k += 1;
        next += SAMPLE;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let window = t0.elapsed();
    let load1 = loadavg();
    println!(
        "\nwindow {:.0} s under load; load average at its start {load0}, at its end {load1}",
        window.as_secs_f64()
    );
    let mut failed = false;
    for r in &mut runs {
        finish(r, window);
        failed |= !r.broken.is_empty();
    }
    let fences = harness::env_num("TENURE_SOAK_FENCES", 0) as usize;
    if fences > 0 && !failed {
        for r in &mut runs {
            if let Err(e) = fence_rounds(r, fences) {
                eprintln!("soak_hour: {}: fences under load: broken: {e}", r.soak.key);
                failed = true;
            }
        }
        println!("load average after the fences {}", loadavg());
    }
    stop_stress(stress);
    if failed {
        eprintln!("soak_hour: BROKEN (see above)");
        std::process::exit(1);
    }
    println!("\nsoak_hour: every configuration held the whole window");
}

fn options(s: Soak) -> ClusterOptions {
    let mut o = ClusterOptions::new(harness::agent_binary());
    o.tag = format!("soak-{}", s.key);
    o.scope = format!("soak-{}", s.key);
    o.log_level = Some("info".into());
    o.ttl = s.ttl;
    o.loop_wait = Duration::from_millis(s.loop_ms);
    o.retry_timeout = Duration::from_millis(s.retry_ms);
    o.safety_margin = Duration::from_millis(s.margin_ms);
    o.demote_budget = Duration::from_millis(s.budget_ms);
    // A FUSE stand-in per node that "resets the host" (freezes the node's cgroup)
    // when it is not petted within W, as tests/real_watchdog_e2e.rs arms it.
    o.watchdog = vec![NodeWatchdog::with_standin("required"); o.nodes];
    o
}

fn start(s: Soak) -> Result<Run, String> {
    let o = options(s);
    println!(
        "\n=== {}: {} nodes, ttl {} s, loop_wait {:.2} s, retry_timeout {:.2} s, \
         safety_margin {:.2} s, demote_budget {:.2} s, watchdog stand-in required, \
         [agent] defaults",
        s.key,
        o.nodes,
        o.ttl,
        o.loop_wait.as_secs_f64(),
        o.retry_timeout.as_secs_f64(),
        o.safety_margin.as_secs_f64(),
        o.demote_budget.as_secs_f64()
    );
    let (mut c, p) = harness::start_settled(o, &format!("{}: ", s.key))?;
    etcd_realtime(&mut c)?;
    // The primary's replicas stream before the window opens.
    c.wait_replicas(p, &[], Duration::from_secs(60))?;
    let (holder, epoch) = c
        .leader_key()
        .ok_or("no leader key after the cluster settled")?;
    let n = c.node_count();
    let names: Vec<String> = (0..n).map(|i| c.name(i).to_string()).collect();
    let pids: Vec<u32> = (0..n)
        .map(|i| {
            c.agent_pid(i)
                .ok_or(format!("agent of {} not running", names[i]))
        })
        .collect::<Result<_, _>>()?;
    for (i, name) in names.iter().enumerate() {
        let w = c.agent_log(i);
        if let Some(l) = w.lines().find(|l| l.contains("WATCHDOG_ARMED")) {
            println!("{name}: {}", l.trim());
        }
    }
    let probe = c.write_probe(p, PROBE_EVERY)?;
    let metrics0 = (0..n).map(|i| agent_metrics(&c, i)).collect();
    let etcd0 = etcd_metrics(&mut c);
    println!(
        "{}: primary {}, leader key held by {holder} at epoch {epoch}; write probe every {:?} on every node",
        s.key, names[p], PROBE_EVERY
    );
    Ok(Run {
        soak: s,
        c,
        probe,
        primary: p,
        holder,
        epoch,
        pids,
        names,
        metrics0,
        etcd0,
        samples: Vec::new(),
        broken: Vec::new(),
        key_unread: 0,
        primary_unread: 0,
    })
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn sample(r: &mut Run, at: u64, check_primary: bool) {
    let mut row = Vec::new();
    for (i, &pid) in r.pids.iter().enumerate() {
        match proc_sample(pid) {
            Some(s) => row.push((s, fd_count(pid))),
            None => {
                let what = format!("{} s: the agent of {} is gone", at, r.names[i]);
                if !r.broken.contains(&what) {
                    r.broken.push(what);
                }
                return;
            }
        }
    }
    r.samples.push((at, row));
    match r.c.try_leader_key() {
        Ok(Some((h, e))) if h == r.holder && e == r.epoch => {}
        Ok(Some((h, e))) => r.broken.push(format!(
            "{at} s: the leader key is held by {h} at epoch {e} (was {} at {}): a failover",
            r.holder, r.epoch
        )),
        Ok(None) => r
            .broken
            .push(format!("{at} s: the leader key is gone (a lease was lost)")),
        Err(_) => r.key_unread += 1,
    }
    for i in 0..r.names.len() {
        if let Some((_, why)) = r.c.standin(i).and_then(|s| s.fired()) {
            let what = format!("the watchdog stand-in of {} fired: {why}", r.names[i]);
            if !r.broken.iter().any(|b| b.ends_with(&what)) {
                r.broken.push(format!("{at} s: {what}"));
            }
        }
    }
    if check_primary {
        // `/primary` on every node's API: another node answering 200 is a failover;
        // none answering in time is counted (the API is served between iterations
        // and a loaded host can be slow to answer), the leader key above decides.
        let ps = r.c.primaries();
        if ps.iter().any(|&q| q != r.primary) {
            r.broken.push(format!(
                "{at} s: /primary answers 200 on {:?}, the primary was {}",
                ps.iter().map(|&q| r.names[q].clone()).collect::<Vec<_>>(),
                r.names[r.primary]
            ));
        } else if ps.is_empty() {
            r.primary_unread += 1;
        }
    }
}

fn progress(runs: &[Run], at: u64) {
    let mut line = format!("[{:>4} s] load {}", at, loadavg());
    for r in runs {
        let rss: Vec<String> = r
            .samples
            .last()
            .map(|(_, row)| {
                row.iter()
                    .map(|(s, fds)| format!("{:.1}M/{fds}fd", s.rss as f64 / 1024.0))
                    .collect()
            })
            .unwrap_or_default();
        line.push_str(&format!(
            " | {}: {} acked on the primary, {} broken, agents {}",
            r.soak.key,
            r.probe.ack_count(r.primary),
            r.broken.len(),
            rss.join(" ")
        ));
    }
    println!("{line}");
}

fn agent_metrics(c: &TestCluster, i: usize) -> String {
    c.api_body(i, "/metrics")
        .filter(|(code, _)| *code == 200)
        .map(|(_, b)| b)
        .unwrap_or_default()
}

fn etcd_metrics(c: &mut TestCluster) -> Vec<String> {
    let Some(e) = c.etcd() else {
        return Vec::new();
    };
    e.members
        .iter()
        .map(|m| {
            tenure::testbed::etcd::http_get(std::net::IpAddr::V4(m.addr), m.plain_port, "/metrics")
                .unwrap_or_default()
        })
        .collect()
}

/// The sum of every sample of metric `name` (any labels) in a Prometheus text body.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, v) = l.rsplit_once(' ')?;
            let base = key.split('{').next()?;
            (base == name).then(|| v.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// `name`'s histogram buckets (`le` → cumulative count, summed over other labels).
fn buckets(text: &str, name: &str) -> BTreeMap<String, f64> {
    let bucket = format!("{name}_bucket");
    let mut out = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, v)) = l.rsplit_once(' ') else {
            continue;
        };
        if key.split('{').next() != Some(bucket.as_str()) {
            continue;
        }
        let Some(le) = key.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        *out.entry(le.to_string()).or_insert(0.0) += v.parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// From the growth of a histogram between two scrapes: n, and the upper bounds of
/// the buckets holding the median, p99 and p99.9 and the largest observation.
/// Bounds, not exact values: a bucket's upper edge.
fn histogram_delta(before: &str, after: &str, name: &str) -> Option<(u64, [String; 4])> {
    let b0 = buckets(before, name);
    let b1 = buckets(after, name);
    let mut rows: Vec<(f64, String, f64)> = b1
        .iter()
        .map(|(le, &v)| {
            let edge = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            (edge, le.clone(), v - b0.get(le).copied().unwrap_or(0.0))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = rows.last()?.2;
    if total <= 0.0 {
        return None;
    }
    let q = |f: f64| -> String {
        let want = (f * total).ceil().max(1.0);
        rows.iter()
            .find(|r| r.2 >= want)
            .map(|r| fmt_edge(&r.1))
            .unwrap_or_else(|| "?".into())
    };
    Some((total as u64, [q(0.5), q(0.99), q(0.999), q(1.0)]))
}

fn fmt_edge(le: &str) -> String {
    match le.parse::<f64>() {
        Ok(s) if s.is_finite() => {
            if s < 1.0 {
                format!("≤ {:.1} ms", s * 1e3)
            } else {
                format!("≤ {s:.2} s")
            }
        }
        _ => format!("> largest bucket ({le})"),
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn finish(r: &mut Run, window: Duration) {
    let s = r.soak;
    let n = r.names.len();
    println!("\n=== {} ===", s.key);
    r.probe.stop(Duration::from_secs(5));
    // A last look: agents, leader key, primary.
    if let Err(e) = r.c.check_agents() {
        r.broken.push(format!("at the end: {e}"));
    }
    let at = window.as_secs();
    sample(r, at, true);
    // Writes: only the primary may acknowledge one.
    let mut w = Table::new(&[
        "node",
        "role",
        "attempts",
        "acknowledged",
        "refused or failed",
        "longest gap between acks",
    ]);
    for i in 0..n {
        let a = r.probe.attempts(i);
        let mut acks: Vec<Instant> = a.iter().filter_map(|x| x.acked).collect();
        acks.sort();
        let gap = acks
            .windows(2)
            .map(|p| p[1].saturating_duration_since(p[0]))
            .max()
            .unwrap_or_default();
        let acked = acks.len();
        if i != r.primary && acked > 0 {
            r.broken.push(format!(
                "{} acknowledged {acked} writes while it was not the primary",
                r.names[i]
            ));
        }
        w.row(vec![
            r.names[i].clone(),
            if i == r.primary { "primary" } else { "replica" }.into(),
            a.len().to_string(),
            acked.to_string(),
            (a.len() - acked).to_string(),
            if i == r.primary {
                format!("{:.2} s", gap.as_secs_f64())
            } else {
                "-".into()
            },
        ]);
    }
    println!(
        "{}: the write probe (every {:?} per node)",
        s.key, PROBE_EVERY
    );
    print!("{}", w.render());

    // The agents' own counters and histograms over the window.
    let metrics1: Vec<String> = (0..n).map(|i| agent_metrics(&r.c, i)).collect();
    let counters = [
        ("tenure_renewals_counted_total", "renewals counted"),
        ("tenure_renewals_failed_total", "renewals failed"),
        ("tenure_deadline_overruns_total", "deadline overruns"),
        ("tenure_fences_total", "fences"),
        ("tenure_promotions_total", "promotions"),
        ("tenure_etcd_endpoint_switches_total", "endpoint switches"),
        ("tenure_log_dropped_total", "log lines dropped"),
    ];
    let mut head = vec!["agent", "role"];
    head.extend(counters.iter().map(|c| c.1));
    let mut ct = Table::new(&head);
    for (i, m1) in metrics1.iter().enumerate() {
        let m0 = &r.metrics0[i];
        if m1.is_empty() {
            r.broken.push(format!(
                "{}: /metrics did not answer at the end",
                r.names[i]
            ));
        }
        let mut row = vec![
            r.names[i].clone(),
            if i == r.primary { "leader" } else { "replica" }.into(),
        ];
        for (name, what) in counters {
            let d = metric_sum(m1, name) - metric_sum(m0, name);
            if (what == "fences" || what == "promotions") && d > 0.0 {
                r.broken
                    .push(format!("{}: {d} {what} during the window", r.names[i]));
            }
            row.push(format!("{d:.0}"));
        }
        ct.row(row);
    }
    println!(
        "\n{}: the agents' counters over the window (/metrics, end - start)",
        s.key
    );
    print!("{}", ct.render());

    let mut ht = Table::new(&["agent", "what", "n", "median", "p99", "p99.9", "max"]);
    for (i, m1) in metrics1.iter().enumerate() {
        for (name, what) in [
            ("tenure_renewal_round_trip_seconds", "renewal round trip"),
            ("tenure_loop_lateness_seconds", "tick lateness"),
        ] {
            if let Some((count, q)) = histogram_delta(&r.metrics0[i], m1, name) {
                let mut row = vec![r.names[i].clone(), what.into(), count.to_string()];
                row.extend(q);
                ht.row(row);
            }
        }
    }
    println!(
        "\n{}: the agents' histograms over the window (bucket upper bounds; the renewal is the leader's)",
        s.key
    );
    print!("{}", ht.render());

    // etcd's own view of the same hour.
    let etcd1 = etcd_metrics(&mut r.c);
    let mut et = Table::new(&["etcd member", "what", "n", "median", "p99", "p99.9", "max"]);
    for (j, (e0, e1)) in r.etcd0.iter().zip(&etcd1).enumerate() {
        for (name, what) in [
            ("etcd_disk_wal_fsync_duration_seconds", "WAL fsync"),
            (
                "etcd_disk_backend_commit_duration_seconds",
                "backend commit",
            ),
            (
                "etcd_network_peer_round_trip_time_seconds",
                "peer round trip",
            ),
        ] {
            if let Some((count, q)) = histogram_delta(e0, e1, name) {
                let mut row = vec![format!("member {j}"), what.into(), count.to_string()];
                row.extend(q);
                et.row(row);
            }
        }
    }
    println!(
        "\n{}: etcd's own latency over the window (its /metrics)",
        s.key
    );
    print!("{}", et.render());
    let mut ec = Table::new(&[
        "etcd member",
        "leader changes",
        "slow applies",
        "heartbeat send failures",
        "proposals committed",
    ]);
    for (j, (e0, e1)) in r.etcd0.iter().zip(&etcd1).enumerate() {
        let d = |name: &str| format!("{:.0}", metric_sum(e1, name) - metric_sum(e0, name));
        ec.row(vec![
            format!("member {j}"),
            d("etcd_server_leader_changes_seen_total"),
            d("etcd_server_slow_apply_total"),
            d("etcd_server_heartbeat_send_failures_total"),
            d("etcd_server_proposals_committed_total"),
        ]);
    }
    print!("{}", ec.render());

    // Memory, fds and CPU: flat over the hour? First vs last tenth of the window.
    let hz = harness::ticks_per_second();
    let tenth = (r.samples.len() / 10).max(1);
    let mut mt = Table::new(&[
        "agent",
        "RSS first 10%",
        "RSS last 10%",
        "RSS max",
        "fds first 10%",
        "fds last 10%",
        "fds max",
        "CPU s/h",
    ]);
    for i in 0..n {
        let col = |range: &[(u64, Vec<(ProcSample, usize)>)],
                   f: &dyn Fn(&(ProcSample, usize)) -> f64| {
            let mut v: Vec<f64> = range
                .iter()
                .filter_map(|(_, row)| row.get(i))
                .map(f)
                .collect();
            median(&mut v)
        };
        let first = &r.samples[..tenth.min(r.samples.len())];
        let last = &r.samples[r.samples.len().saturating_sub(tenth)..];
        let rss = |x: &(ProcSample, usize)| x.0.rss as f64 / 1024.0;
        let fds = |x: &(ProcSample, usize)| x.1 as f64;
        let all: Vec<&(ProcSample, usize)> =
            r.samples.iter().filter_map(|(_, row)| row.get(i)).collect();
        let rss_max = all.iter().map(|x| x.0.rss).max().unwrap_or(0) as f64 / 1024.0;
        let fds_max = all.iter().map(|x| x.1).max().unwrap_or(0);
        let cpu = match (all.first(), all.last()) {
            (Some(a), Some(b)) => {
                b.0.cpu.saturating_sub(a.0.cpu) as f64 / hz / window.as_secs_f64() * 3600.0
            }
            _ => 0.0,
        };
        mt.row(vec![
            r.names[i].clone(),
            format!("{:.2} MiB", col(first, &rss)),
            format!("{:.2} MiB", col(last, &rss)),
            format!("{rss_max:.2} MiB"),
            format!("{:.0}", col(first, &fds)),
            format!("{:.0}", col(last, &fds)),
            fds_max.to_string(),
            format!("{cpu:.1}"),
        ]);
    }
    println!(
        "\n{}: the agents' memory, open files and CPU ({} samples, every {:?})",
        s.key,
        r.samples.len(),
        SAMPLE
    );
    print!("{}", mt.render());
    if r.key_unread > 0 {
        println!(
            "{}: {} of the bench's leader-key reads got no answer in time (the bench's own reads, not the agents')",
            s.key, r.key_unread
        );
    }
    if r.primary_unread > 0 {
        println!(
            "{}: {} of the bench's `/primary` checks found no node answering 200 in time",
            s.key, r.primary_unread
        );
    }
    if r.broken.is_empty() {
        println!(
            "\n{}: HELD: 0 failovers, 0 fences, 0 promotions, 0 stand-in resets, no agent died, writes acknowledged by the primary only",
            s.key
        );
    } else {
        println!("\n{}: BROKEN:", s.key);
        for b in &r.broken {
            println!("  {b}");
        }
        print!("{}", r.c.logs_tail(40));
    }
}

/// N fences under load: revoke the leader's lease, read the old leader's `FENCED`
/// event, wait for the cluster to settle again, check write ordering.
fn fence_rounds(r: &mut Run, n: usize) -> Result<(), String> {
    let s = r.soak;
    let budget = Duration::from_millis(s.budget_ms);
    println!(
        "\n{}: {n} fences under the same load (the leader's lease revoked; B = {:.2} s)",
        s.key,
        budget.as_secs_f64()
    );
    let mut took = Vec::new();
    let mut failed_fences = 0usize;
    for round in 0..n {
        let p = r.c.settled(Duration::from_secs(120))?;
        r.c.wait_replicas(p, &[], Duration::from_secs(120))?;
        let kv = r.c.get_kv("leader").ok_or("no leader key")?;
        let log0 = r.c.agent_log(p).len();
        let mut probe = r.c.write_probe(p, Duration::from_millis(50))?;
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        harness::revoke(&r.c.endpoints(), kv.lease)?;
        let limit = Duration::from_secs(u64::from(s.ttl) * 2 + 30);
        let mut fenced = None;
        while t0.elapsed() < limit {
            let log = r.c.agent_log(p);
            let new = log.get(log0..).unwrap_or("");
            if new.contains("EVENT FENCE_FAILED") {
                failed_fences += 1;
            }
            if let Some(l) = new.lines().find(|l| l.contains("EVENT FENCED")) {
                fenced = l
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("took="))
                    .and_then(|v| v.trim_end_matches('s').parse::<f64>().ok());
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let t = fenced.ok_or_else(|| {
            format!(
                "round {round}: {} logged no FENCED within {limit:?}{}",
                r.c.name(p),
                r.c.logs_tail(30)
            )
        })?;
        took.push(Duration::from_secs_f64(t));
        let q =
            r.c.wait_new_primary(p, limit)
                .or_else(|| r.c.wait_primary(limit))
                .ok_or_else(|| format!("round {round}: no primary after the fence"))?;
        std::thread::sleep(Duration::from_secs(1));
        probe.stop(Duration::from_secs(5));
        if q != p {
            probe.check_no_overlap(p, q, t0)?;
        }
        println!(
            "  round {round}: {} fenced in {t:.2} s; new primary {}",
            r.c.name(p),
            r.c.name(q)
        );
    }
    if let Some(st) = harness::Stats::of_durations(&took) {
        let over = took.iter().filter(|d| **d > budget).count();
        println!(
            "{}: fence took (n {}): min {}, median {}, p99 {}, max {}; over B ({:.2} s): {over}; FENCE_FAILED events: {failed_fences}",
            s.key,
            st.n,
            harness::fmt_ns(st.min),
            harness::fmt_ns(st.median),
            harness::fmt_ns(st.p99),
            harness::fmt_ns(st.max),
            budget.as_secs_f64()
        );
    }
    Ok(())
}
