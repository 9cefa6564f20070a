//! Benchmark: the CPU one TLS handshake costs the API server (issue 12), with an
//! ECDSA P-256 and an RSA 2048 server certificate, and with a client certificate
//! to verify (`verify_client = "required"`, ECDSA client certificate).
//!
//! The handshake runs in memory (no socket): a rustls client and the server
//! configuration `tenure::tls::server_config` builds, bytes handed across by
//! hand. Only the server's side is timed: every `read_tls` +
//! `process_new_packets` + `write_tls` of the server for one handshake, summed.
//! That is what one connection costs a service pass of the agent's loop (at
//! most `HANDSHAKE_STEPS_PER_SERVICE` of those steps run per pass).
//! Certificates are made with `openssl` in a scratch directory.

#[path = "harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{STATS_HEAD, Stats, Table, stats_row};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use tenure::tls::VerifyClient;

fn sh(dir: &Path, args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .output()
        .expect("spawn openssl");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `name`.pem/.key signed by ca, with a key made by `newkey`.
fn sign(dir: &Path, name: &str, newkey: &[&str], ext: &str) {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let mut args = vec!["openssl", "req", "-new"];
    args.extend(newkey);
    args.extend(["-nodes", "-keyout", &key, "-out", &csr, "-subj", "/CN=x"]);
    sh(dir, &args);
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext");
    let extfile = format!("{name}.ext");
    sh(
        dir,
        &[
            "openssl",
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ],
    );
}

/// One handshake; the server side's time.
fn handshake(server: &Arc<ServerConfig>, client: &Arc<ClientConfig>) -> Duration {
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut c = ClientConnection::new(Arc::clone(client), name).expect("client");
    let mut s = ServerConnection::new(Arc::clone(server)).expect("server");
    let mut spent = Duration::ZERO;
    let mut rounds = 0;
    while c.is_handshaking() || s.is_handshaking() {
        rounds += 1;
        assert!(rounds < 10, "handshake does not finish");
        let mut to_server = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut to_server).expect("client write_tls");
        }
        let t = Instant::now();
        let mut rd = &to_server[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).expect("server read_tls");
        }
        s.process_new_packets().expect("server process");
        let mut to_client = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut to_client).expect("server write_tls");
        }
        spent += t.elapsed();
        let mut rd = &to_client[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).expect("client read_tls");
        }
        c.process_new_packets().expect("client process");
    }
    spent
}

fn main() {
    let dir = PathBuf::from(format!("/dev/shm/tenure-bench-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let rsa = ["-newkey", "rsa:2048"];
    sh(
        &dir,
        &[
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=ca",
        ],
    );
    let server_ext = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
    sign(&dir, "ec", &ec, server_ext);
    sign(&dir, "rsa", &rsa, server_ext);
    sign(&dir, "client", &ec, "extendedKeyUsage=clientAuth\n");
    let ca = dir.join("ca.pem");
    let server = |name: &str, verify| {
        tenure::tls::server_config(
            &dir.join(format!("{name}.pem")),
            &dir.join(format!("{name}.key")),
            Some(&ca),
            verify,
        )
        .expect("server config")
    };
    let plain_client = tenure::tls::client_config(Some(&ca), None, false).expect("client");
    let (cc, ck) = (dir.join("client.pem"), dir.join("client.key"));
    let cert_client =
        tenure::tls::client_config(Some(&ca), Some((&cc, &ck)), false).expect("client");

    // Full handshakes only: a client that resumes a session (TLS 1.3 PSK) skips
    // the server's signature, so a fresh client per connection is the worst case.
    let full = |c: Arc<ClientConfig>| {
        let mut c = (*c).clone();
        c.resumption = rustls::client::Resumption::disabled();
        Arc::new(c)
    };
    let (plain_client, cert_client) = (full(plain_client), full(cert_client));
    let resuming = tenure::tls::client_config(Some(&ca), None, false).expect("client");
    let cases: [(&str, Arc<ServerConfig>, &Arc<ClientConfig>); 4] = [
        (
            "ECDSA P-256 server cert",
            server("ec", VerifyClient::None),
            &plain_client,
        ),
        (
            "RSA 2048 server cert",
            server("rsa", VerifyClient::None),
            &plain_client,
        ),
        (
            "ECDSA P-256, resumed session",
            server("ec", VerifyClient::None),
            &resuming,
        ),
        (
            "ECDSA P-256 + client cert (required)",
            server("ec", VerifyClient::Required),
            &cert_client,
        ),
    ];
    let mut table = Table::new(&STATS_HEAD);
    for (what, s, c) in cases {
        for _ in 0..20 {
            handshake(&s, c);
        }
        let samples: Vec<Duration> = (0..300).map(|_| handshake(&s, c)).collect();
        let st = Stats::of_durations(&samples).expect("samples");
        table.row(stats_row(what, &st));
    }
    println!("server-side CPU of one TLS 1.3 handshake (rustls 0.23, ring):");
    println!("{}", table.render());
    let _ = std::fs::remove_dir_all(&dir);
}
