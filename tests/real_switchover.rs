//! Planned switchover and manual failover against real etcd and PostgreSQL 15
//! (issue 9, tests 2 and 3; DESIGN §1 step 4 "A clean hand-over skips the delay
//! only with proof").
//!
//! What is asserted is behaviour and ordering: who leads, the epoch, the keys, that
//! the old primary streams from the new one without a rewind and on its timeline,
//! and the write probe's order (the old primary refused writes before the new one
//! took its first). The write gap is printed, not asserted (bench/switchover.rs
//! measures it). The one timing bound asserted is the safety contract's: a manual
//! failover after a host crash never promotes before the old lease could expire.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tenure::testbed::cluster::{API_USER, TestCluster};
use tenure::testbed::etcdkv;
use tenure::testbed::probe::WriteProbe;
use tenure::testbed::wait_for;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// `method path` with `body` on node `i`'s API with the bed's credentials, waiting
/// up to `limit` for the answer (an immediate switchover is answered after its
/// outcome). `(status, body)`; `None` if it did not answer.
fn call(c: &TestCluster, i: usize, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    use base64::Engine as _;
    let token =
        base64::engine::general_purpose::STANDARD.encode(format!("{API_USER}:{}", c.passwords.api));
    let addr = std::net::SocketAddr::from((c.addr(i), c.api_port(i)));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(40))).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = etcdkv::http_status(&out)?;
    Some((code, out.split_once("\r\n\r\n")?.1.to_string()))
}

/// The timeline of node `i`'s WAL: a primary's current one, a replica's received.
fn timeline(c: &TestCluster, i: usize) -> u32 {
    let q = if c.is_in_recovery(i) == Ok(true) {
        "SELECT received_tli::text FROM pg_stat_wal_receiver"
    } else {
        "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int::text"
    };
    c.sql_one(i, q)
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("timeline of {}", c.name(i)))
}

fn release_marker(c: &TestCluster) -> Value {
    serde_json::from_str(&c.get_key("release").expect("a release marker")).expect("marker JSON")
}

/// After a switchover from `p` to `np` that started at `t0`: `np` holds a newer
/// epoch, the marker names it with `p`'s epoch, `p` streams from `np` on `np`'s
/// timeline without a rewind (nothing in `p`'s log since `log_from`), the probe's
/// order holds. Prints the write gap.
#[allow(clippy::too_many_arguments)]
fn check_switched(
    c: &mut TestCluster,
    what: &str,
    p: usize,
    np: usize,
    epoch: i64,
    t0: Instant,
    mut probe: WriteProbe,
    log_from: usize,
) {
    let (leader, new_epoch) = c.leader_key().expect("leader key");
    assert_eq!(leader, c.name(np), "{what}: the requested node leads");
    assert!(new_epoch > epoch, "{what}: a new epoch");
    let m = release_marker(c);
    assert_eq!(m["epoch"].as_i64(), Some(epoch), "{what}: marker {m}");
    assert_eq!(
        m["candidate"].as_str(),
        Some(c.name(np)),
        "{what}: marker {m}"
    );
    assert_eq!(m["by"].as_str(), Some(c.name(p)), "{what}: marker {m}");
    // Review F1: the new leader's acquire txn marked it taken.
    assert_eq!(
        m["taken_by"].as_str(),
        Some(c.name(np)),
        "{what}: marker {m}"
    );
    wait_for(REJOIN, Duration::from_millis(100), || {
        c.is_streaming_replica(p).then_some(())
    })
    .unwrap_or_else(|| panic!("{what}: {} does not stream{}", c.name(p), c.logs_tail(40)));
    let first_new = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        probe.first_ack_after(np, t0)
    })
    .unwrap_or_else(|| panic!("{what}: {} took no write{}", c.name(np), c.logs_tail(30)));
    probe.stop(Duration::from_secs(2));
    probe.check_no_overlap(p, np, t0).unwrap();
    let last_old = probe.last_ack(p).expect("the old primary took writes");
    let gap = first_new.acked.expect("acked") - last_old.acked.expect("acked");
    let log = c.agent_log(p);
    let since = &log[log_from.min(log.len())..];
    assert!(
        !since.contains("Rewind") && !since.contains("pg_rewind") && !since.contains("Basebackup"),
        "{what}: {} rewound or re-cloned:\n{since}",
        c.name(p)
    );
    let (tl_new, tl_old) = (timeline(c, np), timeline(c, p));
    assert_eq!(
        tl_old, tl_new,
        "{what}: the old primary follows the new timeline"
    );
    assert_eq!(
        m["timeline"].as_u64(),
        Some(u64::from(tl_new) - 1),
        "{what}: the marker's checkpoint is on the timeline before"
    );
    // The new timeline forks right after the marker's shutdown checkpoint record:
    // the marker's LSN, read from pg_control, is PostgreSQL's own.
    let hist = c
        .sql_one(
            np,
            &format!("SELECT pg_read_file('pg_wal/{tl_new:08X}.history')"),
        )
        .expect("history file");
    let switch = hist
        .lines()
        .rev()
        .find_map(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.split_once('/'))
        .map(|(h, l)| {
            (u64::from_str_radix(h, 16).unwrap() << 32) | u64::from_str_radix(l, 16).unwrap()
        })
        .expect("switch point");
    let lsn = m["lsn"].as_u64().expect("lsn");
    assert!(
        lsn < switch && switch <= lsn + 512,
        "{what}: the switch point {switch:X} is not right after the shutdown checkpoint {lsn:X}"
    );
    only_primary(c, np);
    println!(
        "{what}: {} -> {}, write gap {:.3} s (last write on the old primary acked to first on \
         the new), timeline {tl_new}, no rewind",
        c.name(p),
        c.name(np),
        gap.as_secs_f64()
    );
}

/// Every replica streams from `p` and its member key says so (the leader's API
/// checks a candidate against the member keys of its last read, a loop old).
fn ready(c: &TestCluster, p: usize) {
    c.wait_replicas(p, &[], BOOT).unwrap();
    wait_for(BOOT, Duration::from_millis(50), || {
        (0..c.node_count())
            .filter(|&i| i != p)
            .all(|i| {
                c.member(c.name(i)).is_some_and(|m| {
                    m["pg_healthy"].as_bool() == Some(true) && m["role"].as_str() == Some("replica")
                })
            })
            .then_some(())
    })
    .expect("replicas' member keys say running");
    std::thread::sleep(3 * c.opts.loop_wait);
}

fn some_replica(c: &TestCluster, p: usize) -> usize {
    (0..c.node_count()).find(|&i| i != p).expect("a replica")
}

/// (a) `POST /switchover` on the leader: 200 once the candidate leads; the old
/// primary rejoins without a rewind; the probe's order holds. Without the endpoint
/// the request answers 405 and nothing moves.
#[test]
fn real_switchover_through_the_api() {
    let mut c = bed("sw", "api");
    let p = settled(&mut c);
    let np = some_replica(&c, p);
    let (_, epoch) = c.leader_key().expect("leader");
    ready(&c, p);
    let probe = probe_on(&c, p);
    let log_from = c.agent_log(p).len();
    let t0 = Instant::now();
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}"}}"#,
        c.name(p),
        c.name(np)
    );
    let r = call(&c, p, "POST", "/switchover", &body);
    let took = t0.elapsed();
    let (code, text) = r.unwrap_or_else(|| panic!("no answer{}", c.logs_tail(30)));
    assert_eq!(code, 200, "{text}{}", c.logs_tail(30));
    assert_eq!(
        text,
        format!("Successfully switched over to \"{}\"", c.name(np))
    );
    println!(
        "POST /switchover answered after {:.3} s",
        took.as_secs_f64()
    );
    check_switched(&mut c, "api", p, np, epoch, t0, probe, log_from);
}

/// (b) `tenure ctl switchover --candidate X --force` does the same.
#[test]
fn real_switchover_through_ctl() {
    let mut c = bed("sw", "ctl");
    let p = settled(&mut c);
    let np = some_replica(&c, p);
    let (_, epoch) = c.leader_key().expect("leader");
    ready(&c, p);
    let probe = probe_on(&c, p);
    let log_from = c.agent_log(p).len();
    let t0 = Instant::now();
    let o = Command::new(BIN)
        .arg("ctl")
        .arg("--config")
        .arg(c.config_path(np))
        .args(["switchover", "--candidate", c.name(np), "--force"])
        .output()
        .expect("run ctl");
    assert_eq!(
        o.status.code(),
        Some(0),
        "ctl: {}\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        c.logs_tail(30)
    );
    check_switched(&mut c, "ctl", p, np, epoch, t0, probe, log_from);
}

/// Everything a refused request must leave as it was.
fn keys_now(c: &TestCluster) -> (Option<(String, i64)>, Option<String>, Option<String>) {
    (c.leader_key(), c.get_key("release"), c.get_key("failover"))
}

/// (c) Refused switchovers change nothing and say why: an unknown candidate, a
/// `nofailover` member (412 from the API, nothing written), and a lagging one —
/// through the API (412) and written straight into the `failover` key as
/// `patronictl` may (the leader refuses it, deletes the key and logs why).
#[test]
fn real_refused_switchovers_change_nothing() {
    let mut c = bed("sw", "refused");
    let p = settled(&mut c);
    let others: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let (lag, nofail) = (others[0], others[1]);
    // `nofail` gets the tag: restarted with it.
    c.term_agent(nofail, Duration::from_secs(30)).expect("term");
    let cfg = c.config_path(nofail).to_path_buf();
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("\n[tags]\nnofailover = true\n");
    std::fs::write(&cfg, text).unwrap();
    c.start_agent(nofail).expect("restart");
    wait_for(BOOT, Duration::from_millis(100), || {
        (c.member(c.name(nofail))?["tags"]["nofailover"].as_bool() == Some(true)
            && c.is_streaming_replica(nofail))
        .then_some(())
    })
    .expect("nofailover published");
    ready(&c, p);
    let before = keys_now(&c);
    let leader = c.name(p).to_string();
    let ask = |c: &TestCluster, cand: &str| {
        call(
            c,
            p,
            "POST",
            "/switchover",
            &format!(r#"{{"leader":"{leader}","candidate":"{cand}"}}"#),
        )
        .expect("an answer")
    };
    let (code, why) = ask(&c, "nosuch");
    assert_eq!((code, why.as_str()), (412, "candidate does not exists"));
    let (code, why) = ask(&c, c.name(nofail));
    assert_eq!(code, 412, "{why}");
    assert!(why.contains("tagged nofailover"), "{why}");
    let (code, why) = call(
        &c,
        p,
        "POST",
        "/switchover",
        &format!(r#"{{"leader":"{}","candidate":"{leader}"}}"#, c.name(lag)),
    )
    .expect("answer");
    assert_eq!(code, 412, "{why}");
    assert!(why.contains("leader name does not match"), "{why}");
    assert_eq!(keys_now(&c), before, "a refusal writes nothing");

    // Lagging: the candidate's WAL receiver stopped while the primary writes
    // several MB (maximum_lag_on_failover is 1 MiB).
    let wr: i32 = c
        .sql_one(lag, "SELECT pid::text FROM pg_stat_wal_receiver")
        .expect("walreceiver")
        .parse()
        .unwrap();
    let stop = |sig| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(wr), sig).expect("signal walreceiver")
    };
    stop(nix::sys::signal::Signal::SIGSTOP);
    c.sql(
        p,
        "CREATE TABLE IF NOT EXISTS sw_fill(x text); \
         INSERT INTO sw_fill SELECT repeat('x', 1000) FROM generate_series(1, 6000)",
    )
    .expect("fill");
    let lagging = wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
        let top = c.member(&leader)?["xlog_location"].as_u64()?;
        let mine = c.member(c.name(lag))?["xlog_location"].as_u64()?;
        (top > mine + 2 * 1_048_576).then_some(())
    });
    // The leader's API answers from its last cluster read: let it see the lag.
    std::thread::sleep(3 * c.opts.loop_wait);
    let before = keys_now(&c);
    let (code, why) = if lagging.is_some() {
        ask(&c, c.name(lag))
    } else {
        (0, String::new())
    };
    // Straight into the key, as patronictl may write it: the leader refuses.
    let direct = format!(r#"{{"leader":"{leader}","member":"{}"}}"#, c.name(lag));
    etcdkv::put(
        &c.endpoints(),
        &format!("{}failover", c.prefix()),
        &direct,
        Duration::from_secs(2),
    )
    .expect("put failover");
    let cleared = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        c.get_key("failover").is_none().then_some(())
    });
    let log = c.agent_log(p);
    stop(nix::sys::signal::Signal::SIGCONT);
    assert!(
        lagging.is_some(),
        "the candidate never lagged{}",
        c.logs_tail(20)
    );
    assert_eq!(code, 412, "{why}");
    assert!(why.contains("bytes behind"), "{why}");
    assert!(
        cleared.is_some(),
        "the leader did not delete the refused request"
    );
    assert!(
        log.contains("switchover request refused") && log.contains("bytes behind"),
        "the leader's log does not say why{}",
        c.logs_tail(20)
    );
    let after = keys_now(&c);
    assert_eq!(after.0, before.0, "leader and epoch unchanged");
    assert_eq!(after.1, before.1, "no release marker written");
    assert_eq!(c.primaries(), vec![p]);
    println!(
        "refusals: unknown, nofailover, wrong leader, lagging (API 412; key deleted by the leader)"
    );
}

fn wall() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
}

/// RFC 3339 UTC of the whole second at least `d` from now, and that instant.
fn utc_in(d: Duration) -> (String, Duration) {
    let at = Duration::from_secs((wall() + d).as_secs() + 1);
    (tenure::clock::rfc3339_utc(at), at)
}

/// (d) A scheduled switchover answers 202, happens at its time and not before; a
/// second one is cancelled with `DELETE /switchover` (200) and never happens; a
/// third DELETE finds nothing (404).
#[test]
fn real_scheduled_switchover_happens_at_its_time() {
    let mut c = bed("sw", "sched");
    let p = settled(&mut c);
    let np = some_replica(&c, p);
    ready(&c, p);
    let lead = Duration::from_secs(6);
    let (at, at_wall) = utc_in(lead);
    let t0 = Instant::now();
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}","scheduled_at":"{at}"}}"#,
        c.name(p),
        c.name(np)
    );
    let (code, text) = call(&c, p, "POST", "/switchover", &body).expect("answer");
    assert_eq!((code, text.as_str()), (202, "Switchover scheduled"));
    // Not before its time, by the wall clock the time was given in (the leader
    // stops PostgreSQL only at or after it, so its key cannot move earlier).
    while wall() < at_wall {
        assert_eq!(
            c.leader_key().map(|k| k.0).as_deref(),
            Some(c.name(p)),
            "switched before {at}{}",
            c.logs_tail(20)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_for(FAILOVER, Duration::from_millis(50), || {
        (c.leader_key()?.0 == c.name(np)).then_some(())
    })
    .unwrap_or_else(|| panic!("no switchover at {at}{}", c.logs_tail(30)));
    let late = wall().saturating_sub(at_wall);
    println!(
        "scheduled at {at}, asked {:.1} s before: the key moved {:.2} s after it",
        t0.elapsed().as_secs_f64() - late.as_secs_f64(),
        late.as_secs_f64()
    );

    // Cancel the next one.
    wait_for(REJOIN, Duration::from_millis(100), || {
        c.is_streaming_replica(p).then_some(())
    })
    .expect("old primary streams");
    let (at, _) = utc_in(Duration::from_secs(4));
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}","scheduled_at":"{at}"}}"#,
        c.name(np),
        c.name(p)
    );
    let (code, _) = call(&c, np, "POST", "/switchover", &body).expect("answer");
    assert_eq!(code, 202);
    assert!(c.get_key("failover").is_some());
    let (code, text) = call(&c, p, "DELETE", "/switchover", "").expect("answer");
    assert_eq!((code, text.as_str()), (200, "scheduled switchover deleted"));
    assert!(c.get_key("failover").is_none());
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(c.leader_key().map(|k| k.0).as_deref(), Some(c.name(np)));
    let (code, text) = call(&c, p, "DELETE", "/switchover", "").expect("answer");
    assert_eq!((code, text.as_str()), (404, "no switchover is scheduled"));
    // In the past: refused (Patroni's 422), nothing written.
    let body = format!(
        r#"{{"leader":"{}","scheduled_at":"2020-01-01T00:00:00Z"}}"#,
        c.name(np)
    );
    let (code, text) = call(&c, np, "POST", "/switchover", &body).expect("answer");
    assert_eq!(code, 422, "{text}");
    assert!(c.get_key("failover").is_none());
}

/// (e) `POST /failover` to a named replica with the leader's host crashed: the
/// named one leads, and only once the old lease could have expired (DESIGN §1
/// step 4, S3: a manual failover is a preference, never a way around the checks).
#[test]
fn real_failover_to_a_named_replica_after_a_host_crash() {
    let mut c = bed("sw", "failover");
    let p = settled(&mut c);
    ready(&c, p);
    let (_, epoch) = c.leader_key().expect("leader");
    // The replica that is NOT the first by name: the one an election would not
    // prefer on a tie.
    let named = (0..3).filter(|&i| i != p).max().unwrap();
    let crash = c.host_crash(p).expect("crash");
    let body = format!(r#"{{"candidate":"{}"}}"#, c.name(named));
    // Watch the keys while the request waits for its outcome.
    let (tx, rx) = std::sync::mpsc::channel();
    let (eps, prefix) = (c.endpoints(), c.prefix());
    let watcher = std::thread::spawn(move || {
        let mut old_seen = Instant::now();
        loop {
            let kv = etcdkv::range(
                &eps,
                &format!("{prefix}leader"),
                false,
                Duration::from_secs(1),
            );
            match kv.ok().and_then(|v| v.into_iter().next()) {
                Some(k) if k.create_revision == epoch => old_seen = Instant::now(),
                Some(k) => {
                    let _ = tx.send((old_seen, Instant::now(), k.value));
                    return;
                }
                None => {}
            }
            if old_seen.elapsed() > Duration::from_secs(60) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let r = call(&c, named, "POST", "/failover", &body);
    let (old_last, new_at, who) = rx
        .recv_timeout(FAILOVER)
        .unwrap_or_else(|_| panic!("no new leader{}", c.logs_tail(30)));
    let _ = watcher.join();
    let (code, text) = r.unwrap_or_else(|| panic!("no answer{}", c.logs_tail(30)));
    assert_eq!(who, c.name(named), "the named replica leads");
    assert_eq!(code, 200, "{text}");
    assert_eq!(
        text,
        format!("Successfully failed over to \"{}\"", c.name(named))
    );
    // The old lease's last keepalive was no later than the crash: etcd cannot have
    // expired it before crash + ttl - loop_wait (the keepalive before the crash was
    // at most one loop earlier), so neither can a new key exist before then.
    let floor = Duration::from_secs(u64::from(c.opts.ttl)) - c.opts.loop_wait;
    assert!(
        new_at.duration_since(crash) >= floor,
        "the new key came {:?} after the crash, before the old lease could expire",
        new_at.duration_since(crash)
    );
    assert!(new_at >= old_last);
    let np = c.index_of(&who).unwrap();
    wait_for(FAILOVER, Duration::from_millis(50), || {
        (c.primaries() == vec![np]).then_some(())
    })
    .expect("the named one runs as primary");
    println!(
        "failover to {}: new key {:.2} s after the crash (ttl {} s)",
        c.name(np),
        new_at.duration_since(crash).as_secs_f64(),
        c.opts.ttl
    );
    // Review F2: `history` records the fork at the switch point PostgreSQL wrote in
    // its timeline history file; and an entry lost after the promotion (here the
    // whole key, deleted by an operator) is appended again by the leader.
    let tl = timeline(&c, np);
    let file = c
        .data_dir(np)
        .join("pg_wal")
        .join(format!("{tl:08X}.history"));
    let text = std::fs::read_to_string(&file).expect("the timeline history file");
    let last = text
        .lines()
        .rfind(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .expect("an entry");
    let mut f = last.split('\t');
    let (parent, lsn) = (f.next().unwrap(), f.next().unwrap());
    let expect = Value::from(vec![
        Value::from(parent.parse::<u64>().unwrap()),
        Value::from(tenure::core::model::parse_lsn(lsn).unwrap()),
    ]);
    let fork_of = |h: &Value| -> Option<Value> {
        let last = h.as_array()?.last()?.as_array()?.clone();
        Some(Value::from(last[..2].to_vec()))
    };
    let history = || -> Option<Value> { serde_json::from_str(&c.get_key("history")?).ok() };
    let before = history().expect("history after the failover");
    assert_eq!(fork_of(&before), Some(expect.clone()), "{before} vs {text}");
    c.delete_key("history").expect("delete history");
    let again = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        history()
    })
    .unwrap_or_else(|| panic!("history was not appended again{}", c.logs_tail(20)));
    assert_eq!(fork_of(&again), Some(expect), "{again} vs {text}");
}

/// The shutdown checkpoint tenure reads from `global/pg_control` (its offsets) is
/// the one `pg_controldata` prints, and a clean stop (SIGTERM of the leader's
/// agent) publishes it in the release marker under its epoch, naming no candidate
/// (issue 9 item 2: one proof for both hand-overs).
#[test]
fn real_clean_stop_marker_carries_pg_controls_checkpoint() {
    let mut opts = options("sw", "ctl1");
    opts.nodes = 1;
    let mut c = start(opts);
    let p = settled(&mut c);
    let (_, epoch) = c.leader_key().expect("leader");
    c.sql(p, "CREATE TABLE x(a int); INSERT INTO x VALUES (1)")
        .unwrap();
    // `/primary` answers 200 once PostgreSQL runs as primary, which can be while
    // the agent's `StartPrimary` job (`pg_ctl start -w`) still runs; only a step
    // after it marks the leadership promoted, and only a promoted leadership hands
    // over with a marker (review F2: a SIGTERM before it releases plainly, the safe
    // side: a full run and 1 of 2 runs in a loop stopped the agent in between).
    // The first leading step says so in the log.
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        c.agent_log(p)
            .contains("leader with the lock, lease valid")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("never led with its primary{}", c.logs_tail(20)));
    let st = c.term_agent(p, Duration::from_secs(30)).expect("exit");
    assert!(st.success(), "{st}{}", c.logs_tail(20));
    let out = Command::new(c.opts.pg_bin_dir.join("pg_controldata"))
        .arg("-D")
        .arg(c.data_dir(p))
        .env("LC_ALL", "C")
        .output()
        .expect("pg_controldata");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("{name} not in\n{text}"))
    };
    assert_eq!(field("Database cluster state:"), "shut down");
    let loc = field("Latest checkpoint location:");
    let (h, l) = loc.split_once('/').unwrap();
    let lsn = (u64::from_str_radix(h, 16).unwrap() << 32) | u64::from_str_radix(l, 16).unwrap();
    let tl: u64 = field("Latest checkpoint's TimeLineID:").parse().unwrap();
    let bytes = std::fs::read(c.data_dir(p).join("global/pg_control")).unwrap();
    assert_eq!(
        tenure::pg::control::shutdown_checkpoint_of(&bytes),
        Ok((tl as u32, lsn)),
        "pg_controldata says {loc} on timeline {tl}"
    );
    let m = release_marker(&c);
    assert_eq!(m["epoch"].as_i64(), Some(epoch), "{m}");
    assert_eq!(m["lsn"].as_u64(), Some(lsn), "{m}");
    assert_eq!(m["timeline"].as_u64(), Some(tl), "{m}");
    assert!(m["candidate"].is_null(), "{m}");
    assert!(m["taken_by"].is_null(), "nobody took the key since: {m}");
    assert!(c.leader_key().is_none(), "the key was deleted with it");
    let log = c.agent_log(p);
    assert!(log.contains("with the release marker"), "{log}");
    assert!(
        !log.contains("release refused") && !log.contains("release failed"),
        "the fallback release ran after the hand-over:\n{log}"
    );
    println!("clean stop: marker at {loc} on timeline {tl}, as pg_controldata says");
}

/// The `slots` config key (Patroni's permanent slots, physical): every leader
/// keeps them beside the members' own slots, so a backup server's slot is on the
/// primary and on the new one after a switchover. `ignore_slots`, added to the
/// config key at run time, keeps an operator's own slot that the leader drops
/// otherwise (before, every inactive physical slot not a member's was dropped).
#[test]
fn real_permanent_slots_follow_the_leader_and_ignored_ones_stay() {
    let mut opts = options("sw", "slots");
    opts.nodes = 2;
    opts.extra_config = "[dynamic.slots.barman]\ntype = \"physical\"\n".into();
    let mut c = start(opts);
    let p = settled(&mut c);
    let np = some_replica(&c, p);
    ready(&c, p);
    let slots = |c: &TestCluster, i: usize| {
        c.sql_one(
            i,
            "SELECT coalesce(string_agg(slot_name, ',' ORDER BY slot_name), '') \
             FROM pg_replication_slots",
        )
        .ok()
    };
    let want = |c: &TestCluster, i: usize, list: &[&str]| {
        let mut l: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        l.sort();
        wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
            (slots(c, i)? == l.join(",")).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "{}: slots {:?}, wanted {l:?}{}",
                c.name(i),
                slots(c, i),
                c.logs_tail(20)
            )
        })
    };
    let np_slot = tenure::pg::slot_name(c.name(np));
    let p_slot = tenure::pg::slot_name(c.name(p));
    want(&c, p, &["barman", &np_slot]);
    let config = c.get_kv("config").expect("config key").value;
    assert!(
        config.contains(r#""slots":{"barman":{"type":"physical"}}"#),
        "{config}"
    );

    // An operator's two slots; then `ignore_slots` names one of them in the config
    // key: the leader runs its slot upkeep again, keeps that one, drops the other.
    c.sql_one(
        p,
        "SELECT count(*) FROM (SELECT pg_create_physical_replication_slot('keepme', true) \
         UNION ALL SELECT pg_create_physical_replication_slot('stray', true)) s",
    )
    .expect("operator slots");
    set_config_field(
        &c,
        "ignore_slots",
        serde_json::json!([{"name": "keepme"}]),
        None,
    );
    want(&c, p, &["barman", "keepme", &np_slot]);

    // Switchover: the new leader makes the permanent slot too.
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}"}}"#,
        c.name(p),
        c.name(np)
    );
    let (code, text) = call(&c, p, "POST", "/switchover", &body)
        .unwrap_or_else(|| panic!("no answer{}", c.logs_tail(30)));
    assert_eq!(code, 200, "{text}{}", c.logs_tail(30));
    want(&c, np, &["barman", &p_slot]);
    // The old leader, now a replica, mirrors the new leader's published slots:
    // it keeps its copy of `barman`, drops the slot of the new leader (nothing
    // streams from it any more) and leaves the ignored one alone.
    want(&c, p, &["barman", "keepme"]);
}

/// A consumer's permanent slot (a backup server's `pg_receivewal`) survives a
/// failover where the consumer left it: every replica keeps a copy of the
/// leader's slots, advanced to the positions the leader publishes in `status`,
/// so the new leader has the slot behind its own position, with the WAL the
/// consumer still needs. Before, the new leader made it at its own position and
/// the consumer found a gap. The other replica's member slot is a copy too.
#[test]
fn real_slot_copies_keep_a_consumer_s_position_through_a_failover() {
    let mut opts = options("sw", "slotcopy");
    opts.extra_config = "[dynamic.slots.barman]\ntype = \"physical\"\n".into();
    let mut c = start(opts);
    let p = settled(&mut c);
    ready(&c, p);
    let lsn = |c: &TestCluster, i: usize, q: &str| -> Option<u64> {
        tenure::core::model::parse_lsn(&c.sql_one(i, q).ok()?)
    };
    let restart = |c: &TestCluster, i: usize, slot: &str| {
        lsn(
            c,
            i,
            &format!(
                "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = '{slot}'"
            ),
        )
    };
    // The consumer: it confirmed WAL up to `x` (as pg_receivewal's feedback
    // would), then went away; the primary writes on past it.
    for n in 0..50 {
        c.write_row(p, n).expect("write");
    }
    let x = lsn(&c, p, "SELECT pg_current_wal_lsn()::text").expect("primary's position");
    c.sql(
        p,
        &format!(
            "SELECT pg_replication_slot_advance('barman', '{}'::pg_lsn)",
            tenure::core::model::lsn_text(x)
        ),
    )
    .expect("advance the consumer's slot");
    for n in 50..100 {
        c.write_row(p, n).expect("write");
    }
    let replicas: Vec<usize> = (0..c.node_count()).filter(|&i| i != p).collect();
    // Published in `status` (Patroni's form), then copied by every replica.
    wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        let v: Value = serde_json::from_str(&c.get_kv("status")?.value).ok()?;
        (v["slots"]["barman"].as_u64() == Some(x)).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "status never published barman at {x}: {:?}{}",
            c.get_kv("status").map(|k| k.value),
            c.logs_tail(20)
        )
    });
    for &r in &replicas {
        wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            (restart(&c, r, "barman")? == x).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "{}: barman's copy at {:?}, not {x}{}",
                c.name(r),
                restart(&c, r, "barman"),
                c.logs_tail(20)
            )
        });
        // The other replica's member slot is copied too; its own is not made.
        let other = replicas.iter().find(|&&o| o != r).copied().expect("two");
        let other_slot = tenure::pg::slot_name(c.name(other));
        wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            restart(&c, r, &other_slot).map(|_| ())
        })
        .unwrap_or_else(|| panic!("{}: no copy of {other_slot}", c.name(r)));
        let own = tenure::pg::slot_name(c.name(r));
        assert_eq!(
            restart(&c, r, &own),
            None,
            "{}: a slot of its own",
            c.name(r)
        );
    }

    // Every replica's restartpoint passes `x` (a checkpoint on the primary, then
    // one on each standby): a slot made there now, as the new leader made it
    // before, would start after `x`, and the consumer would find a gap (review
    // M3: without this the test passed only by chance of timing).
    c.sql(p, "CHECKPOINT").expect("checkpoint");
    let after = lsn(&c, p, "SELECT pg_current_wal_lsn()::text").expect("position");
    for &r in &replicas {
        wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            (lsn(&c, r, "SELECT pg_last_wal_replay_lsn()::text")? >= after).then_some(())
        })
        .unwrap_or_else(|| panic!("{} never replayed the checkpoint", c.name(r)));
        c.sql(r, "CHECKPOINT").expect("restartpoint");
        let redo =
            lsn(&c, r, "SELECT redo_lsn::text FROM pg_control_checkpoint()").expect("redo point");
        assert!(redo > x, "{}: redo {redo} not past {x}", c.name(r));
        assert_eq!(restart(&c, r, "barman"), Some(x), "{}", c.name(r));
    }

    c.host_crash(p).expect("host crash");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no failover{}", c.logs_tail(40)));
    let kept = restart(&c, np, "barman");
    assert_eq!(
        kept,
        Some(x),
        "the new leader's barman slot is not where the consumer left it{}",
        c.logs_tail(30)
    );
    // And the remaining replica streams from the new leader through the slot
    // named for it (a copy, though the new leader would have made it anyway).
    let other = replicas.iter().find(|&&o| o != np).copied().expect("two");
    c.wait_replicas(np, &[p], REJOIN)
        .unwrap_or_else(|e| panic!("{e}{}", c.logs_tail(30)));
    let active = c
        .sql_one(
            np,
            &format!(
                "SELECT active::text FROM pg_replication_slots WHERE slot_name = '{}'",
                tenure::pg::slot_name(c.name(other))
            ),
        )
        .ok();
    assert_eq!(active.as_deref(), Some("true"), "{}", c.logs_tail(30));
}

/// `member_slots_ttl`: the slot of a member whose key went away (its host
/// crashed) is kept that long, then dropped; the next leader keeps the slots the
/// last one listed in `retain_slots` (the crashed old leader's among them), so
/// the old leader streams through its own slot when it comes back.
#[test]
fn real_departed_members_slots_are_kept_for_member_slots_ttl() {
    let mut c = start(options("sw", "retain"));
    let p = settled(&mut c);
    ready(&c, p);
    // Seeded at the default (30 min, Patroni's); set to 12 s in the config key.
    let before = set_config_field(&c, "member_slots_ttl", "12s".into(), Some(p));
    assert_eq!(before["member_slots_ttl"], 1800, "{before}");
    let r = some_replica(&c, p);
    let o = (0..c.node_count())
        .find(|&i| i != p && i != r)
        .expect("three");
    let slot_of = |i: usize| tenure::pg::slot_name(c.name(i));
    let (r_slot, p_slot) = (slot_of(r), slot_of(p));
    let has = |c: &TestCluster, i: usize, slot: &str| -> Option<bool> {
        c.sql_one(
            i,
            &format!("SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '{slot}'"),
        )
        .ok()
        .map(|n| n == "1")
    };
    let retained = |c: &TestCluster| -> Vec<String> {
        c.get_kv("status")
            .and_then(|k| serde_json::from_str::<Value>(&k.value).ok())
            .and_then(|v| {
                v["retain_slots"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default()
    };

    c.host_crash(r).expect("host crash");
    let member_key = format!("members/{}", c.name(r));
    wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        c.get_kv(&member_key).is_none().then_some(())
    })
    .unwrap_or_else(|| panic!("{}'s member key never went away", c.name(r)));
    // Gone from the members, kept on the leader (and published, so the other
    // replica keeps a copy), then dropped once member_slots_ttl has passed. The
    // line is logged after the upkeep that found the member gone ran.
    let noticed = format!(r#"keeping the slots of departed members ["{r_slot}"]"#);
    wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        c.agent_log(p).contains(&noticed).then_some(())
    })
    .unwrap_or_else(|| panic!("the leader never kept {r_slot}{}", c.logs_tail(20)));
    assert_eq!(
        has(&c, p, &r_slot),
        Some(true),
        "the leader dropped {r_slot} with the member key{}",
        c.logs_tail(20)
    );
    assert_eq!(has(&c, o, &r_slot), Some(true), "no copy on {}", c.name(o));
    // Still there half the ttl later: kept for the ttl, not merely one upkeep
    // longer (12 s from when the leader found the key gone).
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        has(&c, p, &r_slot),
        Some(true),
        "{r_slot} dropped before member_slots_ttl{}",
        c.logs_tail(20)
    );
    wait_for(Duration::from_secs(60), Duration::from_millis(200), || {
        (!has(&c, p, &r_slot)?).then_some(())
    })
    .unwrap_or_else(|| panic!("{r_slot} kept past member_slots_ttl{}", c.logs_tail(20)));
    wait_for(Duration::from_secs(20), Duration::from_millis(200), || {
        (!has(&c, o, &r_slot)?).then_some(())
    })
    .unwrap_or_else(|| panic!("{}'s copy of {r_slot} kept", c.name(o)));

    // The leader's host crashes: the new leader keeps a slot for the old leader
    // after the old leader's member key is gone and before it is back: made as
    // it takes over (the last `retain_slots` named it), or kept as a departed
    // member's if the member key outlived the leader key.
    assert!(retained(&c).contains(&p_slot), "{:?}", retained(&c));
    c.host_crash(p).expect("host crash");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no failover{}", c.logs_tail(40)));
    assert_eq!(np, o, "the only replica left takes over");
    let p_key = format!("members/{}", c.name(p));
    wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        c.get_kv(&p_key).is_none().then_some(())
    })
    .unwrap_or_else(|| panic!("{}'s member key never went away", c.name(p)));
    wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
        has(&c, np, &p_slot)?.then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{} has no slot for {}{}",
            c.name(np),
            c.name(p),
            c.logs_tail(30)
        )
    });
    // Then the old leader comes back and streams through the slot (which its
    // member key would have had made anyway by now: a smoke check).
    c.start_agent(p).unwrap_or_else(|e| panic!("{e}"));
    wait_for(REJOIN, Duration::from_millis(200), || {
        (c.sql_one(
            np,
            &format!("SELECT active::text FROM pg_replication_slots WHERE slot_name = '{p_slot}'"),
        )
        .ok()?
            == "true")
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{} never streamed through its slot{}",
            c.name(p),
            c.logs_tail(30)
        )
    });
}
