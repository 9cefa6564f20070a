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

/// The pid of a `pg_basebackup` the agent `agent` runs (its child), if any.
fn basebackup_child(agent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
        let close = stat.iter().rposition(|&b| b == b')')?;
        let comm = &stat[stat.iter().position(|&b| b == b'(')? + 1..close];
        let ppid: u32 = std::str::from_utf8(&stat[close + 1..])
            .ok()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (comm == b"pg_basebackup" && ppid == agent).then_some(pid)
    })
}

/// Whether `pid` still runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let close = s.iter().rposition(|&b| b == b')').unwrap_or(0);
        s.get(close + 2) != Some(&b'Z')
    })
}

/// A replica build whose source is cut off in the middle of its copy (the
/// source's host crashed, or the network between them failed) gives up in about
/// 25 s — libpq's keepalives on `pg_basebackup` (`pg::conf::COPY_KEEPALIVES`) —
/// not after the kernel's 2 h of keepalive defaults, during which the node could
/// build nothing (not even from a new leader after a failover). Once the source
/// is reachable again the node builds and streams. The copy is slowed on the
/// building node only (`[postgresql.basebackup] max-rate`) so the cut lands in it.
#[test]
fn real_a_copy_from_a_source_cut_off_mid_copy_gives_up() {
    use std::io::Write as _;
    let mut c = bed("copycut");
    let p = settled(&mut c);
    let r = (0..c.node_count()).find(|&i| i != p).expect("a replica");
    c.term_agent(r, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("stop {}: {e}", c.name(r)));
    let unlimited = std::fs::read_to_string(c.config_path(r)).expect("read the config");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(c.config_path(r))
        .expect("open the config");
    writeln!(f, "\n[postgresql.basebackup]\nmax-rate = \"1M\"").expect("append");
    drop(f);
    c.start_agent(r)
        .unwrap_or_else(|e| panic!("start {}: {e}", c.name(r)));
    c.wait_replicas(p, &[], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));

    // Reinitialize r: its data moved aside, a copy from p at 1 MB/s (the answer
    // comes when the job ends: ctl runs in the background, ours to stop).
    let mut ctl = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("ctl")
        .arg("--config")
        .arg(c.config_path(p))
        .args(["reinit", c.name(r), "--force"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run tenure ctl reinit");
    let agent = c.agent_pid(r).expect("agent pid");
    let bb = wait_for(Duration::from_secs(30), Duration::from_millis(20), || {
        basebackup_child(agent)
    })
    .unwrap_or_else(|| panic!("no pg_basebackup on {}{}", c.name(r), c.logs_tail(30)));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        running(bb),
        "the copy ended before the cut (too fast to test){}",
        c.logs_tail(30)
    );
    let cut = Instant::now();
    c.cut_between(r, p)
        .unwrap_or_else(|e| panic!("cut {} from {}: {e}", c.name(r), c.name(p)));
    let gave_up = wait_for(Duration::from_secs(120), Duration::from_millis(200), || {
        (!running(bb)).then(|| cut.elapsed())
    });
    let _ = ctl.kill();
    let _ = ctl.wait();
    let took = gave_up.unwrap_or_else(|| {
        panic!(
            "pg_basebackup {bb} from the cut-off source still runs 120 s after the cut{}",
            c.logs_tail(30)
        )
    });
    eprintln!(
        "pg_basebackup gave up {:.1} s after its source was cut off",
        took.as_secs_f64()
    );
    // Reported at the agent's next poll of its job.
    let logged = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        c.agent_log(r)
            .contains("Basebackup")
            .then_some(())
            .filter(|()| {
                c.agent_log(r)
                    .lines()
                    .any(|l| l.contains("Basebackup") && l.contains("failed"))
            })
    });
    assert!(
        logged.is_some(),
        "the build's failure is not in {}'s log",
        c.name(r)
    );
    // The rebuild after the heal at full speed: at 1 MB/s it took 24 s of the
    // test's time and shows nothing the limited copy did not.
    c.term_agent(r, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("stop {}: {e}", c.name(r)));
    std::fs::write(c.config_path(r), &unlimited).expect("restore the config");
    c.start_agent(r)
        .unwrap_or_else(|e| panic!("start {}: {e}", c.name(r)));
    c.heal(r)
        .unwrap_or_else(|e| panic!("heal {}: {e}", c.name(r)));
    let back = wait_for(REJOIN, Duration::from_millis(200), || {
        c.is_streaming_replica(r).then_some(())
    });
    assert!(
        back.is_some(),
        "{} never streamed again after the cut healed{}",
        c.name(r),
        c.logs_tail(40)
    );
    assert_eq!(c.primaries(), vec![p], "one primary throughout");
}
