//! End-to-end tests of the watchdog backstop (DESIGN S1, S2, S5, S6): three real
//! agents with real etcd and PostgreSQL, each node with a FUSE stand-in watchdog
//! (`examples/wdt_standin.rs`) that "resets the host" through the node's freezer
//! cgroup, or with a test-owned systemd `NOTIFY_SOCKET`.
//!
//! Timing (DESIGN §6): ttl 7, loop_wait 0.5, retry_timeout 0.25, safety_margin 0.5,
//! demote_budget 1.0: the agent requests W = 3 (top of the S6 range), `H = s + 6.5`,
//! `F = last_pet + W`. The only time bounds asserted are the contract's (fired
//! before `H`, disarmed before `F`); every other wait is a generous limit. `H` is
//! bounded from outside, conservatively: a pet at `t` follows the renewal it proves
//! (sent at `s >= t - R` when it came back within its deadline) and is only allowed
//! when `t + 2W <= H`, so `H >= t + min(ttl - M - R, 2W)`.
//!
//! Needs root, etcd-server, postgresql-15, fuse3 and the stand-in example built
//! (`cargo build --examples`).

mod common;

use std::time::Duration;

use common::{BOOT, Clocks, FAILOVER, gap, secs, settled};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure::clock;
use tenure::core::time::Instant;
use tenure::testbed::cluster::{ClusterOptions, NodeWatchdog, StandinSettings, TestCluster};
use tenure::testbed::wait_for;

const W: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(7);
const M: Duration = Duration::from_millis(500);
const R: Duration = Duration::from_millis(250);
const B: Duration = Duration::from_secs(1);

fn opts(tag: &str, wd: Vec<NodeWatchdog>) -> ClusterOptions {
    let mut o = common::options("wde", tag);
    o.nodes = wd.len().max(3);
    o.watchdog = wd;
    o
}

fn bed(tag: &str, wd: Vec<NodeWatchdog>) -> TestCluster {
    common::start(opts(tag, wd))
}

/// The conservative lower bound of `H` from a pet at `t` (module doc).
fn horizon_floor(t: Instant) -> Instant {
    t.add((TTL - M - R).min(W + W))
}

fn wait_replicas(c: &TestCluster, p: usize, skip: &[usize]) {
    c.wait_replicas(p, skip, BOOT)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn signal(pid: u32, s: Signal) {
    kill(Pid::from_raw(pid as i32), s).unwrap_or_else(|e| panic!("{s} to {pid}: {e}"));
}

/// SIGCONTs what it stopped when dropped, so a failing test leaves nothing stopped.
struct Stopped(Vec<u32>);

impl Stopped {
    fn stop(pids: Vec<u32>) -> Stopped {
        for &p in &pids {
            signal(p, Signal::SIGSTOP);
        }
        Stopped(pids)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &p in &self.0 {
            let _ = kill(Pid::from_raw(p as i32), Signal::SIGCONT);
        }
    }
}

/// `(instant, event, details)` of node `i`'s stand-in.
fn events(c: &TestCluster, i: usize) -> Vec<(Instant, String, String)> {
    c.standin(i)
        .unwrap_or_else(|| panic!("{} has no stand-in", c.name(i)))
        .event_list()
}

fn opens(c: &TestCluster, i: usize) -> usize {
    events(c, i).iter().filter(|(_, e, _)| e == "open").count()
}

/// The device's first open was the start-up check: opened, then at once disarmed
/// (no other open in between).
fn checked_first(c: &TestCluster, i: usize) -> bool {
    let ev = events(c, i);
    let mut seq = ev
        .iter()
        .filter(|(_, e, _)| e == "open" || e == "disarm")
        .map(|(_, e, _)| e.as_str());
    seq.next() == Some("open") && seq.next() == Some("disarm")
}

/// Opens after the start-up check's (the first open, disarmed at once).
fn opens_after_check(c: &TestCluster, i: usize) -> usize {
    let ev = events(c, i);
    let first_disarm = ev.iter().position(|(_, e, _)| e == "disarm");
    ev.iter()
        .skip(first_disarm.map_or(0, |d| d + 1))
        .filter(|(_, e, _)| e == "open")
        .count()
}

fn pings_after(c: &TestCluster, i: usize, after: Instant) -> Vec<(Instant, String)> {
    events(c, i)
        .into_iter()
        .filter(|(t, e, _)| e == "ping" && *t > after)
        .map(|(t, _, d)| (t, d))
        .collect()
}

/// The last ping at or before `at`.
fn last_ping_before(c: &TestCluster, i: usize, at: Instant) -> Option<Instant> {
    events(c, i)
        .into_iter()
        .filter(|(t, e, _)| e == "ping" && *t <= at)
        .map(|(t, _, _)| t)
        .next_back()
}

/// When the stand-in's "host reset" had stopped every process of node `i`
/// (`stopped_ns=` of its `host-reset` event: frozen or in SIGSTOP, before the
/// SIGKILL). The firing is the decision; this is the instant a real reset
/// stands for, a few milliseconds later.
fn host_stopped(c: &TestCluster, i: usize) -> Option<Instant> {
    events(c, i)
        .into_iter()
        .filter(|(_, e, _)| e == "host-reset")
        .find_map(|(_, _, d)| {
            let ns = d.split(' ').find_map(|w| w.strip_prefix("stopped_ns="))?;
            Some(Instant::from_nanos(ns.parse().ok()?))
        })
}

/// Wait until the leader `p` has armed its device (an open after the start-up
/// check's, and a ping).
fn wait_armed(c: &TestCluster, p: usize) {
    let ok = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
        (opens_after_check(c, p) >= 1).then_some(())?;
        c.standin(p)?.last_ping()
    });
    assert!(
        ok.is_some(),
        "leader {} never pinged its stand-in: {}{}",
        c.name(p),
        c.standin(p).map(|s| s.events()).unwrap_or_default(),
        c.logs_tail(30)
    );
}

/// Block until node `i`'s stand-in logs a ping after `after`; its instant.
fn next_ping(c: &TestCluster, i: usize, after: Instant) -> Instant {
    wait_for(Duration::from_secs(5), Duration::from_millis(1), || {
        pings_after(c, i, after).first().map(|(t, _)| *t)
    })
    .unwrap_or_else(|| panic!("no ping on {} within 5 s{}", c.name(i), c.logs_tail(20)))
}

fn wait_log(c: &TestCluster, i: usize, needle: &str, limit: Duration) -> bool {
    wait_for(limit, Duration::from_millis(50), || {
        c.agent_log(i).contains(needle).then_some(())
    })
    .is_some()
}

// ---------------------------------------------------------------------------------

/// S1/S2: a frozen leader's host is reset by its watchdog before `H`, and the new
/// primary's first acknowledged write was sent after that reset.
#[test]
fn real_wd_frozen_leader_is_reset_before_horizon() {
    let mut c = bed("wdfrozen", vec![NodeWatchdog::with_standin("required"); 3]);
    let p = settled(&mut c);
    wait_armed(&c, p);
    let mut probe = c.write_probe(p, Duration::from_millis(20)).expect("probe");
    std::thread::sleep(Duration::from_millis(500));

    let clocks = Clocks::now();
    let pid = c.agent_pid(p).expect("leader agent");
    let _stopped = Stopped::stop(vec![pid]);
    let stopped_at = clock::now();

    let (fired_at, reason) = c
        .standin(p)
        .expect("stand-in")
        .wait_fired(Duration::from_secs(15))
        .unwrap_or_else(|| {
            panic!(
                "stand-in of the frozen leader {} never fired: {}{}",
                c.name(p),
                c.standin(p).map(|s| s.events()).unwrap_or_default(),
                c.logs_tail(30)
            )
        });
    let last_ping = last_ping_before(&c, p, fired_at).expect("a ping before the firing");
    let h = horizon_floor(last_ping);
    println!(
        "frozen leader: stop at last_ping {:+.3} s; fired at last_ping + {:.3} s; H >= last_ping + {:.3} s; margin {:.3} s ({reason})",
        gap(last_ping, stopped_at),
        gap(last_ping, fired_at),
        gap(last_ping, h),
        gap(fired_at, h)
    );
    assert!(
        fired_at < h,
        "S1: fired {:.3} s after H's lower bound",
        gap(h, fired_at)
    );
    assert!(c.pg_pids(p).is_empty(), "the reset left PostgreSQL running");
    let stopped = host_stopped(&c, p)
        .unwrap_or_else(|| panic!("no host-reset record: {}", c.standin(p).unwrap().events()));
    println!(
        "frozen leader's host stopped {:.3} ms after the firing",
        gap(fired_at, stopped) * 1e3
    );
    assert!(
        stopped < h,
        "S1: the host stopped {:.3} s after H's lower bound",
        gap(h, stopped)
    );

    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)));
    let stopped_mono = clocks.mono_of(stopped);
    let first = wait_for(Duration::from_secs(15), Duration::from_millis(20), || {
        probe.first_ack_after(np, clocks.mono_of(stopped_at))
    })
    .unwrap_or_else(|| panic!("new primary {} acknowledged no write", c.name(np)));
    probe.stop(Duration::from_secs(2));
    let first_sent = clocks.boot_of(first.sent);
    println!(
        "new primary {}: first acknowledged write sent {:.3} s after the reset",
        c.name(np),
        gap(stopped, first_sent)
    );
    assert!(
        first_sent > stopped,
        "the new primary's first acknowledged write was sent {:.3} s BEFORE the old host stopped",
        gap(first_sent, stopped)
    );
    // Judged by when a write was sent, not when its answer was read: a commit
    // made a moment before the host stopped can be read by the probe after it
    // (CI once saw one, #153, read in the few milliseconds between the firing
    // and the freeze). A write sent after every process of the host stopped
    // can only be acknowledged if the reset did not stop it.
    let late: Vec<_> = probe
        .attempts(p)
        .into_iter()
        .filter(|a| a.acked.is_some() && a.sent >= stopped_mono)
        .collect();
    assert!(
        late.is_empty(),
        "old primary acknowledged {} writes sent after its host stopped, first #{}",
        late.len(),
        late[0].seq
    );
    probe
        .check_no_overlap(p, np, clocks.mono_of(stopped_at))
        .unwrap();
}

/// S1: a clean stop disarms (magic close); replicas open the device only for
/// the check at start-up (opened, read back, disarmed at once: agent/wdcheck.rs)
/// until one wins the key (S4/S3: it is armed only after adopting or winning).
#[test]
fn real_wd_clean_stop_disarms_and_replicas_only_check() {
    let mut c = bed("wdclean", vec![NodeWatchdog::with_standin("required"); 3]);
    let p = settled(&mut c);
    wait_armed(&c, p);
    std::thread::sleep(Duration::from_secs(2));
    for i in 0..3 {
        assert!(
            checked_first(&c, i),
            "{} did not check its device first: {}",
            c.name(i),
            c.standin(i).unwrap().events()
        );
    }
    assert_eq!(
        opens_after_check(&c, p),
        1,
        "the leader opened once after its check: {}",
        c.standin(p).unwrap().events()
    );
    for i in (0..3).filter(|&i| i != p) {
        assert_eq!(
            opens_after_check(&c, i),
            0,
            "replica {} opened its device after its check: {}",
            c.name(i),
            c.standin(i).unwrap().events()
        );
    }

    c.term_agent(p, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}{}", c.logs_tail(30)));
    let ev = events(&c, p);
    // The clean stop's, not the check's.
    let disarm = ev
        .iter()
        .rfind(|(_, e, _)| e == "disarm")
        .map(|(t, _, _)| *t)
        .unwrap_or_else(|| {
            panic!(
                "no disarm on a clean stop: {}",
                c.standin(p).unwrap().events()
            )
        });
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    let other = (0..3).find(|&i| i != p && i != np).expect("third node");
    // Let the old leader's device run past several W: it must stay quiet.
    std::thread::sleep(W * 2);
    assert!(
        c.standin(p).unwrap().fired().is_none(),
        "the cleanly stopped leader's device fired: {}",
        c.standin(p).unwrap().events()
    );
    assert!(
        pings_after(&c, p, disarm).is_empty(),
        "pings after the disarm: {}",
        c.standin(p).unwrap().events()
    );
    assert_eq!(
        opens_after_check(&c, np),
        1,
        "the winner opened its device once after its check"
    );
    assert_eq!(
        opens_after_check(&c, other),
        0,
        "the replica that did not win opened its device after its check: {}",
        c.standin(other).unwrap().events()
    );
    println!("clean stop: disarmed; {} took over and armed", c.name(np));
}

/// S1 under `nowayout`: after a fence the device cannot be disarmed, so the agent
/// keeps it open and petted: it never fires.
#[test]
fn real_wd_nowayout_fence_keeps_petting() {
    let st = StandinSettings {
        nowayout: true,
        ..StandinSettings::default()
    };
    let wd = NodeWatchdog {
        mode: Some("required".into()),
        standin: Some(st),
        ..NodeWatchdog::default()
    };
    let mut c = bed("wdnwo", vec![wd; 3]);
    let p = settled(&mut c);
    wait_armed(&c, p);
    c.delete_key("leader").expect("delete leader");
    assert!(
        wait_log(&c, p, "watchdog has nowayout", Duration::from_secs(10)),
        "the leader did not fence and keep its nowayout device{}",
        c.logs_tail(30)
    );
    let fenced = clock::now();
    std::thread::sleep(W * 3);
    assert!(
        c.standin(p).unwrap().fired().is_none(),
        "the nowayout device fired after the fence: {}{}",
        c.standin(p).unwrap().events(),
        c.logs_tail(30)
    );
    let pings = pings_after(&c, p, fenced);
    println!(
        "nowayout: {} pings in {:.1} s after the fence",
        pings.len(),
        secs(W * 3)
    );
    assert!(
        pings.len() >= 3,
        "too few keepalives after the fence: {}",
        c.standin(p).unwrap().events()
    );
    let ev = events(&c, p);
    assert!(
        !ev.iter().any(|(t, e, _)| e == "disarm" && *t > fenced),
        "a nowayout device reported a disarm"
    );
}

/// S6 and S3: refusals. Node 0 (automatic, no device, guardian off) leads and warns; node 1
/// (required, no device) never leads; node 2 (required, read-back W = 1), node 3
/// (required, no magic close, nowayout off) and node 4 (required, a dead device:
/// every open fails with ENODEV) fail the check their agents make at start-up
/// (agent/wdcheck.rs), so after node 0's host crashes none of them even races for
/// the key (issue 13 item 4 follow-up 2: before, each won it, refused the device,
/// released the key, and the next winner waited a promote delay), none promotes,
/// and each says why. The checked devices were handed back disarmed.
#[test]
fn real_wd_refusals() {
    let mut o = opts(
        "wdrefuse",
        vec![
            // Without the guardian: this node shows `automatic` with no fence at all.
            NodeWatchdog::guardian("automatic", "off"),
            NodeWatchdog {
                mode: Some("required".into()),
                ..NodeWatchdog::default()
            },
            NodeWatchdog {
                mode: Some("required".into()),
                standin: Some(StandinSettings {
                    max_timeout_s: 1,
                    ..StandinSettings::default()
                }),
                ..NodeWatchdog::default()
            },
            NodeWatchdog {
                mode: Some("required".into()),
                standin: Some(StandinSettings {
                    magic_close: false,
                    ..StandinSettings::default()
                }),
                ..NodeWatchdog::default()
            },
            NodeWatchdog {
                mode: Some("required".into()),
                standin: Some(StandinSettings {
                    dead: true,
                    ..StandinSettings::default()
                }),
                ..NodeWatchdog::default()
            },
        ],
    );
    o.start_agents = false;
    let mut c = TestCluster::start(o).unwrap_or_else(|e| panic!("test bed: {e}"));
    c.start_agent(0).expect("start pg1");
    let p = c
        .wait_primary(BOOT)
        .unwrap_or_else(|| panic!("pg1 never became primary{}", c.logs_tail(40)));
    assert_eq!(p, 0);
    for i in 1..5 {
        c.start_agent(i).expect("start agent");
    }
    wait_replicas(&c, 0, &[]);
    assert!(
        c.agent_log(0).contains("running WITHOUT a watchdog"),
        "automatic without a device must warn{}",
        c.logs_tail(20)
    );
    let dev1 = c.spec(1).dir.join("watchdog").display().to_string();
    assert!(
        c.agent_log(1).contains(&dev1) && c.agent_log(1).contains("never lead"),
        "pg2's log must name the missing device {dev1}{}",
        c.logs_tail(20)
    );
    // The check at start-up: said at once, and published (`nofailover`).
    for i in 2..5 {
        assert!(
            wait_log(&c, i, "required watchdog unusable", Duration::from_secs(10)),
            "{} did not say its device failed the check{}",
            c.name(i),
            c.logs_tail(30)
        );
        let tagged = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
            let m = c.member(c.name(i))?;
            (m["tags"]["nofailover"] == serde_json::Value::Bool(true)).then_some(())
        });
        assert!(
            tagged.is_some(),
            "{}'s member key does not say nofailover: {:?}",
            c.name(i),
            c.member(c.name(i))
        );
    }

    c.host_crash(0).expect("host crash of pg1");
    let t0 = std::time::Instant::now();
    let mut holders = Vec::new();
    let mut vacant_since: Option<std::time::Instant> = None;
    loop {
        let prim = c.primaries();
        assert!(
            prim.is_empty(),
            "a node without a usable watchdog became primary: {prim:?}{}",
            c.logs_tail(30)
        );
        match c.leader_key() {
            Some((who, _)) => {
                if !holders.contains(&who) {
                    holders.push(who);
                }
            }
            None => {
                vacant_since.get_or_insert_with(std::time::Instant::now);
            }
        }
        let said = (1..5).all(|i| c.agent_log(i).contains("not a candidate"));
        // Three seconds of vacancy (six loops) after every node said it.
        if said && vacant_since.is_some_and(|v| v.elapsed() > Duration::from_secs(3)) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "pg2..pg5 did not all refuse candidacy: holders {holders:?}{}",
            c.logs_tail(30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("leader key holders after the crash: {holders:?}");
    assert!(
        holders.iter().all(|h| h == c.name(0)),
        "a node whose required watchdog failed its check took the key: {holders:?}{}",
        c.logs_tail(30)
    );
    let l2 = c.agent_log(2);
    assert!(
        l2.contains("W = 1 s") && l2.contains("S6"),
        "pg3's refusal must name the numbers{}",
        c.logs_tail(30)
    );
    assert!(
        c.agent_log(3).contains("WDIOF_MAGICCLOSE"),
        "pg4's refusal must name the missing magic close{}",
        c.logs_tail(30)
    );
    assert!(
        c.agent_log(4).contains("ENODEV"),
        "pg5's refusal must name the failed open{}",
        c.logs_tail(30)
    );
    for i in 1..5 {
        assert!(
            !c.agent_log(i).contains("acquired the leader key"),
            "{} raced for the key{}",
            c.name(i),
            c.logs_tail(30)
        );
        assert_ne!(c.is_in_recovery(i), Ok(false), "{} promoted", c.name(i));
    }
    for i in [2, 3] {
        // Opened once, for the check, and handed back disarmed.
        assert_eq!(
            opens(&c, i),
            1,
            "{} opened its device other than for the check: {}",
            c.name(i),
            c.standin(i).unwrap().events()
        );
        let ev = events(&c, i);
        assert!(
            ev.iter().any(|(_, e, _)| e == "disarm"),
            "{}'s checked device was not handed back disarmed: {}",
            c.name(i),
            c.standin(i).unwrap().events()
        );
        assert!(
            c.standin(i).unwrap().fired().is_none(),
            "{}'s checked device fired",
            c.name(i)
        );
    }
    assert!(
        events(&c, 4).iter().any(|(_, e, _)| e == "open-refused"),
        "pg5 never tried its dead device: {}",
        c.standin(4).unwrap().events()
    );
}

/// S2 with systemd's watchdog playing W: READY=1, WATCHDOG=1 at the loop's pace
/// everywhere; with etcd stopped the leader's WATCHDOG=1 stop (no renewal counts)
/// while the replicas' continue.
#[test]
fn real_wd_systemd_notify() {
    let n = NodeWatchdog {
        notify: true,
        watchdog_usec: Some(3_000_000),
        ..NodeWatchdog::default()
    };
    let mut c = bed("wdnotify", vec![n; 3]);
    let p = settled(&mut c);
    std::thread::sleep(Duration::from_secs(3));
    let steady_from = clock::now().sub(Duration::from_secs(3));
    for i in 0..3 {
        let msgs = c.notify_messages(i);
        let ready = msgs.iter().position(|(_, m)| m == "READY=1");
        let first_wd = msgs.iter().position(|(_, m)| m == "WATCHDOG=1");
        assert!(
            ready.is_some() && first_wd.is_some() && ready < first_wd.map(|w| w + 1),
            "{}: READY=1 then WATCHDOG=1 expected: {msgs:?}",
            c.name(i)
        );
        let wds: Vec<Instant> = msgs
            .iter()
            .filter(|(t, m)| m == "WATCHDOG=1" && *t >= steady_from)
            .map(|(t, _)| *t)
            .collect();
        let max_gap = wds.windows(2).map(|w| gap(w[0], w[1])).fold(0.0, f64::max);
        println!(
            "{}: {} WATCHDOG=1 in 3 s, largest gap {max_gap:.3} s",
            c.name(i),
            wds.len()
        );
        assert!(
            wds.len() >= 3,
            "{}: WATCHDOG=1 not at the loop's pace",
            c.name(i)
        );
        assert!(max_gap < secs(W), "{}: a gap of W or more", c.name(i));
    }

    let etcd = c.etcd_pids();
    assert_eq!(etcd.len(), 3);
    let stopped = Stopped::stop(etcd);
    let stop_at = clock::now();
    std::thread::sleep(Duration::from_secs(6));
    let msgs: Vec<Instant> = c
        .notify_messages(p)
        .into_iter()
        .filter(|(_, m)| m == "WATCHDOG=1")
        .map(|(t, _)| t)
        .collect();
    // The leader's last WATCHDOG=1 as leader: the one before its first silence
    // longer than 1 s that starts around or after the stop (after a complete fence
    // it may send again, as a node whose PostgreSQL cannot accept writes).
    let near = stop_at.sub(Duration::from_secs(1));
    let idx = msgs
        .windows(2)
        .position(|w| w[0] >= near && gap(w[0], w[1]) > 1.0)
        .or_else(|| {
            msgs.last()
                .filter(|&&t| t >= near && gap(t, clock::now()) > 1.0)
                .map(|_| msgs.len() - 1)
        })
        .unwrap_or_else(|| {
            panic!(
                "the leader never stopped sending WATCHDOG=1 without renewals: {:?}",
                msgs.iter().map(|t| gap(stop_at, *t)).collect::<Vec<_>>()
            )
        });
    let last = msgs[idx];
    // Every counted renewal was sent before etcd stopped: H < stop + ttl - M.
    let h_ceiling = stop_at.add(TTL - M);
    println!(
        "leader {}: last WATCHDOG=1 {:+.3} s from the etcd stop; last + 2W is {:.3} s before H's upper bound (brief's bound: H >= last + {:.3} s); next WATCHDOG=1 {:?}",
        c.name(p),
        gap(stop_at, last),
        gap(last.add(W * 2), h_ceiling),
        gap(last, horizon_floor(last)),
        msgs.get(idx + 1).map(|t| gap(last, *t))
    );
    assert!(
        last.add(W * 2) <= h_ceiling,
        "S2: a WATCHDOG=1 at stop {:+.3} s leaves less than 2W before H",
        gap(stop_at, last)
    );
    for i in (0..3).filter(|&i| i != p) {
        let after = c
            .notify_messages(i)
            .iter()
            .filter(|(t, m)| m == "WATCHDOG=1" && *t > stop_at.add(Duration::from_secs(1)))
            .count();
        assert!(
            after >= 4,
            "replica {} stopped sending WATCHDOG=1 during the etcd outage ({after})",
            c.name(i)
        );
    }
    drop(stopped);
}

/// The shipped unit's environment (issue 11): `NOTIFY_SOCKET`, `WATCHDOG_USEC` from
/// `systemd/tenure.service`'s `WatchdogSec=` (13 s, which breaks S6(b) at this
/// bed's ttl 7) and `WATCHDOG_PID`. Every agent starts, replaces the unit's timeout
/// with its own `W` = 3 s (`WATCHDOG_USEC=3000000`) before `READY=1`, and keeps
/// `WATCHDOG=1` within `W` from then on, through the leader's host crash and the
/// failover; the crashed node's new agent does the same. Before the agent set
/// its own timeout it refused to start under this unit at ttl 7.
#[test]
fn real_wd_unit_environment() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/tenure.service"
    ))
    .expect("systemd/tenure.service");
    assert!(
        common::unit_watchdog_usec(&unit) > W.as_micros() as u64,
        "the shipped WatchdogSec= is above this timing's W: the case under test"
    );
    let mut c = bed("wdunit", vec![common::unit_environment(&unit); 3]);
    let p = settled(&mut c);
    common::check_unit_notify(&c, W);
    c.host_crash(p).expect("host crash of the leader");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    assert_ne!(np, p);
    c.start_agent(p).expect("restart the crashed node's agent");
    settled(&mut c);
    common::check_unit_notify(&c, W);
}

/// S5: an agent stopped right after a ping and woken between `F - B` and `F` fences
/// at once, before any call; the fence completes and the device is disarmed before
/// `F`, so it never fires.
#[test]
fn real_wd_short_stall_fences_before_f() {
    let mut c = bed("wdstall", vec![NodeWatchdog::with_standin("required"); 3]);
    let p = settled(&mut c);
    wait_armed(&c, p);
    let pid = c.agent_pid(p).expect("leader agent");
    let ping = next_ping(&c, p, clock::now());
    let stopped = Stopped::stop(vec![pid]);
    let stop_at = clock::now();
    let f = ping.add(W);
    let wake = f.sub(B / 2);
    std::thread::sleep(clock::now().until(wake));
    let cont_at = clock::now();
    drop(stopped);
    assert!(
        !pings_after(&c, p, ping).iter().any(|(t, _)| *t < stop_at),
        "a ping slipped in before the stop: the stall is not measured from it"
    );
    let disarm = wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
        events(&c, p)
            .into_iter()
            .find(|(t, e, _)| e == "disarm" && *t > ping)
            .map(|(t, _, _)| t)
    });
    std::thread::sleep(W);
    let fired = c.standin(p).unwrap().fired();
    println!(
        "stall: stopped {:.3} s after the ping, woke at F - {:.3} s, disarmed at F - {:?} s",
        gap(ping, stop_at),
        gap(cont_at, f),
        disarm.map(|d| gap(d, f))
    );
    assert!(
        cont_at < f && cont_at >= f.sub(B),
        "the test woke the agent outside [F - B, F)"
    );
    assert!(
        c.agent_log(p).contains("fencing before anything else (S5)"),
        "no S5 fence after the stall{}",
        c.logs_tail(30)
    );
    let disarm = disarm.unwrap_or_else(|| {
        panic!(
            "never disarmed after the S5 fence: {}{}",
            c.standin(p).unwrap().events(),
            c.logs_tail(30)
        )
    });
    assert!(disarm < f, "S1: disarmed {:.3} s after F", gap(f, disarm));
    assert!(fired.is_none(), "the device fired: {fired:?}");
    assert!(
        pings_after(&c, p, ping)
            .iter()
            .all(|(t, d)| *t >= disarm || d.starts_with("write")),
        "a pet between the stall and the disarm: {}",
        c.standin(p).unwrap().events()
    );
}

/// S2: an agent killed at the worst moment (no renewal since, the fence about to
/// start) pets once more by dying (the release ping), and the device fires no
/// later than `H`.
#[test]
fn real_wd_crash_at_the_worst_moment() {
    let mut c = bed("wdworst", vec![NodeWatchdog::with_standin("required"); 3]);
    let p = settled(&mut c);
    wait_armed(&c, p);
    let etcd = Stopped::stop(c.etcd_pids());
    let stop_at = clock::now();
    // No renewal can count after the stop; its deadline is R.
    std::thread::sleep(R * 2);
    let last_ping = c.standin(p).unwrap().last_ping().expect("pinged");
    assert!(
        last_ping < stop_at.add(R),
        "a ping {:.3} s after etcd stopped",
        gap(stop_at, last_ping)
    );
    let kill_at = last_ping.add(W).sub(B).sub(Duration::from_millis(100));
    std::thread::sleep(clock::now().until(kill_at));
    let pid = c.agent_pid(p).expect("leader agent");
    assert!(
        pings_after(&c, p, last_ping).is_empty(),
        "a pet without a renewal: {}",
        c.standin(p).unwrap().events()
    );
    let killed = clock::now();
    signal(pid, Signal::SIGKILL);
    let (fired_at, reason) = c
        .standin(p)
        .unwrap()
        .wait_fired(Duration::from_secs(10))
        .unwrap_or_else(|| {
            panic!(
                "the crashed leader's device never fired: {}{}",
                c.standin(p).unwrap().events(),
                c.logs_tail(20)
            )
        });
    let release_ping = pings_after(&c, p, last_ping)
        .into_iter()
        .find(|(_, d)| d.contains("release"));
    let h = horizon_floor(last_ping);
    println!(
        "worst moment: killed at last_ping + {:.3} s, release ping {:?}, fired at last_ping + {:.3} s, H >= last_ping + {:.3} s, margin {:.3} s ({reason})",
        gap(last_ping, killed),
        release_ping.as_ref().map(|(t, _)| gap(last_ping, *t)),
        gap(last_ping, fired_at),
        gap(last_ping, h),
        gap(fired_at, h)
    );
    assert!(
        release_ping.is_some_and(|(t, _)| t >= killed),
        "the dying agent's close did not ping the device"
    );
    assert!(fired_at <= h, "S2: fired {:.3} s after H", gap(h, fired_at));
    assert!(c.pg_pids(p).is_empty(), "the reset left PostgreSQL running");
    drop(etcd);
}

/// S3/S4 (DESIGN §1 step 4, the seed 253898 fix): the leader's agent freezes and its
/// lease is revoked at once, so its PostgreSQL stays writable until its watchdog
/// resets the host (up to `W` after its last pet), and the replica that wins the key
/// must wait out that promote delay. Its agent is killed inside the delay and
/// restarted at once: the restarted agent finds the key its own, but must not
/// promote (adopt and write) before the old host stopped. Whichever node becomes
/// primary (the restarted winner, or another after it gave the key up), its first
/// acknowledged write was sent after the old host stopped.
#[test]
fn real_wd_winner_killed_inside_its_promote_delay_does_not_promote_early() {
    let mut c = bed("wdwinkill", vec![NodeWatchdog::with_standin("required"); 3]);
    let p = settled(&mut c);
    wait_armed(&c, p);
    let (_, old_epoch) = c.leader_key().expect("leader key");
    let mut probe = c.write_probe(p, Duration::from_millis(20)).expect("probe");
    std::thread::sleep(Duration::from_millis(500));

    let clocks = Clocks::now();
    let pid = c.agent_pid(p).expect("leader agent");
    let kv = c.get_kv("leader").expect("leader key");
    assert_ne!(kv.lease, 0, "the leader key has no lease: {kv:?}");
    let _stopped = Stopped::stop(vec![pid]);
    let frozen_at = clock::now();
    common::etcdctl(&c, &["lease", "revoke", &format!("{:x}", kv.lease)])
        .unwrap_or_else(|e| panic!("{e}"));

    // The winner: the first holder of a newer epoch.
    let (winner, epoch) = wait_for(Duration::from_secs(15), Duration::from_millis(5), || {
        let (name, e) = c.leader_key()?;
        (e > old_epoch).then(|| (c.index_of(&name), e))
    })
    .unwrap_or_else(|| panic!("nobody won the revoked key{}", c.logs_tail(30)));
    let q = winner.expect("the winner is a node of the cluster");
    assert_ne!(q, p, "the frozen leader cannot win");
    let killed_at = clock::now();
    let early = probe.first_ack_after(q, clocks.mono_of(frozen_at));
    c.kill_agent(q);
    c.start_agent(q).expect("restart the winner's agent");
    println!(
        "winner {} (epoch {epoch}) killed {:.3} s after the freeze and restarted; acks before the kill: {}",
        c.name(q),
        gap(frozen_at, killed_at),
        early.is_some()
    );

    let (fired_at, reason) = c
        .standin(p)
        .expect("stand-in")
        .wait_fired(Duration::from_secs(15))
        .unwrap_or_else(|| {
            panic!(
                "the frozen leader's stand-in never fired{}",
                c.logs_tail(30)
            )
        });
    let stopped = host_stopped(&c, p).unwrap_or_else(|| panic!("no host-reset record ({reason})"));
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)));
    let first = wait_for(Duration::from_secs(15), Duration::from_millis(20), || {
        probe.first_ack_after(np, clocks.mono_of(frozen_at))
    })
    .unwrap_or_else(|| panic!("new primary {} acknowledged no write", c.name(np)));
    probe.stop(Duration::from_secs(2));
    let first_sent = clocks.boot_of(first.sent);
    let adopted = c.agent_log(q).contains("adopt");
    println!(
        "old host: fired {:.3} s, stopped {:.3} s after the freeze; new primary {} (the restarted winner: {}, its log mentions adoption: {adopted}): first acknowledged write sent {:.3} s after the old host stopped",
        gap(frozen_at, fired_at),
        gap(frozen_at, stopped),
        c.name(np),
        np == q,
        gap(stopped, first_sent)
    );
    assert!(
        first_sent > stopped,
        "S3: the new primary {}'s first acknowledged write was sent {:.3} s BEFORE the old host stopped{}",
        c.name(np),
        gap(first_sent, stopped),
        c.logs_tail(40)
    );
    probe
        .check_no_overlap(p, np, clocks.mono_of(frozen_at))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        early.is_none(),
        "the winner {} acknowledged a write before it was killed: the kill was not inside a promote delay",
        c.name(q)
    );
}

/// S4: an agent killed in a healthy cluster and restarted at once adopts its key,
/// reopens the device (EBUSY retried) and the device never fires.
#[test]
fn real_wd_kill_and_restart_adopts() {
    let mut c = bed("wdadopt", vec![NodeWatchdog::with_standin("required"); 3]);
    let p = settled(&mut c);
    wait_armed(&c, p);
    let (_, epoch) = c.leader_key().expect("leader key");
    let log_before = c.agent_log(p).len();
    let killed = clock::now();
    c.kill_agent(p);
    c.start_agent(p).expect("restart");
    let reopened = wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        events(&c, p)
            .into_iter()
            .find(|(t, e, _)| e == "open" && *t > killed)
            .map(|(t, _, _)| t)
    })
    .unwrap_or_else(|| {
        panic!(
            "the restarted agent never reopened the device: {}{}",
            c.standin(p).unwrap().events(),
            c.logs_tail(30)
        )
    });
    std::thread::sleep(W * 2);
    let fired = c.standin(p).unwrap().fired();
    let busy = events(&c, p)
        .iter()
        .filter(|(t, e, _)| e == "open-refused" && *t > killed)
        .count();
    println!(
        "restart: reopened {:.3} s after the kill ({busy} EBUSY refusals)",
        gap(killed, reopened)
    );
    assert!(
        fired.is_none(),
        "the device fired across the restart: {fired:?}"
    );
    let log = c.agent_log(p)[log_before..].to_string();
    assert!(
        log.to_lowercase().contains("adopt"),
        "the restarted agent did not say it adopted{}",
        c.logs_tail(30)
    );
    assert_eq!(c.leader_key().map(|(_, e)| e), Some(epoch), "epoch changed");
    assert_eq!(c.primary(), Some(p), "the restarted node is not primary");
}
