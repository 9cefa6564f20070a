//! `tenure ctl` against a running three-node cluster (issue 9): what `list`,
//! `topology`, `history`, `show-config` and `version` print with `--json` is what
//! the cluster is — the leader in `list` is the node whose `/primary` answers 200,
//! the lag numbers are those the member keys and the `status` key give, the
//! config is the `config` key, the versions come from every member's API. A
//! second, crafted scope in the same etcd (no agent runs there) shows the
//! history and garbled keys as stored. The refusals that must send nothing
//! (an unknown member, a switchover not confirmed) leave the leader key as it was.
//! A failover right after the leader's host crashed goes through the candidate's
//! API, and the candidate still waits for the old lease (S3).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::etcdkv;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// `tenure ctl --config FILE ARGS...` started, its stdout and stderr piped to us
/// (ours to wait for, or to stop by its pid).
fn ctl_child(config: &Path, args: &[&str], stdin: Stdio) -> std::process::Child {
    ctl_child_env(config, args, stdin, &[])
}

/// [`ctl_child`] with `env` set for it (`EDITOR`).
fn ctl_child_env(
    config: &Path,
    args: &[&str],
    stdin: Stdio,
    env: &[(&str, &Path)],
) -> std::process::Child {
    Command::new(BIN)
        .arg("ctl")
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("VISUAL")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure ctl")
}

/// `tenure ctl --config FILE ARGS...` with `stdin` fed to it.
fn ctl_in(config: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = ctl_child(config, args, Stdio::piped());
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin.as_bytes());
    }
    child.wait_with_output().expect("tenure ctl output")
}

fn ctl(config: &Path, args: &[&str]) -> Output {
    ctl_in(config, args, "")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Run ctl and parse its stdout as JSON; exit 0 required.
fn ctl_json(config: &Path, args: &[&str]) -> Value {
    let o = ctl(config, args);
    assert_eq!(o.status.code(), Some(0), "{:?}: {}", args, text(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", text(&o)))
}

/// Every member key (parsed) and the `status` optime, as stored.
fn keys(c: &TestCluster) -> (Vec<(String, Value)>, Option<u64>) {
    let mut members: Vec<(String, Value)> = c
        .get_prefix("members/")
        .expect("members")
        .into_iter()
        .map(|kv| {
            let name = kv.key.rsplit('/').next().unwrap_or("").to_string();
            (name, serde_json::from_str(&kv.value).unwrap_or(Value::Null))
        })
        .collect();
    members.sort_by(|a, b| a.0.cmp(&b.0));
    let optime = c
        .get_key("status")
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .and_then(|v| v["optime"].as_u64());
    (members, optime)
}

#[test]
fn real_ctl_reads_the_running_cluster() {
    let mut c = common::bed("ctl", "read");
    let p = common::settled(&mut c);
    let leader = c.name(p).to_string();
    let cfg = c.config_path(0).to_path_buf();
    let (key_name, epoch) = c.leader_key().expect("leader key");
    assert_eq!(key_name, leader);

    // Every replica has published a position and the leader its optime.
    let ready =
        tenure::testbed::wait_for(Duration::from_secs(30), Duration::from_millis(200), || {
            let (m, optime) = keys(&c);
            (m.len() == 3
                && optime.is_some()
                && m.iter()
                    .all(|(_, v)| v["xlog_location"].as_u64().unwrap_or(0) > 0))
            .then_some(())
        });
    assert!(
        ready.is_some(),
        "member positions and status never published{}",
        c.logs_tail(30)
    );

    // list --json: the keys before and after agree, so the comparison is exact.
    let mut compared = false;
    for _ in 0..20 {
        let before = keys(&c);
        let list = ctl_json(&cfg, &["list", "--json"]);
        let after = keys(&c);
        if before != after {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let (members, optime) = before;
        println!("tenure ctl list --json: {list}");
        let primaries = c.primaries();
        assert_eq!(primaries, vec![p], "one primary");
        assert_eq!(list["scope"], c.opts.scope.as_str());
        assert_eq!(list["leader"], leader.as_str(), "{list}");
        assert_eq!(list["epoch"], epoch, "{list}");
        assert_eq!(list["paused"], false);
        let ttl = list["lease_ttl_left"].as_i64().expect("lease left");
        assert!(ttl > 0 && ttl <= i64::from(c.opts.ttl) + 1, "{list}");
        let rows = list["members"].as_array().expect("members");
        assert_eq!(rows.len(), 3, "{list}");
        let marked: Vec<&str> = rows
            .iter()
            .filter(|r| r["leader"] == true)
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(
            marked,
            vec![leader.as_str()],
            "the leader is the node /primary names"
        );
        let leader_xlog = members
            .iter()
            .find(|(n, _)| *n == leader)
            .and_then(|(_, v)| v["xlog_location"].as_u64())
            .expect("leader xlog");
        let reference = optime.unwrap_or(0).max(leader_xlog);
        for (name, v) in &members {
            let row = rows
                .iter()
                .find(|r| r["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{name} missing from {list}"));
            assert_eq!(row["epoch"], v["epoch"], "{name}");
            assert_eq!(row["timeline"], v["timeline"], "{name}");
            assert_eq!(row["state"], v["state"], "{name}");
            let xlog = v["xlog_location"].as_u64().expect("xlog");
            assert_eq!(row["xlog_location"], xlog, "{name}");
            if *name == leader {
                assert_eq!(row["role"], "Leader");
                assert_eq!(row["lag_bytes"], 0);
                assert_eq!(row["lease_ttl_left"], ttl);
            } else {
                assert_eq!(row["role"], "Replica", "{name}");
                assert_eq!(row["lag_bytes"], reference.saturating_sub(xlog), "{name}");
                assert_eq!(row["lease_ttl_left"], Value::Null);
            }
        }
        compared = true;
        break;
    }
    assert!(compared, "the member keys never held still for a read");

    // list --watch (patronictl's -w): the cluster read again and again until
    // interrupted; with --json one document a line. Ours to stop, by its pid.
    let mut watch = ctl_child(&cfg, &["list", "--json", "--watch", "0.3"], Stdio::null());
    std::thread::sleep(Duration::from_secs(2));
    let _ = watch.kill();
    let o = watch.wait_with_output().expect("list --watch output");
    let docs: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(docs.len() >= 3, "{} reads in 2 s: {}", docs.len(), text(&o));
    for d in &docs {
        assert_eq!(d["leader"], leader.as_str(), "{d}");
        assert_eq!(d["members"].as_array().map(Vec::len), Some(3), "{d}");
    }
    // A reader that goes away (`| head -1`) ends the watch cleanly: exit 0,
    // no panic on the broken pipe.
    let mut watch = ctl_child(&cfg, &["list", "--json", "--watch", "0.2"], Stdio::null());
    {
        use std::io::BufRead as _;
        let mut first = String::new();
        let mut r = std::io::BufReader::new(watch.stdout.take().expect("stdout"));
        r.read_line(&mut first).expect("a first document");
        assert!(first.contains("\"leader\""), "{first}");
    }
    let ended =
        tenure::testbed::wait_for(Duration::from_secs(5), Duration::from_millis(50), || {
            watch.try_wait().ok().flatten()
        });
    if ended.is_none() {
        let _ = watch.kill();
    }
    let o = watch.wait_with_output().expect("list --watch output");
    assert_eq!(
        ended.and_then(|s| s.code()),
        Some(0),
        "the watch did not end cleanly once its reader went away: {}",
        text(&o)
    );

    // dsn (patronictl's): the leader's address by default, a running replica's,
    // a named member's; an unknown member is a failure.
    let index = |name: &str| (0..3).find(|&i| c.name(i) == name).expect("a member");
    let li = index(&leader);
    let o = ctl(&cfg, &["dsn"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("host={} port={}", c.addr(li), c.pg_port(li)),
        "{}",
        text(&o)
    );
    let d = ctl_json(&cfg, &["dsn", "--role", "replica", "--json"]);
    let name = d["member"].as_str().expect("member").to_string();
    assert_ne!(name, leader, "{d}");
    let ri = index(&name);
    assert_eq!(d["port"], c.pg_port(ri), "{d}");
    assert_eq!(
        d["dsn"],
        format!("host={} port={}", c.addr(ri), c.pg_port(ri)),
        "{d}"
    );
    let o = ctl(&cfg, &["dsn", c.name(ri)]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("port={}", c.pg_port(ri))),
        "{}",
        text(&o)
    );
    let o = ctl(&cfg, &["dsn", "nosuch"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("\"nosuch\""),
        "{}",
        text(&o)
    );

    // The table, as an operator sees it (the README's example is one of these).
    let o = ctl(&cfg, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    println!("tenure ctl list:\n{table}");
    let leader_line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {leader} ")))
        .unwrap_or_else(|| panic!("no row for {leader}:\n{table}"));
    assert!(leader_line.contains("| Leader "), "{table}");
    assert!(
        table.starts_with(&format!("+ Cluster: {} (", c.opts.scope)),
        "{table}"
    );

    // topology: the leader at the root, the two others under it.
    let topo = ctl_json(&cfg, &["topology", "--json"]);
    assert_eq!(topo["topology"].as_array().map(Vec::len), Some(1), "{topo}");
    assert_eq!(topo["topology"][0]["name"], leader.as_str());
    let mut reps: Vec<String> = topo["topology"][0]["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    reps.sort();
    let mut others: Vec<String> = (0..3)
        .filter(|&i| i != p)
        .map(|i| c.name(i).to_string())
        .collect();
    others.sort();
    assert_eq!(reps, others);

    // show-config: the config key.
    let shown = ctl_json(&cfg, &["show-config", "--json"]);
    let stored: Value =
        serde_json::from_str(&c.get_key("config").expect("config key")).expect("JSON");
    assert_eq!(shown, stored);
    assert_eq!(shown["ttl"], c.opts.ttl);

    // version: ours, and every member's from its API.
    let v = ctl_json(&cfg, &["version", "--json"]);
    assert_eq!(v["ctl"], env!("CARGO_PKG_VERSION"));
    let vm = v["members"].as_array().expect("members");
    assert_eq!(vm.len(), 3, "{v}");
    for m in vm {
        assert_eq!(m["error"], Value::Null, "{v}");
        assert_eq!(m["version"], env!("CARGO_PKG_VERSION"), "{v}");
        let pg = m["server_version"].as_u64().expect("server_version");
        assert!((150_000..160_000).contains(&pg), "{v}");
    }

    // Refusals that must send nothing: an unknown candidate, the leader as the
    // candidate, a switchover not confirmed. The leader key stays as it was.
    let o = ctl(&cfg, &["failover", "--candidate", "nosuch", "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown member \"nosuch\""),
        "{}",
        text(&o)
    );
    let o = ctl(&cfg, &["failover", "--candidate", &leader, "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already the leader"),
        "{}",
        text(&o)
    );
    let o = ctl_in(&cfg, &["switchover", "--candidate", &others[0]], "n\n");
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Are you sure"),
        "{}",
        text(&o)
    );
    let o = ctl(&cfg, &["switchover", "--leader", &others[0], "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not the leader"),
        "{}",
        text(&o)
    );
    assert_eq!(
        c.leader_key(),
        Some((leader.clone(), epoch)),
        "nothing was sent"
    );

    // edit-config: a ttl that breaks S6 is refused before anything is sent.
    let o = ctl(&cfg, &["edit-config", "--set", "ttl=1", "--force"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ttl"),
        "{}",
        text(&o)
    );
    let after: Value =
        serde_json::from_str(&c.get_key("config").expect("config key")).expect("JSON");
    assert_eq!(after, stored, "the config key is unchanged");

    // pause --wait / resume --wait (PATCH /config on the leader, then every
    // member's status polled): the key and every agent's status show it, and the
    // resume changes leadership in no way.
    let o = ctl(&cfg, &["pause", "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let conf: Value =
        serde_json::from_str(&c.get_key("config").expect("config key")).expect("JSON");
    assert_eq!(conf["pause"], true, "{conf}");
    for i in 0..3 {
        let (code, body) = c.api_body(i, "/patroni").expect("status");
        assert_eq!(code, 200);
        let v: Value = serde_json::from_str(&body).expect("status JSON");
        assert_eq!(v["pause"], true, "{}: {v}", c.name(i));
    }
    let list = ctl_json(&cfg, &["list", "--json"]);
    assert_eq!(list["paused"], true, "{list}");
    let o = ctl(&cfg, &["resume", "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let conf: Value =
        serde_json::from_str(&c.get_key("config").expect("config key")).expect("JSON");
    assert!(conf.get("pause").is_none_or(|v| v != true), "{conf}");
    for i in 0..3 {
        let (_, body) = c.api_body(i, "/patroni").expect("status");
        let v: Value = serde_json::from_str(&body).expect("status JSON");
        assert_ne!(v["pause"], true, "{}: {v}", c.name(i));
    }
    // A good edit goes through the leader's API and is stored.
    let o = ctl(
        &cfg,
        &[
            "edit-config",
            "--set",
            "maximum_lag_on_failover=2097152",
            "--force",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let conf: Value =
        serde_json::from_str(&c.get_key("config").expect("config key")).expect("JSON");
    assert_eq!(conf["maximum_lag_on_failover"], 2_097_152, "{conf}");
    assert_eq!(
        c.leader_key(),
        Some((leader.clone(), epoch)),
        "pause, resume and an edit changed no leadership"
    );

    scheduled_and_flushed(&c, &cfg, &leader, &others[0]);
    assert_eq!(
        c.leader_key(),
        Some((leader.clone(), epoch)),
        "scheduling and cancelling changed no leadership"
    );

    crafted_scope(&c, &cfg);
    removed_scope(&c, &cfg);
}

/// `restart --scheduled`, `switchover --scheduled`: `list` shows what is
/// scheduled, and `flush` cancels it through the members' APIs.
fn scheduled_and_flushed(c: &TestCluster, cfg: &Path, leader: &str, replica: &str) {
    let at = tenure::clock::rfc3339_utc(tenure::clock::realtime() + Duration::from_secs(3600));
    let row = |list: &Value, name: &str| -> Value {
        list["members"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no row for {name}: {list}"))
    };

    // A restart an hour from now, on one member.
    let o = ctl(cfg, &["restart", replica, "--scheduled", &at, "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("restart scheduled on member"),
        "{}",
        text(&o)
    );
    let shown =
        tenure::testbed::wait_for(Duration::from_secs(15), Duration::from_millis(200), || {
            let list = ctl_json(cfg, &["list", "--json"]);
            (row(&list, replica)["scheduled_restart"] == at.as_str()).then_some(list)
        });
    let list = shown.unwrap_or_else(|| panic!("list never showed the scheduled restart"));
    assert_eq!(
        row(&list, leader)["scheduled_restart"],
        Value::Null,
        "{list}"
    );
    let table = text(&ctl(cfg, &["list"]));
    assert!(
        table.contains("Scheduled restart") && table.contains(&at),
        "{table}"
    );
    let o = ctl(cfg, &["restart", replica, "--scheduled", &at, "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("already scheduled"), "{}", text(&o));

    // flush restart, every member whose key shows one: cancelled on the member.
    let o = ctl(cfg, &["flush", "restart"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("scheduled restart on member {replica} cancelled")),
        "{}",
        text(&o)
    );
    let i = (0..3)
        .find(|&i| c.name(i) == replica)
        .expect("replica index");
    let (_, body) = c.api_body(i, "/patroni").expect("status");
    let v: Value = serde_json::from_str(&body).expect("status JSON");
    assert_eq!(v.get("scheduled_restart"), None, "{v}");
    let gone =
        tenure::testbed::wait_for(Duration::from_secs(15), Duration::from_millis(200), || {
            let list = ctl_json(cfg, &["list", "--json"]);
            (row(&list, replica)["scheduled_restart"] == Value::Null).then_some(())
        });
    assert!(
        gone.is_some(),
        "the member key still shows the cancelled restart"
    );
    let o = ctl(cfg, &["flush", "restart"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("No scheduled restart"), "{}", text(&o));

    // A switchover an hour from now: in the failover key, shown by list.
    let o = ctl(
        cfg,
        &[
            "switchover",
            "--candidate",
            replica,
            "--scheduled",
            &at,
            "--force",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(c.get_key("failover").is_some(), "no failover key written");
    let list = ctl_json(cfg, &["list", "--json"]);
    assert_eq!(list["scheduled_switchover"]["at"], at.as_str(), "{list}");
    assert_eq!(list["scheduled_switchover"]["to"], replica, "{list}");
    let table = text(&ctl(cfg, &["list"]));
    assert!(
        table.contains(&format!("Switchover scheduled at: {at}")),
        "{table}"
    );

    // flush switchover: deleted through the leader's API.
    let o = ctl(cfg, &["flush", "switchover"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("was cancelled"), "{}", text(&o));
    assert_eq!(
        c.get_key("failover"),
        None,
        "the failover key is still there"
    );
    let list = ctl_json(cfg, &["list", "--json"]);
    assert_eq!(list["scheduled_switchover"], Value::Null, "{list}");
    let o = ctl(cfg, &["flush", "switchover"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("No pending scheduled switchover"),
        "{}",
        text(&o)
    );
}

/// What `tenure ctl --help` and docs/operations.md say happens after `patronictl
/// remove` (every key of the scope deleted in one txn): the leader fences, the
/// rollback marker keeps every node from promoting until `tenure confirm-epoch`,
/// then a leader is elected again.
fn removed_scope(c: &TestCluster, cfg: &Path) {
    let prefix = c.prefix();
    common::etcdctl(c, &["del", "--prefix", &prefix]).expect("etcdctl del --prefix");
    let fenced = tenure::testbed::wait_for(common::FAILOVER, Duration::from_millis(50), || {
        c.primaries().is_empty().then_some(())
    });
    assert!(
        fenced.is_some(),
        "the leader did not fence{}",
        c.logs_tail(30)
    );
    let marked = tenure::testbed::wait_for(common::FAILOVER, Duration::from_millis(100), || {
        c.get_key("rollback").map(|_| ())
    });
    assert!(marked.is_some(), "no rollback marker{}", c.logs_tail(30));
    // Two lease lengths: nobody takes the key, nobody promotes.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(2 * u64::from(c.opts.ttl)) {
        assert_eq!(
            c.try_leader_key().ok().flatten(),
            None,
            "a node took the key{}",
            c.logs_tail(30)
        );
        assert!(
            c.primaries().is_empty(),
            "a node promoted{}",
            c.logs_tail(30)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let l = ctl_json(cfg, &["list", "--json"]);
    assert_eq!(l["leader"], Value::Null, "{l}");
    assert!(
        l["rollback_marker"]
            .as_str()
            .is_some_and(|k| k.ends_with("/rollback")),
        "{l}"
    );
    let o = ctl(cfg, &["list"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(" Rollback marker set"),
        "{}",
        text(&o)
    );
    // The operator's confirmation lets the cluster elect a leader again.
    let o = Command::new(BIN)
        .args(["confirm-epoch", "--config"])
        .arg(cfg)
        .output()
        .expect("confirm-epoch");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        c.wait_primary(common::FAILOVER).is_some(),
        "no leader after confirm-epoch{}",
        c.logs_tail(30)
    );
}

/// A scope no agent runs: ctl shows what is stored, garbage included, and says
/// there is no leader.
fn crafted_scope(c: &TestCluster, cfg: &Path) {
    let original = std::fs::read_to_string(cfg).expect("config");
    let scope = "ctl-crafted";
    let crafted: String = original
        .lines()
        .map(|l| {
            if l.starts_with("scope = ") {
                format!("scope = \"{scope}\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = c.dir().join("ctl-crafted.toml");
    std::fs::write(&path, crafted).expect("write config");
    let prefix = c
        .prefix()
        .replace(&format!("/{}/", c.opts.scope), &format!("/{scope}/"));
    let put = |k: &str, v: &str| {
        etcdkv::put(
            &c.endpoints(),
            &format!("{prefix}{k}"),
            v,
            Duration::from_secs(2),
        )
        .unwrap_or_else(|e| panic!("put {k}: {e}"))
    };
    put(
        "history",
        &json!([
            [
                1,
                50_331_744u64,
                "no recovery target specified",
                "2026-12-01T10:00:00Z",
                "pg-a"
            ],
            "garbage",
            [
                2,
                4_294_967_336u64,
                "switchover",
                "2026-12-01T11:00:00Z",
                "pg-b"
            ]
        ])
        .to_string(),
    );
    put("members/pg-a", "not json at all");
    put("config", r#"{"ttl": 9, "pause": true}"#);
    let h = ctl_json(&path, &["history", "--json"]);
    assert_eq!(
        h,
        json!([
            {"timeline": 1, "lsn": 50_331_744u64, "lsn_text": "0/3000060",
             "reason": "no recovery target specified", "timestamp": "2026-12-01T10:00:00Z",
             "new_leader": "pg-a"},
            {"timeline": 2, "lsn": 4_294_967_336u64, "lsn_text": "1/28",
             "reason": "switchover", "timestamp": "2026-12-01T11:00:00Z", "new_leader": "pg-b"}
        ])
    );
    let l = ctl_json(&path, &["list", "--json"]);
    assert_eq!(l["leader"], Value::Null, "{l}");
    assert_eq!(l["paused"], true, "{l}");
    assert_eq!(l["members"][0]["name"], "pg-a", "{l}");
    assert!(
        l["members"][0]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("not JSON")),
        "{l}"
    );
    let o = ctl(&path, &["list"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains(" Maintenance mode: on") && t.contains(" No leader"),
        "{}",
        text(&o)
    );
    // A switchover needs a leader: refused, nothing sent.
    let o = ctl(&path, &["switchover", "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("has no leader"),
        "{}",
        text(&o)
    );
}

/// `tenure ctl failover` right after the leader's host crashed (its agent,
/// postmaster and backends killed at once): the leader key still names it until
/// its lease runs out, and its API does not answer. Before the fix ctl failed there
/// (it only asked the leader's API); now it asks the named candidate's API, which
/// writes the `failover` key (Patroni falls back to writing it itself). The
/// candidate is the replica that would lose the automatic race (equal positions go
/// to the smaller name), so the request is what makes it the new leader — and it
/// takes the key only once the old lease could have expired (S3).
#[test]
fn real_ctl_failover_with_the_leader_crashed() {
    let mut c = common::bed("ctl", "dead");
    let p = common::settled(&mut c);
    let old = c.name(p).to_string();
    let (_, old_epoch) = c.leader_key().expect("leader key");
    let mut replicas: Vec<usize> = (0..c.opts.nodes).filter(|i| *i != p).collect();
    replicas.sort_by(|a, b| c.name(*a).cmp(c.name(*b)));
    let cand_i = *replicas.last().expect("a replica");
    let cand = c.name(cand_i).to_string();
    let cfg = c.config_path(cand_i).to_path_buf();
    // The candidate's API checks the published member keys as the leader's would: a
    // running replica (`role`, `pg_healthy`) with a position near the leader's
    // (maximum_lag_on_failover). Wait until every replica has published both: right
    // after settling a replica's key can still show its start (a position, not yet
    // a running replica), and the API rightly refuses such a candidate.
    let near =
        tenure::testbed::wait_for(Duration::from_secs(30), Duration::from_millis(200), || {
            let (m, _) = keys(&c);
            let get = |n: &str| m.iter().find(|(name, _)| name == n).map(|(_, v)| v.clone());
            let top = get(&old)?["xlog_location"].as_u64()?;
            replicas
                .iter()
                .all(|r| {
                    get(c.name(*r)).is_some_and(|v| {
                        v["role"] == "replica"
                            && v["pg_healthy"] == true
                            && v["xlog_location"]
                                .as_u64()
                                .is_some_and(|x| x > 0 && top.saturating_sub(x) <= 1 << 20)
                    })
                })
                .then_some(())
        });
    assert!(
        near.is_some(),
        "positions never published{}",
        c.logs_tail(30)
    );
    // The candidate's API decides on its own last view (`/cluster` shows it): wait
    // until that view, too, has every replica running with its position, not only
    // etcd (a view is at most a loop behind the keys).
    let seen =
        tenure::testbed::wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            let (status, body) = c.api_body(cand_i, "/cluster")?;
            let v: Value = serde_json::from_str(&body).ok()?;
            let members = v["members"].as_array()?;
            (status == 200
                && replicas.iter().all(|r| {
                    members.iter().any(|m| {
                        m["name"] == c.name(*r)
                            && m["role"] == "replica"
                            && matches!(m["state"].as_str(), Some("running" | "streaming"))
                            && m["lag"].as_u64().is_some_and(|l| l <= 1 << 20)
                    })
                }))
            .then_some(())
        });
    assert!(
        seen.is_some(),
        "the candidate's view never showed the replicas running: {:?}{}",
        c.api_body(cand_i, "/cluster"),
        c.logs_tail(30)
    );

    let crashed = c.host_crash(p).unwrap_or_else(|e| panic!("{e}"));
    let child = Command::new(BIN)
        .arg("ctl")
        .arg("--config")
        .arg(&cfg)
        .args(["failover", "--candidate", &cand, "--force"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure ctl");
    // When the key first names someone else than the crashed leader.
    let taken = tenure::testbed::wait_for(common::FAILOVER, Duration::from_millis(20), || {
        c.leader_key()
            .filter(|(n, _)| *n != old)
            .map(|k| (k, crashed.elapsed()))
    });
    let o = child.wait_with_output().expect("tenure ctl output");
    println!("{}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o), c.logs_tail(40));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Could not failover through the leader"),
        "{}",
        text(&o)
    );
    let ((name, epoch), after) =
        taken.unwrap_or_else(|| panic!("no new leader{}", c.logs_tail(40)));
    assert_eq!(name, cand, "the named candidate leads{}", c.logs_tail(40));
    assert!(epoch > old_epoch);
    // S3: not before the old lease could have expired. Its last keepalive was sent
    // at most loop_wait + retry_timeout before the crash.
    let earliest = Duration::from_secs(u64::from(c.opts.ttl))
        .saturating_sub(c.opts.loop_wait + c.opts.retry_timeout);
    println!("new leader {name} after {after:?} (earliest allowed {earliest:?})");
    assert!(
        after >= earliest,
        "taken {after:?} after the crash, before {earliest:?}"
    );
    let promoted = tenure::testbed::wait_for(common::FAILOVER, Duration::from_millis(50), || {
        (c.primaries() == vec![cand_i]).then_some(())
    });
    assert!(
        promoted.is_some(),
        "{cand} never ran as primary{}",
        c.logs_tail(40)
    );
}

/// `SHOW name` on node `i`'s PostgreSQL.
fn show(c: &TestCluster, i: usize, name: &str) -> Option<String> {
    c.sql_one(i, &format!("SHOW {name}")).ok()
}

/// Whether every node's PostgreSQL shows `name` = `want` within 30 s.
fn on_every(c: &TestCluster, name: &str, want: &str) -> bool {
    tenure::testbed::wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        (0..3)
            .all(|i| show(c, i, name).as_deref() == Some(want))
            .then_some(())
    })
    .is_some()
}

/// Whether node `i`'s member key says a restart is pending.
fn pending(c: &TestCluster, i: usize) -> bool {
    c.member(c.name(i))
        .is_some_and(|m| m["pending_restart"] == true)
}

/// Cluster-wide PostgreSQL settings (Patroni's `edit-config -p`): `--pg` reaches
/// every member's PostgreSQL with a reload, under each node's own
/// `[postgresql.parameters]`; a setting that needs a restart shows as
/// `pending_restart` until one. A value PostgreSQL refuses is never stored
/// through ctl; written straight to etcd by another writer, every agent leaves
/// it out of `tenure.params.conf` and says so, so a restart still starts (the
/// replica restarted here comes back, with the restart-only setting in force).
#[test]
fn real_ctl_edit_config_sets_postgresql_settings_on_every_member() {
    let mut opts = common::options("ctl", "params");
    opts.etcd_relays = true;
    opts.section_extra.push((
        "[postgresql.parameters]".into(),
        "temp_buffers = \"16MB\"".into(),
    ));
    let mut c = common::start(opts);
    let p = common::settled(&mut c);
    let r = (p + 1) % 3;
    let key = c.leader_key().expect("leader key");
    let cfg = c.config_path(0).to_path_buf();
    let o = ctl(
        &cfg,
        &[
            "edit-config",
            "--pg",
            "work_mem=12MB",
            "-p",
            "temp_buffers=32MB",
            "--pg",
            "max_connections=120",
            "--force",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        on_every(&c, "work_mem", "12MB"),
        "work_mem never reached every member{}",
        c.logs_tail(30)
    );
    for i in 0..3 {
        assert_eq!(
            show(&c, i, "temp_buffers").as_deref(),
            Some("16MB"),
            "the node's own wins"
        );
        assert!(
            c.agent_log(i)
                .contains("[\"temp_buffers\"] are overridden on this node"),
            "{}",
            c.logs_tail(20)
        );
    }
    // A removal reaches the key (review of session 24, H2: `--pg NAME=null`
    // and `--set KEY=null` were dropped before they were sent), under every
    // spelling.
    let o = ctl(
        &cfg,
        &[
            "edit-config",
            "--pg",
            "TEMP_BUFFERS=null",
            "--set",
            "maximum_lag_on_syncnode=null",
            "--force",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_str(&c.get_key("config").expect("config")).expect("json");
    assert_eq!(
        v["postgresql"]["parameters"],
        json!({"work_mem": "12MB", "max_connections": "120"}),
        "{v}"
    );
    assert!(v.get("maximum_lag_on_syncnode").is_none(), "{v}");
    // And the members' files.
    let gone =
        tenure::testbed::wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
            (0..3)
                .all(|i| {
                    std::fs::read_to_string(c.data_dir(i).join("tenure.params.conf")).is_ok_and(
                        |f| f.contains("work_mem = '12MB'") && !f.contains("temp_buffers"),
                    )
                })
                .then_some(())
        });
    assert!(
        gone.is_some(),
        "temp_buffers still in a member's file{}",
        c.logs_tail(20)
    );
    let all_pending =
        tenure::testbed::wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
            (0..3).all(|i| pending(&c, i)).then_some(())
        });
    assert!(
        all_pending.is_some(),
        "max_connections not pending a restart"
    );

    // Refused by PostgreSQL's parser on the member: exit 1, nothing stored.
    let before = c.get_kv("config").expect("config key");
    let o = ctl(&cfg, &["edit-config", "--pg", "work_mem=banana", "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("invalid value for parameter \"work_mem\": \"banana\""),
        "{}",
        text(&o)
    );
    assert_eq!(
        c.get_kv("config").expect("config key").mod_revision,
        before.mod_revision,
        "nothing stored"
    );

    // Another writer puts it straight into etcd: left out on every member, which
    // says so; the rest applies, and work_mem (no longer in the key's good
    // settings) is back to PostgreSQL's default.
    common::set_config_field(
        &c,
        "postgresql",
        json!({"parameters": {
            "work_mem": "banana", "maintenance_work_mem": "96MB", "max_connections": 120}}),
        None,
    );
    assert!(
        on_every(&c, "maintenance_work_mem", "96MB") && on_every(&c, "work_mem", "4MB"),
        "the key's good settings not applied on every member{}",
        c.logs_tail(30)
    );
    for i in 0..3 {
        assert!(
            // The event's `error` field, its quotes escaped.
            c.agent_log(i).contains(
                "postgresql.parameters.work_mem = \\\"banana\\\" left out of tenure.params.conf"
            ),
            "{} did not say it left work_mem out{}",
            c.name(i),
            c.logs_tail(20)
        );
    }

    // An agent that starts while etcd does not answer it knows nothing of the
    // key yet: it leaves tenure.params.conf as its last run wrote it (before,
    // it emptied the file and reloaded, review of the change, H2).
    c.hold_etcd(r).expect("hold etcd");
    c.kill_agent(r);
    let from = c.agent_log(r).len();
    c.start_agent(r).expect("start agent");
    // Its start-up check gives etcd 5 s; then several loops without it.
    let looping =
        tenure::testbed::wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
            c.agent_log(r)[from..]
                .contains("start-up member check skipped")
                .then_some(())
        });
    assert!(looping.is_some(), "{}", c.logs_tail(20));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(show(&c, r, "maintenance_work_mem").as_deref(), Some("96MB"));
    let file = std::fs::read_to_string(c.data_dir(r).join("tenure.params.conf"))
        .expect("tenure.params.conf");
    assert!(file.contains("maintenance_work_mem = '96MB'"), "{file}");
    c.release_etcd(r).expect("release etcd");
    // Its member key may have expired meanwhile: back before it is named.
    let back =
        tenure::testbed::wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
            c.member(c.name(r)).map(|_| ())
        });
    assert!(back.is_some(), "{}", c.logs_tail(20));

    // A replica's PostgreSQL restarted: it starts (nothing refused is in its
    // files) and runs with the restart-only setting; its pending flag clears.
    let o = ctl(&cfg, &["restart", c.name(r), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let restarted =
        tenure::testbed::wait_for(Duration::from_secs(60), Duration::from_millis(200), || {
            (show(&c, r, "max_connections").as_deref() == Some("120") && !pending(&c, r))
                .then_some(())
        });
    assert!(
        restarted.is_some(),
        "{} did not come back with max_connections 120{}",
        c.name(r),
        c.logs_tail(40)
    );

    // The editor (`$EDITOR`, through sh): what it leaves is stored whole (PUT),
    // a key it removed is gone and an explicit `null` stays. One that leaves no
    // JSON sends nothing (exit 2).
    let dir = cfg.parent().expect("config dir").to_path_buf();
    let editor = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write editor");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod editor");
        p
    };
    let edit = |script: &Path| {
        ctl_child_env(
            &cfg,
            &["edit-config", "--force"],
            Stdio::null(),
            &[("EDITOR", script)],
        )
        .wait_with_output()
        .expect("tenure ctl output")
    };
    let before = c.get_kv("config").expect("config key");
    let o = edit(&editor("garbage.sh", "echo garbage > \"$1\""));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not JSON"), "{}", text(&o));
    // The edit is kept for another try; ours to remove.
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    let kept = said
        .split("the edit is kept in ")
        .nth(1)
        .and_then(|rest| rest.split(" (see").next())
        .map(str::trim)
        .unwrap_or_else(|| panic!("no kept file named: {said}"));
    assert_eq!(
        std::fs::read_to_string(kept).unwrap_or_else(|e| panic!("{kept:?}: {e}: {said}")),
        "garbage\n"
    );
    std::fs::remove_file(kept).expect("remove kept edit");
    assert_eq!(
        c.get_kv("config").expect("config key").mod_revision,
        before.mod_revision,
        "nothing sent"
    );
    let o = edit(&editor(
        "good.sh",
        "sed -i -e 's/\"maximum_lag_on_failover\": [0-9]*/\"maximum_lag_on_failover\": 2097152/' \
         -e '/\"member_slots_ttl\"/d' \"$1\"",
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("maximum_lag_on_failover: 1048576 -> 2097152")
            && text(&o).contains("member_slots_ttl: 1800 -> null"),
        "{}",
        text(&o)
    );
    let v: Value = serde_json::from_str(&c.get_key("config").expect("config")).expect("json");
    assert_eq!(v["maximum_lag_on_failover"], 2_097_152, "{v}");
    assert!(v.get("member_slots_ttl").is_none(), "{v}");
    assert!(v.get("promote_delay").is_some_and(Value::is_null), "{v}");

    // --apply: a merge patch from stdin; --replace: the whole value from a file
    // (without `postgresql`, so every member's cluster-wide settings go).
    let o = ctl_in(
        &cfg,
        &["edit-config", "--apply", "-", "--force"],
        r#"{"maximum_lag_on_failover": 3145728}"#,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mut v: Value = serde_json::from_str(&c.get_key("config").expect("config")).expect("json");
    assert_eq!(v["maximum_lag_on_failover"], 3_145_728, "{v}");
    v.as_object_mut().expect("object").remove("postgresql");
    let file = dir.join("replace.json");
    std::fs::write(&file, v.to_string()).expect("write replace");
    let o = ctl(
        &cfg,
        &[
            "edit-config",
            "--replace",
            file.to_str().expect("utf-8"),
            "--force",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        on_every(&c, "maintenance_work_mem", "64MB"),
        "the cluster-wide settings not gone from every member{}",
        c.logs_tail(30)
    );
    assert_eq!(c.leader_key(), Some(key), "nothing of this failed over");
}

/// A standby's floor (Patroni does the same): a replica whose own
/// `[postgresql.parameters]` set `max_connections` below the primary's would be
/// refused by PostgreSQL at every start ("recovery aborted because of
/// insufficient parameter settings"); its agent starts it with the primary's
/// value from `pg_control` instead, and says so — through a restart
/// (`ctl restart`) and through a plain start after PostgreSQL stopped.
#[test]
fn real_ctl_a_replica_starts_with_at_least_the_primarys_settings() {
    let (mut c, p, r, cfg) = two_nodes("floor");
    assert_eq!(show(&c, p, "max_connections").as_deref(), Some("100"));
    const SAID: &str = "this standby starts with max_connections = 100, the primary's";

    // The replica's own file says 50: its agent reads it at its next start.
    c.term_agent(r, Duration::from_secs(10))
        .expect("stop agent");
    let path = c.config_path(r).to_path_buf();
    let toml = std::fs::read_to_string(&path).expect("read config");
    let toml = toml.replacen(
        "[postgresql.parameters]\n",
        "[postgresql.parameters]\nmax_connections = 50\n",
        1,
    );
    assert!(toml.contains("max_connections = 50"), "{toml}");
    std::fs::write(&path, toml).expect("write config");
    c.start_agent(r).expect("start agent");
    let streaming_with = |c: &TestCluster, want: &str| {
        tenure::testbed::wait_for(Duration::from_secs(60), Duration::from_millis(200), || {
            (c.is_streaming_replica(r) && show(c, r, "max_connections").as_deref() == Some(want))
                .then_some(())
        })
        .is_some()
    };
    // Whichever way it came back (its PostgreSQL kept running or was started),
    // a restart now reads the floor after the stop.
    assert!(
        streaming_with(&c, "100") || streaming_with(&c, "50"),
        "{}",
        c.logs_tail(40)
    );
    let before = c.agent_log(r).matches(SAID).count();
    let o = ctl(&cfg, &["restart", c.name(r), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        streaming_with(&c, "100"),
        "{} did not come back streaming with the primary's max_connections{}",
        c.name(r),
        c.logs_tail(40)
    );
    assert!(
        c.agent_log(r).matches(SAID).count() > before,
        "the raise was not said{}",
        c.logs_tail(20)
    );

    // A plain start: the agent killed, its PostgreSQL stopped (by its
    // postmaster's pid), the agent started again.
    c.kill_agent(r);
    let pm = c.postmaster_pid(r).expect("postmaster");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pm),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("fast stop");
    let stopped =
        tenure::testbed::wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            c.pg_pids(r).is_empty().then_some(())
        });
    assert!(
        stopped.is_some(),
        "PostgreSQL of {} did not stop",
        c.name(r)
    );
    let before = c.agent_log(r).matches(SAID).count();
    c.start_agent(r).expect("start agent");
    assert!(
        streaming_with(&c, "100"),
        "{} did not start streaming with the primary's max_connections{}",
        c.name(r),
        c.logs_tail(40)
    );
    assert!(
        c.agent_log(r).matches(SAID).count() > before,
        "{}",
        c.logs_tail(20)
    );

    // A reload of the raised replica: PostgreSQL flags the raised setting (its
    // files say 50, it runs 100), the member does not show it pending (a restart
    // would change nothing) -- until its files say more than it runs.
    let o = ctl(&cfg, &["reload", c.name(r), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        c.sql_one(
            r,
            "SELECT pending_restart FROM pg_settings WHERE name = 'max_connections'"
        )
        .as_deref(),
        Ok("t"),
        "PostgreSQL's own flag, which the member must not pass on"
    );
    // A member key written from a probe after the reload: WAL written on the
    // primary since, and the replica's published position past it.
    c.write_row(p, 9_000_001).expect("write a row");
    let lsn: u64 = c
        .sql_one(p, "SELECT (pg_current_wal_lsn() - '0/0')::bigint")
        .expect("lsn")
        .parse()
        .expect("a number");
    let probed =
        tenure::testbed::wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
            let m = c.member(c.name(r))?;
            (m["xlog_location"].as_u64()? >= lsn).then_some(m)
        });
    let m = probed.unwrap_or_else(|| panic!("no probe after the reload{}", c.logs_tail(20)));
    assert_ne!(
        m["pending_restart"], true,
        "a raised setting shown as pending: {m}"
    );
    edit_file(&path, "max_connections = 50", "max_connections = 150");
    let o = ctl(&cfg, &["reload", c.name(r), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let flagged =
        tenure::testbed::wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
            pending(&c, r).then_some(())
        });
    assert!(
        flagged.is_some(),
        "150 in the files, 100 running: pending{}",
        c.logs_tail(20)
    );
    // The primary was never touched.
    assert_eq!(c.primaries(), vec![p]);
}

/// A settled two-node cluster whose nodes' `[postgresql.parameters]` hold
/// `temp_buffers = "16MB"`: the cluster, its primary, its replica, and the
/// primary's configuration file (for ctl).
fn two_nodes(tag: &str) -> (TestCluster, usize, usize, std::path::PathBuf) {
    let mut opts = common::options("ctl", tag);
    opts.nodes = 2;
    opts.section_extra.push((
        "[postgresql.parameters]".into(),
        "temp_buffers = \"16MB\"".into(),
    ));
    let mut c = common::start(opts);
    let p = common::settled(&mut c);
    let cfg = c.config_path(p).to_path_buf();
    (c, p, 1 - p, cfg)
}

/// Replace `from` (which must be there) by `to` in the file at `path`.
fn edit_file(path: &Path, from: &str, to: &str) {
    let toml = std::fs::read_to_string(path).expect("read config");
    assert!(toml.contains(from), "{from} not in {toml}");
    std::fs::write(path, toml.replacen(from, to, 1)).expect("write config");
}

/// A node's own `[postgresql.parameters]` change with a reload of its agent
/// (`tenure ctl reload`, SIGHUP), as Patroni's: judged by PostgreSQL's parser
/// first (a refused value refuses the whole reload, nothing changes), written to
/// `tenure.node.conf` and PostgreSQL reloaded; a restart-only setting shows as
/// pending until a restart, after which it is in force. A TLS setting still
/// takes the agent's restart (refused, said).
#[test]
fn real_ctl_reload_applies_a_nodes_own_postgresql_settings() {
    let (c, p, r, cfg) = two_nodes("nodeparams");
    let edit = |c: &TestCluster, i: usize, from: &str, to: &str| {
        edit_file(c.config_path(i), from, to);
    };
    let node_file = |c: &TestCluster, i: usize| {
        std::fs::read_to_string(c.data_dir(i).join("tenure.node.conf")).expect("tenure.node.conf")
    };
    assert!(node_file(&c, p).contains("temp_buffers = '16MB'"));

    // ctl reload: a changed value and a new one in force at once.
    edit(
        &c,
        p,
        "temp_buffers = \"16MB\"",
        "temp_buffers = \"24MB\"\nwork_mem = \"7MB\"",
    );
    let o = ctl(&cfg, &["reload", c.name(p), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(show(&c, p, "work_mem").as_deref(), Some("7MB"));
    assert_eq!(show(&c, p, "temp_buffers").as_deref(), Some("24MB"));
    assert!(
        !c.agent_log(p)
            .contains("settings other than parameters changed"),
        "{}",
        c.logs_tail(20)
    );

    // A value PostgreSQL refuses: the whole reload is refused, nothing changes.
    let before = node_file(&c, p);
    edit(&c, p, "work_mem = \"7MB\"", "work_mem = \"banana\"");
    let o = ctl(&cfg, &["reload", c.name(p), "--force"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("refused") && text(&o).contains("work_mem"),
        "{}",
        text(&o)
    );
    assert_eq!(node_file(&c, p), before);
    assert_eq!(show(&c, p, "work_mem").as_deref(), Some("7MB"));
    // A TLS setting: the agent's restart.
    edit(
        &c,
        p,
        "work_mem = \"banana\"",
        "work_mem = \"7MB\"\nssl_ciphers = \"HIGH\"",
    );
    let o = ctl(&cfg, &["reload", c.name(p), "--force"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("at the agent's restart"), "{}", text(&o));
    assert_eq!(node_file(&c, p), before);
    edit(&c, p, "\nssl_ciphers = \"HIGH\"", "");

    // The node's own settings must hold on their own: the reserved connections
    // that fit only the cluster-wide max_connections = 300 (which may change
    // without this node) are refused; with this node's own max_connections they
    // are taken.
    let o = ctl(
        &cfg,
        &["edit-config", "--pg", "max_connections=300", "--force"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let written =
        tenure::testbed::wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
            std::fs::read_to_string(c.data_dir(p).join("tenure.params.conf"))
                .ok()
                .filter(|f| f.contains("max_connections = '300'"))
        });
    assert!(written.is_some(), "{}", c.logs_tail(20));
    edit(
        &c,
        p,
        "work_mem = \"7MB\"",
        "work_mem = \"7MB\"\nsuperuser_reserved_connections = 150",
    );
    let o = ctl(&cfg, &["reload", c.name(p), "--force"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("superuser_reserved_connections")
            && text(&o).contains("must be less than max_connections"),
        "{}",
        text(&o)
    );
    // ctl shortens the member's answer; the agent's log has it whole.
    assert!(
        c.agent_log(p)
            .contains("must hold without the cluster-wide"),
        "{}",
        c.logs_tail(10)
    );
    assert_eq!(node_file(&c, p), before);
    edit(
        &c,
        p,
        "superuser_reserved_connections = 150",
        "superuser_reserved_connections = 150\nmax_connections = 300",
    );
    let o = ctl(&cfg, &["reload", c.name(p), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let taken = node_file(&c, p);
    assert!(
        taken.contains("superuser_reserved_connections = '150'")
            && taken.contains("max_connections = '300'"),
        "{taken}"
    );
    // Back as it was.
    edit(
        &c,
        p,
        "\nsuperuser_reserved_connections = 150\nmax_connections = 300",
        "",
    );
    let o = ctl(&cfg, &["reload", c.name(p), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = ctl(
        &cfg,
        &["edit-config", "--pg", "max_connections=null", "--force"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let gone =
        tenure::testbed::wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
            std::fs::read_to_string(c.data_dir(r).join("tenure.params.conf"))
                .ok()
                .filter(|f| !f.contains("max_connections"))
        });
    assert!(gone.is_some(), "{}", c.logs_tail(20));

    // A data directory whose tenure.conf an older tenure wrote (the node's
    // settings inline, no include): a reload says so, a restart writes both
    // files, and the settings are in force after it.
    let tc = c.data_dir(p).join("tenure.conf");
    let old = std::fs::read_to_string(&tc).expect("tenure.conf");
    assert!(old.contains("include = 'tenure.node.conf'\n"), "{old}");
    std::fs::write(
        &tc,
        old.replace(
            "include = 'tenure.node.conf'\n",
            "temp_buffers = '24MB'\nwork_mem = '7MB'\n",
        ),
    )
    .expect("write tenure.conf");
    edit(&c, p, "work_mem = \"7MB\"", "work_mem = \"6MB\"");
    let o = ctl(&cfg, &["reload", c.name(p), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        c.agent_log(p).contains("written by an older tenure"),
        "{}",
        c.logs_tail(20)
    );
    assert_eq!(show(&c, p, "work_mem").as_deref(), Some("7MB"));
    let o = ctl(&cfg, &["restart", c.name(p), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let applied =
        tenure::testbed::wait_for(Duration::from_secs(60), Duration::from_millis(200), || {
            (show(&c, p, "work_mem").as_deref() == Some("6MB")).then_some(())
        });
    assert!(applied.is_some(), "{}", c.logs_tail(30));
    assert!(
        std::fs::read_to_string(&tc)
            .expect("tenure.conf")
            .contains("include = 'tenure.node.conf'\n")
    );

    // SIGHUP on the replica: a restart-only setting is pending until a restart,
    // then in force.
    edit(
        &c,
        r,
        "temp_buffers = \"16MB\"",
        "temp_buffers = \"16MB\"\nmax_connections = 150\nwork_mem = \"9MB\"",
    );
    let pid = c.agent_pid(r).expect("agent pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let applied =
        tenure::testbed::wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
            (show(&c, r, "work_mem").as_deref() == Some("9MB") && pending(&c, r)).then_some(())
        });
    assert!(applied.is_some(), "{}", c.logs_tail(30));
    assert_eq!(show(&c, r, "max_connections").as_deref(), Some("100"));
    let o = ctl(&cfg, &["restart", c.name(r), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let restarted =
        tenure::testbed::wait_for(Duration::from_secs(60), Duration::from_millis(200), || {
            (show(&c, r, "max_connections").as_deref() == Some("150")
                && !pending(&c, r)
                && c.is_streaming_replica(r))
            .then_some(())
        });
    assert!(restarted.is_some(), "{}", c.logs_tail(40));
    assert_eq!(c.primaries(), vec![p]);
}
