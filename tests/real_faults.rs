//! Fault tests on the loopback test bed (DESIGN §1 step 4, §2 S1): etcd loses
//! quorum, the leader key is deleted or its lease revoked behind the leader's back,
//! and PostgreSQL on the primary crashes. Three real agents, each with its own
//! PostgreSQL 15, on a real three-member etcd; run one at a time (nextest group
//! `real`), need root, etcd-server (with etcdctl) and postgresql-15.
//!
//! Every test checks the write-probe invariant — no write acknowledged by the old
//! primary after the first write sent to the new one — and exactly one primary at
//! the end. Times are printed; only ordering and the contract's bounds are asserted.

use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure::testbed::cluster::{ClusterOptions, TestCluster};
use tenure::testbed::wait_for;

const BOOT: Duration = Duration::from_secs(120);
const FAILOVER: Duration = Duration::from_secs(60);
const REJOIN: Duration = Duration::from_secs(120);

fn bed(tag: &str) -> TestCluster {
    let mut opts = ClusterOptions::new(env!("CARGO_BIN_EXE_tenure"));
    opts.tag = tag.into();
    opts.scope = format!("faults-{tag}");
    TestCluster::start(opts).unwrap_or_else(|e| panic!("test bed: {e}"))
}

fn settled(c: &mut TestCluster) -> usize {
    c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"))
}

/// Start the probe on every node and wait until the primary `p` acked a write.
fn probe_on(c: &TestCluster, p: usize) -> tenure::testbed::probe::WriteProbe {
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

/// Exactly one primary, `np`, sampled a few times; every other node streams.
fn one_primary_at_the_end(c: &TestCluster, np: usize) {
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("at the end: {e}"));
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

/// Writes node `k` acknowledged at an instant inside `[from, to)`.
fn acks_between(
    probe: &tenure::testbed::probe::WriteProbe,
    k: usize,
    from: Instant,
    to: Instant,
) -> usize {
    probe
        .attempts(k)
        .iter()
        .filter(|a| a.acked.is_some_and(|t| t >= from && t < to))
        .count()
}

/// The CLOCK_BOOTTIME instant (seconds) of the first line of `log` that says
/// the agent is fencing: the agent stamps every line `[<secs>s]` on that clock.
fn fence_logged_at(log: &str) -> Option<f64> {
    let line = log.lines().find(|l| l.contains("fencing PostgreSQL"))?;
    let stamp = line.strip_prefix('[')?.split_once("s]")?.0;
    stamp.trim().parse().ok()
}

/// SIGCONTs the pids it holds when dropped, so a failed assertion never leaves
/// etcd members stopped.
struct Stopped(Vec<u32>);

impl Stopped {
    fn resume(&mut self) {
        for pid in self.0.drain(..) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.resume();
    }
}

/// `etcdctl <args>` against the bed's endpoints; stdout, or Err naming the failure.
fn etcdctl(c: &TestCluster, args: &[&str]) -> Result<String, String> {
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

/// Whether lease `id` is still alive: `Some(true)` alive, `Some(false)` gone
/// (expired or revoked), `None` etcd did not answer.
fn lease_alive(c: &TestCluster, id: i64) -> Option<bool> {
    let out = etcdctl(c, &["lease", "timetolive", &format!("{id:x}")]).ok()?;
    Some(!out.contains("already expired"))
}

// ---------------------------------------------------------------------------

#[test]
fn real_etcd_loses_quorum() {
    let mut c = bed("quorum");
    let p = settled(&mut c);
    let (_, old_epoch) = c.leader_key().expect("leader key");
    let ttl = Duration::from_secs(u64::from(c.opts.ttl));
    let margin = c.opts.safety_margin;
    let mut probe = probe_on(&c, p);

    // Stop the etcd raft leader and one follower: the third member is alone.
    let (pids, victims) = {
        let etcd = c.etcd().expect("etcd");
        let leader = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
            etcd.leader()
        })
        .expect("one etcd leader");
        let victims = [leader, (leader + 1) % 3];
        let pids: Vec<u32> = victims
            .iter()
            .map(|&m| etcd.pid(m).expect("member runs"))
            .collect();
        (pids, victims)
    };
    let t_stop = Instant::now();
    let t_stop_boot = tenure::clock::now().secs_f64();
    for &pid in &pids {
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("SIGSTOP an etcd member");
    }
    let mut stopped = Stopped(pids.clone());
    // No renewal can count after the stop (its read needs a quorum), so the
    // primary's horizon is at most this.
    let h = t_stop + ttl - margin;

    // Until ttl + 2 s after the stop: the primary fences (its log says so), and
    // nobody answers /primary 200 — the old primary not after its horizon, the
    // others never.
    let watch_end = t_stop + ttl + Duration::from_secs(2);
    let (mut samples, mut codes) = (0, std::collections::BTreeMap::new());
    let mut fenced: Option<Instant> = None;
    while Instant::now() < watch_end || fenced.is_none() {
        assert!(
            t_stop.elapsed() < ttl + Duration::from_secs(5),
            "{} never logged a fence{}",
            c.name(p),
            c.logs_tail(40)
        );
        if fenced.is_none() && c.agent_log(p).contains("fencing PostgreSQL") {
            fenced = Some(Instant::now());
        }
        for i in 0..c.node_count() {
            let at = Instant::now();
            let code = c.api_get(i, "/primary");
            if i != p || at >= h {
                *codes.entry(format!("{code:?}")).or_insert(0) += 1;
                assert_ne!(
                    code,
                    Some(200),
                    "{} answers /primary 200 {:.2} s after etcd lost quorum{}",
                    c.name(i),
                    at.duration_since(t_stop).as_secs_f64(),
                    c.logs_tail(30)
                );
            }
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let fenced = fenced.expect("fence seen");
    // S1 without a watchdog: F = H, and the agent's own H is at most ours (its
    // last counted renewal was sent before the stop). The log stamp is rounded
    // to the millisecond.
    let fence_at = fence_logged_at(&c.agent_log(p)).expect("fence line has a stamp") - t_stop_boot;
    let h_secs = h.duration_since(t_stop).as_secs_f64();
    assert!(
        fence_at <= h_secs + 0.001,
        "{} began fencing {fence_at:.3} s after the stop, past H = {h_secs:.3} s{}",
        c.name(p),
        c.logs_tail(30)
    );
    // A write to it fails now, and the probe saw no acknowledgement at or after H.
    assert!(
        c.write_row(p, 1).is_err(),
        "old primary {} still accepts writes after its fence",
        c.name(p)
    );
    let late = acks_between(&probe, p, h, Instant::now());
    assert_eq!(
        late,
        0,
        "{} acknowledged {late} writes after its horizon{}",
        c.name(p),
        c.logs_tail(30)
    );
    let last_old = probe.last_ack(p).and_then(|a| a.acked).expect("acks on p");

    // Restore the quorum: one primary appears without help.
    let t_resume = Instant::now();
    stopped.resume();
    {
        let etcd = c.etcd().expect("etcd");
        assert!(
            etcd.wait_healthy(Duration::from_secs(30)),
            "etcd unhealthy after SIGCONT of members {victims:?}"
        );
    }
    let np = c
        .wait_primary(FAILOVER)
        .unwrap_or_else(|| panic!("no primary after quorum returned{}", c.logs_tail(40)));
    let back = t_resume.elapsed();
    let first_new = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t_resume)
    })
    .unwrap_or_else(|| panic!("{} acknowledged no probe write", c.name(np)));
    one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));

    // No node acknowledged a write between the old horizon and the first write
    // sent to the new primary.
    for i in 0..c.node_count() {
        assert_eq!(
            acks_between(&probe, i, h, first_new.sent),
            0,
            "{} acknowledged writes while no primary was legitimate",
            c.name(i)
        );
    }
    if np != p {
        probe.check_no_overlap(p, np, t_resume).unwrap();
    }
    let (leader, epoch) = c.leader_key().expect("leader key");
    assert_eq!(leader, c.name(np));
    assert!(epoch > old_epoch, "epoch {epoch} after {old_epoch}");
    println!(
        "quorum loss: fence began {fence_at:.3} s after the stop (log stamp; seen {:.2} s), bound H = {:.2} s, last old ack {:.2} s; \
         {} /primary sample rounds {:?}; new primary {} ({}) {:.2} s after the members resumed, \
         first write acked {:.2} s after",
        fenced.duration_since(t_stop).as_secs_f64(),
        h.duration_since(t_stop).as_secs_f64(),
        last_old.saturating_duration_since(t_stop).as_secs_f64(),
        samples,
        codes,
        c.name(np),
        if np == p {
            "the same node"
        } else {
            "another node"
        },
        back.as_secs_f64(),
        first_new
            .acked
            .unwrap_or(t_resume)
            .duration_since(t_resume)
            .as_secs_f64()
    );
}

/// The shared body of the two "key vanishes while its lease lives" tests:
/// `vanish` removes the leader key (returns nothing useful); the old primary must
/// fence at once, nobody may hold the key while the old lease lives, and one
/// primary with streaming replicas must follow.
fn key_vanishes(tag: &str, vanish: impl Fn(&TestCluster, i64)) -> (TestCluster, usize, usize) {
    let mut c = bed(tag);
    let p = settled(&mut c);
    let kv = c.get_kv("leader").expect("leader key");
    let (old_epoch, lease) = (kv.create_revision, kv.lease);
    assert!(lease != 0, "leader key has no lease: {kv:?}");
    let mut probe = probe_on(&c, p);

    let t0 = Instant::now();
    vanish(&c, lease);
    let fenced = wait_for(FAILOVER, Duration::from_millis(10), || {
        c.agent_log(p)
            .contains("fencing PostgreSQL")
            .then(Instant::now)
    })
    .unwrap_or_else(|| panic!("{} never logged a fence{}", c.name(p), c.logs_tail(40)));

    // Watch the key: a new holder while the old lease still lives is a violation
    // (the key is read first, the lease after it, so "alive" is never stale).
    let mut lease_gone_seen: Option<Instant> = None;
    let mut taken: Option<(Instant, String, i64)> = None;
    let watch_end = Instant::now() + FAILOVER;
    while Instant::now() < watch_end {
        let key = c.try_leader_key();
        let alive = lease_alive(&c, lease);
        if alive == Some(false) && lease_gone_seen.is_none() {
            lease_gone_seen = Some(Instant::now());
        }
        if let Ok(Some((holder, epoch))) = key
            && epoch != old_epoch
        {
            assert_ne!(
                alive,
                Some(true),
                "{holder} holds the leader key (epoch {epoch}) while the old lease {lease:x} lives{}",
                c.logs_tail(40)
            );
            if alive == Some(false) {
                taken = Some((Instant::now(), holder, epoch));
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (t_taken, holder, epoch) =
        taken.unwrap_or_else(|| panic!("nobody took the leader key{}", c.logs_tail(40)));
    assert!(epoch > old_epoch);
    let np = c.index_of(&holder).expect("holder is a node");
    c.wait_primary(FAILOVER)
        .unwrap_or_else(|| panic!("no primary after the key vanished{}", c.logs_tail(40)));
    let first_new = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, fenced)
    })
    .unwrap_or_else(|| panic!("{} acknowledged no probe write", c.name(np)));
    one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));
    if np != p {
        probe.check_no_overlap(p, np, t0).unwrap();
    }
    // The winner waited: the key vanished before its lease could have expired.
    let log = c.agent_log(np);
    assert!(
        log.contains("promotion delayed") && log.contains("vanished before its lease"),
        "{} did not log a delayed promotion{}",
        c.name(np),
        c.logs_tail(40)
    );
    // The old primary fenced before the first write the new one acknowledged.
    assert!(
        fenced <= first_new.acked.unwrap_or(fenced),
        "first write on {} acknowledged before {} was seen to fence",
        c.name(np),
        c.name(p)
    );
    println!(
        "{tag}: fence logged {:.2} s after the key vanished; old lease seen gone at {:?} s; \
         key taken by {} ({}) at {:.2} s; its first write acked at {:.2} s",
        fenced.duration_since(t0).as_secs_f64(),
        lease_gone_seen.map(|t| t.duration_since(t0).as_secs_f64()),
        c.name(np),
        if np == p {
            "the same node"
        } else {
            "another node"
        },
        t_taken.duration_since(t0).as_secs_f64(),
        first_new
            .acked
            .unwrap_or(t0)
            .duration_since(t0)
            .as_secs_f64()
    );
    (c, p, np)
}

#[test]
fn real_leader_key_deleted_while_its_lease_lives() {
    let (c, p, np) = key_vanishes("delkey", |c, _| {
        assert_eq!(c.delete_key("leader"), Ok(1), "delete the leader key");
    });
    println!("delkey: old primary {}, winner {}", c.name(p), c.name(np));
}

#[test]
fn real_leader_lease_revoked_early() {
    let (c, p, np) = key_vanishes("revoke", |c, lease| {
        etcdctl(c, &["lease", "revoke", &format!("{lease:x}")])
            .unwrap_or_else(|e| panic!("revoke: {e}"));
    });
    println!("revoke: old primary {}, winner {}", c.name(p), c.name(np));
}

#[test]
fn real_postgres_crash_on_the_primary() {
    postgres_crash("pgcrash", true);
}

/// Only the postmaster is SIGKILLed: its backends live on, orphaned, and the
/// restart must get rid of them first (a backend that outlives its postmaster can
/// still commit, and blocks a new postmaster on the shared memory).
#[test]
fn real_postmaster_crash_leaves_backends() {
    postgres_crash("pmcrash", false);
}

fn postgres_crash(tag: &str, backends_too: bool) {
    let mut c = bed(tag);
    let p = settled(&mut c);
    let key = c.leader_key().expect("leader key");
    let pm = c.postmaster_pid(p).expect("postmaster pid");
    let mut probe = probe_on(&c, p);

    let t0 = Instant::now();
    let pids = c.pg_pids(p);
    assert!(pids.contains(&pm), "postmaster {pm} among {pids:?}");
    // The postmaster first, then (if asked) every backend it leaves behind.
    let _ = kill(Pid::from_raw(pm), Signal::SIGKILL);
    if backends_too {
        for &pid in &pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    let start_timeout = Duration::from_secs(u64::from(c.opts.primary_start_timeout));
    let back = wait_for(
        start_timeout + Duration::from_secs(5),
        Duration::from_millis(50),
        || {
            let new_pm = c.postmaster_pid(p).filter(|&x| x != pm)?;
            (c.api_get(p, "/primary") == Some(200) && c.is_in_recovery(p) == Ok(false))
                .then_some(new_pm)
        },
    );
    let took = t0.elapsed();
    let new_pm = back.unwrap_or_else(|| {
        panic!(
            "{} not primary again with a new postmaster within {start_timeout:?}{}",
            c.name(p),
            c.logs_tail(40)
        )
    });
    // No process of the crashed PostgreSQL survives the restart.
    let now_pids = c.pg_pids(p);
    let survivors: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|x| now_pids.contains(x))
        .collect();
    assert!(
        survivors.is_empty(),
        "processes of the crashed PostgreSQL still run: {survivors:?}{}",
        c.logs_tail(30)
    );
    assert!(
        took <= start_timeout,
        "restart took {took:?} > primary_start_timeout"
    );
    assert_eq!(
        c.leader_key().as_ref(),
        Some(&key),
        "same leader key and epoch{}",
        c.logs_tail(30)
    );
    let first = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(p, t0 + took)
    })
    .unwrap_or_else(|| panic!("{} acknowledged no write after restart", c.name(p)));
    one_primary_at_the_end(&c, p);
    probe.stop(Duration::from_secs(2));
    for i in (0..c.node_count()).filter(|&i| i != p) {
        assert_eq!(
            probe.ack_count(i),
            0,
            "{} acknowledged probe writes",
            c.name(i)
        );
    }
    assert_eq!(c.leader_key().as_ref(), Some(&key));
    println!(
        "{tag}: postmaster {pm} -> {new_pm}; primary again {:.2} s after the kill, \
         first write acked {:.2} s after",
        took.as_secs_f64(),
        first.acked.unwrap_or(t0).duration_since(t0).as_secs_f64()
    );
}
