//! Test 11: etcd wiped and restarted empty (same peer URLs and token, so the same
//! cluster id) while the cluster runs (DESIGN §3): no node runs initdb over data,
//! nobody promotes on the epoch regression until the operator confirms, and after
//! confirmation the cluster continues with its data. Real etcd + PostgreSQL.

use std::time::{Duration, Instant};

use tenure::testbed::cluster::{ClusterOptions, ROW_TABLE, TestCluster};
use tenure::testbed::{etcdkv, wait_for};

const BOOT: Duration = Duration::from_secs(120);
const FAILOVER: Duration = Duration::from_secs(60);
const REJOIN: Duration = Duration::from_secs(120);
/// Rows written (and replicated everywhere) before the wipe.
const ROWS: i64 = 20;
/// A table the test writes into on the old primary after the wipe, to see when it
/// stops accepting writes (kept apart from `ROW_TABLE`).
const PROBE: &str = "wipe_probe";
/// etcd revisions spent before the agents start, so the leader key's epoch is far
/// above what the wiped etcd reaches in the test: a young cluster's epoch is ~20,
/// and the wiped etcd's member-key refreshes alone pass that within seconds, after
/// which a regression can no longer be seen (the report names this limit).
const REVISIONS_BEFORE: usize = 300;

fn bed(tag: &str) -> TestCluster {
    let mut opts = ClusterOptions::new(env!("CARGO_BIN_EXE_tenure"));
    opts.tag = tag.into();
    opts.scope = format!("wipe-{tag}");
    opts.start_agents = false;
    let mut c = TestCluster::start(opts).unwrap_or_else(|e| panic!("test bed: {e}"));
    let eps = c.endpoints();
    for k in 0..REVISIONS_BEFORE {
        etcdkv::put(
            &eps,
            "/bed/revision-filler",
            &k.to_string(),
            Duration::from_secs(2),
        )
        .unwrap_or_else(|e| panic!("fill revisions: {e}"));
    }
    for i in 0..c.node_count() {
        c.start_agent(i)
            .unwrap_or_else(|e| panic!("start agent: {e}"));
    }
    c
}

fn rows_before_wipe(c: &TestCluster, i: usize) -> Result<i64, String> {
    let v = c.sql_one(
        i,
        &format!("SELECT count(*) FROM {ROW_TABLE} WHERE n <= {ROWS}"),
    )?;
    v.parse().map_err(|e| format!("count(*) = {v:?}: {e}"))
}

fn row_epoch(c: &TestCluster, i: usize) -> Result<i64, String> {
    let v = c.sql_one(i, "SELECT epoch FROM tenure.epoch WHERE id = 1")?;
    v.parse().map_err(|e| format!("epoch = {v:?}: {e}"))
}

/// The data epoch named by the first epoch-regression refusal in `log`.
fn refusal_epoch(log: &str) -> Option<i64> {
    let line = log.lines().find(|l| l.contains("epoch regression"))?;
    let rest = line.split("my data was written under epoch ").nth(1)?;
    rest.split(|ch: char| !ch.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn real_etcd_wiped_no_promotion_until_confirmed() {
    let mut c = bed("wipe");
    let ttl = Duration::from_secs(c.opts.ttl.into());
    let n = c.node_count();
    let all: Vec<usize> = (0..n).collect();
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let (_, epoch0) = c.leader_key().expect("leader key");
    let sysid = c.system_identifier(p).expect("system identifier");
    assert_eq!(c.get_key("initialize").as_deref(), Some(sysid.as_str()));

    // Rows and the epoch row on every node before the wipe.
    for k in 1..=ROWS {
        c.write_row(p, k)
            .unwrap_or_else(|e| panic!("write row {k}: {e}"));
    }
    c.sql(p, &format!("CREATE TABLE {PROBE}(k bigint)"))
        .expect("create probe table");
    for &i in &all {
        let ok = wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            (rows_before_wipe(&c, i) == Ok(ROWS) && row_epoch(&c, i) == Ok(epoch0)).then_some(())
        });
        assert!(
            ok.is_some(),
            "{}: rows {:?}, epoch row {:?}, expected {ROWS} and {epoch0}{}",
            c.name(i),
            rows_before_wipe(&c, i),
            row_epoch(&c, i),
            c.logs_tail(30)
        );
        assert_eq!(c.system_identifier(i).as_deref(), Ok(sysid.as_str()));
    }
    let log_start: Vec<usize> = all.iter().map(|&i| c.agent_log(i).len()).collect();
    let new_log = |c: &TestCluster, i: usize| c.agent_log(i)[log_start[i]..].to_string();

    // The wipe.
    c.etcd()
        .expect("etcd")
        .wipe_and_restart()
        .unwrap_or_else(|e| panic!("wipe etcd: {e}"));
    let wiped = Instant::now();
    eprintln!(
        "etcd wiped; old primary {}, epoch before {epoch0}",
        c.name(p)
    );

    // 3 x ttl: nobody but the old primary answers /primary; the old primary stops
    // (its key is gone) and then accepts no more writes; identifiers never change.
    let mut k = 0i64;
    let mut p_last_primary: Option<Duration> = None;
    let mut p_last_write: Option<Duration> = None;
    while wiped.elapsed() < 3 * ttl {
        let at = wiped.elapsed();
        let prim = c.primaries();
        let others: Vec<usize> = prim.iter().copied().filter(|&i| i != p).collect();
        assert!(
            others.is_empty(),
            "{at:?} after the wipe, {:?} answer /primary 200 before any confirmation{}",
            others.iter().map(|&i| c.name(i)).collect::<Vec<_>>(),
            c.logs_tail(60)
        );
        if prim.contains(&p) {
            assert!(
                p_last_primary.is_some() || at < ttl,
                "old primary answers /primary again"
            );
            p_last_primary = Some(at);
        }
        k += 1;
        if c.sql(p, &format!("INSERT INTO {PROBE} VALUES ({k})"))
            .is_ok()
        {
            p_last_write = Some(at);
        }
        for &i in &all {
            if let Ok(s) = c.system_identifier(i) {
                assert_eq!(
                    s,
                    sysid,
                    "{}: system identifier changed (initdb?)",
                    c.name(i)
                );
            }
        }
        c.check_agents().unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "old primary last /primary 200 at {p_last_primary:?}, last write accepted at {p_last_write:?}"
    );
    // The old primary must have stopped well before the window closed (it keeps its
    // own view of the lease at most ttl).
    for (what, last) in [("/primary 200", p_last_primary), ("a write", p_last_write)] {
        if let Some(t) = last {
            assert!(
                t < 2 * ttl,
                "old primary {} still had {what} {t:?} after the wipe{}",
                c.name(p),
                c.logs_tail(60)
            );
        }
    }
    // What the old primary said about losing its key (for the test output).
    for l in new_log(&c, p)
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("fenc") || l.contains("lost") || l.contains("regression")
        })
        .take(4)
    {
        eprintln!("{}: {l}", c.name(p));
    }
    assert!(c.primaries().is_empty(), "a primary before confirmation");
    assert!(
        c.sql(p, &format!("INSERT INTO {PROBE} VALUES (-1)"))
            .is_err(),
        "old primary {} still accepts writes {:?} after the wipe",
        c.name(p),
        wiped.elapsed()
    );

    // `initialize` re-created (create-only) from the data's system identifier.
    assert_eq!(
        c.get_key("initialize").as_deref(),
        Some(sysid.as_str()),
        "initialize after the wipe{}",
        c.logs_tail(40)
    );
    // No initdb in any log since the wipe.
    for &i in &all {
        let log = new_log(&c, i);
        assert!(
            !log.contains("running initdb") && !log.contains("initdb done"),
            "{} ran initdb after the wipe:\n{log}",
            c.name(i)
        );
    }

    // Somebody holds the new key, with a smaller epoch, and refuses to promote.
    let (holder, epoch1) = c
        .leader_key()
        .unwrap_or_else(|| panic!("no leader key 3 x ttl after the wipe{}", c.logs_tail(40)));
    assert!(epoch1 < epoch0, "new epoch {epoch1} not below {epoch0}");
    let h = c.index_of(&holder).expect("holder is a node");
    let refused = refusal_epoch(&new_log(&c, h)).unwrap_or_else(|| {
        panic!(
            "{holder} holds the key (epoch {epoch1}) but never logged an epoch regression:\n{}",
            new_log(&c, h)
        )
    });
    assert_eq!(refused, epoch0, "the refusal names the data's epoch");
    eprintln!("{holder} holds the key under epoch {epoch1} and refuses: data epoch {refused}");

    // The operator confirms.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("confirm-epoch")
        .arg("--config")
        .arg(c.config_path(h))
        .arg("--epoch")
        .arg(refused.to_string())
        .arg("--by")
        .arg("real_wipe")
        .output()
        .expect("run tenure confirm-epoch");
    assert!(
        out.status.success(),
        "tenure confirm-epoch: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // One primary, the others stream from it, the data is there.
    let q = c
        .wait_primary(FAILOVER)
        .unwrap_or_else(|| panic!("no primary after confirmation{}", c.logs_tail(60)));
    c.wait_replicas(q, &[], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.primaries(), vec![q], "exactly one primary");
    let (leader, epoch2) = c.leader_key().expect("leader key after confirmation");
    assert_eq!(leader, c.name(q));
    for &i in &all {
        assert_eq!(
            c.system_identifier(i).as_deref(),
            Ok(sysid.as_str()),
            "{}",
            c.name(i)
        );
        let ok = wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            (rows_before_wipe(&c, i) == Ok(ROWS) && row_epoch(&c, i) == Ok(epoch2)).then_some(())
        });
        assert!(
            ok.is_some(),
            "{}: rows {:?}, epoch row {:?}, expected {ROWS} and {epoch2}{}",
            c.name(i),
            rows_before_wipe(&c, i),
            row_epoch(&c, i),
            c.logs_tail(30)
        );
    }
    // And it takes writes.
    c.write_row(q, ROWS + 1).expect("write after confirmation");
}
