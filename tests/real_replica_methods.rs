//! Building replicas from a backup (`[postgresql] create_replica_methods`) against
//! real etcd, PostgreSQL 15 and pgBackRest (Debian's `pgbackrest`, a real backup
//! tool with a local repository on the test's scratch directory).
//!
//! What is asserted is behaviour: which method built the replica (the agent's
//! job report, and the copy's own backup label), that it streams from the leader
//! with the rows written after the backup, that a restore asking for a recovery
//! target and a promotion builds a replica that never promoted, and that a method
//! which fails or builds a copy of another cluster gives way to the next one
//! without leaving anything behind; and that `pg_basebackup` reads from a replica
//! tagged `clonefrom`, not from the primary.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

const PGBACKREST: &str = "/usr/bin/pgbackrest";
const STANZA: &str = "main";

/// The pgBackRest repository and its config, owned by the PostgreSQL user,
/// removed when the test ends.
struct Repo {
    dir: PathBuf,
    conf: PathBuf,
}

impl Repo {
    fn new(tag: &str) -> Repo {
        let dir = PathBuf::from(format!("/dev/shm/tenure-pgbr-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for d in ["repo", "log", "lock", "spool"] {
            fs::create_dir_all(dir.join(d)).expect("make the repository directories");
        }
        let conf = dir.join("pgbackrest.conf");
        fs::write(
            &conf,
            format!(
                "[global]\nrepo1-path={d}/repo\nlog-path={d}/log\nlock-path={d}/lock\n\
                 spool-path={d}/spool\nlog-level-console=warn\nlog-level-file=off\n\
                 start-fast=y\narchive-timeout=30\n\n[{STANZA}]\n",
                d = dir.display()
            ),
        )
        .expect("write pgbackrest.conf");
        fs::set_permissions(&conf, fs::Permissions::from_mode(0o644)).expect("chmod");
        let st = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .expect("chown");
        assert!(st.success(), "chown the repository to postgres");
        Repo { dir, conf }
    }

    /// Every node archives into the repository while it is the primary, naming its
    /// own data directory (pgBackRest checks the cluster there): the bed's
    /// `section_extra` for it.
    fn archiving(&self) -> (String, String) {
        (
            "[postgresql.parameters]".into(),
            format!(
                "archive_mode = \"on\"\narchive_command = \"{PGBACKREST} --config={} \
                 --stanza={STANZA} --pg1-path={{dir}}/data archive-push %p\"",
                self.conf.display()
            ),
        )
    }

    /// `pgbackrest --config=... --stanza=main <args>` as the PostgreSQL user.
    fn run(&self, args: &[String]) -> Result<String, String> {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--", PGBACKREST])
            .arg(format!("--config={}", self.conf.display()))
            .arg(format!("--stanza={STANZA}"))
            .args(args)
            .output()
            .map_err(|e| format!("run pgbackrest: {e}"))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!("pgbackrest {args:?}: {}: {text}", out.status))
        }
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// pgBackRest's options naming node `i`'s PostgreSQL (a backup reads its files and
/// talks to it over its socket).
fn pg1(c: &TestCluster, i: usize) -> Vec<String> {
    vec![
        format!("--pg1-path={}", c.data_dir(i).display()),
        format!("--pg1-port={}", c.pg_port(i)),
        format!("--pg1-socket-path={}", c.spec(i).socket_dir.display()),
        "--pg1-user=postgres".into(),
    ]
}

/// Where node `i` builds a replica's copy (`<data_dir>.basebackup-tmp`).
fn build_dir(c: &TestCluster, i: usize) -> PathBuf {
    let d = c.data_dir(i);
    let mut name = d.file_name().unwrap().to_os_string();
    name.push(".basebackup-tmp");
    d.with_file_name(name)
}

/// Node `i`'s config file as the bed wrote it, with `methods` as its
/// `create_replica_methods` and `tables` appended.
fn with_methods(base: &str, methods: &str, tables: &str) -> String {
    assert!(
        base.contains("\n[postgresql]\n"),
        "no [postgresql] table:\n{base}"
    );
    let mut s = base.replacen(
        "\n[postgresql]\n",
        &format!("\n[postgresql]\ncreate_replica_methods = {methods}\n"),
        1,
    );
    s.push('\n');
    s.push_str(tables);
    s
}

/// Crash node `i` (its agent and PostgreSQL, by pid), remove its data directory
/// (the test's own scratch copy), write `config` and start its agent again: it
/// finds no data and builds a replica.
fn rebuild_with(c: &mut TestCluster, i: usize, config: &str) {
    c.host_crash(i)
        .unwrap_or_else(|e| panic!("crash of {}: {e}", c.name(i)));
    fs::remove_dir_all(c.data_dir(i)).expect("remove the node's data directory");
    fs::write(c.config_path(i), config).expect("write the node's config");
    c.start_agent(i)
        .unwrap_or_else(|e| panic!("start agent {}: {e}", c.name(i)));
}

/// Wait until node `i` streams with `rows` rows; the logs on failure.
fn wait_streaming_with(c: &TestCluster, i: usize, rows: i64) {
    let ok = wait_for(REJOIN, Duration::from_millis(200), || {
        (c.is_streaming_replica(i) && c.count_rows(i) == Ok(rows)).then_some(())
    });
    assert!(
        ok.is_some(),
        "{} is not a streaming replica with {rows} rows (has {:?}){}",
        c.name(i),
        c.count_rows(i),
        c.logs_tail(40)
    );
}

fn server_log(c: &TestCluster, i: usize) -> String {
    let d = c.data_dir(i);
    let mut name = d.file_name().unwrap().to_os_string();
    name.push(".log");
    fs::read_to_string(d.with_file_name(name)).unwrap_or_default()
}

fn timeline(c: &TestCluster, i: usize) -> String {
    c.sql_one(i, "SELECT timeline_id::text FROM pg_control_checkpoint()")
        .unwrap_or_else(|e| panic!("timeline of {}: {e}", c.name(i)))
}

#[test]
fn real_replicas_are_built_from_a_pgbackrest_backup_and_methods_fall_back_in_order() {
    let repo = Repo::new("methods");
    let mut opts = options("replmeth", "methods");
    opts.start_agents = false;
    opts.section_extra = vec![repo.archiving()];
    // Every node is tagged clonefrom: a new replica's pg_basebackup reads from a
    // streaming replica, not from the primary (stage 3).
    opts.extra_config = "[tags]\nclonefrom = true\n".into();
    let mut c = start(opts);
    let base3 = fs::read_to_string(c.config_path(2)).expect("read n3's config");
    for i in 0..2 {
        c.start_agent(i).expect("start agent");
    }
    let p = c
        .wait_primary(BOOT)
        .unwrap_or_else(|| panic!("no primary{}", c.logs_tail(30)));
    c.wait_replicas(p, &[2], BOOT)
        .unwrap_or_else(|e| panic!("{e}"));

    // --- The backup, then rows it does not hold ---
    let mut rows = 0;
    for _ in 0..20 {
        rows += 1;
        c.write_row(p, rows).expect("write");
    }
    repo.run(&[pg1(&c, p), vec!["stanza-create".into()]].concat())
        .unwrap_or_else(|e| panic!("{e}"));
    repo.run(&[pg1(&c, p), vec!["--type=full".into(), "backup".into()]].concat())
        .unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..30 {
        rows += 1;
        c.write_row(p, rows).expect("write");
    }

    // --- 1. n3 is built by pgBackRest, not by pg_basebackup ---
    let tmp3 = build_dir(&c, 2);
    let pgbackrest_table = |extra: &str| {
        format!(
            "[postgresql.pgbackrest]\ncommand = \"{PGBACKREST} --config={} --stanza={STANZA} {extra} restore\"\n\
             no_params = true\n\"pg1-path\" = \"{}\"\n",
            repo.conf.display(),
            tmp3.display()
        )
    };
    fs::write(
        c.config_path(2),
        with_methods(
            &base3,
            "[\"pgbackrest\", \"basebackup\"]",
            &pgbackrest_table("--type=standby"),
        ),
    )
    .expect("write n3's config");
    c.start_agent(2).expect("start n3");
    wait_streaming_with(&c, 2, rows);
    let log3 = c.agent_log(2);
    assert!(
        log3.contains("built by replica method pgbackrest"),
        "n3's job report does not name pgbackrest{}",
        c.logs_tail(40)
    );
    assert!(
        !log3.contains("trying replica method basebackup"),
        "n3 fell back to pg_basebackup{}",
        c.logs_tail(40)
    );
    // The copy's own record: pgBackRest's backup label, not pg_basebackup's.
    let label = fs::read_to_string(c.data_dir(2).join("backup_label.old"))
        .expect("n3 started from a backup label");
    assert!(
        !label.contains("pg_basebackup"),
        "n3's data came from pg_basebackup:\n{label}"
    );
    assert!(!tmp3.exists(), "the build directory was left behind");
    // The restore_command pgBackRest wrote is kept.
    let auto = fs::read_to_string(c.data_dir(2).join("postgresql.auto.conf")).unwrap();
    assert!(auto.contains("restore_command"), "{auto}");
    rows += 1;
    c.write_row(p, rows).expect("write");
    wait_streaming_with(&c, 2, rows);

    // --- 2. A restore that asks to stop at a target and promote builds a replica
    //        that never promotes: its recovery target is commented out. ---
    rebuild_with(
        &mut c,
        2,
        &with_methods(
            &base3,
            "[\"pgbackrest\"]",
            &pgbackrest_table("--type=immediate --target-action=promote"),
        ),
    );
    wait_streaming_with(&c, 2, rows);
    let log3 = c.agent_log(2);
    assert_eq!(
        timeline(&c, 2),
        timeline(&c, p),
        "n3 is on another timeline than the leader: it promoted"
    );
    let slog = server_log(&c, 2);
    assert!(
        !slog.contains("selected new timeline ID") && !slog.contains("archive recovery complete"),
        "n3's PostgreSQL ended recovery:\n{slog}"
    );
    assert!(
        !log3.contains("local primary while"),
        "n3 ran as a primary{}",
        c.logs_tail(40)
    );
    assert_eq!(c.primaries(), vec![p], "one primary");
    // Behaviour first (above); then what the agent said it did.
    let said = log3
        .lines()
        .find(|l| l.contains("commented out in the copy's postgresql.auto.conf:"))
        .unwrap_or_else(|| panic!("n3's copy was not sanitized{}", c.logs_tail(40)));
    for name in ["recovery_target,", "recovery_target_action"] {
        assert!(said.contains(name), "{name} was not commented out: {said}");
    }

    // --- 3. Methods fall back in order: one that fails, one that builds a copy of
    //        another cluster (a fresh initdb), then pg_basebackup. ---
    let tables = format!(
        "[postgresql.broken]\ncommand = \"/bin/false\"\n\n\
         [postgresql.slow]\ncommand = \"/bin/sleep 3\"\nno_params = true\n\n\
         [postgresql.foreign]\ncommand = \"/usr/lib/postgresql/15/bin/initdb\"\n\
         no_params = true\npgdata = \"{}\"\n",
        tmp3.display()
    );
    rebuild_with(
        &mut c,
        2,
        &with_methods(
            &base3,
            "[\"broken\", \"slow\", \"foreign\", \"basebackup\"]",
            &tables,
        ),
    );
    // While a method runs, the member key says so (Patroni's state).
    let building = wait_for(Duration::from_secs(30), Duration::from_millis(50), || {
        c.member("pg3")
            .filter(|m| m["state"] == "creating replica")
            .map(|_| ())
    });
    assert!(
        building.is_some(),
        "n3's member key never said \"creating replica\": {:?}",
        c.member("pg3")
    );
    let running = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        (metric_opt(&c, 2, "tenure_replica_build_running") == Some(1.0)).then_some(())
    });
    assert!(running.is_some(), "tenure_replica_build_running never 1");
    wait_streaming_with(&c, 2, rows);
    let log3 = c.agent_log(2);
    for want in [
        "replica method broken: /bin/false failed (exit status: 1)",
        "trying replica method slow",
        "replica method slow: check the copy: refused:",
        "the method built nothing there",
        "trying replica method foreign",
        "the copy is of another cluster: system identifier",
        "trying replica method basebackup",
        "built by replica method basebackup",
    ] {
        assert!(
            log3.contains(want),
            "n3's log lacks {want:?}{}",
            c.logs_tail(60)
        );
    }
    assert_eq!(
        c.system_identifier(2).unwrap(),
        c.system_identifier(p).unwrap(),
        "n3 runs another cluster"
    );
    // Built from the other replica (clonefrom), not from the primary: the
    // label says the backup was taken on a standby.
    let label = fs::read_to_string(c.data_dir(2).join("backup_label.old")).unwrap();
    assert!(label.contains("pg_basebackup"), "{label}");
    assert!(label.contains("BACKUP FROM: standby"), "{label}");
    // The build counted once, as a success (the failed methods were its own
    // fallbacks), and no build runs any more.
    assert_eq!(metric(&c, 2, "tenure_replica_builds_total"), 1.0);
    assert_eq!(metric(&c, 2, "tenure_replica_build_running"), 0.0);
    let (_, body) = c.api_body(2, "/metrics").expect("/metrics");
    assert!(
        body.lines()
            .any(|l| l.starts_with("tenure_replica_builds_total{")
                && l.contains("outcome=\"failed\"")
                && l.ends_with(" 0")),
        "{body}"
    );
    let other = 1 - p;
    assert!(
        log3.contains(&format!(
            "cloning {}, a replica tagged clonefrom",
            c.name(other)
        )),
        "n3 did not clone {}{}",
        c.name(other),
        c.logs_tail(40)
    );
    assert!(!tmp3.exists(), "the build directory was left behind");
    let aside = fs::read_dir(c.data_dir(2).parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("data.aside"))
        .count();
    assert_eq!(aside, 0, "nothing is moved aside");
    one_primary_at_the_end(&c, p);
}

/// The disaster-recovery path the README's "Restoring a cluster from a backup"
/// describes: a cluster is lost; one host of a new cluster (its own etcd, a new
/// scope) gets the data from the pgBackRest repository as a standby
/// (`--type=standby`: it replays the archive), and its agent starts on it. It
/// records `initialize` from that data with the rollback marker, so it does not
/// promote until the operator says the data is the one to keep (`tenure
/// confirm-epoch`); then it leads with every archived row, and an empty host
/// joins as its replica.
///
/// A third, empty host started well ahead of the others wins the bootstrap race
/// and runs initdb; its `post_bootstrap` (a sleep) is still running when the
/// restored host's member key shows its data, so it gives the bootstrap up: the
/// lock goes back, nothing is recorded, its new directory is held. Emptied by
/// the operator, it builds a replica of the restored cluster.
#[test]
fn real_a_cluster_restored_from_a_pgbackrest_backup_leads_after_confirm_epoch() {
    let repo = Repo::new("restore");
    let rows = 40;
    let sysid;
    let passwords;
    {
        // The cluster that is lost: it archives into the repository and is
        // backed up; then it writes rows only the archive has.
        let mut opts = options("restore", "lost");
        opts.nodes = 2;
        opts.section_extra = vec![repo.archiving()];
        let mut c = start(opts);
        let p = settled(&mut c);
        for n in 1..=rows / 2 {
            c.write_row(p, n).expect("write");
        }
        repo.run(&[pg1(&c, p), vec!["stanza-create".into()]].concat())
            .unwrap_or_else(|e| panic!("{e}"));
        repo.run(&[pg1(&c, p), vec!["--type=full".into(), "backup".into()]].concat())
            .unwrap_or_else(|e| panic!("{e}"));
        for n in rows / 2 + 1..=rows {
            c.write_row(p, n).expect("write");
        }
        // `check` switches the WAL segment and waits until it is archived.
        repo.run(&[pg1(&c, p), vec!["check".into()]].concat())
            .unwrap_or_else(|e| panic!("{e}"));
        sysid = c.system_identifier(p).expect("system identifier");
        passwords = c.passwords.clone();
        // Dropped here: the lost cluster, etcd and all, is gone.
    }

    let mut opts = options("restore", "new");
    opts.nodes = 3;
    opts.start_agents = false;
    // The restored roles are the lost cluster's: so are the passwords.
    opts.passwords = Some(passwords);
    // Only the host that bootstraps runs it: the early empty one.
    let slow =
        std::env::temp_dir().join(format!("tenure-slow-bootstrap-{}.sh", std::process::id()));
    fs::write(&slow, "#!/bin/sh\nsleep 8\n").expect("write the post_bootstrap script");
    fs::set_permissions(&slow, fs::Permissions::from_mode(0o755)).expect("chmod");
    opts.extra_config = format!("[bootstrap]\npost_bootstrap = \"{}\"\n", slow.display());
    let mut c = start(opts);
    let data = c.data_dir(0).to_path_buf();
    fs::create_dir(&data).expect("make the data directory");
    fs::set_permissions(&data, fs::Permissions::from_mode(0o700)).expect("chmod");
    let st = Command::new("chown")
        .arg("postgres:postgres")
        .arg(&data)
        .status()
        .expect("chown");
    assert!(st.success());
    repo.run(&[
        format!("--pg1-path={}", data.display()),
        "--type=standby".into(),
        "restore".into(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    // The early empty host: it wins the race and bootstraps.
    c.start_agent(2).expect("start agent");
    let bootstrapping = wait_for(BOOT, Duration::from_millis(50), || {
        c.agent_log(2)
            .contains("won the initialize lock")
            .then_some(())
    });
    assert!(
        bootstrapping.is_some(),
        "{} never bootstrapped{}",
        c.name(2),
        c.logs_tail(30)
    );
    // The others started at once, the empty one first: it must not win the
    // bootstrap race and initdb a new, empty cluster over which the restored data
    // is refused (its system identifier not the cluster's; seen in a full run
    // before the bootstrap grace, and every time with the grace taken out).
    c.start_agent(1).expect("start agent");
    c.start_agent(0).expect("start agent");
    let recorded = wait_for(BOOT, Duration::from_millis(100), || {
        c.get_key("initialize").filter(|v| !v.is_empty())
    });
    let _ = fs::remove_file(&slow);
    assert_eq!(
        recorded.as_deref(),
        Some(sysid.as_str()),
        "initialize is not the restored data's system identifier{}",
        c.logs_tail(40)
    );
    // The early host gave its bootstrap up and holds its new directory.
    let gave_up = wait_for(BOOT, Duration::from_millis(100), || {
        c.agent_log(2)
            .contains("gave the bootstrap up after initdb")
            .then_some(())
    });
    assert!(
        gave_up.is_some(),
        "{} did not give its bootstrap up{}",
        c.name(2),
        c.logs_tail(30)
    );
    let mark = c.data_dir(2).with_file_name("data.building");
    assert!(
        fs::read_to_string(&mark).is_ok_and(|m| m.contains("gave the cluster up")),
        "{} is not held",
        c.data_dir(2).display()
    );

    // It replays the archive as a standby, records initialize with the marker,
    // and refuses to lead until confirmed.
    let replayed = wait_for(BOOT, Duration::from_millis(200), || {
        (c.count_rows(0) == Ok(rows)).then_some(())
    });
    assert!(
        replayed.is_some(),
        "the restored standby has {:?} rows, not {rows}{}",
        c.count_rows(0),
        c.logs_tail(40)
    );
    let refusing = wait_for(FAILOVER, Duration::from_millis(200), || {
        c.agent_log(0)
            .lines()
            .any(|l| l.contains("refusing") && l.contains("tenure confirm-epoch"))
            .then_some(())
    });
    assert!(
        refusing.is_some(),
        "the restored node never refused naming confirm-epoch{}",
        c.logs_tail(40)
    );
    assert!(c.primaries().is_empty(), "a primary before confirmation");
    assert_eq!(c.system_identifier(0).as_deref(), Ok(sysid.as_str()));

    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("confirm-epoch")
        .arg("--config")
        .arg(c.config_path(0))
        .arg("--by")
        .arg("real_replica_methods")
        .output()
        .expect("run tenure confirm-epoch");
    assert!(
        out.status.success(),
        "tenure confirm-epoch: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let q = c
        .wait_primary(FAILOVER)
        .unwrap_or_else(|| panic!("no primary after confirmation{}", c.logs_tail(40)));
    assert_eq!(q, 0, "the restored node leads");
    c.wait_replicas(q, &[2], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.count_rows(q), Ok(rows));
    c.write_row(q, rows + 1).expect("write after the restore");
    wait_streaming_with(&c, 1, rows + 1);
    assert_eq!(c.system_identifier(1).as_deref(), Ok(sysid.as_str()));
    // Still held, then emptied by the operator: it builds a replica.
    assert!(
        !c.is_streaming_replica(2),
        "{} streams from a held directory",
        c.name(2)
    );
    fs::remove_dir_all(c.data_dir(2)).expect("empty the held directory");
    fs::remove_file(&mark).expect("remove the mark");
    c.wait_replicas(q, &[], REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));
    wait_streaming_with(&c, 2, rows + 1);
    assert_eq!(c.system_identifier(2).as_deref(), Ok(sysid.as_str()));
    one_primary_at_the_end(&c, q);
}
