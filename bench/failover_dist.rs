//! Benchmark: the fastest safe settings, measured (issue 13 item 4). Failover time as
//! a distribution, per configuration, on real parts (3 etcd members, 3 agents built
//! in this profile, PostgreSQL 15), against the floor each configuration cannot beat:
//!
//! - `wd7`: host crash at ttl 7 with the watchdog stand-in armed in `required` mode
//!   on every node (the agent requests `W` = 3 s, the top of S6(b)'s range);
//! - `sync4`: host crash at ttl 4 without a watchdog, in synchronous mode;
//! - `ttl30`: host crash at ttl 30 (no watchdog);
//! - `revoke7`: the leader's lease revoked behind its back at ttl 7 (no watchdog):
//!   the key vanishes early, the old leader must fence and the winner must wait the
//!   promote delay (DESIGN §1 step 4: `ttl_old + R` without a watchdog).
//!
//! One cluster per configuration, reused round after round (`TENURE_BENCH_FAILOVER_N`
//! rounds, default 10): wait until every replica streams, start the `WriteProbe` (a
//! write on every node every 20 ms), fault the primary, wait for the new leader and
//! its first acknowledged write, bring the old node back (restart its agent after a
//! crash; after a revoke the old leader fences and rejoins by itself), wait until
//! every node streams again, repeat. `TENURE_BENCH_FAILOVER_CONFIGS` picks
//! configurations (comma-separated keys above; default all, in that order).
//!
//! Measured per round: fault → the new primary's first acknowledged write, and etcd's
//! DELETE of the leader key → that write. The DELETE is seen by a thread that reads
//! the leader key (linearizably, through etcd's JSON gateway) every 5 ms: the DELETE
//! happened after the previous read was sent and before the first read that found
//! the key gone was answered; the instant used is that read's send, so the
//! resolution is 5 ms plus one read's round trip. The new primary's log (its
//! `CLOCK_BOOTTIME` stamps) splits DELETE → write into DELETE → "acquired the leader
//! key" and that → "promoted PostgreSQL".
//!
//! A round fails the benchmark only when something is broken: no new leader or
//! primary, a write acknowledged by the old primary after the first write was sent
//! to the new one (`WriteProbe::check_no_overlap`), a winner that promoted after an
//! early revoke without waiting the delay, two primaries, or a node that never
//! streams again. Times are reported, never asserted. Needs root, etcd and
//! PostgreSQL 15 (skips with a message otherwise); `wd7` also needs the stand-in
//! (`cargo build --example wdt_standin`, found in `target/*/examples`, or
//! `TENURE_WDT_STANDIN`) and FUSE, and is skipped with a message without them.

#[path = "harness.rs"]
mod harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use harness::{Table, fmt_ns};
use tenure::testbed::cluster::{ClusterOptions, NodeWatchdog, TestCluster};
use tenure::testbed::probe::WriteProbe;
use tenure::testbed::{etcdkv, wait_for};

const REJOIN: Duration = Duration::from_secs(120);
/// How often the key watcher reads the leader key (the DELETE's resolution).
const POLL: Duration = Duration::from_millis(5);
/// Every read of the key watcher is bounded by this.
const READ_LIMIT: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// `TestCluster::host_crash` of the primary.
    Crash,
    /// `LeaseRevoke` of the leader's lease through etcd's gateway.
    Revoke,
}

#[derive(Clone, Copy)]
struct Config {
    key: &'static str,
    ttl: u32,
    watchdog: bool,
    sync: bool,
    fault: Fault,
}

const CONFIGS: [Config; 4] = [
    Config {
        key: "wd7",
        ttl: 7,
        watchdog: true,
        sync: false,
        fault: Fault::Crash,
    },
    Config {
        key: "sync4",
        ttl: 4,
        watchdog: false,
        sync: true,
        fault: Fault::Crash,
    },
    Config {
        key: "ttl30",
        ttl: 30,
        watchdog: false,
        sync: false,
        fault: Fault::Crash,
    },
    Config {
        key: "revoke7",
        ttl: 7,
        watchdog: false,
        sync: false,
        fault: Fault::Revoke,
    },
];

fn main() {
    println!(
        "failover_dist: failover distributions per configuration on real parts ({})",
        harness::machine_line()
    );
    if let Some(why) = harness::real_parts_missing() {
        println!("failover_dist: SKIPPED: {why}");
        return;
    }
    // Before any thread exists (setting the environment is only sound then).
    let standin = harness::find_standin();
    let n = harness::env_num("TENURE_BENCH_FAILOVER_N", 10).max(1) as usize;
    let chosen = match std::env::var("TENURE_BENCH_FAILOVER_CONFIGS") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|k| {
                CONFIGS
                    .iter()
                    .copied()
                    .find(|c| c.key == k)
                    .ok_or_else(|| k.to_string())
            })
            .collect::<Result<Vec<Config>, String>>(),
        _ => Ok(CONFIGS.to_vec()),
    };
    let chosen = match chosen {
        Ok(c) => c,
        Err(k) => {
            eprintln!(
                "failover_dist: unknown configuration {k:?} in TENURE_BENCH_FAILOVER_CONFIGS \
                 (known: wd7, sync4, ttl30, revoke7)"
            );
            std::process::exit(2);
        }
    };
    let mut broken = false;
    for cfg in chosen {
        if cfg.watchdog
            && let Err(why) = &standin
        {
            println!("\n[{}] SKIPPED: {why}", cfg.key);
            continue;
        }
        let mut m = Measured::default();
        let result = run_config(cfg, n, &mut m);
        report(cfg, n, &m);
        if let Err(e) = result {
            eprintln!("failover_dist [{}]: broken benchmark: {e}", cfg.key);
            broken = true;
        }
    }
    if broken {
        std::process::exit(1);
    }
}

/// What was measured so far (printed even when a later round finds the cluster broken).
#[derive(Default)]
struct Measured {
    /// fault → the first read that found the leader key gone.
    delete: Vec<Duration>,
    /// fault → the new primary's first acknowledged write.
    first: Vec<Duration>,
    /// DELETE → the new primary's first acknowledged write.
    delete_first: Vec<Duration>,
    /// DELETE → the winner's "acquired the leader key" (its log stamp).
    delete_acquired: Vec<Duration>,
    /// "acquired" → "promoted PostgreSQL" (log stamps).
    acquired_promoted: Vec<Duration>,
    /// The old node back (agent restarted after a crash; the fault after a revoke)
    /// → every node streams again.
    back: Vec<Duration>,
    /// Rounds whose winner logged a promote delay for an early DELETE.
    delayed: usize,
    /// Rounds where the old leader took the key again (revoke).
    same_node: usize,
    /// Rounds where more than one node acquired the key before a primary ran.
    reacquired: usize,
    /// Settings the agents logged (the watchdog's `W`), once.
    notes: Vec<String>,
}

fn options(cfg: Config) -> ClusterOptions {
    let mut o = ClusterOptions::new(harness::agent_binary());
    o.tag = format!("bench-fodist-{}", cfg.key);
    o.scope = format!("bench-fodist-{}", cfg.key);
    o.log_level = Some("info".into());
    o.ttl = cfg.ttl;
    o.synchronous_mode = cfg.sync;
    if cfg.watchdog {
        // As tests/real_watchdog_e2e.rs arms it: a FUSE stand-in per node that
        // "resets the host" through the node's freezer cgroup.
        o.watchdog = vec![NodeWatchdog::with_standin("required"); o.nodes];
    }
    o
}

/// The exact settings, for the report.
fn settings_line(cfg: Config, o: &ClusterOptions) -> String {
    let wd = if cfg.watchdog {
        "watchdog stand-in, mode required (W requested by the agent: (ttl - M - R) / 2 \
         in whole seconds)"
            .to_string()
    } else {
        "no watchdog (mode off)".to_string()
    };
    format!(
        "{} nodes, ttl {} s, loop_wait {:.2} s, retry_timeout {:.2} s, safety_margin {:.2} s, \
         demote_budget {:.2} s, maximum_lag_on_failover {} B, {wd}, synchronous_mode {}, \
         fault: {}",
        o.nodes,
        o.ttl,
        o.loop_wait.as_secs_f64(),
        o.retry_timeout.as_secs_f64(),
        o.safety_margin.as_secs_f64(),
        o.demote_budget.as_secs_f64(),
        o.maximum_lag_on_failover,
        o.synchronous_mode,
        match cfg.fault {
            Fault::Crash => "host crash of the primary (freezer cgroup, SIGKILL of all)",
            Fault::Revoke => "LeaseRevoke of the leader's lease behind its back",
        }
    )
}

/// The floor of fault → first write: the lease TTL after a crash (less the time
/// since the leader's last keepalive, at most `loop_wait`), the promote delay
/// after an early revoke (`ttl + R` without a watchdog, `2 W + R + M` with one).
fn floor(cfg: Config, o: &ClusterOptions) -> Duration {
    match cfg.fault {
        Fault::Crash => Duration::from_secs(u64::from(cfg.ttl)),
        Fault::Revoke if cfg.watchdog => {
            let w =
                (cfg.ttl as f64 - o.safety_margin.as_secs_f64() - o.retry_timeout.as_secs_f64())
                    / 2.0;
            Duration::from_secs(2 * w.floor() as u64) + o.retry_timeout + o.safety_margin
        }
        Fault::Revoke => Duration::from_secs(u64::from(cfg.ttl)) + o.retry_timeout,
    }
}

fn run_config(cfg: Config, n: usize, m: &mut Measured) -> Result<(), String> {
    let o = options(cfg);
    println!("\n[{}] {}", cfg.key, settings_line(cfg, &o));
    println!("[{}] agent: {}", cfg.key, o.binary.display());
    println!(
        "[{}] machine at start: {}",
        cfg.key,
        harness::machine_line()
    );
    let (mut c, mut p) = harness::start_settled(o, &format!("[{}] ", cfg.key))?;
    if cfg.watchdog {
        // The W each agent armed, as it logged it (the first line that names it).
        for i in 0..c.node_count() {
            if let Some(l) = c.agent_log(i).lines().find(|l| l.contains(" armed: W = ")) {
                m.notes.push(format!("{}: {}", c.name(i), l.trim()));
                break;
            }
        }
    }
    for round in 1..=n {
        p = one_round(&mut c, cfg, p, &format!("{round}/{n}"), m)?;
    }
    c.check_agents()
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

/// Synchronous mode: wait until the `sync` key names `p` as leader and one of the
/// replicas as its synchronous standby. Before that the primary runs degraded
/// (commits acknowledged by it alone) and nobody may take over after its crash
/// (only the sync standby or the last leader may, DESIGN's synchronous mode, as in
/// Patroni): a crash then is a cluster that waits for its old leader by design, not
/// a failover to measure.
fn wait_sync_standby(c: &TestCluster, p: usize) -> Result<(), String> {
    wait_for(REJOIN, Duration::from_millis(50), || {
        let v: serde_json::Value = serde_json::from_str(&c.get_key("sync")?).ok()?;
        let standby = v.get("sync_standby")?.as_str()?;
        (v.get("leader")?.as_str()? == c.name(p) && c.index_of(standby).is_some_and(|s| s != p))
            .then_some(())
    })
    .ok_or_else(|| {
        format!(
            "the sync key never named a synchronous standby of {} (it holds {:?}){}",
            c.name(p),
            c.get_key("sync"),
            c.logs_tail(30)
        )
    })
}

/// What the key watcher saw.
#[derive(Default)]
struct Seen {
    /// Send instant of the first read that found the old key gone, and that
    /// instant on `CLOCK_BOOTTIME` (to compare with the agents' log stamps).
    gone: Option<(Instant, f64)>,
    /// The new key: the read's send instant, its holder and epoch.
    taken: Option<(Instant, String, i64)>,
    reads: u64,
    errors: u64,
}

/// A thread that reads the leader key every `POLL` until a new epoch holds it.
struct KeyWatch {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Seen>>,
}

impl KeyWatch {
    fn start(endpoints: Vec<String>, key: String, old_epoch: i64) -> KeyWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut seen = Seen::default();
            let mut next = Instant::now();
            while !flag.load(Ordering::SeqCst) {
                let sent = Instant::now();
                let boot = tenure::clock::now().secs_f64();
                seen.reads += 1;
                match etcdkv::range(&endpoints, &key, false, READ_LIMIT) {
                    Ok(kvs) => match kvs.first() {
                        Some(kv) if kv.create_revision == old_epoch => {}
                        other => {
                            if seen.gone.is_none() {
                                seen.gone = Some((sent, boot));
                            }
                            if let Some(kv) = other {
                                seen.taken = Some((sent, kv.value.clone(), kv.create_revision));
                                break;
                            }
                        }
                    },
                    Err(_) => seen.errors += 1,
                }
                // Paced, not slept: a slow read does not stretch the period.
                next += POLL;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
            seen
        });
        KeyWatch {
            stop,
            handle: Some(handle),
        }
    }

    /// Wait at most `limit` for the new key; then stop and return what was seen.
    fn finish(mut self, limit: Duration) -> Seen {
        let t0 = Instant::now();
        while self.handle.as_ref().is_some_and(|h| !h.is_finished()) && t0.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The `CLOCK_BOOTTIME` stamp (seconds) of an agent log line (`[<secs>s] ...`).
fn stamp(line: &str) -> Option<f64> {
    line.strip_prefix('[')?
        .split_once("s]")?
        .0
        .trim()
        .parse()
        .ok()
}

/// The first line of `log` containing `needle`, stamped at or after `from`.
fn first_after(log: &str, needle: &str, from: f64) -> Option<f64> {
    log.lines()
        .filter(|l| l.contains(needle))
        .filter_map(stamp)
        .find(|&s| s >= from)
}

/// How many "acquired the leader key" lines all nodes logged since `log_len`, at
/// or after `from` (a boot-clock stamp less a second).
fn new_text_all(c: &TestCluster, log_len: &[usize], from: f64) -> usize {
    (0..c.node_count())
        .map(|i| {
            let log = c.agent_log(i);
            let text = log.get(log_len[i].min(log.len())..).unwrap_or("");
            text.lines()
                .filter(|l| l.contains("acquired the leader key"))
                .filter_map(stamp)
                .filter(|&s| s >= from - 1.0)
                .count()
        })
        .sum()
}

/// One fault of primary `p` and the recovery; returns the new primary.
fn one_round(
    c: &mut TestCluster,
    cfg: Config,
    p: usize,
    label: &str,
    m: &mut Measured,
) -> Result<usize, String> {
    c.wait_replicas(p, &[], REJOIN)?;
    let kv = c
        .get_kv("leader")
        .ok_or_else(|| format!("no leader key before the fault{}", c.logs_tail(30)))?;
    if c.index_of(&kv.value) != Some(p) {
        return Err(format!(
            "the leader key names {} but {} answers /primary",
            kv.value,
            c.name(p)
        ));
    }
    if cfg.sync {
        wait_sync_standby(c, p)?;
    }
    let log_len: Vec<usize> = (0..c.node_count()).map(|i| c.agent_log(i).len()).collect();
    let mut probe = probe_on(c, p)?;
    let watch = KeyWatch::start(
        c.endpoints(),
        format!("{}leader", c.prefix()),
        kv.create_revision,
    );
    // Let the watcher make its first reads (it must see the old key first).
    std::thread::sleep(Duration::from_millis(50));
    let t0 = match cfg.fault {
        Fault::Crash => c.host_crash(p)?,
        Fault::Revoke => {
            let t0 = Instant::now();
            harness::revoke(&c.endpoints(), kv.lease)?;
            t0
        }
    };
    let limit = Duration::from_secs(u64::from(cfg.ttl) * 2 + 60);
    let seen = watch.finish(limit);
    let (gone_at, gone_boot) = seen
        .gone
        .ok_or_else(|| format!("the leader key never vanished{}", c.logs_tail(40)))?;
    let (_, holder, epoch) = seen
        .taken
        .clone()
        .ok_or_else(|| format!("no new leader key within {limit:?}{}", c.logs_tail(40)))?;
    if c.index_of(&holder).is_none() {
        return Err(format!("the leader key names {holder:?}, not a node"));
    }

    // The new primary: the node whose first acknowledged write after the fault
    // comes first. Not simply the first new key holder: a winner may give the key
    // up again before promoting (seen: a required watchdog found unusable only
    // after the win), and the next holder then promotes. The old node counts only
    // with a write after its fence (after a revoke it may lead again): after its
    // first refused write since the fault.
    let first_after_fault = |k: usize| {
        let after = if k == p {
            probe
                .attempts(p)
                .into_iter()
                .find(|a| a.sent >= t0 && a.acked.is_none())
                .map(|a| a.sent)?
        } else {
            t0
        };
        probe.first_ack_after(k, after)
    };
    let (np, first) = wait_for(limit, Duration::from_millis(20), || {
        (0..c.node_count())
            .filter_map(|k| first_after_fault(k).map(|a| (k, a)))
            .min_by_key(|(_, a)| a.acked)
    })
    .ok_or_else(|| {
        format!(
            "no node acknowledged a write within {limit:?} of the fault{}",
            c.logs_tail(30)
        )
    })?;
    if np == p {
        m.same_node += 1;
    }
    probe.stop(Duration::from_secs(2));
    if np != p {
        probe.check_no_overlap(p, np, t0)?;
    }
    drop(probe);
    let acked = first.acked.unwrap_or(first.sent);

    // Where DELETE → write went, from the winner's log; and whether it waited.
    // `pg_promote()` may return (and the line be logged) after the first write
    // was already acknowledged: wait for the line.
    let promoted_line = |c: &TestCluster| {
        let log = c.agent_log(np);
        let text = log
            .get(log_len[np].min(log.len())..)
            .unwrap_or("")
            .to_string();
        first_after(&text, "promoted PostgreSQL", gone_boot - 1.0).map(|pr| (pr, text))
    };
    let (promoted, new_text) = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        promoted_line(c)
    })
    .map_or((None, String::new()), |(pr, text)| (Some(pr), text));
    // The winner's last acquire before its promotion.
    let acquired = promoted.and_then(|pr| {
        new_text
            .lines()
            .filter(|l| l.contains("acquired the leader key"))
            .filter_map(stamp)
            .rfind(|&s| s >= gone_boot - 1.0 && s <= pr)
    });
    let acquisitions = new_text_all(c, &log_len, gone_boot);
    let delayed = new_text.contains("vanished before its lease");
    if delayed {
        m.delayed += 1;
    }
    if cfg.fault == Fault::Revoke && !delayed {
        return Err(format!(
            "{} promoted after an early revoke without logging the promote delay{}",
            c.name(np),
            c.logs_tail(30)
        ));
    }
    if let (Some(a), Some(pr)) = (acquired, promoted) {
        m.delete_acquired
            .push(Duration::from_secs_f64((a - gone_boot).max(0.0)));
        m.acquired_promoted
            .push(Duration::from_secs_f64((pr - a).max(0.0)));
    }
    if acquisitions > 1 {
        m.reacquired += 1;
    }
    m.delete.push(gone_at.saturating_duration_since(t0));
    m.first.push(acked.saturating_duration_since(t0));
    m.delete_first
        .push(acked.saturating_duration_since(gone_at));

    // Bring the old node back and wait until every node streams from `np`.
    let back_from = Instant::now();
    // A real host reboots with a working device: the stand-in stays dead after it
    // fired (opens fail with ENODEV) until revived.
    if let Some(s) = c.standin_mut(p)
        && s.fired().is_some()
    {
        s.revive()?;
    }
    if cfg.fault == Fault::Crash || c.agent_exited(p).is_some() {
        c.start_agent(p)?;
    }
    c.wait_replicas(np, &[], REJOIN)?;
    let back = back_from.elapsed();
    m.back.push(back);
    let prim = c.primaries();
    if prim != vec![np] {
        return Err(format!(
            "primaries after the round: {:?} (expected only {}){}",
            prim.iter().map(|&i| c.name(i)).collect::<Vec<_>>(),
            c.name(np),
            c.logs_tail(30)
        ));
    }
    println!(
        "[{}] round {label}: {} -> {} (epoch {epoch}): DELETE seen {:.3} s after the fault, \
         first write acked {:.3} s after the fault = {:.3} s after the DELETE (acquired {}, \
         promoted {}){}{}; all stream again {:.2} s later; {} key reads, {} failed",
        cfg.key,
        c.name(p),
        c.name(np),
        gone_at.saturating_duration_since(t0).as_secs_f64(),
        acked.saturating_duration_since(t0).as_secs_f64(),
        acked.saturating_duration_since(gone_at).as_secs_f64(),
        acquired.map_or("?".into(), |a| format!("+{:.3} s", a - gone_boot)),
        promoted.map_or("?".into(), |pr| format!("+{:.3} s", pr - gone_boot)),
        if delayed {
            ", promote delay waited"
        } else {
            ""
        },
        if acquisitions > 1 {
            format!(", {acquisitions} acquisitions of the key (one given up)")
        } else {
            String::new()
        },
        back.as_secs_f64(),
        seen.reads,
        seen.errors
    );
    Ok(np)
}

/// Nearest-rank quantile of sorted samples.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// name, n, min, median, p90, max.
fn dist_row(name: &str, d: &[Duration]) -> Option<Vec<String>> {
    if d.is_empty() {
        return None;
    }
    let mut s = d.to_vec();
    s.sort();
    let f = |d: Duration| fmt_ns(d.as_nanos() as f64);
    Some(vec![
        name.to_string(),
        s.len().to_string(),
        f(s[0]),
        f(quantile(&s, 0.5)),
        f(quantile(&s, 0.9)),
        f(s[s.len() - 1]),
    ])
}

fn report(cfg: Config, n: usize, m: &Measured) {
    let o = options(cfg);
    let fl = floor(cfg, &o);
    let mut t = Table::new(&["what", "n", "min", "median", "p90", "max"]);
    let fault = match cfg.fault {
        Fault::Crash => "crash",
        Fault::Revoke => "revoke",
    };
    let rows: [(String, &[Duration]); 6] = [
        (
            format!("{fault} -> DELETE of the leader key seen"),
            &m.delete,
        ),
        (format!("{fault} -> first acked write"), &m.first),
        ("DELETE -> first acked write".into(), &m.delete_first),
        ("DELETE -> winner acquired (log)".into(), &m.delete_acquired),
        ("acquired -> promoted (log)".into(), &m.acquired_promoted),
        ("old node back -> all stream".into(), &m.back),
    ];
    for (name, d) in &rows {
        if let Some(r) = dist_row(name, d) {
            t.row(r);
        }
    }
    println!();
    println!(
        "[{}] {} of {n} rounds on one cluster; floor of {fault} -> first write: {:.2} s \
         (target: median <= floor + 0.3 s); DELETE seen by a {} ms poll (+ one read's round \
         trip); {} rounds with a promote delay, {} where the old leader took the key again, {} \
         where a winner gave the key up before promoting",
        cfg.key,
        m.first.len(),
        fl.as_secs_f64(),
        POLL.as_millis(),
        m.delayed,
        m.same_node,
        m.reacquired
    );
    for note in &m.notes {
        println!("[{}] {note}", cfg.key);
    }
    print!("{}", t.render());
    println!("[{}] machine at end: {}", cfg.key, harness::machine_line());
}
