//! Certificate expiry (crate::certs), with real certificates made by Debian's
//! `openssl` in a scratch directory and no etcd or PostgreSQL: the hand-written
//! DER walk reads `notAfter` as openssl itself prints it (UTCTime and, past 2049,
//! GeneralizedTime; EC and RSA keys); every truncation and every one-byte change
//! of a real certificate, and random bytes, give an answer and never a panic; and
//! `Config::load` keeps the `notAfter` of the API's certificate, the etcd client's
//! and each PostgreSQL role's `sslcert` from the reads it already makes.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/node_config.rs"]
mod node_config;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tenure::certs::{CertRole, not_after, subject_cn, validity};
use tenure::config::{Config, check_pg_tls_files};

use certs::Scratch;

/// `openssl x509 <args> -in <path>`'s output; a failure fails the test.
fn x509(args: &[&str], path: &Path) -> Vec<u8> {
    let out = Command::new("openssl")
        .arg("x509")
        .args(args)
        .arg("-in")
        .arg(path)
        .output()
        .expect("spawn openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The DER of the first certificate of the PEM file `path`.
fn der_of(path: &Path) -> Vec<u8> {
    x509(&["-outform", "DER"], path)
}

/// What openssl says a certificate's `notBefore`/`notAfter` are, as RFC 3339
/// (`-dateopt iso_8601` prints `2049-12-31 23:59:59Z`).
fn openssl_dates(path: &Path) -> (String, String) {
    let out = x509(
        &["-noout", "-startdate", "-enddate", "-dateopt", "iso_8601"],
        path,
    );
    let text = String::from_utf8(out).expect("utf8");
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} in {text}"))
            .replace(' ', "T")
    };
    (field("notBefore="), field("notAfter="))
}

fn rfc3339(unix: i64) -> String {
    tenure::clock::rfc3339_utc(Duration::from_secs(
        u64::try_from(unix).expect("after 1970"),
    ))
}

/// A self-signed certificate `name`.pem valid `days` days (EC P-256 or RSA).
fn self_signed(s: &Scratch, name: &str, days: u32, rsa: bool) -> std::path::PathBuf {
    let key = format!("{name}.key");
    let pem = format!("{name}.pem");
    let days = days.to_string();
    let subj = format!("/CN={name}");
    let mut args = vec!["openssl", "req", "-x509", "-nodes"];
    if rsa {
        args.extend(["-newkey", "rsa:2048"]);
    } else {
        args.extend(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]);
    }
    args.extend([
        "-keyout", &key, "-out", &pem, "-days", &days, "-subj", &subj,
    ]);
    certs::sh(&s.dir, &args);
    s.dir.join(pem)
}

#[test]
fn not_after_is_what_openssl_says() {
    let s = Scratch::new("cert-expiry-dates");
    let mut cases = vec![
        self_signed(&s, "ec30", 30, false),
        self_signed(&s, "rsa1", 1, true),
        // Past 2049: notAfter is a GeneralizedTime (RFC 5280 §4.1.2.5).
        self_signed(&s, "ec10000", 10_000, false),
    ];
    // A CA-signed one with explicit dates (a version-3 certificate with
    // extensions, notAfter 2020-01-02T00:00:00Z).
    certs::ca(&s.dir, "ca");
    certs::sign_expired(&s.dir, "old", "old");
    cases.push(s.dir.join("old.pem"));
    let mut kinds = Vec::new();
    for pem in &cases {
        let der = der_of(pem);
        let (nb, na) = validity(&der).unwrap_or_else(|e| panic!("{}: {e}", pem.display()));
        assert_eq!(
            (rfc3339(nb), rfc3339(na)),
            openssl_dates(pem),
            "{}",
            pem.display()
        );
        assert_eq!(not_after(&der), Ok(na));
        kinds.push(na);
    }
    assert_eq!(kinds[3], 1_577_923_200, "2020-01-02T00:00:00Z");
    assert!(
        kinds[2] > 2_524_608_000,
        "the 10,000-day one ends after 2049"
    );
    // -days N: N days after notBefore, to the second.
    let der = der_of(&cases[0]);
    let (nb, na) = validity(&der).expect("valid");
    assert_eq!(na - nb, 30 * 86_400);
}

#[test]
fn truncated_or_corrupted_certificates_never_panic() {
    let s = Scratch::new("cert-expiry-fuzz");
    let der = der_of(&self_signed(&s, "f", 30, true));
    let good = not_after(&der).expect("valid");
    // Every proper prefix is an error that names what is wrong.
    for n in 0..der.len() {
        let e = not_after(&der[..n]).expect_err("a truncated certificate");
        assert!(!e.to_string().is_empty());
        let e = subject_cn(&der[..n]).expect_err("a truncated certificate");
        assert!(!e.to_string().is_empty());
    }
    // Every byte changed (three ways): an answer, never a panic.
    let mut changed = der.clone();
    for i in 0..der.len() {
        for x in [0x00, 0xff, der[i] ^ 0x80] {
            changed[i] = x;
            let _ = not_after(&changed);
            let _ = subject_cn(&changed);
        }
        changed[i] = der[i];
    }
    // A change past the validity (in the signature) leaves notAfter as it was.
    let last = der.len() - 1;
    changed[last] ^= 0xff;
    assert_eq!(not_after(&changed), Ok(good));
    // Random bytes, and random bytes behind a plausible header (xorshift, fixed
    // seed: the same inputs every run).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut buf = vec![0u8; 512];
    for round in 0..20_000 {
        let len = (next() % 512) as usize;
        for b in &mut buf[..len] {
            *b = next() as u8;
        }
        if round % 2 == 0 && len >= 8 {
            // SEQUENCE / SEQUENCE headers, so the walk goes deeper.
            buf[..8].copy_from_slice(&[0x30, 0x82, 0x01, 0xf0, 0x30, 0x82, 0x01, 0xe0]);
        }
        let _ = not_after(&buf[..len]);
        let _ = subject_cn(&buf[..len]);
    }
}

/// The subject's first commonName, as PostgreSQL's `clientcert=verify-full` reads
/// it (`hba_clientcert`), for subjects openssl writes: a CN alone, a CN after other
/// attributes, two CNs (the first counts), a UTF-8 CN, and none.
#[test]
fn subject_cn_is_the_first_common_name() {
    let s = Scratch::new("cert-subject-cn");
    for (name, subj, want) in [
        ("alone", "/CN=replicator", Some("replicator")),
        (
            "after",
            "/C=DE/O=Example Org/OU=db/CN=rewind_user",
            Some("rewind_user"),
        ),
        ("two", "/CN=first/CN=second", Some("first")),
        ("utf8", "/O=x/CN=r\u{e9}plica", Some("r\u{e9}plica")),
        ("none", "/O=no common name", None),
    ] {
        let pem = self_signed_ec(&s, name, false, &["-utf8", "-subj", subj]);
        let der = der_of(&pem);
        let got = subject_cn(&der)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .map(|b| String::from_utf8(b.to_vec()).expect("utf8"));
        assert_eq!(got.as_deref(), want, "{name}");
    }
    // Signed by a CA: the subject's name, not the issuer's ("ca").
    certs::ca(&s.dir, "ca");
    certs::sign(
        &s.dir,
        "signed",
        "replicator",
        "extendedKeyUsage=clientAuth\n",
    );
    let der = der_of(&s.dir.join("signed.pem"));
    assert_eq!(subject_cn(&der), Ok(Some(&b"replicator"[..])));
    // A multi-valued RDN (O and CN in one SET).
    let der = der_of(&self_signed_ec(
        &s,
        "multi",
        true,
        &["-multivalue-rdn", "-subj", "/O=x+CN=r"],
    ));
    assert_eq!(subject_cn(&der), Ok(Some(&b"r"[..])));
    // A BMPString name (OpenSSL's `string_mask = default` for a character past
    // Latin-1): its bytes, NULs included, as PostgreSQL's OpenSSL keeps them.
    let der = der_of(&self_signed_ec(
        &s,
        "bmp",
        true,
        &["-utf8", "-subj", "/CN=r\u{142}"],
    ));
    assert_eq!(subject_cn(&der), Ok(Some(&[0, b'r', 0x01, 0x42][..])));
}

/// A self-signed EC certificate `name`.pem whose subject the extra `req`
/// arguments `args` give; with `default_mask`, made with `string_mask = default`
/// (no system openssl.cnf: a character past Latin-1 becomes a BMPString).
fn self_signed_ec(
    s: &Scratch,
    name: &str,
    default_mask: bool,
    args: &[&str],
) -> std::path::PathBuf {
    std::fs::write(
        s.dir.join("req.cnf"),
        "[req]\ndistinguished_name = dn\nstring_mask = default\n[dn]\n",
    )
    .expect("req.cnf");
    let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
    let mut a = vec!["openssl", "req"];
    if default_mask {
        a.extend_from_slice(&["-config", "req.cnf"]);
    }
    a.extend_from_slice(&[
        "-x509",
        "-nodes",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-keyout",
        &key,
        "-out",
        &pem,
        "-days",
        "1",
    ]);
    a.extend_from_slice(args);
    certs::sh(&s.dir, &a);
    s.dir.join(pem)
}

#[test]
fn config_load_keeps_each_certificates_not_after() {
    let s = Scratch::new("cert-expiry-config");
    certs::ca(&s.dir, "ca");
    certs::sign(
        &s.dir,
        "server",
        "127.0.0.1",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    certs::sign(&s.dir, "etcd", "pg1", "extendedKeyUsage=clientAuth\n");
    certs::sign(
        &s.dir,
        "repl",
        "replicator",
        "extendedKeyUsage=clientAuth\n",
    );
    for k in ["etcd.key", "repl.key"] {
        std::fs::set_permissions(
            s.dir.join(k),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("chmod");
    }
    let api = format!(
        "certfile = \"{}\"\nkeyfile = \"{}\"\n",
        s.p("server.pem"),
        s.p("server.key")
    );
    let text = node_config::node_config(&s.dir, "t", "https://127.0.0.1:2379", &api)
        .replace(
            "[timing]",
            &format!(
                "cacert = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n[timing]",
                s.p("ca.pem"),
                s.p("etcd.pem"),
                s.p("etcd.key")
            ),
        )
        .replace(
            "password = \"b\"",
            &format!(
                "password = \"b\"\nsslmode = \"verify-full\"\nsslrootcert = \"{}\"\nsslcert = \"{}\"\nsslkey = \"{}\"",
                s.p("ca.pem"),
                s.p("repl.pem"),
                s.p("repl.key")
            ),
        );
    let path = s.dir.join("node.toml");
    std::fs::write(&path, text).expect("write");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(CertRole, String, i64)> = c
        .certs
        .iter()
        .map(|e| (e.role, e.file.display().to_string(), e.not_after))
        .collect();
    let want = |role, f: &str| (role, s.p(f), not_after(&der_of(&s.dir.join(f))).expect(f));
    assert_eq!(
        got,
        [
            want(CertRole::Api, "server.pem"),
            want(CertRole::Etcd, "etcd.pem"),
            want(CertRole::Replication, "repl.pem"),
        ]
    );
    // And `check-config` prints them.
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("run tenure");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let na = rfc3339(got[1].2);
    assert!(
        stdout.contains("certificates (notAfter):")
            && stdout.contains(&format!("etcd         {na}  "))
            && stdout.contains("days left (warned about: 14 days or less)")
            && stdout.contains(&s.p("repl.pem")),
        "{stdout}"
    );
    // `[postgresql] hba_clientcert = "verify-full"`: PostgreSQL compares the client
    // certificate's first commonName with the role's name; a certificate it would
    // refuse is refused with the files, naming the key and both names.
    let now = tenure::clock::realtime().as_secs() as i64;
    let mut pg = c.postgresql.clone();
    pg.hba_clientcert = Some("verify-full".into());
    check_pg_tls_files(&pg, now).unwrap_or_else(|e| panic!("{e:?}"));
    pg.replication_user = "standby".into();
    let (key, problem) = check_pg_tls_files(&pg, now).expect_err("CN replicator, role standby");
    assert_eq!(key, "postgresql.authentication.replication.sslcert");
    assert!(
        problem.contains("commonName is \"replicator\", not the role's name \"standby\"")
            && problem.contains(&s.p("repl.pem")),
        "{problem}"
    );
    // `hba_method = "cert"` verifies in full: the same rule, named by its key (review
    // of 409d3a4, L2: only `client_cn_is_role()` was tested).
    pg.hba_clientcert = None;
    pg.hba_cert = true;
    let (key, problem) =
        check_pg_tls_files(&pg, now).expect_err("cert: CN replicator, role standby");
    assert_eq!(key, "postgresql.authentication.replication.sslcert");
    assert!(
        problem.contains("commonName is \"replicator\", not the role's name \"standby\"")
            && problem.contains("hba_method"),
        "{problem}"
    );
    pg.replication_user = "replicator".into();
    check_pg_tls_files(&pg, now).unwrap_or_else(|e| panic!("cert, matching CN: {e:?}"));
    pg.replication_user = "standby".into();
    pg.hba_cert = false;
    pg.hba_clientcert = Some("verify-ca".into());
    check_pg_tls_files(&pg, now).unwrap_or_else(|e| panic!("verify-ca has no CN rule: {e:?}"));
    // A commonName with a NUL byte (a BMPString name) fails PostgreSQL's TLS
    // handshake whenever the certificate is sent: refused with or without the option.
    let bmp = self_signed_ec(&s, "bmprepl", true, &["-utf8", "-subj", "/CN=r\u{142}"]);
    pg.replication_ssl.sslcert = Some(bmp.clone());
    for opt in [None, Some("verify-ca".to_string())] {
        pg.hba_clientcert = opt;
        let (key, problem) = check_pg_tls_files(&pg, now).expect_err("a NUL in the CN");
        assert_eq!(key, "postgresql.authentication.replication.sslcert");
        assert!(
            problem.contains("NUL byte") && problem.contains("embedded null"),
            "{problem}"
        );
    }
}
