//! etcd endpoints given as host names (issue 12, test 2), on real parts: every
//! node and etcd member in its own network namespace (`testbed::netns`), the
//! names resolved inside each agent's namespace through `/etc/netns/<ns>/hosts`
//! (`ip netns exec` bind-mounts it over `/etc/hosts`), and a DNS server that
//! never answers (`/etc/netns/<ns>/resolv.conf` names a UDP socket this test
//! holds and never reads).
//!
//! What it shows: the cluster bootstraps and fails over after a host crash with
//! names only; then, with the names gone from the new leader's hosts file (so
//! each lookup waits on the silent DNS server), an endpoint failure forces a
//! re-resolve that times out while the leader keeps renewing (no fence, same
//! epoch, renewals counted all along: the resolver runs in a child process the
//! loop never waits for, S1 / S6 d); and cut from every etcd member with the
//! resolver still hanging, the leader fences by its deadline `F = H` (no
//! watchdog here: H = s + ttl - M, S1).
//!
//! Needs root, iproute2, nftables, etcd-server and postgresql-15, like every
//! `real_*` test; run one at a time (nextest group `real`, and
//! `flock /tmp/tenure-real.lock` by hand).

mod common;

use std::fs;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{FAILOVER, NetnsFiles, endpoint_in_use, metric, settled};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

/// The domain the test's names live in (RFC 6761 reserves `.test`).
const DOMAIN: &str = "names.test";

fn hosts_file(etcd: &[(String, String)]) -> String {
    let mut s = String::from("127.0.0.1 localhost\n");
    for (addr, name) in etcd {
        s.push_str(&format!("{addr} {name}\n"));
    }
    s
}

#[test]
fn names_failover_and_a_hanging_resolver() {
    // Declared first: dropped last, after the cluster (and its agents) are gone.
    let mut files = NetnsFiles::default();
    let mut opts = common::options("names", "names");
    opts.netns = true;
    opts.start_agents = false;
    opts.log_level = Some("debug".into());
    // A short resolve_timeout, so the hanging resolver times out within the test.
    opts.etcd_extra = vec!["resolve_timeout = 1.0".into(); 3];
    let ttl = opts.ttl;
    let margin = opts.safety_margin;
    let mut c = common::start(opts);

    // The DNS server that never answers: a UDP socket on the observer's address
    // (reachable from every namespace), held and never read.
    let observer = c.net().expect("netns").observer();
    let _silent_dns = UdpSocket::bind((observer, 53))
        .unwrap_or_else(|e| panic!("bind the silent DNS server on {observer}:53: {e}"));
    let resolv = format!("nameserver {observer}\noptions timeout:30 attempts:1\n");

    // etcd member j is `etcd<j+1>.names.test`; every agent gets names only.
    let eps = c.endpoints();
    let mut named = Vec::new();
    let mut hosts = Vec::new();
    for (j, e) in eps.iter().enumerate() {
        let hostport = e.trim_start_matches("http://");
        let (addr, port) = hostport.rsplit_once(':').expect("host:port");
        let name = format!("etcd{}.{DOMAIN}", j + 1);
        named.push(format!("http://{name}:{port}"));
        hosts.push((addr.to_string(), name));
    }
    for i in 0..c.node_count() {
        let ns = c.spec(i).netns.clone().expect("node namespace");
        files.make(&ns, &hosts_file(&hosts), &resolv);
        let path = c.config_path(i).to_path_buf();
        let mut toml = fs::read_to_string(&path).expect("read node config");
        for (ip_url, name_url) in eps.iter().zip(&named) {
            toml = toml.replace(&format!("\"{ip_url}\""), &format!("\"{name_url}\""));
        }
        assert!(toml.contains(&named[0]), "endpoints not replaced:\n{toml}");
        fs::write(&path, toml).expect("write node config");
        c.start_agent(i)
            .unwrap_or_else(|e| panic!("start agent {i}: {e}"));
    }

    // --- 1. Bootstrap and a failover after a host crash, with names only ---
    let p = settled(&mut c);
    for i in 0..c.node_count() {
        let log = c.agent_log(i);
        assert!(
            log.contains(&format!("etcd: etcd1.{DOMAIN} resolves to")),
            "{} did not resolve the names{}",
            c.name(i),
            c.logs_tail(20)
        );
    }
    c.host_crash(p)
        .unwrap_or_else(|e| panic!("host crash of {}: {e}", c.name(p)));
    let np = c.wait_new_primary(p, FAILOVER).unwrap_or_else(|| {
        panic!(
            "no new primary after the crash of {}{}",
            c.name(p),
            c.logs_tail(40)
        )
    });
    let key = c.leader_key().expect("leader key after the failover");
    assert_eq!(key.0, c.name(np));
    // The new primary is settled: it renews.
    let settled_renewals = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        (metric(&c, np, "tenure_renewals_counted_total") >= 3.0).then_some(())
    });
    assert!(settled_renewals.is_some(), "{} does not renew", c.name(np));

    eprintln!("names: {} -> {} after a host crash", c.name(p), c.name(np));

    // --- 2. A resolver that hangs does not delay a renewal ---
    // The names leave np's hosts file (rewritten in place: the bind mount holds
    // the inode), so every lookup waits on the silent DNS server.
    let np_hosts = PathBuf::from("/etc/netns")
        .join(c.spec(np).netns.clone().expect("ns"))
        .join("hosts");
    fs::write(&np_hosts, "127.0.0.1 localhost\n").expect("rewrite hosts");
    let renewals0 = metric(&c, np, "tenure_renewals_counted_total");
    let timeouts0 = metric(&c, np, "tenure_etcd_resolve_timeouts_total");
    let fences = |c: &TestCluster| c.agent_log(np).matches("fencing PostgreSQL").count();
    let fences0 = fences(&c);
    // Cut np from the member it talks to: its next call fails, it moves to the
    // next endpoint (a last good address) and asks for the name again.
    let used = endpoint_in_use(&c, np);
    let j = named
        .iter()
        .position(|n| *n == used)
        .unwrap_or_else(|| panic!("{} uses {used}, not one of {named:?}", c.name(np)));
    c.cut_between(np, c.etcd_host(j))
        .unwrap_or_else(|e| panic!("cut: {e}"));
    let timed_out = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        (metric(&c, np, "tenure_etcd_resolve_timeouts_total") > timeouts0).then_some(())
    });
    assert!(
        timed_out.is_some(),
        "{}: no re-resolve timed out after the endpoint failed{}",
        c.name(np),
        c.logs_tail(30)
    );
    // Two more seconds with the resolver hanging (a new lookup each
    // resolve_timeout): renewals go on, nobody fences, the lease is the same.
    common::no_failover_for(&c, np, &key, c.postmaster_pid(np), Duration::from_secs(2));
    let renewals1 = metric(&c, np, "tenure_renewals_counted_total");
    assert!(
        renewals1 >= renewals0 + 4.0,
        "{}: renewals counted went from {renewals0} to {renewals1} while the resolver hung{}",
        c.name(np),
        c.logs_tail(30)
    );
    assert_eq!(
        fences(&c),
        fences0,
        "{} fenced{}",
        c.name(np),
        c.logs_tail(30)
    );
    // Phase 3 counts the timeouts in the log: an agent whose every etcd call
    // waits out `retry_timeout` runs its iterations back to back and its API may
    // not answer meanwhile.
    let said_timeout = |c: &TestCluster| {
        c.agent_log(np)
            .matches("took longer than resolve_timeout")
            .count()
    };
    let timeouts1 = said_timeout(&c);
    assert_eq!(c.leader_key(), Some(key.clone()), "the lease changed");
    let log = c.agent_log(np);
    assert!(
        log.contains("took longer than resolve_timeout") && log.contains("keeping"),
        "the timeout is not said{}",
        c.logs_tail(20)
    );

    eprintln!("names: {} renewed with its resolver hanging", c.name(np));

    // --- 3. A fence that is due still happens on time, resolver hanging ---
    c.heal(np).unwrap_or_else(|e| panic!("heal: {e}"));
    let before = metric(&c, np, "tenure_renewals_counted_total");
    let ok = wait_for(Duration::from_secs(5), Duration::from_millis(50), || {
        (metric(&c, np, "tenure_renewals_counted_total") > before).then_some(())
    });
    assert!(ok.is_some(), "{} stopped renewing", c.name(np));
    // No counted renewal can be sent after this instant, so H < t_cut + ttl - M:
    // the fence (S1, F = H without a watchdog) must be complete by then.
    let t_cut = Instant::now();
    c.cut_from_etcd(np).unwrap_or_else(|e| panic!("cut: {e}"));
    let h_bound = Duration::from_secs(u64::from(ttl)) - margin;
    // Polled every 20 ms: the first failed write is at most a poll and a failed
    // connect after the fence completed.
    let row = std::cell::Cell::new(1000i64);
    let fenced_at = wait_for(
        h_bound + Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            // A new row each time (the row number is the table's key).
            row.set(row.get() + 1);
            c.write_row(np, row.get()).is_err().then(Instant::now)
        },
    )
    .unwrap_or_else(|| {
        panic!(
            "{} never stopped taking writes{}",
            c.name(np),
            c.logs_tail(40)
        )
    });
    let took = fenced_at.duration_since(t_cut);
    assert!(
        c.agent_log(np).contains("fencing PostgreSQL"),
        "{} stopped taking writes without a fence{}",
        c.name(np),
        c.logs_tail(40)
    );
    assert!(
        took <= h_bound + Duration::from_millis(300),
        "{} fenced {took:?} after the cut: past ttl - M = {h_bound:?} (S1){}",
        c.name(np),
        c.logs_tail(40)
    );
    // The resolver was hanging meanwhile (every endpoint failed and asked again).
    let more = wait_for(Duration::from_secs(5), Duration::from_millis(100), || {
        (said_timeout(&c) > timeouts1).then_some(())
    });
    assert!(
        more.is_some(),
        "{}: no re-resolve timed out while it was cut off{}",
        c.name(np),
        c.logs_tail(30)
    );
    eprintln!(
        "names: {} -> {} after a host crash; {} fenced {took:?} after its cut (ttl - M = \
         {h_bound:?}) with its resolver hanging",
        c.name(p),
        c.name(np),
        c.name(np)
    );
}
