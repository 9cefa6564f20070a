//! Helpers the real-part tests share (`mod common;` in each `tests/real_*.rs`): the
//! time limits of a boot, a failover and a rejoin, a test bed per test, and the
//! checks every fault test ends with.
//!
//! The limits are generous bounds on *waiting* (a test that exceeds one fails with
//! the logs), never assertions about speed: what is asserted is behaviour and
//! ordering (DESIGN §6, and the brief's non-negotiable 4).

// Each test binary uses a different subset.
#![allow(dead_code)]

use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use tenure::testbed::cluster::{ClusterOptions, TestCluster};
use tenure::testbed::probe::{PROBE_TABLE, WriteProbe};
use tenure::testbed::wait_for;

/// A cluster boots (etcd, initdb, basebackups) well within this.
pub const BOOT: Duration = Duration::from_secs(120);
/// A new primary appears within this after a fault.
pub const FAILOVER: Duration = Duration::from_secs(60);
/// An old primary rewinds and streams again within this.
pub const REJOIN: Duration = Duration::from_secs(120);

/// Options for a bed named `<family>-<tag>` running this build's `tenure`, or the
/// binary `TENURE_TEST_AGENT` names (an installed package's, or an older build's to
/// show a test failing before its fix).
pub fn options(family: &str, tag: &str) -> ClusterOptions {
    let bin = std::env::var_os("TENURE_TEST_AGENT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tenure").into());
    let mut opts = ClusterOptions::new(bin);
    opts.tag = tag.into();
    opts.scope = format!("{family}-{tag}");
    opts
}

/// Start a bed; a bed that cannot start fails the test with the reason.
pub fn start(opts: ClusterOptions) -> TestCluster {
    TestCluster::start(opts).unwrap_or_else(|e| panic!("test bed: {e}"))
}

/// A default three-node bed named `<family>-<tag>`.
pub fn bed(family: &str, tag: &str) -> TestCluster {
    start(options(family, tag))
}

/// Wait until one primary runs and every other node streams from it.
pub fn settled(c: &mut TestCluster) -> usize {
    c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"))
}

/// Start the write probe on every node and wait until the primary `p` acked a write.
pub fn probe_on(c: &TestCluster, p: usize) -> WriteProbe {
    let probe = c.write_probe(p, Duration::from_millis(20)).expect("probe");
    let acked = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        (probe.ack_count(p) > 0).then_some(())
    });
    assert!(
        acked.is_some(),
        "probe got no write through on {}",
        c.name(p)
    );
    probe
}

/// Exactly one primary, `np`, sampled a few times.
pub fn only_primary(c: &TestCluster, np: usize) {
    for _ in 0..5 {
        assert_eq!(
            c.primaries(),
            vec![np],
            "exactly one primary at the end{}",
            c.logs_tail(30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every other node streams from `np`, which is the only primary.
pub fn one_primary_at_the_end(c: &TestCluster, np: usize) {
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("at the end: {e}"));
    only_primary(c, np);
}

/// For `window`: the leader key stays `key` whenever etcd answers, nobody but `p`
/// is primary, and (with `pm`) `p`'s postmaster is still `pm` (no failover, no
/// restart).
pub fn no_failover_for(
    c: &TestCluster,
    p: usize,
    key: &(String, i64),
    pm: Option<i32>,
    window: Duration,
) {
    let t0 = Instant::now();
    while t0.elapsed() < window {
        if let Ok(Some(k)) = c.try_leader_key() {
            assert_eq!(&k, key, "leader key changed{}", c.logs_tail(30));
        }
        if let Some(pm) = pm {
            assert_eq!(
                c.postmaster_pid(p),
                Some(pm),
                "primary's postmaster changed{}",
                c.logs_tail(30)
            );
        }
        let prim = c.primaries();
        assert!(
            prim.is_empty() || prim == vec![p],
            "primaries {prim:?}{}",
            c.logs_tail(30)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `etcdctl <args>` against the bed's endpoints; stdout, or Err naming the failure.
pub fn etcdctl(c: &TestCluster, args: &[&str]) -> Result<String, String> {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", c.endpoints().join(",")))
        .arg("--command-timeout=2s")
        .args(args)
        .output()
        .map_err(|e| format!("spawn etcdctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "etcdctl {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Invariant (b): every probe write acknowledged by any node before the read began
/// is a row on `np` (a probe still writing may acknowledge more after the read's
/// snapshot). Returns (acknowledged, missing (node, seq)).
pub fn acked_rows_on(
    c: &TestCluster,
    probe: &WriteProbe,
    np: usize,
) -> Result<(usize, Vec<(usize, u64)>), String> {
    let read_at = Instant::now();
    let rows = c
        .sql(np, &format!("SELECT node, seq FROM {PROBE_TABLE}"))
        .map_err(|e| format!("reading {PROBE_TABLE} on {}: {e}", c.name(np)))?;
    let have: HashSet<(usize, u64)> = rows
        .iter()
        .filter_map(|r| {
            let n = r.first()?.as_ref()?.parse().ok()?;
            let s = r.get(1)?.as_ref()?.parse().ok()?;
            Some((n, s))
        })
        .collect();
    let mut acked = 0;
    let mut missing = Vec::new();
    for k in 0..c.node_count() {
        for a in probe.attempts(k) {
            if a.acked.is_some_and(|t| t < read_at) {
                acked += 1;
                if !have.contains(&(k, a.seq)) {
                    missing.push((k, a.seq));
                }
            }
        }
    }
    Ok((acked, missing))
}

/// `WatchdogSec=` of a systemd unit's text, in microseconds, as systemd hands it to
/// the service in `WATCHDOG_USEC` (a time span: "13s", "13", "500ms", "1min 30s").
pub fn unit_watchdog_usec(unit: &str) -> u64 {
    let value = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with(';'))
        .find_map(|l| l.strip_prefix("WatchdogSec="))
        .unwrap_or_else(|| panic!("no WatchdogSec= in the unit:\n{unit}"));
    let mut usec = 0u64;
    for part in value.split_whitespace() {
        let digits = part.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let n: u64 = digits
            .parse()
            .unwrap_or_else(|_| panic!("WatchdogSec={value}: {part:?} is not a whole number"));
        let per = match &part[digits.len()..] {
            "us" | "usec" => 1,
            "ms" | "msec" => 1_000,
            "" | "s" | "sec" => 1_000_000,
            "m" | "min" => 60_000_000,
            unit => panic!("WatchdogSec={value}: unit {unit:?} not handled here"),
        };
        usec += n * per;
    }
    assert!(usec > 0, "WatchdogSec={value} switches the watchdog off");
    usec
}

/// The watchdog settings systemd gives a unit's agent: a test-owned
/// `NOTIFY_SOCKET`, `WATCHDOG_USEC` from its `WatchdogSec=`, `WATCHDOG_PID` = the
/// agent's pid; no device (mode off).
pub fn unit_environment(unit: &str) -> tenure::testbed::cluster::NodeWatchdog {
    tenure::testbed::cluster::NodeWatchdog {
        notify: true,
        watchdog_usec: Some(unit_watchdog_usec(unit)),
        watchdog_pid: true,
        ..Default::default()
    }
}

fn pos_from<T>(msgs: &[(T, String)], from: usize, m: &str) -> Option<usize> {
    msgs.iter()
        .skip(from)
        .position(|(_, x)| x == m)
        .map(|i| i + from)
}

/// What systemd would see from each agent started with [`unit_environment`]
/// (DESIGN §5, S6(b)): first `WATCHDOG_USEC=` with the agent's own `w` (systemd
/// restarts its timer there), then `READY=1`, then `WATCHDOG=1` within `w` of that
/// timer start, and from then on no gap of `w` or more between two `WATCHDOG=1`
/// (systemd would SIGKILL the unit) until now. A restarted agent is checked from
/// its own start.
pub fn check_unit_notify(c: &TestCluster, w: Duration) {
    use tenure::core::time::Instant as Boot;
    let want = format!("WATCHDOG_USEC={}", w.as_micros());
    for i in 0..c.node_count() {
        let msgs = c.notify_messages(i);
        let name = c.name(i);
        // The current agent's run starts at its WATCHDOG_USEC= (a restarted agent
        // sends it again).
        let usec = msgs
            .iter()
            .rposition(|(_, x)| x.starts_with("WATCHDOG_USEC="));
        let from = usec.unwrap_or(0);
        let after = |m: &str| pos_from(&msgs, from, m);
        let (ready, first_wd) = (after("READY=1"), after("WATCHDOG=1"));
        let (Some(usec), Some(ready), Some(first_wd)) = (usec, ready, first_wd) else {
            panic!("{name}: WATCHDOG_USEC=, READY=1 and WATCHDOG=1 expected: {msgs:?}");
        };
        assert_eq!(msgs[usec].1, want, "{name}: the agent's own W: {msgs:?}");
        assert!(
            usec < ready && ready < first_wd,
            "{name}: WATCHDOG_USEC= then READY=1 then WATCHDOG=1 expected: {msgs:?}"
        );
        let mut last: Boot = msgs[usec].0;
        for (t, m) in msgs.iter().skip(usec + 1) {
            if m == "WATCHDOG=1" {
                assert!(
                    t.since(last) < w,
                    "{name}: {:.3} s without WATCHDOG=1 (W = {w:?}): systemd would have \
                     killed the unit: {msgs:?}",
                    t.since(last).as_secs_f64()
                );
                last = *t;
            }
        }
        let now = tenure::clock::now();
        assert!(
            now.since(last) < w,
            "{name}: no WATCHDOG=1 for {:.3} s (W = {w:?})",
            now.since(last).as_secs_f64()
        );
    }
}

/// Seconds as a float, for messages.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Signed seconds from `a` to `b` (both on CLOCK_BOOTTIME).
pub fn gap(a: tenure::core::time::Instant, b: tenure::core::time::Instant) -> f64 {
    if b >= a {
        secs(b.since(a))
    } else {
        -secs(a.since(b))
    }
}

/// Maps the probe's clock (`std::time::Instant`, CLOCK_MONOTONIC) to CLOCK_BOOTTIME:
/// the two differ only by time spent suspended, which a test run does not do.
pub struct Clocks {
    boot: tenure::core::time::Instant,
    mono: Instant,
}

impl Clocks {
    pub fn now() -> Clocks {
        Clocks {
            boot: tenure::clock::now(),
            mono: Instant::now(),
        }
    }
    pub fn boot_of(&self, m: Instant) -> tenure::core::time::Instant {
        if m >= self.mono {
            self.boot.add(m - self.mono)
        } else {
            self.boot.sub(self.mono - m)
        }
    }
    pub fn mono_of(&self, b: tenure::core::time::Instant) -> Instant {
        if b >= self.boot {
            self.mono + b.since(self.boot)
        } else {
            self.mono - self.boot.since(b)
        }
    }
}

/// The `/etc/netns/<ns>/` directories a test made; removed on drop, so a
/// failing test leaves none behind. Declared before the cluster, so it is
/// dropped after the cluster stopped every agent.
#[derive(Default)]
pub struct NetnsFiles(Vec<PathBuf>);

impl NetnsFiles {
    /// Make `/etc/netns/<ns>/` with `hosts` and `resolv.conf`.
    pub fn make(&mut self, ns: &str, hosts: &str, resolv: &str) {
        let dir = PathBuf::from("/etc/netns").join(ns);
        assert!(!dir.exists(), "{} exists already", dir.display());
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        self.0.push(dir.clone());
        fs::write(dir.join("hosts"), hosts).expect("write hosts");
        fs::write(dir.join("resolv.conf"), resolv).expect("write resolv.conf");
    }
}

impl Drop for NetnsFiles {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = fs::remove_dir_all(d);
        }
        // /etc/netns itself only if we left it empty (another user's entries stay).
        let _ = fs::remove_dir("/etc/netns");
    }
}

/// One counter or gauge of node `i`'s `GET /metrics` (its first sample), if the
/// API answered within the bed's 1 s.
pub fn metric_opt(c: &TestCluster, i: usize, name: &str) -> Option<f64> {
    let (code, body) = c.api_body(i, "/metrics")?;
    assert_eq!(code, 200, "{}: /metrics answered {code}", c.name(i));
    // Every sample carries the scope and name labels: `NAME{...} VALUE`.
    let v = body.lines().find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        let k = k.split('{').next()?;
        (k == name).then(|| v.trim().parse::<f64>().ok())?
    });
    Some(v.unwrap_or_else(|| panic!("{}: no {name} in /metrics", c.name(i))))
}

/// [`metric_opt`], a few tries: an agent whose etcd is cut off serves its API
/// between calls that each wait up to `retry_timeout`.
pub fn metric(c: &TestCluster, i: usize, name: &str) -> f64 {
    wait_for(Duration::from_secs(5), Duration::from_millis(100), || {
        metric_opt(c, i, name)
    })
    .unwrap_or_else(|| panic!("{}: no answer to /metrics{}", c.name(i), c.logs_tail(60)))
}

/// The endpoint node `i` talks to (the `endpoint` label of `tenure_etcd_endpoint`),
/// if its API answers.
pub fn endpoint_opt(c: &TestCluster, i: usize) -> Option<String> {
    let (_, body) = c.api_body(i, "/metrics")?;
    body.lines().find_map(|l| {
        let labels = l.strip_prefix("tenure_etcd_endpoint{")?;
        let rest = labels.split_once("endpoint=\"")?.1;
        Some(rest.split('"').next()?.to_string())
    })
}

/// [`endpoint_opt`], which must answer.
pub fn endpoint_in_use(c: &TestCluster, i: usize) -> String {
    endpoint_opt(c, i).unwrap_or_else(|| panic!("{}: no tenure_etcd_endpoint", c.name(i)))
}

/// Set `field` of the scope's `config` key to `value` with a direct etcd write (as
/// an operator's `etcdctl put` would) and, with `applied_by`, wait until that
/// node's agent logs applying a configuration holding it. Returns the key's value
/// before the write, parsed.
pub fn set_config_field(
    c: &TestCluster,
    field: &str,
    value: serde_json::Value,
    applied_by: Option<usize>,
) -> serde_json::Value {
    let config = c.get_kv("config").expect("config key").value;
    let before: serde_json::Value = serde_json::from_str(&config).expect("config JSON");
    let mut v = before.clone();
    v[field] = value.clone();
    tenure::testbed::etcdkv::put(
        &c.endpoints(),
        &format!("{}config", c.prefix()),
        &v.to_string(),
        Duration::from_secs(5),
    )
    .expect("put config");
    if let Some(i) = applied_by {
        let applied = format!("\"{field}\":{value}");
        wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
            c.agent_log(i).contains(&applied).then_some(())
        })
        .unwrap_or_else(|| panic!("{} never applied {applied}{}", c.name(i), c.logs_tail(20)));
    }
    before
}
