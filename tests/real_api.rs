//! Issue 8 finding 1 on real parts: hostile HTTP clients at a leader's API must never
//! delay its renewals or its fence (DESIGN §5 "Order of service", S1).
//!
//! The clients: connections that send nothing, clients that send a byte a second,
//! and a flood of connection attempts, all against the leader's API on loopback.
//! Then the leader is cut off from etcd (its relays hold every byte), so it must
//! fence by `F`, with no writable old primary after the new one's first write; and,
//! in normal operation under the same load, every renewal stays on its schedule.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{FAILOVER, REJOIN, one_primary_at_the_end, probe_on, settled};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

/// Clients that do everything an HTTP client can do to hold a server, bounded in
/// count and time, stopped (and joined) on drop.
struct Hostile {
    stop: Arc<AtomicBool>,
    attempts: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

/// Connection attempts of the flood, at most (issue 9's hostile-HTTP figure).
const FLOOD_MAX: u64 = 5_000;
/// Longest a hostile run lasts, whatever the test does.
const HOSTILE_MAX: Duration = Duration::from_secs(90);

impl Hostile {
    fn start(addr: SocketAddr) -> Hostile {
        let stop = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        let t0 = Instant::now();
        let running = {
            let stop = Arc::clone(&stop);
            move || !stop.load(Ordering::Relaxed) && t0.elapsed() < HOSTILE_MAX
        };
        // 40 connections that send nothing (more than the server keeps open), each
        // reopened when the server closes it at its deadline.
        {
            let running = running.clone();
            threads.push(std::thread::spawn(move || {
                let mut idle: Vec<TcpStream> = Vec::new();
                while running() {
                    idle.retain(|s| {
                        let mut b = [0u8; 1];
                        s.set_nonblocking(true).is_ok()
                            && matches!(s.peek(&mut b), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    });
                    while idle.len() < 40 {
                        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                            Ok(s) => idle.push(s),
                            Err(_) => break,
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }));
        }
        // Four clients sending a request a byte a second.
        for _ in 0..4 {
            let running = running.clone();
            threads.push(std::thread::spawn(move || {
                let req = b"GET /primary HTTP/1.1\r\nHost: x\r\n\r\n";
                while running() {
                    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                    else {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    for b in req {
                        if !running() || s.write_all(&[*b]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }));
        }
        // A flood: a new connection every 2 ms that sends nothing and is dropped
        // after 0.5 s, up to FLOOD_MAX attempts.
        {
            let running = running.clone();
            let attempts = Arc::clone(&attempts);
            threads.push(std::thread::spawn(move || {
                let mut open: std::collections::VecDeque<(Instant, TcpStream)> = Default::default();
                while running() && attempts.load(Ordering::Relaxed) < FLOOD_MAX {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                        open.push_back((Instant::now(), s));
                    }
                    while open
                        .front()
                        .is_some_and(|(t, _)| t.elapsed() > Duration::from_millis(500))
                    {
                        open.pop_front();
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }));
        }
        Hostile {
            stop,
            attempts,
            threads,
        }
    }

    fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn api_addr(c: &TestCluster, i: usize) -> SocketAddr {
    SocketAddr::from((c.addr(i), c.api_port(i)))
}

/// `(CLOCK_BOOTTIME seconds)` of every line of `log` containing `needle`.
fn stamps(log: &str, needle: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.strip_prefix('[')?.split_once("s]")?.0.trim().parse().ok())
        .collect()
}

/// The leader cut off from etcd while its API is under attack, no watchdog: with
/// ttl 10 and `loop_wait` 3 s, `F = s + ttl - (L_w + R + 1 s) = s + 5.75` and `F - B
/// = s + 4.75` falls between two ticks (s + 3, s + 6), so a loop that let a
/// connection hold it would fence at the next tick, after `F` (the order the old
/// loop had). The fence must start by `F - B` and complete by `F`. (ttl 10: at 7
/// S6(c) refuses loop_wait 3 without a watchdog, L_w + R + B >= ttl - (L_w + R + 1).)
#[test]
fn real_hostile_api_cannot_delay_the_fence() {
    let mut opts = common::options("api", "fence");
    opts.etcd_relays = true;
    opts.ttl = 10;
    opts.loop_wait = Duration::from_secs(3);
    opts.safety_margin = Duration::from_millis(1500);
    let mut c = common::start(opts);
    let p = settled(&mut c);
    let mut probe = probe_on(&c, p);
    let hostile = Hostile::start(api_addr(&c, p));
    // Let the attack take hold before the cut.
    std::thread::sleep(Duration::from_secs(3));
    let log_from = c.agent_log(p).len();
    let t0 = Instant::now();
    c.hold_etcd(p).expect("cut the leader off from etcd");

    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    let first_new = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t0)
    })
    .unwrap_or_else(|| panic!("{} acknowledged no probe write", c.name(np)));
    let flood = hostile.attempts();
    drop(hostile);
    c.release_etcd(p).expect("heal");
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("after the heal: {e}"));
    one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));

    // Invariant (a).
    probe.check_no_overlap(p, np, t0).unwrap();
    let last_old = probe.last_ack(p).and_then(|a| a.acked).expect("acks on p");
    assert!(
        last_old < first_new.sent,
        "old primary acked after the new one's first write"
    );

    // S1 on the agent's own clock and numbers: its fence reason names F.
    let log = c.agent_log(p)[log_from..].to_string();
    let started = stamps(&log, "fencing PostgreSQL")
        .first()
        .copied()
        .unwrap_or_else(|| panic!("{} never fenced{}", c.name(p), c.logs_tail(40)));
    let done = stamps(&log, "fence: Complete")
        .first()
        .copied()
        .unwrap_or_else(|| panic!("the fence never completed{}", c.logs_tail(40)));
    let f = log
        .split_once("fence deadline F = ")
        .and_then(|(_, r)| r.split_once('s'))
        .and_then(|(n, _)| n.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("fence reason names no F{}", c.logs_tail(40)));
    let b = c.opts.demote_budget.as_secs_f64();
    assert!(
        done <= f,
        "the fence completed at {done:.3}, after F = {f:.3} (S1){}",
        c.logs_tail(40)
    );
    println!(
        "hostile API, leader cut off: fence started {:+.3} s from F - B, completed {:.3} s \
         before F; {flood} flood connection attempts; new primary {}",
        started - (f - b),
        f - done,
        c.name(np)
    );
}

/// In normal operation the same attack changes nothing: no failover, every renewal
/// tick within `L_w + R` of the previous one (S6 d), and the API answers afterwards;
/// garbage and an oversized head get their error answers.
#[test]
fn real_hostile_api_leaves_renewals_on_time() {
    let mut opts = common::options("api", "steady");
    // Every renewal tick's reason is judged below: unchanged ticks log at `debug`.
    opts.log_level = Some("debug".into());
    let mut c = common::start(opts);
    let p = settled(&mut c);
    let key = c.leader_key().expect("leader key");
    let pm = c.postmaster_pid(p);
    let log_from = c.agent_log(p).len();
    let hostile = Hostile::start(api_addr(&c, p));
    common::no_failover_for(&c, p, &key, pm, Duration::from_secs(15));
    let flood = hostile.attempts();
    drop(hostile);

    let log = c.agent_log(p)[log_from..].to_string();
    assert!(
        !log.contains("loop overrun")
            && !log.contains("over its budget")
            && !log.contains("DEADLINE_OVERRUN"),
        "the loop fell behind under the attack{}",
        c.logs_tail(40)
    );
    // Each renewal tick logs the leader's reason: consecutive ones at most
    // L_w + R apart (the renewal is sent at its tick and done within R).
    let ticks = stamps(&log, "leader with the lock, lease valid");
    assert!(ticks.len() > 10, "only {} ticks logged", ticks.len());
    let bound = (c.opts.loop_wait + c.opts.retry_timeout).as_secs_f64();
    let worst = ticks.windows(2).map(|w| w[1] - w[0]).fold(0.0f64, f64::max);
    assert!(
        worst <= bound,
        "renewal ticks {worst:.3} s apart, over L_w + R = {bound:.3} s{}",
        c.logs_tail(40)
    );
    // The API answers again, and answers bad requests with errors.
    let ok = wait_for(Duration::from_secs(5), Duration::from_millis(100), || {
        (c.api_get(p, "/primary") == Some(200)).then_some(())
    });
    assert!(ok.is_some(), "/primary on the leader no longer answers 200");
    let raw = |bytes: &[u8]| -> String {
        let mut s =
            TcpStream::connect_timeout(&api_addr(&c, p), Duration::from_secs(1)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let _ = s.write_all(bytes);
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    assert!(raw(b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    let mut big = b"GET /primary HTTP/1.1\r\nX: ".to_vec();
    big.resize(1 << 20, b'a');
    assert!(raw(&big).starts_with("HTTP/1.1 431"));
    println!(
        "hostile API in normal operation: worst tick gap {worst:.3} s (bound {bound:.3} s), {flood} flood connection attempts"
    );
}

/// The same attack with a stand-in watchdog (W = 3 at the bed's ttl 7): the fence,
/// which fits before `F = last_pet + W`, completes and disarms; the device never
/// fires (no reset where a clean fence was due).
#[test]
fn real_hostile_api_with_a_watchdog_fences_cleanly() {
    let mut opts = common::options("api", "wd");
    opts.etcd_relays = true;
    opts.watchdog = (0..3)
        .map(|_| tenure::testbed::cluster::NodeWatchdog::with_standin("required"))
        .collect();
    let mut c = common::start(opts);
    let p = settled(&mut c);
    let mut probe = probe_on(&c, p);
    let hostile = Hostile::start(api_addr(&c, p));
    std::thread::sleep(Duration::from_secs(3));
    let log_from = c.agent_log(p).len();
    let t0 = Instant::now();
    c.hold_etcd(p).expect("cut the leader off from etcd");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    drop(hostile);
    let log = c.agent_log(p)[log_from..].to_string();
    assert!(
        log.contains("fence: Complete"),
        "no complete fence{}",
        c.logs_tail(40)
    );
    assert!(
        log.contains("WATCHDOG_DISARMED"),
        "the device was not disarmed{}",
        c.logs_tail(40)
    );
    let fired = c.standin(p).and_then(|s| s.fired());
    assert!(
        fired.is_none(),
        "the leader's watchdog fired: {fired:?}{}",
        c.logs_tail(40)
    );
    c.release_etcd(p).expect("heal");
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("after the heal: {e}"));
    one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));
    probe.check_no_overlap(p, np, t0).unwrap();
}
