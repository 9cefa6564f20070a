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

/// A session on node `i` idle in a transaction that read `tenure.epoch` (it holds
/// the table's AccessShareLock until it ends): dropped, the session ends.
fn idle_reader(c: &TestCluster, i: usize) -> postgres::Client {
    let mut s = postgres::Config::new()
        .host(&c.addr(i).to_string())
        .port(c.pg_port(i))
        .user("postgres")
        .password(&c.passwords.superuser)
        .dbname("postgres")
        .application_name("idle-reader")
        .connect_timeout(Duration::from_secs(2))
        .connect(postgres::NoTls)
        .unwrap_or_else(|e| panic!("{}: connect: {e}", c.name(i)));
    s.batch_execute("BEGIN; SELECT epoch FROM tenure.epoch")
        .unwrap_or_else(|e| panic!("{}: read tenure.epoch: {e}", c.name(i)));
    s
}

/// Fresh-eyes review of seed 253898, R3 (S6 d, DESIGN §3): every epoch write ran
/// `ALTER TABLE tenure.epoch ADD COLUMN IF NOT EXISTS lease`, which takes an
/// AccessExclusiveLock even when the column exists: behind a reader idle in a
/// transaction it waited out its timeout, every iteration, and the new primary's
/// row never showed its epoch. Now the ALTER runs only when the column is missing:
/// with such a reader on every replica, the new primary records its epoch and keeps
/// the key. Failed before the fix (run with `TENURE_TEST_AGENT` set to the build
/// before it: no new primary within `FAILOVER`).
#[test]
fn real_epoch_row_written_past_a_reader_idle_in_transaction() {
    let mut c = bed("idle");
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let (leader, epoch) = c.leader_key().expect("leader key");
    let all: Vec<usize> = (0..c.node_count()).collect();
    wait_row_everywhere(&c, &all, epoch, &leader);
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != p).collect();
    let readers: Vec<postgres::Client> = survivors.iter().map(|&i| idle_reader(&c, i)).collect();

    c.host_crash(p).expect("host crash");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)));
    let (leader2, epoch2) = c.leader_key().expect("leader key after failover");
    assert_eq!(leader2, c.name(np));
    wait_row_everywhere(&c, &[np], epoch2, &leader2);
    // Still the same leadership: no renewal was lost to the write.
    assert_eq!(
        c.leader_key(),
        Some((leader2.clone(), epoch2)),
        "{}",
        c.logs_tail(40)
    );
    drop(readers);
    wait_row_everywhere(&c, &survivors, epoch2, &leader2);
}
