//! Partition tests (DESIGN §6 "Partitions"): the same three agents and three etcd
//! members as `real_e2e`, each in its own network namespace joined by a bridge
//! (`testbed::netns`), cut apart with nftables inside a namespace. The test process
//! itself is never cut off: it watches every node through its own veth.
//!
//! Every failover test checks the invariant with the write probe: no write is
//! acknowledged by the old primary after the first write sent to the new one, and
//! exactly one primary exists at the end. They run one at a time (nextest group
//! `real`) and need root, iproute2, nftables, etcd-server and postgresql-15.

mod common;

use std::time::{Duration, Instant};

use common::{FAILOVER, REJOIN, settled};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

fn bed(tag: &str) -> TestCluster {
    let mut opts = common::options("part", tag);
    opts.netns = true;
    common::start(opts)
}

/// Our namespaces that `ip netns list` still shows.
fn namespaces_left(names: &[String]) -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let listed: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    names
        .iter()
        .filter(|n| listed.contains(&n.as_str()))
        .cloned()
        .collect()
}

/// The shared body of the two "primary loses etcd" tests: `cut` isolates the
/// primary; the old primary must fence (its log says so, its PostgreSQL takes no
/// writes), another node must take over after the lease expired, and after
/// `heal` the old primary must come back as a streaming replica of the new one.
///
/// `replicas_reach_it`: the cut leaves the replicas' links to the primary up, so a
/// row written on it after the cut still reaches them; otherwise it must not.
fn primary_partition(
    tag: &str,
    replicas_reach_it: bool,
    cut: impl Fn(&TestCluster, usize) -> Result<(), String>,
) {
    let mut c = bed(tag);
    let p = settled(&mut c);
    let (old_leader, old_epoch) = c.leader_key().expect("leader key");
    assert_eq!(old_leader, c.name(p));
    let mut probe = common::probe_on(&c, p);

    let t_cut = Instant::now();
    cut(&c, p).unwrap_or_else(|e| panic!("cut: {e}"));

    // The cut is what it claims to be: the observer still writes through the old
    // primary, and its replicas get that row only if their links are up.
    c.write_row(p, 1)
        .unwrap_or_else(|e| panic!("write on the cut primary: {e}"));
    let r = (p + 1) % c.node_count();
    let arrived = wait_for(Duration::from_secs(2), Duration::from_millis(50), || {
        (c.count_rows(r) == Ok(1)).then_some(())
    });
    assert_eq!(
        arrived.is_some(),
        replicas_reach_it,
        "row written on {} after the cut {} {}",
        c.name(p),
        if arrived.is_some() {
            "reached"
        } else {
            "did not reach"
        },
        c.name(r)
    );

    // The old primary fences by its own deadline (it cannot renew).
    let fenced = wait_for(FAILOVER, Duration::from_millis(50), || {
        c.agent_log(p).contains("fencing PostgreSQL").then_some(())
    });
    assert!(
        fenced.is_some(),
        "old primary {} never logged a fence{}",
        c.name(p),
        c.logs_tail(40)
    );
    let np = c.wait_new_primary(p, FAILOVER).unwrap_or_else(|| {
        panic!(
            "no new primary within {FAILOVER:?} of the cut{}",
            c.logs_tail(40)
        )
    });
    let failover = t_cut.elapsed();
    // Its PostgreSQL no longer takes writes (stopped, or back in recovery).
    assert!(
        c.write_row(p, 2).is_err(),
        "old primary {} still accepts writes after its fence",
        c.name(p)
    );
    let (leader, epoch) = c.leader_key().expect("new leader key");
    assert_eq!(leader, c.name(np));
    assert_ne!(epoch, old_epoch, "a new leader key is a new epoch");
    // Let the probe see the new primary take writes.
    let first_new = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t_cut)
    });
    assert!(
        first_new.is_some(),
        "new primary {} took no probe write",
        c.name(np)
    );

    c.heal(p).unwrap_or_else(|e| panic!("heal: {e}"));
    let t_heal = Instant::now();
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("after heal: {e}"));
    let rejoin = t_heal.elapsed();

    probe.stop(Duration::from_secs(2));
    assert!(
        probe.first_ack_after(p, t_cut).is_some(),
        "the probe saw no write acknowledged by the cut primary: the check below would be empty"
    );
    probe.check_no_overlap(p, np, t_cut).unwrap();
    common::only_primary(&c, np);
    assert_eq!(c.is_in_recovery(p), Ok(true));
    eprintln!(
        "{tag}: {} -> {}: new primary {failover:?} after the cut; old primary streaming {rejoin:?} after the heal; its log mentions rewind: {}",
        c.name(p),
        c.name(np),
        c.agent_log(p).contains("rewind")
    );

    // Drop removes every namespace it created.
    let names: Vec<String> = {
        let net = c.net().expect("netns topology");
        (0..net.len()).map(|h| net.ns(h).to_string()).collect()
    };
    drop(c);
    assert_eq!(namespaces_left(&names), Vec::<String>::new());
}

#[test]
fn real_primary_cut_off_from_everyone() {
    primary_partition("cutall", false, |c, p| c.cut(p));
}

#[test]
fn real_primary_cut_off_from_etcd_only() {
    primary_partition("cutetcd", true, |c, p| c.cut_from_etcd(p));
}

/// The leader key, its epoch and the primary's postmaster stay as they were for
/// `window` (sampled), and `p` stays the only primary.
fn no_failover(c: &TestCluster, p: usize, key: &(String, i64), pm: i32, window: Duration) {
    common::no_failover_for(c, p, key, Some(pm), window);
    assert_eq!(c.primaries(), vec![p]);
    assert_eq!(c.leader_key().as_ref(), Some(key));
    assert!(
        !c.agent_log(p).contains("fencing PostgreSQL"),
        "the primary fenced{}",
        c.logs_tail(30)
    );
}

#[test]
fn real_etcd_member_and_etcd_leader_die() {
    let mut c = bed("etcdkill");
    let p = settled(&mut c);
    let key = c.leader_key().expect("leader key");
    let pm = c.postmaster_pid(p).expect("postmaster pid");
    // Watch for one ttl and a bit: a lost lease would have expired inside it.
    let window = Duration::from_secs(c.opts.ttl as u64 + 2);

    // 1. A follower member dies.
    let etcd = c.etcd().expect("etcd");
    let leader = etcd.leader().expect("one etcd leader");
    let follower = (leader + 1) % 3;
    assert!(etcd.pid(follower).is_some(), "follower runs");
    etcd.kill_member(follower);
    no_failover(&c, p, &key, pm, window);

    // Bring it back (a fresh quorum of three), then kill the raft leader.
    let etcd = c.etcd().expect("etcd");
    etcd.start_member(follower, "existing")
        .expect("restart member");
    assert!(etcd.wait_healthy(Duration::from_secs(30)), "etcd unhealthy");
    let leader = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        etcd.leader()
    })
    .expect("one etcd leader");
    etcd.kill_member(leader);
    // A new raft leader among the two left.
    let next = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        etcd.leader()
    });
    assert!(
        next.is_some_and(|l| l != leader),
        "no new etcd leader after killing etcd{leader}"
    );
    no_failover(&c, p, &key, pm, window);
}
