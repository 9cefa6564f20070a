//! End-to-end tests of the guardian (DESIGN §2 "The guardian", issue 8 finding 12):
//! three real agents with real etcd and PostgreSQL in watchdog mode `automatic`,
//! with no device and no `NOTIFY_SOCKET`, so each agent forks a guardian at
//! start-up.
//!
//! Timing (DESIGN §6): ttl 7, loop_wait 0.5, retry_timeout 0.25, safety_margin 0.5,
//! demote_budget 1.0, so `B_g` = 0.5 (its default), `H = s + 6.5`, `G = s + 6`.
//! The only time bounds asserted are the contract's: the kill of a frozen agent's
//! PostgreSQL begins at `G` and is over by `H = G + B_g` (the `G` the guardian held
//! is in its own log line); a dead agent's PostgreSQL is killed before any `G` could
//! have passed. Every other wait is a generous limit.
//!
//! Needs root, etcd-server and postgresql-15.

mod common;

use std::time::Duration;

use common::{Clocks, FAILOVER, gap, secs, settled};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure::clock;
use tenure::core::time::Instant;
use tenure::testbed::cluster::{ClusterOptions, NodeWatchdog, TestCluster};
use tenure::testbed::wait_for;

const TTL: Duration = Duration::from_secs(7);
const M: Duration = Duration::from_millis(500);
const L_W: Duration = Duration::from_millis(500);
/// `F - s` without a device: `ttl - (L_w + R + 1 s)` (R the bed's 0.25 s), before
/// the horizon `ttl - M` (core::lease, `unwatched_deadline`); `G = F - B_g`.
const F_SPAN: Duration = Duration::from_millis(7000 - 500 - 250 - 1000);
/// `guardian_kill_budget`'s default (0.5 s, below `demote_budget` 1 s).
const B_G: Duration = Duration::from_millis(500);

fn opts(tag: &str, guardian: &str) -> ClusterOptions {
    let mut o = common::options("grd", tag);
    o.watchdog = vec![NodeWatchdog::guardian("automatic", guardian); 3];
    o
}

/// The pid of node `i`'s guardian, from the agent's start-up line.
fn guardian_pid(c: &TestCluster, i: usize) -> Option<u32> {
    let log = c.agent_log(i);
    let at = log.rfind("the guardian (pid ")? + "the guardian (pid ".len();
    log[at..].split(',').next()?.parse().ok()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

/// The `[<secs>s]` stamp (CLOCK_BOOTTIME, ms) of the first line with `needle`
/// after byte `from`, and the line.
fn stamped(log: &str, from: usize, needle: &str) -> Option<(Instant, String)> {
    let line = log.get(from..)?.lines().find(|l| l.contains(needle))?;
    let s: f64 = line
        .strip_prefix('[')?
        .split_once("s]")?
        .0
        .trim()
        .parse()
        .ok()?;
    Some((Instant::from_nanos((s * 1e9) as u64), line.to_string()))
}

/// `G = <secs> s` in a guardian line.
fn g_of(line: &str) -> Option<Instant> {
    let at = line.find("G = ")? + 4;
    let s: f64 = line[at..].split_whitespace().next()?.parse().ok()?;
    Some(Instant::from_nanos((s * 1e9) as u64))
}

/// SIGCONTs what it stopped when dropped, so a failing test leaves nothing stopped.
struct Stopped(Vec<u32>);

impl Stopped {
    fn stop(pids: Vec<u32>) -> Stopped {
        for &p in &pids {
            kill(Pid::from_raw(p as i32), Signal::SIGSTOP).expect("SIGSTOP");
        }
        Stopped(pids)
    }
    fn resume(&mut self) {
        for p in self.0.drain(..) {
            let _ = kill(Pid::from_raw(p as i32), Signal::SIGCONT);
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.resume();
    }
}

/// Settle, find the primary's guardian, and wait until its agent has handed it a
/// `G` (a promotion waits for that, S3) and the probe got a write through.
fn leader_with_guardian(c: &mut TestCluster) -> (usize, u32) {
    let p = settled(c);
    for i in 0..c.node_count() {
        let pid = guardian_pid(c, i)
            .unwrap_or_else(|| panic!("{} started no guardian{}", c.name(i), c.logs_tail(30)));
        assert!(alive(pid), "guardian of {} is not running", c.name(i));
    }
    let gpid = guardian_pid(c, p).expect("the primary's guardian");
    // DESIGN §2: its own session, memory locked (as root here).
    let stat = std::fs::read_to_string(format!("/proc/{gpid}/stat")).expect("stat");
    let session = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .nth(3)
        .map(str::to_string);
    assert_eq!(
        session,
        Some(gpid.to_string()),
        "guardian's session: {stat}"
    );
    let status = std::fs::read_to_string(format!("/proc/{gpid}/status")).expect("status");
    let vmlck = status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .unwrap_or("?")
        .trim()
        .to_string();
    println!(
        "{}'s guardian: pid {gpid}, own session, VmLck {vmlck}",
        c.name(p)
    );
    (p, gpid)
}

/// S1/S5 without a watchdog: the primary's agent alone is SIGSTOPped (its
/// PostgreSQL and its guardian keep running). The guardian kills PostgreSQL from the
/// `G` it holds, and the kill is over by `H = G + B_g`; a replica takes over; no
/// write is acknowledged by the old primary after the new one's first.
#[test]
fn real_guardian_frozen_agent_primary_is_killed_by_g() {
    let mut c = common::start(opts("grdfrozen", "auto"));
    let (p, gpid) = leader_with_guardian(&mut c);
    let mut probe = common::probe_on(&c, p);
    std::thread::sleep(Duration::from_millis(500));
    let log_from = c.agent_log(p).len();

    let clocks = Clocks::now();
    let agent = c.agent_pid(p).expect("agent");
    let mut stopped = Stopped::stop(vec![agent]);
    let stopped_at = clock::now();

    let gone = wait_for(Duration::from_secs(15), Duration::from_millis(2), || {
        c.pg_pids(p).is_empty().then(clock::now)
    })
    .unwrap_or_else(|| {
        panic!(
            "PostgreSQL of the frozen {} survived{}",
            c.name(p),
            c.logs_tail(30)
        )
    });
    // The guardian logs the end of the kill after its last, empty scan: a moment
    // after the test may have seen the processes gone.
    let log = wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        let log = c.agent_log(p);
        stamped(&log, log_from, "killed PostgreSQL:").map(|_| log)
    })
    .unwrap_or_else(|| panic!("no guardian kill lines{}", c.logs_tail(30)));
    let (began, alert) = stamped(&log, log_from, "passed without a newer one")
        .unwrap_or_else(|| panic!("no guardian kill line{}", c.logs_tail(30)));
    let (done, _) = stamped(&log, log_from, "killed PostgreSQL:").expect("kill-complete line");
    let g = g_of(&alert).expect("G in the alert");
    let f = g.add(B_G);
    let s = f.sub(F_SPAN);
    println!(
        "frozen agent: stopped at s {:+.3} s; guardian kill began at G {:+.3} s, over at G {:+.3} s \
         (F = G + {:.1} s, H = F + {:.2} s); seen gone by the test at G {:+.3} s; last counted \
         renewal s = G - {:.2} s",
        gap(s, stopped_at),
        gap(g, began),
        gap(g, done),
        secs(B_G),
        secs(TTL - M - F_SPAN),
        gap(g, gone),
        secs(F_SPAN - B_G),
    );
    assert!(began >= g.sub(Duration::from_millis(1)), "killed before G");
    assert!(
        done <= f,
        "S1: the kill was over {:.3} s after F",
        gap(f, done)
    );
    assert!(
        stopped_at > s,
        "the G the guardian held came from a renewal before the stop"
    );
    assert!(alive(gpid), "the guardian keeps running after a G kill");
    assert!(
        !alert.is_empty() && !log[log_from..].contains("died with deadline"),
        "the kill came from G, not from an agent death"
    );

    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    let first = wait_for(Duration::from_secs(15), Duration::from_millis(20), || {
        probe.first_ack_after(np, clocks.mono_of(stopped_at))
    })
    .unwrap_or_else(|| panic!("new primary {} acknowledged no write", c.name(np)));
    let first_sent = clocks.boot_of(first.sent);
    println!(
        "new primary {}: first acknowledged write sent {:.3} s after the kill was over",
        c.name(np),
        gap(done, first_sent)
    );
    assert!(
        first_sent > done,
        "the new primary's first write was sent before the old PostgreSQL was gone"
    );
    // Judged by when a write was sent: a commit made just before the kill can be
    // read by the probe after `done` (the same race real_watchdog_e2e's frozen
    // leader test met in CI); one sent after every PostgreSQL process was gone
    // can only be acknowledged if the kill missed one.
    let late = probe
        .attempts(p)
        .into_iter()
        .filter(|a| a.acked.is_some() && clocks.boot_of(a.sent) > done)
        .count();
    assert_eq!(
        late, 0,
        "writes sent after the old primary's kill was over were acknowledged"
    );
    probe
        .check_no_overlap(p, np, clocks.mono_of(stopped_at))
        .unwrap_or_else(|e| panic!("{e}"));

    // Thawed, the old agent fences (nothing remains), stands its guardian down and
    // rejoins as a replica.
    stopped.resume();
    common::one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));
    assert!(
        c.agent_log(p)[log_from..].contains("stood down"),
        "the thawed agent did not stand its guardian down{}",
        c.logs_tail(30)
    );
}

/// The agent dies (SIGKILL) while leading: the guardian kills PostgreSQL at once,
/// long before any `G` could have passed, and exits; a replica takes over with no
/// overlap of acknowledged writes.
#[test]
fn real_guardian_agent_killed_kills_postgres_at_once() {
    let mut c = common::start(opts("grdkill", "auto"));
    let (p, gpid) = leader_with_guardian(&mut c);
    let mut probe = common::probe_on(&c, p);
    std::thread::sleep(Duration::from_millis(500));
    let log_from = c.agent_log(p).len();
    assert!(!c.pg_pids(p).is_empty());

    let clocks = Clocks::now();
    let killed_at = clock::now();
    c.kill_agent(p);
    let gone = wait_for(Duration::from_secs(10), Duration::from_millis(1), || {
        c.pg_pids(p).is_empty().then(clock::now)
    })
    .unwrap_or_else(|| panic!("PostgreSQL outlived its agent{}", c.logs_tail(30)));
    // The G pending at the kill came from a renewal at most L_w + R (+ P <= L_w - R)
    // old: it lies at least (F - s) - B_g - 2 L_w after the kill.
    let earliest_g = killed_at.add(F_SPAN - B_G - L_W - L_W);
    println!(
        "agent killed: PostgreSQL gone {:.3} s later (the earliest G: {:.1} s later)",
        gap(killed_at, gone),
        gap(killed_at, earliest_g)
    );
    assert!(
        gone < earliest_g,
        "the kill waited for G instead of the death"
    );
    let log = c.agent_log(p);
    let (_, line) = stamped(&log, log_from, "the agent died with deadline G")
        .unwrap_or_else(|| panic!("no guardian line about the death{}", c.logs_tail(30)));
    assert!(line.contains("at once"), "{line}");
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        (!alive(gpid)).then_some(())
    })
    .unwrap_or_else(|| panic!("the guardian {gpid} did not exit after the kill"));

    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    wait_for(Duration::from_secs(15), Duration::from_millis(20), || {
        probe.first_ack_after(np, clocks.mono_of(killed_at))
    })
    .unwrap_or_else(|| panic!("new primary {} acknowledged no write", c.name(np)));
    probe.stop(Duration::from_secs(2));
    probe
        .check_no_overlap(p, np, clocks.mono_of(killed_at))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A clean shutdown (SIGTERM) of the leader's agent: PostgreSQL is stopped cleanly
/// by the agent, the guardian stands down and exits, nothing is SIGKILLed.
#[test]
fn real_guardian_clean_shutdown_kills_nothing() {
    let mut c = common::start(opts("grdclean", "auto"));
    let (p, gpid) = leader_with_guardian(&mut c);
    let log_from = c.agent_log(p).len();
    let server_log = c.data_dir(p).with_file_name("data.log");
    let slog_from = std::fs::read(&server_log).map(|b| b.len()).unwrap_or(0);

    c.term_agent(p, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}{}", c.logs_tail(30)));
    let log = c.agent_log(p)[log_from..].to_string();
    for kill_line in [
        "killing PostgreSQL",
        "SIGKILLs sent",
        "died with deadline",
        "passed without a newer one",
    ] {
        assert!(
            !log.contains(kill_line),
            "`{kill_line}` in the log of a clean shutdown{}",
            c.logs_tail(30)
        );
    }
    assert!(
        c.pg_pids(p).is_empty(),
        "PostgreSQL still runs after the clean stop"
    );
    assert!(!alive(gpid), "the guardian {gpid} outlived the clean exit");
    assert!(
        log.contains("stood down"),
        "no stand-down{}",
        c.logs_tail(30)
    );
    assert!(
        log.contains("the agent stops cleanly: exiting")
            && log.contains(&format!("guardian (pid {gpid}) stopped (")),
        "the guardian did not exit cleanly{}",
        c.logs_tail(30)
    );
    let slog = std::fs::read(&server_log)
        .map(|b| String::from_utf8_lossy(&b[slog_from.min(b.len())..]).into_owned())
        .unwrap_or_default();
    let last = slog
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.contains("database system is shut down"),
        "the server log does not end with a clean shutdown: {last:?}"
    );
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    println!(
        "clean shutdown: guardian {gpid} exited without a kill; {} took over",
        c.name(np)
    );
}

/// DESIGN §2: in `required` mode (with `guardian = "allow"`) the guardian is the
/// fence; if it dies, the leader treats the fence as gone: it fences, releases the
/// key and never leads again in this run (S3); another node takes over.
#[test]
fn real_guardian_death_in_required_mode_gives_up_leadership() {
    let mut o = opts("grdreq", "allow");
    o.watchdog = vec![NodeWatchdog::guardian("required", "allow"); 3];
    let mut c = common::start(o);
    let (p, gpid) = leader_with_guardian(&mut c);
    let log_from = c.agent_log(p).len();
    kill(Pid::from_raw(gpid as i32), Signal::SIGKILL).expect("SIGKILL the guardian");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    let log = c.agent_log(p)[log_from..].to_string();
    assert!(
        log.contains("the required fence is gone; giving up leadership"),
        "{}",
        c.logs_tail(30)
    );
    assert!(log.contains("fence: Complete"), "{}", c.logs_tail(30));
    assert!(c.agent_exited(p).is_none(), "the agent keeps running");
    common::one_primary_at_the_end(&c, np);
    println!(
        "required guardian killed: {} fenced, {} took over",
        c.name(p),
        c.name(np)
    );
}
