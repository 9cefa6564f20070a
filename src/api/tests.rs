//! Unit tests: every endpoint and query, Patroni's status codes and order of checks,
//! the lease threshold, every method, malformed and random input.

use super::*;

/// The request instant of every fixture.
const NOW: Instant = Instant::from_nanos(1_000_000_000_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn base(name: &str) -> ApiStatus {
    ApiStatus {
        name: name.into(),
        scope: "demo".into(),
        role: "unknown",
        state: "stopped".into(),
        cluster_read_at: Some(NOW.sub(ms(100))),
        dcs_last_seen: 1_700_000_000,
        tags: Tags {
            nofailover: false,
            noloadbalance: false,
            nosync: false,
            clonefrom: false,
            custom: vec![("dc".into(), "east".into())],
        },
        maximum_lag_on_failover: 1_048_576,
        ttl: 7,
        loop_wait: ms(500),
        primary_min_remaining: ms(750),
        leader: Some("pg1".into()),
        epoch: Some(42),
        status_optime: Some(123_456),
        now: NOW,
        last_iteration: Some(NOW.sub(ms(200))),
        ..ApiStatus::default()
    }
}

fn primary() -> ApiStatus {
    ApiStatus {
        role: "primary",
        state: "running".into(),
        pg_running: true,
        pg_primary: true,
        holds_leader_key: true,
        fence_deadline: Some(NOW.add(ms(5_000))),
        timeline: 3,
        sysid: Some(7_298_031_012_345_678_901),
        lsn: 123_456,
        report: PgReport {
            server_version: Some(150_004),
            postmaster_start_time: Some("2026-01-01 10:00:00.123456+00:00".into()),
            replication_json: Some("[]".into()),
            ..PgReport::default()
        },
        replication: Some(json!([{"usename": "replicator", "application_name": "pg2",
            "client_addr": "127.0.0.1", "state": "streaming", "sync_state": "async",
            "sync_priority": 0}])),
        reason: "no action: I am pg1, leader with the lock".into(),
        watchdog: Some(13),
        ..base("pg1")
    }
}

/// A streaming replica 456 bytes behind the leader's `status` optime when replayed,
/// 356 when received.
fn replica() -> ApiStatus {
    ApiStatus {
        role: "replica",
        state: "running".into(),
        pg_running: true,
        streaming: true,
        timeline: 3,
        lsn: 123_100,
        report: PgReport {
            server_version: Some(150_004),
            receive_lsn: Some(123_100),
            replay_lsn: Some(123_000),
            latest_end_lsn: Some(123_100),
            replay_paused: Some(false),
            ..PgReport::default()
        },
        reason: "following pg1".into(),
        ..base("pg2")
    }
}

fn stopped() -> ApiStatus {
    base("pg3")
}

/// (status code, head, body) of the response to `method target`.
fn call(m: &Method, target: &str, s: &ApiStatus) -> (u16, String, String) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut out = Vec::new();
    respond(m, path, query, s, &mut out);
    let text = String::from_utf8(out).expect("utf8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head end");
    let code: u16 = head[9..12].parse().expect("status code");
    assert!(head.starts_with("HTTP/1.1 "), "{head}");
    assert!(head.contains("\r\nConnection: close"), "{head}");
    assert!(
        head.contains("\r\nContent-Type: application/json"),
        "{head}"
    );
    (code, head.to_string(), body.to_string())
}

fn get(target: &str, s: &ApiStatus) -> (u16, String, String) {
    call(&Method::Get, target, s)
}

fn code(target: &str, s: &ApiStatus) -> u16 {
    get(target, s).0
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).expect("json body")
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("content-length")
        .parse()
        .expect("number")
}

fn with(s: ApiStatus, f: impl FnOnce(&mut ApiStatus)) -> ApiStatus {
    let mut s = s;
    f(&mut s);
    s
}

/// One row: a state, a target, the status code Patroni's rules (plus the lease)
/// give.
struct Row(&'static str, ApiStatus, &'static str, u16);

fn run(rows: Vec<Row>) {
    let mut failed = Vec::new();
    for Row(what, s, target, want) in rows {
        for m in [Method::Get, Method::Head, Method::Options] {
            let got = call(&m, target, &s).0;
            if got != want {
                failed.push(format!("{what}: {m:?} {target} = {got}, want {want}"));
            }
        }
    }
    assert!(failed.is_empty(), "\n{}", failed.join("\n"));
}

/// Issue 9: HAProxy's plain `option httpchk` sends `OPTIONS /`; in Patroni `/` is
/// `/primary`. Before, every node answered 200 there and replicas took writes.
#[test]
fn root_is_primary_so_a_replica_answers_503_to_options_root() {
    assert_eq!(call(&Method::Options, "/", &replica()).0, 503);
    assert_eq!(call(&Method::Options, "/", &stopped()).0, 503);
    assert_eq!(call(&Method::Options, "/", &primary()).0, 200);
    assert_eq!(call(&Method::Get, "/", &replica()).0, 503);
}

#[test]
fn primary_and_leader_need_the_key_and_time_left_to_f() {
    let mut rows = Vec::new();
    for p in ["/", "/primary", "/read-write", "/master"] {
        rows.extend([
            Row("primary", primary(), p, 200),
            Row("replica", replica(), p, 503),
            Row("stopped", stopped(), p, 503),
            // Exactly the threshold left is not above it.
            Row(
                "0.75 s left",
                with(primary(), |s| s.fence_deadline = Some(NOW.add(ms(750)))),
                p,
                503,
            ),
            Row(
                "0.751 s left",
                with(primary(), |s| s.fence_deadline = Some(NOW.add(ms(751)))),
                p,
                200,
            ),
            Row(
                "past F",
                with(primary(), |s| s.fence_deadline = Some(NOW.sub(ms(1)))),
                p,
                503,
            ),
            Row(
                "threshold raised",
                with(primary(), |s| s.primary_min_remaining = ms(5_000)),
                p,
                503,
            ),
            // Key held, PostgreSQL not a primary yet (promoting).
            Row(
                "promoting",
                with(primary(), |s| {
                    s.pg_primary = false;
                    s.role = "replica";
                }),
                p,
                503,
            ),
            // PostgreSQL primary without the key (about to be fenced): never 200.
            Row(
                "no key",
                with(primary(), |s| {
                    s.holds_leader_key = false;
                    s.fence_deadline = None;
                }),
                p,
                503,
            ),
            Row(
                "stopped with the key",
                with(primary(), |s| {
                    s.pg_running = false;
                    s.pg_primary = false;
                    s.state = "stopped".into();
                }),
                p,
                503,
            ),
            // The primary endpoints ignore `?tag_` (Patroni's ignore_tags).
            Row("tags ignored", primary(), "/primary?tag_dc=west", 200),
        ]);
    }
    rows.extend([
        Row("leader", primary(), "/leader", 200),
        Row(
            "leader promoting",
            with(primary(), |s| s.pg_primary = false),
            "/leader",
            200,
        ),
        Row(
            "leader near F",
            with(primary(), |s| s.fence_deadline = Some(NOW.add(ms(700)))),
            "/leader",
            503,
        ),
        Row("leader tags ignored", primary(), "/leader?tag_dc=west", 200),
        Row("replica is no leader", replica(), "/leader", 503),
        Row("standby-leader", primary(), "/standby-leader", 503),
        Row("standby-leader", replica(), "/standby-leader", 503),
    ]);
    run(rows);
}

#[test]
fn replica_follows_patronis_order_noloadbalance_lag_role() {
    run(vec![
        Row("replica", replica(), "/replica", 200),
        Row("primary", primary(), "/replica", 503),
        Row("stopped", stopped(), "/replica", 503),
        // Patroni does not ask for streaming here (use ?lag= for freshness).
        Row(
            "not streaming",
            with(replica(), |s| s.streaming = false),
            "/replica",
            200,
        ),
        Row(
            "holds the key",
            with(replica(), |s| s.holds_leader_key = true),
            "/replica",
            503,
        ),
        Row(
            "noloadbalance",
            with(replica(), |s| s.tags.noloadbalance = true),
            "/replica",
            503,
        ),
        // Replayed 123_000, leader 123_456: 456 bytes behind.
        Row("lag 456 ok", replica(), "/replica?lag=456", 200),
        Row("lag 455 too small", replica(), "/replica?lag=455", 503),
        Row("lag 1kB", replica(), "/replica?lag=1kB", 200),
        Row("lag 0", replica(), "/replica?lag=0", 503),
        Row("lag 10MB", replica(), "/replica?lag=10MB", 200),
        // The sender's latest_end_lsn counts too (the larger of the two).
        Row(
            "latest_end ahead",
            with(replica(), |s| s.report.latest_end_lsn = Some(200_000)),
            "/replica?lag=1kB",
            503,
        ),
        // Leader position unknown: nothing to be lagging behind (Patroni).
        Row(
            "optime unknown",
            with(replica(), |s| {
                s.status_optime = None;
                s.report.latest_end_lsn = None;
            }),
            "/replica?lag=0",
            200,
        ),
        // A cluster read older than a ttl no longer counts.
        Row(
            "stale cluster read",
            with(replica(), |s| {
                s.cluster_read_at = Some(NOW.sub(Duration::from_secs(8)));
                s.report.latest_end_lsn = Some(123_000);
            }),
            "/replica?lag=0",
            200,
        ),
        Row("tag match", replica(), "/replica?tag_dc=east", 200),
        Row("tag mismatch", replica(), "/replica?tag_dc=west", 503),
        Row("tag absent", replica(), "/replica?tag_rack=r1", 503),
        Row("bool tag", replica(), "/replica?tag_nofailover=false", 200),
        Row(
            "bool tag mismatch",
            replica(),
            "/replica?tag_nofailover=true",
            503,
        ),
        Row(
            "tags and lag",
            replica(),
            "/replica?lag=1MB&tag_dc=east&foo=bar",
            200,
        ),
    ]);
}

#[test]
fn read_only_health_and_the_sync_family() {
    let sync = with(replica(), |s| s.sync_standby = true);
    let stale = |s: ApiStatus| {
        with(s, |s| {
            s.cluster_read_at = Some(NOW.sub(Duration::from_secs(8)))
        })
    };
    run(vec![
        Row("primary", primary(), "/read-only", 200),
        Row("replica", replica(), "/read-only", 200),
        Row("stopped", stopped(), "/read-only", 503),
        Row("lagging replica", replica(), "/read-only?lag=0", 503),
        Row("primary with lag", primary(), "/read-only?lag=0", 200),
        Row(
            "primary noloadbalance",
            with(primary(), |s| s.tags.noloadbalance = true),
            "/read-only",
            200,
        ),
        Row(
            "primary near F",
            with(primary(), |s| s.fence_deadline = Some(NOW.add(ms(100)))),
            "/read-only",
            503,
        ),
        Row("read-only tags", primary(), "/read-only?tag_dc=west", 503),
        Row("health primary", primary(), "/health", 200),
        Row("health replica", replica(), "/health", 200),
        Row("health stopped", stopped(), "/health", 503),
        Row("health tags", replica(), "/health?tag_dc=west", 503),
        Row(
            "health near F",
            with(primary(), |s| s.fence_deadline = Some(NOW.add(ms(1)))),
            "/health",
            200,
        ),
        Row("async replica /sync", replica(), "/sync", 503),
        Row("async replica /async", replica(), "/async", 200),
        Row(
            "async replica /asynchronous",
            replica(),
            "/asynchronous",
            200,
        ),
        Row("sync replica /sync", sync.clone(), "/sync", 200),
        Row(
            "sync replica /synchronous",
            sync.clone(),
            "/synchronous",
            200,
        ),
        Row("sync replica /async", sync.clone(), "/async", 503),
        Row("sync replica lagging", sync.clone(), "/sync?lag=0", 503),
        Row("primary /sync", primary(), "/sync", 503),
        Row("primary /async", primary(), "/async", 503),
        Row("stopped /async", stopped(), "/async", 503),
        Row("primary /read-only-sync", primary(), "/read-only-sync", 200),
        Row("sync /read-only-sync", sync.clone(), "/read-only-sync", 200),
        Row(
            "sync /read-only-synchronous",
            sync.clone(),
            "/read-only-synchronous",
            200,
        ),
        Row("async /read-only-sync", replica(), "/read-only-sync", 503),
        Row("stale /sync", stale(sync.clone()), "/sync", 503),
        Row("stale /async", stale(replica()), "/async", 503),
        Row(
            "stale /read-only-sync",
            stale(primary()),
            "/read-only-sync",
            503,
        ),
        // The other endpoints do not need a fresh cluster read.
        Row("stale /replica", stale(replica()), "/replica", 200),
        Row("stale /health", stale(replica()), "/health", 200),
    ]);
}

#[test]
fn liveness_is_the_loop_running_within_ttl_or_twice_on_a_replica() {
    let late =
        |s: ApiStatus, after_ms: u64| with(s, |s| s.last_iteration = Some(NOW.sub(ms(after_ms))));
    run(vec![
        Row("primary", primary(), "/liveness", 200),
        Row("replica", replica(), "/liveness", 200),
        Row("stopped", stopped(), "/liveness", 200),
        // loop_wait 0.5 + ttl 7 on a primary, + 2 ttl elsewhere.
        Row("primary 7.4 s", late(primary(), 7_400), "/liveness", 200),
        Row("primary 7.5 s", late(primary(), 7_500), "/liveness", 503),
        Row("replica 7.5 s", late(replica(), 7_500), "/liveness", 200),
        Row("replica 14.5 s", late(replica(), 14_500), "/liveness", 503),
        Row(
            "no iteration yet",
            with(stopped(), |s| s.last_iteration = None),
            "/liveness",
            503,
        ),
    ]);
}

#[test]
fn readiness_in_patronis_order() {
    let cases = [
        ("leader", primary(), "/readiness", 200, ""),
        (
            "stopped",
            stopped(),
            "/readiness",
            503,
            "PostgreSQL is not running",
        ),
        (
            "not streaming",
            with(replica(), |s| s.streaming = false),
            "/readiness",
            503,
            "not streaming",
        ),
        (
            "no etcd and no sender position",
            with(replica(), |s| {
                s.cluster_read_at = None;
                s.report.latest_end_lsn = None;
            }),
            "/readiness",
            503,
            "etcd is not accessible",
        ),
        // Default limit: maximum_lag_on_failover (1 MiB).
        ("caught up", replica(), "/readiness", 200, ""),
        (
            "apply lag over lag=",
            replica(),
            "/readiness?lag=400",
            503,
            "Replication apply lag 456 exceeds maximum allowable 400",
        ),
        (
            "write lag under lag=",
            replica(),
            "/readiness?lag=400&mode=write",
            200,
            "",
        ),
        (
            "write lag over lag=",
            replica(),
            "/readiness?lag=300&mode=write",
            503,
            "Replication write lag 356 exceeds maximum allowable 300",
        ),
        (
            "default limit",
            with(replica(), |s| s.maximum_lag_on_failover = 100),
            "/readiness",
            503,
            "exceeds maximum allowable 100",
        ),
        (
            "primary near F is no leader",
            with(primary(), |s| s.fence_deadline = Some(NOW.add(ms(10)))),
            "/readiness",
            503,
            "not streaming",
        ),
    ];
    for (what, s, target, want, why) in cases {
        let (got, _, body) = get(target, &s);
        assert_eq!(got, want, "{what}: {body}");
        let reason = json_of(&body)["reason"].as_str().unwrap_or("").to_string();
        assert!(reason.contains(why), "{what}: {reason}");
        assert_eq!(call(&Method::Options, target, &s).0, want, "{what}");
    }
}

#[test]
fn bad_queries_are_400_naming_the_parameter() {
    for (target, needle) in [
        ("/replica?lag=abc", "lag=\"abc\""),
        ("/replica?lag=-1", "negative"),
        ("/replica?lag=010", "octal"),
        ("/replica?lag=0x10", "unknown unit"),
        ("/replica?lag=1mb", "unknown unit \"mb\""),
        ("/replica?lag=1%20MiB", "unknown unit \"MiB\""),
        ("/replica?lag=", "empty"),
        ("/replica?lag=MB", "expected a number"),
        ("/replica?lag=99999999999TB", "too large"),
        ("/readiness?mode=fast", "mode=\"fast\""),
        ("/replica?tag_=x", "tag name"),
        ("/replica?tag_dc=", "tag_dc: empty"),
        ("/replica?lag=%zz", "percent escape"),
        ("/replica?tag_dc=%ff", "UTF-8"),
        // On every health endpoint, also those that do not use the value.
        ("/primary?lag=abc", "lag"),
    ] {
        for m in [Method::Get, Method::Options] {
            let (code, _, body) = call(&m, target, &primary());
            assert_eq!(code, 400, "{m:?} {target}");
            if m == Method::Get {
                let e = json_of(&body)["error"].as_str().unwrap_or("").to_string();
                assert!(e.contains(needle), "{target}: {e}");
            }
        }
    }
}

#[test]
fn lag_values_as_patroni_reads_them() {
    for (s, want) in [
        ("0", 0),
        ("1048576", 1_048_576),
        ("+5", 5),
        ("16kB", 16_384),
        ("1024kB", 1_048_576),
        ("10MB", 10_485_760),
        ("1GB", 1_073_741_824),
        ("1TB", 1_099_511_627_776),
        (" 1 MB ", 1_048_576),
        ("1.5kB", 1_536),
        ("1.5MB", 1_572_864),
        // Rounded to whole kB, as Patroni rounds a fraction of MB.
        ("1.0001MB", 1_048_576),
        ("2B", 2),
        (".5kB", 512),
    ] {
        assert_eq!(parse_lag(s), Ok(want), "{s:?}");
    }
    for s in [
        "", "-1", "010", "0x400", "1mb", "1 MiB", "MB", "1.2.3", "1e3",
    ] {
        assert!(parse_lag(s).is_err(), "{s:?} accepted");
    }
}

#[test]
fn query_parsing_first_value_wins_and_unknown_keys_are_ignored() {
    let q = parse_query("lag=1kB&lag=2kB&x&foo=bar&tag_dc=a+b&tag_dc=c&tag_r%61ck=%41&mode=write")
        .expect("valid");
    assert_eq!(q.lag, Some(1024));
    assert_eq!(q.mode, Some(LagMode::Write));
    assert_eq!(
        q.tags,
        vec![("dc".into(), "a b".into()), ("rack".into(), "A".into())]
    );
    assert_eq!(parse_query(""), Ok(Query::default()));
    assert_eq!(parse_query("&&"), Ok(Query::default()));
}

#[test]
fn status_json_has_patronis_fields_and_ours() {
    let (code, head, body) = get("/patroni", &primary());
    assert_eq!(code, 200);
    assert_eq!(content_length(&head), body.len());
    let v = json_of(&body);
    assert_eq!(v["state"], "running");
    assert_eq!(v["role"], "primary");
    assert_eq!(v["server_version"], 150_004);
    assert_eq!(
        v["postmaster_start_time"],
        "2026-01-01 10:00:00.123456+00:00"
    );
    assert_eq!(v["timeline"], 3);
    assert_eq!(v["database_system_identifier"], "7298031012345678901");
    assert_eq!(v["xlog"], json!({ "location": 123_456 }));
    assert_eq!(v["replication"][0]["application_name"], "pg2");
    assert_eq!(v["replication"][0]["usename"], "replicator");
    assert_eq!(v["dcs_last_seen"], 1_700_000_000);
    assert!(v.get("cluster_unlocked").is_none());
    assert!(v.get("sync_standby").is_none());
    assert_eq!(v["tags"], json!({ "nofailover": false, "dc": "east" }));
    assert_eq!(
        v["patroni"],
        json!({ "version": env!("CARGO_PKG_VERSION"), "scope": "demo", "name": "pg1" })
    );
    let t = &v["tenure"];
    assert_eq!(t["epoch"], 42);
    assert_eq!(t["leader"], "pg1");
    assert_eq!(t["holds_leader_key"], true);
    assert_eq!(t["lease_valid"], true);
    assert_eq!(t["fence_remaining"], 5.0);
    assert_eq!(t["primary_min_remaining"], 0.75);
    assert_eq!(t["leader_optime"], 123_456);
    assert_eq!(t["watchdog_timeout"], 13);
    assert!(t["reason"].as_str().unwrap_or("").contains("leader"));
    assert!(t.get("check").is_none());

    let v = json_of(&get("/patroni", &with(replica(), |s| s.sync_standby = true)).2);
    assert_eq!(v["role"], "replica");
    assert_eq!(
        v["xlog"],
        json!({ "received_location": 123_100, "replayed_location": 123_000,
                "replayed_timestamp": null, "paused": false })
    );
    assert_eq!(v["replication_state"], "streaming");
    assert_eq!(v["sync_standby"], true);
    assert!(v.get("replication").is_none());
    assert!(v["tenure"]["fence_remaining"].is_null());

    let v = json_of(
        &get(
            "/patroni",
            &with(stopped(), |s| {
                s.cluster_unlocked = true;
                s.epoch = None;
            }),
        )
        .2,
    );
    assert_eq!(v["state"], "stopped");
    assert_eq!(v["role"], "unknown");
    assert_eq!(v["cluster_unlocked"], true);
    assert!(v.get("xlog").is_none() && v.get("timeline").is_none());
    assert!(v["tenure"]["epoch"].is_null());
    assert!(v["tenure"]["watchdog_timeout"].is_null());
}

#[test]
fn health_endpoints_carry_the_status_and_why() {
    let near = with(primary(), |s| s.fence_deadline = Some(NOW.add(ms(500))));
    let (code, _, body) = get("/primary", &near);
    assert_eq!(code, 503);
    let v = json_of(&body);
    assert_eq!(v["role"], "primary");
    let why = v["tenure"]["check"].as_str().unwrap_or("").to_string();
    assert!(
        why.contains("0.500 s left to the fence deadline F"),
        "{why}"
    );
    let (_, _, body) = get("/replica?lag=1", &replica());
    let why = json_of(&body)["tenure"]["check"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(why.contains("456 bytes behind"), "{why}");
    // /patroni answers 200 whatever the state.
    for s in [primary(), replica(), stopped(), near] {
        assert_eq!(code_of_patroni(&s), 200);
    }
}

fn code_of_patroni(s: &ApiStatus) -> u16 {
    code("/patroni", s)
}

#[test]
fn unknown_paths_are_404_naming_them() {
    for p in [
        "/nope",
        "/status",
        "/primary/",
        "//",
        "/clusters",
        "/Primary",
        "",
    ] {
        for m in [Method::Get, Method::Head, Method::Options] {
            assert_eq!(call(&m, p, &primary()).0, 404, "{m:?} {p:?}");
        }
    }
    let v = json_of(&get("/nope", &primary()).2);
    assert_eq!(v["error"], "no such endpoint: /nope");
}

#[test]
fn head_and_options_shapes() {
    let (code, head, body) = call(&Method::Head, "/primary", &primary());
    assert_eq!(code, 200);
    assert!(body.is_empty());
    // HEAD declares the length GET would send.
    assert_eq!(content_length(&head), get("/primary", &primary()).2.len());
    let (code, head, body) = call(&Method::Options, "/primary", &replica());
    assert_eq!(code, 503);
    assert!(body.is_empty());
    assert_eq!(content_length(&head), 0);
    assert!(head.contains("Allow: GET, HEAD, OPTIONS"));
}

/// Every endpoint, state and query: HEAD and OPTIONS answer with GET's status.
#[test]
fn every_method_agrees_with_get() {
    let paths = [
        "/",
        "/primary",
        "/read-write",
        "/leader",
        "/standby-leader",
        "/replica",
        "/read-only",
        "/sync",
        "/async",
        "/read-only-sync",
        "/health",
        "/liveness",
        "/readiness",
        "/patroni",
        "/nope",
    ];
    let queries = [
        "",
        "?lag=0",
        "?lag=1MB",
        "?tag_dc=east",
        "?tag_dc=x",
        "?lag=bad",
    ];
    for s in [
        primary(),
        replica(),
        stopped(),
        with(replica(), |s| s.sync_standby = true),
    ] {
        for p in paths {
            for q in queries {
                let target = format!("{p}{q}");
                let g = get(&target, &s).0;
                assert_eq!(call(&Method::Head, &target, &s).0, g, "HEAD {target}");
                assert_eq!(call(&Method::Options, &target, &s).0, g, "OPTIONS {target}");
            }
        }
    }
}

#[test]
fn other_methods_405() {
    for m in [
        Method::Other("TRACE".into()),
        Method::Other("CONNECT".into()),
    ] {
        let (code, head, body) = call(&m, "/primary", &primary());
        assert_eq!(code, 405);
        assert!(head.contains("Allow: GET, HEAD, OPTIONS"));
        assert!(
            body.contains(&format!("method {} not allowed", m.as_str())),
            "{body}"
        );
    }
}

/// The request line only (the head's framing fields are tested on their own).
fn req(method: Method, path: &str, query: &str) -> Parsed {
    Parsed::Request {
        method,
        path: path.into(),
        query: query.into(),
        head: Head::default(),
    }
}

fn line_only(p: Parsed) -> Parsed {
    match p {
        Parsed::Request {
            method,
            path,
            query,
            ..
        } => req(method, &path, &query),
        other => other,
    }
}

#[test]
fn parse_head_fields() {
    let raw = b"PATCH /config HTTP/1.1\r\nHost: x\r\ncontent-length: 12\r\n\
        Authorization: Basic YTpi\r\nExpect: 100-continue\r\n\r\n{\"pause\":true}";
    let Parsed::Request { method, head, .. } = parse_request(raw) else {
        panic!("not a request");
    };
    assert_eq!(method, Method::Patch);
    assert_eq!(head.content_length, Some(12));
    assert_eq!(head.authorization.as_deref(), Some("Basic YTpi"));
    assert!(head.expect_continue);
    assert!(!head.transfer_encoding);
    assert_eq!(&raw[head.len..], b"{\"pause\":true}");
    let chunked = b"POST /switchover HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    let Parsed::Request { head, .. } = parse_request(chunked) else {
        panic!("not a request");
    };
    assert!(head.transfer_encoding);
    assert_eq!(head.content_length, None);
    for bad in [
        &b"PUT /config HTTP/1.1\r\nContent-Length: 1x\r\n\r\n"[..],
        b"PUT /config HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"PUT /config HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
        b"PUT /config HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        b"PUT /config HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    ] {
        assert!(
            matches!(parse_request(bad), Parsed::Bad(400, _)),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // The same length twice is one framing.
    let twice = b"PUT /config HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}";
    assert!(matches!(parse_request(twice), Parsed::Request { .. }));
}

#[test]
fn parse_good_requests() {
    assert_eq!(
        line_only(parse_request(
            b"GET /primary HTTP/1.1\r\nHost: x\r\nUser-Agent: haproxy\r\n\r\n"
        )),
        req(Method::Get, "/primary", "")
    );
    // HAProxy's `option httpchk` (HTTP/1.0, no headers).
    assert_eq!(
        line_only(parse_request(b"OPTIONS / HTTP/1.0\r\n\r\n")),
        req(Method::Options, "/", "")
    );
    assert_eq!(
        line_only(parse_request(
            b"HEAD /replica?lag=1MB&tag_dc=east HTTP/1.1\r\n\r\nbody-ignored"
        )),
        req(Method::Head, "/replica", "lag=1MB&tag_dc=east")
    );
    assert_eq!(
        line_only(parse_request(b"GET /replica?lag=1MB#frag HTTP/1.1\r\n\r\n")),
        req(Method::Get, "/replica", "lag=1MB")
    );
    assert_eq!(
        line_only(parse_request(
            b"POST /switchover HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        )),
        req(Method::Post, "/switchover", "")
    );
}

#[test]
fn parse_incomplete() {
    assert_eq!(parse_request(b""), Parsed::Incomplete);
    assert_eq!(parse_request(b"GE"), Parsed::Incomplete);
    assert_eq!(
        parse_request(b"GET /primary HTTP/1.1\r\n"),
        Parsed::Incomplete
    );
    assert_eq!(
        parse_request(b"GET /primary HTTP/1.1\r\nHost: x\r\n\r"),
        Parsed::Incomplete
    );
}

fn bad(buf: &[u8]) -> (u16, String) {
    match parse_request(buf) {
        Parsed::Bad(code, why) => (code, why),
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(buf)),
    }
}

#[test]
fn parse_malformed() {
    let (c, why) = bad(b"GET /primary\r\n\r\n");
    assert_eq!(c, 400, "{why}");
    let (c, why) = bad(b"GET  /primary HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400, "{why}");
    let (c, why) = bad(b"GET primary HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400);
    assert!(why.contains("must be a path"), "{why}");
    let (c, why) = bad(b"GET /primary HTTP/2.0\r\n\r\n");
    assert_eq!(c, 505, "{why}");
    let (c, why) = bad(b"GET /primary FTP/1.0\r\n\r\n");
    assert_eq!(c, 400);
    assert!(why.contains("HTTP version"), "{why}");
    let (c, why) = bad(b"GET /primary HTTP/1.1\r\nno colon here\r\n\r\n");
    assert_eq!(c, 400);
    assert!(why.contains("header"), "{why}");
    let (c, why) = bad(b"GET /pri\xffmary HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400, "{why}");
    let (c, why) = bad(b"G(T / HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400, "{why}");
    // A TLS ClientHello is refused at once, not after the read deadline.
    let (c, why) = bad(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
    assert_eq!(c, 400);
    assert!(why.contains("0x16"), "{why}");
    // Too many header lines.
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let (c, why) = bad(&many);
    assert_eq!(c, 431, "{why}");
}

#[test]
fn parse_oversized_head_is_431() {
    let mut buf = b"GET /primary HTTP/1.1\r\n".to_vec();
    while buf.len() < MAX_HEAD + 10 {
        buf.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let (c, _) = bad(&buf);
    assert!(c == 431, "{c}");
    buf.extend_from_slice(b"\r\n");
    assert_eq!(bad(&buf).0, 431);
    // Exactly at the limit with the terminator inside: accepted.
    let mut ok = b"GET / HTTP/1.1\r\nX: ".to_vec();
    ok.resize(MAX_HEAD - 4, b'a');
    ok.extend_from_slice(b"\r\n\r\n");
    assert_eq!(ok.len(), MAX_HEAD);
    assert!(matches!(parse_request(&ok), Parsed::Request { .. }));
}

#[test]
fn respond_error_is_complete() {
    let mut out = Vec::new();
    respond_error(400, "malformed \"thing\"", &mut out);
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"));
    let body = text.split_once("\r\n\r\n").expect("end").1;
    let v: Value = serde_json::from_str(body).expect("json");
    assert_eq!(v["error"], "malformed \"thing\"");
}

/// xorshift64*: deterministic, no crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn fuzz_never_panics() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let seeds: [&[u8]; 5] = [
        b"GET /primary HTTP/1.1\r\nHost: a\r\n\r\n",
        b"OPTIONS /replica?lag=1MB&tag_dc=east HTTP/1.0\r\n\r\n",
        b"HEAD /readiness?x=%ff&mode=write&lag=1.5kB HTTP/1.1\r\nA: b\r\n\r\n",
        b"GET /read-only-sync?lag=%31%30MB HTTP/1.1\r\n\r\n",
        b"\r\n\r\n",
    ];
    let alphabet = b" \r\n:/?&=%+.GETHPOS\x00\xff\xc3\xa9";
    let statuses = [primary(), replica(), stopped()];
    for i in 0..20_000 {
        let mut buf: Vec<u8> = if i % 2 == 0 {
            let n = (rng.next() % 64) as usize;
            (0..n).map(|_| rng.next() as u8).collect()
        } else {
            seeds[(rng.next() % 5) as usize].to_vec()
        };
        // Mutate: flip, insert alphabet bytes, truncate.
        for _ in 0..(rng.next() % 6) {
            if buf.is_empty() {
                break;
            }
            let at = (rng.next() as usize) % buf.len();
            match rng.next() % 3 {
                0 => buf[at] = rng.next() as u8,
                1 => buf.insert(at, alphabet[(rng.next() as usize) % alphabet.len()]),
                _ => buf.truncate(at),
            }
        }
        match parse_request(&buf) {
            Parsed::Request {
                method,
                path,
                query,
                ..
            } => {
                let mut out = Vec::new();
                respond(&method, &path, &query, &statuses[i % 3], &mut out);
                assert!(out.starts_with(b"HTTP/1.1 "));
            }
            Parsed::Bad(code, why) => {
                assert!((400..600).contains(&code));
                let mut out = Vec::new();
                respond_error(code, &why, &mut out);
                assert!(out.starts_with(b"HTTP/1.1 "));
            }
            Parsed::Incomplete => {}
        }
    }
    // Arbitrary queries and lags.
    for q in [
        "lag=9999999999999999999999",
        "lag=1.99999999999999999999999TB",
        "=",
        "=&=",
        "%",
        "tag_%",
    ] {
        let _ = parse_query(q);
    }
}

/// The member key's and `/patroni`'s `state` (Patroni's words): a running job
/// names what it does, else the role's state.
#[test]
fn pg_state_names_a_running_job_first() {
    use crate::api::fill::pg_state;
    use crate::core::model::{Job, JobKind, PgRole};
    let running = |kind: JobKind| Job::Running { kind, since: NOW };
    assert_eq!(pg_state(PgRole::Replica, &Job::Idle), "running");
    assert_eq!(pg_state(PgRole::Stopped, &Job::Idle), "stopped");
    assert_eq!(pg_state(PgRole::Unresponsive, &Job::Idle), "starting");
    assert_eq!(
        pg_state(
            PgRole::Stopped,
            &running(JobKind::Basebackup { from: "pg1".into() })
        ),
        "creating replica"
    );
    assert_eq!(
        pg_state(PgRole::Stopped, &running(JobKind::InitDb)),
        "initializing new cluster"
    );
    assert_eq!(
        pg_state(
            PgRole::Primary,
            &running(JobKind::Restart {
                start_timeout: None
            })
        ),
        "restarting"
    );
    // A rewind or a start is not named: the role's state.
    assert_eq!(
        pg_state(
            PgRole::Stopped,
            &running(JobKind::Rewind { from: "pg1".into() })
        ),
        "stopped"
    );
}
