//! `tenure::pg` against real PostgreSQL 15: bootstrap, replicate, fence, promote,
//! rewind, follow again. Runs as root; PostgreSQL runs as `postgres`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure::clock;
use tenure::config::PgConfig;
use tenure::core::model::{DataDir, FenceOutcome, Job, JobKind, PgRole, PgStatus};
use tenure::pg::slots::{CopyWork, parse_local, plan_copies, published};
use tenure::pg::{ConnTarget, PgCtl, conn_url};
use tenure::testbed;

const BIN: &str = "/usr/lib/postgresql/15/bin";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn node_cfg(dir: &Path, name: &str) -> PgConfig {
    let port = testbed::free_port();
    PgConfig {
        bin_dir: PathBuf::from(BIN),
        data_dir: dir.join(format!("{name}-data")),
        listen: format!("127.0.0.1:{port}"),
        connect_address: format!("127.0.0.1:{port}"),
        socket_dir: dir.join(format!("{name}-socket")),
        user: Some("postgres".into()),
        superuser: "postgres".into(),
        superuser_password: "su-secret".into(),
        replication_user: "replicator".into(),
        replication_password: "repl-secret".into(),
        rewind_user: "rewinder".into(),
        rewind_password: "rewind-secret".into(),
        parameters: vec![
            ("shared_buffers".into(), "16MB".into()),
            ("max_connections".into(), "20".into()),
            ("fsync".into(), "off".into()),
        ],
        move_aside_unusable: false,
        replication_ssl: Default::default(),
        rewind_ssl: Default::default(),
        hba_clientcert: None,
        hba_cert: false,
        create_replica: Default::default(),
        bootstrap: Default::default(),
        pg_hba: Vec::new(),
    }
}

/// Kills every process of every node (by the pids `pids()` reports) and any job
/// child, even when the test fails; removes the scratch dir on success.
struct Guard {
    dir: PathBuf,
    nodes: Vec<PgCtl>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill_job();
            let pm = n.postmaster_pid();
            // SIGQUIT first (the postmaster then removes its shared memory), then
            // SIGKILL by pid whatever is left.
            let _ = n.fence(clock::now().add(secs(5)));
            for _ in 0..3 {
                for pid in n.pids().unwrap_or_default() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                if n.pids().is_ok_and(|p| p.is_empty()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if let Some(pm) = pm {
                reap(pm);
            }
        }
        if std::thread::panicking() || std::env::var_os("TENURE_KEEP_SCRATCH").is_some() {
            eprintln!("scratch dir kept for inspection: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Orphaned postmasters become our children (not pid 1's, which does not reap in
/// this container): a SIGKILLed postmaster left as a zombie would otherwise block
/// the next start ("lock file postmaster.pid already exists").
fn become_subreaper() {
    nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
}

/// Reap `pid` if it is our (zombie) child; only that pid, so job children of
/// other tests keep their exit status.
fn reap(pid: u32) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let p = nix::unistd::Pid::from_raw(pid as i32);
    for _ in 0..100 {
        match waitpid(p, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(10)),
            _ => return,
        }
    }
}

/// Poll the job until it finishes; panics with its detail if it failed.
fn run_job(n: &mut PgCtl, kind: JobKind, src: Option<&ConnTarget>, limit: Duration) -> Duration {
    let t0 = clock::now();
    n.start_job(&kind, src, t0)
        .unwrap_or_else(|e| panic!("start {kind:?}: {e}"));
    assert!(n.job_pid().is_some(), "{kind:?} has a child at once");
    loop {
        match n.poll_job(clock::now()) {
            Job::Running { .. } => {}
            Job::Finished { ok: true, .. } => break,
            Job::Finished {
                ok: false, detail, ..
            } => panic!("{kind:?} failed: {detail}"),
            Job::Idle => panic!("{kind:?}: job vanished"),
        }
        assert!(
            clock::now().since(t0) < limit,
            "{kind:?} still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        n.poll_job(clock::now()),
        Job::Idle,
        "Finished is reported once"
    );
    clock::now().since(t0)
}

fn probe_until(
    n: &mut PgCtl,
    limit: Duration,
    what: &str,
    ok: impl Fn(&PgStatus) -> bool,
) -> PgStatus {
    let t0 = clock::now();
    loop {
        let st = n.probe(clock::now().add(secs(1)));
        if ok(&st) {
            return st;
        }
        assert!(clock::now().since(t0) < limit, "{what}: last probe {st:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The node's replication slots, by name.
fn slot_names(cfg: &PgConfig) -> Vec<String> {
    client(cfg)
        .query("SELECT slot_name FROM pg_replication_slots ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A test client over the node's Unix socket (trust, as the superuser).
fn client(cfg: &PgConfig) -> postgres::Client {
    let port: u16 = cfg.listen.rsplit_once(':').unwrap().1.parse().unwrap();
    postgres::Config::new()
        .host_path(&cfg.socket_dir)
        .port(port)
        .user("postgres")
        .dbname("postgres")
        .connect_timeout(secs(5))
        .options("-c statement_timeout=5000")
        .connect(postgres::NoTls)
        .expect("test client connects")
}

fn target(name: &str, cfg: &PgConfig) -> ConnTarget {
    ConnTarget::from_conn_url(name, &conn_url(&cfg.connect_address)).unwrap()
}

fn count(cfg: &PgConfig, v: &str) -> i64 {
    let mut c = client(cfg);
    c.query_one("SELECT count(*) FROM t WHERE v = $1", &[&v])
        .unwrap()
        .get(0)
}

#[test]
fn bootstrap_replicate_fence_promote_rewind() {
    become_subreaper();
    let dir = testbed::scratch_dir("pg").unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    nix::unistd::chown(&dir, Some(pg.uid), Some(pg.gid)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c1 = node_cfg(&dir, "n1");
    let c2 = node_cfg(&dir, "n2");
    let mut g = Guard {
        dir: dir.clone(),
        nodes: vec![
            PgCtl::new(&c1, "n1").unwrap(),
            PgCtl::new(&c2, "n2").unwrap(),
        ],
    };
    let t1 = target("n1", &c1);
    let t2 = target("n2", &c2);
    // The members' addresses, as the agent passes them (DESIGN §3a): initdb and
    // later rewrites admit exactly these.
    for n in &mut g.nodes {
        n.set_hba_hosts(vec!["127.0.0.1".into()], clock::now().add(secs(1)))
            .unwrap();
    }

    // initdb
    assert_eq!(g.nodes[0].data_dir_state(), DataDir::Empty);
    let took = run_job(&mut g.nodes[0], JobKind::InitDb, None, secs(60));
    eprintln!("timing: initdb {:.2} s", took.as_secs_f64());
    let sysid = match g.nodes[0].data_dir_state() {
        // initdb leaves a cleanly shut-down primary: state 1, no standby.signal.
        DataDir::Present {
            sysid,
            was_primary: true,
        } => sysid,
        other => panic!("after initdb: {other:?}"),
    };
    assert!(
        g.nodes[0].pids().unwrap().is_empty(),
        "initdb leaves the cluster stopped"
    );
    assert_eq!(
        g.nodes[0].probe(clock::now().add(secs(1))).role,
        PgRole::Stopped
    );
    // Refused: initdb into a non-empty directory.
    assert!(
        g.nodes[0]
            .start_job(&JobKind::InitDb, None, clock::now())
            .is_err()
    );

    // start as primary
    let took = run_job(&mut g.nodes[0], JobKind::StartPrimary, None, secs(60));
    eprintln!("timing: start primary {:.2} s", took.as_secs_f64());
    let st = probe_until(&mut g.nodes[0], secs(10), "primary", |s| {
        s.role == PgRole::Primary
    });
    assert_eq!(st.timeline, 1);
    assert!(st.lsn > 0);
    assert_eq!(
        st.data,
        DataDir::Present {
            sysid,
            was_primary: true
        }
    );
    g.nodes[0]
        .sync_slots(
            &["n1".into(), "n2".into(), "n3".into()],
            &[],
            &[],
            &[],
            clock::now().add(secs(2)),
        )
        .unwrap();
    assert_eq!(
        slot_names(&c1),
        vec!["n2", "n3"],
        "one slot per other member"
    );
    // n3 left the cluster: its inactive slot goes. A slot an operator made for a
    // backup server stays when `ignore_slots` names it, and a permanent slot (the
    // `slots` config key) is made; an operator's slot nothing names goes.
    {
        let mut c = client(&c1);
        c.batch_execute(
            "SELECT pg_create_physical_replication_slot('keepme', true); \
             SELECT pg_create_physical_replication_slot('stray', true)",
        )
        .unwrap();
    }
    let keep = tenure::config::IgnoreSlot {
        name: Some("keepme".into()),
        ..Default::default()
    };
    // A logical-only entry matches no physical slot.
    let logical = tenure::config::IgnoreSlot {
        plugin: Some("pgoutput".into()),
        ..Default::default()
    };
    // A permanent slot named like this node is never made on it (nothing here
    // would read it; it would hold WAL).
    g.nodes[0]
        .sync_slots(
            &["n2".into()],
            &["barman".into(), "n1".into()],
            &[],
            &[keep, logical],
            clock::now().add(secs(2)),
        )
        .unwrap();
    assert_eq!(slot_names(&c1), vec!["barman", "keepme", "n2"]);
    {
        let mut c = client(&c1);
        c.batch_execute("SELECT pg_drop_replication_slot('keepme')")
            .unwrap();
        // A slot PostgreSQL invalidated (`max_slot_wal_keep_size`) serves nobody
        // again: the upkeep makes a wanted one anew (review 2, finding 5).
        // (`wal_keep_size` too: tenure's 256MB would keep the slots' WAL.)
        c.batch_execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
            .unwrap();
        c.batch_execute("ALTER SYSTEM SET wal_keep_size = 0")
            .unwrap();
        c.batch_execute("SELECT pg_reload_conf()").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        c.batch_execute(
            "CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad \
             FROM generate_series(1, 150000) g; DROP TABLE filler",
        )
        .unwrap();
        for _ in 0..3 {
            c.batch_execute("SELECT pg_switch_wal()").unwrap();
            c.batch_execute("CHECKPOINT").unwrap();
        }
        let lost: Option<String> = c
            .query_one(
                "SELECT string_agg(slot_name, ',' ORDER BY slot_name) FROM pg_replication_slots \
                 WHERE wal_status = 'lost'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            lost.as_deref(),
            Some("barman,n2"),
            "the inactive slots were invalidated"
        );
        c.batch_execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            .unwrap();
        c.batch_execute("ALTER SYSTEM RESET wal_keep_size").unwrap();
        c.batch_execute("SELECT pg_reload_conf()").unwrap();
    }
    // A departed member's kept slot (`member_slots_ttl`) PostgreSQL invalidated
    // is given up: dropped, not made anew (nothing can resume from it), while
    // the permanent one is made anew.
    let out = g.nodes[0]
        .sync_slots(
            &[],
            &["barman".into()],
            &["n2".into()],
            &[],
            clock::now().add(secs(2)),
        )
        .unwrap();
    assert_eq!(out.gave_up, vec!["n2"], "{out:?}");
    assert!(out.errors.is_empty() && out.refused.is_empty(), "{out:?}");
    assert_eq!(slot_names(&c1), vec!["barman"]);
    // n2 a member again: its slot is made.
    let out = g.nodes[0]
        .sync_slots(
            &["n2".into()],
            &["barman".into()],
            &[],
            &[],
            clock::now().add(secs(2)),
        )
        .unwrap();
    assert_eq!(out, Default::default());
    {
        let mut c = client(&c1);
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE wal_status IS DISTINCT FROM 'lost'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 2, "barman and n2 made anew");
        c.batch_execute("SELECT pg_drop_replication_slot('barman')")
            .unwrap();
        c.batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('one')")
            .unwrap();
    }

    // Review M1: a names write whose reload fails (here: no time left for it)
    // leaves the file ahead of the server. The probe reports the names as unknown
    // until a set takes effect, so the core never trusts the server's value while
    // any reload could apply the file's.
    let st = probe_until(&mut g.nodes[0], secs(5), "names read", |s| {
        s.sync_names.is_some()
    });
    assert_eq!(st.sync_names.as_deref(), Some(""));
    assert!(
        g.nodes[0]
            .set_sync_names("\"nobody\"", clock::now())
            .is_err(),
        "the reload had no time"
    );
    let st = g.nodes[0].probe(clock::now().add(secs(1)));
    assert_eq!(st.sync_names, None, "file and server differ: unknown");
    g.nodes[0]
        .set_sync_names("", clock::now().add(secs(2)))
        .unwrap();
    probe_until(&mut g.nodes[0], secs(5), "names read again", |s| {
        s.sync_names.as_deref() == Some("")
    });
    // An operator's ALTER SYSTEM outranks the file: the names read as unknown,
    // and the next set comments it out, so the server takes tenure's value.
    {
        let mut c = client(&c1);
        c.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
            .unwrap();
        c.batch_execute("SELECT pg_reload_conf()").unwrap();
    }
    probe_until(&mut g.nodes[0], secs(5), "the operator's names", |s| {
        s.sync_names.is_none()
    });
    g.nodes[0]
        .set_sync_names("", clock::now().add(secs(2)))
        .unwrap();
    probe_until(&mut g.nodes[0], secs(5), "tenure's names again", |s| {
        s.sync_names.as_deref() == Some("")
    });

    // second node: basebackup, start as replica
    let took = run_job(
        &mut g.nodes[1],
        JobKind::Basebackup { from: "n1".into() },
        Some(&t1),
        secs(120),
    );
    eprintln!("timing: basebackup {:.2} s", took.as_secs_f64());
    // A fresh basebackup carries the primary's pg_control state, but it is a standby.
    assert_eq!(
        g.nodes[1].data_dir_state(),
        DataDir::Present {
            sysid,
            was_primary: false
        }
    );
    let conf = std::fs::read_to_string(c2.data_dir.join("tenure.conf")).unwrap();
    assert!(conf.contains("primary_conninfo"));
    assert!(!conf.contains("repl-secret"), "no password in tenure.conf");
    // What an operator's ALTER SYSTEM (or a copy) left in postgresql.auto.conf,
    // which PostgreSQL reads after tenure.conf: a primary_conninfo to nowhere and
    // a recovery target that ends recovery with a promotion. A start writes
    // tenure's settings and comments these out, so the standby streams from its
    // leader and stays one.
    let auto = c2.data_dir.join("postgresql.auto.conf");
    let mut text = std::fs::read_to_string(&auto).unwrap();
    text.push_str(&format!(
        "primary_conninfo = 'host=127.0.0.1 port={}'\nrecovery_target = 'immediate'\n\
         recovery_target_action = 'promote'\n",
        testbed::free_port()
    ));
    std::fs::write(&auto, text).unwrap();
    run_job(
        &mut g.nodes[1],
        JobKind::StartReplica {
            leader: "n1".into(),
        },
        Some(&t1),
        secs(60),
    );
    let st = probe_until(&mut g.nodes[1], secs(20), "replica streams from n1", |s| {
        s.role == PgRole::Replica && s.streaming
    });
    assert_eq!(st.following.as_deref(), Some("n1"));
    assert_eq!(st.timeline, 1);
    let text = std::fs::read_to_string(&auto).unwrap();
    for name in [
        "primary_conninfo",
        "recovery_target",
        "recovery_target_action",
    ] {
        assert!(
            !text.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name} is still set in postgresql.auto.conf:\n{text}"
        );
    }
    {
        let mut c = client(&c1);
        c.batch_execute("INSERT INTO t VALUES ('two')").unwrap();
    }
    testbed::wait_for(secs(10), Duration::from_millis(20), || {
        (count(&c2, "two") == 1).then_some(())
    })
    .expect("row written on the primary reaches the replica");

    // Slot copies: the leader publishes the positions of the slots it keeps; a
    // standby keeps copies of them (not of its own), made with WAL reserved,
    // advanced no further than it replayed, dropped once no longer published.
    let st1 = g.nodes[0].probe(clock::now().add(secs(2)));
    let seen1 = parse_local(st1.report.slots_json.as_deref());
    let n2_slot = seen1
        .iter()
        .find(|s| s.name == "n2")
        .expect("n2's slot on n1");
    assert!(n2_slot.active, "n2 streams through its slot: {seen1:?}");
    assert!(
        published(&seen1, &["n2".into()])
            .iter()
            .any(|(n, _)| n == "n2"),
        "a kept slot is published: {seen1:?}"
    );
    let at = st1.lsn;
    let lead: Vec<(String, u64)> = ["barman", "n2", "n3"]
        .iter()
        .map(|n| (n.to_string(), at))
        .collect();
    let plan2 = |n: &mut PgCtl, lead: &[(String, u64)]| {
        let st = probe_until(n, secs(10), "n2 replayed n1's position", |s| {
            s.report.replay_lsn.is_some_and(|r| r >= at)
        });
        plan_copies(
            &parse_local(st.report.slots_json.as_deref()),
            lead,
            "n2",
            true,
            &[],
            st.report.replay_lsn,
        )
    };
    let w = plan2(&mut g.nodes[1], &lead);
    assert_eq!(w.creates, vec!["barman", "n3"], "{w:?}");
    assert_eq!(
        g.nodes[1]
            .copy_slots(&w, clock::now().add(secs(2)))
            .unwrap(),
        Default::default()
    );
    let w = plan2(&mut g.nodes[1], &lead);
    assert!(w.creates.is_empty() && w.drops.is_empty(), "{w:?}");
    assert_eq!(
        w.advances,
        vec![("barman".to_string(), at), ("n3".to_string(), at)],
        "copies made at this standby's restart point are advanced to the leader's"
    );
    assert_eq!(
        g.nodes[1]
            .copy_slots(&w, clock::now().add(secs(2)))
            .unwrap(),
        Default::default()
    );
    let w = plan2(&mut g.nodes[1], &lead[..1]);
    assert_eq!(w.drops, vec!["n3"], "{w:?}");
    assert!(w.creates.is_empty() && w.advances.is_empty(), "{w:?}");
    assert_eq!(
        g.nodes[1]
            .copy_slots(&w, clock::now().add(secs(2)))
            .unwrap(),
        Default::default()
    );
    let copy = |cfg: &PgConfig| -> Option<String> {
        client(cfg)
            .query_one(
                "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'barman'",
                &[],
            )
            .ok()
            .map(|r| r.get(0))
    };
    assert_eq!(slot_names(&c2), vec!["barman"]);
    assert_eq!(copy(&c2), Some(tenure::core::model::lsn_text(at)));
    // A refused create (here the name exists) keeps neither the next create nor
    // the advances from running (review M2), and is reported.
    let w = CopyWork {
        creates: vec!["barman".into(), "n4".into()],
        advances: vec![("n4".into(), at)],
        ..Default::default()
    };
    let o = g.nodes[1]
        .copy_slots(&w, clock::now().add(secs(2)))
        .unwrap();
    assert_eq!(o.refused, vec!["barman"], "{o:?}");
    assert_eq!(o.errors.len(), 1, "{o:?}");
    assert_eq!(slot_names(&c2), vec!["barman", "n4"]);
    let n4: String = client(&c2)
        .query_one(
            "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'n4'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n4, tenure::core::model::lsn_text(at));
    let w = CopyWork {
        drops: vec!["n4".into()],
        ..Default::default()
    };
    let o = g.nodes[1]
        .copy_slots(&w, clock::now().add(secs(2)))
        .unwrap();
    assert_eq!(o, Default::default());
    // Never past what this standby replayed: a position it has not seen yet
    // advances the copy only as far as its replay. (Only the plan is checked
    // here: PostgreSQL clamps an advance to the replay position by itself.)
    {
        let mut c = client(&c1);
        c.batch_execute("INSERT INTO t VALUES ('past')").unwrap();
    }
    let beyond = vec![("barman".to_string(), at + (1 << 30))];
    let st = probe_until(&mut g.nodes[1], secs(10), "n2 replayed the row", |s| {
        s.report.replay_lsn.is_some_and(|r| r > at)
    });
    let replay = st.report.replay_lsn.unwrap();
    let w = plan_copies(
        &parse_local(st.report.slots_json.as_deref()),
        &beyond,
        "n2",
        true,
        &[],
        Some(replay),
    );
    assert_eq!(w.advances, vec![("barman".to_string(), replay)]);

    // fence the primary while a client holds an open transaction
    let mut holder = client(&c1);
    holder
        .batch_execute("BEGIN; INSERT INTO t VALUES ('uncommitted')")
        .unwrap();
    let before = g.nodes[0].pids().unwrap();
    assert!(
        before.len() > 3,
        "postmaster + auxiliaries + backends: {before:?}"
    );
    assert!(g.nodes[0].postmaster_pid().is_some());
    let pm1 = g.nodes[0].postmaster_pid().unwrap();
    let t0 = clock::now();
    let out = g.nodes[0].fence(t0.add(secs(3)));
    eprintln!(
        "timing: fence {:.3} s",
        clock::now().since(t0).as_secs_f64()
    );
    assert_eq!(out, FenceOutcome::Complete);
    assert!(
        g.nodes[0].pids().unwrap().is_empty(),
        "no process of n1 remains"
    );
    assert!(g.nodes[0].postmaster_pid().is_none());
    reap(pm1);
    // A fenced primary (immediate shutdown: still "in production") must rewind
    // before it follows anyone.
    assert!(matches!(
        g.nodes[0].data_dir_state(),
        DataDir::Present {
            was_primary: true,
            ..
        }
    ));
    assert!(
        holder.batch_execute("COMMIT").is_err(),
        "the client's connection is dead"
    );
    assert_eq!(
        g.nodes[0].probe(clock::now().add(secs(1))).role,
        PgRole::Stopped
    );

    // promote the replica
    let t0 = clock::now();
    g.nodes[1].promote(t0.add(secs(10))).unwrap();
    eprintln!(
        "timing: promote {:.3} s",
        clock::now().since(t0).as_secs_f64()
    );
    let st = probe_until(&mut g.nodes[1], secs(10), "n2 primary", |s| {
        s.role == PgRole::Primary
    });
    assert_eq!(st.timeline, 2);
    assert_eq!(st.following, None);
    // The copy made while n2 was a standby is the leader's slot now: kept where
    // it was (the WAL a consumer behind n2's promotion still needs), not made
    // anew at n2's own position.
    g.nodes[1]
        .sync_slots(
            &["n1".into()],
            &["barman".into()],
            &[],
            &[],
            clock::now().add(secs(2)),
        )
        .unwrap();
    assert_eq!(slot_names(&c2), vec!["barman", "n1"]);
    assert_eq!(copy(&c2), Some(tenure::core::model::lsn_text(at)));
    {
        let mut c = client(&c2);
        c.batch_execute("INSERT INTO t VALUES ('three')").unwrap();
    }
    assert_eq!(count(&c2, "uncommitted"), 0);

    // rewind the old primary from the new one, follow it
    let took = run_job(
        &mut g.nodes[0],
        JobKind::Rewind { from: "n2".into() },
        Some(&t2),
        secs(120),
    );
    eprintln!("timing: rewind {:.2} s", took.as_secs_f64());
    assert_eq!(
        g.nodes[0].data_dir_state(),
        DataDir::Present {
            sysid,
            was_primary: false
        }
    );
    run_job(
        &mut g.nodes[0],
        JobKind::StartReplica {
            leader: "n2".into(),
        },
        Some(&t2),
        secs(60),
    );
    // It first streams the end of timeline 1 from n2, then switches to 2.
    let st = probe_until(
        &mut g.nodes[0],
        secs(20),
        "n1 streams timeline 2 from n2",
        |s| s.role == PgRole::Replica && s.streaming && s.timeline == 2,
    );
    assert_eq!(st.following.as_deref(), Some("n2"));
    testbed::wait_for(secs(10), Duration::from_millis(20), || {
        (count(&c1, "three") == 1).then_some(())
    })
    .expect("the rewound node sees the new primary's row");
    assert_eq!(count(&c1, "uncommitted"), 0);

    // a clean stop of the replica
    run_job(&mut g.nodes[0], JobKind::Stop, None, secs(60));
    assert!(g.nodes[0].pids().unwrap().is_empty());

    // DESIGN §3a: a busy backend outlives a SIGKILLed postmaster (an idle one
    // notices at once). The fence must still find and end it.
    let c2b = c2.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let busy = std::thread::spawn(move || {
        let mut c = client(&c2b);
        c.batch_execute("SET statement_timeout = 30000; BEGIN; INSERT INTO t VALUES ('orphan')")
            .unwrap();
        tx.send(()).unwrap();
        // CPU-bound: checks for interrupts but not for postmaster death.
        let r = c.batch_execute("SELECT count(*) FROM generate_series(1, 2000000000)");
        let commit = c.batch_execute("COMMIT");
        (r.is_err(), commit.is_err())
    });
    rx.recv_timeout(secs(10)).expect("busy client started");
    std::thread::sleep(Duration::from_millis(200));
    let pm = g.nodes[1].postmaster_pid().expect("n2 runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pm as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    testbed::wait_for(secs(5), Duration::from_millis(5), || {
        g.nodes[1].postmaster_pid().is_none().then_some(())
    })
    .expect("postmaster gone");
    reap(pm);
    std::thread::sleep(Duration::from_millis(100));
    let left = g.nodes[1].pids().unwrap();
    assert!(!left.is_empty(), "the busy backend survives the postmaster");
    let out = g.nodes[1].fence(clock::now().add(secs(3)));
    assert_eq!(out, FenceOutcome::Complete);
    assert!(
        g.nodes[1].pids().unwrap().is_empty(),
        "left before the fence: {left:?}"
    );
    let (query_failed, commit_failed) = busy.join().unwrap();
    assert!(query_failed && commit_failed, "the orphan never commits");
    // A new postmaster removes the dead one's shared memory; the row is not there.
    run_job(&mut g.nodes[1], JobKind::StartPrimary, None, secs(60));
    probe_until(&mut g.nodes[1], secs(10), "n2 back", |s| {
        s.role == PgRole::Primary
    });
    assert_eq!(count(&c2, "orphan"), 0);
    run_job(&mut g.nodes[1], JobKind::Stop, None, secs(60));
    assert!(g.nodes[1].pids().unwrap().is_empty());
}

#[test]
fn basebackup_failure_leaves_nothing_behind() {
    become_subreaper();
    let dir = testbed::scratch_dir("pg-bb-fail").unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    nix::unistd::chown(&dir, Some(pg.uid), Some(pg.gid)).unwrap();
    let c = node_cfg(&dir, "x");
    let mut g = Guard {
        dir: dir.clone(),
        nodes: vec![PgCtl::new(&c, "x").unwrap()],
    };
    // Nobody listens on this port.
    let nobody = ConnTarget {
        name: "ghost".into(),
        host: "127.0.0.1".into(),
        port: testbed::free_port(),
    };
    let n = &mut g.nodes[0];
    // The job's source must be the member it names.
    assert!(
        n.start_job(
            &JobKind::Basebackup {
                from: "other".into()
            },
            Some(&nobody),
            clock::now()
        )
        .is_err()
    );
    n.start_job(
        &JobKind::Basebackup {
            from: "ghost".into(),
        },
        Some(&nobody),
        clock::now(),
    )
    .unwrap();
    assert!(
        n.start_job(&JobKind::StartPrimary, None, clock::now())
            .is_err(),
        "one job at a time"
    );
    let detail = testbed::wait_for(secs(30), Duration::from_millis(10), || {
        match n.poll_job(clock::now()) {
            Job::Finished { ok, detail, .. } => Some((ok, detail)),
            _ => None,
        }
    })
    .expect("basebackup ends");
    assert!(!detail.0);
    assert!(detail.1.contains("pg_basebackup"), "{}", detail.1);
    assert_eq!(n.data_dir_state(), DataDir::Empty);
    assert!(!dir.join("x-data.basebackup-tmp").exists());

    // Garbage in the data dir: Unusable, never initdb'd over, moved aside intact.
    std::fs::create_dir_all(&c.data_dir).unwrap();
    std::fs::write(c.data_dir.join("junk"), "x").unwrap();
    assert!(matches!(n.data_dir_state(), DataDir::Unusable(_)));
    assert!(n.start_job(&JobKind::InitDb, None, clock::now()).is_err());
    let aside = n.move_data_aside().unwrap();
    assert!(aside.join("junk").is_file());
    assert!(aside.to_string_lossy().contains("x-data.aside-"));
    assert_eq!(n.data_dir_state(), DataDir::Empty);
}

/// Non-negotiable 2: a deadline on every blocking call. A backend that stops
/// answering (SIGSTOP here; stuck I/O in life) must not hold the probe past its
/// deadline: the client-side timeout ends the wait, the connection is dropped and a
/// fresh one serves the next probe once the backend is gone.
#[test]
fn probe_keeps_its_deadline_when_the_backend_stops_answering() {
    become_subreaper();
    let dir = testbed::scratch_dir("pg-wedge").unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    nix::unistd::chown(&dir, Some(pg.uid), Some(pg.gid)).unwrap();
    let c = node_cfg(&dir, "w");
    let mut g = Guard {
        dir: dir.clone(),
        nodes: vec![PgCtl::new(&c, "w").unwrap()],
    };
    run_job(&mut g.nodes[0], JobKind::InitDb, None, secs(60));
    run_job(&mut g.nodes[0], JobKind::StartPrimary, None, secs(60));
    let n = &mut g.nodes[0];
    let st = n.probe(clock::now().add(secs(5)));
    assert_eq!(st.role, PgRole::Primary);
    // The backend serving the probe's connection: PostgreSQL titles client backends
    // "postgres: <user> <db> [local] <state>", and the probe's is the only one.
    let pm = n.postmaster_pid().unwrap();
    let backend = n
        .pids()
        .unwrap()
        .into_iter()
        .filter(|&p| p != pm)
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|s| s.contains("postgres postgres [local]"))
        })
        .max()
        .expect("the probe's backend");
    let bpid = nix::unistd::Pid::from_raw(backend as i32);
    nix::sys::signal::kill(bpid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let t0 = clock::now();
    let st = n.probe(t0.add(Duration::from_millis(300)));
    let took = clock::now().since(t0);
    nix::sys::signal::kill(bpid, nix::sys::signal::Signal::SIGCONT).unwrap();
    eprintln!(
        "probe against a stopped backend returned after {took:?}: {:?}",
        st.role
    );
    assert_eq!(
        st.role,
        PgRole::Unresponsive,
        "a wedged backend is not a healthy primary"
    );
    // The deadline held (scheduling slack on two busy cores aside).
    assert!(
        took < Duration::from_millis(300 + 700),
        "probe took {took:?}"
    );
    // And the next probe, on a fresh connection, sees the primary again.
    let st = n.probe(clock::now().add(secs(5)));
    assert_eq!(st.role, PgRole::Primary);
}

/// A node with a fresh cluster (initdb), not started, in its own scratch dir.
fn one_node(tag: &str) -> (Guard, PgConfig) {
    become_subreaper();
    let dir = testbed::scratch_dir(tag).unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    nix::unistd::chown(&dir, Some(pg.uid), Some(pg.gid)).unwrap();
    let c = node_cfg(&dir, "f");
    let mut g = Guard {
        dir,
        nodes: vec![PgCtl::new(&c, "f").unwrap()],
    };
    run_job(&mut g.nodes[0], JobKind::InitDb, None, secs(60));
    (g, c)
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

/// Issue 8, finding 7: a postmaster that `pg_ctl start` forked has not changed into
/// the data directory yet, so a scan by cwd misses it. Before the fix the fence said
/// Complete at once and the server came up after it; now the job's process tree is
/// the cluster's: killed, counted until gone, and the job reports its failure.
#[test]
fn fence_during_pg_ctl_start_leaves_nothing_running() {
    let (mut g, _c) = one_node("pg-fence-start");
    let n = &mut g.nodes[0];
    n.start_job(&JobKind::StartPrimary, None, clock::now())
        .unwrap();
    let job = n.job_pid().expect("pg_ctl runs");
    let out = n.fence(clock::now().add(secs(3)));
    assert_eq!(out, FenceOutcome::Complete);
    assert!(!running(job), "the job itself was killed");
    // Long enough for a missed postmaster to be up and answering.
    std::thread::sleep(secs(3));
    assert_eq!(n.pids().unwrap(), Vec::<u32>::new(), "nothing came up");
    assert_eq!(n.postmaster_pid(), None);
    assert_eq!(n.probe(clock::now().add(secs(1))).role, PgRole::Stopped);
    match n.poll_job(clock::now()) {
        Job::Finished { ok: false, .. } => {}
        other => panic!("the fenced job reports its failure, got {other:?}"),
    }
    // The data directory is fine: it starts and stops cleanly afterwards.
    run_job(n, JobKind::StartPrimary, None, secs(60));
    probe_until(n, secs(10), "primary", |s| s.role == PgRole::Primary);
    run_job(n, JobKind::Stop, None, secs(60));
    assert!(n.pids().unwrap().is_empty());
}

/// S1 through an operator's restart (issue 9): a fence that lands after the
/// restart's `pg_ctl stop` exited successfully, before the loop polled the job,
/// must not let the job go on to its `pg_ctl start`. Before the fix the next poll
/// saw the stop's success and started PostgreSQL again after the fence.
#[test]
fn a_fence_between_a_restarts_stop_and_start_aborts_the_start() {
    let (mut g, _c) = one_node("pg-fence-restart");
    let n = &mut g.nodes[0];
    run_job(n, JobKind::StartPrimary, None, secs(60));
    probe_until(n, secs(10), "primary", |s| s.role == PgRole::Primary);
    n.start_job(
        &JobKind::Restart {
            start_timeout: None,
        },
        None,
        clock::now(),
    )
    .unwrap();
    let stop = n.job_pid().expect("pg_ctl stop runs");
    // The stop finishes (PostgreSQL gone, pg_ctl exited), unpolled.
    let t0 = clock::now();
    while running(stop) || n.postmaster_pid().is_some() {
        assert!(
            clock::now().since(t0) < secs(30),
            "the fast stop did not end"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(n.fence(clock::now().add(secs(3))), FenceOutcome::Complete);
    match n.poll_job(clock::now()) {
        Job::Finished {
            ok: false, detail, ..
        } => {
            assert!(detail.contains("fence"), "{detail}")
        }
        other => panic!("the aborted restart reports failure, got {other:?}"),
    }
    // Long enough for a start to be up and answering.
    std::thread::sleep(secs(3));
    assert_eq!(
        n.postmaster_pid(),
        None,
        "PostgreSQL started after the fence"
    );
    assert_eq!(n.pids().unwrap(), Vec::<u32>::new());
    assert_eq!(n.poll_job(clock::now()), Job::Idle);
}

/// DESIGN §1 step 4 and §3a, issue 8 finding 7, end to end with a real PostgreSQL 15
/// and the real core: a leader's postmaster dies (SIGKILL) while a backend holds a
/// transaction and keeps running; then the agent is told to shut down. The probe
/// says Stopped. Before the fix the core released the key at once (publishing
/// `released`, so a replica would promote without delay) with the backend alive.
/// Now it fences first, and releases only once that fence is Complete, which it is
/// only after the backend is gone.
#[test]
fn clean_shutdown_releases_only_after_the_orphan_backend_is_gone() {
    use tenure::core::model::{Action, Reason};
    use tenure::core::model::{
        ClusterView, Initialize, LeaderKey, LeasePoll, Observation, Renewal, RenewalOutcome,
        SyncMode, Timing,
    };
    use tenure::core::{Core, CoreConfig};

    let (mut g, c) = one_node("pg-orphan-shutdown");
    run_job(&mut g.nodes[0], JobKind::StartPrimary, None, secs(60));
    let st = probe_until(&mut g.nodes[0], secs(10), "primary", |s| {
        s.role == PgRole::Primary
    });
    let sysid = match st.data {
        DataDir::Present { sysid, .. } => sysid,
        ref d => panic!("{d:?}"),
    };
    {
        let mut cl = client(&c);
        cl.batch_execute("CREATE TABLE t (v text)").unwrap();
    }

    // The core leads (adopted the key naming it, lease 0xA, epoch 5).
    let timing = Timing {
        ttl: 30,
        loop_wait: secs(2),
        retry_timeout: secs(1),
        safety_margin: secs(2),
        demote_budget: secs(1),
        promote_delay: None,
        maximum_lag_on_failover: 1 << 20,
        primary_start_timeout: secs(30),
        synchronous: SyncMode::Off,
        synchronous_node_count: 1,
        maximum_lag_on_syncnode: None,
    };
    let mut core = Core::new(
        CoreConfig {
            name: "f".into(),
            nofailover: false,
            watchdog: None,
            move_aside_unusable: false,
        },
        timing,
    );
    let view = ClusterView {
        revision: 10,
        leader: Some(LeaderKey {
            name: "f".into(),
            epoch: 5,
            mod_revision: 5,
            lease: 0xA,
        }),
        initialize: Some(Initialize::Done { sysid }),
        ..ClusterView::default()
    };
    let obs = |pg: PgStatus| Observation::reading(Ok(view.clone()), pg);
    let probe = |n: &mut PgCtl| n.probe(clock::now().add(secs(2)));
    let st = probe(&mut g.nodes[0]);
    // The poll of the key's lease an adoption needs first (seed 9982).
    let mut o = obs(st.clone());
    o.lease_poll = Some(LeasePoll {
        lease: 0xA,
        sent_at: clock::now(),
        ttl: Some(29),
        granted_ttl: Some(30),
        has_keys: true,
    });
    core.step(clock::now(), &o);
    let mut o = obs(st);
    o.renewal = Some(Renewal {
        lease: 0xA,
        sent_at: clock::now(),
        outcome: RenewalOutcome::Counted { ttl: 30 },
    });
    core.step(clock::now(), &o);
    assert!(core.leadership().is_some(), "leads");

    // A backend busy in a transaction: CPU-bound, it checks for interrupts but
    // not for postmaster death.
    let (tx, rx) = std::sync::mpsc::channel();
    let cb = c.clone();
    let busy = std::thread::spawn(move || {
        let mut cl = client(&cb);
        cl.batch_execute("SET statement_timeout = 60000; BEGIN; INSERT INTO t VALUES ('orphan')")
            .unwrap();
        let pid: i32 = cl.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        tx.send(pid as u32).unwrap();
        let r = cl.batch_execute("SELECT count(*) FROM generate_series(1, 2000000000)");
        let commit = cl.batch_execute("COMMIT");
        (r.is_err(), commit.is_err())
    });
    let backend = rx.recv_timeout(secs(10)).expect("busy client started");
    std::thread::sleep(Duration::from_millis(200));
    let pm = g.nodes[0].postmaster_pid().expect("runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pm as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    testbed::wait_for(secs(5), Duration::from_millis(5), || {
        g.nodes[0].postmaster_pid().is_none().then_some(())
    })
    .expect("postmaster gone");
    reap(pm);
    std::thread::sleep(Duration::from_millis(300));
    assert!(running(backend), "the busy backend survives its postmaster");
    assert!(g.nodes[0].pids().unwrap().contains(&backend));

    // SIGTERM: the agent shuts down. The probe sees no postmaster.
    let st = probe(&mut g.nodes[0]);
    assert_eq!(st.role, PgRole::Stopped);
    let mut o = obs(st);
    o.shutdown = true;
    let p = core.step(clock::now(), &o);
    assert!(
        !p.actions.iter().any(|a| matches!(
            a,
            Action::Release { .. } | Action::HandOver { .. } | Action::Exit
        )),
        "no release while backend {backend} runs: {:?} ({})",
        p.actions,
        p.reason
    );
    assert_eq!(p.actions, vec![Action::Fence], "{}", p.reason);
    assert_eq!(core.released_epoch(), None);

    // The shell carries the fence out: Complete only once the backend is gone.
    let out = g.nodes[0].fence(clock::now().add(secs(3)));
    assert_eq!(out, FenceOutcome::Complete);
    assert!(!running(backend), "Complete, so the backend is gone");
    assert!(g.nodes[0].pids().unwrap().is_empty());
    let mut o = obs(probe(&mut g.nodes[0]));
    o.shutdown = true;
    o.fence = Some(out);
    let p = core.step(clock::now(), &o);
    assert_eq!(
        p.actions,
        vec![
            // Issue 9: the clean stop's release is the hand-over with the marker.
            Action::HandOver {
                lease: 0xA,
                epoch: 5,
                candidate: None
            },
            Action::Release {
                lease: 0xA,
                epoch: 5
            },
            Action::Exit
        ],
        "{}",
        p.reason
    );
    assert!(matches!(p.reason, Reason::ShuttingDown(_)), "{}", p.reason);
    assert_eq!(core.released_epoch(), Some(5));

    let (query_failed, commit_failed) = busy.join().unwrap();
    assert!(query_failed && commit_failed, "the orphan never commits");
    run_job(&mut g.nodes[0], JobKind::StartPrimary, None, secs(60));
    probe_until(&mut g.nodes[0], secs(10), "back", |s| {
        s.role == PgRole::Primary
    });
    assert_eq!(count(&c, "orphan"), 0);
    run_job(&mut g.nodes[0], JobKind::Stop, None, secs(60));
}

/// The probe sends the epoch row's read pipelined behind its own query (issue 13
/// item 2). A read that hangs — here behind an `ACCESS EXCLUSIVE` lock another
/// session holds on `tenure.epoch` (operator DDL, `VACUUM FULL`) — must cost only
/// the epoch (`unread`, DESIGN §3: the core keeps what it knew), never the role the
/// probe's own query found: a primary reported unresponsive every other loop would
/// flap `/primary` and count towards `primary_start_timeout`. (Review of cdd6b21,
/// M1: with both answers dropped on the timeout this probe said Unresponsive.)
#[test]
fn a_hung_epoch_read_leaves_the_probe_s_role() {
    become_subreaper();
    let dir = testbed::scratch_dir("pg-epochlock").unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    nix::unistd::chown(&dir, Some(pg.uid), Some(pg.gid)).unwrap();
    let c = node_cfg(&dir, "e");
    let mut g = Guard {
        dir: dir.clone(),
        nodes: vec![PgCtl::new(&c, "e").unwrap()],
    };
    run_job(&mut g.nodes[0], JobKind::InitDb, None, secs(60));
    run_job(&mut g.nodes[0], JobKind::StartPrimary, None, secs(60));
    let n = &mut g.nodes[0];
    n.write_epoch(7, "e", Some(42), clock::now().add(secs(5)))
        .expect("epoch row written");
    // Twice: the second probe pipelines the read (the first saw the table).
    for _ in 0..2 {
        let st = n.probe(clock::now().add(secs(5)));
        assert_eq!((st.role, st.epoch), (PgRole::Primary, Some(7)));
    }
    let port = c.listen.rsplit_once(':').unwrap().1;
    let mut locker = postgres::Client::connect(
        &format!(
            "host={} port={port} user=postgres dbname=postgres",
            c.socket_dir.display()
        ),
        postgres::NoTls,
    )
    .expect("a second session");
    locker
        .batch_execute("BEGIN; LOCK TABLE tenure.epoch IN ACCESS EXCLUSIVE MODE")
        .expect("lock");
    let st = n.probe(clock::now().add(Duration::from_millis(800)));
    assert_eq!(
        st.role,
        PgRole::Primary,
        "the probe's own answer was lost with the epoch read"
    );
    assert!(st.epoch_row.unread, "a hung read is unknown, not absent");
    locker.batch_execute("COMMIT").expect("unlock");
    let st = n.probe(clock::now().add(secs(5)));
    assert_eq!((st.role, st.epoch), (PgRole::Primary, Some(7)));
}

/// PostgreSQL 15's own parser on the cluster-wide settings (`pg::paramcheck`), as
/// a file of them is read at a start: every refused one found, each with
/// PostgreSQL's words (unknown names first, then the values), the accepted ones
/// kept, also beside settings that would hide PostgreSQL's reports (judged
/// alone); a library that is not installed refused; a program that is not there,
/// or a deadline already past, is no answer rather than a verdict.
#[test]
fn real_postgres_judges_the_cluster_wide_settings() {
    let dir = std::env::temp_dir().join(format!("tenure-paramcheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut c = tenure::pg::paramcheck::Checker::new(&dir);
    let p = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let render = |l: &[&(String, String)]| tenure::pg::conf::params_conf(l.iter().copied());
    let deadline = clock::now().add(secs(10));
    let bin = Path::new(BIN);
    let good = p(&[
        ("work_mem", "8MB"),
        ("max_connections", "200"),
        ("timezone", "Europe/Paris"),
        ("pg_stat_statements.track", "all"),
        ("log_line_prefix", "%m [%p] 'q' \\"),
        ("shared_preload_libraries", "pg_stat_statements"),
    ]);
    assert_eq!(c.check(bin, &good, render, deadline), Ok(vec![]));
    let mixed = p(&[
        // Valid, and would hide every LOG line of the others: judged alone
        // (first here, as in the sorted list a key gives).
        ("log_min_messages", "panic"),
        ("enable_seqscan", "maybe"),
        ("shared_buffers", "1"),
        ("sort_mem", "banana"),
        ("timezone", "Mars/Olympus"),
        ("work_mem", "8MB"),
        ("wibble", "1"),
        ("session_preload_libraries", "auto_explain, pg_nothere"),
        ("lc_messages", "C"),
    ]);
    let refused = c.check(bin, &mixed, render, deadline).expect("an answer");
    let names: Vec<&str> = refused.iter().map(|r| r.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "enable_seqscan",
            "session_preload_libraries",
            "shared_buffers",
            "sort_mem",
            "timezone",
            "wibble"
        ],
        "{refused:?}"
    );
    let why = |n: &str| &refused.iter().find(|r| r.name == n).unwrap().why;
    assert!(why("enable_seqscan").contains("requires a Boolean value"));
    assert!(why("shared_buffers").contains("outside the valid range"));
    assert!(
        why("sort_mem").contains("\"banana\""),
        "{}",
        why("sort_mem")
    );
    assert!(why("timezone").contains("\"Mars/Olympus\""));
    assert!(why("wibble").contains("unrecognized configuration parameter"));
    assert!(why("session_preload_libraries").contains("\"pg_nothere\" is not installed"));
    assert!(
        c.check(Path::new("/nonexistent"), &good, render, deadline)
            .unwrap_err()
            .contains("/nonexistent/postgres")
    );
    assert!(
        c.check(bin, &good, render, clock::now()).is_err(),
        "no time left"
    );
    std::fs::remove_dir_all(&dir).expect("remove scratch dir");
}
