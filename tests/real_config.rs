//! Issue 9 on real parts: the `config` key through the API and straight in etcd,
//! HTTP basic auth of the write endpoints, and maintenance mode (pause).
//!
//! - `PATCH /config` that breaks S6 for a member's published `W` is refused with the
//!   inequality and nothing is stored, as is a PostgreSQL setting PostgreSQL's
//!   parser refuses, or one tenure or a node owns; a good one is adopted by every agent;
//!   garbage written straight to etcd (as `patronictl edit-config` would) is refused
//!   by every agent, which keep the last good value and say so once; writes without
//!   credentials get 401, and 403 once a node has none configured (DESIGN §3, §5).
//! - Pause: the primary's host crashes while paused and nobody promotes for several
//!   ttl; after `resume` the cluster recovers by itself (DESIGN §3, S1).

mod common;

use std::time::{Duration, Instant};

use common::{FAILOVER, etcdctl, settled};
use serde_json::Value;
use tenure::testbed::cluster::{NodeWatchdog, TestCluster};
use tenure::testbed::wait_for;

/// Node `i`'s status JSON (`GET /patroni`).
fn status(c: &TestCluster, i: usize) -> Option<Value> {
    let (code, body) = c.api_body(i, "/patroni")?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Wait until `f` holds for every node's status JSON.
fn all_status(c: &TestCluster, limit: Duration, f: impl Fn(&Value) -> bool) -> bool {
    wait_for(limit, Duration::from_millis(100), || {
        (0..c.node_count())
            .all(|i| status(c, i).is_some_and(|s| f(&s)))
            .then_some(())
    })
    .is_some()
}

fn config_value(c: &TestCluster) -> Value {
    serde_json::from_str(&c.get_key("config").expect("config key")).expect("config is JSON")
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// Stand-in watchdogs armed at W = 3 on ttl 7 (loop 0.5, retry 0.25, margin 0.5,
/// budget 1): `ttl = 6` needs W <= (6 - 0.5 - 0.25) / 2 = 2.625 (S6 b), so it breaks
/// S6 for the leader's armed W only — the replicas (device not open yet) could take
/// it. Sent to a replica, the PATCH must still be refused naming the leader.
#[test]
fn real_config_patch_checks_every_member_and_agents_refuse_garbage() {
    let mut opts = common::options("config", "patch");
    opts.watchdog = (0..3)
        .map(|_| NodeWatchdog::with_standin("required"))
        .collect();
    let mut c = common::start(opts);
    let p = settled(&mut c);
    let r = (p + 1) % 3;
    let key = c.leader_key().expect("leader key");
    let before = c.get_kv("config").expect("config key");

    // Every member publishes its timing; the leader its armed W.
    let leader_json = c.member(c.name(p)).expect("leader member key");
    assert_eq!(
        leader_json["timing"]["W"],
        serde_json::json!([3]),
        "{leader_json}"
    );
    assert_eq!(leader_json["timing"]["M"], 0.5);

    // No credentials: 401 with the challenge, nothing stored.
    let (code, body) = c
        .api_write(r, "PATCH", "/config", r#"{"ttl": 6}"#, false)
        .expect("answer");
    assert_eq!(code, 401, "{body}");

    // S6 broken for the leader's W: 400 with the inequality, nothing stored.
    let (code, body) = c
        .api_write(r, "PATCH", "/config", r#"{"ttl": 6}"#, true)
        .expect("answer");
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains(&format!("refused for member {}", c.name(p)))
            && body.contains("S6(b) violated")
            && body.contains("W = 3 > (6 - 0.5 - 0.25) / 2 = 2.625"),
        "{body}"
    );
    let after = c.get_kv("config").expect("config key");
    assert_eq!(after.mod_revision, before.mod_revision, "nothing stored");

    // Cluster-wide PostgreSQL settings: a value PostgreSQL's parser refuses (it
    // would stop every member's next start), one tenure sets itself and a
    // node's own file path: 400 naming the setting and why, nothing stored.
    for (patch, says) in [
        (
            r#"{"postgresql": {"parameters": {"temp_buffers": "16MB", "work_mem": "banana"}}}"#,
            "postgresql.parameters.work_mem = \"banana\": refused (invalid value for \
             parameter \"work_mem\": \"banana\")",
        ),
        (
            r#"{"postgresql": {"parameters": {"port": 5999}}}"#,
            "postgresql.parameters \"port\": set by tenure itself",
        ),
        (
            r#"{"postgresql": {"parameters": {"hba_file": "/etc/hba"}}}"#,
            "postgresql.parameters \"hba_file\": a node's own setting",
        ),
        (
            // `postgres -c` takes it; a configuration file does not (a syntax
            // error that would stop every start).
            r#"{"postgresql": {"parameters": {"a.b.c": "1"}}}"#,
            "postgresql.parameters \"a.b.c\": not a PostgreSQL parameter name",
        ),
        (
            r#"{"postgresql": {"parameters": {"shared_preload_libraries": "pg_nothere"}}}"#,
            "library \"pg_nothere\" is not installed on this host",
        ),
        (
            // postgres -C takes it; the postmaster would not start.
            r#"{"postgresql": {"parameters": {"max_connections": 3}}}"#,
            "superuser_reserved_connections (3) + reserved_connections (0) must be less \
             than max_connections (3)",
        ),
    ] {
        let (code, body) = c
            .api_write(r, "PATCH", "/config", patch, true)
            .expect("answer");
        assert_eq!(code, 400, "{patch}: {body}");
        assert!(body.contains(says), "{patch}: {body}");
        let after = c.get_kv("config").expect("config key");
        assert_eq!(after.mod_revision, before.mod_revision, "nothing stored");
    }

    // A good change: stored (with Patroni's answer, the new value) and adopted by
    // every agent.
    let (code, body) = c
        .api_write(
            r,
            "PATCH",
            "/config",
            r#"{"maximum_lag_on_failover": 2097152}"#,
            true,
        )
        .expect("answer");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json answer");
    assert_eq!(v["maximum_lag_on_failover"], 2_097_152);
    assert_eq!(v["ttl"], 7, "the rest of the value is kept");
    assert_eq!(config_value(&c)["maximum_lag_on_failover"], 2_097_152);
    assert!(
        all_status(&c, Duration::from_secs(10), |s| {
            s["tenure"]["maximum_lag_on_failover"] == 2_097_152
                && s["tenure"]["config_refused"].is_null()
        }),
        "not adopted by every agent{}",
        c.logs_tail(30)
    );
    let (code, body) = c.api_body(p, "/config").expect("GET /config");
    assert_eq!(code, 200);
    assert!(body.contains("2097152"), "{body}");

    // Garbage straight into etcd: every agent refuses it, keeps the last good value,
    // and says so in its status and once in its log.
    let from: Vec<usize> = (0..3).map(|i| c.agent_log(i).len()).collect();
    etcdctl(
        &c,
        &[
            "put",
            &format!("{}config", c.prefix()),
            "{\"ttl\": \"seven\"",
        ],
    )
    .expect("put garbage");
    assert!(
        all_status(&c, Duration::from_secs(10), |s| {
            s["tenure"]["config_refused"]
                .as_str()
                .is_some_and(|e| e.contains("not JSON"))
                && s["tenure"]["maximum_lag_on_failover"] == 2_097_152
                && s["tenure"]["ttl"] == 7
        }),
        "garbage not refused by every agent{}",
        c.logs_tail(30)
    );
    std::thread::sleep(Duration::from_secs(3)); // several loops
    for (i, &f) in from.iter().enumerate() {
        let log = &c.agent_log(i)[f..];
        assert_eq!(
            count(log, "refusing the cluster's dynamic configuration"),
            1,
            "{} must say it once per distinct value:\n{log}",
            c.name(i)
        );
    }
    assert_eq!(c.api_body(r, "/config").map(|x| x.0), Some(502));
    // A value that pauses but breaks S6 (ttl 1) is refused, and still pauses every
    // agent (review finding F4: else a node that refused it could take the key the
    // operator meant to hold).
    etcdctl(
        &c,
        &[
            "put",
            &format!("{}config", c.prefix()),
            "{\"ttl\": 1, \"loop_wait\": 0.5, \"retry_timeout\": 0.25, \"pause\": true}",
        ],
    )
    .expect("put a pausing value that breaks S6");
    assert!(
        all_status(&c, Duration::from_secs(10), |s| {
            s["tenure"]["config_refused"]
                .as_str()
                .is_some_and(|e| e.contains("S6"))
                && s["pause"] == true
                && s["tenure"]["ttl"] == 7
        }),
        "a refused value's pause not honoured by every agent{}",
        c.logs_tail(30)
    );
    // PUT of a whole good value repairs it (compare-and-set on the garbage's
    // revision); every agent takes it and the refusal clears.
    let mut good = serde_json::from_str::<Value>(&before.value).expect("json");
    good["maximum_lag_on_failover"] = serde_json::json!(3_145_728);
    let (code, body) = c
        .api_write(r, "PUT", "/config", &good.to_string(), true)
        .expect("answer");
    assert_eq!(code, 200, "{body}");
    assert!(
        all_status(&c, Duration::from_secs(10), |s| {
            s["tenure"]["maximum_lag_on_failover"] == 3_145_728
                && s["tenure"]["config_refused"].is_null()
        }),
        "PUT not adopted{}",
        c.logs_tail(30)
    );
    // Nothing of this failed over.
    assert_eq!(c.leader_key().as_ref(), Some(&key));

    // A node with no credentials configured (reloaded without them) answers 403.
    let path = c.config_path(r).to_path_buf();
    let text = std::fs::read_to_string(&path).expect("config file");
    let stripped: String = text
        .lines()
        .filter(|l| !l.starts_with("username") && !l.starts_with("password = \"api"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, stripped).expect("rewrite config");
    let pid = c.agent_pid(r).expect("agent pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let refused = wait_for(Duration::from_secs(5), Duration::from_millis(100), || {
        c.api_write(r, "PATCH", "/config", r#"{"pause": true}"#, true)
            .filter(|(code, _)| *code == 403)
    });
    let (_, body) = refused.unwrap_or_else(|| panic!("no 403{}", c.logs_tail(20)));
    assert!(body.contains("[api] username and password"), "{body}");
    assert!(config_value(&c).get("pause").is_none(), "nothing stored");
}

/// Pause: every agent publishes that it saw it; the primary's host crashes and,
/// for four ttl, nobody takes the key or promotes; after `resume` (Patroni's
/// `{"pause": null}`) the cluster fails over by itself.
#[test]
fn real_pause_holds_failover_until_resume() {
    let mut c = common::bed("config", "pause");
    let p = settled(&mut c);
    let r = (p + 1) % 3;
    let (code, body) = c
        .api_write(r, "PATCH", "/config", r#"{"pause": true}"#, true)
        .expect("answer");
    assert_eq!(code, 200, "{body}");
    assert!(
        all_status(&c, Duration::from_secs(10), |s| s["pause"] == true
            && s["tenure"]["pause"] == true),
        "not every agent saw the pause{}",
        c.logs_tail(30)
    );
    for i in 0..3 {
        let seen = wait_for(Duration::from_secs(5), Duration::from_millis(100), || {
            c.member(c.name(i)).filter(|m| m["pause"] == true)
        });
        assert!(
            seen.is_some(),
            "{}'s member key does not say pause",
            c.name(i)
        );
    }
    let (code, body) = c.api_body(r, "/cluster").expect("GET /cluster");
    assert_eq!(code, 200);
    let cl: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(cl["pause"], true, "{cl}");

    let crashed_at = c.host_crash(p).expect("host crash");
    let ttl = Duration::from_secs(7);
    let window = ttl * 4;
    let mut key_gone = false;
    while crashed_at.elapsed() < window {
        let prim = c.primaries();
        assert!(
            prim.is_empty(),
            "a primary {prim:?} while paused{}",
            c.logs_tail(30)
        );
        if let Ok(k) = c.try_leader_key() {
            match k {
                None => key_gone = true,
                Some((name, _)) => assert_eq!(
                    name,
                    c.name(p),
                    "the key was taken while paused{}",
                    c.logs_tail(30)
                ),
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(key_gone, "the crashed leader's key never expired");
    for i in [r, (p + 2) % 3] {
        let log = c.agent_log(i);
        assert!(
            log.contains("paused (maintenance mode)"),
            "{}:\n{log}",
            c.name(i)
        );
    }

    // Resume: patronictl sends `{"pause": null}` (the key is deleted).
    let t0 = Instant::now();
    let (code, body) = c
        .api_write(r, "PATCH", "/config", r#"{"pause": null}"#, true)
        .expect("answer");
    assert_eq!(code, 200, "{body}");
    assert!(config_value(&c).get("pause").is_none());
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no failover after resume{}", c.logs_tail(40)));
    println!(
        "resumed: {} primary {:.2} s after the resume",
        c.name(np),
        t0.elapsed().as_secs_f64()
    );
    c.wait_replicas(np, &[p], common::REJOIN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.primaries(), vec![np]);
}
