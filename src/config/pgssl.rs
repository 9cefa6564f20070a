//! PostgreSQL TLS settings (issue 12), spelt as Patroni spells them so its users
//! recognise them: libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey`, `sslcrl`
//! and `sslcrldir` per connecting role under `[postgresql.authentication.replication]`
//! (streaming replication and pg_basebackup) and `[...rewind]` (pg_rewind and the
//! CHECKPOINT before it); the server side as `[postgresql.parameters]` `ssl = on`
//! with `ssl_cert_file`, `ssl_key_file`, `ssl_ca_file`, `ssl_crl_file`,
//! `ssl_crl_dir`. Plus the start-up check of every file they name.
//!
//! Owns: which TLS settings each connection gets, whether the server side is on
//! (tenure's pg_hba lines are then `hostssl`), and whether libpq and PostgreSQL 15
//! will accept the files as they are on disk, read as the PostgreSQL OS user.
//! Must never: put a file's content in a message, panic on a bad file, or accept
//! a file libpq or the postmaster would refuse later — at a failover, when a
//! replica has to follow a new primary or the old one has to rewind.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{ConfigError, PgConfig, Sect};

/// libpq TLS settings of one role's connections to another member. Paths are
/// absolute (a relative one would name a different file for the walreceiver, whose
/// working directory is the data directory, and for pg_basebackup, whose is `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgSsl {
    /// `disable` ... `verify-full`; default `[postgresql] sslmode`, else `prefer`.
    pub sslmode: String,
    /// PEM CA certificates the server's certificate must chain to.
    pub sslrootcert: Option<PathBuf>,
    /// PEM client certificate and its key (both or neither).
    pub sslcert: Option<PathBuf>,
    pub sslkey: Option<PathBuf>,
    /// PEM certificate revocation list file, and/or a directory of them.
    pub sslcrl: Option<PathBuf>,
    pub sslcrldir: Option<PathBuf>,
}

impl Default for PgSsl {
    fn default() -> PgSsl {
        PgSsl {
            sslmode: "prefer".into(),
            sslrootcert: None,
            sslcert: None,
            sslkey: None,
            sslcrl: None,
            sslcrldir: None,
        }
    }
}

/// The role keys besides `username`/`password`: libpq keyword = config key.
pub(super) const ROLE_KEYS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslcrl",
    "sslcrldir",
];

const MODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

impl PgSsl {
    /// `(libpq keyword, value)` for a conninfo string, `sslmode` first; the caller
    /// quotes the values.
    pub fn conninfo_params(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![("sslmode", self.sslmode.clone())];
        for (k, p) in self.files() {
            out.push((k, p.to_string_lossy().into_owned()));
        }
        out
    }

    /// The same settings as libpq environment variables (`PGSSLMODE`, ...), for a
    /// child that takes no conninfo (pg_basebackup).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.conninfo_params()
            .into_iter()
            .map(|(k, v)| {
                let var = match k {
                    "sslmode" => "PGSSLMODE",
                    "sslrootcert" => "PGSSLROOTCERT",
                    "sslcert" => "PGSSLCERT",
                    "sslkey" => "PGSSLKEY",
                    "sslcrl" => "PGSSLCRL",
                    _ => "PGSSLCRLDIR",
                };
                (var, v)
            })
            .collect()
    }

    /// The files set, with their libpq keyword.
    fn files(&self) -> Vec<(&'static str, &Path)> {
        [
            ("sslrootcert", &self.sslrootcert),
            ("sslcert", &self.sslcert),
            ("sslkey", &self.sslkey),
            ("sslcrl", &self.sslcrl),
            ("sslcrldir", &self.sslcrldir),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.as_deref().map(|p| (k, p)))
        .collect()
    }
}

/// `sslmode` of table `s`, checked; `None` when absent.
pub(super) fn sslmode(s: &Sect<'_>) -> Result<Option<String>, ConfigError> {
    match s.string("sslmode")? {
        None => Ok(None),
        Some(m) if MODES.contains(&m.as_str()) => Ok(Some(m)),
        Some(other) => Err(s.err(
            "sslmode",
            format!(
                "expected disable, allow, prefer, require, verify-ca or verify-full, \
                 found \"{other}\""
            ),
        )),
    }
}

/// One role's TLS keys (`s` is `[postgresql.authentication.<role>]`); its
/// `sslmode` defaults to `default_mode` (`[postgresql] sslmode`).
pub(super) fn role_ssl(s: &Sect<'_>, default_mode: &str) -> Result<PgSsl, ConfigError> {
    let ssl = PgSsl {
        sslmode: sslmode(s)?.unwrap_or_else(|| default_mode.to_string()),
        sslrootcert: s.path("sslrootcert")?,
        sslcert: s.path("sslcert")?,
        sslkey: s.path("sslkey")?,
        sslcrl: s.path("sslcrl")?,
        sslcrldir: s.path("sslcrldir")?,
    };
    match (&ssl.sslcert, &ssl.sslkey) {
        (Some(_), None) => return Err(s.err("sslkey", "missing: sslcert and sslkey go together")),
        (None, Some(_)) => return Err(s.err("sslcert", "missing: sslcert and sslkey go together")),
        _ => {}
    }
    if ssl.sslmode == "disable"
        && let Some((k, _)) = ssl.files().first()
    {
        return Err(s.err(
            k,
            "has no effect with sslmode = \"disable\" (no TLS at all): remove it or \
             choose another sslmode",
        ));
    }
    Ok(ssl)
}

/// PostgreSQL's boolean `ssl` parameter, as `[postgresql.parameters]` holds it
/// (booleans there are already `on`/`off`).
pub fn server_ssl_on(parameters: &[(String, String)]) -> bool {
    parameters
        .iter()
        .find(|(k, _)| k == "ssl")
        .is_some_and(|(_, v)| is_on(v))
}

fn is_on(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "on" | "true" | "yes" | "1"
    )
}

/// The server-side parameters naming files, and what each must hold.
const SERVER_FILES: &[(&str, Kind)] = &[
    ("ssl_cert_file", Kind::Cert),
    ("ssl_key_file", Kind::ServerKey),
    ("ssl_ca_file", Kind::Certs),
    ("ssl_crl_file", Kind::Crl),
    ("ssl_crl_dir", Kind::Dir),
];

/// The server side (`params` is `[postgresql.parameters]`, `parameters` what was
/// read from it) against the roles' settings: refused here rather than at the
/// first failover.
pub(super) fn check_server(
    params: &Sect<'_>,
    parameters: &[(String, String)],
    roles: &[(&Sect<'_>, &PgSsl)],
) -> Result<(), ConfigError> {
    let get = |k: &str| parameters.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    if let Some(v) = get("ssl")
        && !is_on(v)
        && !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "off" | "false" | "no" | "0"
        )
    {
        return Err(params.err("ssl", format!("expected on or off, found \"{v}\"")));
    }
    for (k, _) in SERVER_FILES {
        if let Some(v) = get(k)
            && !v.starts_with('/')
        {
            return Err(params.err(
                k,
                format!(
                    "must be an absolute path, found \"{v}\": a relative one names a file \
                     inside the data directory, which pg_basebackup and pg_rewind replace \
                     with the primary's"
                ),
            ));
        }
    }
    if !server_ssl_on(parameters) {
        return Ok(());
    }
    for k in ["ssl_cert_file", "ssl_key_file"] {
        if get(k).is_none() {
            return Err(params.err(
                k,
                "missing: with ssl = on, name the server's certificate and key outside the \
                 data directory (PostgreSQL's default, server.crt and server.key inside it, \
                 would be replaced by the primary's at every basebackup and rewind)",
            ));
        }
    }
    for (s, ssl) in roles {
        if ssl.sslmode == "disable" {
            return Err(s.err(
                "sslmode",
                "\"disable\" while [postgresql.parameters] ssl = on: tenure's pg_hba lines \
                 for the members are then hostssl, which refuse a connection without TLS",
            ));
        }
    }
    Ok(())
}

/// `[postgresql] hba_method`: `"scram-sha-256"` (the default: a password, with
/// `hba_clientcert` a certificate too) or `"cert"` (the client certificate alone,
/// no password). `true` for `cert`.
pub(super) fn hba_method(pg: &Sect<'_>) -> Result<bool, ConfigError> {
    match pg.string("hba_method")?.as_deref() {
        None | Some("scram-sha-256") => Ok(false),
        Some("cert") => Ok(true),
        Some(v) => Err(pg.err(
            "hba_method",
            format!("expected scram-sha-256 or cert, found \"{v}\""),
        )),
    }
}

/// `[postgresql] hba_clientcert`: `verify-ca` or `verify-full`; and with it or
/// with `hba_method = "cert"` (`cert`), what a required client certificate needs
/// to work at a failover rather than fail there: the server side on (both exist on
/// `hostssl` lines only), `ssl_ca_file` (what the server checks a client
/// certificate against; without it PostgreSQL refuses every connection on such a
/// line), and a client certificate for each connecting role (else its streaming
/// replication, pg_basebackup or pg_rewind is refused). The commonName rule of
/// `verify-full` and `cert` is checked with the files ([`check_files`]).
pub(super) fn hba_clientcert(
    pg: &Sect<'_>,
    cert: bool,
    parameters: &[(String, String)],
    roles: &[(&Sect<'_>, &PgSsl)],
) -> Result<Option<String>, ConfigError> {
    let clientcert = pg.string("hba_clientcert")?;
    if let Some(v) = &clientcert {
        if v != "verify-ca" && v != "verify-full" {
            return Err(pg.err(
                "hba_clientcert",
                format!("expected verify-ca or verify-full, found \"{v}\""),
            ));
        }
        if cert {
            return Err(pg.err(
                "hba_clientcert",
                "not with hba_method = \"cert\": the cert method always verifies the \
                 client certificate in full (PostgreSQL refuses any other clientcert= on \
                 such a line); leave hba_clientcert out",
            ));
        }
    }
    let (key, rule) = match &clientcert {
        _ if cert => ("hba_method", "hba_method = \"cert\"".to_string()),
        Some(v) => ("hba_clientcert", format!("hba_clientcert = \"{v}\"")),
        None => return Ok(None),
    };
    if !server_ssl_on(parameters) {
        return Err(pg.err(
            key,
            "needs [postgresql.parameters] ssl = on: a client certificate is checked on \
             hostssl lines only, and tenure's member lines are hostssl only with the \
             server side on",
        ));
    }
    if !parameters.iter().any(|(k, _)| k == "ssl_ca_file") {
        return Err(pg.err(
            key,
            "needs [postgresql.parameters] ssl_ca_file: the server checks client \
             certificates against it, and without one PostgreSQL refuses every \
             connection on a line that asks for one (\"client certificates can only be \
             checked if a root certificate store is available\")",
        ));
    }
    for (s, ssl) in roles {
        if ssl.sslcert.is_none() {
            return Err(s.err(
                "sslcert",
                format!(
                    "missing: [postgresql] {rule} requires a client certificate on \
                     tenure's member lines, so this role's connections would be refused"
                ),
            ));
        }
    }
    Ok(clientcert)
}

// ---------------------------------------------------------------------------
// The files on disk
// ---------------------------------------------------------------------------

/// What a file must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One certificate (the first PEM block), valid now.
    Cert,
    /// One or more CA certificates.
    Certs,
    /// libpq's client key: its permission rule.
    ClientKey,
    /// The server's key: the postmaster's permission rule.
    ServerKey,
    /// A PEM X509 CRL.
    Crl,
    /// A directory (of hashed CRL files).
    Dir,
}

/// Who reads the files: the OS user PostgreSQL's programs run as. tenure starts
/// them with that user's uid and primary group only (std's `Command::uid` drops
/// supplementary groups), so a group that reaches the file only as a supplementary
/// group (Debian's `ssl-cert`) does not count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Reader {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// The reader is this process: the kernel answers (`access(2)`), groups included.
    pub is_self: bool,
}

impl Reader {
    /// `[postgresql] user`, or this process when none is set.
    fn of(user: Option<&str>) -> Result<Reader, String> {
        let me = nix::unistd::geteuid();
        let Some(name) = user else {
            return Ok(Reader {
                name: format!("uid {me}"),
                uid: me.as_raw(),
                gid: nix::unistd::getegid().as_raw(),
                is_self: true,
            });
        };
        let u = nix::unistd::User::from_name(name)
            .map_err(|e| format!("look up OS user {name:?}: {e}"))?
            .ok_or_else(|| format!("OS user {name:?} (postgresql.user) does not exist"))?;
        Ok(Reader {
            name: name.to_string(),
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            is_self: u.uid == me,
        })
    }
}

/// Whether a file of `mode`, owner `fuid`:`fgid` grants `want` (4 read, 1 search)
/// to a process of `uid` with the single group `gid` (no ACLs: tenure does not
/// read them, and a file that needs one to be read is reported unreadable).
fn grants(mode: u32, fuid: u32, fgid: u32, uid: u32, gid: u32, want: u32) -> bool {
    if uid == 0 {
        // CAP_DAC_OVERRIDE: root reads any file and searches any directory.
        return true;
    }
    let bits = if fuid == uid {
        mode >> 6
    } else if fgid == gid {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

/// libpq 15's rule for a client key (`fe-secure-openssl.c`): a regular file; owned
/// by root, at most u=rw,g=r (0640); otherwise at most u=rw (0600). `None`: fine.
fn client_key_problem(mode: u32, fuid: u32) -> Option<String> {
    let bad = if fuid == 0 {
        mode & 0o037
    } else {
        mode & 0o077
    };
    (bad != 0).then(|| {
        format!(
            "private key file has group or world access (mode {:04o}, owner uid {fuid}): libpq \
             refuses it (\"file must have permissions u=rw (0600) or less if owned by the \
             current user, or permissions u=rw,g=r (0640) or less if owned by root\"); \
             chmod 0600 it",
            mode & 0o7777
        )
    })
}

/// The postmaster's rule for `ssl_key_file` (`be-secure-common.c`): owned by the
/// database user or root; then at most 0600, or 0640 when root owns it.
fn server_key_problem(mode: u32, fuid: u32, db_uid: u32, db_user: &str) -> Option<String> {
    if fuid != db_uid && fuid != 0 {
        return Some(format!(
            "private key file is owned by uid {fuid}: PostgreSQL refuses to start unless it is \
             owned by the database user ({db_user}) or root"
        ));
    }
    let bad = if fuid == 0 {
        mode & 0o037
    } else {
        mode & 0o077
    };
    (bad != 0).then(|| {
        format!(
            "private key file has group or world access (mode {:04o}): PostgreSQL refuses to \
             start (\"File must have permissions u=rw (0600) or less if owned by the database \
             user, or permissions u=rw,g=r (0640) or less if owned by root\"); chmod 0600 it",
            mode & 0o7777
        )
    })
}

/// `path` and each directory above it let `r` reach and read it (`want` 4) or,
/// for a directory, list and search it (5).
fn reachable(path: &Path, r: &Reader, want: u32) -> Result<(), String> {
    if r.is_self {
        let mut flags = nix::unistd::AccessFlags::R_OK;
        if want & 1 != 0 {
            flags |= nix::unistd::AccessFlags::X_OK;
        }
        return nix::unistd::access(path, flags).map_err(|e| format!("cannot be read: {e}"));
    }
    for dir in path.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !grants(m.mode(), m.uid(), m.gid(), r.uid, r.gid, 1) {
            return Err(format!(
                "OS user {} cannot reach it: directory {} (mode {:04o}, owner uid {}, gid {}) \
                 is not searchable by uid {} / gid {}",
                r.name,
                dir.display(),
                m.mode() & 0o7777,
                m.uid(),
                m.gid(),
                r.uid,
                r.gid
            ));
        }
    }
    let m = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !grants(m.mode(), m.uid(), m.gid(), r.uid, r.gid, want) {
        return Err(format!(
            "OS user {} cannot read it (mode {:04o}, owner uid {}, gid {}; tenure runs \
             PostgreSQL's programs as uid {} with group {} only, no supplementary groups)",
            r.name,
            m.mode() & 0o7777,
            m.uid(),
            m.gid(),
            r.uid,
            r.gid
        ));
    }
    Ok(())
}

/// One file of kind `kind` as `r` would use it; `now_unix` for a certificate's
/// validity. `Ok`: a client certificate's `notAfter` (`Kind::Cert`, the first
/// block: the leaf libpq sends). The error is the problem alone; the caller names
/// key and path.
fn check_file(path: &Path, kind: Kind, r: &Reader, now_unix: i64) -> Result<Option<i64>, String> {
    // symlink_metadata would judge the link; libpq and the server follow it.
    let m = std::fs::metadata(path).map_err(|e| format!("cannot be read: {e}"))?;
    if kind == Kind::Dir {
        if !m.is_dir() {
            return Err("is not a directory".into());
        }
        return reachable(path, r, 5).map(|()| None);
    }
    if !m.is_file() {
        return Err("is not a regular file".into());
    }
    match kind {
        Kind::ClientKey => {
            if let Some(p) = client_key_problem(m.mode(), m.uid()) {
                return Err(p);
            }
        }
        Kind::ServerKey => {
            if let Some(p) = server_key_problem(m.mode(), m.uid(), r.uid, &r.name) {
                return Err(p);
            }
        }
        _ => {}
    }
    reachable(path, r, 4)?;
    let text = super::read_text(path, super::SMALL_FILE_MAX)
        .map_err(|e| format!("cannot be read: {e}"))?;
    match kind {
        Kind::Cert | Kind::Certs => {
            let certs = super::secrets::pem_blocks(&text, "CERTIFICATE")?;
            let Some(first) = certs.first() else {
                return Err("no PEM CERTIFICATE block in it".into());
            };
            if kind == Kind::Cert {
                return super::secrets::check_validity(first, now_unix).map(Some);
            }
        }
        Kind::ClientKey | Kind::ServerKey => {
            if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
                return Err(
                    "the private key is encrypted: tenure gives libpq no passphrase (no \
                     sslpassword); decrypt it (openssl pkey -in ... -out ...) and keep it 0600"
                        .into(),
                );
            }
            if !text.contains("PRIVATE KEY-----") {
                return Err("no PEM PRIVATE KEY block in it".into());
            }
        }
        Kind::Crl => {
            if !text.contains("-----BEGIN X509 CRL-----") {
                return Err("no PEM X509 CRL block in it".into());
            }
        }
        Kind::Dir => {}
    }
    Ok(None)
}

/// Every TLS file `pg` names, as the PostgreSQL OS user would use it: readable
/// through its directories, keys with the permissions libpq 15 (client) and the
/// postmaster (server) accept, PEM with what it should hold, certificates valid
/// at `now_unix`. `Err((key, problem))`, the key as the file spells it. Run at
/// start-up, by `check-config` and at each reload. `Ok`: each role's `sslcert`
/// and its `notAfter` (`crate::certs` watches them).
pub fn check_files(
    pg: &PgConfig,
    now_unix: i64,
) -> Result<Vec<crate::certs::CertExpiry>, (String, String)> {
    use crate::certs::{CertExpiry, CertRole};
    let mut todo: Vec<(String, PathBuf, Kind, Option<CertRole>)> = Vec::new();
    for (role, ssl, cert_role) in [
        ("replication", &pg.replication_ssl, CertRole::Replication),
        ("rewind", &pg.rewind_ssl, CertRole::Rewind),
    ] {
        for (k, p) in ssl.files() {
            let kind = match k {
                "sslrootcert" => Kind::Certs,
                "sslcert" => Kind::Cert,
                "sslkey" => Kind::ClientKey,
                "sslcrl" => Kind::Crl,
                _ => Kind::Dir,
            };
            let key = format!("postgresql.authentication.{role}.{k}");
            let watched = (kind == Kind::Cert).then_some(cert_role);
            todo.push((key, p.to_path_buf(), kind, watched));
        }
    }
    if server_ssl_on(&pg.parameters) {
        for (k, kind) in SERVER_FILES {
            if let Some((_, v)) = pg.parameters.iter().find(|(n, _)| n == k) {
                todo.push((
                    format!("postgresql.parameters.{k}"),
                    PathBuf::from(v),
                    *kind,
                    None,
                ));
            }
        }
    }
    let mut certs = Vec::new();
    if todo.is_empty() {
        return Ok(certs);
    }
    let r = Reader::of(pg.user.as_deref()).map_err(|e| ("postgresql.user".to_string(), e))?;
    for (key, path, kind, watched) in todo {
        let not_after = check_file(&path, kind, &r, now_unix)
            .map_err(|problem| (key.clone(), format!("{}: {problem}", path.display())))?;
        let user = match watched {
            Some(CertRole::Replication) => Some(&pg.replication_user),
            Some(CertRole::Rewind) => Some(&pg.rewind_user),
            _ => None,
        };
        if let Some(user) = user {
            let rule = pg.client_cert_rule().filter(|_| pg.client_cn_is_role());
            client_cert_cn(&path, user, rule.as_deref())
                .map_err(|problem| (key, format!("{}: {problem}", path.display())))?;
        }
        if let (Some(role), Some(not_after)) = (watched, not_after) {
            certs.push(CertExpiry {
                role,
                file: path,
                not_after,
            });
        }
    }
    Ok(certs)
}

/// A client certificate's commonName as PostgreSQL 15 reads it: one with a NUL
/// byte in it (a BMPString or UniversalString name) fails the TLS handshake with
/// any server that asks for client certificates, and with `clientcert=verify-full`
/// or `cert` (`rule`, as the file says it) the first commonName must be the
/// connecting role's name, byte for byte
/// (no `map=` on tenure's lines). A certificate PostgreSQL would refuse is refused
/// here. Read again after `check_file`'s read (start-up, `check-config`, reload:
/// never on the loop).
fn client_cert_cn(path: &Path, user: &str, rule: Option<&str>) -> Result<(), String> {
    let text = super::read_text(path, super::SMALL_FILE_MAX)
        .map_err(|e| format!("cannot be read: {e}"))?;
    let certs = super::secrets::pem_blocks(&text, "CERTIFICATE")?;
    let first = certs.first().ok_or("no PEM CERTIFICATE block in it")?;
    let need = format!(
        "[postgresql] {} makes PostgreSQL refuse it",
        rule.unwrap_or_default()
    );
    match crate::certs::subject_cn(first) {
        Err(e) => Err(format!("not an X.509 certificate tenure can read: {e}")),
        Ok(Some(cn)) if cn.contains(&0) => Err(
            "its subject's commonName contains a NUL byte (a BMPString or UniversalString \
             name?): PostgreSQL refuses such a client certificate (\"SSL certificate's \
             common name contains embedded null\"); issue it with a UTF8String name"
                .into(),
        ),
        Ok(_) if rule.is_none() => Ok(()),
        Ok(None) => Err(format!(
            "its subject has no commonName, which must be the role's name \"{user}\": {need}"
        )),
        Ok(Some(cn)) if cn == user.as_bytes() => Ok(()),
        Ok(Some(cn)) => Err(format!(
            "its subject's commonName is \"{}\", not the role's name \"{user}\": {need}",
            String::from_utf8_lossy(cn).escape_debug()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn grants_follows_owner_group_other() {
        // owner postgres (100), group 200; the reader is postgres, primary group 300.
        assert!(grants(0o600, 100, 200, 100, 300, 4));
        assert!(!grants(0o060, 100, 200, 100, 300, 4), "owner bits rule");
        assert!(!grants(0o640, 0, 200, 100, 300, 4), "group 200 is not ours");
        assert!(grants(0o640, 0, 300, 100, 300, 4), "our primary group");
        assert!(grants(0o644, 0, 0, 100, 300, 4));
        assert!(
            !grants(0o750, 0, 0, 100, 300, 1),
            "directory not searchable"
        );
        assert!(grants(0o000, 5, 5, 0, 0, 4), "root reads anything");
    }

    #[test]
    fn key_rules_are_libpq_15s_and_the_servers() {
        assert_eq!(client_key_problem(0o100600, 100), None);
        assert_eq!(client_key_problem(0o100640, 0), None);
        let p = client_key_problem(0o100640, 100).expect("0640 not root-owned");
        assert!(
            p.contains("group or world access") && p.contains("0640"),
            "{p}"
        );
        assert!(client_key_problem(0o100644, 0).is_some(), "world-readable");
        assert!(client_key_problem(0o100660, 0).is_some(), "group-writable");
        assert_eq!(server_key_problem(0o100600, 100, 100, "postgres"), None);
        assert_eq!(server_key_problem(0o100640, 0, 100, "postgres"), None);
        let p = server_key_problem(0o100600, 7, 100, "postgres").expect("foreign owner");
        assert!(
            p.contains("owned by the database user (postgres) or root"),
            "{p}"
        );
        assert!(server_key_problem(0o100604, 100, 100, "postgres").is_some());
    }

    #[test]
    fn params_and_env_carry_every_file() {
        let s = PgSsl {
            sslmode: "verify-full".into(),
            sslrootcert: Some("/c/root.crt".into()),
            sslcert: Some("/c/a b.crt".into()),
            sslkey: Some("/c/a b.key".into()),
            sslcrl: Some("/c/x.crl".into()),
            sslcrldir: Some("/c/crl.d".into()),
        };
        let p = s.conninfo_params();
        assert_eq!(p[0], ("sslmode", "verify-full".into()));
        assert_eq!(p.len(), 6);
        let e = s.env();
        assert!(e.contains(&("PGSSLKEY", "/c/a b.key".into())), "{e:?}");
        assert!(e.contains(&("PGSSLCRLDIR", "/c/crl.d".into())), "{e:?}");
        assert_eq!(
            PgSsl::default().conninfo_params(),
            vec![("sslmode", "prefer".into())]
        );
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tenure-pgssl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch");
        d
    }

    fn me() -> Reader {
        Reader::of(None).expect("self")
    }

    /// A key others can read is refused with its name, as libpq would refuse it at
    /// the first connection; 0600 passes.
    #[test]
    fn a_world_readable_key_is_refused_by_name() {
        let d = scratch("key");
        let key = d.join("client.key");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .expect("write");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = check_file(&key, Kind::ClientKey, &me(), 0).expect_err("0644 key");
        assert!(
            e.contains("group or world access") && e.contains("0644"),
            "{e}"
        );
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        check_file(&key, Kind::ClientKey, &me(), 0).expect("0600 key");
        std::fs::write(&key, "-----BEGIN ENCRYPTED PRIVATE KEY-----\n").expect("write");
        let e = check_file(&key, Kind::ClientKey, &me(), 0).expect_err("encrypted");
        assert!(e.contains("encrypted"), "{e}");
        let e = check_file(&d.join("missing.key"), Kind::ClientKey, &me(), 0).expect_err("missing");
        assert!(e.contains("cannot be read"), "{e}");
        let crl = d.join("x.crl");
        std::fs::write(&crl, "not a crl").expect("write");
        let e = check_file(&crl, Kind::Crl, &me(), 0).expect_err("not a CRL");
        assert!(e.contains("X509 CRL"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Run as root (the test bed's case): a root-owned 0600 file is unreadable for
    /// the PostgreSQL user, and so is one behind a directory it cannot search.
    #[test]
    fn unreadable_for_the_postgres_user_is_named() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let d = scratch("reader");
        let ca = d.join("root.crt");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let nobody = Reader {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            is_self: false,
        };
        let e = check_file(&ca, Kind::Certs, &nobody, 0).expect_err("0600 root-owned");
        assert!(e.contains("OS user nobody cannot read it"), "{e}");
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        check_file(&ca, Kind::Certs, &nobody, 0).expect("0644");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let e = check_file(&ca, Kind::Certs, &nobody, 0).expect_err("dir 0700");
        assert!(e.contains("is not searchable"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
