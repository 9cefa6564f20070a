//! Issue 12, the REST API over TLS, without etcd or PostgreSQL: the API server
//! (`api::server::ApiServer`) driven here as the loop drives it, real rustls
//! clients on loopback, certificates made with `openssl` in a scratch directory.
//! What is checked: the handshake and an answer over https; a plain HTTP request
//! on the TLS port gets a plain-text 400; `verify_client = "required"` fails the
//! handshake without a client certificate and passes with one; `"optional"`
//! refuses writes without one (403, Patroni's words) and then asks for basic
//! credentials (certificate AND credentials); `read_auth` keeps health checks
//! open; handshake work per service call is bounded; certificate files that are
//! unreadable, not PEM, mismatched or expired are refused naming the file; and
//! the `[api]`/`[ctl]` keys are validated.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/node_config.rs"]
mod node_config;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use tenure::api::ApiStatus;
use tenure::api::server::{ApiServer, HANDSHAKE_STEPS_PER_SERVICE, Served};
use tenure::config::{ApiAuth, ApiTls, Config, ReadAuth, VerifyClient, check_api_tls_files};
use tenure::core::time::Instant;

use certs::Scratch;

const SERVER_EXT: &str = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
const CLIENT_EXT: &str = "extendedKeyUsage=clientAuth\n";

/// A CA, a server certificate for 127.0.0.1, a client certificate, another
/// CA's client certificate, an expired server certificate and an RSA one.
fn make_certs() -> Scratch {
    let s = Scratch::new("api-tls-unit");
    certs::ca(&s.dir, "ca");
    certs::ca(&s.dir, "otherca");
    certs::sign(&s.dir, "server", "api", SERVER_EXT);
    certs::sign(&s.dir, "client", "admin", CLIENT_EXT);
    certs::sign_by(&s.dir, "otherca", "stranger", "stranger", CLIENT_EXT, false);
    certs::sign_expired_with(&s.dir, "expired", "api", SERVER_EXT);
    s
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap()
}

fn server(
    rt: &tokio::runtime::Runtime,
    s: &Scratch,
    verify: VerifyClient,
) -> (ApiServer, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let _g = rt.enter();
    let mut api = ApiServer::new(l).unwrap();
    let ca = s.dir.join("ca.pem");
    let tls = tenure::tls::server_config(
        &s.dir.join("server.pem"),
        &s.dir.join("server.key"),
        Some(&ca),
        verify,
    )
    .expect("server config");
    api.set_tls(Some(tls), verify, ReadAuth::None);
    api.set_auth(Some(ApiAuth {
        username: "admin".into(),
        password: "pw".into(),
    }));
    (api, addr)
}

/// Service as the loop does (wait for readiness, then one bounded call) until
/// `f` holds or 5 s pass.
fn service_until(
    rt: &tokio::runtime::Runtime,
    s: &mut ApiServer,
    mut f: impl FnMut(&ApiServer, &Served) -> bool,
) -> Served {
    let now = Instant::from_nanos(1_000_000_000);
    let mut all = Served::default();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        rt.block_on(async {
            let _ = tokio::time::timeout(Duration::from_millis(20), s.ready()).await;
        });
        let _g = rt.enter();
        let d = s.service(now, &ApiStatus::default());
        all += d;
        assert!(
            d.handshake_steps <= HANDSHAKE_STEPS_PER_SERVICE,
            "{} handshake steps in one service call",
            d.handshake_steps
        );
        if f(s, &all) {
            break;
        }
    }
    all
}

fn client_config(s: &Scratch, cert: Option<&str>) -> Arc<ClientConfig> {
    let (c, k) = (
        cert.map(|n| s.dir.join(format!("{n}.pem"))),
        cert.map(|n| s.dir.join(format!("{n}.key"))),
    );
    tenure::tls::client_config(
        Some(&s.dir.join("ca.pem")),
        c.as_deref().zip(k.as_deref()),
        false,
    )
    .expect("client config")
}

/// A client thread: one request over TLS; the answer's text or the error.
fn https(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    request: String,
) -> std::thread::JoinHandle<Result<String, String>> {
    https_after(addr, config, request, None)
}

/// [`https`], connected at once but sending its ClientHello only once `gate`
/// opens.
fn https_after(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    request: String,
    gate: Option<Arc<std::sync::Barrier>>,
) -> std::thread::JoinHandle<Result<String, String>> {
    std::thread::spawn(move || {
        let sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        sock.set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        if let Some(g) = gate {
            g.wait();
        }
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let conn = ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        let mut tls = StreamOwned::new(conn, sock);
        tls.write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        match tls.read_to_end(&mut out) {
            Ok(_) => Ok(String::from_utf8_lossy(&out).into_owned()),
            Err(e) if !out.is_empty() => {
                Err(format!("{e} after {}", String::from_utf8_lossy(&out)))
            }
            Err(e) => Err(e.to_string()),
        }
    })
}

/// `admin:pw`.
const AUTH: &str = "Authorization: Basic YWRtaW46cHc=\r\n";

fn write_req(auth: &str) -> String {
    format!("POST /reload HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 0\r\n\r\n")
}

/// Run one client request against the server, servicing until the client is done.
fn exchange(
    rt: &tokio::runtime::Runtime,
    api: &mut ApiServer,
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    request: String,
) -> (Result<String, String>, Served) {
    let h = https(addr, config, request);
    let d = service_until(rt, api, |_, d| {
        (d.answered > 0 || d.tls_failed > 0 || d.parked > 0) && h.is_finished()
    });
    (h.join().unwrap(), d)
}

#[test]
fn https_answers_and_plain_http_on_the_tls_port_gets_a_plain_400() {
    let s = make_certs();
    let rt = rt();
    let (mut api, addr) = server(&rt, &s, VerifyClient::None);
    let (r, _) = exchange(
        &rt,
        &mut api,
        addr,
        client_config(&s, None),
        "GET /health HTTP/1.1\r\nHost: x\r\n\r\n".into(),
    );
    let text = r.expect("an https answer");
    assert!(text.starts_with("HTTP/1.1 "), "{text}");
    assert!(text.contains("\"state\""), "{text}");

    // Plain HTTP on the TLS port: a plain-text 400 saying so (never a panic, never
    // a TLS alert the client cannot read).
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /primary HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let d = service_until(&rt, &mut api, |_, d| d.plain_http == 1);
    assert_eq!(d.plain_http, 1);
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(
        out.contains("The plain HTTP request was sent to HTTPS port"),
        "{out}"
    );
}

#[test]
fn verify_client_required_fails_the_handshake_without_a_certificate() {
    let s = make_certs();
    let rt = rt();
    let (mut api, addr) = server(&rt, &s, VerifyClient::Required);
    let get = || "GET /health HTTP/1.1\r\nHost: x\r\n\r\n".to_string();
    let (r, d) = exchange(&rt, &mut api, addr, client_config(&s, None), get());
    assert!(r.is_err(), "answered without a client certificate: {r:?}");
    assert_eq!(d.tls_failed, 1);
    // One from another CA fails too.
    let (r, _) = exchange(
        &rt,
        &mut api,
        addr,
        client_config(&s, Some("stranger")),
        get(),
    );
    assert!(r.is_err(), "answered a certificate of another CA: {r:?}");
    // With one: answered; a write still needs the credentials (AND, as Patroni).
    let (r, _) = exchange(
        &rt,
        &mut api,
        addr,
        client_config(&s, Some("client")),
        get(),
    );
    assert!(r.expect("answered").starts_with("HTTP/1.1 "));
    let (r, _) = exchange(
        &rt,
        &mut api,
        addr,
        client_config(&s, Some("client")),
        write_req(""),
    );
    let text = r.expect("answered");
    assert!(text.starts_with("HTTP/1.1 401 "), "{text}");
    let h = https(addr, client_config(&s, Some("client")), write_req(AUTH));
    let d = service_until(&rt, &mut api, |_, d| d.parked == 1);
    assert_eq!(
        d.parked, 1,
        "the authenticated write was not handed to the loop"
    );
    drop(api);
    let _ = h.join();
}

#[test]
fn verify_client_optional_refuses_writes_without_a_certificate_first() {
    let s = make_certs();
    let rt = rt();
    let (mut api, addr) = server(&rt, &s, VerifyClient::Optional);
    // No certificate: the handshake passes, reads answer, writes are 403 even
    // with the right credentials (Patroni's check_access order).
    let (r, _) = exchange(
        &rt,
        &mut api,
        addr,
        client_config(&s, None),
        "GET /health HTTP/1.1\r\nHost: x\r\n\r\n".into(),
    );
    assert!(r.expect("answered").starts_with("HTTP/1.1 "));
    let (r, _) = exchange(
        &rt,
        &mut api,
        addr,
        client_config(&s, None),
        write_req(AUTH),
    );
    let text = r.expect("answered");
    assert!(text.starts_with("HTTP/1.1 403 "), "{text}");
    assert!(text.ends_with("client certificate required"), "{text}");
    // A certificate and no credentials: 401; both: handed to the loop.
    let (r, _) = exchange(
        &rt,
        &mut api,
        addr,
        client_config(&s, Some("client")),
        write_req(""),
    );
    assert!(r.expect("answered").starts_with("HTTP/1.1 401 "));
    let h = https(addr, client_config(&s, Some("client")), write_req(AUTH));
    let d = service_until(&rt, &mut api, |_, d| d.parked == 1);
    assert_eq!(d.parked, 1);
    drop(api);
    let _ = h.join();
}

#[test]
fn read_auth_except_health_keeps_health_checks_open() {
    let s = make_certs();
    let rt = rt();
    let (mut api, addr) = server(&rt, &s, VerifyClient::None);
    let tls = tenure::tls::server_config(
        &s.dir.join("server.pem"),
        &s.dir.join("server.key"),
        None,
        VerifyClient::None,
    )
    .unwrap();
    api.set_tls(Some(tls), VerifyClient::None, ReadAuth::ExceptHealth);
    let get = |path: &str, auth: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n");
    let c = || client_config(&s, None);
    let (r, _) = exchange(&rt, &mut api, addr, c(), get("/health", ""));
    assert!(!r.expect("answered").starts_with("HTTP/1.1 401"));
    let (r, _) = exchange(&rt, &mut api, addr, c(), get("/patroni", ""));
    assert!(r.expect("answered").starts_with("HTTP/1.1 401 "));
    let (r, _) = exchange(&rt, &mut api, addr, c(), get("/patroni", AUTH));
    assert!(r.expect("answered").starts_with("HTTP/1.1 200 "));
}

#[test]
fn handshake_work_per_service_call_is_bounded() {
    let s = make_certs();
    let rt = rt();
    let (mut api, addr) = server(&rt, &s, VerifyClient::None);
    let n = 3 * HANDSHAKE_STEPS_PER_SERVICE;
    let gate = Arc::new(std::sync::Barrier::new(n + 1));
    let clients: Vec<_> = (0..n)
        .map(|_| {
            https_after(
                addr,
                client_config(&s, None),
                "GET /liveness HTTP/1.1\r\nHost: x\r\n\r\n".into(),
                Some(Arc::clone(&gate)),
            )
        })
        .collect();
    // All connected (nothing sent yet), then every ClientHello in at once.
    service_until(&rt, &mut api, |s, _| s.open() == n);
    gate.wait();
    // Time for every client to send (two busy cores); the bound must hold whatever
    // number arrived, and at least 4 of 12 have by then.
    std::thread::sleep(Duration::from_secs(1));
    rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(1), api.ready()).await;
    });
    let _g = rt.enter();
    let d = api.service(Instant::from_nanos(1_000_000_000), &ApiStatus::default());
    drop(_g);
    assert_eq!(
        d.handshake_steps, HANDSHAKE_STEPS_PER_SERVICE,
        "one call ran {} handshake steps with {n} clients waiting",
        d.handshake_steps
    );
    // The rest are served by later calls: every client gets its answer.
    let d = service_until(&rt, &mut api, |_, _| {
        clients.iter().all(|h| h.is_finished())
    });
    assert!(d.handshake_steps >= n, "{d:?}");
    for h in clients {
        let text = h.join().unwrap().expect("answered");
        assert!(text.starts_with("HTTP/1.1 "), "{text}");
    }
}

fn tls_of(s: &Scratch, cert: &str, key: &str) -> ApiTls {
    ApiTls {
        certfile: s.dir.join(cert),
        keyfile: s.dir.join(key),
        cafile: None,
        verify_client: VerifyClient::None,
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn bad_certificate_files_are_refused_naming_the_file() {
    let s = make_certs();
    std::fs::write(s.dir.join("junk.pem"), "not a certificate\n").unwrap();
    // Valid: its notAfter, two days (`-days 2`) from when it was made.
    let not_after = check_api_tls_files(&tls_of(&s, "server.pem", "server.key"), now())
        .expect("a valid certificate");
    assert!((not_after - now() - 2 * 86_400).abs() < 600, "{not_after}");
    let cases = [
        ("missing.pem", "server.key", "missing.pem", "cannot read"),
        ("junk.pem", "server.key", "junk.pem", "no PEM CERTIFICATE"),
        ("server.pem", "junk.pem", "junk.pem", "no PEM PRIVATE KEY"),
        ("server.pem", "client.key", "does not match", "client.key"),
        (
            "expired.pem",
            "expired.key",
            "expired.pem",
            "expired at 2020-01-02",
        ),
    ];
    for (cert, key, names, says) in cases {
        let e = check_api_tls_files(&tls_of(&s, cert, key), now()).unwrap_err();
        assert!(e.contains(names) && e.contains(says), "{cert}/{key}: {e}");
    }
    // Through the whole file: `Config::load` refuses, naming the key and the file.
    let path = s.dir.join("node.toml");
    let extra = format!(
        "certfile = \"{}\"\nkeyfile = \"{}\"\n",
        s.p("server.pem"),
        s.p("client.key")
    );
    std::fs::write(
        &path,
        node_config::node_config(&s.dir, "t", "http://127.0.0.1:2379", &extra),
    )
    .unwrap();
    let e = Config::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("api") && e.contains("client.key") && e.contains("does not match"),
        "{e}"
    );
}

fn parse(api_extra: &str, more: &str) -> Result<Config, String> {
    let dir = Path::new("/nonexistent");
    let text = node_config::node_config(dir, "t", "http://127.0.0.1:2379", api_extra) + more;
    Config::parse(Path::new("/x/node.toml"), &text).map_err(|e| e.to_string())
}

#[test]
fn api_tls_and_ctl_keys_are_validated() {
    // Defaults: plain HTTP, reads open, no ctl TLS.
    let c = parse("", "").unwrap();
    assert!(c.api.tls.is_none());
    assert_eq!(c.api.read_auth, ReadAuth::None);
    assert!(c.api.connect_url.starts_with("http://"));

    // certfile alone: the key in the same file, https:// published.
    let c = parse("certfile = \"/t/api.pem\"\n", "").unwrap();
    let t = c.api.tls.unwrap();
    assert_eq!(
        (t.keyfile.to_str(), t.verify_client),
        (Some("/t/api.pem"), VerifyClient::None)
    );
    assert_eq!(c.api.connect_url, "https://127.0.0.1:18008");

    let full = "certfile = \"/t/api.pem\"\nkeyfile = \"/t/api.key\"\ncafile = \"/t/ca.pem\"\n\
                verify_client = \"required\"\n";
    let c = parse(full, "").unwrap();
    assert_eq!(c.api.tls.unwrap().verify_client, VerifyClient::Required);
    // ctl falls back to the node's CA and, as the API verifies clients, its files.
    assert_eq!(c.ctl.cacert.as_deref(), Some(Path::new("/t/ca.pem")));
    assert_eq!(c.ctl.cert, Some(("/t/api.pem".into(), "/t/api.key".into())));
    let c = parse(
        full,
        "[ctl]\ncacert = \"/c/ca.pem\"\ncertfile = \"/c/me.pem\"\nkeyfile = \"/c/me.key\"\ninsecure = true\n",
    )
    .unwrap();
    assert_eq!(c.ctl.cacert.as_deref(), Some(Path::new("/c/ca.pem")));
    assert_eq!(c.ctl.cert, Some(("/c/me.pem".into(), "/c/me.key".into())));
    assert!(c.ctl.insecure);

    for (api, more, key, says) in [
        (
            "keyfile = \"/t/k\"\n",
            "",
            "keyfile",
            "needs [api] certfile",
        ),
        ("cafile = \"/t/ca\"\n", "", "cafile", "needs [api] certfile"),
        (
            "verify_client = \"required\"\n",
            "",
            "verify_client",
            "needs [api] certfile",
        ),
        (
            "certfile = \"/t/c\"\nverify_client = \"required\"\n",
            "",
            "verify_client",
            "needs [api] cafile",
        ),
        (
            "certfile = \"/t/c\"\nverify_client = \"optional\"\n",
            "",
            "verify_client",
            "needs [api] cafile",
        ),
        (
            "certfile = \"/t/c\"\ncafile = \"/t/a\"\nverify_client = \"yes\"\n",
            "",
            "verify_client",
            "\"yes\"",
        ),
        (
            "certfile = \"relative.pem\"\n",
            "",
            "certfile",
            "absolute path",
        ),
        (
            "read_auth = \"all\"\n",
            "",
            "read_auth",
            "needs [api] username and password",
        ),
        (
            "username = \"u\"\npassword = \"p\"\nread_auth = \"some\"\n",
            "",
            "read_auth",
            "\"some\"",
        ),
        (
            "certfile = \"/t/c\"\nconnect_url = \"http://10.0.0.1:8008\"\n",
            "",
            "connect_url",
            "must be https://",
        ),
        (
            "connect_url = \"https://10.0.0.1:8008\"\n",
            "",
            "connect_url",
            "plain HTTP",
        ),
        (
            "",
            "[ctl]\nkeyfile = \"/k\"\n",
            "keyfile",
            "needs [ctl] certfile",
        ),
        ("", "[ctl]\nverify = true\n", "verify", "unknown key"),
        (
            "",
            "[ctl]\ninsecure = \"yes\"\n",
            "insecure",
            "true or false",
        ),
    ] {
        let e = parse(api, more).expect_err(api);
        assert!(e.contains(key) && e.contains(says), "{api}{more}: {e}");
    }
    // Credentials make read_auth valid.
    let c = parse(
        "username = \"u\"\npassword = \"p\"\nread_auth = \"except_health\"\n",
        "",
    )
    .unwrap();
    assert_eq!(c.api.read_auth, ReadAuth::ExceptHealth);
}
