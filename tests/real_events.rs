//! Events, where they go, and hooks (issue 10), end to end: real agents, real etcd
//! and PostgreSQL (DESIGN §6), a test-owned syslog datagram socket (there is no
//! `/dev/log` here), the agents' stderr as journald would see it, `[hooks]`
//! scripts, and the watchdog stand-in's boot status.
//!
//! The failover in each test cuts the leader off from etcd through the bed's relays
//! (loopback only): its renewals fail, it fences by `F - B` (S1), and another node
//! takes over. What is asserted is what arrives and its order, never timings
//! (every wait is a generous limit).
//!
//! Needs root, etcd-server, postgresql-15, and for the last test fuse3 and the
//! stand-in example built (`cargo build --examples`).

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{BOOT, FAILOVER, settled};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure::testbed::cluster::{ClusterOptions, NodeWatchdog, TestCluster};
use tenure::testbed::{scratch_dir, wait_for};

/// A syslog receiver the test owns: every datagram, in arrival order.
struct SyslogSink {
    path: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SyslogSink {
    fn bind(path: PathBuf) -> SyslogSink {
        let sock = UnixDatagram::bind(&path).expect("bind the syslog socket");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, st) = (Arc::clone(&lines), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 8192];
            while !st.load(Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    let s = String::from_utf8_lossy(&buf[..n]).to_string();
                    l.lock().expect("lines").push(s);
                }
            }
        });
        SyslogSink {
            path,
            lines,
            stop,
            thread: Some(thread),
        }
    }

    fn all(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    /// `(facility, severity, message)` of every datagram that parses as RFC 3164
    /// with `tenure[pid]: ` before the message.
    fn parsed(&self) -> Vec<(u8, u8, String)> {
        self.all().iter().filter_map(|l| parse_3164(l)).collect()
    }

    /// The first event `name` from `member` (its severity and message).
    fn event(&self, name: &str, member: &str) -> Option<(u8, String)> {
        self.parsed()
            .into_iter()
            .find(|(_, _, m)| is_event(m, name, member))
            .map(|(_, s, m)| (s, m))
    }

    fn position(&self, name: &str, member: &str) -> Option<usize> {
        self.parsed()
            .iter()
            .position(|(_, _, m)| is_event(m, name, member))
    }
}

impl Drop for SyslogSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn is_event(msg: &str, name: &str, member: &str) -> bool {
    msg.starts_with(&format!("{name} "))
        && (msg.contains(&format!(" member={member} "))
            || msg.ends_with(&format!(" member={member}")))
}

/// `<PRI>Mmm dd hh:mm:ss tenure[pid]: message` → (facility, severity, message).
fn parse_3164(line: &str) -> Option<(u8, u8, String)> {
    let rest = line.strip_prefix('<')?;
    let (pri, rest) = rest.split_once('>')?;
    let pri: u8 = pri.parse().ok()?;
    let (_, msg) = rest.split_once("tenure[")?;
    let (_, msg) = msg.split_once("]: ")?;
    Some((pri >> 3, pri & 7, msg.to_string()))
}

/// The value of `key=` in an event line (bare values only).
fn field<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    msg.split(' ')
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
}

fn options(tag: &str) -> ClusterOptions {
    let mut o = common::options("ev", tag);
    o.etcd_relays = true;
    o
}

/// Cut the leader `p` off from etcd and wait for another primary.
fn fail_over(c: &mut TestCluster, p: usize) -> usize {
    c.hold_etcd(p).expect("cut the leader off from etcd");
    c.wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)))
}

fn wait_until(limit: Duration, what: &str, c: &TestCluster, mut f: impl FnMut() -> bool) {
    let ok = wait_for(limit, Duration::from_millis(50), || f().then_some(()));
    assert!(ok.is_some(), "{what}{}", c.logs_tail(40));
}

/// Issue 10 test 1: a failover's events reach a syslog socket once each, with the
/// table's severities (RFC 5424 numbers inside the RFC 3164 priority), facility
/// daemon, the event's name first and its fields.
#[test]
fn real_events_failover_reaches_syslog_with_severities() {
    let dir = scratch_dir("events-syslog").expect("scratch");
    let sink = SyslogSink::bind(dir.join("log.sock"));
    let mut o = options("syslog");
    o.extra_config = format!("[log]\nsyslog_socket = \"{}\"\n", sink.path.display());
    let mut c = common::start(o);
    let p = settled(&mut c);
    let (old, epoch) = c.leader_key().expect("leader key");
    assert_eq!(old, c.name(p));
    let np = fail_over(&mut c, p);
    let (pn, npn) = (c.name(p).to_string(), c.name(np).to_string());
    wait_until(
        Duration::from_secs(30),
        "the failover's events never all arrived on the syslog socket",
        &c,
        || {
            sink.event("PROMOTED", &npn).is_some()
                && sink.event("FENCED", &pn).is_some()
                && sink.event("LEASE_LOST", &pn).is_some()
                && sink.event("ETCD_UNREACHABLE", &pn).is_some()
        },
    );
    c.release_etcd(p).expect("heal");
    wait_until(
        Duration::from_secs(30),
        "no ETCD_BACK from the old leader after the heal",
        &c,
        || sink.event("ETCD_BACK", &pn).is_some(),
    );
    for l in sink.all() {
        println!("syslog: {l}");
    }

    let parsed = sink.parsed();
    assert!(!parsed.is_empty());
    assert!(
        parsed.iter().all(|(f, _, _)| *f == 3),
        "every line at facility daemon (3)"
    );
    let (sev, msg) = sink.event("PROMOTED", &npn).expect("PROMOTED");
    assert_eq!(sev, 5, "PROMOTED is notice: {msg}");
    let new_epoch: i64 = field(&msg, "epoch")
        .and_then(|e| e.parse().ok())
        .unwrap_or_else(|| panic!("PROMOTED without epoch: {msg}"));
    assert!(new_epoch > epoch, "{msg}");
    assert!(
        field(&msg, "after").is_some_and(|a| a.ends_with('s')),
        "{msg}"
    );
    assert_eq!(field(&msg, "scope"), Some("ev-syslog"), "{msg}");

    let (sev, msg) = sink.event("LEASE_LOST", &pn).expect("LEASE_LOST");
    assert_eq!(sev, 2, "LEASE_LOST is crit: {msg}");
    assert_eq!(
        field(&msg, "epoch"),
        Some(epoch.to_string().as_str()),
        "{msg}"
    );
    let (sev, msg) = sink.event("FENCED", &pn).expect("FENCED");
    assert_eq!(sev, 4, "FENCED is warning: {msg}");
    assert_eq!(
        field(&msg, "epoch"),
        Some(epoch.to_string().as_str()),
        "{msg}"
    );
    let (sev, msg) = sink
        .event("ETCD_UNREACHABLE", &pn)
        .expect("ETCD_UNREACHABLE");
    assert_eq!(sev, 3, "ETCD_UNREACHABLE is err: {msg}");
    let (sev, msg) = sink.event("ETCD_BACK", &pn).expect("ETCD_BACK");
    assert_eq!(sev, 5, "ETCD_BACK is notice: {msg}");
    if let Some((sev, msg)) = sink.event("RENEWAL_LATE", &pn) {
        assert_eq!(sev, 2, "RENEWAL_LATE is crit: {msg}");
    }

    // Order: the old leader loses its lease, then fences, before the new one
    // promotes (S1: the fence deadline comes before any takeover).
    let lost = sink.position("LEASE_LOST", &pn).expect("LEASE_LOST");
    let fenced = sink.position("FENCED", &pn).expect("FENCED");
    let promoted = sink.position("PROMOTED", &npn).expect("PROMOTED");
    assert!(lost < fenced, "LEASE_LOST before FENCED");
    assert!(fenced < promoted, "FENCED before the new leader's PROMOTED");
    // Edge-triggered: once per transition, not once per loop.
    let count = |name: &str, m: &str| {
        parsed
            .iter()
            .filter(|(_, _, msg)| is_event(msg, name, m))
            .count()
    };
    assert_eq!(count("LEASE_LOST", &pn), 1);
    assert_eq!(count("FENCED", &pn), 1);
    assert_eq!(count("PROMOTED", &npn), 1);
    assert_eq!(count("ETCD_UNREACHABLE", &pn), 1);
    assert_eq!(count("ETCD_BACK", &pn), 1);
    drop(c);
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 10 test 1, under systemd: with `JOURNAL_STREAM` naming the agents' stderr,
/// the same events are on stderr with journald's `<N>` prefixes, and nothing goes
/// to the configured syslog socket (each line once).
#[test]
fn real_events_journal_stream_prefixes_and_no_syslog() {
    let dir = scratch_dir("events-journal").expect("scratch");
    let sink = SyslogSink::bind(dir.join("log.sock"));
    let mut o = options("journal");
    o.journal_stream = true;
    o.extra_config = format!("[log]\nsyslog_socket = \"{}\"\n", sink.path.display());
    let mut c = common::start(o);
    let p = settled(&mut c);
    let np = fail_over(&mut c, p);
    let has = |i: usize, needle: &str| c.agent_log(i).lines().any(|l| l.starts_with(needle));
    let ok = wait_for(Duration::from_secs(30), Duration::from_millis(50), || {
        (has(np, "<5>PROMOTED ")
            && has(p, "<4>FENCED ")
            && has(p, "<2>LEASE_LOST ")
            && has(p, "<3>ETCD_UNREACHABLE "))
        .then_some(())
    });
    assert!(
        ok.is_some(),
        "journald prefixes missing on stderr{}",
        c.logs_tail(40)
    );
    // Plain log lines carry their prefix too (info = 6), and no line is written
    // the stderr way (`[time] LEVEL text`) under journald.
    let log = c.agent_log(p);
    assert!(log.lines().any(|l| l.starts_with("<6>")), "{log}");
    assert!(
        !log.lines()
            .any(|l| l.contains(" EVENT ") || l.contains("] INFO ")),
        "a stderr-style line under journald:\n{log}"
    );
    assert!(
        sink.all().is_empty(),
        "under journald nothing goes to syslog: {:?}",
        sink.all()
    );
    drop(c);
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 10 test 3: `on_role_change` runs on the demotion (the fence) and on the
/// promotion, in that order, with Patroni's arguments; a hook that sleeps forever
/// is killed (its process group) at its deadline while the leader keeps renewing
/// on time: no renewal failure and no deadline overrun on the new leader, and it
/// keeps the key and its epoch.
#[test]
fn real_events_hooks_run_in_order_and_a_hung_one_is_killed() {
    let dir = scratch_dir("events-hooks").expect("scratch");
    let out = dir.join("roles.txt");
    let hook = dir.join("hook.sh");
    // $1 = the node (a fixed word of the command), then action, role, scope.
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho \"$1 $2 $3 $4\" >> {out}\nif [ \"$3\" = primary ]; then\n  echo $$ > {dir}/hung.$1\n  exec sleep 1000\nfi\n",
            out = out.display(),
            dir = dir.display()
        ),
    )
    .expect("hook script");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut o = options("hooks");
    o.extra_config = format!(
        "[hooks]\non_role_change = \"{} {{name}}\"\ntimeout = 2\n",
        hook.display()
    );
    let mut c = common::start(o);
    let p = settled(&mut c);
    let np = fail_over(&mut c, p);
    let (pn, npn) = (c.name(p).to_string(), c.name(np).to_string());
    let scope = "ev-hooks";
    let lines = || {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let demoted = format!("{pn} on_role_change replica {scope}");
    let promoted = format!("{npn} on_role_change primary {scope}");
    wait_until(
        Duration::from_secs(30),
        "the hooks did not both run",
        &c,
        || {
            let l = lines();
            l.contains(&demoted) && l.contains(&promoted)
        },
    );
    let l = lines();
    println!("hook lines: {l:?}");
    let d = l.iter().position(|x| *x == demoted).expect("demotion");
    let pr = l.iter().position(|x| *x == promoted).expect("promotion");
    assert!(
        d < pr,
        "the old leader's demotion hook ran before the new leader's promotion hook: {l:?}"
    );

    // The promotion hook hangs: killed at its 2 s deadline, with its group.
    let (_, epoch) = c.leader_key().expect("leader key");
    let hung: i32 = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        std::fs::read_to_string(dir.join(format!("hung.{npn}")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .expect("the hung hook's pid");
    wait_until(
        Duration::from_secs(15),
        "the hung hook was not killed",
        &c,
        || c.agent_log(np).contains("HOOK_KILLED"),
    );
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    };
    let gone = wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
        (!alive(hung)).then_some(())
    });
    assert!(
        gone.is_some(),
        "the hook's sleep (pid {hung}) survived its deadline"
    );
    let log = c.agent_log(np);
    let killed = log
        .lines()
        .find(|l| l.contains("HOOK_KILLED"))
        .expect("HOOK_KILLED line");
    assert!(killed.contains("action=on_role_change"), "{killed}");
    assert!(killed.contains("role=primary"), "{killed}");
    assert!(killed.contains("why=deadline"), "{killed}");
    // Still leading a few loops later, same epoch, nothing late.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        c.leader_key(),
        Some((npn.clone(), epoch)),
        "{}",
        c.logs_tail(30)
    );
    let log = c.agent_log(np);
    let after_promotion = log
        .split_once("PROMOTED")
        .map(|(_, rest)| rest.to_string())
        .unwrap_or_default();
    // Renewals on time and the schedule kept from the promotion on (the iteration
    // that promoted may overrun `P` by itself: only the loop's schedule is judged
    // there), and nothing overran at all once the hook was killed.
    for bad in [
        "RENEWAL_LATE",
        "LEASE_LOST",
        "FENCED",
        "what=\"renewal schedule\"",
        "what=\"stall between iterations\"",
    ] {
        assert!(
            !after_promotion.contains(bad),
            "{bad} on the new leader while its hook hung:\n{after_promotion}"
        );
    }
    let after_kill = log
        .split_once("HOOK_KILLED")
        .map(|(_, rest)| rest.to_string())
        .unwrap_or_default();
    assert!(
        !after_kill.contains("DEADLINE_OVERRUN"),
        "a deadline overrun after the hung hook was killed:\n{after_kill}"
    );
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 10 test 4: the stand-in records a reset (it fires on a frozen leader and
/// "resets the host"); after the revive, the agent's next start leads again,
/// opens the device and reads `WDIOC_GETBOOTSTATUS`: `WATCHDOG_RESET` at alert.
#[test]
fn real_events_watchdog_boot_status_alert() {
    let dir = scratch_dir("events-wdreset").expect("scratch");
    let sink = SyslogSink::bind(dir.join("log.sock"));
    let mut o = options("wdreset");
    o.etcd_relays = false;
    o.nodes = 1;
    o.watchdog = vec![NodeWatchdog::with_standin("required")];
    o.extra_config = format!("[log]\nsyslog_socket = \"{}\"\n", sink.path.display());
    let mut c = common::start(o);
    let p = c
        .wait_primary(BOOT)
        .unwrap_or_else(|| panic!("no primary{}", c.logs_tail(30)));
    wait_until(Duration::from_secs(20), "never armed", &c, || {
        sink.event("WATCHDOG_ARMED", c.name(p)).is_some()
    });
    assert!(
        sink.event("WATCHDOG_RESET", c.name(p)).is_none(),
        "no reset before the first firing"
    );
    // Freeze the agent: no pets, the stand-in fires and resets the "host".
    let pid = c.agent_pid(p).expect("agent pid");
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("SIGSTOP");
    let fired = c
        .standin(p)
        .expect("stand-in")
        .wait_fired(Duration::from_secs(20));
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
    let (_, why) = fired.unwrap_or_else(|| panic!("the stand-in never fired{}", c.logs_tail(30)));
    println!("stand-in fired: {why}");
    let exited = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        c.agent_exited(p)
    });
    assert!(exited.is_some(), "the reset left the agent running");
    c.standin_mut(p)
        .expect("stand-in")
        .revive()
        .expect("revive");
    c.start_agent(p).expect("start the agent again");
    wait_until(
        Duration::from_secs(60),
        "no WATCHDOG_RESET after the restart",
        &c,
        || sink.event("WATCHDOG_RESET", c.name(p)).is_some(),
    );
    let (sev, msg) = sink.event("WATCHDOG_RESET", c.name(p)).expect("event");
    println!("{msg}");
    assert_eq!(sev, 1, "WATCHDOG_RESET is alert: {msg}");
    assert!(msg.contains("via=WDIOC_GETBOOTSTATUS"), "{msg}");
    let n = sink
        .parsed()
        .iter()
        .filter(|(_, _, m)| is_event(m, "WATCHDOG_RESET", c.name(p)))
        .count();
    assert_eq!(n, 1, "said once per run");
    drop(c);
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
}
