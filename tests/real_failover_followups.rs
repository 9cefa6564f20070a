//! Issue 13 item 4 follow-ups with real etcd and PostgreSQL (what
//! `bench/failover_dist` and tests/real_names.rs found): a replica cut from etcd
//! keeps serving its API (its loop keeps its schedule), and the managed
//! `wal_retrieve_retry_interval` is in force on a replica. Every node and etcd
//! member in its own network namespace (`testbed::netns`), so one node can be cut
//! from etcd alone.
//!
//! `TENURE_TEST_AGENT=<path>` runs another build of the agent (how "fails before
//! the fix" was checked). Needs root, etcd-server, postgresql-15 and nftables.

mod common;

use std::time::{Duration, Instant};

use common::settled;
use tenure::testbed::cluster::TestCluster;

fn netns_bed(tag: &str) -> TestCluster {
    let mut o = common::options("fofix", tag);
    o.netns = true;
    common::start(o)
}

/// Item 3 and item 4 on one cluster: a replica runs with
/// `wal_retrieve_retry_interval` = `loop_wait` (500 ms in the bed, the agent's
/// managed default; PostgreSQL's own is 5 s), and once cut from every etcd member
/// its API still answers, request after request, during the outage. Before the
/// fix each of its iterations waited out `retry_timeout` twice (a member-lease
/// grant, then the cluster read: `2R = loop_wait` here), the next tick was always
/// past, and the API was never served.
#[test]
fn real_cut_replica_serves_its_api_and_runs_the_managed_wal_retry() {
    let mut c = netns_bed("outage");
    let p = settled(&mut c);
    let r = (0..c.node_count()).find(|&i| i != p).expect("a replica");

    // Item 3: in force on a replica (what a failover's re-pointing needs). Asserted
    // at the end, so one run of an older agent shows both findings.
    let shown = c
        .sql_one(r, "SHOW wal_retrieve_retry_interval")
        .unwrap_or_else(|e| panic!("SHOW on {}: {e}", c.name(r)));

    // Item 4: cut from etcd, the replica's API answers throughout.
    assert_eq!(c.api_get(r, "/health"), Some(200), "{} /health", c.name(r));
    c.cut_from_etcd(r)
        .unwrap_or_else(|e| panic!("cut {}: {e}", c.name(r)));
    // Let the outage begin (the first iteration's calls time out).
    std::thread::sleep(Duration::from_secs(1));
    let start = Instant::now();
    let (mut asked, mut answered, mut missed_in_a_row, mut worst_in_a_row) = (0, 0, 0, 0);
    let mut codes = Vec::new();
    while start.elapsed() < Duration::from_secs(6) {
        asked += 1;
        // `api_get` waits at most 1 s for the answer.
        match c.api_get(r, "/health") {
            Some(code) => {
                answered += 1;
                missed_in_a_row = 0;
                codes.push(code);
            }
            None => {
                missed_in_a_row += 1;
                worst_in_a_row = worst_in_a_row.max(missed_in_a_row);
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let outage_said = c.agent_log(r).contains("etcd unreachable");
    c.heal(r)
        .unwrap_or_else(|e| panic!("heal {}: {e}", c.name(r)));
    println!(
        "{} cut from etcd: /health answered {answered} of {asked} (statuses {codes:?}), \
         at most {worst_in_a_row} unanswered in a row",
        c.name(r)
    );
    assert!(
        outage_said,
        "{} never said etcd was unreachable: was it cut?{}",
        c.name(r),
        c.logs_tail(30)
    );
    let api_ok = answered * 4 >= asked * 3 && worst_in_a_row <= 1;
    println!("{}: wal_retrieve_retry_interval = {shown}", c.name(r));
    assert!(
        api_ok && shown == "500ms",
        "{}: {}{}{}",
        c.name(r),
        if api_ok {
            String::new()
        } else {
            format!(
                "its API went unanswered during the etcd outage: {answered} of {asked}, \
                 {worst_in_a_row} in a row; "
            )
        },
        if shown == "500ms" {
            String::new()
        } else {
            format!("wal_retrieve_retry_interval is {shown}, not the managed loop_wait (500ms)")
        },
        c.logs_tail(30)
    );
    // The leader was not cut: nothing else changed.
    assert_eq!(
        c.primaries(),
        vec![p],
        "the primary changed{}",
        c.logs_tail(30)
    );
}
