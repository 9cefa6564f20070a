//! Unit tests: every endpoint, every method, malformed and random input.

use super::*;

fn primary() -> ApiStatus {
    ApiStatus {
        name: "pg1".into(),
        role: "primary",
        holds_leader_key: true,
        lease_valid: true,
        pg_running: true,
        pg_primary: true,
        streaming: false,
        epoch: Some(42),
        timeline: 3,
        lsn: 123_456,
        leader: Some("pg1".into()),
        state: "running".into(),
        reason: "no action: I am pg1, leader with the lock".into(),
        watchdog: Some(13),
        sync_standby: false,
    }
}

fn replica() -> ApiStatus {
    ApiStatus {
        name: "pg2".into(),
        role: "replica",
        holds_leader_key: false,
        lease_valid: false,
        pg_running: true,
        pg_primary: false,
        streaming: true,
        epoch: Some(42),
        timeline: 3,
        lsn: 123_000,
        leader: Some("pg1".into()),
        state: "running".into(),
        reason: "following pg1".into(),
        watchdog: None,
        sync_standby: false,
    }
}

fn stopped() -> ApiStatus {
    ApiStatus {
        name: "pg3".into(),
        role: "unknown",
        state: "stopped".into(),
        ..ApiStatus::default()
    }
}

/// (status code, headers, body) of the response to `GET path`.
fn get(path: &str, s: &ApiStatus) -> (u16, String, String) {
    call(&Method::Get, path, s)
}

fn call(m: &Method, path: &str, s: &ApiStatus) -> (u16, String, String) {
    let mut out = Vec::new();
    respond(m, path, s, &mut out);
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

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("content-length")
        .parse()
        .expect("number")
}

#[test]
fn primary_endpoints() {
    for p in ["/primary", "/master", "/read-write"] {
        assert_eq!(get(p, &primary()).0, 200, "{p}");
        assert_eq!(get(p, &replica()).0, 503, "{p}");
        assert_eq!(get(p, &stopped()).0, 503, "{p}");
        // Key held but lease not valid: not a primary for routing.
        let mut s = primary();
        s.lease_valid = false;
        assert_eq!(get(p, &s).0, 503, "{p}");
        // Key held but PostgreSQL not (yet) primary.
        let mut s = primary();
        s.pg_primary = false;
        assert_eq!(get(p, &s).0, 503, "{p}");
        // PostgreSQL primary without the key (about to be fenced): never 200.
        let mut s = primary();
        s.holds_leader_key = false;
        assert_eq!(get(p, &s).0, 503, "{p}");
        let mut s = primary();
        s.pg_running = false;
        assert_eq!(get(p, &s).0, 503, "{p}");
    }
}

#[test]
fn replica_endpoint() {
    assert_eq!(get("/replica", &replica()).0, 200);
    assert_eq!(get("/replica", &primary()).0, 503);
    assert_eq!(get("/replica", &stopped()).0, 503);
    let mut s = replica();
    s.streaming = false;
    assert_eq!(get("/replica", &s).0, 503);
    // A replica that just took the key (promoting) is no longer a replica target.
    let mut s = replica();
    s.holds_leader_key = true;
    assert_eq!(get("/replica", &s).0, 503);
}

#[test]
fn read_only_endpoint() {
    assert_eq!(get("/read-only", &primary()).0, 200);
    assert_eq!(get("/read-only", &replica()).0, 200);
    assert_eq!(get("/read-only", &stopped()).0, 503);
    let mut s = replica();
    s.streaming = false;
    assert_eq!(get("/read-only", &s).0, 503);
    let mut s = primary();
    s.lease_valid = false;
    assert_eq!(get("/read-only", &s).0, 503);
}

#[test]
fn health_and_leader() {
    assert_eq!(get("/health", &primary()).0, 200);
    assert_eq!(get("/health", &replica()).0, 200);
    assert_eq!(get("/health", &stopped()).0, 503);
    assert_eq!(get("/leader", &primary()).0, 200);
    assert_eq!(get("/leader", &replica()).0, 503);
    assert_eq!(get("/leader", &stopped()).0, 503);
}

#[test]
fn status_endpoints_and_json() {
    for p in ["/", "/patroni", "/status"] {
        for s in [primary(), replica(), stopped()] {
            assert_eq!(get(p, &s).0, 200, "{p}");
        }
    }
    let (_, head, body) = get("/patroni", &primary());
    assert_eq!(content_length(&head), body.len());
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["state"], "running");
    assert_eq!(v["role"], "primary");
    assert_eq!(v["timeline"], 3);
    assert_eq!(v["xlog"]["location"], 123_456);
    assert_eq!(v["patroni"]["name"], "pg1");
    assert_eq!(v["tenure"]["epoch"], 42);
    assert_eq!(v["tenure"]["leader"], "pg1");
    assert_eq!(v["tenure"]["watchdog_timeout"], 13);
    assert!(
        v["tenure"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("leader")
    );
    let v: serde_json::Value = serde_json::from_str(&get("/", &stopped()).2).expect("json");
    assert!(v["tenure"]["epoch"].is_null());
    assert!(v["tenure"]["watchdog_timeout"].is_null());
    // Health endpoints carry the status JSON too (503 included), like Patroni.
    let (code, _, body) = get("/primary", &replica());
    assert_eq!(code, 503);
    assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok());
}

#[test]
fn unknown_path_is_404_naming_it() {
    let (code, _, body) = get("/nope", &primary());
    assert_eq!(code, 404);
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["error"], "no such endpoint: /nope");
}

#[test]
fn head_and_options() {
    let (code, head, body) = call(&Method::Head, "/primary", &primary());
    assert_eq!(code, 200);
    assert!(body.is_empty());
    // HEAD declares the length GET would send.
    assert_eq!(content_length(&head), get("/primary", &primary()).2.len());
    let (code, head, body) = call(&Method::Options, "/primary", &replica());
    assert_eq!(code, 503);
    assert!(body.is_empty());
    assert_eq!(content_length(&head), 0);
    let (code, _, body) = call(&Method::Options, "/replica", &replica());
    assert_eq!(code, 200);
    assert!(body.is_empty());
    assert_eq!(call(&Method::Head, "/x", &replica()).0, 404);
}

#[test]
fn other_methods_405() {
    for m in ["POST", "PUT", "DELETE", "PATCH"] {
        let (code, head, body) = call(&Method::Other(m.into()), "/primary", &primary());
        assert_eq!(code, 405);
        assert!(head.contains("Allow: GET, HEAD, OPTIONS"));
        assert!(body.contains(&format!("method {m} not allowed")), "{body}");
    }
}

#[test]
fn parse_good_requests() {
    assert_eq!(
        parse_request(b"GET /primary HTTP/1.1\r\nHost: x\r\nUser-Agent: haproxy\r\n\r\n"),
        Parsed::Request {
            method: Method::Get,
            path: "/primary".into()
        }
    );
    assert_eq!(
        parse_request(b"OPTIONS / HTTP/1.0\r\n\r\n"),
        Parsed::Request {
            method: Method::Options,
            path: "/".into()
        }
    );
    assert_eq!(
        parse_request(b"HEAD /replica?lag=1MB HTTP/1.1\r\n\r\nbody-ignored"),
        Parsed::Request {
            method: Method::Head,
            path: "/replica".into()
        }
    );
    assert_eq!(
        parse_request(b"POST /switchover HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
        Parsed::Request {
            method: Method::Other("POST".into()),
            path: "/switchover".into()
        }
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
    assert_eq!(c, 400);
    assert!(why.contains("malformed request line"), "{why}");
    let (c, why) = bad(b"GET  /primary HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400, "{why}");
    let (c, why) = bad(b"GET primary HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400);
    assert!(why.contains("must be a path"), "{why}");
    let (c, why) = bad(b"GET /primary HTTP/2.0\r\n\r\n");
    assert_eq!(c, 505, "{why}");
    let (c, why) = bad(b"GET /primary FTP\r\n\r\n");
    assert_eq!(c, 400);
    assert!(why.contains("HTTP version"), "{why}");
    let (c, why) = bad(b"GET /primary HTTP/1.1\r\nno colon here\r\n\r\n");
    assert_eq!(c, 400);
    assert!(why.contains("header"), "{why}");
    let (c, why) = bad(b"GET /pri\xffmary HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400);
    assert!(why.contains("UTF-8"), "{why}");
    let (c, why) = bad(b"G(T / HTTP/1.1\r\n\r\n");
    assert_eq!(c, 400, "{why}");
    // A TLS ClientHello is refused at once, not after the read deadline.
    let (c, why) = bad(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
    assert_eq!(c, 400);
    assert!(why.contains("0x16"), "{why}");
}

#[test]
fn parse_oversized_head_is_431() {
    let mut buf = b"GET /primary HTTP/1.1\r\n".to_vec();
    while buf.len() < MAX_HEAD + 10 {
        buf.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    assert_eq!(bad(&buf).0, 431);
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
    let v: serde_json::Value = serde_json::from_str(body).expect("json");
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
    let seeds: [&[u8]; 4] = [
        b"GET /primary HTTP/1.1\r\nHost: a\r\n\r\n",
        b"OPTIONS /replica HTTP/1.0\r\n\r\n",
        b"HEAD /status?x=%ff HTTP/1.1\r\nA: b\r\n\r\n",
        b"\r\n\r\n",
    ];
    let alphabet = b" \r\n:/?GETHPOS\x00\xff\xc3\xa9";
    let statuses = [primary(), replica(), stopped()];
    for i in 0..20_000 {
        let mut buf: Vec<u8> = if i % 2 == 0 {
            let n = (rng.next() % 64) as usize;
            (0..n).map(|_| rng.next() as u8).collect()
        } else {
            seeds[(rng.next() % 4) as usize].to_vec()
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
            Parsed::Request { method, path } => {
                let mut out = Vec::new();
                respond(&method, &path, &statuses[i % 3], &mut out);
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
    // Arbitrary paths to respond(), including non-ASCII.
    for p in ["", "/\u{e9}", "/primary/", "//", "/%00"] {
        let mut out = Vec::new();
        respond(&Method::Get, p, &primary(), &mut out);
        assert!(out.starts_with(b"HTTP/1.1 404"));
    }
}

#[test]
fn sync_and_async_follow_the_sync_key() {
    let mut s = replica();
    assert_eq!(get("/sync", &s).0, 503);
    assert_eq!(get("/async", &s).0, 200);
    s.sync_standby = true;
    for p in ["/sync", "/synchronous"] {
        assert_eq!(get(p, &s).0, 200, "{p}");
    }
    for p in ["/async", "/asynchronous"] {
        assert_eq!(get(p, &s).0, 503, "{p}");
    }
    let v: serde_json::Value = serde_json::from_str(&get("/sync", &s).2).expect("json");
    assert_eq!(v["tenure"]["sync_standby"], true);
    // A primary is neither; a stopped replica neither.
    for st in [primary(), stopped()] {
        assert_eq!(get("/sync", &st).0, 503);
        assert_eq!(get("/async", &st).0, 503);
    }
}
