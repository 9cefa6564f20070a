//! Test 11: etcd wiped and restarted empty (same peer URLs and token, so the same
//! cluster id) while the cluster runs (DESIGN §3): no node runs initdb over data,
//! nobody promotes until the operator confirms, and after confirmation the cluster
//! continues with its data. Real etcd + PostgreSQL.
//!
//! Right after the wipe the test pushes the new etcd's revision past the old epoch,
//! so a key taken from then on has a *larger* epoch than the data's: the epoch
//! comparison alone would let it promote silently. What stops it is the `rollback`
//! marker the running agents write when their reads go back in time (and the one
//! that re-creates `initialize`). One replica is down during the wipe and starts
//! afterwards: it remembers no revision and must honour the marker others wrote.

mod common;

use std::time::{Duration, Instant};

use common::{BOOT, FAILOVER, REJOIN};
use tenure::testbed::cluster::{ROW_TABLE, TestCluster};
use tenure::testbed::{etcdkv, wait_for};

/// Rows written (and replicated everywhere) before the wipe.
const ROWS: i64 = 20;
/// A table the test writes into on the old primary after the wipe, to see when it
/// stops accepting writes (kept apart from `ROW_TABLE`).
const PROBE: &str = "wipe_probe";
/// How far past the old epoch the test pushes the wiped etcd's revision.
const PAST_EPOCH: i64 = 50;
/// A scratch key outside the cluster's prefix, for spending revisions.
const SCRATCH: &str = "/bed/revision-filler";

fn bed(tag: &str) -> TestCluster {
    common::bed("wipe", tag)
}

/// Put `SCRATCH` until the store's revision is above `target`; returns it.
fn push_revision_past(c: &TestCluster, target: i64) -> i64 {
    let eps = c.endpoints();
    let mut k = 0u64;
    loop {
        etcdkv::put(&eps, SCRATCH, &k.to_string(), Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("push revisions: {e}"));
        k += 1;
        if k.is_multiple_of(16) {
            let rev = etcdkv::range(&eps, SCRATCH, false, Duration::from_secs(2))
                .unwrap_or_else(|e| panic!("read {SCRATCH}: {e}"))
                .first()
                .map_or(0, |kv| kv.mod_revision);
            if rev > target {
                return rev;
            }
        }
    }
}

/// The `rollback` marker's JSON, if the key exists.
fn marker(c: &TestCluster) -> Option<serde_json::Value> {
    let raw = c.get_key("rollback")?;
    Some(serde_json::from_str(&raw).unwrap_or_else(|e| panic!("rollback marker {raw:?}: {e}")))
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

/// A refusal in `log` that names the rollback marker `key` and the command.
fn marker_refusal<'a>(log: &'a str, key: &str) -> Option<&'a str> {
    log.lines()
        .find(|l| l.contains("refusing") && l.contains(key) && l.contains("tenure confirm-epoch"))
}

/// The operator's `tenure confirm-epoch` on node `i`; its output.
fn confirm_epoch(c: &TestCluster, i: usize) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("confirm-epoch")
        .arg("--config")
        .arg(c.config_path(i))
        .arg("--by")
        .arg("real_wipe")
        .output()
        .expect("run tenure confirm-epoch");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "tenure confirm-epoch: {:?}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("confirm-epoch said:\n{stdout}");
    stdout
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
    // Revisions spent after the epoch was fixed: the running agents' remembered
    // revision ends up far above what the wiped store reaches below, so their next
    // read shows etcd going back (the revision check; the missing `initialize`
    // would catch a wipe on its own). The epoch stays small.
    let remembered = push_revision_past(&c, epoch0 + 4 * PAST_EPOCH);
    // Each agent reads the scope every loop_wait: a few loops, and all have read it.
    std::thread::sleep(4 * c.opts.loop_wait);
    // One replica is down during the wipe (it will remember no revision).
    let late = (0..n).find(|&i| i != p).expect("a replica");
    let running: Vec<usize> = all.iter().copied().filter(|&i| i != late).collect();
    c.host_crash(late)
        .unwrap_or_else(|e| panic!("stop {}: {e}", c.name(late)));
    let log_start: Vec<usize> = all.iter().map(|&i| c.agent_log(i).len()).collect();
    let new_log = |c: &TestCluster, i: usize| c.agent_log(i)[log_start[i]..].to_string();

    // The wipe, then at once the new store's revision past the old epoch: from here
    // on a new leader key's epoch would be above the data's.
    c.etcd()
        .expect("etcd")
        .wipe_and_restart()
        .unwrap_or_else(|e| panic!("wipe etcd: {e}"));
    let wiped = Instant::now();
    let pushed = push_revision_past(&c, epoch0 + PAST_EPOCH);
    assert!(
        pushed < remembered,
        "pushed {pushed} >= remembered {remembered}"
    );
    eprintln!(
        "etcd wiped; old primary {}, epoch before {epoch0}; revision pushed to {pushed} in {:?}; \
         {} is down",
        c.name(p),
        wiped.elapsed(),
        c.name(late)
    );
    let taken_early = c.leader_key();
    assert!(
        taken_early.as_ref().is_none_or(|(_, e)| *e > epoch0),
        "the key was taken at {taken_early:?} before the revision passed {epoch0}: the test \
         would not show the gap{}",
        c.logs_tail(40)
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
        for &i in &running {
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
    for &i in &running {
        let log = new_log(&c, i);
        assert!(
            !log.contains("running initdb") && !log.contains("initdb done"),
            "{} ran initdb after the wipe:\n{log}",
            c.name(i)
        );
    }

    // The marker: written by a running node, naming a revision it had seen above
    // the one it found (or, from the node that re-created `initialize`, why).
    let key = format!("{}rollback", c.prefix());
    let m = marker(&c).unwrap_or_else(|| panic!("no rollback marker{}", c.logs_tail(60)));
    eprintln!("rollback marker: {m}");
    let by = m["by"].as_str().unwrap_or_default().to_string();
    assert!(
        running.iter().any(|&i| c.name(i) == by),
        "marker by {by:?}: {m}"
    );
    assert!(
        m["found_revision"].as_i64().is_some() && m["at"].is_string(),
        "{m}"
    );
    // The running agents saw their reads go back (below `remembered`).
    let saw: Vec<&str> = running
        .iter()
        .filter(|&&i| {
            new_log(&c, i).contains("etcd went back in time (a read's revision went from")
        })
        .map(|&i| c.name(i))
        .collect();
    assert!(
        !saw.is_empty(),
        "no running agent saw a read go back below revision {remembered}{}",
        c.logs_tail(60)
    );
    eprintln!("saw the revision go back: {saw:?}");
    // Nobody took the key: the marker holds every candidate (the epoch comparison
    // would not have: the revision is past the old epoch).
    assert_eq!(
        c.leader_key(),
        None,
        "a leader key under the marker{}",
        c.logs_tail(60)
    );
    for &i in &running {
        if i == p {
            continue;
        }
        let log = new_log(&c, i);
        assert!(
            marker_refusal(&log, &key).is_some(),
            "{} never refused naming {key}:\n{log}",
            c.name(i)
        );
    }

    // The node that was down starts now: it remembers nothing and must honour the
    // marker the others wrote.
    c.start_agent(late)
        .unwrap_or_else(|e| panic!("start {}: {e}", c.name(late)));
    let honoured = wait_for(FAILOVER, Duration::from_millis(200), || {
        assert!(
            c.primaries().is_empty(),
            "a primary after {} started, before any confirmation{}",
            c.name(late),
            c.logs_tail(60)
        );
        marker_refusal(&new_log(&c, late), &key).map(str::to_string)
    });
    let line = honoured.unwrap_or_else(|| {
        panic!(
            "{} never refused naming {key}:\n{}",
            c.name(late),
            new_log(&c, late)
        )
    });
    eprintln!("{}: {line}", c.name(late));
    assert!(
        !new_log(&c, late).contains("ALERT: etcd went back in time")
            && !new_log(&c, late).contains("ROLLBACK_MARKED"),
        "{} cannot have seen the rollback itself",
        c.name(late)
    );
    // It keeps refusing for a while longer: never a primary, never the key.
    let t0 = Instant::now();
    while t0.elapsed() < ttl {
        assert!(c.primaries().is_empty(), "a primary before confirmation");
        assert_eq!(c.leader_key(), None, "a leader key under the marker");
        c.check_agents().unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        c.system_identifier(late).as_deref(),
        Ok(sysid.as_str()),
        "{} kept its data",
        c.name(late)
    );

    // The operator confirms on the late node, with the epoch from its own
    // `tenure.epoch` row (its PostgreSQL runs as a standby).
    let stdout = confirm_epoch(&c, late);
    assert!(
        stdout.contains(&format!("rollback marker {key} deleted"))
            && stdout.contains(&format!("up to {epoch0}")),
        "{stdout}"
    );
    assert!(marker(&c).is_none(), "marker still there after confirming");

    // One primary, the others stream from it, the data is there.
    let q = c
        .wait_primary(FAILOVER)
        .unwrap_or_else(|| panic!("no primary after confirmation{}", c.logs_tail(60)));
    c.wait_replicas(q, &[], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.primaries(), vec![q], "exactly one primary");
    let (leader, epoch2) = c.leader_key().expect("leader key after confirmation");
    assert_eq!(leader, c.name(q));
    assert!(
        epoch2 > epoch0,
        "epoch {epoch2} after confirming, data epoch {epoch0}: the gap needs a larger one"
    );
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

/// Rows written on the new primary after the snapshot the restore goes back to.
const AFTER: i64 = 10;

/// etcd restored from a snapshot (the same token, so the same cluster id) while
/// the cluster runs, after a switchover the snapshot does not hold: the restored
/// store names the old leader at the old epoch, its revision is below what every
/// agent has read. The rows the new primary acknowledged after the snapshot must
/// survive: no node takes the leader key or promotes until the operator confirms
/// (the `rollback` marker the agents write when their reads go back in time, not
/// the epoch comparison: the test pushes the revision past the data's epoch first),
/// the new primary stops writing (its key and lease are not in the restored
/// store), and after `tenure confirm-epoch` the leader has every row.
/// docs/failure-modes.md, "etcd restored from a backup while agents run".
#[test]
fn real_etcd_restored_from_a_snapshot_no_failover_until_confirmed() {
    let mut c = bed("restore");
    let ttl = Duration::from_secs(c.opts.ttl.into());
    let n = c.node_count();
    let all: Vec<usize> = (0..n).collect();
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let (_, epoch0) = c.leader_key().expect("leader key");
    let sysid = c.system_identifier(p).expect("system identifier");
    for k in 1..=ROWS {
        c.write_row(p, k)
            .unwrap_or_else(|e| panic!("write row {k}: {e}"));
    }
    c.wait_replicas(p, &[], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));

    // The snapshot the restore goes back to: p leads at epoch0.
    let snap = c.dir().join("etcd-before-switchover.db");
    c.etcd()
        .expect("etcd")
        .snapshot(&snap)
        .unwrap_or_else(|e| panic!("snapshot: {e}"));

    // A switchover to q the snapshot does not know, and rows only q's timeline has.
    let q = (0..n).find(|&i| i != p).expect("a replica");
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}"}}"#,
        c.name(p),
        c.name(q)
    );
    // Asked again until the leader takes it: right after the settle it may still
    // refuse (412: no candidate has published a running, caught-up position yet).
    let mut asked: Option<(u16, String)> = None;
    let switched = wait_for(FAILOVER, Duration::from_millis(200), || {
        let done = c
            .leader_key()
            .filter(|(name, e)| name == c.name(q) && *e > epoch0)
            .filter(|_| c.primaries() == vec![q]);
        if done.is_none() && asked.as_ref().is_none_or(|(code, _)| *code != 200) {
            asked = c.api_write(p, "POST", "/switchover", &body, true);
        }
        done
    });
    let (_, epoch1) = switched.unwrap_or_else(|| {
        panic!(
            "no switchover to {} (last answer {asked:?}){}",
            c.name(q),
            c.logs_tail(40)
        )
    });
    for k in ROWS + 1..=ROWS + AFTER {
        c.write_row(q, k)
            .unwrap_or_else(|e| panic!("write row {k} on {}: {e}", c.name(q)));
    }
    c.sql(q, &format!("CREATE TABLE {PROBE}(k bigint)"))
        .expect("create probe table");
    c.wait_replicas(q, &[], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));
    for &i in &all {
        let ok = wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            (c.count_rows(i) == Ok(ROWS + AFTER)).then_some(())
        });
        assert!(ok.is_some(), "{}: rows {:?}", c.name(i), c.count_rows(i));
    }
    // Every agent reads a revision far above what the restored store will reach.
    let remembered = push_revision_past(&c, epoch1 + 4 * PAST_EPOCH);
    std::thread::sleep(4 * c.opts.loop_wait);
    let log_start: Vec<usize> = all.iter().map(|&i| c.agent_log(i).len()).collect();
    let new_log = |c: &TestCluster, i: usize| c.agent_log(i)[log_start[i]..].to_string();

    // The restore, then the revision past the data's epoch (epoch1): a key taken
    // from then on would pass the epoch comparison.
    c.etcd()
        .expect("etcd")
        .restore(&snap, false)
        .unwrap_or_else(|e| panic!("restore etcd: {e}"));
    let restored = Instant::now();
    let restored_key = c.leader_key();
    eprintln!(
        "etcd restored: leader key {restored_key:?} (switched to {} at {epoch1})",
        c.name(q)
    );
    let pushed = push_revision_past(&c, epoch1 + PAST_EPOCH);
    assert!(
        pushed < remembered,
        "pushed {pushed} >= remembered {remembered}"
    );

    // 3 x ttl: nobody but q is ever writable; q stops; the leader key is the
    // restored one (p at epoch0) until it expires, never a new one.
    let mut k = 0i64;
    let mut q_last_write: Option<Duration> = None;
    while restored.elapsed() < 3 * ttl {
        let at = restored.elapsed();
        for &i in &all {
            if i != q {
                assert_ne!(
                    c.is_in_recovery(i),
                    Ok(false),
                    "{at:?} after the restore {} runs as a primary{}",
                    c.name(i),
                    c.logs_tail(60)
                );
            }
        }
        let prim = c.primaries();
        assert!(
            prim.iter().all(|&i| i == q),
            "{at:?} after the restore {:?} answer /primary 200{}",
            prim.iter().map(|&i| c.name(i)).collect::<Vec<_>>(),
            c.logs_tail(60)
        );
        if let Ok(Some((name, e))) = c.try_leader_key() {
            assert!(
                name == c.name(p) && e == epoch0,
                "{at:?} after the restore the leader key is {name} at {e}{}",
                c.logs_tail(60)
            );
        }
        k += 1;
        if c.sql(q, &format!("INSERT INTO {PROBE} VALUES ({k})"))
            .is_ok()
        {
            q_last_write = Some(at);
        }
        c.check_agents().unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "{} last accepted a write {q_last_write:?} after the restore",
        c.name(q)
    );
    if let Some(t) = q_last_write {
        assert!(
            t < 2 * ttl,
            "{} still took writes {t:?} after the restore{}",
            c.name(q),
            c.logs_tail(60)
        );
    }
    assert!(c.primaries().is_empty(), "a primary before confirmation");
    assert_eq!(c.leader_key(), None, "a leader key under the marker");
    for &i in &all {
        assert_eq!(
            c.system_identifier(i).as_deref(),
            Ok(sysid.as_str()),
            "{}",
            c.name(i)
        );
    }

    // The marker, and the agents that saw their reads go back.
    let key = format!("{}rollback", c.prefix());
    let m = marker(&c).unwrap_or_else(|| panic!("no rollback marker{}", c.logs_tail(60)));
    eprintln!("rollback marker: {m}");
    let saw: Vec<&str> = all
        .iter()
        .filter(|&&i| {
            new_log(&c, i).contains("etcd went back in time (a read's revision went from")
        })
        .map(|&i| c.name(i))
        .collect();
    assert!(
        !saw.is_empty(),
        "no agent saw a read go back below revision {remembered}{}",
        c.logs_tail(60)
    );
    eprintln!("saw the revision go back: {saw:?}");
    let refused: Vec<&str> = all
        .iter()
        .filter(|&&i| marker_refusal(&new_log(&c, i), &key).is_some())
        .map(|&i| c.name(i))
        .collect();
    assert!(
        !refused.is_empty(),
        "no agent refused naming {key}{}",
        c.logs_tail(60)
    );

    // The operator confirms on q, whose epoch row is the newest.
    confirm_epoch(&c, q);
    assert!(marker(&c).is_none(), "marker still there after confirming");

    // One primary, with every row q acknowledged; the others stream from it.
    let np = c
        .wait_primary(FAILOVER)
        .unwrap_or_else(|| panic!("no primary after confirmation{}", c.logs_tail(60)));
    c.wait_replicas(np, &[], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.primaries(), vec![np], "exactly one primary");
    assert_eq!(
        c.count_rows(np),
        Ok(ROWS + AFTER),
        "{} leads without rows {} acknowledged",
        c.name(np),
        c.name(q)
    );
    let (leader, epoch2) = c.leader_key().expect("leader key after confirmation");
    assert_eq!(leader, c.name(np));
    assert!(
        epoch2 > epoch1,
        "epoch {epoch2} after confirming, data epoch {epoch1}"
    );
    c.write_row(np, ROWS + AFTER + 1)
        .expect("write after confirmation");
}
