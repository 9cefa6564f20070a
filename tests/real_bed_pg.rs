//! The test bed against real PostgreSQL, without the agent: a shell script stands
//! in for `tenure run --config FILE`, reads the config the bed wrote, runs initdb
//! once and then a postgres of its own (three independent primaries, no etcd
//! involvement). Checks the SQL helpers, the write probe and its ordering check,
//! the host crash on a real postmaster with backends, a paused host (the SQL
//! bound), and that an agent kill leaves PostgreSQL running.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tenure::testbed::cluster::{ClusterOptions, TestCluster, thread_count};
use tenure::testbed::{scratch_dir, wait_for};

const FAKE_PG_AGENT: &str = r#"#!/bin/sh
# usage: fake-pg-agent run --config FILE
set -e
cfg="$3"
val() { sed -n "s/^$1 = \"\(.*\)\"\$/\1/p" "$cfg" | head -n 1; }
dd=$(val data_dir); bin=$(val bin_dir); listen=$(val listen); sock=$(val socket_dir)
port=${listen##*:}
pw=$(sed -n '/^\[postgresql.authentication.superuser\]/,/^\[/s/^password = "\(.*\)"$/\1/p' "$cfg")
asuser() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -f "$dd/PG_VERSION" ]; then
  pwf="$(dirname "$dd")/pwfile"
  echo "$pw" > "$pwf"; chown postgres "$pwf"
  asuser "$bin/initdb" -D "$dd" -U postgres --pwfile="$pwf" -A scram-sha-256 >/dev/null
  rm -f "$pwf"
fi
echo "fake agent $$: postgres on $port"
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$dd" \
  -c port="$port" -c listen_addresses=127.0.0.1 -c unix_socket_directories="$sock" \
  -c fsync=off -c shared_buffers=16MB
"#;

fn fake_agent() -> (PathBuf, PathBuf) {
    let dir = scratch_dir("fakepg").expect("scratch");
    let path = dir.join("fake-pg-agent");
    std::fs::write(&path, FAKE_PG_AGENT).expect("write fake agent");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (dir, path)
}

#[test]
fn real_bed_pg_helpers_probe_and_crash() {
    let (fdir, fake) = fake_agent();
    let mut opts = ClusterOptions::new(&fake);
    opts.tag = "bedpg".into();
    opts.scope = "bedpg".into();
    let mut c = TestCluster::start(opts).unwrap_or_else(|e| panic!("test bed: {e}"));

    for i in 0..c.node_count() {
        let up = wait_for(Duration::from_secs(60), Duration::from_millis(100), || {
            c.sql(i, "SELECT 1").ok()
        });
        assert!(
            up.is_some(),
            "postgres of {} not up: {}",
            c.name(i),
            c.agent_log(i)
        );
        assert_eq!(c.is_in_recovery(i), Ok(false));
        assert!(
            c.system_identifier(i)
                .is_ok_and(|s| s.parse::<u64>().is_ok())
        );
        assert!(c.postmaster_pid(i).is_some());
        // The "agent" exec'd into the postmaster: a single-threaded process.
        assert_eq!(thread_count(c.agent_pid(i).unwrap()), Some(1));
    }
    for n in 1..=10 {
        c.write_row(0, n).expect("write_row");
    }
    assert_eq!(c.count_rows(0), Ok(10));
    assert!(c.write_row(0, 1).is_err(), "duplicate key is an error");
    assert!(c.sql(0, "SELEC nonsense").is_err());
    let rows = c.sql(0, "SELECT 1, NULL::text, 'x'").unwrap();
    assert_eq!(rows, vec![vec![Some("1".into()), None, Some("x".into())]]);

    // Probe: three independent primaries all accept writes.
    for i in 1..c.node_count() {
        c.sql(
            i,
            "CREATE TABLE tenure_probe(node int, seq bigint, at timestamptz DEFAULT now())",
        )
        .expect("probe table");
    }
    let mut probe = c.write_probe(0, Duration::from_millis(20)).expect("probe");
    let some = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        (0..3).all(|i| probe.ack_count(i) >= 5).then_some(())
    });
    assert!(
        some.is_some(),
        "acks: {:?}",
        (0..3).map(|i| probe.ack_count(i)).collect::<Vec<_>>()
    );
    // Two primaries at once: the ordering check must say so.
    assert!(probe.check_no_overlap(1, 2, probe.started).is_err());

    // A paused host: SQL gives up within its bound instead of hanging.
    if c.cgroup(1).is_some() {
        c.pause_host(1).expect("freeze");
        let t0 = Instant::now();
        assert!(c.sql(1, "SELECT 1").is_err());
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "sql bound: {:?}",
            t0.elapsed()
        );
        c.resume_host(1).expect("thaw");
        assert!(
            wait_for(Duration::from_secs(10), Duration::from_millis(50), || c
                .sql(1, "SELECT 1")
                .ok())
            .is_some()
        );
    }

    // Host crash of node 0 with live backends (the probe's and ours).
    let pids = c.pg_pids(0);
    assert!(pids.len() >= 3, "postmaster + backends: {pids:?}");
    let crash = c.host_crash(0).expect("host crash");
    assert!(c.pg_pids(0).is_empty());
    assert_eq!(c.agent_pid(0), None);
    assert!(c.sql(0, "SELECT 1").is_err());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        probe.first_ack_after(0, crash).is_none(),
        "a dead node acknowledged a write"
    );
    assert!(probe.first_ack_after(1, crash).is_some());
    // Old = the crashed node, new = node 1: nothing acknowledged by 0 after 1's
    // first write sent after the crash.
    probe
        .check_no_overlap(0, 1, crash)
        .expect("ordering after a crash");
    probe.stop(Duration::from_secs(2));

    // Restart after the crash: the data survived (fsync=off, but no OS crash).
    c.start_agent(0).expect("restart");
    let back = wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        c.count_rows(0).ok()
    });
    assert_eq!(back, Some(10));

    // (Here the "agent" exec'd into the postmaster, so kill_agent kills it too;
    // that an agent kill leaves PostgreSQL running is checked in real_bed.rs.)
    c.kill_agent(2);
    assert_eq!(c.agent_pid(2), None);
    // Teardown leaves no System V segment behind: node 2's postmaster was just
    // killed, the others are killed by the drop (three a cluster once exhausted
    // the kernel's ids after a few full runs).
    let segments: Vec<(i32, i32)> = (0..c.node_count()).filter_map(|i| c.pg_shmem(i)).collect();
    assert_eq!(
        segments.len(),
        c.node_count(),
        "every postmaster recorded its segment"
    );
    drop(c);
    for (key, id) in segments {
        assert_eq!(
            tenure::testbed::cluster::shmem_attached(key, id),
            None,
            "segment {id} (key {key}) outlived its cluster"
        );
    }
    let _ = std::fs::remove_dir_all(fdir);
}
