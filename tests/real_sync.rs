//! Synchronous mode on real parts (DESIGN §3a, issue 4): the `sync` key and
//! `synchronous_standby_names` move in the order the design gives, strict mode
//! never acknowledges a write with no standby, and a frozen primary agent loses no
//! acknowledged row (fault test 9a) while asynchronous replication is measured
//! (9b). 9c (the stand-in armed: zero window) is
//! `real_watchdog_e2e::real_wd_frozen_leader_is_reset_before_horizon`.
//!
//! Real etcd (three members), real PostgreSQL 15, real agents; run one at a time
//! (nextest group `real`). Times are printed; ordering and data are asserted.

mod common;

use std::time::{Duration, Instant};

use common::{BOOT, FAILOVER, REJOIN, acked_rows_on, one_primary_at_the_end, probe_on};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::probe::WriteProbe;
use tenure::testbed::{Stopped, wait_for};

/// Finding a replacement standby takes a few loops (unlist, names, `sync`, list).
const RESYNC: Duration = Duration::from_secs(30);

fn bed(tag: &str, nodes: usize, sync: bool, strict: bool) -> TestCluster {
    let mut opts = common::options("sync", tag);
    opts.nodes = nodes;
    opts.synchronous_mode = sync;
    opts.synchronous_mode_strict = strict;
    common::start(opts)
}

/// The `sync` key: `(leader, sync_standby, mod_revision)`.
fn sync_key(c: &TestCluster) -> Option<(String, Option<String>, i64)> {
    let kv = c.get_kv("sync")?;
    let v: serde_json::Value = serde_json::from_str(&kv.value).ok()?;
    Some((
        v.get("leader")?.as_str()?.to_string(),
        v.get("sync_standby")
            .and_then(|s| s.as_str())
            .map(String::from),
        kv.mod_revision,
    ))
}

fn names(c: &TestCluster, p: usize) -> Option<String> {
    c.sql_one(p, "SHOW synchronous_standby_names").ok()
}

fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

/// The standbys `synchronous_standby_names` names in a form that makes every
/// commit wait for each of them: one quoted name, or `FIRST n (...)` naming `n`
/// (`None`: another form, which no listed standby may be under).
fn waited_for(names: &str) -> Option<Vec<String>> {
    let unquote = |q: &str| Some(q.strip_prefix('"')?.strip_suffix('"')?.to_string());
    match names.strip_prefix("FIRST ") {
        Some(rest) => {
            let (n, list) = rest.split_once(" (")?;
            let list: Vec<String> = list
                .strip_suffix(')')?
                .split(", ")
                .map(unquote)
                .collect::<Option<_>>()?;
            (n.parse::<usize>().ok()? == list.len()).then_some(list)
        }
        None => Some(vec![unquote(names)?]),
    }
}

/// Wait until primary `p` has a synchronous standby in every sense: the key lists
/// it, the names name it and `pg_stat_replication` says `sync`. Its index.
fn wait_listed(c: &TestCluster, p: usize, not: &[usize], limit: Duration) -> usize {
    let me = c.name(p).to_string();
    wait_for(limit, Duration::from_millis(100), || {
        let (leader, Some(s), _) = sync_key(c)? else {
            return None;
        };
        let i = c.index_of(&s)?;
        if leader != me || not.contains(&i) || names(c, p)? != quoted(&s) {
            return None;
        }
        let state = c
            .sql_one(
                p,
                &format!(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{s}'"
                ),
            )
            .ok()?;
        (state == "sync").then_some(i)
    })
    .unwrap_or_else(|| {
        panic!(
            "no synchronous standby listed for {me} within {limit:?}: sync key {:?}, names {:?}{}",
            sync_key(c),
            names(c, p),
            c.logs_tail(30)
        )
    })
}

/// DESIGN §3a's order, sampled from outside: read the key, the names, the key
/// again; if the key did not change in between and lists `s` (or several), the
/// names must make every commit wait for `s` (a standby is listed only after the
/// names hold it, and unlisted before they drop it). Returns the number of samples
/// that could judge.
fn check_order_until(
    c: &TestCluster,
    p: usize,
    limit: Duration,
    mut done: impl FnMut(&TestCluster) -> bool,
) -> usize {
    let t0 = Instant::now();
    let mut judged = 0;
    while t0.elapsed() < limit {
        let k1 = sync_key(c);
        let n = names(c, p);
        let k2 = sync_key(c);
        if let (Some((_, Some(s), r1)), Some(n), Some((_, _, r2))) = (&k1, &n, &k2)
            && r1 == r2
        {
            judged += 1;
            let waited = waited_for(n).unwrap_or_default();
            for one in s.split(',') {
                assert!(
                    waited.iter().any(|w| w == one),
                    "the sync key lists {s} (revision {r1}) while synchronous_standby_names is \
                     {n:?}{}",
                    c.logs_tail(20)
                );
            }
        }
        if done(c) {
            return judged;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "the transition did not finish within {limit:?}: sync key {:?}, names {:?}{}",
        sync_key(c),
        names(c, p),
        c.logs_tail(40)
    );
}

/// Non-strict: a standby is made synchronous; when it dies it is unlisted, the
/// names follow, another standby replaces it, writes go on; it rejoins.
#[test]
fn real_sync_standby_lost_and_replaced_in_order() {
    let mut c = bed("replace", 3, true, false);
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let s = wait_listed(&c, p, &[], RESYNC);
    let mut probe = probe_on(&c, p);
    let r = (0..3).find(|&i| i != p && i != s).expect("a third node");
    // Patroni's routes for load balancers follow the key.
    let routed = wait_for(Duration::from_secs(5), Duration::from_millis(50), || {
        (c.api_get(s, "/sync") == Some(200)
            && c.api_get(r, "/async") == Some(200)
            && c.api_get(r, "/sync") == Some(503)
            && c.api_get(p, "/sync") == Some(503))
        .then_some(())
    });
    assert!(
        routed.is_some(),
        "/sync and /async do not follow the sync key"
    );

    let crash = c.host_crash(s).unwrap_or_else(|e| panic!("{e}"));
    println!("crashed the synchronous standby {}", c.name(s));
    let judged = check_order_until(&c, p, RESYNC, |c| {
        let listed = sync_key(c).and_then(|(_, s, _)| s);
        listed.as_deref() == Some(c.name(r)) && names(c, p).as_deref() == Some(&quoted(c.name(r)))
    });
    println!(
        "{} replaced {} as synchronous standby {:.2} s after the crash ({judged} samples judged the order)",
        c.name(r),
        c.name(s),
        crash.elapsed().as_secs_f64()
    );
    assert!(judged > 0, "no sample could judge the order");
    let after = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(p, Instant::now() - Duration::from_millis(100))
    });
    assert!(after.is_some(), "writes did not resume on {}", c.name(p));

    c.start_agent(s).unwrap_or_else(|e| panic!("{e}"));
    one_primary_at_the_end(&c, p);
    probe.stop(Duration::from_secs(2));
    let (acked, missing) = acked_rows_on(&c, &probe, p).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        missing.is_empty(),
        "{} of {acked} acknowledged rows missing: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

/// `synchronous_node_count = 2` on three nodes: the primary names both replicas
/// together (`FIRST 2 (...)`: every commit waits for each), lists both once each is
/// `sync`; the primary's host and one listed standby's crash together under
/// writes, and the other listed standby, whatever its position, takes over with
/// every acknowledged row (review L3: any listed standby, not only the most
/// advanced); both rejoin and are listed; then a listed standby's host crashes
/// and it is unlisted before the names drop it, while writes go on through the
/// other.
#[test]
fn real_sync_two_standbys_either_takes_over_and_a_lost_one_is_unlisted_first() {
    let mut opts = common::options("sync", "two");
    opts.nodes = 3;
    opts.synchronous_mode = true;
    opts.synchronous_node_count = 2;
    let mut c = common::start(opts);
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let both_listed = |c: &TestCluster, p: usize| -> Option<Vec<usize>> {
        let (leader, Some(s), _) = sync_key(c)? else {
            return None;
        };
        let mut want: Vec<String> = (0..3)
            .filter(|&i| i != p)
            .map(|i| c.name(i).to_string())
            .collect();
        want.sort();
        let names_want = format!(
            "FIRST 2 ({})",
            want.iter()
                .map(|n| quoted(n))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if leader != c.name(p) || s != want.join(",") || names(c, p)? != names_want {
            return None;
        }
        let sync = c
            .sql_one(
                p,
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
            )
            .ok()?;
        (sync == "2").then(|| want.iter().filter_map(|n| c.index_of(n)).collect())
    };
    let listed = wait_for(RESYNC, Duration::from_millis(100), || both_listed(&c, p))
        .unwrap_or_else(|| {
            panic!(
                "{} did not list both replicas: sync key {:?}, names {:?}{}",
                c.name(p),
                sync_key(&c),
                names(&c, p),
                c.logs_tail(30)
            )
        });
    let routed = wait_for(Duration::from_secs(5), Duration::from_millis(50), || {
        listed
            .iter()
            .all(|&i| c.api_get(i, "/sync") == Some(200))
            .then_some(())
    });
    assert!(
        routed.is_some(),
        "/sync does not answer 200 on both listed standbys"
    );
    println!(
        "{} lists {:?}, names {:?}",
        c.name(p),
        sync_key(&c),
        names(&c, p)
    );

    // The primary's host and one listed standby's crash together under writes:
    // the other takes over.
    let mut probe = probe_on(&c, p);
    std::thread::sleep(Duration::from_secs(1));
    let (lost, survivor) = (listed[0], listed[1]);
    let crash = c.host_crash(p).unwrap_or_else(|e| panic!("{e}"));
    c.host_crash(lost).unwrap_or_else(|e| panic!("{e}"));
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no failover after the crash{}", c.logs_tail(40)));
    assert_eq!(
        np, survivor,
        "only the surviving listed standby may take over"
    );
    println!(
        "{} took over {:.2} s after {} and {} crashed",
        c.name(np),
        crash.elapsed().as_secs_f64(),
        c.name(p),
        c.name(lost)
    );
    let after = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
        probe.first_ack_after(np, Instant::now() - Duration::from_millis(100))
    });
    assert!(after.is_some(), "writes did not resume on {}", c.name(np));

    // Both rejoin; the new primary lists both.
    c.start_agent(p).unwrap_or_else(|e| panic!("{e}"));
    c.start_agent(lost).unwrap_or_else(|e| panic!("{e}"));
    let listed = wait_for(REJOIN + RESYNC, Duration::from_millis(100), || {
        both_listed(&c, np)
    })
    .unwrap_or_else(|| {
        panic!(
            "{} did not list both replicas after the rejoin: sync key {:?}, names {:?}{}",
            c.name(np),
            sync_key(&c),
            names(&c, np),
            c.logs_tail(30)
        )
    });

    // A listed standby's host crashes: unlisted first, then the names follow; the
    // other stays listed and writes go on.
    let gone = listed[0];
    let stays = listed[1];
    let crash = c.host_crash(gone).unwrap_or_else(|e| panic!("{e}"));
    let judged = check_order_until(&c, np, RESYNC, |c| {
        sync_key(c).and_then(|(_, s, _)| s).as_deref() == Some(c.name(stays))
            && names(c, np).as_deref() == Some(&quoted(c.name(stays)))
    });
    println!(
        "{} unlisted {:.2} s after its crash ({judged} samples judged the order)",
        c.name(gone),
        crash.elapsed().as_secs_f64()
    );
    assert!(judged > 0, "no sample could judge the order");
    let after = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, Instant::now() - Duration::from_millis(100))
    });
    assert!(after.is_some(), "writes did not resume on {}", c.name(np));
    c.start_agent(gone).unwrap_or_else(|e| panic!("{e}"));
    one_primary_at_the_end(&c, np);
    probe.stop(Duration::from_secs(2));
    let (acked, missing) = acked_rows_on(&c, &probe, np).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{acked} acknowledged writes, {} missing on {}",
        missing.len(),
        c.name(np)
    );
    assert!(acked > 0);
    assert!(
        missing.is_empty(),
        "{} of {acked} acknowledged rows missing on {}: {:?}",
        missing.len(),
        c.name(np),
        &missing[..missing.len().min(10)]
    );
}

/// Strict: with its only standby dead the primary acknowledges nothing; the key
/// says so; once the standby is back, writes resume.
#[test]
fn real_sync_strict_acknowledges_nothing_without_a_standby() {
    let mut c = bed("strict", 2, true, true);
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let r = 1 - p;
    let s = wait_listed(&c, p, &[], RESYNC);
    assert_eq!(s, r);
    let mut probe = probe_on(&c, p);

    let crash = c.host_crash(r).unwrap_or_else(|e| panic!("{e}"));
    let judged = check_order_until(&c, p, RESYNC, |c| {
        sync_key(c).is_some_and(|(_, s, _)| s.is_none()) && names(c, p).as_deref() == Some("*")
    });
    println!(
        "strict: the key lists no standby and the names are '*' {:.2} s after the crash ({judged} samples judged the order)",
        crash.elapsed().as_secs_f64()
    );
    // Give the primary time it could have used to acknowledge something.
    std::thread::sleep(Duration::from_secs(3));
    let restart = Instant::now();
    let during: Vec<_> = probe
        .attempts(p)
        .into_iter()
        .filter(|a| a.sent >= crash && a.acked.is_some_and(|t| t < restart))
        .collect();
    assert!(
        during.is_empty(),
        "strict mode: {} writes sent after the only standby died were acknowledged before it came back (first #{})",
        during.len(),
        during[0].seq
    );
    assert_eq!(
        c.primaries(),
        vec![p],
        "the primary stays primary (it only waits)"
    );

    c.start_agent(r).unwrap_or_else(|e| panic!("{e}"));
    wait_listed(&c, p, &[], REJOIN);
    let resumed = wait_for(Duration::from_secs(20), Duration::from_millis(50), || {
        probe
            .attempts(p)
            .into_iter()
            .find(|a| a.acked.is_some_and(|t| t >= restart))
    });
    assert!(
        resumed.is_some(),
        "no write acknowledged after the standby returned{}",
        c.logs_tail(20)
    );
    probe.stop(Duration::from_secs(2));
    let (acked, missing) = acked_rows_on(&c, &probe, p).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        missing.is_empty(),
        "{} of {acked} acknowledged rows missing",
        missing.len()
    );
}

/// What a frozen-agent failover left: the old and new primary, the standby the
/// key listed at the freeze, the send instant of the new primary's first
/// acknowledged write, and the probe.
struct Frozen {
    old: usize,
    new: usize,
    listed: Option<usize>,
    first_new: Instant,
    probe: WriteProbe,
}

/// Freeze the primary's agent (watchdog off) until a new primary acknowledged a
/// write, plus `extra`; then thaw it.
fn frozen_agent_failover(c: &mut TestCluster, extra: Duration) -> Frozen {
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let listed = c
        .opts
        .synchronous_mode
        .then(|| wait_listed(c, p, &[], RESYNC));
    let probe = probe_on(c, p);
    std::thread::sleep(Duration::from_millis(500));
    let pid = c.agent_pid(p).expect("leader agent");
    let frozen = Stopped::stop(vec![pid]).unwrap_or_else(|e| panic!("{e}"));
    let stopped = Instant::now();
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    let first = wait_for(Duration::from_secs(15), Duration::from_millis(20), || {
        probe.first_ack_after(np, stopped)
    })
    .unwrap_or_else(|| panic!("new primary {} acknowledged no write", c.name(np)));
    println!(
        "agent of {} frozen; {} acknowledged its first write {:.2} s later",
        c.name(p),
        c.name(np),
        first.sent.duration_since(stopped).as_secs_f64()
    );
    std::thread::sleep(extra);
    frozen.resume();
    Frozen {
        old: p,
        new: np,
        listed,
        first_new: first.sent,
        probe,
    }
}

/// Writes the old primary acknowledged at or after the first write sent to the new.
fn late_acks(f: &Frozen) -> Vec<tenure::testbed::probe::Attempt> {
    f.probe
        .attempts(f.old)
        .into_iter()
        .filter(|a| a.acked.is_some_and(|t| t >= f.first_new))
        .collect()
}

/// Fault test 9(a): watchdog off, synchronous mode on, the primary's agent frozen.
/// Only the synchronous standby may take over, and every acknowledged row is on
/// it: the old primary's commits wait for a standby that has left.
#[test]
fn real_sync_frozen_primary_agent_loses_no_acknowledged_row() {
    let mut c = bed("frozen9a", 3, true, false);
    let mut f = frozen_agent_failover(&mut c, Duration::from_secs(2));
    assert_eq!(
        Some(f.new),
        f.listed,
        "only the listed synchronous standby may take over"
    );
    // The old agent thawed: it fences, then rejoins as a replica.
    one_primary_at_the_end(&c, f.new);
    f.probe.stop(Duration::from_secs(2));
    println!(
        "9a: the old primary acknowledged {} writes after the first write sent to the new one",
        late_acks(&f).len()
    );
    let (acked, missing) = acked_rows_on(&c, &f.probe, f.new).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "9a: {acked} acknowledged writes, {} missing on the new primary",
        missing.len()
    );
    assert!(acked > 0);
    assert!(
        missing.is_empty(),
        "invariant (b): {} of {acked} acknowledged rows are missing on the new primary {}: {:?}",
        missing.len(),
        c.name(f.new),
        &missing[..missing.len().min(10)]
    );
    let (leader, _, _) = sync_key(&c).expect("sync key");
    assert_eq!(
        leader,
        c.name(f.new),
        "the new primary rewrote the sync key"
    );
}

/// Fault test 9(b): watchdog off, asynchronous: the window in which two nodes
/// acknowledged writes is measured and reported, not asserted (this is what the
/// watchdog is for). Asserted: a failover happens and the old primary rejoins.
#[test]
fn real_async_frozen_primary_agent_window_is_measured() {
    let mut c = bed("frozen9b", 3, false, false);
    let mut f = frozen_agent_failover(&mut c, Duration::from_secs(2));
    one_primary_at_the_end(&c, f.new);
    f.probe.stop(Duration::from_secs(2));
    let late = late_acks(&f);
    let window = late
        .iter()
        .filter_map(|a| a.acked)
        .max()
        .map(|t| t.duration_since(f.first_new));
    let (acked, missing) = acked_rows_on(&c, &f.probe, f.new).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "9b (measured, not asserted): the old primary {} acknowledged {} writes during {:.3} s after \
         the first write sent to the new primary {}; {} of {acked} acknowledged rows are not on the new primary",
        c.name(f.old),
        late.len(),
        window.map_or(0.0, |w| w.as_secs_f64()),
        c.name(f.new),
        missing.len()
    );
}

/// The operator turns synchronous mode on and off at run time through the
/// `config` key (the way Patroni's `patronictl edit-config` does): on, the leader
/// writes the key naming itself and makes a standby synchronous; off, it deletes
/// the key and clears the names.
#[test]
fn real_sync_mode_switched_on_and_off_through_the_config_key() {
    let mut c = bed("toggle", 3, false, false);
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sync_key(&c), None, "asynchronous: no sync key");
    let set = |c: &TestCluster, on: bool| {
        let raw = c.get_key("config").expect("config key");
        let mut v: serde_json::Value = serde_json::from_str(&raw).expect("config JSON");
        v["synchronous_mode"] = serde_json::Value::Bool(on);
        tenure::testbed::etcdkv::put(
            &c.endpoints(),
            &format!("{}config", c.prefix()),
            &v.to_string(),
            Duration::from_secs(2),
        )
        .unwrap_or_else(|e| panic!("writing config: {e}"));
    };
    set(&c, true);
    let s = wait_listed(&c, p, &[], RESYNC);
    println!(
        "synchronous mode on: {} is the synchronous standby",
        c.name(s)
    );
    let mut probe = probe_on(&c, p);

    set(&c, false);
    let off = wait_for(RESYNC, Duration::from_millis(100), || {
        (sync_key(&c).is_none() && names(&c, p).as_deref() == Some("")).then_some(())
    });
    assert!(
        off.is_some(),
        "synchronous mode off: sync key {:?}, names {:?}{}",
        sync_key(&c),
        names(&c, p),
        c.logs_tail(20)
    );
    // Asynchronous again: a dead replica no longer holds commits.
    let r = (0..3).find(|&i| i != p).expect("a replica");
    c.host_crash(r).unwrap_or_else(|e| panic!("{e}"));
    let after = Instant::now();
    let acked = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(p, after)
    });
    assert!(
        acked.is_some(),
        "writes wait although synchronous mode is off"
    );
    c.start_agent(r).unwrap_or_else(|e| panic!("{e}"));
    one_primary_at_the_end(&c, p);
    probe.stop(Duration::from_secs(2));
}

/// How long the new standby's link stays cut after the old standby's crash when the
/// `sync` key has not named it by then (a switch without the catch-up rule names it
/// within a few loops: unlist, names, settle, list).
const HEAL_AFTER: Duration = Duration::from_secs(6);

/// Issue 8, finding 10: a synchronous standby switch under write load, then the
/// primary's host crashes the moment the `sync` key names the new standby. The new
/// standby `b` keeps its replication connection but receives nothing (its link to
/// the primary is cut: the primary still reports it `streaming`, and `sync` once
/// the names name it) while the old standby `a` acknowledges writes for a second;
/// then `a`'s host crashes and the leader switches to `b`. The key may name `b`
/// only once `b` flushed what `a` acknowledged, so it must not name it while the
/// link is cut; once healed, `b` catches up, is named, the primary dies, `b` takes
/// over and holds every acknowledged row.
#[test]
fn real_sync_switch_then_primary_crash_loses_no_acknowledged_row() {
    let mut opts = common::options("sync", "switch");
    opts.nodes = 3;
    opts.netns = true;
    opts.synchronous_mode = true;
    let mut c = common::start(opts);
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let a = wait_listed(&c, p, &[], RESYNC);
    let b = (0..3).find(|&i| i != p && i != a).expect("a third node");
    let (pn, an, bn) = (
        c.name(p).to_string(),
        c.name(a).to_string(),
        c.name(b).to_string(),
    );
    let mut probe = probe_on(&c, p);

    // `b` stops receiving WAL; for the primary it is still a streaming standby.
    c.cut_between(b, p).unwrap_or_else(|e| panic!("cut: {e}"));
    let cut = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let through_a = probe
        .attempts(p)
        .iter()
        .filter(|x| x.sent >= cut && x.acked.is_some())
        .count();
    assert!(
        through_a > 0,
        "no write acknowledged through {an} while {bn} was cut off"
    );
    let crash_a = c.host_crash(a).unwrap_or_else(|e| panic!("{e}"));

    // Poll the key; crash the primary's host the moment it names `b`. Heal the cut
    // after HEAL_AFTER if the key has not named `b` by then.
    let mut healed: Option<Instant> = None;
    let named = loop {
        if let Some((l, Some(s), _)) = sync_key(&c)
            && l == pn
            && s == bn
        {
            break Instant::now();
        }
        if healed.is_none() && crash_a.elapsed() >= HEAL_AFTER {
            c.heal(b).unwrap_or_else(|e| panic!("heal: {e}"));
            healed = Some(Instant::now());
        }
        assert!(
            crash_a.elapsed() < HEAL_AFTER + RESYNC,
            "the sync key never named {bn}: {:?}{}",
            sync_key(&c),
            c.logs_tail(40)
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let crash_p = c.host_crash(p).unwrap_or_else(|e| panic!("{e}"));
    let named_while_cut = healed.is_none();
    if named_while_cut {
        c.heal(b).unwrap_or_else(|e| panic!("heal: {e}"));
    }
    println!(
        "{through_a} writes acknowledged through {an} while {bn} was cut off; {an} crashed; the sync key \
         named {bn} {:.2} s later ({}); {pn} crashed {:.3} s after that",
        named.duration_since(crash_a).as_secs_f64(),
        match healed {
            Some(h) => format!(
                "{:.2} s after the link was healed",
                named.duration_since(h).as_secs_f64()
            ),
            None => "while its link was still cut".to_string(),
        },
        crash_p.duration_since(named).as_secs_f64()
    );
    let waited = c
        .agent_log(p)
        .lines()
        .find(|l| l.contains(&format!("waiting for {bn} to flush to")))
        .map(String::from);
    println!("{pn} said: {waited:?}");

    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    assert_eq!(np, b, "only {bn}, the listed standby, may take over");
    probe.stop(Duration::from_secs(2));
    let (acked, missing) = acked_rows_on(&c, &probe, b).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{acked} acknowledged writes, {} missing on the new primary {bn}",
        missing.len()
    );
    assert!(acked > 0);
    assert!(
        missing.is_empty(),
        "invariant (b): {} of {acked} acknowledged rows are missing on the new primary {bn} \
         (named synchronous while its link was cut: {named_while_cut}): {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(
        !named_while_cut,
        "the sync key named {bn} while it could not have flushed what {an} acknowledged"
    );
    assert!(
        waited.is_some(),
        "{pn}'s log never said what the switch waited for"
    );
}

/// `maximum_lag_on_syncnode`: a synchronous standby whose WAL receiver hangs
/// (no TCP reset: it stays `streaming` and `sync` in `pg_stat_replication`) holds
/// every commit until `wal_sender_timeout` (60 s by default). With the lag rule
/// the primary swaps it for the healthy replica, added before the hung one is
/// unlisted, unlisted before the names drop it (the order
/// sampled throughout), and the commit that was waiting completes.
#[test]
fn real_sync_a_hung_standby_is_swapped_for_a_healthy_one_by_maximum_lag_on_syncnode() {
    let mut c = bed("lagswap", 3, true, false);
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let s = wait_listed(&c, p, &[], RESYNC);
    let r = (0..3).find(|&i| i != p && i != s).expect("a third node");
    common::set_config_field(&c, "maximum_lag_on_syncnode", 1_048_576.into(), Some(p));

    // Hang the listed standby's WAL receiver (continued on every way out).
    struct Hung(nix::unistd::Pid);
    impl Drop for Hung {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
        }
    }
    let pid: i32 = c
        .sql_one(s, "SELECT pid FROM pg_stat_wal_receiver")
        .expect("a WAL receiver")
        .parse()
        .expect("a pid");
    let hung = Hung(nix::unistd::Pid::from_raw(pid));
    nix::sys::signal::kill(hung.0, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    let t0 = Instant::now();
    // About 20 MB of WAL in one transaction: its commit waits for the hung one.
    // Its own connection, with no statement_timeout: a cancel would end the
    // wait for the standby with a warning, not an acknowledgement.
    let (addr, port, pw) = (c.addr(p), c.pg_port(p), c.passwords.superuser.clone());
    let write = std::thread::spawn(move || -> Result<(), String> {
        let mut client = postgres::Config::new()
            .host(&addr.to_string())
            .port(port)
            .user("postgres")
            .password(&pw)
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(2))
            .connect(postgres::NoTls)
            .map_err(|e| e.to_string())?;
        client
            .batch_execute(
                "CREATE TABLE lagswap AS SELECT g, repeat('x', 200) AS pad \
                 FROM generate_series(1, 80000) g",
            )
            .map_err(|e| e.to_string())
    });
    // The key never lists fewer standbys for lag: the healthy one is added first.
    let mut emptied = false;
    let judged = check_order_until(&c, p, RESYNC, |c| {
        let read = sync_key(c);
        // Only a read that answered with no standby (a failed read is no news).
        emptied |= matches!(read, Some((_, None, _)));
        let listed = read.and_then(|(_, s, _)| s);
        listed.as_deref() == Some(c.name(r)) && names(c, p).as_deref() == Some(&quoted(c.name(r)))
    });
    assert!(!emptied, "the sync key listed nobody during the swap");
    let swapped = t0.elapsed();
    // A commit already waiting is released at the new standby's next reply: at
    // once under write load, else within `wal_receiver_status_interval` (10 s).
    let acked = wait_for(RESYNC, Duration::from_millis(50), || {
        write.is_finished().then_some(())
    });
    assert!(
        acked.is_some(),
        "the commit never came back{}",
        c.logs_tail(20)
    );
    write
        .join()
        .expect("the writer")
        .unwrap_or_else(|e| panic!("the write: {e}"));
    println!(
        "{} swapped for {} {:.2} s after its WAL receiver hung ({judged} samples judged the \
         order); the waiting commit acknowledged {:.2} s after",
        c.name(s),
        c.name(r),
        swapped.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    assert!(judged > 0, "no sample could judge the order");
    // The waiting commit was acknowledged while the standby still hangs.
    assert_eq!(
        c.sql_one(p, "SELECT count(*) FROM lagswap").ok().as_deref(),
        Some("80000")
    );
    // It was the lag rule (the reason says so) and not `wal_sender_timeout`
    // (60 s by default, twice RESYNC) that moved it.
    assert!(
        c.agent_log(p).contains(&format!(
            "as synchronous standby beside lagging {}",
            c.name(s)
        )),
        "no swap for lag in the log{}",
        c.logs_tail(30)
    );
    drop(hung);
    one_primary_at_the_end(&c, p);
}
