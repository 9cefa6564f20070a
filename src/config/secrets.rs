//! Secrets and etcd security settings: passwords from the file, a `password_file`
//! or systemd's `$CREDENTIALS_DIRECTORY`; `[etcd]` TLS and authentication keys; the
//! start-up check of certificate files; the warning for a config file others can
//! read while it holds a password.
//!
//! Owns: where a secret comes from and that it never reaches a log line (`Debug`
//! of every config struct that holds one prints `<hidden>`). Must never: print a
//! secret in an error or a `Debug`, panic on a bad file, or guess (a `password`
//! and a `password_file` together are refused, not ranked).

use std::fmt;
use std::path::{Path, PathBuf};

use super::{ConfigError, PgConfig, Sect};

/// systemd credential names (`LoadCredential=<name>:<path>`), read from
/// `$CREDENTIALS_DIRECTORY/<name>` when the file sets neither `password` nor
/// `password_file` for that secret.
pub const CRED_API: &str = "tenure-api-password";
pub const CRED_ETCD: &str = "tenure-etcd-password";
pub const CRED_PG_SUPERUSER: &str = "tenure-pg-superuser-password";
pub const CRED_PG_REPLICATION: &str = "tenure-pg-replication-password";
pub const CRED_PG_REWIND: &str = "tenure-pg-rewind-password";

/// A secret file holds one line: one trailing newline (as `echo` writes it) is
/// not part of the secret.
fn read_secret_file(path: &Path) -> Result<String, String> {
    let mut s = super::read_text(path, super::SMALL_FILE_MAX)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if s.ends_with('\n') {
        s.pop();
        if s.ends_with('\r') {
            s.pop();
        }
    }
    if s.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    if s.contains(['\n', '\r', '\0']) {
        return Err(format!(
            "{} must hold one line (no newline or NUL inside the secret)",
            path.display()
        ));
    }
    Ok(s)
}

/// The secret of table `s`: `password`, or the content of `password_file`, or
/// `$CREDENTIALS_DIRECTORY/<credential>` when neither is set; `None` when none
/// of them exists. Errors name the key or the file, never the secret.
pub(super) fn secret(s: &Sect<'_>, credential: &str) -> Result<Option<String>, ConfigError> {
    let inline = s.string("password")?;
    let file = s.path("password_file")?;
    match (inline, file) {
        (Some(_), Some(_)) => {
            Err(s.err("password_file", "set password or password_file, not both"))
        }
        (Some(p), None) => {
            // As an empty `password_file` is: an empty password is no password, and
            // where a role may go without one (`hba_method = "cert"`) that is said
            // by leaving the key out, not by `""` (review of 409d3a4, M1: `""` under
            // scram created a replication role without a password, found at the
            // first base backup).
            if p.is_empty() {
                return Err(s.err(
                    "password",
                    "must be non-empty (for no password leave the key out: only the \
                     replication and rewind roles may go without one, under \
                     [postgresql] hba_method = \"cert\")",
                ));
            }
            if p.contains(['\n', '\r', '\0']) {
                return Err(s.err(
                    "password",
                    "must not contain a newline or NUL (control characters)",
                ));
            }
            Ok(Some(p))
        }
        (None, Some(f)) => read_secret_file(&f)
            .map(Some)
            .map_err(|p| s.err("password_file", p)),
        (None, None) => {
            let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") else {
                return Ok(None);
            };
            let f = PathBuf::from(dir).join(credential);
            if !f.exists() {
                return Ok(None);
            }
            read_secret_file(&f)
                .map(Some)
                .map_err(|p| s.err("password", format!("credential {credential}: {p}")))
        }
    }
}

/// `[etcd]` TLS: a CA bundle, an optional client certificate and key, and the
/// name the server's certificate must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM CA bundle the etcd members' certificates must chain to.
    pub cacert: PathBuf,
    /// PEM client certificate and its key (both or neither). With etcd's
    /// `--client-cert-auth`, the certificate's CN is the etcd user: no password,
    /// no token (the recommended path, docs/hardening.md).
    pub cert: Option<(PathBuf, PathBuf)>,
    /// The name checked against the server's certificate. `None`: the endpoint's
    /// IP address (the certificate then needs it as an IP SAN).
    pub server_name: Option<String>,
}

/// `[etcd] username` and its password. `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for EtcdAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EtcdAuth {{ username: {:?}, password: <hidden> }}",
            self.username
        )
    }
}

/// The `[etcd]` keys besides `endpoints`. `https` says whether the endpoints are
/// `https://` (all of them: a mix is refused by the caller).
pub(super) fn etcd_security(
    etcd: &Sect<'_>,
    https: bool,
) -> Result<(Option<EtcdTls>, Option<EtcdAuth>), ConfigError> {
    let cacert = etcd.path("cacert")?;
    let cert = etcd.path("cert")?;
    let key = etcd.path("key")?;
    let server_name = etcd.nonempty("tls_server_name")?;
    let tls = if https {
        let cacert = etcd.required("cacert", cacert).map_err(|_| {
            etcd.err(
                "cacert",
                "missing: https:// endpoints need the CA bundle that signed the etcd members' \
                 certificates",
            )
        })?;
        let cert = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => return Err(etcd.err("key", "missing: cert and key go together")),
            (None, Some(_)) => return Err(etcd.err("cert", "missing: cert and key go together")),
        };
        if let Some(n) = &server_name
            && !n
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b':'))
        {
            return Err(etcd.err("tls_server_name", "must be a host name or an IP address"));
        }
        Some(EtcdTls {
            cacert,
            cert,
            server_name,
        })
    } else {
        for (k, set) in [
            ("cacert", cacert.is_some()),
            ("cert", cert.is_some()),
            ("key", key.is_some()),
            ("tls_server_name", server_name.is_some()),
        ] {
            if set {
                return Err(etcd.err(k, "only with https:// endpoints"));
            }
        }
        None
    };
    let username = etcd.nonempty("username")?;
    let password = secret(etcd, CRED_ETCD)?;
    let auth = match (username, password) {
        (None, None) => None,
        (Some(username), Some(password)) => Some(EtcdAuth { username, password }),
        (Some(_), None) => {
            return Err(etcd.err(
                "password",
                format!(
                    "missing: username needs password, password_file or the {CRED_ETCD} \
                     credential"
                ),
            ));
        }
        (None, Some(_)) => {
            return Err(etcd.err("username", "missing: a password needs its username"));
        }
    };
    Ok((tls, auth))
}

impl fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HIDDEN: &str = "<hidden>";
        f.debug_struct("PgConfig")
            .field("bin_dir", &self.bin_dir)
            .field("data_dir", &self.data_dir)
            .field("listen", &self.listen)
            .field("connect_address", &self.connect_address)
            .field("socket_dir", &self.socket_dir)
            .field("user", &self.user)
            .field("superuser", &self.superuser)
            .field("superuser_password", &HIDDEN)
            .field("replication_user", &self.replication_user)
            .field("replication_password", &HIDDEN)
            .field("rewind_user", &self.rewind_user)
            .field("rewind_password", &HIDDEN)
            .field("parameters", &self.parameters)
            .field("move_aside_unusable", &self.move_aside_unusable)
            .field("replication_ssl", &self.replication_ssl)
            .field("rewind_ssl", &self.rewind_ssl)
            .field("pg_hba", &self.pg_hba)
            .field("hba_clientcert", &self.hba_clientcert)
            .field("hba_cert", &self.hba_cert)
            .field("create_replica", &self.create_replica)
            .field("bootstrap", &self.bootstrap)
            .finish()
    }
}

/// A warning when `path` holds a password inline (a `password` key in any table)
/// and others may read it (mode & 0o004). `None` otherwise, or when the file
/// cannot be read (loading it reports that).
pub fn readable_secret_warning(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    if mode & 0o004 == 0 {
        return None;
    }
    let text = super::read_text(path, super::SMALL_FILE_MAX).ok()?;
    let table: toml::Table = text.parse().ok()?;
    if !holds_password(&table) {
        return None;
    }
    Some(format!(
        "{} holds a password and is readable by every user (mode {:o}): chmod o-r it, or \
         move the password to a password_file or a systemd credential (docs/hardening.md)",
        path.display(),
        mode & 0o7777
    ))
}

fn holds_password(t: &toml::Table) -> bool {
    t.iter().any(|(k, v)| match v {
        toml::Value::Table(sub) => holds_password(sub),
        _ => k == "password",
    })
}

/// A TOML syntax error without the parser's quote of the offending line: that
/// line may hold a password (an unclosed quote after `password =`), and the
/// message goes to stderr and the journal. Line and column are kept.
pub(super) fn syntax_message(e: &toml::de::Error, text: &str) -> String {
    let msg = e.message().trim_end();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {col}: {msg}")
        }
        None => msg.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Certificate files
// ---------------------------------------------------------------------------

/// Check the `[etcd]` TLS files: each readable, PEM with what it should hold, and
/// the client certificate valid at `now_unix` (seconds since the epoch). The error
/// names the file and the cause. Run at start-up, at each reload, and before each
/// (re)connect: certificates renewed on disk are picked up by the next connection.
/// `Ok`: the client certificate's `notAfter` (Unix seconds), if one is configured
/// (`crate::certs` watches it).
pub fn check_tls_files(tls: &EtcdTls, now_unix: i64) -> Result<Option<i64>, String> {
    let ca = read_pem(&tls.cacert, "CERTIFICATE")?;
    if ca.is_empty() {
        return Err(format!(
            "etcd cacert {}: no PEM CERTIFICATE block in it",
            tls.cacert.display()
        ));
    }
    if let Some((cert, key)) = &tls.cert {
        let certs = read_pem(cert, "CERTIFICATE")?;
        let Some(first) = certs.first() else {
            return Err(format!(
                "etcd cert {}: no PEM CERTIFICATE block in it",
                cert.display()
            ));
        };
        let not_after = check_validity(first, now_unix)
            .map_err(|e| format!("etcd cert {}: {e}", cert.display()))?;
        let text = super::read_text(key, super::SMALL_FILE_MAX)
            .map_err(|e| format!("etcd key {}: cannot read: {e}", key.display()))?;
        if !text.contains("PRIVATE KEY-----") {
            return Err(format!(
                "etcd key {}: no PEM PRIVATE KEY block in it",
                key.display()
            ));
        }
        return Ok(Some(not_after));
    }
    Ok(None)
}

/// Whether the DER certificate `cert` is valid at `now_unix`: its `notAfter` (Unix
/// seconds) if so, the problem otherwise (the caller names the file).
pub(super) fn check_validity(cert: &[u8], now_unix: i64) -> Result<i64, String> {
    match crate::certs::validity(cert) {
        Err(e) => Err(format!("not an X.509 certificate tenure can read: {e}")),
        Ok((not_before, _)) if now_unix < not_before => Err(format!(
            "not valid yet (valid from {}; check the clock)",
            crate::clock::rfc3339_utc(std::time::Duration::from_secs(
                u64::try_from(not_before).unwrap_or(0)
            ))
        )),
        Ok((_, not_after)) if now_unix > not_after => Err(format!(
            "expired at {} (not valid after it)",
            crate::clock::rfc3339_utc(std::time::Duration::from_secs(
                u64::try_from(not_after).unwrap_or(0)
            ))
        )),
        Ok((_, not_after)) => Ok(not_after),
    }
}

/// The DER bodies of the PEM blocks labelled `label` in `path`.
fn read_pem(path: &Path, label: &str) -> Result<Vec<Vec<u8>>, String> {
    let text = super::read_text(path, super::SMALL_FILE_MAX)
        .map_err(|e| format!("etcd TLS file {}: cannot read: {e}", path.display()))?;
    pem_blocks(&text, label).map_err(|e| format!("etcd TLS file {}: {e}", path.display()))
}

/// The DER bodies of the PEM blocks labelled `label` in `text`.
pub(super) fn pem_blocks(text: &str, label: &str) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&begin) {
        let after = &rest[i + begin.len()..];
        let Some(j) = after.find(&end) else {
            return Err("a PEM block is not closed".into());
        };
        let b64: String = after[..j].split_whitespace().collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("bad PEM: {e}"))?;
        out.push(der);
        rest = &after[j + end.len()..];
    }
    Ok(out)
}

/// Config-level tests of the secrets and `[etcd]` security keys (issue 12).
#[cfg(test)]
mod config_tests {
    use std::path::Path;

    use crate::config::{Config, ConfigError};

    const BASE: &str = r#"
scope = "demo"
name = "pg1"
[timing]
ttl = 30
loop_wait = 2
retry_timeout = 1
safety_margin = 2
demote_budget = 1
[postgresql]
data_dir = "/dev/shm/x/pg1"
listen = "127.0.0.1:5432"
[api]
listen = "127.0.0.1:8008"
"#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("t.toml"), text)
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tenure-secrets-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).expect("scratch dir");
        d
    }

    fn pg_roles(su: &str) -> String {
        format!(
            "[postgresql.authentication.superuser]\n{su}\n\
             [postgresql.authentication.replication]\npassword = \"rep-secret\"\n\
             [postgresql.authentication.rewind]\npassword = \"rw-secret\"\n"
        )
    }

    fn etcd(extra: &str) -> String {
        format!("[etcd]\nendpoints = [\"http://127.0.0.1:2379\"]\n{extra}\n")
    }

    #[test]
    fn a_syntax_error_does_not_quote_a_password_line() {
        let text = format!("{BASE}{}{}", etcd(""), pg_roles("password = \"s3cretXY"));
        let e = parse(&text).expect_err("unclosed quote").to_string();
        assert!(e.contains("not valid TOML") && e.contains("line "), "{e}");
        assert!(!e.contains("s3cretXY"), "{e}");
    }

    #[test]
    fn password_file_is_read_and_one_newline_dropped() {
        let d = scratch("pwfile");
        let f = d.join("su");
        std::fs::write(&f, "file-secret\n").expect("write");
        let text = format!(
            "{BASE}{}{}",
            etcd(""),
            pg_roles(&format!("password_file = \"{}\"", f.display()))
        );
        let c = parse(&text).expect("valid");
        assert_eq!(c.postgresql.superuser_password, "file-secret");
    }

    #[test]
    fn password_and_password_file_together_are_refused() {
        let text = format!(
            "{BASE}{}{}",
            etcd(""),
            pg_roles("password = \"a\"\npassword_file = \"/nonexistent\"")
        );
        let e = parse(&text).expect_err("both set").to_string();
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn an_unreadable_password_file_names_the_file_not_a_secret() {
        let text = format!(
            "{BASE}{}{}",
            etcd(""),
            pg_roles("password_file = \"/nonexistent/tenure-su\"")
        );
        let e = parse(&text).expect_err("unreadable").to_string();
        assert!(e.contains("/nonexistent/tenure-su"), "{e}");
        assert!(e.contains("password_file"), "{e}");
    }

    #[test]
    fn etcd_tls_keys_and_their_rules() {
        let https = "[etcd]\nendpoints = [\"https://127.0.0.1:2379\"]\n";
        // https:// needs a CA.
        let e = parse(&format!("{BASE}{https}{}", pg_roles("password = \"s\"")))
            .expect_err("no cacert")
            .to_string();
        assert!(e.contains("etcd.cacert"), "{e}");
        // cert without key.
        let e = parse(&format!(
            "{BASE}{https}cacert = \"/ca.pem\"\ncert = \"/c.pem\"\n{}",
            pg_roles("password = \"s\"")
        ))
        .expect_err("cert alone")
        .to_string();
        assert!(e.contains("etcd.key"), "{e}");
        // TLS keys with http:// endpoints.
        let e = parse(&format!(
            "{BASE}{}{}",
            etcd("cacert = \"/ca.pem\""),
            pg_roles("password = \"s\"")
        ))
        .expect_err("cacert with http")
        .to_string();
        assert!(e.contains("only with https://"), "{e}");
        // A mix of schemes.
        let e = parse(&format!(
            "{BASE}[etcd]\nendpoints = [\"https://127.0.0.1:2379\", \"http://127.0.0.2:2379\"]\n\
             cacert = \"/ca.pem\"\n{}",
            pg_roles("password = \"s\"")
        ))
        .expect_err("mix")
        .to_string();
        assert!(e.contains("mixes"), "{e}");
        // The good case.
        let c = parse(&format!(
            "{BASE}{https}cacert = \"/ca.pem\"\ncert = \"/c.pem\"\nkey = \"/k.pem\"\n\
             tls_server_name = \"etcd.example\"\n{}",
            pg_roles("password = \"s\"")
        ))
        .expect("valid");
        let tls = c.etcd.tls.expect("tls");
        assert_eq!(tls.server_name.as_deref(), Some("etcd.example"));
        assert!(tls.cert.is_some());
    }

    #[test]
    fn etcd_username_needs_a_password_and_debug_hides_every_secret() {
        let e = parse(&format!(
            "{BASE}{}{}",
            etcd("username = \"tenure\""),
            pg_roles("password = \"s\"")
        ))
        .expect_err("no password")
        .to_string();
        assert!(e.contains("etcd.password"), "{e}");
        let text = format!(
            "{}{}{}",
            BASE.replace(
                "listen = \"127.0.0.1:8008\"",
                "listen = \"127.0.0.1:8008\"\nusername = \"op\"\npassword = \"api-secret\""
            ),
            etcd("username = \"tenure\"\npassword = \"etcd-secret\""),
            pg_roles("password = \"su-secret\"")
        );
        let c = parse(&text).expect("valid");
        assert_eq!(
            c.etcd.auth.as_ref().map(|a| a.password.as_str()),
            Some("etcd-secret")
        );
        let dbg = format!("{c:?} {c:#?}");
        for secret in [
            "etcd-secret",
            "api-secret",
            "su-secret",
            "rep-secret",
            "rw-secret",
        ] {
            assert!(!dbg.contains(secret), "{secret} in Debug: {dbg}");
        }
        assert!(dbg.contains("<hidden>"));
    }

    #[test]
    fn credentials_directory_supplies_missing_passwords() {
        let d = scratch("creds");
        std::fs::write(d.join(super::CRED_PG_SUPERUSER), "cred-su\n").expect("write");
        std::fs::write(d.join(super::CRED_ETCD), "cred-etcd").expect("write");
        // SAFETY: nextest runs each test in its own process, and no other thread
        // of this test reads the environment.
        unsafe { std::env::set_var("CREDENTIALS_DIRECTORY", &d) };
        let text = format!(
            "{BASE}{}{}",
            etcd("username = \"tenure\""),
            pg_roles("username = \"postgres\"")
        );
        let c = parse(&text);
        // SAFETY: as above.
        unsafe { std::env::remove_var("CREDENTIALS_DIRECTORY") };
        let c = c.expect("valid");
        assert_eq!(c.postgresql.superuser_password, "cred-su");
        assert_eq!(c.etcd.auth.map(|a| a.password), Some("cred-etcd".into()));
    }

    #[test]
    fn a_world_readable_file_with_a_password_is_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("mode");
        let f = d.join("t.toml");
        std::fs::write(
            &f,
            format!("{BASE}{}{}", etcd(""), pg_roles("password = \"s\"")),
        )
        .expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let w = super::readable_secret_warning(&f).expect("warned");
        assert!(
            w.contains("readable by every user") && !w.contains("\"s\""),
            "{w}"
        );
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        assert_eq!(super::readable_secret_warning(&f), None);
        // Readable by all, but no inline password (password_file only): no warning.
        let files = pg_roles("password_file = \"/x\"").replace("password = ", "password_file = ");
        std::fs::write(&f, format!("{BASE}{}{files}", etcd(""))).expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(super::readable_secret_warning(&f), None);
    }
}
