//! Benchmark: the write gap of a planned switchover (issue 9; target <= 0.5 s,
//! Patroni's measured 2.39 s). One 3-node test cluster on real parts (3 etcd
//! members, agents of this profile, PostgreSQL 15; ttl 7, loop 0.5 s, retry
//! 0.25 s, no watchdog), then `TENURE_BENCH_SWITCHOVER_ROUNDS` (default 10)
//! switchovers through `POST /switchover` on the leader, each to the next replica,
//! each on the cluster the previous one left (the old primary rejoins without a
//! rewind, so every round starts from three streaming nodes).
//!
//! Per round: the write gap (the `WriteProbe` writes on every node every 20 ms:
//! the old primary's last acknowledged write to the new primary's first), the time
//! from the request to the first write on the new primary, the API's answer, and
//! where the time goes, from the agents' own log lines (every agent logs on
//! `CLOCK_BOOTTIME`, one clock per host): the old leader's fast stop, its
//! fail-closed check that no process remains, the marker txn, then the new
//! leader's takeover (watch delivery, acquire) and `pg_promote()`.
//!
//! The ordering invariant is checked every round; a round without the requested
//! leader, or an old primary that does not stream again (or rewound), fails the
//! benchmark. Times are reported, never asserted. Needs root, etcd and
//! PostgreSQL 15 (skips with a message otherwise).

#[path = "harness.rs"]
mod harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use harness::{STATS_HEAD, Stats, Table, stats_row};
use tenure::testbed::cluster::{API_USER, ClusterOptions, TestCluster};
use tenure::testbed::etcdkv;
use tenure::testbed::wait_for;

const BOOT: Duration = Duration::from_secs(120);
const REJOIN: Duration = Duration::from_secs(120);

fn main() {
    println!(
        "switchover: planned switchover write gap on real parts ({})",
        harness::machine_line()
    );
    if let Some(why) = harness::real_parts_missing() {
        println!("switchover: SKIPPED: {why}");
        return;
    }
    let mut m = Measured::default();
    let r = run(&mut m);
    report(&m);
    if let Err(e) = r {
        eprintln!("switchover: broken benchmark: {e}");
        std::process::exit(1);
    }
}

#[derive(Default)]
struct Measured {
    gap: Vec<Duration>,
    first: Vec<Duration>,
    answer: Vec<Duration>,
    stop: Vec<Duration>,
    check: Vec<Duration>,
    txn: Vec<Duration>,
    takeover: Vec<Duration>,
    promote: Vec<Duration>,
}

/// `POST path` with the bed's credentials; the status code.
fn post(c: &TestCluster, i: usize, path: &str, body: &str) -> Result<u16, String> {
    use base64::Engine as _;
    let token =
        base64::engine::general_purpose::STANDARD.encode(format!("{API_USER}:{}", c.passwords.api));
    let addr = std::net::SocketAddr::from((c.addr(i), c.api_port(i)));
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(40)))
        .map_err(|e| e.to_string())?;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    etcdkv::http_status(&out).ok_or_else(|| format!("no status in {out:?}"))
}

/// The `[12.345s]` stamp of the last line of `log` (from byte `from`) holding `what`.
fn stamp(log: &str, from: usize, what: &str) -> Option<f64> {
    log.get(from..)?
        .lines()
        .rev()
        .find(|l| l.contains(what))
        .and_then(|l| l.strip_prefix('[')?.split_once("s]")?.0.parse().ok())
}

fn secs(a: Option<f64>, b: Option<f64>) -> Option<Duration> {
    let (a, b) = (a?, b?);
    (b >= a).then(|| Duration::from_secs_f64(b - a))
}

fn ready(c: &TestCluster, p: usize) -> Result<(), String> {
    c.wait_replicas(p, &[], REJOIN)?;
    wait_for(REJOIN, Duration::from_millis(50), || {
        (0..c.node_count())
            .filter(|&i| i != p)
            .all(|i| {
                c.member(c.name(i)).is_some_and(|m| {
                    m["pg_healthy"].as_bool() == Some(true) && m["role"].as_str() == Some("replica")
                })
            })
            .then_some(())
    })
    .ok_or("replicas' member keys never said running")?;
    std::thread::sleep(3 * c.opts.loop_wait);
    Ok(())
}

fn round(c: &mut TestCluster, p: usize, label: &str, m: &mut Measured) -> Result<usize, String> {
    ready(c, p)?;
    let np = (p + 1) % c.node_count();
    let mut probe = c.write_probe(p, Duration::from_millis(20))?;
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        (probe.ack_count(p) > 0).then_some(())
    })
    .ok_or("the probe got no write through")?;
    std::thread::sleep(Duration::from_millis(300));
    let (from_old, from_new) = (c.agent_log(p).len(), c.agent_log(np).len());
    let t0 = Instant::now();
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}"}}"#,
        c.name(p),
        c.name(np)
    );
    let code = post(c, p, "/switchover", &body)?;
    let answer = t0.elapsed();
    if code != 200 {
        return Err(format!(
            "POST /switchover answered {code}{}",
            c.logs_tail(30)
        ));
    }
    let first = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t0)
    })
    .ok_or_else(|| format!("{} took no write{}", c.name(np), c.logs_tail(30)))?;
    probe.stop(Duration::from_secs(2));
    probe.check_no_overlap(p, np, t0)?;
    let last_old = probe.last_ack(p).ok_or("the old primary took no write")?;
    let gap = first.acked.unwrap_or(t0) - last_old.acked.unwrap_or(t0);
    wait_for(REJOIN, Duration::from_millis(50), || {
        c.is_streaming_replica(p).then_some(())
    })
    .ok_or_else(|| format!("{} does not stream again{}", c.name(p), c.logs_tail(30)))?;
    let (old, new) = (c.agent_log(p), c.agent_log(np));
    if old[from_old.min(old.len())..].contains("Rewind") {
        return Err(format!("{} rewound after a switchover", c.name(p)));
    }
    let t_stop = stamp(&old, from_old, "stopping PostgreSQL (fast shutdown)");
    let t_stopped = stamp(&old, from_old, "PostgreSQL stopped; checking");
    let t_checked = stamp(
        &old,
        from_old,
        "no process of PostgreSQL remains; publishing",
    );
    let t_released = stamp(&old, from_old, "with the release marker");
    let t_won = stamp(&new, from_new, "promoting: won the leader key");
    let t_promoted = stamp(&new, from_new, "promoted PostgreSQL at epoch");
    let phases = [
        secs(t_stop, t_stopped),
        secs(t_stopped, t_checked),
        secs(t_checked, t_released),
        secs(t_released, t_won),
        secs(t_won, t_promoted),
    ];
    m.gap.push(gap);
    m.first.push(first.acked.unwrap_or(t0) - t0);
    m.answer.push(answer);
    for (v, d) in [
        &mut m.stop,
        &mut m.check,
        &mut m.txn,
        &mut m.takeover,
        &mut m.promote,
    ]
    .into_iter()
    .zip(phases)
    {
        if let Some(d) = d {
            v.push(d);
        }
    }
    let ms = |d: Option<Duration>| {
        d.map_or("?".to_string(), |d| {
            format!("{:.0}", d.as_secs_f64() * 1000.0)
        })
    };
    println!(
        "switchover {label}: {} -> {}: write gap {:.3} s, answered {:.3} s; ms: stop {}, check {}, \
         marker txn {}, takeover {}, promote {}",
        c.name(p),
        c.name(np),
        gap.as_secs_f64(),
        answer.as_secs_f64(),
        ms(phases[0]),
        ms(phases[1]),
        ms(phases[2]),
        ms(phases[3]),
        ms(phases[4]),
    );
    Ok(np)
}

fn run(m: &mut Measured) -> Result<(), String> {
    let rounds = harness::env_num("TENURE_BENCH_SWITCHOVER_ROUNDS", 10) as usize;
    let mut opts = ClusterOptions::new(env!("CARGO_BIN_EXE_tenure"));
    opts.tag = "bench-switchover".into();
    opts.scope = "bench-switchover".into();
    opts.log_level = Some("info".into());
    let mut c = TestCluster::start(opts)?;
    let mut p = c.settled(BOOT)?;
    for r in 1..=rounds {
        p = round(&mut c, p, &format!("{r}/{rounds}"), m)?;
    }
    c.check_agents()
}

fn report(m: &Measured) {
    let mut t = Table::new(&STATS_HEAD);
    let rows: [(&str, &[Duration]); 8] = [
        ("write gap (old last ack -> new first ack)", &m.gap),
        ("request -> first acked write on the new", &m.first),
        ("request -> API answer 200", &m.answer),
        ("old: fast stop (pg_ctl stop -m fast)", &m.stop),
        ("old: no-process check (fence)", &m.check),
        ("old: marker txn + delete + revoke", &m.txn),
        ("new: released -> won the key", &m.takeover),
        ("new: won -> pg_promote() returned", &m.promote),
    ];
    for (name, d) in rows {
        if let Some(s) = Stats::of_durations(d) {
            t.row(stats_row(name, &s));
        }
    }
    println!();
    println!(
        "{} switchovers through POST /switchover on one cluster (ttl 7 s, loop_wait 0.5 s, \
         no watchdog); phases from the agents' log stamps (ms resolution)",
        m.gap.len()
    );
    print!("{}", t.render());
}
