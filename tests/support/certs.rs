//! Certificates for the real-part tests, made with Debian's `openssl` in a
//! test's scratch directory (`#[path = "support/certs.rs"] mod certs;`): a CA, keys
//! and CSRs, certificates signed by a CA of the test's choosing, and an expired one
//! (`openssl ca -startdate/-enddate`: OpenSSL 3 refuses `-days -1`). EC P-256 keys:
//! fast to make. Used by tests/real_tls.rs (etcd) and tests/real_pg_ssl.rs.

// Each test binary uses a different subset.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

pub fn sh(dir: &Path, args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("spawn {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A key and a CSR with subject CN=`cn` (EC P-256: fast to make).
pub fn key_csr(dir: &Path, name: &str, cn: &str) {
    sh(
        dir,
        &[
            "openssl",
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
}

/// A self-signed CA `name`.pem/.key.
pub fn ca(dir: &Path, name: &str) {
    sh(
        dir,
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
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

/// `name`.pem signed by ca.pem, valid now, with extensions `ext`.
pub fn sign(dir: &Path, name: &str, cn: &str, ext: &str) {
    sign_by(dir, "ca", name, cn, ext);
}

/// `name`.pem signed by `<ca>`.pem, valid now, with extensions `ext`.
pub fn sign_by(dir: &Path, ca: &str, name: &str, cn: &str, ext: &str) {
    key_csr(dir, name, cn);
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext");
    sh(
        dir,
        &[
            "openssl",
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

/// `name`.pem signed by ca.pem and valid only in 2020 (`openssl ca` takes
/// explicit dates).
pub fn sign_expired(dir: &Path, name: &str, cn: &str) {
    key_csr(dir, name, cn);
    ca_config(dir);
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
    sh(
        dir,
        &[
            "openssl",
            "ca",
            "-batch",
            "-config",
            "ca.cnf",
            "-in",
            &format!("{name}.csr"),
            "-out",
            &format!("{name}.pem"),
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
            "-extfile",
            "client.ext",
        ],
    );
}

/// `ca.crl`: ca.pem's certificate revocation list (nothing revoked), valid two days.
pub fn crl(dir: &Path) {
    ca_config(dir);
    sh(
        dir,
        &[
            "openssl", "ca", "-gencrl", "-config", "ca.cnf", "-crldays", "2", "-out", "ca.crl",
        ],
    );
}

/// `openssl ca`'s configuration for ca.pem/ca.key, an empty index and a serial.
/// Paths relative to `dir` (every command runs there): OpenSSL's config syntax
/// would take quotes in a directory's name as its own.
fn ca_config(dir: &Path) {
    std::fs::write(dir.join("index.txt"), "").expect("index");
    std::fs::write(dir.join("serial"), "1000\n").expect("serial");
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = c\n[c]\ndatabase = index.txt\nnew_certs_dir = .\n\
         certificate = ca.pem\nprivate_key = ca.key\nserial = serial\n\
         default_md = sha256\ndefault_crl_days = 2\npolicy = p\n[p]\ncommonName = supplied\n",
    )
    .expect("ca.cnf");
}
