//! Fault tests on the loopback test bed (DESIGN §1 step 4, §2 S1, S5): etcd loses
//! quorum, the leader key is deleted or its lease revoked behind the leader's back,
//! PostgreSQL on the primary crashes, etcd answers the leader slowly (through the
//! bed's delaying relays, inside and beyond the tolerated outage `T`), and a leader
//! whose agent was stopped past its lease wakes up. Three real agents, each with its own
//! PostgreSQL 15, on a real three-member etcd; run one at a time (nextest group
//! `real`), need root, etcd-server (with etcdctl) and postgresql-15.
//!
//! Every test checks the write-probe invariant — no write acknowledged by the old
//! primary after the first write sent to the new one — and exactly one primary at
//! the end. Times are printed; only ordering and the contract's bounds are asserted.

mod common;

use std::time::{Duration, Instant};

use common::{FAILOVER, REJOIN, etcdctl, one_primary_at_the_end, probe_on, settled};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

fn bed(tag: &str) -> TestCluster {
    common::bed("faults", tag)
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

// ---------------------------------------------------------------------------
// Fault test 5: etcd slow to answer the leader (a delaying relay).
// Fault test 7: a leader that stalled past its lease wakes and fences.
// ---------------------------------------------------------------------------

/// A bed whose agents reach etcd only through their own delaying relays.
fn bed_relayed(tag: &str, ttl: u32) -> TestCluster {
    let mut opts = common::options("faults", tag);
    opts.etcd_relays = true;
    opts.ttl = ttl;
    // `lease_valid_lines` reads every renewal tick's reason: unchanged ticks log at
    // `debug`.
    opts.log_level = Some("debug".into());
    common::start(opts)
}

/// The TTL etcd granted the leader's lease (`etcdctl lease timetolive`: "granted
/// with TTL(7s)"), never the configured one (DESIGN §2).
fn granted_ttl(c: &TestCluster, lease: i64) -> u32 {
    let out = etcdctl(c, &["lease", "timetolive", &format!("{lease:x}")])
        .unwrap_or_else(|e| panic!("lease timetolive: {e}"));
    out.split_once("TTL(")
        .and_then(|(_, r)| r.split_once("s)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no granted TTL in {out:?}"))
}

/// The contract's numbers for node `i`'s own config file and the granted TTL, as
/// `tenure check-config` derives them: `(T, L_w, R, F - s)` where `T` is the etcd
/// outage tolerated without a fence and `F - s` the fence deadline (the bed runs
/// without a watchdog: `min(ttl - M, ttl - (L_w + R + 1 s))`), at or before the
/// horizon.
fn contract(c: &TestCluster, i: usize, ttl: u32) -> (Duration, Duration, Duration, Duration) {
    let cfg = tenure::config::Config::load(c.config_path(i))
        .unwrap_or_else(|e| panic!("config of {}: {e}", c.name(i)));
    let b = tenure::config::budget(&cfg.timing, ttl, None);
    let t = u64::try_from(b.outage_tolerated)
        .ok()
        .filter(|&ns| ns > 0)
        .unwrap_or_else(|| panic!("the bed's timing tolerates no etcd outage: {b}"));
    (
        Duration::from_nanos(t),
        b.loop_wait,
        b.retry_timeout,
        b.fence_deadline,
    )
}

/// `(CLOCK_BOOTTIME seconds, valid_for seconds)` of every "leader with the lock,
/// lease valid X s" line the leader logged: `stamp + valid_for` is its horizon H.
fn lease_valid_lines(log: &str) -> Vec<(f64, f64)> {
    log.lines()
        .filter_map(|l| {
            let stamp: f64 = l
                .strip_prefix('[')?
                .split_once("s]")?
                .0
                .trim()
                .parse()
                .ok()?;
            let v = l.split_once("lease valid ")?.1.split_once(" s")?.0;
            Some((stamp, v.parse().ok()?))
        })
        .collect()
}

/// The CLOCK_BOOTTIME stamp of the first line of `log` containing `needle`.
fn logged_at(log: &str, needle: &str) -> Option<f64> {
    let line = log.lines().find(|l| l.contains(needle))?;
    line.strip_prefix('[')?
        .split_once("s]")?
        .0
        .trim()
        .parse()
        .ok()
}

/// One change to a key under the scope, as etcd's own history records it.
#[derive(Debug)]
struct KeyEvent {
    put: bool,
    /// The key without the scope prefix (`leader`, `history`, `members/pg1`...).
    key: String,
    value: String,
    create_revision: i64,
    mod_revision: i64,
    /// The value before this change (etcd's `prev_kv`), if it had one.
    prev: Option<String>,
}

/// Every change etcd applied under the scope from revision `from` up to its
/// current revision: a watch opened at a past revision replays the history (the
/// bed never compacts). Bounded by 20 s overall.
fn scope_events(c: &TestCluster, from: i64) -> Result<Vec<KeyEvent>, String> {
    use etcd_client::{EventType, GetOptions, WatchOptions};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let prefix = c.prefix();
    let eps = c.endpoints();
    rt.block_on(async move {
        let work = async {
            let mut client = etcd_client::Client::connect(eps, None)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            // The revision to replay up to: a linearizable read's header. Only this
            // scope writes to the bed's etcd, so the change at that revision is ours.
            let now_rev = client
                .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
                .await
                .map_err(|e| format!("get: {e}"))?
                .header()
                .map(|h| h.revision())
                .ok_or("get: no header")?;
            let mut stream = client
                .watch(
                    prefix.as_str(),
                    Some(
                        WatchOptions::new()
                            .with_prefix()
                            .with_start_revision(from)
                            .with_prev_key(),
                    ),
                )
                .await
                .map_err(|e| format!("watch: {e}"))?;
            let mut out: Vec<KeyEvent> = Vec::new();
            let mut seen = 0i64;
            while seen < now_rev {
                let msg = match tokio::time::timeout(Duration::from_secs(2), stream.message()).await
                {
                    Err(_) => break, // quiet: nothing more to replay
                    Ok(Err(e)) => return Err(format!("watch stream: {e}")),
                    Ok(Ok(None)) => return Err("watch stream ended".into()),
                    Ok(Ok(Some(m))) => m,
                };
                if msg.canceled() {
                    return Err(format!(
                        "watch canceled (compacted at {}): {}",
                        msg.compact_revision(),
                        msg.cancel_reason()
                    ));
                }
                for ev in msg.events() {
                    let Some(kv) = ev.kv() else { continue };
                    let key = String::from_utf8_lossy(kv.key());
                    seen = seen.max(kv.mod_revision());
                    out.push(KeyEvent {
                        put: ev.event_type() == EventType::Put,
                        key: key
                            .strip_prefix(prefix.as_str())
                            .unwrap_or(&key)
                            .to_string(),
                        value: String::from_utf8_lossy(kv.value()).into_owned(),
                        create_revision: kv.create_revision(),
                        mod_revision: kv.mod_revision(),
                        prev: ev
                            .prev_kv()
                            .map(|p| String::from_utf8_lossy(p.value()).into_owned()),
                    });
                }
            }
            if seen < now_rev {
                return Err(format!(
                    "replayed up to revision {seen} only, etcd is at {now_rev}"
                ));
            }
            Ok(out)
        };
        tokio::time::timeout(Duration::from_secs(20), work)
            .await
            .map_err(|_| "etcd history not read within 20 s".to_string())?
    })
}

/// The `new_leader` of every entry of a `history` value (Patroni's list form:
/// `[timeline, lsn, reason, timestamp, new_leader]`).
fn history_leaders(value: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(value).unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_array()?.get(4)?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Cluster-state keys only the leader writes (members/* are each node's own).
const CLUSTER_STATE: [&str; 4] = ["leader", "history", "sync", "status"];

/// From etcd itself: every put or delete of the cluster-state keys after the new
/// leader key was created (revision `new_epoch`), checked not to carry the old
/// leadership (`old_name` at `old_epoch`): `leader` only ever names its new holder
/// and is not deleted while it holds it, no `history` entry naming the old leader
/// is added, `sync`/`status` never name it. Returns the changes seen, for the report.
fn no_old_leadership_writes(
    c: &TestCluster,
    new_epoch: i64,
    old_name: &str,
    old_epoch: i64,
    np: usize,
) -> Vec<String> {
    let events = scope_events(c, new_epoch).unwrap_or_else(|e| panic!("etcd history: {e}"));
    let mut seen = Vec::new();
    for e in events.iter().filter(|e| e.mod_revision > new_epoch) {
        if !CLUSTER_STATE.contains(&e.key.as_str()) {
            continue;
        }
        seen.push(format!(
            "{}{} {}@{}",
            if e.put { "put " } else { "delete " },
            e.key,
            e.value,
            e.mod_revision
        ));
        match (e.key.as_str(), e.put) {
            ("leader", true) => assert!(
                e.value != old_name && e.create_revision != old_epoch,
                "leader written by the old leadership after epoch {new_epoch}: {e:?}"
            ),
            ("leader", false) => panic!(
                "leader deleted at revision {} while {} held it (epoch {new_epoch})",
                e.mod_revision,
                c.name(np)
            ),
            ("history", true) => {
                let before = e.prev.as_deref().map(history_leaders).unwrap_or_default();
                let now = history_leaders(&e.value);
                let added = &now[before.len().min(now.len())..];
                assert!(
                    !added.iter().any(|n| n == old_name),
                    "history entry naming {old_name} added after epoch {new_epoch}: {e:?}"
                );
            }
            (_, true) => {
                let v: serde_json::Value = serde_json::from_str(&e.value).unwrap_or_default();
                assert_ne!(
                    v.get("leader").and_then(|l| l.as_str()),
                    Some(old_name),
                    "{} written naming the old leader after epoch {new_epoch}: {e:?}",
                    e.key
                );
            }
            (_, false) => panic!("{} deleted after epoch {new_epoch}: {e:?}", e.key),
        }
    }
    seen
}

/// Fault test 5, short: the leader's etcd traffic is slowed past `retry_timeout`
/// for a span well inside the tolerated outage `T` (minus one `loop_wait`, the
/// renewal that may have gone out just before it). No fence, no failover, the
/// same key, epoch and postmaster; the primary keeps acknowledging writes.
#[test]
fn real_etcd_slow_for_the_leader_within_t() {
    // ttl 9: without a watchdog the bed tolerates T = ttl - (L_w + R + 1 s) - B -
    // L_w - R = 5.5 s, room for half of it to miss renewals (at ttl 7, 3.5 s: not).
    let mut c = bed_relayed("slowshort", 9);
    let p = settled(&mut c);
    let kv = c.get_kv("leader").expect("leader key");
    let key = (kv.value.clone(), kv.create_revision);
    assert_eq!(key.0, c.name(p));
    let pm = c.postmaster_pid(p).expect("postmaster pid");
    let (t_tol, lw, r, horizon) = contract(&c, p, granted_ttl(&c, kv.lease));
    // Slow, not dead: every request still reaches etcd, its answer comes back
    // 4R after it was sent (2R each way), so no renewal can count meanwhile.
    let d = 2 * r;
    // Half of what the contract tolerates, and the relay's own delay on top.
    let span = (t_tol - lw) / 2;
    assert!(
        span > 2 * d + lw + r,
        "span {span:?} too short to miss a renewal"
    );
    let mut probe = probe_on(&c, p);
    let log_from = c.agent_log(p).len();

    let t0 = Instant::now();
    c.set_etcd_delay(p, d).expect("delay");
    std::thread::sleep(span);
    c.set_etcd_delay(p, Duration::ZERO).expect("lift the delay");
    let t1 = Instant::now();

    // For ttl + 1 s after the lift: a lease lost during the delay would show.
    let window = Duration::from_secs(u64::from(c.opts.ttl) + 1);
    common::no_failover_for(&c, p, &key, None, window);
    c.check_agents().unwrap_or_else(|e| panic!("{e}"));
    let log = c.agent_log(p)[log_from..].to_string();
    assert!(
        !log.contains("fencing PostgreSQL"),
        "the leader fenced on a slow etcd inside T{}",
        c.logs_tail(40)
    );
    assert_eq!(c.leader_key(), Some(key.clone()), "same key and epoch");
    assert_eq!(c.postmaster_pid(p), Some(pm), "same postmaster");
    assert_eq!(c.primaries(), vec![p]);
    // The delay was real: renewals stopped counting (the lease's remaining validity
    // fell below what one missed renewal leaves), and started again.
    let valid = lease_valid_lines(&log);
    let lowest = valid.iter().map(|v| v.1).fold(f64::INFINITY, f64::min);
    let healthy = (horizon - lw - r).as_secs_f64();
    assert!(
        lowest < healthy,
        "no renewal was missed during the delay (lowest validity {lowest:.1} s, a healthy \
         leader keeps {healthy:.2} s){}",
        c.logs_tail(40)
    );
    let last_valid = valid.last().map(|v| v.1).unwrap_or(0.0);
    assert!(
        last_valid >= healthy - 0.1,
        "renewals did not resume after the delay (validity {last_valid:.1} s)"
    );
    // The primary took writes after the delay was lifted, and nobody else did.
    let after = probe
        .first_ack_after(p, t1)
        .unwrap_or_else(|| panic!("{} acknowledged no write after the delay", c.name(p)));
    probe.stop(Duration::from_secs(2));
    for i in (0..c.node_count()).filter(|&i| i != p) {
        assert_eq!(probe.ack_count(i), 0, "{} acknowledged writes", c.name(i));
    }
    println!(
        "slow etcd inside T: T = {:.2} s, L_w = {:.2} s, delay {:.2} s each way for {:.2} s \
         ({} reconnects through the relays); lowest lease validity {lowest:.1} s (healthy \
         >= {healthy:.2} s); first write after the lift acked {:.3} s after it",
        t_tol.as_secs_f64(),
        lw.as_secs_f64(),
        d.as_secs_f64(),
        t1.duration_since(t0).as_secs_f64(),
        c.relays(p).iter().map(|r| r.accepted()).sum::<usize>(),
        after.acked.unwrap_or(t1).duration_since(t1).as_secs_f64()
    );
}

/// Fault test 5, long: the leader's etcd traffic stays slowed past `T`. The old
/// primary begins its fence by its horizon and stops acknowledging writes before
/// the new primary acknowledges its first; etcd's history shows exactly one new
/// leader key; once the delay is lifted the old primary streams from the new one.
#[test]
fn real_etcd_slow_for_the_leader_beyond_t() {
    let mut c = bed_relayed("slowlong", 7);
    let p = settled(&mut c);
    let kv = c.get_kv("leader").expect("leader key");
    let (old_name, old_epoch) = (kv.value.clone(), kv.create_revision);
    let (t_tol, _lw, r, horizon) = contract(&c, p, granted_ttl(&c, kv.lease));
    let budget_b = c.opts.demote_budget;
    let d = 2 * r;
    let mut probe = probe_on(&c, p);
    let log_from = c.agent_log(p).len();

    let t0 = Instant::now();
    let t0_boot = tenure::clock::now().secs_f64();
    c.set_etcd_delay(p, d).expect("delay");
    // No renewal sent after t0 can count (its answer takes 4R), so the leader's
    // horizon, and without a watchdog its fence deadline F, is before this.
    let h_bound = horizon.as_secs_f64();

    let fenced = wait_for(FAILOVER, Duration::from_millis(20), || {
        c.agent_log(p)[log_from..]
            .contains("fencing PostgreSQL")
            .then(Instant::now)
    })
    .unwrap_or_else(|| panic!("{} never fenced{}", c.name(p), c.logs_tail(40)));
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    let t_new = Instant::now();
    let first_new = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t0)
    })
    .unwrap_or_else(|| panic!("{} acknowledged no probe write", c.name(np)));
    // Still slow: the old primary must not come back while its etcd is slow.
    assert!(c.write_row(p, 1).is_err(), "old primary still takes writes");

    let t_lift = Instant::now();
    c.set_etcd_delay(p, Duration::ZERO).expect("lift the delay");
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("after the delay was lifted: {e}"));
    let rejoin = t_lift.elapsed();
    one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));

    // Invariant (a): nothing acknowledged by the old primary after the first write
    // sent to the new one; and the probe did see the old primary take writes.
    assert!(probe.first_ack_after(p, probe.started).is_some());
    probe.check_no_overlap(p, np, t0).unwrap();
    let last_old = probe.last_ack(p).and_then(|a| a.acked).expect("acks on p");
    assert!(
        last_old < first_new.sent,
        "old primary's last ack after the new primary's first write was sent"
    );
    // S1: the fence began by F = H, which is at most ttl - M after the delay began.
    let log = c.agent_log(p)[log_from..].to_string();
    let fence_at = fence_logged_at(&log).expect("fence line has a stamp") - t0_boot;
    assert!(
        fence_at <= h_bound + 0.001,
        "fence began {fence_at:.3} s after the delay, past H <= {h_bound:.3} s{}",
        c.logs_tail(40)
    );
    // The agent's own fence deadline F (= H without a watchdog), from its fence
    // reason ("... fence deadline F = <secs>s ..."), on the same clock: the fence
    // began by it.
    let f_own = log
        .split_once("fence deadline F = ")
        .and_then(|(_, r)| r.split_once('s'))
        .and_then(|(n, _)| n.parse::<f64>().ok())
        .map(|f| f - t0_boot)
        .unwrap_or_else(|| panic!("fence reason names no deadline F{}", c.logs_tail(40)));
    assert!(
        fence_at <= f_own + 0.001,
        "fence began {fence_at:.3} s after the delay, past the agent's own F = {f_own:.3} s"
    );
    // Exactly one new leader, from etcd's own history: one creation of `leader`
    // after the old epoch, by the new primary.
    let events = scope_events(&c, old_epoch + 1).unwrap_or_else(|e| panic!("etcd history: {e}"));
    let created: Vec<(&str, i64)> = events
        .iter()
        .filter(|e| e.put && e.key == "leader" && e.create_revision == e.mod_revision)
        .map(|e| (e.value.as_str(), e.create_revision))
        .collect();
    assert_eq!(
        created.len(),
        1,
        "leader keys created after epoch {old_epoch}: {created:?}{}",
        c.logs_tail(40)
    );
    assert_eq!(created[0].0, c.name(np));
    assert_ne!(created[0].0, old_name);
    let (leader, epoch) = c.leader_key().expect("leader key");
    assert_eq!((leader.as_str(), epoch), created[0]);
    println!(
        "slow etcd beyond T: T = {:.2} s, delay {:.2} s each way; fence began {fence_at:.3} s \
         after the delay (its F = {f_own:.3} s, F - B = {:.3} s, bound {h_bound:.2} s; seen {:.2} s); old primary's last \
         ack {:.2} s; new primary {} at {:.2} s (its first write acked at {:.2} s); \
         {} rejoined {:.2} s after the lift; old log mentions a promotion delay on the winner: {}",
        t_tol.as_secs_f64(),
        d.as_secs_f64(),
        f_own - budget_b.as_secs_f64(),
        fenced.duration_since(t0).as_secs_f64(),
        last_old.duration_since(t0).as_secs_f64(),
        c.name(np),
        t_new.duration_since(t0).as_secs_f64(),
        first_new
            .acked
            .unwrap_or(t0)
            .duration_since(t0)
            .as_secs_f64(),
        c.name(p),
        rejoin.as_secs_f64(),
        c.agent_log(np).contains("promotion delayed"),
    );
}

/// Fault test 7: the leader's agent (not PostgreSQL) is stopped past its lease and
/// the promote delay, with no watchdog; a replica takes over. On SIGCONT the old
/// agent sees the stall, fences before any other call (S5), and etcd's own history
/// shows no write to the cluster-state keys by the old leadership after the new
/// leader key was created.
#[test]
fn real_stalled_leader_wakes_and_fences() {
    let mut c = bed("stall");
    let p = settled(&mut c);
    let kv = c.get_kv("leader").expect("leader key");
    let (old_name, old_epoch) = (kv.value.clone(), kv.create_revision);
    let ttl = granted_ttl(&c, kv.lease);
    let cfg = tenure::config::Config::load(c.config_path(p)).expect("config");
    let b = tenure::config::budget(&cfg.timing, ttl, None);
    let stall = Duration::from_secs(u64::from(ttl)) + b.early_expiry_delay;
    let agent = c.agent_pid(p).expect("agent pid") as i32;
    let mut probe = probe_on(&c, p);
    let log_from = c.agent_log(p).len();

    let t_stop = Instant::now();
    kill(Pid::from_raw(agent), Signal::SIGSTOP).expect("SIGSTOP the agent");
    let mut stopped = Stopped(vec![agent as u32]);
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no takeover while the leader is stopped{}", c.logs_tail(40)));
    let t_new = t_stop.elapsed();
    let new_kv = c.get_kv("leader").expect("new leader key");
    assert_eq!(new_kv.value, c.name(np));
    let new_epoch = new_kv.create_revision;
    assert!(new_epoch > old_epoch);
    let first_new = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t_stop)
    })
    .unwrap_or_else(|| panic!("{} acknowledged no probe write", c.name(np)));
    // Stay stopped past ttl + promote delay (the longest a takeover may wait).
    if let Some(rest) = stall.checked_sub(t_stop.elapsed()) {
        std::thread::sleep(rest);
    }
    // Without a watchdog the frozen agent's PostgreSQL is still a writable primary
    // (DESIGN S5, docs/failure-modes.md): the window this test measures.
    let old_writable = c.write_row(p, 1).is_ok();

    let t_cont = Instant::now();
    let t_cont_boot = tenure::clock::now().secs_f64();
    stopped.resume();
    let fenced = wait_for(FAILOVER, Duration::from_millis(10), || {
        c.agent_log(p)[log_from..]
            .contains("fence: Complete")
            .then(Instant::now)
    })
    .unwrap_or_else(|| {
        panic!(
            "{} did not fence after waking{}",
            c.name(p),
            c.logs_tail(40)
        )
    });
    assert!(
        c.write_row(p, 2).is_err(),
        "old primary takes writes after its fence"
    );
    // Once the old agent has dropped its leadership (fence complete, lease given
    // up), etcd's history: nothing of the old leadership landed after the new key.
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        c.agent_log(p)[log_from..]
            .contains("leadership dropped")
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{} never dropped its leadership{}",
            c.name(p),
            c.logs_tail(40)
        )
    });
    no_old_leadership_writes(&c, new_epoch, &old_name, old_epoch, np);
    // Both others stream from the new primary: the old one after its rewind, and the
    // third node too, although while the old agent was stopped its PostgreSQL kept
    // streaming the probe's writes to it, so it may hold WAL past the new timeline's
    // switch point; the agent then stops and rewinds it (DESIGN §3a, `diverged`).
    let third = (0..c.node_count())
        .find(|&i| i != p && i != np)
        .expect("three nodes");
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("after the wake-up: {e}"));
    for _ in 0..5 {
        assert_eq!(
            c.primaries(),
            vec![np],
            "exactly one primary{}",
            c.logs_tail(30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    probe.stop(Duration::from_secs(2));
    let third_rewound = c.agent_log(third).contains("stopping to rewind");

    // S5 in the log: the stall is seen and the fence comes before anything else the
    // old leader does (no acquire, release or history write in between).
    let log = c.agent_log(p)[log_from..].to_string();
    let pos = |needle: &str| log.find(needle);
    let woke = pos("woke past the fence start").unwrap_or_else(|| {
        panic!(
            "{} did not log the S5 wake-up{}",
            c.name(p),
            c.logs_tail(40)
        )
    });
    let fence = pos("fencing PostgreSQL").expect("fence line");
    assert!(woke < fence, "fence before the S5 wake-up line");
    for other in [
        "acquire",
        "released the leader key",
        "history append",
        "promoted",
    ] {
        if let Some(o) = pos(other) {
            assert!(
                o > fence,
                "`{other}` logged before the fence{}",
                c.logs_tail(40)
            );
        }
    }
    // No write acknowledged by the old primary after its fence completed (the log
    // stamp is on CLOCK_BOOTTIME, rounded to the millisecond).
    let complete_at = logged_at(&log, "fence: Complete").expect("stamp") - t_cont_boot;
    let late_acks: Vec<f64> = probe
        .attempts(p)
        .iter()
        .filter_map(|a| a.acked)
        .filter(|&t| t > t_cont)
        .map(|t| t.duration_since(t_cont).as_secs_f64())
        .filter(|&s| s > complete_at + 0.001)
        .collect();
    assert!(
        late_acks.is_empty(),
        "{} acknowledged writes after its fence completed: {late_acks:?}",
        c.name(p)
    );

    // From etcd itself, again at the end (the old node has been a replica since).
    let seen = no_old_leadership_writes(&c, new_epoch, &old_name, old_epoch, np);
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("refused")).collect();
    let old_acks_after_new = probe
        .attempts(p)
        .iter()
        .filter(|a| a.acked.is_some_and(|t| t >= first_new.sent))
        .count();
    println!(
        "stalled leader: {} stopped {:.2} s (ttl {ttl} s + promote delay {:.2} s); {} took over \
         {:.2} s after the stop (epoch {old_epoch} -> {new_epoch}); old primary writable while \
         stopped: {old_writable}, {old_acks_after_new} probe writes acked by it after the new \
         primary's first (no watchdog); after SIGCONT the fence completed {complete_at:.3} s \
         later (seen {:.2} s); cluster-state changes after the new key: {seen:?}; refused guards \
         in the old log: {refused:?}; {} had to rewind: {third_rewound}",
        c.name(p),
        t_cont.duration_since(t_stop).as_secs_f64(),
        b.early_expiry_delay.as_secs_f64(),
        c.name(np),
        t_new.as_secs_f64(),
        fenced.duration_since(t_cont).as_secs_f64(),
        c.name(third),
    );
}

/// Leadership moves around one cluster, with no agent restarted in between:
/// revoking the leader's lease (its agent fences and stays up) several times
/// makes some node lead a second time in the same run, and a host crash in the
/// middle makes replicas lose a new primary right after a failover. Every round
/// ends with one primary, every other node streaming from it (so a node that
/// leads again makes its replicas' slots again, and a replica whose primary went
/// away is not taken for forked), and no overlap of acknowledged writes. Found by
/// the real-parts soak (seeds 1 and 2) and the failover benchmark.
#[test]
fn real_leadership_moves_around_one_cluster() {
    let mut c = bed("around");
    let mut p = settled(&mut c);
    let mut probe = probe_on(&c, p);
    let mut leaders = vec![c.name(p).to_string()];
    for (round, fault) in ["revoke", "revoke", "crash", "revoke", "revoke"]
        .into_iter()
        .enumerate()
    {
        let epoch = c.leader_key().expect("leader key").1;
        let t0 = Instant::now();
        match fault {
            "revoke" => {
                let lease = c.get_kv("leader").expect("leader key").lease;
                etcdctl(&c, &["lease", "revoke", &format!("{lease:x}")])
                    .unwrap_or_else(|e| panic!("revoke: {e}"));
            }
            _ => {
                c.host_crash(p).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        let np = wait_for(FAILOVER, Duration::from_millis(20), || {
            c.leader_key()
                .filter(|(_, e)| *e != epoch)
                .and_then(|(name, _)| c.index_of(&name))
                .filter(|&i| c.api_get(i, "/primary") == Some(200))
        })
        .unwrap_or_else(|| panic!("round {round} ({fault}): no new primary{}", c.logs_tail(40)));
        if fault == "crash" {
            c.start_agent(p).unwrap_or_else(|e| panic!("{e}"));
        }
        one_primary_at_the_end(&c, np);
        if np != p {
            probe
                .check_no_overlap(p, np, t0)
                .unwrap_or_else(|e| panic!("round {round} ({fault}): {e}"));
        }
        println!(
            "round {round} ({fault}): {} -> {} in {:.2} s, all replicas streaming",
            c.name(p),
            c.name(np),
            t0.elapsed().as_secs_f64()
        );
        leaders.push(c.name(np).to_string());
        // A real rewind leaves pg_replslot empty; whether this round's demotion
        // needed one depends on timing. Empty every replica's slots, so a node that
        // leads again must make its replicas' slots again or they cannot stream.
        // (Replicas also keep copies of the leader's published slots and make
        // them again within a loop or two, so a node that leads again usually
        // finds them: this test no longer proves the leader's own upkeep alone;
        // `real_pg` and `real_switchover` cover that.)
        for i in (0..c.node_count()).filter(|&i| i != np) {
            c.sql(
                i,
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active",
            )
            .unwrap_or_else(|e| panic!("dropping {}'s slots: {e}", c.name(i)));
        }
        p = np;
    }
    probe.stop(Duration::from_secs(2));
    println!("leaders in turn: {leaders:?}");
    // Three nodes, six leaderships: some node led twice (the case the slot cache
    // got wrong); the test is only meaningful if that happened.
    let mut sorted = leaders.clone();
    sorted.sort();
    sorted.dedup();
    assert!(
        sorted.len() < leaders.len(),
        "no node led twice: {leaders:?}"
    );
}

/// Fault test 6, second half: PostgreSQL on the primary crashes and cannot start
/// again (here a setting it refuses, put in `postgresql.auto.conf` as an operator's
/// `ALTER SYSTEM` could). After `primary_start_timeout` the agent fences, releases
/// the key and a replica takes over; once the operator removed the setting and
/// restarted the agent, the old node rejoins as a replica.
#[test]
fn real_postgres_cannot_restart_on_the_primary() {
    let mut opts = common::options("faults", "pgnostart");
    opts.primary_start_timeout = 5;
    let mut c = common::start(opts);
    let p = settled(&mut c);
    let (_, epoch) = c.leader_key().expect("leader key");
    let mut probe = probe_on(&c, p);
    let auto = c.data_dir(p).join("postgresql.auto.conf");
    let before = std::fs::read_to_string(&auto).unwrap_or_default();
    std::fs::write(&auto, format!("{before}shared_buffers = 'plenty'\n"))
        .unwrap_or_else(|e| panic!("writing {}: {e}", auto.display()));

    let t0 = Instant::now();
    let pm = c.postmaster_pid(p).expect("postmaster pid");
    for pid in c.pg_pids(p) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = kill(Pid::from_raw(pm), Signal::SIGKILL);
    // The agent tries to start it in place, then gives up and fences.
    wait_for(FAILOVER, Duration::from_millis(20), || {
        c.agent_log(p)
            .contains("s > primary_start_timeout")
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{} did not give up on primary_start_timeout{}",
            c.name(p),
            c.logs_tail(30)
        )
    });
    // The bad setting stays until a replica has taken over (else the old node,
    // whose data is the newest, may well win the key back once it can start).
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no replica took over{}", c.logs_tail(40)));
    let took = t0.elapsed();
    let (holder, new_epoch) = c.leader_key().expect("leader key");
    assert_eq!(holder, c.name(np));
    assert_ne!(new_epoch, epoch, "a new leadership");
    probe
        .check_no_overlap(p, np, t0)
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{} could not restart; {} primary {:.2} s after the crash (primary_start_timeout 5 s)",
        c.name(p),
        c.name(np),
        took.as_secs_f64()
    );

    // The operator removes the bad setting and restarts the old node's agent (its
    // rewinds failed meanwhile: pg_rewind runs the target's crash recovery first,
    // which the setting broke); it rewinds and rejoins as a replica.
    std::fs::write(&auto, &before).unwrap_or_else(|e| panic!("restoring: {e}"));
    c.kill_agent(p);
    c.start_agent(p).unwrap_or_else(|e| panic!("{e}"));
    one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));
}
