//! The test bed itself, without the agent: a shell script stands in for
//! `tenure run --config FILE` and starts two `sleep`s whose working directory is
//! the node's data dir (the bed's notion of "this node's PostgreSQL"). Checks
//! etcd start/stop and key reads, config writing, ownership, and the kill helpers
//! (agent only, SIGTERM, host crash with and without the freezer, Drop).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure::testbed::cluster::{ClusterOptions, TestCluster};
use tenure::testbed::{etcdkv, scratch_dir, wait_for};

const FAKE_AGENT: &str = r#"#!/bin/sh
# usage: fake-agent run --config FILE
cfg="$3"
dd=$(sed -n 's/^data_dir = "\(.*\)"$/\1/p' "$cfg")
mkdir -p "$dd"
trap 'exit 0' TERM
(cd "$dd" && exec sleep 1000) &
(cd "$dd" && exec sleep 1000) &
echo "fake agent $$ up"
while :; do sleep 0.05; done
"#;

fn fake_agent() -> (PathBuf, PathBuf) {
    let dir = scratch_dir("fakeagent").expect("scratch");
    let path = dir.join("fake-agent");
    std::fs::write(&path, FAKE_AGENT).expect("write fake agent");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (dir, path)
}

fn alive(pid: i32) -> bool {
    // A zombie still has /proc/<pid>; count it as dead.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn bed(use_freezer: bool, binary: &Path) -> TestCluster {
    let mut opts = ClusterOptions::new(binary);
    opts.tag = "bedcheck".into();
    opts.scope = "bed".into();
    opts.use_freezer = use_freezer;
    TestCluster::start(opts).unwrap_or_else(|e| panic!("test bed: {e}"))
}

fn exercise(use_freezer: bool) {
    let (fdir, fake) = fake_agent();
    let mut c = bed(use_freezer, &fake);
    let scratch = c.dir().to_path_buf();

    // Config files and directories.
    for i in 0..c.node_count() {
        let text = std::fs::read_to_string(c.config_path(i)).expect("config written");
        let v: toml::Value = toml::from_str(&text).expect("valid TOML");
        assert_eq!(v["name"].as_str(), Some(c.name(i)));
        assert_eq!(v["etcd"]["endpoints"].as_array().map(|a| a.len()), Some(3));
        let node_dir = c.data_dir(i).parent().expect("node dir").to_path_buf();
        let uid = nix::unistd::User::from_name("postgres")
            .unwrap()
            .unwrap()
            .uid
            .as_raw();
        assert_eq!(
            std::fs::metadata(&node_dir).unwrap().uid(),
            uid,
            "{} owned by postgres",
            node_dir.display()
        );
    }

    // etcd: the gateway reads what was written, prefix reads, delete.
    let eps = c.endpoints();
    etcdkv::put(&eps, "/service/bed/leader", "pg2", Duration::from_secs(2)).expect("put");
    etcdkv::put(
        &eps,
        "/service/bed/members/pg2",
        "{\"role\":\"primary\"}",
        Duration::from_secs(2),
    )
    .expect("put");
    let (name, epoch) = c.leader_key().expect("leader key");
    assert_eq!(name, "pg2");
    assert!(epoch > 0);
    assert_eq!(c.member("pg2").unwrap()["role"].as_str(), Some("primary"));
    assert_eq!(c.get_prefix("members/").unwrap().len(), 1);
    assert_eq!(c.delete_key("leader"), Ok(1));
    assert_eq!(c.leader_key(), None);
    // One etcd member down: reads still answer.
    c.etcd().unwrap().kill_member(0);
    etcdkv::put(&eps, "/service/bed/leader", "pg3", Duration::from_secs(15))
        .expect("put with a member down");
    assert_eq!(c.leader_key().map(|k| k.0).as_deref(), Some("pg3"));
    // No API and no PostgreSQL behind the fake agents.
    assert_eq!(c.api_get(0, "/primary"), None);
    assert!(c.sql(0, "SELECT 1").is_err());

    // Every fake agent has its two "PostgreSQL" processes.
    for i in 0..c.node_count() {
        let ok = wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
            (c.pg_pids(i).len() == 2).then_some(())
        });
        assert!(ok.is_some(), "node {i}: pids {:?}", c.pg_pids(i));
    }

    // Each agent runs in its own freezer cgroup (when asked and available).
    let cgroups: Vec<PathBuf> = (0..c.node_count())
        .filter_map(|i| c.cgroup(i).map(Path::to_path_buf))
        .collect();
    if use_freezer {
        assert_eq!(cgroups.len(), c.node_count());
        let procs = std::fs::read_to_string(cgroups[0].join("cgroup.procs")).unwrap();
        assert!(
            procs
                .lines()
                .any(|l| l.trim() == c.agent_pid(0).unwrap().to_string()),
            "{procs}"
        );
    } else {
        assert!(cgroups.is_empty());
    }

    // kill_agent: the agent dies, its PostgreSQL stays.
    let a0 = c.agent_pid(0).unwrap() as i32;
    let pg0 = c.pg_pids(0);
    c.kill_agent(0);
    assert!(!alive(a0));
    assert_eq!(c.agent_pid(0), None);
    assert!(
        pg0.iter().all(|&p| alive(p)),
        "PostgreSQL survives an agent kill"
    );
    // start_agent again: a new agent joins the same node (and cgroup).
    c.start_agent(0).expect("restart");
    assert!(c.start_agent(0).is_err(), "a second start is refused");
    let ok = wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
        (c.pg_pids(0).len() == 4).then_some(())
    });
    assert!(ok.is_some(), "node 0: pids {:?}", c.pg_pids(0));

    // host_crash: agent and every PostgreSQL process, old and new, die.
    let a0 = c.agent_pid(0).unwrap() as i32;
    let all0 = c.pg_pids(0);
    let at = c.host_crash(0).expect("host crash");
    assert!(at.elapsed() < Duration::from_secs(10));
    assert!(!alive(a0));
    assert!(
        all0.iter().all(|&p| !alive(p)),
        "every process of the node died"
    );
    assert!(c.pg_pids(0).is_empty());
    assert_eq!(c.agent_pid(0), None);

    // term_agent: the fake exits 0 on SIGTERM.
    let st = c.term_agent(1, Duration::from_secs(5)).expect("exits");
    assert!(st.success(), "{st}");
    assert!(
        c.agent_log(1).contains("fake agent"),
        "log captured: {:?}",
        c.agent_log(1)
    );

    // Drop: every process the bed started is gone, and the scratch dir too.
    let mut pids: Vec<i32> = c.pg_pids(1);
    pids.extend(c.pg_pids(2));
    pids.push(c.agent_pid(2).unwrap() as i32);
    pids.extend(c.etcd_pids().iter().map(|&p| p as i32));
    assert!(pids.iter().all(|&p| alive(p)));
    drop(c);
    let gone = wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
        pids.iter().all(|&p| !alive(p)).then_some(())
    });
    assert!(
        gone.is_some(),
        "left running: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
    assert!(
        cgroups.iter().all(|cg| !cg.exists()),
        "cgroups removed: {cgroups:?}"
    );
    if std::env::var("TENURE_KEEP").as_deref() != Ok("1") {
        assert!(!scratch.exists(), "scratch dir removed");
    }
    let _ = std::fs::remove_dir_all(fdir);
}

#[test]
fn real_bed_with_freezer() {
    if !Path::new("/sys/fs/cgroup/freezer/cgroup.procs").exists() {
        eprintln!("no cgroup v1 freezer here: covered by real_bed_without_freezer");
        return;
    }
    exercise(true);
}

#[test]
fn real_bed_without_freezer() {
    exercise(false);
}
