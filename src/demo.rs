//! `tenure demo`: a three-node cluster on this machine, a host crash of the
//! primary, and the measured failover, narrated step by step on stdout.
//!
//! Owns: the narration and the demo's own test bed (`testbed::cluster`), which
//! runs this same binary as the three agents. Must never: touch anything it did not
//! start, or run without root and the real parts (it says what is missing).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::testbed::cluster::{ClusterOptions, TestCluster};

const ROWS: i64 = 100;

fn say(s: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{s}");
    let _ = out.flush();
}

/// Root, etcd and PostgreSQL 15 present? Names what is missing.
pub fn check_prerequisites() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(
            "must run as root: the agents run PostgreSQL as the `postgres` user \
                    and put each node in its own cgroup (try: sudo make demo)"
                .into(),
        );
    }
    let mut missing = Vec::new();
    if !["/usr/bin/etcd", "/usr/local/bin/etcd"]
        .iter()
        .any(|p| Path::new(p).is_file())
    {
        missing.push("etcd (Debian package etcd-server)");
    }
    if !Path::new("/usr/lib/postgresql/15/bin/postgres").is_file() {
        missing.push("PostgreSQL 15 (Debian package postgresql-15)");
    }
    if nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .is_none()
    {
        missing.push("the `postgres` OS user (Debian package postgresql-15)");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("missing: {}; run `make deps`", missing.join(", ")))
    }
}

/// Run the demo. With `keep`, leave the cluster running and print how to stop it.
pub fn run(keep: bool) -> Result<(), String> {
    check_prerequisites()?;
    let binary = std::env::current_exe().map_err(|e| format!("cannot find my own binary: {e}"))?;
    let mut opts = ClusterOptions::new(binary);
    opts.tag = "demo".into();
    opts.scope = "demo".into();

    say("tenure demo: three PostgreSQL 15 nodes, one etcd lease, one host crash.");
    say(&format!(
        "timing: ttl {} s, loop_wait {:?}, retry_timeout {:?}, safety_margin {:?}, demote_budget {:?}, no watchdog",
        opts.ttl, opts.loop_wait, opts.retry_timeout, opts.safety_margin, opts.demote_budget
    ));
    say("starting etcd (3 members, election timeout 500 ms, data on /dev/shm) and three nodes ...");
    let t0 = Instant::now();
    let mut c = TestCluster::start(opts)?;
    say(&format!("  etcd: {}", c.endpoints().join(" ")));
    for i in 0..c.node_count() {
        say(&format!(
            "  {}: agent pid {}, PostgreSQL 127.0.0.1:{}, API http://127.0.0.1:{}",
            c.name(i),
            c.agent_pid(i).unwrap_or(0),
            c.pg_port(i),
            c.api_port(i)
        ));
    }

    std::thread::sleep(Duration::from_millis(300));
    for i in 0..c.node_count() {
        if let Some(st) = c.agent_exited(i) {
            return Err(format!(
                "the agent of {} exited at once ({st}):{}",
                c.name(i),
                c.logs_tail(20)
            ));
        }
    }

    say("waiting for a primary (the first node to win the leader key runs initdb) ...");
    let p = c
        .wait_primary(Duration::from_secs(90))
        .ok_or_else(|| format!("no primary after 90 s; agent logs:{}", c.logs_tail(20)))?;
    let (leader, epoch) = c
        .leader_key()
        .ok_or("a node says primary but etcd shows no leader key")?;
    say(&format!(
        "  primary: {} (leader key = {leader:?}, epoch {epoch}) after {:.1} s",
        c.name(p),
        t0.elapsed().as_secs_f64()
    ));

    say(&format!("writing {ROWS} rows through {} ...", c.name(p)));
    for n in 1..=ROWS {
        c.write_row(p, n)?;
    }
    say("waiting until both replicas stream and have every row ...");
    let replicas: Vec<usize> = (0..c.node_count()).filter(|&i| i != p).collect();
    let synced =
        crate::testbed::wait_for(Duration::from_secs(90), Duration::from_millis(100), || {
            replicas
                .iter()
                .all(|&r| c.count_rows(r) == Ok(ROWS) && c.is_in_recovery(r) == Ok(true))
                .then_some(())
        });
    if synced.is_none() {
        return Err(format!(
            "replicas did not catch up within 90 s; agent logs:{}",
            c.logs_tail(20)
        ));
    }
    for &r in &replicas {
        say(&format!(
            "  {}: {ROWS} rows, in recovery (streaming replica)",
            c.name(r)
        ));
    }

    say("starting a write probe: one INSERT per node every 20 ms ...");
    let mut probe = c.write_probe(p, Duration::from_millis(20))?;
    std::thread::sleep(Duration::from_millis(500));
    say(&format!(
        "crashing {}'s host: agent, postmaster and every backend die at once ...",
        c.name(p)
    ));
    let crash = c.host_crash(p)?;
    // The first acknowledged write on any other node after the crash is the
    // moment clients could write again.
    let first =
        crate::testbed::wait_for(Duration::from_secs(60), Duration::from_millis(20), || {
            replicas
                .iter()
                .filter_map(|&r| probe.first_ack_after(r, crash).map(|a| (r, a)))
                .min_by_key(|(_, a)| a.acked)
        });
    probe.stop(Duration::from_secs(2));
    let (np, first) = first.ok_or_else(|| {
        format!(
            "no node accepted a write within 60 s; agent logs:{}",
            c.logs_tail(30)
        )
    })?;
    let failover = first
        .acked
        .unwrap_or(crash)
        .saturating_duration_since(crash);
    say(&format!(
        "  new primary: {}; failover (crash -> first acknowledged write) {:.2} s",
        c.name(np),
        failover.as_secs_f64()
    ));
    match c.leader_key() {
        Some((l, e)) => say(&format!("  leader key = {l:?}, epoch {e} (was {epoch})")),
        None => say("  leader key: not readable right now"),
    }
    let rows = c.count_rows(np)?;
    say(&format!(
        "  rows on {}: {rows} of {ROWS}{}",
        c.name(np),
        if rows == ROWS {
            " - none lost"
        } else {
            " - ROWS MISSING"
        }
    ));
    if rows != ROWS {
        return Err(format!("{} has {rows} rows, expected {ROWS}", c.name(np)));
    }

    if keep {
        c.leave_running();
        say("\nleft running (the crashed node stays down; start its agent again to rejoin):");
        for i in 0..c.node_count() {
            say(&format!(
                "  {}: config {}  PostgreSQL 127.0.0.1:{}  API http://127.0.0.1:{}  agent pid {}",
                c.name(i),
                c.config_path(i).display(),
                c.pg_port(i),
                c.api_port(i),
                c.agent_pid(i)
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "(down)".into())
            ));
        }
        say(&format!(
            "  API writes (PATCH /config, ...) need HTTP basic auth: user {}, password {} \
             ([api] username/password in each config)",
            crate::testbed::cluster::API_USER,
            c.passwords.api
        ));
        let agents: Vec<String> = (0..c.node_count())
            .filter_map(|i| c.agent_pid(i))
            .map(|p| p.to_string())
            .collect();
        let etcd: Vec<String> = c.etcd_pids().iter().map(|p| p.to_string()).collect();
        say(&format!("  scratch: {}", c.dir().display()));
        say("  etcd keeps running: the kept agents need it (without it a leader fences).");
        say(&format!(
            "to stop it: kill {}   # agents first (SIGTERM: a clean shutdown)\n            then kill {}   # etcd, after the agents exited\n            and remove {}",
            agents.join(" "),
            etcd.join(" "),
            c.dir().display()
        ));
    } else {
        say("tearing down ...");
        drop(c);
        say("done.");
    }
    Ok(())
}
