//! Certificates for the TLS tests, made with Debian's `openssl` in a scratch
//! directory (`#[path = "support/certs.rs"] mod certs;`): a CA, certificates it
//! signs (EC P-256 by default, RSA 2048 on request), and an expired one through
//! `openssl ca -startdate/-enddate` (OpenSSL 3 refuses `-days -1`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Run `args` in `dir`; a failure fails the test with openssl's words.
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

/// The `-newkey` arguments of a key kind.
fn newkey(rsa: bool) -> Vec<&'static str> {
    if rsa {
        vec!["-newkey", "rsa:2048"]
    } else {
        vec!["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    }
}

/// A key and a CSR with subject CN=`cn`.
pub fn key_csr(dir: &Path, name: &str, cn: &str, rsa: bool) {
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    let subj = format!("/CN={cn}");
    let mut args = vec!["openssl", "req", "-new"];
    args.extend(newkey(rsa));
    args.extend(["-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj]);
    sh(dir, &args);
}

/// A self-signed CA `name`.pem/.key.
pub fn ca(dir: &Path, name: &str) {
    let key = format!("{name}.key");
    let pem = format!("{name}.pem");
    let subj = format!("/CN={name}");
    let mut args = vec!["openssl", "req", "-x509"];
    args.extend(newkey(false));
    args.extend([
        "-nodes", "-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subj,
    ]);
    sh(dir, &args);
}

/// `name`.pem signed by `ca`.pem, valid now, with extensions `ext`.
pub fn sign_by(dir: &Path, ca: &str, name: &str, cn: &str, ext: &str, rsa: bool) {
    key_csr(dir, name, cn, rsa);
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

/// `name`.pem signed by ca.pem, valid now, with extensions `ext` (EC P-256).
pub fn sign(dir: &Path, name: &str, cn: &str, ext: &str) {
    sign_by(dir, "ca", name, cn, ext, false);
}

/// `name`.pem signed by ca.pem and valid only in 2020 (`openssl ca` takes
/// explicit dates), with extensions `ext`.
pub fn sign_expired_with(dir: &Path, name: &str, cn: &str, ext: &str) {
    key_csr(dir, name, cn, false);
    let d = dir.display();
    std::fs::write(dir.join("index.txt"), "").expect("index");
    std::fs::write(dir.join("serial"), "1000\n").expect("serial");
    std::fs::write(
        dir.join("ca.cnf"),
        format!(
            "[ca]\ndefault_ca = c\n[c]\ndatabase = {d}/index.txt\nnew_certs_dir = {d}\n\
             certificate = {d}/ca.pem\nprivate_key = {d}/ca.key\nserial = {d}/serial\n\
             default_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n"
        ),
    )
    .expect("ca.cnf");
    let ext_file = format!("{name}.ext");
    std::fs::write(dir.join(&ext_file), ext).expect("ext");
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
            &ext_file,
        ],
    );
}

/// A client certificate valid only in 2020.
pub fn sign_expired(dir: &Path, name: &str, cn: &str) {
    sign_expired_with(dir, name, cn, "extendedKeyUsage=clientAuth\n");
}

/// A scratch directory on tmpfs, removed on drop.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = PathBuf::from(format!("/dev/shm/tenure-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cert dir");
        Scratch { dir }
    }

    pub fn p(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
