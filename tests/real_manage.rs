//! Issue 9 on real parts: `POST /restart` (with its conditions and schedule),
//! `DELETE /restart`, `POST /reload` and `POST /reinitialize` against a three-node
//! bed, through the API's HTTP basic authentication.
//!
//! What a restart of the primary relies on (docs/operations.md): the leader keeps
//! its key while its PostgreSQL is down (no writes anywhere, `/primary` 503), its
//! renewals keep their schedule and `F` is untouched (S1), and it starts again
//! under the same epoch: no failover, one primary.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::settled;
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

/// `POST`/`DELETE` with the bed's credentials: (status, body).
fn write(c: &TestCluster, i: usize, method: &str, path: &str, body: &str) -> (u16, String) {
    c.api_write(i, method, path, body, true)
        .unwrap_or_else(|| panic!("{method} {path} on {}: no answer", c.name(i)))
}

/// A node other than `p`.
fn other(c: &TestCluster, p: usize) -> usize {
    (0..c.node_count()).find(|&i| i != p).expect("a replica")
}

fn pm(c: &TestCluster, i: usize) -> i32 {
    c.postmaster_pid(i)
        .unwrap_or_else(|| panic!("{} has no postmaster{}", c.name(i), c.logs_tail(30)))
}

fn status_json(c: &TestCluster, i: usize) -> serde_json::Value {
    let (_, body) = c.api_body(i, "/patroni").expect("GET /patroni");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("status JSON {body}: {e}"))
}

/// The status code of a plain `GET path`, from a thread that does not hold the bed.
fn get_code(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .get(9..12)?
        .parse()
        .ok()
}

/// Restart through the API: refusals change nothing; a replica restarts (new
/// postmaster) and streams again; `restart_pending` follows PostgreSQL's flag; a
/// scheduled restart can be cancelled or runs at its time; the primary restarts
/// under the same leader key and epoch, `/primary` answering 503 while it is down.
#[test]
fn real_restart_through_the_api() {
    let mut c = common::bed("manage", "restart");
    let p = settled(&mut c);
    let r = other(&c, p);
    let key = c.leader_key().expect("leader key");

    // Access first: no credentials, 401 (nothing restarted).
    let (code, _) = c
        .api_write(r, "POST", "/restart", "", false)
        .expect("answer");
    assert_eq!(code, 401);
    // A bad condition: 400 with the reason; a condition not met: 503; neither
    // touches PostgreSQL.
    let before = pm(&c, r);
    let (code, body) = write(&c, r, "POST", "/restart", r#"{"role": "master"}"#);
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("primary, standby_leader, or replica"),
        "{body}"
    );
    let (code, body) = write(&c, r, "POST", "/restart", r#"{"role": "primary"}"#);
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("restart conditions are not satisfied"),
        "{body}"
    );
    let (code, body) = write(&c, r, "POST", "/restart", r#"{"restart_pending": true}"#);
    assert_eq!(
        (code, body.contains("pending restart flag is not set")),
        (503, true),
        "{body}"
    );
    assert_eq!(pm(&c, r), before, "a refused restart restarted PostgreSQL");

    // A parameter that needs a restart: PostgreSQL flags it, the status JSON and
    // the member key say so, and `restart_pending` now restarts.
    c.sql(r, "ALTER SYSTEM SET max_connections = 120")
        .and_then(|_| c.sql(r, "SELECT pg_reload_conf()"))
        .expect("ALTER SYSTEM on the replica");
    let flagged = wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        let member = c.member(c.name(r))?;
        (status_json(&c, r)["pending_restart"] == true && member["pending_restart"] == true)
            .then_some(())
    });
    assert!(
        flagged.is_some(),
        "pending_restart not published{}",
        c.logs_tail(30)
    );
    let (code, body) = write(
        &c,
        r,
        "POST",
        "/restart",
        r#"{"restart_pending": true, "role": "replica"}"#,
    );
    assert_eq!(code, 200, "{body}{}", c.logs_tail(30));
    assert!(body.contains("restarted successfully"), "{body}");
    let after = pm(&c, r);
    assert_ne!(after, before, "the postmaster did not change");
    assert_eq!(
        c.sql_one(r, "SHOW max_connections").as_deref(),
        Ok("120"),
        "the restart did not apply the pending parameter"
    );
    c.wait_replicas(p, &[], common::REJOIN)
        .unwrap_or_else(|e| panic!("after the replica's restart: {e}"));
    assert!(status_json(&c, r).get("pending_restart").is_none());

    // Scheduled: one at a time (409), cancelled (200, then 404), or run at its time.
    let at = |secs: u64| {
        tenure::clock::rfc3339_utc(tenure::clock::realtime() + Duration::from_secs(secs))
    };
    let (code, body) = write(
        &c,
        r,
        "POST",
        "/restart",
        &format!(r#"{{"schedule": "{}"}}"#, at(600)),
    );
    assert_eq!(code, 202, "{body}");
    assert!(status_json(&c, r)["scheduled_restart"]["schedule"].is_string());
    let (code, body) = write(
        &c,
        r,
        "POST",
        "/restart",
        &format!(r#"{{"schedule": "{}"}}"#, at(700)),
    );
    assert_eq!(
        (code, body.as_str()),
        (409, "Another restart is already scheduled")
    );
    assert_eq!(write(&c, r, "DELETE", "/restart", "").0, 200);
    assert_eq!(write(&c, r, "DELETE", "/restart", "").0, 404);
    let (code, body) = write(
        &c,
        r,
        "POST",
        "/restart",
        r#"{"schedule": "2001-01-01T00:00:00Z"}"#,
    );
    assert_eq!(
        (code, body.as_str()),
        (422, "Cannot schedule restart in the past")
    );
    let (code, body) = write(
        &c,
        r,
        "POST",
        "/restart",
        &format!(r#"{{"schedule": "{}"}}"#, at(3)),
    );
    assert_eq!(code, 202, "{body}");
    let ran = wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
        c.postmaster_pid(r).filter(|&x| x != after)
    });
    assert!(
        ran.is_some(),
        "the scheduled restart did not run{}",
        c.logs_tail(30)
    );
    c.wait_replicas(p, &[], common::REJOIN)
        .unwrap_or_else(|e| panic!("after the scheduled restart: {e}"));

    // The primary: same key and epoch, a new postmaster, `/primary` 503 while down.
    let before = pm(&c, p);
    let addr = SocketAddr::from((c.addr(p), c.api_port(p)));
    let stop = Arc::new(AtomicBool::new(false));
    let down = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (stop, down) = (Arc::clone(&stop), Arc::clone(&down));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if get_code(addr, "/primary") == Some(503) {
                    down.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let (code, body) = write(&c, p, "POST", "/restart", r#"{"role": "primary"}"#);
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    assert_eq!(code, 200, "{body}{}", c.logs_tail(30));
    assert_ne!(pm(&c, p), before, "the primary's postmaster did not change");
    assert!(
        down.load(Ordering::Relaxed) > 0,
        "/primary never answered 503 while the primary restarted"
    );
    assert_eq!(c.leader_key(), Some(key.clone()), "the leader key changed");
    let up = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        (c.api_get(p, "/primary") == Some(200)).then_some(())
    });
    assert!(up.is_some(), "/primary not 200 again{}", c.logs_tail(30));
    common::no_failover_for(&c, p, &key, c.postmaster_pid(p), Duration::from_secs(3));
    common::one_primary_at_the_end(&c, p);
    let log = c.agent_log(p);
    assert!(
        log.contains("keeping the leader key"),
        "the leader did not say it kept the key{}",
        c.logs_tail(30)
    );
}

/// `POST /reload`: a valid edit takes effect (the member key publishes the new
/// `M`); one that breaks S6 is refused with the inequality and changes nothing.
/// `POST /reinitialize`: refused on the leader; on a replica the old data
/// directory is moved aside (it exists, with what it held) and the replica
/// streams again from a fresh copy.
#[test]
fn real_reload_and_reinitialize_through_the_api() {
    let mut c = common::bed("manage", "reinit");
    let p = settled(&mut c);
    let r = other(&c, p);
    let key = c.leader_key().expect("leader key");

    // Reload, valid: M 0.5 -> 0.75.
    let path = c.config_path(r).to_path_buf();
    let text = std::fs::read_to_string(&path).expect("config file");
    assert!(text.contains("safety_margin = 0.5"), "{text}");
    std::fs::write(
        &path,
        text.replace("safety_margin = 0.5", "safety_margin = 0.75"),
    )
    .expect("write config");
    let (code, body) = write(&c, r, "POST", "/reload", "");
    assert_eq!(code, 202, "{body}{}", c.logs_tail(30));
    let applied = wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        (c.member(c.name(r))?["timing"]["M"] == 0.75).then_some(())
    });
    assert!(applied.is_some(), "M 0.75 not published{}", c.logs_tail(30));
    // Reload, breaking S6 (c) (no watchdog: L_w + R + B < ttl - M): refused, named.
    std::fs::write(
        &path,
        text.replace("safety_margin = 0.5", "safety_margin = 6.0"),
    )
    .expect("write config");
    let (code, body) = write(&c, r, "POST", "/reload", "");
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("reload refused") && body.contains("S6"),
        "{body}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(c.member(c.name(r)).expect("member")["timing"]["M"], 0.75);
    std::fs::write(&path, &text).expect("restore config");

    // Reinitialize: never on the leader.
    let (code, body) = write(&c, p, "POST", "/reinitialize", "");
    assert_eq!(
        (code, body.as_str()),
        (503, "I am the leader, can not reinitialize")
    );
    // On a replica: a marker in its data directory must end up aside, not deleted.
    let data = c.data_dir(r).to_path_buf();
    let marker = "tenure-test-reinit-marker";
    std::fs::write(data.join(marker), "old data\n").expect("marker");
    let sysid = c.system_identifier(r).expect("system identifier");
    let before = pm(&c, r);
    let (code, body) = write(&c, r, "POST", "/reinitialize", r#"{"from_leader": true}"#);
    assert_eq!(code, 200, "{body}{}", c.logs_tail(30));
    let aside = body
        .split_once("moved aside to ")
        .map(|(_, rest)| rest.split(';').next().unwrap_or(rest).trim().to_string())
        .unwrap_or_else(|| panic!("the answer names no directory: {body}"));
    let aside = std::path::PathBuf::from(aside);
    assert_ne!(aside, data);
    assert_eq!(
        std::fs::read_to_string(aside.join(marker)).ok().as_deref(),
        Some("old data\n"),
        "the old data directory is not at {}",
        aside.display()
    );
    assert!(
        c.agent_log(r).contains(&aside.display().to_string()),
        "the new name is not logged"
    );
    c.wait_replicas(p, &[], common::REJOIN)
        .unwrap_or_else(|e| panic!("after the reinitialize: {e}"));
    assert!(
        !data.join(marker).exists(),
        "the data directory was not rebuilt"
    );
    assert_ne!(pm(&c, r), before);
    assert_eq!(c.system_identifier(r).as_deref(), Ok(sysid.as_str()));
    assert_eq!(c.leader_key(), Some(key), "the leader changed");
    common::one_primary_at_the_end(&c, p);
}
