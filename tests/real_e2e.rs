//! End-to-end tests: three real tenure agents, each with its own PostgreSQL 15,
//! on a real three-member etcd (DESIGN §6). They run one at a time (nextest group
//! `real`) and need root, etcd-server and postgresql-15 (`make deps`).
//!
//! Tests assert behaviour, not timings; where a time is interesting it is printed.

mod common;

use std::time::{Duration, Instant};

use common::{FAILOVER, REJOIN, settled};
use tenure::testbed::cluster::{TestCluster, thread_count};
use tenure::testbed::wait_for;

fn bed(tag: &str) -> TestCluster {
    common::bed("e2e", tag)
}

fn is_streaming_replica(c: &TestCluster, i: usize) -> bool {
    c.is_streaming_replica(i)
}

/// Wait until node `i` has exactly `n` rows in the test table.
fn wait_rows(c: &TestCluster, i: usize, n: i64, limit: Duration) {
    let ok = wait_for(limit, Duration::from_millis(50), || {
        (c.count_rows(i) == Ok(n)).then_some(())
    });
    assert!(
        ok.is_some(),
        "{} has {:?} rows, expected {n}{}",
        c.name(i),
        c.count_rows(i),
        c.logs_tail(30)
    );
}

/// Also: the operator's initdb options (`[bootstrap] initdb`, Patroni's form)
/// made the cluster, and its `post_bootstrap` script made a role and a database
/// in it through the URL it was given; the replicas, copies of it, have them too.
#[test]
fn real_bootstrap_from_empty() {
    use std::os::unix::fs::PermissionsExt as _;
    let script =
        std::env::temp_dir().join(format!("tenure-post-bootstrap-{}.sh", std::process::id()));
    std::fs::write(
        &script,
        "#!/bin/sh\nset -e\nfor url; do :; done\n\
         psql -X -v ON_ERROR_STOP=1 -d \"$url\" -c 'CREATE ROLE app LOGIN' \
         -c 'CREATE DATABASE app OWNER app'\n",
    )
    .expect("write the post_bootstrap script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut opts = common::options("e2e", "boot");
    opts.extra_config = format!(
        "[bootstrap]\ninitdb = [\"data-checksums\", {{ encoding = \"UTF8\" }}, \
         {{ locale = \"C.UTF-8\" }}, {{ wal-segsize = 32 }}]\n\
         post_bootstrap = \"{} --ignored-word\"\n",
        script.display()
    );
    let mut c = common::start(opts);
    let p = settled(&mut c);
    let _ = std::fs::remove_file(&script);

    // Exactly one primary, sampled a few times.
    for _ in 0..5 {
        assert_eq!(
            c.primaries(),
            vec![p],
            "exactly one /primary 200{}",
            c.logs_tail(30)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (leader, epoch) = c.leader_key().expect("leader key present");
    assert_eq!(leader, c.name(p));
    assert!(epoch > 0);
    assert_eq!(c.is_in_recovery(p), Ok(false));

    // `initialize` is the primary's system identifier.
    let sysid = c.system_identifier(p).expect("system identifier");
    assert_eq!(c.get_key("initialize").as_deref(), Some(sysid.as_str()));
    for i in 0..c.node_count() {
        assert_eq!(
            c.system_identifier(i).as_deref(),
            Ok(sysid.as_str()),
            "{}",
            c.name(i)
        );
    }

    for i in 0..c.node_count() {
        for (q, want) in [
            ("SHOW lc_collate", "C.UTF-8"),
            ("SHOW lc_ctype", "C.UTF-8"),
            ("SHOW wal_segment_size", "32MB"),
            ("SHOW data_checksums", "on"),
            ("SHOW server_encoding", "UTF8"),
            (
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'app'",
                "app",
            ),
        ] {
            assert_eq!(
                c.sql_one(i, q).as_deref(),
                Ok(want),
                "{q} on {}{}",
                c.name(i),
                c.logs_tail(20)
            );
        }
    }

    // Member keys carry the Patroni-compatible fields.
    for i in 0..c.node_count() {
        let m = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
            c.member(c.name(i))
        })
        .unwrap_or_else(|| panic!("no members/{} key", c.name(i)));
        for field in [
            "conn_url",
            "api_url",
            "state",
            "role",
            "xlog_location",
            "timeline",
        ] {
            assert!(
                m.get(field).is_some(),
                "members/{} lacks {field}: {m}",
                c.name(i)
            );
        }
        let role = m["role"].as_str().unwrap_or_default();
        let want = if i == p { "primary" } else { "replica" };
        // Allow for a member key one loop old.
        let fresh = wait_for(Duration::from_secs(5), Duration::from_millis(100), || {
            (c.member(c.name(i))?["role"].as_str()? == want).then_some(())
        });
        assert!(
            fresh.is_some(),
            "members/{} role {role:?}, expected {want}",
            c.name(i)
        );
    }

    // One OS thread per agent in steady state (DESIGN §5).
    for _ in 0..10 {
        for i in 0..c.node_count() {
            let pid = c.agent_pid(i).expect("agent running");
            assert_eq!(
                thread_count(pid),
                Some(1),
                "agent of {} (pid {pid}) threads",
                c.name(i)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Issue 13 item 5: a settled, idle cluster writes nothing to etcd: every key of
/// the scope keeps its mod revision over 10 loops (member keys are written when
/// they change, or while no leader key is seen). Up to six windows, so a write
/// the settling itself caused is not counted: its trailing WAL (a checkpoint, the
/// standby snapshot PostgreSQL logs up to 15 s after the last activity) moves the
/// positions a while longer on a loaded machine (seen once in a full run, three
/// windows in a row). A cluster that writes every loop fails every window.
fn idle_cluster_writes_nothing(c: &TestCluster) {
    let revisions = || -> Vec<(String, i64)> {
        let mut v: Vec<_> = c
            .get_prefix("")
            .expect("read the scope")
            .into_iter()
            .map(|kv| (kv.key, kv.mod_revision))
            .collect();
        v.sort();
        v
    };
    let window = c.opts.loop_wait * 10;
    let mut changed = Vec::new();
    for _ in 0..6 {
        let before = revisions();
        std::thread::sleep(window);
        let after = revisions();
        if before == after {
            println!("idle: no key of the scope written in {window:?}");
            return;
        }
        changed = after
            .into_iter()
            .filter(|k| !before.contains(k))
            .map(|(k, _)| k)
            .collect();
    }
    panic!("an idle cluster wrote {changed:?} in each of six {window:?} windows");
}

/// Messages etcd received from clients, per `service/method`, summed over the
/// members (`grpc_server_msg_received_total`, as bench/agent_footprint counts them:
/// a keepalive stream counts each message).
fn etcd_messages(c: &mut TestCluster) -> std::collections::BTreeMap<String, f64> {
    let ports: Vec<u16> = c
        .etcd()
        .map(|e| e.members.iter().map(|m| m.client_port).collect())
        .unwrap_or_default();
    assert!(!ports.is_empty(), "the test bed's etcd members");
    let mut out = std::collections::BTreeMap::new();
    for port in ports {
        let text = tenure::testbed::etcd::http_get_local(port, "/metrics")
            .unwrap_or_else(|| panic!("etcd on port {port}: no /metrics"));
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("grpc_server_msg_received_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let label = |k: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                    .map(|v| v.trim_end_matches('"').to_string())
                    .unwrap_or_default()
            };
            let service = label("grpc_service");
            let short = service.rsplit('.').next().unwrap_or(&service).to_string();
            *out.entry(format!("{short}/{}", label("grpc_method")))
                .or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    out
}

/// Issue 13 item 5: a settled, idle cluster reads the scope on the leader with its
/// renewal; a replica keeps the view from the scope watch, backed by one
/// `LeaseTimeToLive` a loop, and at least every `ttl / 3` (less `R`) reads the
/// scope in its place — an authenticated, linearizable read, so a refused token
/// shows in bounded time (real_tls). Over 10 loops: one request a replica loop (a
/// poll or a read, never both while the leader renews), one `Range` a leader loop,
/// and replicas' reads only at that cadence (writes are
/// `idle_cluster_writes_nothing`'s). Nothing else talks to etcd in the window (the
/// test reads no key in it).
fn idle_cluster_requests_per_loop(c: &mut TestCluster) {
    let loops = 10.0;
    // The ticks are on a fixed grid: a window of 10 loops holds at most 11 ticks
    // per agent, and an iteration a signal or the watch woke may add one.
    let slack = 2.0;
    let before = etcd_messages(c);
    std::thread::sleep(c.opts.loop_wait * 10);
    let after = etcd_messages(c);
    let got =
        |m: &str| after.get(m).copied().unwrap_or(0.0) - before.get(m).copied().unwrap_or(0.0);
    for (m, _) in after.iter() {
        let n = got(m);
        if n > 0.0 {
            println!("idle, 10 loops: {m} {n}");
        }
    }
    let replicas = (c.node_count() - 1) as f64;
    let ranges = got("KV/Range");
    let polls = got("Lease/LeaseTimeToLive");
    // A replica's reads: one due every `ttl / 3 - R` (core::watched), so at most
    // this many start in the window.
    let every = f64::from(c.opts.ttl) / 3.0 - c.opts.retry_timeout.as_secs_f64();
    let window = c.opts.loop_wait.as_secs_f64() * loops;
    let replica_reads = (window / every).floor() + 1.0;
    assert!(
        ranges <= loops + slack + replicas * replica_reads,
        "{ranges} Range requests in 10 loops: only the leader's renewal reads the scope \
         every loop, replicas at most {replica_reads} times each{}",
        c.logs_tail(20)
    );
    assert!(
        polls + ranges <= (replicas + 1.0) * (loops + slack),
        "{polls} LeaseTimeToLive and {ranges} Range requests in 10 loops of 1 leader and \
         {replicas} replicas: more than one request a loop"
    );
}

#[test]
fn real_host_crash_of_the_primary() {
    let mut c = bed("crash");
    let p = settled(&mut c);
    idle_cluster_writes_nothing(&c);
    idle_cluster_requests_per_loop(&mut c);
    let (_, epoch) = c.leader_key().expect("leader key");
    for n in 1..=50 {
        c.write_row(p, n).expect("write on the primary");
    }
    let witness = (0..c.node_count()).find(|&i| i != p).expect("a replica");
    wait_rows(&c, witness, 50, Duration::from_secs(30));

    let mut probe = c.write_probe(p, Duration::from_millis(20)).expect("probe");
    std::thread::sleep(Duration::from_millis(300));
    let crash = c.host_crash(p).expect("host crash");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)));
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, crash)
    })
    .unwrap_or_else(|| {
        panic!(
            "new primary {} acknowledged no write{}",
            c.name(np),
            c.logs_tail(30)
        )
    });
    probe.stop(Duration::from_secs(2));
    probe.check_no_overlap(p, np, crash).unwrap();
    if let Some(first) = probe.first_ack_after(np, crash) {
        println!(
            "failover: crash -> first acknowledged write on {}: {:.2} s",
            c.name(np),
            first
                .acked
                .unwrap_or(crash)
                .duration_since(crash)
                .as_secs_f64()
        );
    }

    // Rows replicated before the crash survive; the epoch moved on.
    assert_eq!(
        c.count_rows(np),
        Ok(50),
        "rows on the new primary{}",
        c.logs_tail(30)
    );
    let (leader, new_epoch) = c.leader_key().expect("leader key after failover");
    assert_eq!(leader, c.name(np));
    assert!(new_epoch > epoch, "epoch {new_epoch} after {epoch}");

    // The dead node comes back as a streaming replica of the new primary.
    c.start_agent(p).expect("restart the crashed node's agent");
    let back = wait_for(REJOIN, Duration::from_millis(200), || {
        is_streaming_replica(&c, p).then_some(())
    });
    assert!(
        back.is_some(),
        "{} did not rejoin as a replica{}",
        c.name(p),
        c.logs_tail(40)
    );
    c.write_row(np, 1000).expect("write on the new primary");
    wait_rows(&c, p, 51, Duration::from_secs(30));
    assert_eq!(c.primaries(), vec![np]);
}

#[test]
fn real_agent_restart_on_a_healthy_primary() {
    let mut c = bed("restart");
    let p = settled(&mut c);
    let (leader, epoch) = c.leader_key().expect("leader key");
    let postmaster = c.postmaster_pid(p).expect("postmaster pid");

    // (a) SIGKILL only the agent and start it again at once: it adopts.
    c.kill_agent(p);
    c.start_agent(p).expect("restart agent");
    // Watch for longer than the TTL: had the key expired, someone would have taken it.
    let watch = Duration::from_secs(u64::from(c.opts.ttl) + 3);
    let t0 = Instant::now();
    while t0.elapsed() < watch {
        // An etcd read that fails proves nothing either way: skip it.
        if let Ok(now) = c.try_leader_key() {
            assert_eq!(
                now,
                Some((leader.clone(), epoch)),
                "leader key changed after an agent restart{}",
                c.logs_tail(40)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        c.postmaster_pid(p),
        Some(postmaster),
        "postmaster restarted"
    );
    assert_eq!(c.wait_primary(Duration::from_secs(5)), Some(p));
    assert!(
        c.agent_log(p).to_lowercase().contains("adopt"),
        "log of {} does not mention adopting{}",
        c.name(p),
        c.logs_tail(40)
    );

    // (b) SIGKILL the agent and keep it down: another node takes over while the
    // old PostgreSQL still runs as primary (no watchdog in this bed).
    c.kill_agent(p);
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary after the agent died{}", c.logs_tail(40)));
    let (_, new_epoch) = c.leader_key().expect("leader key");
    assert!(new_epoch > epoch);
    assert!(
        c.postmaster_pid(p).is_some(),
        "old postmaster should still run"
    );
    assert_eq!(
        c.is_in_recovery(p),
        Ok(false),
        "old PostgreSQL still a primary before the agent returns"
    );

    // The old agent returns: it must fence its primary first, then rejoin.
    c.start_agent(p).expect("restart agent");
    let back = wait_for(REJOIN, Duration::from_millis(200), || {
        is_streaming_replica(&c, p).then_some(())
    });
    assert!(
        back.is_some(),
        "{} did not rejoin as a replica{}",
        c.name(p),
        c.logs_tail(40)
    );
    assert_ne!(
        c.postmaster_pid(p),
        Some(postmaster),
        "the old postmaster was not fenced"
    );
    assert!(
        c.agent_log(p).to_lowercase().contains("fenc"),
        "log of {} does not mention the fence{}",
        c.name(p),
        c.logs_tail(40)
    );
    assert_eq!(c.primaries(), vec![np]);
}

#[test]
fn real_clean_shutdown_releases_the_key() {
    let mut c = bed("term");
    let p = settled(&mut c);
    let (_, epoch) = c.leader_key().expect("leader key");
    let mut probe = c.write_probe(p, Duration::from_millis(20)).expect("probe");
    std::thread::sleep(Duration::from_millis(300));

    let t0 = Instant::now();
    let status = c
        .term_agent(p, Duration::from_secs(30))
        .expect("agent exits after SIGTERM");
    let exited = t0.elapsed();
    assert!(
        status.success(),
        "agent of {} exited {status}{}",
        c.name(p),
        c.logs_tail(30)
    );
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary after a clean shutdown{}", c.logs_tail(40)));
    let took = t0.elapsed();
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t0)
    })
    .unwrap_or_else(|| {
        panic!(
            "new primary {} acknowledged no write{}",
            c.name(np),
            c.logs_tail(30)
        )
    });
    probe.stop(Duration::from_secs(2));
    probe.check_no_overlap(p, np, t0).unwrap();

    let (leader, new_epoch) = c.leader_key().expect("leader key after switchover");
    assert_eq!(leader, c.name(np), "the key changed hands");
    assert!(new_epoch > epoch);
    // Issue 9: the clean stop's proof is the release marker of its epoch, naming
    // nobody (DESIGN §1 step 4), not a field of its member key.
    let marker: serde_json::Value =
        serde_json::from_str(&c.get_key("release").expect("a release marker")).expect("JSON");
    assert_eq!(marker["epoch"].as_i64(), Some(epoch), "{marker}");
    assert!(marker["candidate"].is_null(), "{marker}");
    println!(
        "clean shutdown: agent exited after {:.2} s, {} primary after {:.2} s (ttl {} s)",
        exited.as_secs_f64(),
        c.name(np),
        took.as_secs_f64(),
        c.opts.ttl
    );
}
