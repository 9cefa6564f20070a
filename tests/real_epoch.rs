//! The epoch inside PostgreSQL (DESIGN §1 step 5, §3): the `tenure.epoch` row on the
//! primary, replicated to every replica, equals the leader key's epoch — after the
//! bootstrap and after a failover, and names the leader and its lease (seed 253898
//! review: an adoption lifts its delay only on a row of its own leadership). Real
//! etcd + PostgreSQL; one test at a time.

mod common;

use std::time::Duration;

use common::{BOOT, FAILOVER};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

fn bed(tag: &str) -> TestCluster {
    common::bed("epoch", tag)
}

fn row_epoch(c: &TestCluster, i: usize) -> Result<String, String> {
    c.sql_one(
        i,
        "SELECT epoch::text || ' ' || member || ' ' || coalesce(lease::text, '-') \
         FROM tenure.epoch WHERE id = 1",
    )
}

/// Every node in `nodes` shows the row `<epoch> <leader> <lease>` (replicas through
/// replay), the lease the leader key's.
fn wait_row_everywhere(c: &TestCluster, nodes: &[usize], epoch: i64, leader: &str) {
    let lease = c.get_kv("leader").expect("leader key").lease;
    let want = format!("{epoch} {leader} {lease}");
    for &i in nodes {
        let ok = wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            (row_epoch(c, i).as_deref() == Ok(want.as_str())).then_some(())
        });
        assert!(
            ok.is_some(),
            "{}: tenure.epoch is {:?}, expected {want:?}{}",
            c.name(i),
            row_epoch(c, i),
            c.logs_tail(30)
        );
    }
}

#[test]
fn real_epoch_row_after_bootstrap_and_failover() {
    let mut c = bed("row");
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let (leader, epoch) = c.leader_key().expect("leader key");
    assert_eq!(leader, c.name(p));
    let all: Vec<usize> = (0..c.node_count()).collect();
    wait_row_everywhere(&c, &all, epoch, &leader);

    c.host_crash(p).expect("host crash");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)));
    let (leader2, epoch2) = c.leader_key().expect("leader key after failover");
    assert_eq!(leader2, c.name(np));
    assert!(epoch2 > epoch, "epoch {epoch2} after {epoch}");
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != p).collect();
    wait_row_everywhere(&c, &survivors, epoch2, &leader2);
}
