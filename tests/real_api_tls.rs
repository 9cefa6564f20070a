//! Issue 12 test 3 on real parts: the REST API over TLS on a leader that keeps
//! renewing. One node (etcd, PostgreSQL, the agent) whose `[api]` serves
//! https:// with certificates made here with `openssl`:
//! - `curl --cacert` gets 200 from `/primary` on the leader;
//! - a write without credentials is 401, with them 200; `tenure ctl reload` works
//!   over https (its `[ctl]` falls back to the node's CA and certificate);
//! - a plain HTTP request gets a plain-text 400 naming the mistake;
//! - SIGHUP switches to `verify_client = "required"`: without a client
//!   certificate the handshake fails, with one it succeeds;
//! - a SIGHUP with a broken certificate is refused and logged, the old
//!   certificates keep serving;
//! - meanwhile a flood of TLS handshakes runs, and the renewals stay on their
//!   schedule (consecutive ticks at most `L_w + R` apart, DESIGN S6 d; no
//!   overrun), the leader key and its epoch unchanged (S1: API input never delays
//!   `F - B`).

#[path = "support/certs.rs"]
mod certs;
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tenure::testbed::cluster::{API_USER, TestCluster};
use tenure::testbed::wait_for;

use certs::Scratch;

/// `(CLOCK_BOOTTIME seconds)` of every line of `log` containing `needle`.
fn stamps(log: &str, needle: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.strip_prefix('[')?.split_once("s]")?.0.trim().parse().ok())
        .collect()
}

/// `curl` against node 0's API over https: `(http code, body)`; the code is 0
/// when no HTTP answer came (a failed handshake), `extra` are curl arguments.
fn curl(c: &TestCluster, certs: &Scratch, path: &str, extra: &[&str]) -> (u16, String) {
    let url = format!("https://{}:{}{path}", c.addr(0), c.api_port(0));
    curl_url(&url, &[&["--cacert", &certs.p("ca.pem")], extra].concat())
}

fn curl_url(url: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("spawn curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    let code = code.trim().parse().unwrap_or(0);
    if code == 0 {
        return (0, String::from_utf8_lossy(&out.stderr).into_owned());
    }
    (code, body.to_string())
}

/// Threads doing full TLS handshakes (and a `/liveness` each) against `addr`
/// until dropped: the CPU work a flood of TLS clients costs the agent.
struct Flood {
    stop: Arc<AtomicBool>,
    handshakes: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let handshakes = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let threads = (0..6)
            .map(|_| {
                let (stop, n, config) = (
                    Arc::clone(&stop),
                    Arc::clone(&handshakes),
                    Arc::clone(&config),
                );
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(120) {
                        let Ok(sock) =
                            TcpStream::connect_timeout(&addr, Duration::from_millis(500))
                        else {
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        };
                        let _ = sock.set_read_timeout(Some(Duration::from_secs(3)));
                        let _ = sock.set_write_timeout(Some(Duration::from_secs(3)));
                        let name =
                            rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
                        let Ok(conn) = rustls::ClientConnection::new(Arc::clone(&config), name)
                        else {
                            continue;
                        };
                        let mut tls = rustls::StreamOwned::new(conn, sock);
                        if tls
                            .write_all(b"GET /liveness HTTP/1.1\r\nHost: x\r\n\r\n")
                            .is_ok()
                        {
                            n.fetch_add(1, Ordering::Relaxed);
                            let mut out = Vec::new();
                            let _ = tls.read_to_end(&mut out);
                        }
                    }
                })
            })
            .collect();
        Flood {
            stop,
            handshakes,
            threads,
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Node 0's file with `[api]` lines `lines` (replacing the ones set before).
fn set_api_tls(c: &TestCluster, base: &str, lines: &str) {
    let text = base.replacen("[api]\n", &format!("[api]\n{lines}"), 1);
    std::fs::write(c.config_path(0), text).expect("write node config");
}

/// The `CERT_EXPIRING` lines of `log` for the API's certificate.
fn expiring_said(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("CERT_EXPIRING") && l.contains("cert=api") && l.contains("server.pem")
        })
        .count()
}

fn sighup(c: &TestCluster) {
    let pid = c.agent_pid(0).expect("agent runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
}

#[test]
fn real_api_over_tls_with_client_certificates_while_renewing() {
    let certs = Scratch::new("api-tls-real");
    certs::ca(&certs.dir, "ca");
    // The node's certificate also serves as ctl's client certificate (ctl falls
    // back to [api] certfile/keyfile), hence clientAuth too.
    certs::sign(
        &certs.dir,
        "server",
        "pg1",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    );
    certs::sign(
        &certs.dir,
        "client",
        "admin",
        "extendedKeyUsage=clientAuth\n",
    );
    std::fs::write(certs.dir.join("junk.pem"), "not a certificate\n").expect("junk");

    let mut opts = common::options("apitls", "real");
    // Every renewal tick's reason is judged below: unchanged ticks log at `debug`.
    opts.log_level = Some("debug".into());
    opts.nodes = 1;
    opts.api_auth = true;
    opts.start_agents = false;
    let mut c = common::start(opts);
    let base = std::fs::read_to_string(c.config_path(0)).expect("node config");
    assert!(c.addr(0).is_loopback());
    let tls_lines = |verify: &str, cert: &str| {
        format!(
            "certfile = \"{}\"\nkeyfile = \"{}\"\ncafile = \"{}\"\nverify_client = \"{verify}\"\n",
            certs.p(cert),
            certs.p("server.key"),
            certs.p("ca.pem"),
        )
    };
    set_api_tls(&c, &base, &tls_lines("none", "server.pem"));
    c.start_agent(0).expect("start agent");

    // The leader's /primary over https, checked as a load balancer would.
    let up = wait_for(common::BOOT, Duration::from_millis(300), || {
        (curl(&c, &certs, "/primary", &[]).0 == 200).then_some(())
    });
    assert!(
        up.is_some(),
        "/primary never answered 200 over https: {:?}{}",
        curl(&c, &certs, "/primary", &[]),
        c.logs_tail(40)
    );
    let (leader, epoch) = c.leader_key().expect("leader key");
    assert_eq!(leader, c.name(0));

    // Certificate expiry (crate::certs): the API's certificate ends in two days
    // (`-days 2`), so the start-up check says CERT_EXPIRING naming it, once, and
    // /metrics shows its notAfter.
    let der = Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(certs.dir.join("server.pem"))
        .output()
        .expect("spawn openssl")
        .stdout;
    let not_after = tenure::certs::not_after(&der).expect("server.pem's notAfter");
    assert_eq!(
        expiring_said(&c.agent_log(0)),
        1,
        "at start-up{}",
        c.logs_tail(40)
    );
    let (code, body) = curl(&c, &certs, "/metrics", &[]);
    assert_eq!(code, 200, "{body}");
    let gauge: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("tenure_tls_cert_expiry_timestamp_seconds{"))
        .collect();
    assert_eq!(gauge.len(), 1, "{gauge:?}");
    assert!(
        gauge[0].ends_with(&format!(",cert=\"api\"}} {not_after}")),
        "{gauge:?}, notAfter {not_after}"
    );
    let log_from = c.agent_log(0).len();

    // A flood of TLS handshakes from here on.
    let addr = SocketAddr::from((c.addr(0), c.api_port(0)));
    let flood_config = tenure::tls::client_config(Some(&certs.dir.join("ca.pem")), None, false)
        .expect("flood client config");
    let flood = Flood::start(addr, flood_config);
    let t0 = Instant::now();

    // Writes: 401 without credentials, 200 with them.
    // The write: a `PATCH /config` that keeps the value it sets.
    let patch = format!(
        "{{\"maximum_lag_on_failover\": {}}}",
        c.opts.maximum_lag_on_failover
    );
    let write = [
        "-X",
        "PATCH",
        "-H",
        "Content-Type: application/json",
        "-d",
        &patch,
    ];
    let (code, body) = curl(&c, &certs, "/config", &write);
    assert_eq!(code, 401, "{body}");
    let user = format!("{API_USER}:{}", c.passwords.api);
    let (code, body) = curl(
        &c,
        &certs,
        "/config",
        &[&write[..], &["-u", &user]].concat(),
    );
    assert_eq!(code, 200, "{body}");

    // Plain HTTP on the TLS port: a plain-text 400 naming the mistake.
    let (code, body) = curl_url(
        &format!("http://{}:{}/primary", c.addr(0), c.api_port(0)),
        &[],
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("plain HTTP request was sent to HTTPS port"),
        "{body}"
    );

    // tenure ctl over https (cacert from [api] cafile).
    let ctl = |what: &str| {
        let out = Command::new(&c.opts.binary)
            .args(["ctl", "--config"])
            .arg(c.config_path(0))
            .args(["reload", c.name(0)])
            .output()
            .expect("spawn ctl");
        assert!(
            out.status.success(),
            "ctl reload over https ({what}): {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    };
    ctl("verify_client none");

    // SIGHUP to verify_client = "required": no client certificate, no handshake.
    set_api_tls(&c, &base, &tls_lines("required", "server.pem"));
    let reload_from = c.agent_log(0).len();
    sighup(&c);
    let required = wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        (curl(&c, &certs, "/primary", &[]).0 == 0).then_some(())
    });
    assert!(
        required.is_some(),
        "still answered without a client certificate after the reload: {:?}{}",
        curl(&c, &certs, "/primary", &[]),
        c.logs_tail(30)
    );
    // The reload checked the certificate afresh: said again.
    let again = wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        (expiring_said(&c.agent_log(0)[reload_from..]) == 1).then_some(())
    });
    assert!(again.is_some(), "not said on reload{}", c.logs_tail(30));
    let (code, err) = curl(&c, &certs, "/primary", &[]);
    println!(
        "verify_client = required, no client certificate: {code} {}",
        err.trim()
    );
    let with_cert = [
        "--cert",
        &certs.p("client.pem"),
        "--key",
        &certs.p("client.key"),
    ];
    let (code, body) = curl(&c, &certs, "/primary", &with_cert);
    assert_eq!(code, 200, "with a client certificate: {body}");
    let (code, _) = curl(
        &c,
        &certs,
        "/config",
        &[&with_cert[..], &write[..]].concat(),
    );
    assert_eq!(
        code, 401,
        "a certificate is not a credential: both are needed"
    );
    let (code, body) = curl(
        &c,
        &certs,
        "/config",
        &[&with_cert[..], &write[..], &["-u", &user]].concat(),
    );
    assert_eq!(code, 200, "{body}");
    ctl("verify_client required, the node's certificate as ctl's");

    // A broken certificate on reload: refused, logged, the old ones keep serving.
    let before = c.agent_log(0).len();
    set_api_tls(&c, &base, &tls_lines("required", "junk.pem"));
    sighup(&c);
    let refused = wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        let log = c.agent_log(0);
        log[before..]
            .lines()
            .find(|l| l.contains("reload refused") && l.contains("junk.pem"))
            .map(str::to_string)
    });
    let line = refused.unwrap_or_else(|| panic!("no refusal logged{}", c.logs_tail(30)));
    println!("refused reload: {line}");
    let (code, body) = curl(&c, &certs, "/primary", &with_cert);
    assert_eq!(
        code, 200,
        "the running certificates stopped serving: {body}"
    );

    // Let the flood run a few renewals longer, then judge the renewals.
    let rest = Duration::from_secs(10).saturating_sub(t0.elapsed());
    std::thread::sleep(rest);
    let handshakes = flood.handshakes.load(Ordering::Relaxed);
    drop(flood);
    set_api_tls(&c, &base, &tls_lines("none", "server.pem"));

    let log = c.agent_log(0)[log_from..].to_string();
    assert!(
        !log.contains("loop overrun")
            && !log.contains("over its budget")
            && !log.contains("DEADLINE_OVERRUN"),
        "the loop fell behind under TLS load{}",
        c.logs_tail(40)
    );
    let ticks = stamps(&log, "leader with the lock, lease valid");
    assert!(
        ticks.len() > 5,
        "only {} ticks logged{}",
        ticks.len(),
        c.logs_tail(40)
    );
    let bound = (c.opts.loop_wait + c.opts.retry_timeout).as_secs_f64();
    let worst = ticks.windows(2).map(|w| w[1] - w[0]).fold(0.0f64, f64::max);
    assert!(
        worst <= bound,
        "renewal ticks {worst:.3} s apart, over L_w + R = {bound:.3} s{}",
        c.logs_tail(40)
    );
    assert_eq!(
        c.leader_key(),
        Some((c.name(0).to_string(), epoch)),
        "leadership changed under TLS load"
    );
    c.check_agents().expect("agent alive");
    // Said at start-up and after each good reload (SIGHUP or `tenure ctl reload`;
    // two reloads before one iteration are one check), nothing between: daily,
    // not per loop. The refused reload keeps the running certificates and their
    // schedule.
    let log = c.agent_log(0);
    let said: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("CERT_EXPIRING")
                || l.contains("SIGHUP: configuration reloaded from")
                || l.contains("POST /reload: configuration reloaded from")
        })
        .collect();
    let mut due = true; // start-up
    for l in &said {
        if l.contains("CERT_EXPIRING") {
            assert!(
                due,
                "said without a start-up or reload before it: {said:#?}"
            );
            due = false;
        } else {
            due = true;
        }
    }
    assert!(!due, "a reload was not followed by its check: {said:#?}");
    assert!(expiring_said(&log) >= 2, "{said:#?}");
    println!(
        "TLS API: {handshakes} flood handshakes in {:.1} s, {} renewal ticks, worst gap \
         {worst:.3} s (bound {bound:.3} s)",
        t0.elapsed().as_secs_f64(),
        ticks.len()
    );
}
