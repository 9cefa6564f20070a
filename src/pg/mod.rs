//! Local PostgreSQL control: probe, promote, fence, follow, rewind, bootstrap.
//!
//! Owns: the local data directory's lifecycle (initdb, basebackup, rewind, start,
//! stop as supervised child processes), the agent's connection to the local server
//! (Unix socket, `statement_timeout` bounded by the caller's deadline), the files the
//! agent writes around the cluster (`tenure.conf`, `tenure.sync.conf`,
//! `tenure.params.conf`, `pg_hba.conf`, the passfile, the server log next to the
//! data directory) and the immediate fence (DESIGN S1).
//!
//! Must never: initdb or basebackup into a non-empty directory, delete a data
//! directory (only move it aside), put a password into `primary_conninfo`, wait for a
//! child process (one exception, bounded like a query: `paramcheck`'s `postgres -C`,
//! which exits within milliseconds and is killed at the caller's deadline), signal a process it has not verified belongs to this cluster, or
//! block past a caller's deadline (the one known exception: a postmaster that accepts
//! a Unix-socket connection and then never answers the startup packet — the
//! `postgres` crate bounds only the socket connect; a stopped postmaster is caught
//! from `/proc` first).

/// The settings `hotstandby` raises, as SQL string literals (for the probe's
/// queries; `hotstandby`'s tests check it against `hotstandby::SETTINGS`).
macro_rules! floor_names {
    () => {
        "'max_connections', 'max_worker_processes', 'max_wal_senders', \
         'max_prepared_transactions', 'max_locks_per_transaction'"
    };
}
#[cfg(test)]
pub(crate) use floor_names;

pub mod conf;
pub mod control;
pub mod hotstandby;
mod job;
pub mod paramcheck;
pub mod procs;
pub mod slots;
pub mod timeline;

use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clock;
use crate::config::PgConfig;
use crate::core::model::{
    DataDir, Epoch, FenceOutcome, Job, JobKind, LeaseId, PgRole, PgStatus, StandbyStat,
};
use crate::core::time::Instant;

/// An error from a PostgreSQL action; the message names what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgError {
    /// Bad configuration (user, paths, parameters).
    Config(String),
    /// A job is already running; only one at a time.
    Busy(String),
    /// The action is refused in the current state (non-empty data dir, ...).
    Refused(String),
    /// A file-system operation failed.
    Io(String),
    /// A query failed or the server is unreachable.
    Sql(String),
    /// The deadline passed.
    Timeout(String),
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Config(s) => write!(f, "postgresql configuration: {s}"),
            PgError::Busy(s) => write!(f, "a postgresql job is running: {s}"),
            PgError::Refused(s) => write!(f, "refused: {s}"),
            PgError::Io(s) => write!(f, "file system: {s}"),
            PgError::Sql(s) => write!(f, "query: {s}"),
            PgError::Timeout(s) => write!(f, "deadline passed: {s}"),
        }
    }
}

impl std::error::Error for PgError {}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> PgError {
    PgError::Io(format!("{what} {}: {e}", path.display()))
}

/// Where to reach a member's PostgreSQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnTarget {
    /// The member name (what a standby reports it follows).
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl ConnTarget {
    /// Parse `postgres://host:port/db` (or `postgresql://`; port defaults to 5432;
    /// IPv6 hosts in brackets). Anything else is an error naming the problem.
    pub fn from_conn_url(name: &str, url: &str) -> Result<ConnTarget, String> {
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(|| format!("conn_url {url:?}: expected postgres://host:port/db"))?;
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        if authority.contains('@') {
            return Err(format!(
                "conn_url {url:?}: credentials in the URL are not accepted"
            ));
        }
        if authority.is_empty() {
            return Err(format!("conn_url {url:?}: no host"));
        }
        // `host` alone (no port) or `[v6]` alone get the default port.
        let has_port = match authority.rfind(']') {
            Some(close) => authority[close..].contains(':'),
            None => authority.contains(':'),
        };
        let hp = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:5432")
        };
        let (host, port) =
            conf::split_host_port(&hp).map_err(|e| format!("conn_url {url:?}: {e}"))?;
        let bracketed = authority.starts_with('[');
        let ok = if bracketed {
            host.parse::<std::net::Ipv6Addr>().is_ok()
        } else {
            !host.contains([':', '[', ']'])
        };
        if !ok {
            return Err(format!("conn_url {url:?}: host {host:?} is malformed"));
        }
        Ok(ConnTarget {
            name: name.to_string(),
            host,
            port,
        })
    }
}

/// The `conn_url` a member publishes: `postgres://<connect_address>/postgres`.
pub fn conn_url(connect_address: &str) -> String {
    format!("postgres://{connect_address}/postgres")
}

/// A replication slot name for a member. A name already made of `[a-z0-9_]` (at
/// most 63 bytes, PostgreSQL's limit) is used as it is. Any other is lowered,
/// every character outside `[a-z0-9_]` becomes `_`, and `_` plus eight hex digits
/// of a hash of the original name are appended (within 63 bytes), so `pg-1` and
/// `pg_1` get distinct slots: two members sharing a slot would each hold the other's
/// WAL position hostage or drop it.
pub fn slot_name(member: &str) -> String {
    let clean = !member.is_empty()
        && member.len() <= 63
        && member
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if clean {
        return member.to_string();
    }
    let base: String = member
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(63 - 9)
        .collect();
    // FNV-1a, 32 bits: stable across versions and machines (std's hasher is not).
    let hash = member.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{base}_{hash:08x}")
}

pub use crate::core::model::parse_lsn;

/// The OS user PostgreSQL's programs run as, when it differs from ours.
#[derive(Clone, Debug)]
struct RunAs {
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    home: PathBuf,
}

/// Control of one local PostgreSQL cluster.
pub struct PgCtl {
    cfg: PgConfig,
    me: String,
    run_as: Option<RunAs>,
    port: u16,
    /// `pg_ctl -t` for start and stop.
    ctl_timeout: Duration,
    /// The agent's connection, with the postmaster pid it was made to.
    client: Option<(tokio_postgres::Client, u32)>,
    /// Drives `client`'s connection task: it runs only inside this runtime's
    /// `block_on`, i.e. inside a call with a deadline (one thread, DESIGN §5).
    rt: tokio::runtime::Runtime,
    /// The member the standby config we last wrote follows.
    following: Option<String>,
    job: Option<job::RunningJob>,
    /// A replica build that could not start (no source to copy from, a data
    /// directory it cannot replace): reported by the next `poll_job` as a failed
    /// build, so the core's accounting (the `clonefrom` member passed over, the
    /// back-off) sees it as it sees a build that ran and failed (review of
    /// session 18, L1).
    failed_start: Option<(JobKind, String)>,
    /// A replica method's process group that outlived SIGKILL (`pg::job`: a
    /// process in uninterruptible sleep), and the method's name: no replica build
    /// starts while any of it lives, since it may still write where the next
    /// build's copy would go (review of create_replica_timeout, M2).
    pub(crate) lingering: Option<(i32, String)>,
    /// Member hosts `pg_hba.conf` admits (sorted, deduplicated), and whether the
    /// file in the data directory says so.
    hba_hosts: Vec<String>,
    hba_written: bool,
    /// The `synchronous_standby_names` this run last wrote to [`conf::SYNC_CONF`]
    /// (`None`: none since the last job, whose start reads the file). While the
    /// running server's value differs (the write's reload failed), the probe
    /// reports the names as unknown: the core sets them again and trusts no value
    /// until one holds, since any later reload (`pg_hba.conf`, an operator's) would
    /// apply the file behind the `sync` key's back (review M1).
    sync_file: Option<String>,
    /// A pidfd to the running postmaster, opened while it was verified (its pid).
    /// The fence signals through it even when `/proc` cannot be read (S1).
    postmaster_fd: Option<(u32, std::os::fd::OwnedFd)>,
    /// The last probe found `tenure.epoch`: the next one sends its read together
    /// with the probe's query (one round trip). Without the table the read would
    /// fail, and log an error in PostgreSQL's log, every loop.
    epoch_table_seen: bool,
    /// The managed `wal_retrieve_retry_interval` (`conf::wal_retry_interval`);
    /// `None`: not set (PostgreSQL's default).
    wal_retry: Option<Duration>,
    /// `PgCtl::set_cluster`: the scope (a replica method's `--scope`) and the
    /// system identifier a replica build's copy must carry (`None`: unknown, not
    /// checked).
    scope: String,
    cluster_sysid: Option<u64>,
    /// The cluster-wide settings last carried out (`set_cluster_params`), as the
    /// `config` key gave them; `None`: none yet in this run.
    params_want: Option<Vec<(String, String)>>,
    /// The text of [`conf::PARAMS_CONF`] as last written (and reloaded) or found
    /// equal: every later write of `tenure.conf` writes it too (a rebuilt data
    /// directory). `None`: not known yet, the file is left as it is.
    params_text: Option<String>,
    /// PostgreSQL's own check of those settings (`postgres -C`).
    param_checker: paramcheck::Checker,
    /// The last verdict: the list checked, the text of what passed, the names
    /// that passed, the refusals. A write or reload that failed is tried again
    /// without checking again.
    params_checked: Option<ParamsVerdict>,
    /// [`conf::PARAMS_CONF`] was written (by this run or, for all it knows, by one
    /// before it that died before its reload) and PostgreSQL has not re-read it.
    params_reload_pending: bool,
    /// A reload's node settings (`cfg.parameters`) not yet written to
    /// [`conf::NODE_CONF`] and re-read by PostgreSQL
    /// ([`PgCtl::finish_node_params`]).
    node_params_pending: bool,
    /// [`conf::NODE_CONF`] written (or, at an agent's start, maybe written by an
    /// earlier run) and not yet re-read by a running PostgreSQL.
    node_reload_pending: bool,
    /// The last answer of `files_above_running` (`true` for no answer, kept until
    /// the instant given), with the names the probe found raised and
    /// `pg_conf_load_time()` it was for.
    floor_pending: Option<((String, String), bool, Option<Instant>)>,
}

/// What [`PgCtl::set_cluster_params`] decided for a list (see `params_checked`).
#[derive(Clone, Debug)]
struct ParamsVerdict {
    params: Vec<(String, String)>,
    text: String,
    kept: Vec<String>,
    refused: Vec<paramcheck::Refusal>,
}

/// What [`PgCtl::set_cluster_params`] did.
#[derive(Debug)]
pub struct ParamsApplied {
    /// The settings now in [`conf::PARAMS_CONF`].
    pub set: Vec<String>,
    /// The file changed (`false`: it held them already).
    pub written: bool,
    /// PostgreSQL was running and re-read its files.
    pub reloaded: bool,
    /// The settings PostgreSQL's parser refused: left out of the file.
    pub refused: Vec<paramcheck::Refusal>,
}

/// How long a failed `files_above_running` answer stands before it is asked again.
const FLOOR_RETRY: Duration = Duration::from_secs(5);

/// What [`PgCtl::set_node_params`] (or [`PgCtl::finish_node_params`]) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeParamsApplied {
    /// [`conf::NODE_CONF`] rewritten and PostgreSQL reloaded.
    Reloaded,
    /// Rewritten; PostgreSQL is not running (its next start reads it).
    Written,
    /// A job runs: written and reloaded after it (its own write of
    /// `tenure.conf` already writes them).
    AfterTheJob,
    /// No `tenure.conf` yet (no cluster here): its first start writes them.
    NoCluster,
    /// [`conf::NODE_CONF`] held them already, and PostgreSQL had read it (or is
    /// not running).
    Unchanged,
    /// [`conf::NODE_CONF`] held them already; PostgreSQL re-read it (an agent's
    /// start, or a reload that failed before).
    Reread,
    /// The `tenure.conf` in the data directory was written by an older version
    /// (the node's settings inline): the next start or restart writes both files.
    AtNextStart,
}

/// The largest `postgresql.auto.conf` tenure reads (1 MiB; ALTER SYSTEM writes a
/// line per setting).
const AUTO_CONF_MAX: u64 = 1 << 20;

/// The most of `postgresql.conf` read (the stock file is about 30 KB).
const PG_CONF_MAX: u64 = 4 << 20;

/// `config::read_file` for the data directory's files: `Ok(None)` when `path`
/// does not exist (a FIFO or a device there must not hold the loop; with
/// `nofollow`, a link is refused). Returns the bytes and the permission bits.
/// The error names what is wrong.
fn read_regular(path: &Path, max: u64, nofollow: bool) -> Result<Option<(Vec<u8>, u32)>, String> {
    match crate::config::read_file(path, max, nofollow) {
        Ok((b, meta)) => Ok(Some((b, meta.permissions().mode() & 0o7777))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            Err("a symbolic link, not a regular file".into())
        }
        Err(e) => Err(e.to_string()),
    }
}

impl PgCtl {
    /// Resolve the OS user, check the configuration, make `socket_dir` (0700, owned
    /// by the PostgreSQL user).
    pub fn new(cfg: &PgConfig, member_name: &str) -> Result<PgCtl, PgError> {
        conf::check_parameters(&cfg.parameters).map_err(PgError::Config)?;
        let (_, port) = conf::split_host_port(&cfg.listen)
            .map_err(|e| PgError::Config(format!("listen: {e}")))?;
        if cfg.data_dir.file_name().is_none() || !cfg.data_dir.is_absolute() {
            return Err(PgError::Config(format!(
                "data_dir {} must be an absolute path to a directory",
                cfg.data_dir.display()
            )));
        }
        if member_name.is_empty() || member_name.contains(['\n', '\r']) {
            return Err(PgError::Config(format!(
                "member name {member_name:?} is not usable"
            )));
        }
        let run_as = resolve_user(cfg.user.as_deref())?;
        let mut ctl = PgCtl {
            cfg: cfg.clone(),
            me: member_name.to_string(),
            run_as,
            port,
            ctl_timeout: Duration::from_secs(60),
            client: None,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(|e| PgError::Config(format!("cannot build the query runtime: {e}")))?,
            following: None,
            job: None,
            failed_start: None,
            lingering: None,
            hba_hosts: Vec::new(),
            hba_written: false,
            sync_file: None,
            postmaster_fd: None,
            epoch_table_seen: false,
            wal_retry: None,
            scope: String::new(),
            cluster_sysid: None,
            params_want: None,
            params_text: None,
            param_checker: paramcheck::Checker::new(&cfg.socket_dir),
            params_checked: None,
            params_reload_pending: true,
            // The file is compared with the configuration once (`finish_node_params`).
            node_params_pending: true,
            node_reload_pending: true,
            floor_pending: None,
        };
        fs::create_dir_all(&cfg.socket_dir)
            .map_err(|e| io_err("create socket_dir", &cfg.socket_dir, e))?;
        fs::set_permissions(&cfg.socket_dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err("chmod 0700", &cfg.socket_dir, e))?;
        ctl.chown(&cfg.socket_dir)?;
        ctl.following = fs::read_to_string(cfg.data_dir.join("tenure.conf"))
            .ok()
            .and_then(|t| conf::parse_following(&t));
        // What the file says now stands for what this run wrote until a job
        // starts: a restart after a failed reload is still seen.
        ctl.sync_file = fs::read_to_string(cfg.data_dir.join(conf::SYNC_CONF))
            .ok()
            .and_then(|t| conf::parse_sync_conf(&t));
        Ok(ctl)
    }

    /// `pg_ctl -t` for start and stop jobs (default 60 s). The loop supervises the
    /// job; this only bounds how long pg_ctl itself waits.
    pub fn set_ctl_timeout(&mut self, d: Duration) {
        self.ctl_timeout = d.max(Duration::from_secs(1));
    }

    pub fn config(&self) -> &PgConfig {
        &self.cfg
    }

    /// Follow `loop_wait` with `wal_retrieve_retry_interval` (`conf::wal_retry_interval`)
    /// from the next write of `tenure.conf` on (every start, retarget, rewind and
    /// basebackup).
    pub fn set_loop_wait(&mut self, loop_wait: Duration) {
        self.wal_retry = Some(conf::wal_retry_interval(loop_wait));
    }

    /// The passfile (outside the data dir): replication and rewind passwords.
    pub fn passfile(&self) -> PathBuf {
        self.sibling("pgpass")
    }

    /// The server log (next to the data dir, not inside it).
    pub fn server_log(&self) -> PathBuf {
        self.sibling("log")
    }

    /// The log of job children (stdout and stderr of initdb, pg_ctl, ...).
    pub fn job_log(&self) -> PathBuf {
        self.sibling("job.log")
    }

    /// `<data_dir>.<suffix>`, a sibling of the data directory.
    fn sibling(&self, suffix: &str) -> PathBuf {
        let mut name = self
            .cfg
            .data_dir
            .file_name()
            .unwrap_or_default()
            .to_os_string();
        name.push(".");
        name.push(suffix);
        self.cfg.data_dir.with_file_name(name)
    }

    /// The data directory with its parent resolved, as `/proc/<pid>/cwd` shows it.
    fn data_canon(&self) -> PathBuf {
        let d = &self.cfg.data_dir;
        if let Ok(c) = d.canonicalize() {
            return c;
        }
        match (
            d.parent().and_then(|p| p.canonicalize().ok()),
            d.file_name(),
        ) {
            (Some(p), Some(n)) => p.join(n),
            _ => d.clone(),
        }
    }

    /// Give `path` to the PostgreSQL user (no-op when we are that user).
    /// `chown` without following a symbolic link at `path`: the PostgreSQL user
    /// owns the directories these files are made in and could put a link to a
    /// file of root's in place between our create and this call (review of
    /// session 18, L6); the link itself would then be what changes owner.
    fn chown(&self, path: &Path) -> Result<(), PgError> {
        if let Some(r) = &self.run_as {
            nix::unistd::fchownat(
                nix::fcntl::AT_FDCWD,
                path,
                Some(r.uid),
                Some(r.gid),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| {
                PgError::Io(format!(
                    "chown {} to the postgres user: {e}",
                    path.display()
                ))
            })?;
        }
        Ok(())
    }

    /// `chown` of a file we hold open: no path to swap.
    fn fchown(&self, f: &fs::File, path: &Path) -> Result<(), PgError> {
        if let Some(r) = &self.run_as {
            nix::unistd::fchown(f, Some(r.uid), Some(r.gid)).map_err(|e| {
                PgError::Io(format!(
                    "chown {} to the postgres user: {e}",
                    path.display()
                ))
            })?;
        }
        Ok(())
    }

    /// Write a file atomically (temp + rename) with mode 0600, owned by the
    /// PostgreSQL user.
    fn write_owned(&self, path: &Path, text: &str) -> Result<(), PgError> {
        self.write_owned_bytes(path, text.as_bytes())
    }

    /// [`Self::write_owned`] for any bytes.
    fn write_owned_bytes(&self, path: &Path, text: &[u8]) -> Result<(), PgError> {
        self.write_owned_mode(path, text, 0o600)
    }

    /// [`Self::write_owned_bytes`] with the file's mode (masked to 0640: never
    /// more than PostgreSQL's group-readable clusters use). Owner and mode are
    /// set on the open file, never by path (L6).
    fn write_owned_mode(&self, path: &Path, text: &[u8], mode: u32) -> Result<(), PgError> {
        let mut tmp = path.as_os_str().to_os_string();
        tmp.push(".tenure-tmp");
        let tmp = PathBuf::from(tmp);
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_err("create", &tmp, e))?;
        f.write_all(text)
            .and_then(|_| f.sync_all())
            .map_err(|e| io_err("write", &tmp, e))?;
        let mode = mode & 0o640;
        if mode != 0o600 {
            f.set_permissions(fs::Permissions::from_mode(mode))
                .map_err(|e| io_err("chmod", &tmp, e))?;
        }
        self.fchown(&f, &tmp)?;
        drop(f);
        fs::rename(&tmp, path).map_err(|e| io_err("rename into place", path, e))
    }

    /// Reads `global/pg_control` directly (the system identifier is its first 8
    /// bytes, little endian on every platform PostgreSQL runs on here).
    pub fn data_dir_state(&self) -> DataDir {
        dir_state(&self.cfg.data_dir)
    }

    /// The cluster id the data must carry (the `initialize` key's), and the scope,
    /// for a replica build's check of the copy and a method's `--scope`
    /// (`pg::job`); the shell sets them before starting a `Basebackup` job.
    pub fn set_cluster(&mut self, scope: &str, sysid: Option<u64>) {
        if self.scope != scope {
            self.scope = scope.to_string();
        }
        self.cluster_sysid = sysid;
    }
}

/// `<d>.building`, the mark a replica build or a bootstrap leaves while the data
/// directory is not yet a cluster to use (`pg::job`).
pub(crate) fn build_mark_of(d: &Path) -> PathBuf {
    let mut name = d.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(crate::core::model::BUILD_MARK);
    d.with_file_name(name)
}

/// `Some(Held)` when a build's or bootstrap's mark is next to the non-empty `d`: one
/// stat, ENOENT in every other case.
fn held(d: &Path) -> Option<DataDir> {
    let mark = build_mark_of(d);
    fs::symlink_metadata(&mark).ok()?;
    let mut why = [0u8; 512];
    let n = read_head(&mark, &mut why).unwrap_or(0);
    let why = String::from_utf8_lossy(&why[..n]).trim().to_string();
    Some(DataDir::Held(format!(
        "{}; check what it holds, then remove {} to use it, or empty the directory \
         (or `tenure ctl reinit`) to build again",
        if why.is_empty() {
            "a replica build was under way when it was written into".into()
        } else {
            why
        },
        mark.display()
    )))
}

/// What the directory `d` holds, as `PgCtl::data_dir_state` reports it: also used
/// on a replica build's copy before it is moved into place (`pg::job`).
pub(crate) fn dir_state(d: &Path) -> DataDir {
    // The usual answer first, in a few system calls (it runs every loop): a
    // readable `pg_control` with a system identifier means the directory exists
    // and is not empty, so the listing below would say what this says (except
    // for a directory that can be traversed but not listed, which is now
    // Present rather than Unusable: its files are what PostgreSQL reads).
    // Anything else takes the full path, which names what is wrong.
    let ctl = d.join("global").join("pg_control");
    let mut head = [0u8; 20];
    if let Ok(n @ 8..) = read_head(&ctl, &mut head)
        && head[..8] != [0u8; 8]
        && d.join("PG_VERSION").is_file()
    {
        if let Some(held) = held(d) {
            return held;
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&head[..8]);
        return DataDir::Present {
            sysid: u64::from_le_bytes(id),
            was_primary: was_primary(&head[..n]) && !d.join("standby.signal").exists(),
        };
    }
    let mut entries = match fs::read_dir(d) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return DataDir::Empty,
        Err(e) => return DataDir::Unusable(format!("cannot list {}: {e}", d.display())),
    };
    if entries.next().is_none() {
        return DataDir::Empty;
    }
    if let Some(held) = held(d) {
        return held;
    }
    if !d.join("PG_VERSION").is_file() {
        return DataDir::Unusable(format!(
            "{} is not empty and has no PG_VERSION",
            d.display()
        ));
    }
    // Non-blocking and only a regular file (L5: a FIFO here must not hold the
    // loop); pg_control is 8 KiB.
    match read_regular(&ctl, 64 << 10, false).and_then(|r| r.ok_or_else(|| "missing".into())) {
        Ok((b, _)) if b.len() >= 8 => {
            let mut id = [0u8; 8];
            id.copy_from_slice(&b[..8]);
            match u64::from_le_bytes(id) {
                0 => DataDir::Unusable(format!("{}: system identifier 0", ctl.display())),
                sysid => DataDir::Present {
                    sysid,
                    was_primary: was_primary(&b) && !d.join("standby.signal").exists(),
                },
            }
        }
        Ok((b, _)) => DataDir::Unusable(format!("{}: only {} bytes", ctl.display(), b.len())),
        Err(e) => DataDir::Unusable(format!("cannot read {}: {e}", ctl.display())),
    }
}

impl PgCtl {
    /// The pid `postmaster.pid` names, unverified (the file may be stale). Its first
    /// line only, read into a stack buffer: this runs two or three times a loop.
    fn postmaster_file_pid(&self) -> Option<u32> {
        let mut head = [0u8; 24];
        let n = read_head(&self.cfg.data_dir.join("postmaster.pid"), &mut head).ok()?;
        let line = head[..n].split(|&b| b == b'\n').next()?;
        // A line that fills the buffer may be cut: no pid is that long.
        if line.len() == head.len() {
            return None;
        }
        let pid: u32 = std::str::from_utf8(line).ok()?.trim().parse().ok()?;
        (pid > 1).then_some(pid)
    }

    /// The live postmaster: the pid in `postmaster.pid`, alive, not a zombie, and
    /// with the data directory as its cwd (a stale file or a reused pid says no).
    ///
    /// While the pid is the one the held pidfd was opened for (verified then: alive,
    /// its cwd the data directory), the pidfd answers in one `poll(2)`: it names
    /// that very process, whose cwd PostgreSQL never changes (issue 13 item 2: the
    /// `/proc` check, with the path's canonicalisation, was a tenth of an idle
    /// agent's CPU). It may say "running" a little longer than `/proc` would — in
    /// the instant between an exiting postmaster dropping its cwd and becoming a
    /// zombie, or for a postmaster whose data directory was moved away under it —
    /// never shorter: an exited or unknown pidfd falls back to `/proc` (the file may
    /// name a new process that reused the pid). A "running" answer only lets a
    /// caller query PostgreSQL or decline to act; the fence never asks it (it scans).
    pub fn postmaster_pid(&self) -> Option<u32> {
        let pid = self.postmaster_file_pid()?;
        if let Some((held, fd)) = &self.postmaster_fd
            && *held == pid
            && procs::pidfd_exited(fd) == Some(false)
        {
            return Some(pid);
        }
        procs::alive_in(pid, &self.data_canon()).then_some(pid)
    }

    /// What belongs to this PostgreSQL, for the process scan: processes in the data
    /// directory, the postmaster `postmaster.pid` names (verified by the scan) and
    /// its children, and the running job's process tree.
    fn cluster(&self) -> procs::Cluster {
        let pg_user = match &self.run_as {
            Some(r) => r.uid.as_raw(),
            None => nix::unistd::geteuid().as_raw(),
        };
        let mut owners = vec![pg_user];
        if let Ok(m) = fs::metadata(&self.cfg.data_dir) {
            owners.push(m.uid());
        }
        // PostgreSQL refuses to run as root: root is never an owner.
        owners.retain(|&u| u != 0);
        owners.sort_unstable();
        owners.dedup();
        procs::Cluster {
            dir: self.data_canon(),
            owners,
            postmaster: self.postmaster_file_pid(),
            job: self.job_pid(),
        }
    }

    /// Every process of this PostgreSQL that may still run: those the scan verified
    /// and those whose membership it could not read. `Err` when the process table
    /// cannot be listed: that is "processes may remain", never "none" (DESIGN §5).
    pub fn pids(&self) -> Result<Vec<u32>, String> {
        procs::ProcFs::system()
            .scan(&self.cluster(), &Default::default())
            .map(|s| s.pids())
    }

    /// [`Self::pids`] as a refusal says it: the verified ones, then those in
    /// doubt with why. `None`: nothing remains.
    pub(crate) fn running_text(&self) -> Result<Option<String>, String> {
        let s = procs::ProcFs::system().scan(&self.cluster(), &Default::default())?;
        if s.is_empty() {
            return Ok(None);
        }
        let mut parts: Vec<String> = s.members.iter().map(|m| m.pid.to_string()).collect();
        parts.extend(
            s.unknown
                .iter()
                .map(|(pid, why)| format!("{pid}, which could not be told ({why})")),
        );
        Ok(Some(parts.join(", ")))
    }

    /// DESIGN S1's fence; see `procs::fence`: the postmaster, its backends, orphans
    /// in the data directory and the running job's whole process tree (the job then
    /// reports its child's death). Drops the agent's connection first (it is about
    /// to die anyway, and must not be reused).
    pub fn fence(&mut self, deadline: Instant) -> FenceOutcome {
        self.client = None;
        // S1: nothing planned before the fence runs after it (a restart's start).
        if let Some(j) = self.job.as_mut() {
            j.abort("aborted by a fence: the remaining steps were dropped (S1)");
        }
        let held = self.postmaster_fd.take();
        let out = procs::fence(
            &procs::ProcFs::system(),
            &self.cluster(),
            held.as_ref().map(|(_, fd)| fd),
            deadline,
        );
        if out == FenceOutcome::Incomplete {
            // Keep it for the retry.
            self.postmaster_fd = held;
        }
        out
    }

    /// What the local PostgreSQL is doing. Never errors; see `PgStatus`.
    pub fn probe(&mut self, deadline: Instant) -> PgStatus {
        let data = self.data_dir_state();
        let Some(pm) = self.postmaster_pid() else {
            self.client = None;
            self.epoch_table_seen = false;
            return PgStatus::unanswered(data, PgRole::Stopped);
        };
        // What the last probe saw holds for the server it asked: a new postmaster
        // (a fresh initdb among them) is asked first whether the table exists.
        if self.client.as_ref().is_none_or(|(_, p)| *p != pm) {
            self.epoch_table_seen = false;
        }
        if self
            .postmaster_fd
            .as_ref()
            .is_none_or(|(pid, fd)| *pid != pm || procs::pidfd_exited(fd) != Some(false))
        {
            // A new postmaster, or one that reused the exited one's pid.
            self.postmaster_fd =
                procs::pidfd_of_verified(pm, &self.data_canon()).map(|fd| (pm, fd));
        }
        let sql = concat!(
            "SELECT pg_is_in_recovery(), \
             CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END, \
             CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn() END, \
             pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), \
             (SELECT received_tli FROM pg_stat_wal_receiver), \
             (SELECT status FROM pg_stat_wal_receiver), \
             (SELECT timeline_id FROM pg_control_checkpoint()), \
             to_regclass('tenure.epoch') IS NOT NULL, \
             current_setting('synchronous_standby_names'), \
             (SELECT json_agg(json_build_array(application_name, state, sync_state, \
                 flush_lsn::text)) FROM pg_stat_replication), \
             current_setting('server_version_num'), \
             to_char(pg_postmaster_start_time(), 'YYYY-MM-DD HH24:MI:SS.USTZH:TZM'), \
             (SELECT latest_end_lsn FROM pg_stat_wal_receiver), \
             CASE WHEN pg_is_in_recovery() THEN to_char(pg_last_xact_replay_timestamp(), \
                 'YYYY-MM-DD HH24:MI:SS.USTZH:TZM') END, \
             CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END, \
             (SELECT json_agg(json_build_object('usename', usename, \
                 'application_name', application_name, 'client_addr', client_addr, \
                 'state', state, 'sync_state', sync_state, 'sync_priority', sync_priority)) \
                 FROM pg_stat_replication), \
             EXISTS (SELECT 1 FROM pg_settings WHERE pending_restart AND NOT \
                 (pg_is_in_recovery() AND source = 'command line' AND name IN (",
            floor_names!(),
            "))), \
             (SELECT json_agg(json_build_array(slot_name, restart_lsn::text, active, \
                 wal_status) ORDER BY slot_name) FROM pg_replication_slots \
                 WHERE slot_type = 'physical' AND NOT temporary), \
             (SELECT string_agg(name, ',' ORDER BY name) FROM pg_settings WHERE \
                 pg_is_in_recovery() AND pending_restart AND source = 'command line' \
                 AND name IN (",
            floor_names!(),
            ")), \
             pg_conf_load_time()::text"
        );
        // The epoch row's read, sent with the probe's query when the last probe saw
        // the table; used only if this one sees it too (as if read after it).
        let (rows, early_epoch) = if self.epoch_table_seen {
            let (rows, epoch) = self.query_pair(pm, sql, EPOCH_ROW, deadline);
            (rows, Some(epoch))
        } else {
            (self.query_rows(pm, sql, deadline), None)
        };
        let row = match rows.and_then(|r| {
            r.into_iter()
                .next()
                .ok_or_else(|| PgError::Sql(format!("{}: no row", first_words(sql))))
        }) {
            Ok(r) => r,
            Err(e) => {
                self.epoch_table_seen = false;
                log::debug!("probe of {}: {e}", self.me);
                return PgStatus::unanswered(data, PgRole::Unresponsive);
            }
        };
        let col = |i: usize| row.get(i).cloned().flatten();
        let mut st = PgStatus::unanswered(data, PgRole::Unresponsive);
        if col(0).as_deref() == Some("f") {
            st.role = PgRole::Primary;
            st.timeline = col(1)
                .and_then(|w| w.get(..8).and_then(|h| u32::from_str_radix(h, 16).ok()))
                .unwrap_or(0);
            st.lsn = col(2).and_then(|l| parse_lsn(&l)).unwrap_or(0);
        } else if col(0).as_deref() == Some("t") {
            st.role = PgRole::Replica;
            let recv = col(3).and_then(|l| parse_lsn(&l)).unwrap_or(0);
            let replay = col(4).and_then(|l| parse_lsn(&l)).unwrap_or(0);
            st.lsn = recv.max(replay);
            st.report.receive_lsn = col(3).and_then(|l| parse_lsn(&l));
            st.report.replay_lsn = col(4).and_then(|l| parse_lsn(&l));
            st.report.latest_end_lsn = col(13).and_then(|l| parse_lsn(&l));
            st.report.replayed_timestamp = col(14);
            st.report.replay_paused = col(15).map(|p| p == "t");
            // The WAL receiver's timeline when it runs. Without one, the last
            // restartpoint's timeline (pg_control) can still name the timeline before
            // a switch the replica already replayed, so the newest timeline among the
            // WAL segments in pg_wal counts too (a replica writes segments of a new
            // timeline as soon as it follows it; a forked one never does).
            st.timeline = col(5)
                .and_then(|t| t.parse::<u32>().ok())
                .filter(|&t| t > 0)
                .unwrap_or_else(|| {
                    let checkpoint = col(7).and_then(|t| t.parse().ok()).unwrap_or(0);
                    checkpoint.max(newest_segment_timeline(&self.cfg.data_dir.join("pg_wal")))
                });
            st.streaming = col(6).as_deref() == Some("streaming");
            st.following = self.following.clone();
        }
        st.sync_names = col(9);
        if let Some(f) = &self.sync_file
            && st.sync_names.as_ref() != Some(f)
        {
            st.sync_names = None;
        }
        if st.role == PgRole::Primary {
            st.standbys = col(10).map(|j| parse_standbys(&j)).unwrap_or_default();
            st.report.replication_json = col(16);
        }
        // Only for the API's status (Patroni's fields): never decided on.
        st.report.server_version = col(11).and_then(|v| v.parse().ok());
        st.report.postmaster_start_time = col(12);
        st.report.pending_restart = col(17).as_deref() == Some("t");
        // A setting a standby's start raised to its primary's (`hotstandby`: on
        // the command line, over the files) is flagged by PostgreSQL at every
        // reload while the files say less: pending only where a file says more
        // than runs. Judged once per set of names and configuration load.
        // A standby only: a primary (a promoted replica) starts with its files'
        // values, so PostgreSQL's flag stands there. A failed answer is kept too
        // (as PostgreSQL says: pending), not asked again at every probe.
        if let Some(names) = col(19) {
            let key = (names, col(20).unwrap_or_default());
            let now = clock::now();
            let pending = match &self.floor_pending {
                Some((k, v, until)) if *k == key && until.is_none_or(|t| now < t) => *v,
                _ => {
                    let v = self.files_above_running(pm, deadline);
                    // No answer: asked again FLOOR_RETRY later, not at every probe.
                    let until = v.is_none().then(|| now.add(FLOOR_RETRY));
                    let v = v.unwrap_or(true);
                    self.floor_pending = Some((key, v, until));
                    v
                }
            };
            st.report.pending_restart |= pending;
        }
        st.report.slots_json = col(18);
        self.epoch_table_seen = col(8).as_deref() == Some("t");
        if self.epoch_table_seen {
            // A missing row is "no epoch"; a failed read is "unknown" (`unread`: the
            // core keeps what it knew, DESIGN §3), never an error: the role found
            // above stands.
            let read = match early_epoch {
                Some(r) => r,
                None => self.query_rows(pm, EPOCH_ROW, deadline),
            };
            match read {
                Ok(rows) => {
                    let cell = |i: usize| rows.first().and_then(|r| r.get(i).cloned().flatten());
                    st.epoch = cell(0).and_then(|e| e.parse().ok());
                    st.epoch_row.member = cell(1);
                    st.epoch_row.lease = cell(2).and_then(|l| l.parse().ok());
                }
                Err(e) => {
                    st.epoch_row.unread = true;
                    log::debug!("reading tenure.epoch on {}: {e}", self.me);
                }
            }
        }
        st
    }

    /// Record `epoch` (and the member that leads under it) in the one-row table
    /// `tenure.epoch`, in one transaction. `synchronous_commit = local` so the write
    /// never waits for a standby (DESIGN §3a): it must not hang a promotion.
    pub fn write_epoch(
        &mut self,
        epoch: Epoch,
        member: &str,
        lease: Option<LeaseId>,
        deadline: Instant,
    ) -> Result<(), PgError> {
        let pm = self.live_postmaster()?;
        let lease = lease.map_or_else(|| "NULL".to_string(), |l| l.to_string());
        let sql = format!(
            "BEGIN; \
             {EPOCH_TABLE} \
             SET LOCAL synchronous_commit = local; \
             INSERT INTO tenure.epoch (id, epoch, member, lease) VALUES (1, {epoch}, {m}, {lease}) \
               ON CONFLICT (id) DO UPDATE SET epoch = EXCLUDED.epoch, \
               member = EXCLUDED.member, lease = EXCLUDED.lease, at = now(); \
             COMMIT;",
            // Quoted as a literal; control characters (a NUL would fail the query)
            // dropped: the name is informational.
            m = conf::sql_literal(
                &member
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect::<String>()
            )
        );
        let r = self.query_rows(pm, &sql, deadline).map(|_| ());
        if r.is_err() {
            // The connection was dropped with the error: an open transaction dies with it.
            log::debug!("write_epoch {epoch} failed; connection dropped");
        }
        r
    }

    /// The agent's connection to the postmaster `pm`, (re)connected as needed,
    /// within the deadline.
    fn client(
        &mut self,
        pm: u32,
        deadline: Instant,
    ) -> Result<&mut tokio_postgres::Client, PgError> {
        if self.client.as_ref().is_some_and(|(_, p)| *p != pm) {
            self.client = None;
        }
        if self.client.is_none() {
            // Cheap early answer for the common wedge (SIGSTOP); the timeout below
            // covers every other.
            if procs::is_stopped(pm) {
                return Err(PgError::Sql(format!(
                    "postmaster {pm} is stopped (SIGSTOP)"
                )));
            }
            let left = clock::now().until(deadline);
            if left.is_zero() {
                return Err(PgError::Timeout("no time left to connect".into()));
            }
            let mut config = tokio_postgres::Config::new();
            config
                .host_path(&self.cfg.socket_dir)
                .port(self.port)
                .user(&self.cfg.superuser)
                .dbname("postgres")
                .application_name("tenure")
                // Keep the agent's log for the agent's own sentences.
                // Its own writes (the epoch row) whatever a cluster-wide
                // `default_transaction_read_only` says.
                .options("-c client_min_messages=warning -c default_transaction_read_only=off")
                .connect_timeout(left);
            // The whole handshake is bounded, not just the socket connect: a stopped
            // or wedged postmaster accepts the connection and never answers.
            let connected = self.rt.block_on(async {
                tokio::time::timeout(left, config.connect(tokio_postgres::NoTls)).await
            });
            let target = || format!("{}/.s.PGSQL.{}", self.cfg.socket_dir.display(), self.port);
            let (client, connection) = match connected {
                Ok(Ok(pair)) => pair,
                Ok(Err(e)) => return Err(PgError::Sql(format!("connect to {}: {e}", target()))),
                Err(_) => {
                    return Err(PgError::Timeout(format!(
                        "connect to {}: no answer within {:.3} s",
                        target(),
                        left.as_secs_f64()
                    )));
                }
            };
            // Polled only inside `self.rt.block_on`, which every query goes through.
            self.rt.spawn(async move {
                let _ = connection.await;
            });
            // The connection idles a loop between probes: a cluster-wide
            // `idle_session_timeout` must not close it. A statement, not a startup
            // option: PostgreSQL 13 has no such setting and would refuse the
            // connection for naming it.
            let left = clock::now().until(deadline);
            let pinned = self.rt.block_on(async {
                tokio::time::timeout(
                    left,
                    client.simple_query(
                        "SELECT set_config(name, '0', false) FROM pg_settings \
                         WHERE name = 'idle_session_timeout'",
                    ),
                )
                .await
            });
            match pinned {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(PgError::Sql(format!("connect to {}: {e}", target())));
                }
                Err(_) => {
                    return Err(PgError::Timeout(format!(
                        "connect to {}: no answer within {:.3} s",
                        target(),
                        left.as_secs_f64()
                    )));
                }
            }
            self.client = Some((client, pm));
        }
        match self.client.as_mut() {
            Some((c, _)) => Ok(c),
            None => Err(PgError::Sql("no connection".into())),
        }
    }

    /// Run `sql` (simple protocol) with `statement_timeout` set to what is left of
    /// the deadline; returns every row as text columns. Drops the connection on error.
    fn query_rows(
        &mut self,
        pm: u32,
        sql: &str,
        deadline: Instant,
    ) -> Result<Vec<Vec<Option<String>>>, PgError> {
        let r = self.query_rows_inner(pm, sql, deadline);
        if r.is_err() {
            self.client = None;
        }
        r
    }

    fn query_rows_inner(
        &mut self,
        pm: u32,
        sql: &str,
        deadline: Instant,
    ) -> Result<Vec<Vec<Option<String>>>, PgError> {
        self.queries(pm, sql, None, deadline).0
    }

    /// Two statements sent together, pipelined: one round trip for both (issue 13
    /// item 2: the probe's second query cost a tenth of a replica's CPU in its own
    /// wake-up). Each is its own simple query, so its own implicit transaction with
    /// its own `statement_timeout`, executed in order and answered apart: an error
    /// or a timeout in the second leaves the first's rows. Both bounded by the one
    /// deadline; an error in either drops the connection (as `query_rows` does).
    fn query_pair(
        &mut self,
        pm: u32,
        first: &str,
        second: &str,
        deadline: Instant,
    ) -> (Result<Rows, PgError>, Result<Rows, PgError>) {
        let (a, b) = self.queries(pm, first, Some(second), deadline);
        let b = b.unwrap_or_else(|| Err(PgError::Sql("not sent".into())));
        if a.is_err() || b.is_err() {
            self.client = None;
        }
        (a, b)
    }

    /// `first`, and `second` pipelined behind it, with `statement_timeout` set to
    /// what is left of the deadline (server side, it ends a statement; client side,
    /// the timeout ends the wait even if the backend never answers: stopped, stuck
    /// in I/O; then a cancel request, itself bounded). Each answer is kept as it
    /// arrives, so a second statement that hangs costs only its own result.
    fn queries(
        &mut self,
        pm: u32,
        first: &str,
        second: Option<&str>,
        deadline: Instant,
    ) -> (Result<Rows, PgError>, Option<Result<Rows, PgError>>) {
        let both = |e: PgError| (Err(e.clone()), second.map(|_| Err(e)));
        if let Err(e) = self.client(pm, deadline) {
            return both(e);
        }
        let Some((c, _)) = self.client.as_ref() else {
            return both(PgError::Sql("no connection".into()));
        };
        let left = clock::now().until(deadline);
        if left.is_zero() {
            return both(PgError::Timeout("no time left for the query".into()));
        }
        let t1 = with_timeout(first, left);
        let t2 = second.map(|s| with_timeout(s, left));
        let (mut a, mut b) = (None, None);
        // `join!` polls the first future first, and a simple query is sent on its
        // first poll: the statements reach the server in order.
        let timed_out = self
            .rt
            .block_on(async {
                tokio::time::timeout(left, async {
                    tokio::join!(async { a = Some(c.simple_query(&t1).await) }, async {
                        if let Some(t2) = &t2 {
                            b = Some(c.simple_query(t2).await);
                        }
                    })
                })
                .await
            })
            .is_err();
        let answer = |r: Option<Result<_, tokio_postgres::Error>>, sql: &str| match r {
            Some(Ok(m)) => Ok(rows_of(m)),
            Some(Err(e)) => Err(PgError::Sql(format!("{}: {e}", first_words(sql)))),
            None => Err(PgError::Timeout(format!(
                "{}: no answer within {:.3} s",
                first_words(sql),
                left.as_secs_f64()
            ))),
        };
        if timed_out {
            // The statement still running is the first unanswered one.
            let hung = if a.is_none() {
                first
            } else {
                second.unwrap_or(first)
            };
            let e = self.cancel_after(c, hung, left);
            let a = if a.is_some() {
                answer(a, first)
            } else {
                Err(e.clone())
            };
            return (a, second.map(|_| Err(e)));
        }
        (answer(a, first), second.map(|s| answer(b, s)))
    }

    /// A query ran out of time: ask the server to cancel it (itself bounded) and
    /// say so.
    fn cancel_after(&self, c: &tokio_postgres::Client, sql: &str, left: Duration) -> PgError {
        let token = c.cancel_token();
        let _ = self.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_millis(100),
                token.cancel_query(tokio_postgres::NoTls),
            )
            .await
        });
        PgError::Timeout(format!(
            "{}: no answer within {:.3} s (cancel sent)",
            first_words(sql),
            left.as_secs_f64()
        ))
    }

    fn query_row(
        &mut self,
        pm: u32,
        sql: &str,
        deadline: Instant,
    ) -> Result<Vec<Option<String>>, PgError> {
        self.query_rows(pm, sql, deadline)?
            .into_iter()
            .next()
            .ok_or_else(|| PgError::Sql(format!("{}: no row", first_words(sql))))
    }

    fn live_postmaster(&self) -> Result<u32, PgError> {
        self.postmaster_pid()
            .ok_or_else(|| PgError::Refused("PostgreSQL is not running".into()))
    }

    /// `SELECT pg_promote(true, n)`, bounded by the deadline. On a timeout the
    /// promotion was still requested and may complete later: probe to find out.
    pub fn promote(&mut self, deadline: Instant) -> Result<(), PgError> {
        let pm = self.live_postmaster()?;
        let secs = clock::now()
            .until(deadline)
            .as_secs()
            .clamp(1, i32::MAX as u64);
        let row = self.query_row(pm, &format!("SELECT pg_promote(true, {secs})"), deadline)?;
        match row.first().cloned().flatten().as_deref() {
            Some("t") => {
                self.following = None;
                Ok(())
            }
            other => Err(PgError::Timeout(format!(
                "pg_promote answered {other:?}: not promoted within {secs} s (requested, may still complete)"
            ))),
        }
    }

    /// DESIGN §3a: one `pg_hba.conf` entry per member address. Rewrites the file
    /// (and reloads a running PostgreSQL) only when a host is new or the file was
    /// not written by this run yet; jobs that replace the data directory write it
    /// again with the same hosts. Existing connections are not affected by a reload.
    ///
    /// Grow-only within a run: a member whose key expired (partitioned, agent
    /// restarting) keeps its entry, or its rewind on rejoining would race the
    /// re-publication of its key and fail. A removed member's address goes with the
    /// next agent restart.
    pub fn set_hba_hosts(
        &mut self,
        mut hosts: Vec<String>,
        deadline: Instant,
    ) -> Result<bool, PgError> {
        hosts.extend(self.hba_hosts.iter().cloned());
        hosts.sort();
        hosts.dedup();
        if hosts == self.hba_hosts && self.hba_written {
            return Ok(false);
        }
        self.hba_hosts = hosts;
        self.hba_written = false;
        if self.job.is_some() || !matches!(self.data_dir_state(), DataDir::Present { .. }) {
            // The job (or the bootstrap) writes it with these hosts.
            return Ok(false);
        }
        let p = self.cfg.data_dir.join("pg_hba.conf");
        self.write_owned(&p, &conf::pg_hba(&self.cfg, &self.hba_hosts))?;
        self.hba_written = true;
        if let Some(pm) = self.postmaster_pid() {
            self.reload(pm, deadline)?;
        }
        Ok(true)
    }

    /// Set `synchronous_standby_names` (DESIGN §3a): rewrite [`conf::SYNC_CONF`] and,
    /// if PostgreSQL runs, reload. While stopped the next start reads it.
    pub fn set_sync_names(&mut self, names: &str, deadline: Instant) -> Result<(), PgError> {
        if names.contains(['\n', '\r', '\0']) {
            return Err(PgError::Config(format!(
                "synchronous_standby_names {names:?} has a line break"
            )));
        }
        if !matches!(self.data_dir_state(), DataDir::Present { .. }) {
            return Err(PgError::Refused(
                "no data directory to set synchronous_standby_names in".into(),
            ));
        }
        let path = self.cfg.data_dir.join(conf::SYNC_CONF);
        self.write_owned(&path, &conf::sync_conf(names))?;
        self.sync_file = Some(names.to_string());
        // An operator's ALTER SYSTEM SET synchronous_standby_names would outrank
        // the file (postgresql.auto.conf is read last), and the probe then reports
        // the names unknown every loop: the reload applies ours instead (`reload`).
        match self.postmaster_pid() {
            Some(pm) => self.reload(pm, deadline)?,
            None => self.sanitize_owned_in_auto_conf()?,
        }
        Ok(())
    }

    /// PostgreSQL's own parser on `params` (`paramcheck`): those it refuses, with
    /// its reason. `Err`: no answer by `deadline` (or `postgres` could not run).
    ///
    /// Then what PostgreSQL checks only at a start, on this node: the connection
    /// settings against each other and `max_replication_slots` against the slots
    /// its data directory holds (`config::cluster::cross_refusals`), judged on
    /// `all` (the whole list the changed `params` belong to, with the node's own
    /// settings, which win).
    pub fn check_parameters(
        &mut self,
        params: &[(String, String)],
        all: &[(String, String)],
        deadline: Instant,
    ) -> Result<Vec<paramcheck::Refusal>, String> {
        let mut refused = self.param_checker.check(
            &self.cfg.bin_dir,
            params,
            |l| conf::params_conf(l.iter().copied()),
            deadline,
        )?;
        // Judged on what PostgreSQL's parser kept: a refused entry is left out.
        let kept: Vec<(String, String)> = all
            .iter()
            .filter(|(k, _)| !refused.iter().any(|r| r.name == *k))
            .cloned()
            .collect();
        let slots = self.slots_on_disk();
        for (name, why) in
            crate::config::cluster::cross_refusals(&kept, &self.cfg.parameters, slots)
        {
            if let Some((k, v)) = params.iter().find(|(k, _)| *k == name)
                && !refused.iter().any(|r| r.name == name)
            {
                refused.push(paramcheck::Refusal {
                    name: k.clone(),
                    value: v.clone(),
                    why,
                });
            }
        }
        Ok(refused)
    }

    /// Whether a file sets one of the settings a standby's start raised
    /// (`hotstandby`) above the value it runs with (then a restart would change
    /// it): the last line of the files that names it (`pg_file_settings` marks a
    /// changed restart-only setting with an error, "could not be applied", so
    /// errors are not left out; a value that is not a plain number counts as
    /// above). `None`: no answer.
    fn files_above_running(&mut self, pm: u32, deadline: Instant) -> Option<bool> {
        let sql = concat!(
            "SELECT coalesce(bool_or(CASE WHEN f.setting ~ '^[0-9]+$' \
             THEN f.setting::numeric > s.setting::numeric ELSE true END), false) \
             FROM pg_settings s JOIN LATERAL (SELECT fs.setting FROM pg_file_settings fs \
             WHERE fs.name = s.name ORDER BY fs.seqno DESC LIMIT 1) f \
             ON true WHERE s.source = 'command line' AND s.name IN (",
            floor_names!(),
            ")"
        );
        let rows = self.query_rows(pm, sql, deadline).ok()?;
        let cell = rows.first()?.first()?.clone()?;
        Some(cell == "t")
    }

    /// A reload's new `[postgresql.parameters]` of this node (`new`, replacing
    /// `old`), of which `changed` are new or changed: PostgreSQL's parser on
    /// `changed` (as [`conf::NODE_CONF`] would hold them), then what the
    /// postmaster checks only at a start (`start_violations`) on the node's own
    /// settings alone, tenure's and PostgreSQL's defaults for the rest: a check
    /// the new settings break and the old did not (or not in the same way) is a
    /// refusal, whichever change broke it (a removal too: `max_replication_slots`
    /// removed falls back to tenure's 10). Alone, not with the cluster-wide
    /// settings: those change without the node (`edit-config`), and one that
    /// breaks a check with the node's own is left out at a start
    /// (`cross_refusals`), so the node's own must hold on their own (a
    /// `superuser_reserved_connections` that needs the cluster-wide
    /// `max_connections` needs this node's `max_connections` too). The refused,
    /// each with why. `Err`: no answer by `deadline`.
    pub fn check_node_parameters(
        &mut self,
        changed: &[(String, String)],
        new: &[(String, String)],
        old: &[(String, String)],
        deadline: Instant,
    ) -> Result<Vec<paramcheck::Refusal>, String> {
        use crate::config::cluster::start_violations;
        let mut refused = if changed.is_empty() {
            Vec::new()
        } else {
            self.param_checker.check(
                &self.cfg.bin_dir,
                changed,
                |l| conf::node_conf(l.iter().copied()),
                deadline,
            )?
        };
        let slots = self.slots_on_disk();
        // The node's own as the parser kept them.
        let kept = |own: &[(String, String)]| -> Vec<(String, String)> {
            own.iter()
                .filter(|(k, _)| !refused.iter().any(|r| r.name == *k))
                .cloned()
                .collect()
        };
        // A check broken before in the same way is not this reload's doing.
        let before = start_violations(&kept(old), slots);
        let after = start_violations(&kept(new), slots);
        for (rule, why) in after {
            if before.iter().any(|(r, w)| *r == rule && *w == why) {
                continue;
            }
            let named = |l: &[(String, String)]| {
                l.iter()
                    .find(|(k, _)| rule.names().iter().any(|n| k.eq_ignore_ascii_case(n)))
                    .cloned()
            };
            let removed: Vec<(String, String)> = old
                .iter()
                .filter(|(k, _)| !new.iter().any(|(n, _)| n == k))
                .map(|(k, _)| (k.clone(), "(removed)".to_string()))
                .collect();
            let (name, value) = named(changed)
                .or_else(|| named(&removed))
                .unwrap_or_else(|| (rule.names()[0].to_string(), "(unchanged)".into()));
            if !refused.iter().any(|r| r.name == name) {
                let why = format!(
                    "{why} (this node's own settings must hold without the cluster-wide \
                     ones, which may change without it: set the others here too)"
                );
                refused.push(paramcheck::Refusal { name, value, why });
            }
        }
        Ok(refused)
    }

    /// A reload's new `[postgresql.parameters]` of this node (judged by
    /// [`Self::check_node_parameters`]): taken as this node's from now on (every
    /// later write of `tenure.conf` writes them), and [`Self::finish_node_params`]
    /// writes [`conf::NODE_CONF`] and reloads PostgreSQL. The cluster-wide
    /// settings are judged again (the node's own are part of their cross-check).
    pub fn set_node_params(
        &mut self,
        params: Vec<(String, String)>,
        deadline: Instant,
    ) -> Result<NodeParamsApplied, PgError> {
        conf::check_parameters(&params).map_err(PgError::Config)?;
        self.cfg.parameters = params;
        self.forget_params_verdict();
        // INVARIANT: cleared only once PostgreSQL re-read the file, or once no
        // file of this run's could be written (no cluster, an older layout,
        // which every start and restart rewrites).
        self.node_params_pending = true;
        self.finish_node_params(deadline)
    }

    /// Whether a reload's node settings still wait to be written and reloaded.
    pub fn node_params_pending(&self) -> bool {
        self.node_params_pending
    }

    /// [`conf::NODE_CONF`] written with this node's settings and a running
    /// PostgreSQL reloaded, where this version's `tenure.conf` includes the file.
    /// While a job runs nothing is written (its own write of `tenure.conf` writes
    /// both; a write in the middle of a restart would change what its start reads
    /// after its checks): still pending, done after it. `Err`: asked again later.
    pub fn finish_node_params(&mut self, deadline: Instant) -> Result<NodeParamsApplied, PgError> {
        if self.job.is_some() {
            return Ok(NodeParamsApplied::AfterTheJob);
        }
        if !matches!(self.data_dir_state(), DataDir::Present { .. }) {
            self.node_params_pending = false;
            return Ok(NodeParamsApplied::NoCluster);
        }
        let tenure_conf = self.cfg.data_dir.join("tenure.conf");
        let include = format!("include = {}\n", conf::conf_quote(conf::NODE_CONF));
        let ours = match read_regular(&tenure_conf, PG_CONF_MAX, false) {
            Ok(Some((b, _))) => String::from_utf8_lossy(&b).contains(&include),
            Ok(None) => {
                self.node_params_pending = false;
                return Ok(NodeParamsApplied::NoCluster);
            }
            Err(e) => return Err(PgError::Refused(format!("{}: {e}", tenure_conf.display()))),
        };
        if !ours {
            self.node_params_pending = false;
            return Ok(NodeParamsApplied::AtNextStart);
        }
        // The file as it is (an agent that starts compares it with its own
        // configuration: one changed while no agent ran, or a reload an agent
        // killed before it wrote).
        let path = self.cfg.data_dir.join(conf::NODE_CONF);
        let want = conf::node_conf(&self.cfg.parameters);
        let on_disk = read_regular(&path, PG_CONF_MAX, true);
        let same = matches!(&on_disk, Ok(Some((b, _))) if *b == want.as_bytes());
        if !same {
            self.write_owned(&path, &want)?;
            self.node_reload_pending = true;
        }
        // INVARIANT: a file written is re-read by PostgreSQL before the work is
        // done; at an agent's start, once in any case (an earlier run may have
        // died between its write and its reload, as `params_reload_pending`).
        let applied = if !self.node_reload_pending {
            NodeParamsApplied::Unchanged
        } else if let Some(pm) = self.postmaster_pid() {
            self.reload(pm, deadline)?;
            if same {
                NodeParamsApplied::Reread
            } else {
                NodeParamsApplied::Reloaded
            }
        } else if same {
            NodeParamsApplied::Unchanged
        } else {
            NodeParamsApplied::Written
        };
        self.node_reload_pending = false;
        self.node_params_pending = false;
        Ok(applied)
    }

    /// The replication slots the data directory holds: a start must find room for
    /// each (`max_replication_slots`). A slot is a directory in `pg_replslot`; a
    /// `.tmp` one is removed by the start.
    fn slots_on_disk(&self) -> usize {
        fs::read_dir(self.cfg.data_dir.join("pg_replslot"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// At every write of `tenure.conf` (before every start, and at a retarget):
    /// the slots may have grown since the cluster-wide settings were judged (the
    /// leader makes one per member), and a start without room for them fails. A
    /// cluster-wide `max_replication_slots` now too low is taken out of the file
    /// the next start reads, and said. The text to write.
    fn params_text_for_start(&mut self) -> Option<String> {
        let slots = self.slots_on_disk();
        // What the start would read: the verdict's, else the file as last written
        // or found (a verdict is forgotten at every reload).
        let kept: Vec<(String, String)> = match &self.params_checked {
            Some(v) => v
                .params
                .iter()
                .filter(|(k, _)| v.kept.contains(k))
                .cloned()
                .collect(),
            None => {
                // Only a file tenure wrote is rewritten from what it holds: one
                // edited by hand (a line of another shape, a name twice) is left as
                // it is, and said.
                let text = match &self.params_text {
                    Some(t) => Some(t.clone()),
                    None => read_regular(
                        &self.cfg.data_dir.join(conf::PARAMS_CONF),
                        PG_CONF_MAX,
                        true,
                    )
                    .ok()
                    .flatten()
                    .map(|(b, _)| String::from_utf8_lossy(&b).into_owned()),
                };
                let Some(text) = text else {
                    return self.params_text.clone();
                };
                if !conf::settings_conf_is_ours(&text) {
                    log::warn!(
                        "{} holds lines tenure did not write: not checked against this node's \
                         slots and connections before the start, and left as it is",
                        conf::PARAMS_CONF
                    );
                    return self.params_text.clone();
                }
                conf::parse_settings_conf(&text)
            }
        };
        let late = crate::config::cluster::cross_refusals(&kept, &self.cfg.parameters, slots);
        if late.is_empty() {
            return self.params_text.clone();
        }
        for (name, why) in &late {
            log::warn!(
                "postgresql.parameters.{name} left out of tenure.params.conf for the \
                 next start: {why}"
            );
        }
        let keep: Vec<(String, String)> = kept
            .into_iter()
            .filter(|(k, _)| !late.iter().any(|(n, _)| n == k))
            .collect();
        let text = conf::params_conf(&keep);
        if let Some(v) = self.params_checked.as_mut() {
            v.kept.retain(|k| keep.iter().any(|(n, _)| n == k));
            v.text = text.clone();
        }
        self.params_text = Some(text.clone());
        Some(text)
    }

    /// Forget the last verdict on the cluster-wide settings, so the next call of
    /// [`Self::set_cluster_params`] judges them again (a reload: a library
    /// installed since).
    pub fn forget_params_verdict(&mut self) {
        self.params_checked = None;
        self.params_want = None;
    }

    /// Whether `pid` is a child of ours that the agent's reaper must leave alone
    /// (a killed settings check, reaped by its owner).
    pub fn owns_child(&self, pid: u32) -> bool {
        self.param_checker.owns(pid)
    }

    /// The `config` key's `postgresql.parameters` (`params`, sorted): those
    /// PostgreSQL's own parser accepts go into [`conf::PARAMS_CONF`] (a value it
    /// refuses there would stop the next start), and a running PostgreSQL reloads.
    /// `Ok(None)`: nothing done — the same list as last time, or no data
    /// directory yet or a job running (asked again later: the job's own write of
    /// `tenure.conf` writes the file as last known). `Err`: the check, the write
    /// or the reload failed; asked again at the next call.
    pub fn set_cluster_params(
        &mut self,
        params: &[(String, String)],
        deadline: Instant,
    ) -> Result<Option<ParamsApplied>, PgError> {
        self.param_checker.reap();
        if self.params_want.as_deref() == Some(params) && !self.params_reload_pending {
            return Ok(None);
        }
        if self.job.is_some() || !matches!(self.data_dir_state(), DataDir::Present { .. }) {
            return Ok(None);
        }
        // The verdict, once per list: a write or a reload that failed is tried
        // again without another check.
        let verdict = match &self.params_checked {
            Some(v) if v.params == params => v.clone(),
            _ => {
                let refused = if params.is_empty() {
                    Vec::new()
                } else {
                    self.check_parameters(params, params, deadline)
                        .map_err(|e| PgError::Refused(format!("checking the settings: {e}")))?
                };
                let kept: Vec<&(String, String)> = params
                    .iter()
                    .filter(|(k, _)| !refused.iter().any(|r| r.name == *k))
                    .collect();
                let v = ParamsVerdict {
                    params: params.to_vec(),
                    text: conf::params_conf(kept.iter().copied()),
                    kept: kept.iter().map(|(k, _)| k.clone()).collect(),
                    refused,
                };
                self.params_checked = Some(v.clone());
                v
            }
        };
        let path = self.cfg.data_dir.join(conf::PARAMS_CONF);
        // The first time in this run the file itself is compared (a restart of the
        // agent does not rewrite it for nothing); a missing file is an empty list.
        // A regular file of a sane size, read without blocking (a FIFO put there
        // must not hold the loop); one that is not UTF-8 is rewritten.
        let on_disk = match &self.params_text {
            Some(t) => Some(t.as_bytes().to_vec()),
            None => match read_regular(&path, PG_CONF_MAX, true) {
                Ok(found) => found.map(|(b, _)| b),
                // Unreadable (a link, too large): rewritten, as different.
                Err(_) => Some(b"\0unreadable".to_vec()),
            },
        };
        let same = match &on_disk {
            Some(t) => *t == verdict.text.as_bytes(),
            None => verdict.kept.is_empty(),
        };
        if !same {
            // INVARIANT: from the write on, what is on disk is `params_text`, and
            // nothing is recorded as carried out until PostgreSQL re-read it: a
            // key changed back meanwhile finds the file different and writes it.
            self.params_want = None;
            self.write_owned(&path, &verdict.text)?;
            self.params_text = Some(verdict.text.clone());
            self.params_reload_pending = true;
        } else if on_disk.is_none() {
            // No file was ever written: nothing for PostgreSQL to re-read.
            self.params_reload_pending = false;
        }
        // INVARIANT: the pending reload is cleared only by a reload that worked
        // (or with PostgreSQL not running: its next start reads the file). An
        // agent that starts finds it set, so a file an earlier run wrote and died
        // before reloading is re-read once.
        let mut reloaded = false;
        if self.params_reload_pending {
            if let Some(pm) = self.postmaster_pid() {
                self.reload(pm, deadline)?;
                reloaded = true;
            }
            self.params_reload_pending = false;
        }
        self.params_text = Some(verdict.text);
        self.params_want = Some(params.to_vec());
        Ok(Some(ParamsApplied {
            set: verdict.kept,
            written: !same,
            reloaded,
            refused: verdict.refused,
        }))
    }

    /// Rewrite `tenure.conf` to follow `leader` and reload (`primary_conninfo`
    /// is reloadable since PostgreSQL 13).
    pub fn retarget(&mut self, leader: &ConnTarget, deadline: Instant) -> Result<(), PgError> {
        let pm = self.live_postmaster()?;
        self.write_agent_config(Some(leader))?;
        self.query_row(pm, "SELECT pg_reload_conf()", deadline)?;
        Ok(())
    }

    /// A physical slot per listed member (never one for ourselves: it would hold
    /// WAL forever), per `permanent` slot (the `slots` config key) and per
    /// `retained` one (departed members' within `member_slots_ttl`), and drop
    /// every inactive physical slot neither in those nor matched by `ignore` (the
    /// `ignore_slots` config key). Logical slots are never touched.
    ///
    /// The drops run as one query, then each create as its own, members' first,
    /// then permanent, then retained: a create PostgreSQL refuses (a full
    /// `max_replication_slots`) keeps no other from being made, and kept slots of
    /// departed members never take a current member's place (review of
    /// `member_slots_ttl`, M1). A retained slot PostgreSQL invalidated is dropped
    /// and not made again (its member cannot resume from it: `gave_up`). `Err`
    /// only when the server cannot be asked at all.
    pub fn sync_slots(
        &mut self,
        members: &[String],
        permanent: &[String],
        retained: &[String],
        ignore: &[crate::config::IgnoreSlot],
        deadline: Instant,
    ) -> Result<slots::SyncOutcome, PgError> {
        let pm = self.live_postmaster()?;
        let mine = slot_name(&self.me);
        // In the order they are made in.
        let mut want: Vec<String> = Vec::new();
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        for w in members
            .iter()
            .map(|m| slot_name(m))
            .chain(permanent.iter().cloned())
            .chain(retained.iter().cloned())
        {
            // Never a slot for ourselves, even a permanent one named so: nothing
            // on this node would read it, and it would hold WAL (review 2,
            // finding 1).
            // A set for the duplicates: linear, however many slots (review of
            // bad input, finding 2).
            if w != mine && seen.insert(w.clone()) {
                want.push(w);
            }
        }
        let only_retained = |n: &str| {
            retained.iter().any(|r| r == n)
                && !permanent.iter().any(|p| p == n)
                && !members.iter().any(|m| slot_name(m) == n)
        };
        let have = self.query_rows(
            pm,
            "SELECT slot_name, active, wal_status FROM pg_replication_slots \
             WHERE slot_type = 'physical'",
            deadline,
        )?;
        let mut out = slots::SyncOutcome::default();
        let mut drops = String::new();
        let mut kept: Vec<&str> = Vec::new();
        for r in &have {
            let (Some(Some(name)), Some(Some(active))) = (r.first(), r.get(1)) else {
                continue;
            };
            let inactive = active == "f";
            // A slot PostgreSQL invalidated (`max_slot_wal_keep_size`: `lost`) can
            // serve nobody again: one still wanted is made anew (a switchover back
            // to a node whose slots aged while it was a standby, review 2 finding 5),
            // but a departed member's is given up.
            let lost = r.get(2).cloned().flatten().as_deref() == Some("lost");
            let wanted = want.contains(name);
            let ignored = ignore.iter().any(|i| i.matches_physical(name));
            if inactive && ((!wanted && !ignored) || (wanted && lost)) {
                drops.push_str(&format!(
                    "SELECT pg_drop_replication_slot({});",
                    conf::sql_literal(name)
                ));
                if wanted && only_retained(name) {
                    out.gave_up.push(name.clone());
                    kept.push(name);
                }
            } else {
                kept.push(name);
            }
        }
        // Drops apart from the creates (review 2, finding 6).
        if !drops.is_empty()
            && let Err(e) = self.query_rows(pm, &drops, deadline)
        {
            out.errors.push(format!("dropping: {e}"));
        }
        for w in &want {
            if kept.contains(&w.as_str()) {
                continue;
            }
            let sql = format!(
                "SELECT pg_create_physical_replication_slot({}, true)",
                conf::sql_literal(w)
            );
            if let Err(e) = self.query_rows(pm, &sql, deadline) {
                out.errors.push(format!("making {w}: {e}"));
                out.refused.push(w.clone());
            }
        }
        Ok(out)
    }

    /// Carry out a replica's slot copy work ([`slots::plan_copies`]): the drops
    /// as one query, each create as its own (a refused one, a full
    /// `max_replication_slots` say, keeps neither the others nor the advances from
    /// running: review M2), then the advances as one query. Every step runs; what
    /// failed is returned: the creates refused, and the errors in order.
    pub fn copy_slots(
        &mut self,
        w: &slots::CopyWork,
        deadline: Instant,
    ) -> Result<slots::CopyOutcome, PgError> {
        let pm = self.live_postmaster()?;
        let lit = |n: &str| conf::sql_literal(n);
        let mut out = slots::CopyOutcome::default();
        let drops: String = w
            .drops
            .iter()
            .map(|n| format!("SELECT pg_drop_replication_slot({});", lit(n)))
            .collect();
        if !drops.is_empty()
            && let Err(e) = self.query_rows(pm, &drops, deadline)
        {
            out.errors.push(format!("dropping {:?}: {e}", w.drops));
        }
        for n in &w.creates {
            let sql = format!(
                "SELECT pg_create_physical_replication_slot({}, true)",
                lit(n)
            );
            if let Err(e) = self.query_rows(pm, &sql, deadline) {
                out.errors.push(format!("making {n}: {e}"));
                out.refused.push(n.clone());
            }
        }
        let advances: String = w
            .advances
            .iter()
            .map(|(n, l)| {
                format!(
                    "SELECT pg_replication_slot_advance({}, '{}'::pg_lsn);",
                    lit(n),
                    crate::core::model::lsn_text(*l)
                )
            })
            .collect();
        if !advances.is_empty()
            && let Err(e) = self.query_rows(pm, &advances, deadline)
        {
            out.errors.push(format!("advancing {:?}: {e}", w.advances));
        }
        Ok(out)
    }

    /// Rename the data directory to `<data_dir>.aside-<unix time>` (never delete).
    pub fn move_data_aside(&mut self) -> Result<PathBuf, PgError> {
        if self.job.is_some() {
            return Err(PgError::Busy("cannot move the data directory aside".into()));
        }
        match self.pids() {
            Ok(p) if p.is_empty() => {}
            Ok(p) => {
                return Err(PgError::Refused(format!(
                    "processes of this PostgreSQL still run ({p:?}): fence or stop first"
                )));
            }
            Err(e) => {
                return Err(PgError::Refused(format!(
                    "cannot tell whether processes of this PostgreSQL still run ({e})"
                )));
            }
        }
        let base = format!("aside-{}", clock::realtime().as_secs());
        let mut to = self.sibling(&base);
        let mut n = 1;
        while to.exists() {
            to = self.sibling(&format!("{base}-{n}"));
            n += 1;
        }
        fs::rename(&self.cfg.data_dir, &to)
            .map_err(|e| io_err("move aside", &self.cfg.data_dir, e))?;
        self.client = None;
        self.following = None;
        Ok(to)
    }

    /// Write `tenure.conf` (standby settings when `leader` is given), make sure
    /// `postgresql.conf` includes it, and write the passfile.
    fn write_agent_config(&mut self, leader: Option<&ConnTarget>) -> Result<(), PgError> {
        let passfile = self.passfile();
        self.write_owned(&passfile, &conf::pgpass(&self.cfg))?;
        let pf = passfile
            .to_str()
            .ok_or_else(|| {
                PgError::Config(format!("passfile {} is not UTF-8", passfile.display()))
            })?
            .to_string();
        let sb = leader.map(|l| conf::Standby {
            leader: l,
            passfile: &pf,
            me: &self.me,
        });
        let text = conf::tenure_conf_with(&self.cfg, sb.as_ref(), self.wal_retry)
            .map_err(PgError::Config)?;
        // INVARIANT: the node's file before the `tenure.conf` that includes it
        // (`include`: a missing one would stop the start).
        self.write_owned(
            &self.cfg.data_dir.join(conf::NODE_CONF),
            &conf::node_conf(&self.cfg.parameters),
        )?;
        self.write_owned(&self.cfg.data_dir.join("tenure.conf"), &text)?;
        // The cluster-wide settings as last checked and written: a rebuilt data
        // directory (a copy of another member's) gets this node's, with room for
        // the slots it holds now.
        if let Some(t) = self.params_text_for_start() {
            self.write_owned(&self.cfg.data_dir.join(conf::PARAMS_CONF), &t)?;
        }
        // `postgresql.auto.conf` is read after `tenure.conf`: what an operator's
        // ALTER SYSTEM, or a copy (`pg_rewind` copies the source's), set there of
        // what tenure owns would override it, and a recovery target would end a
        // standby's recovery (`conf::sanitize_auto_conf`).
        self.sanitize_owned_in_auto_conf()?;
        let pgconf = self.cfg.data_dir.join("postgresql.conf");
        // A regular file (a link to one is followed: some layouts keep it
        // elsewhere), of a sane size, opened without blocking (L5).
        let cur = match read_regular(&pgconf, PG_CONF_MAX, false) {
            Ok(Some((b, _))) => String::from_utf8_lossy(&b).into_owned(),
            Ok(None) => {
                return Err(io_err(
                    "read",
                    &pgconf,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
            Err(e) => return Err(PgError::Refused(format!("{}: {e}", pgconf.display()))),
        };
        // The include must be the last setting: one after it would override
        // tenure.conf (L8). Appended again when it is not (PostgreSQL reads an
        // include twice without complaint; the last value wins).
        if !conf::include_is_last(&cur) {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .open(&pgconf)
                .map_err(|e| io_err("open for append", &pgconf, e))?;
            let sep = if cur.ends_with('\n') || cur.is_empty() {
                ""
            } else {
                "\n"
            };
            f.write_all(format!("{sep}{}", conf::INCLUDE_LINE).as_bytes())
                .map_err(|e| io_err("append include to", &pgconf, e))?;
        }
        self.following = leader.map(|l| l.name.clone());
        Ok(())
    }

    /// Comment out of `<dir>/postgresql.auto.conf` what `conf::sanitize_auto_conf`
    /// refuses; the names, or `None` when the file needed no change or is absent.
    fn sanitize_auto_conf(&self, dir: &Path) -> Result<Option<Vec<String>>, PgError> {
        let auto = dir.join("postgresql.auto.conf");
        // Only a regular file is read (a FIFO or a device planted in a copy would
        // hold the loop), and no more than PostgreSQL would sensibly hold there.
        // Opened once, not followed if a link, checked and read through the one
        // descriptor (no path swapped in between, L5).
        let (text, mode) = match read_regular(&auto, AUTO_CONF_MAX, true) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => return Err(PgError::Refused(format!("{}: {e}", auto.display()))),
        };
        let Some((clean, removed)) = conf::sanitize_auto_conf(&text) else {
            return Ok(None);
        };
        // Its mode as it was (0600, or 0640 in a group-readable cluster).
        self.write_owned_mode(&auto, &clean, mode)?;
        Ok(Some(removed))
    }

    fn touch_standby_signal(&self) -> Result<(), PgError> {
        self.write_owned(&self.cfg.data_dir.join("standby.signal"), "")
    }

    /// Remove a `postmaster.pid` that names no postmaster of this data directory:
    /// a dead pid, a pid reused by another process, or — the case that bit — a
    /// postmaster killed by a fence but not yet reaped by a parent that is not
    /// ours (an orphan of a previous agent run is reparented to pid 1). PostgreSQL
    /// takes any pid that `kill(pid, 0)` finds for a running postmaster ("lock file
    /// already exists"), so a start or a rewind would fail on it. Called only once
    /// `require_stopped` found no process of the cluster; PostgreSQL writes the file
    /// after changing into the data directory, so a live postmaster always passes
    /// `postmaster_pid`'s check and its file is kept.
    pub(super) fn clear_stale_lock(&self) -> Result<(), PgError> {
        let Some(pid) = self.postmaster_file_pid() else {
            return Ok(());
        };
        if self.postmaster_pid().is_some() {
            return Ok(());
        }
        let p = self.cfg.data_dir.join("postmaster.pid");
        match fs::remove_file(&p) {
            Ok(()) => {
                log::warn!(
                    "removed a stale {} naming pid {pid}, which is no postmaster of this data directory",
                    p.display()
                );
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove", &p, e)),
        }
    }

    fn remove_signals(&self) -> Result<(), PgError> {
        for f in ["standby.signal", "recovery.signal"] {
            let p = self.cfg.data_dir.join(f);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove", &p, e)),
            }
        }
        Ok(())
    }

    /// Start a supervised job; see `job.rs`. Only one at a time.
    pub fn start_job(
        &mut self,
        kind: &JobKind,
        source: Option<&ConnTarget>,
        now: Instant,
    ) -> Result<(), PgError> {
        // A start reads the file; a basebackup or rewind replaces it.
        self.sync_file = None;
        let r = job::start(self, kind, source, now);
        if r.is_ok() {
            // A job that started supersedes a refusal not yet reported.
            self.failed_start = None;
        }
        if let Err(e) = &r
            && matches!(kind, JobKind::Basebackup { .. })
            && !matches!(e, PgError::Busy(_))
        {
            self.failed_start = Some((kind.clone(), format!("did not start: {e}")));
        }
        r
    }

    /// Advance the job without blocking: Running / Finished (once) / Idle.
    pub fn poll_job(&mut self, now: Instant) -> Job {
        if let Some((kind, detail)) = self.failed_start.take() {
            return Job::Finished {
                kind,
                ok: false,
                detail,
            };
        }
        job::poll(self, now)
    }

    /// The job in progress, if any.
    pub fn running_job(&self) -> Option<&JobKind> {
        self.job.as_ref().map(|j| j.kind())
    }

    /// `SELECT pg_reload_conf()` (`POST /reload`): PostgreSQL re-reads its files.
    /// `Ok(false)`: PostgreSQL is not running (its next start reads them anyway).
    pub fn reload_conf(&mut self, deadline: Instant) -> Result<bool, PgError> {
        let Some(pm) = self.postmaster_pid() else {
            return Ok(false);
        };
        self.reload(pm, deadline)?;
        Ok(true)
    }

    /// Every reload tenure asks for: first what `postgresql.auto.conf` sets of
    /// what tenure owns (an operator's `ALTER SYSTEM`) is commented out, or the
    /// reload would apply it over `tenure.conf` (review M4).
    fn reload(&mut self, pm: u32, deadline: Instant) -> Result<(), PgError> {
        self.sanitize_owned_in_auto_conf()?;
        self.query_row(pm, "SELECT pg_reload_conf()", deadline)?;
        Ok(())
    }

    /// [`Self::sanitize_auto_conf`] on the data directory, with a warning naming
    /// what it commented out.
    fn sanitize_owned_in_auto_conf(&self) -> Result<(), PgError> {
        if let Some(removed) = self.sanitize_auto_conf(&self.cfg.data_dir)? {
            log::warn!(
                "commented out in postgresql.auto.conf (settings tenure owns, recovery \
                 targets; set others in [postgresql.parameters]): {}",
                removed.join(", ")
            );
        }
        Ok(())
    }

    /// `Action::HoldDataDir`: write the build mark with `why` next to a data
    /// directory that is not empty (`DataDir::Held` from then on); `Ok(false)`
    /// when it is empty (nothing to hold, and a mark would hold a later restore).
    pub fn hold_data_dir(&self, why: &str) -> Result<bool, PgError> {
        if matches!(self.data_dir_state(), DataDir::Empty) {
            return Ok(false);
        }
        let why = why.replace(['\n', '\r'], " ");
        self.write_owned(&build_mark_of(&self.cfg.data_dir), &format!("{why}\n"))?;
        Ok(true)
    }

    /// The pid of the job's current child, if one runs.
    pub fn job_pid(&self) -> Option<u32> {
        self.job.as_ref().and_then(|j| j.child_pid())
    }

    /// Kill the job's current child (SIGKILL) and forget the job (shutdown, tests).
    /// A server that `pg_ctl start` already launched keeps running: fence it.
    pub fn kill_job(&mut self) {
        if let Some(mut j) = self.job.take() {
            j.kill();
            job::remove_temp(&j);
        }
    }
}

/// The first few words of a statement, for error messages (never the values).
/// The newest timeline among the WAL segment files (24 hex digits, the first 8 the
/// timeline) in `pg_wal`; 0 when none can be read. Bounded: one directory read.
fn newest_segment_timeline(pg_wal: &Path) -> u32 {
    let Ok(dir) = fs::read_dir(pg_wal) else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            (name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(&name[..8], 16).ok())
                .flatten()
        })
        .max()
        .unwrap_or(0)
}

/// `pg_stat_replication` as the probe's `json_agg` of
/// `[application_name, state, sync_state, flush_lsn]` rows. A row that does not
/// parse is skipped (it cannot be a standby we would list).
fn parse_standbys(json: &str) -> Vec<StandbyStat> {
    let Ok(serde_json::Value::Array(rows)) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|r| {
            let r = r.as_array()?;
            let text = |i: usize| r.get(i).and_then(|v| v.as_str());
            Some(StandbyStat {
                name: text(0)?.to_string(),
                streaming: text(1) == Some("streaming"),
                sync: text(2) == Some("sync"),
                flush: text(3).and_then(parse_lsn).unwrap_or(0),
            })
        })
        .collect()
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn resolve_user(user: Option<&str>) -> Result<Option<RunAs>, PgError> {
    let Some(name) = user else { return Ok(None) };
    let u = nix::unistd::User::from_name(name)
        .map_err(|e| PgError::Config(format!("look up OS user {name:?}: {e}")))?
        .ok_or_else(|| PgError::Config(format!("OS user {name:?} does not exist")))?;
    let me = nix::unistd::geteuid();
    if u.uid == me {
        return Ok(None);
    }
    if !me.is_root() {
        return Err(PgError::Config(format!(
            "running as uid {me}, cannot run PostgreSQL as {name:?} (uid {}): run as root or as {name:?}",
            u.uid
        )));
    }
    if u.uid.is_root() {
        return Err(PgError::Config(
            "PostgreSQL refuses to run as root: set user".into(),
        ));
    }
    Ok(Some(RunAs {
        uid: u.uid,
        gid: u.gid,
        home: u.dir,
    }))
}

/// The probe's read of the epoch row. As JSON, so a row written before the `lease`
/// column existed still reads (its lease is NULL).
const EPOCH_ROW: &str = "SELECT e.epoch::text, e.member, row_to_json(e)->>'lease' \
                         FROM tenure.epoch e WHERE id = 1";

/// A query's rows, each column as text (NULL as `None`).
type Rows = Vec<Vec<Option<String>>>;

fn rows_of(msgs: Vec<tokio_postgres::SimpleQueryMessage>) -> Rows {
    let mut rows = Vec::new();
    for m in msgs {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    rows
}

/// `sql` preceded by a `statement_timeout` of the time `left` (at least 1 ms), in
/// the same simple query: the server ends the statement, as the client-side
/// timeout ends the wait.
fn with_timeout(sql: &str, left: Duration) -> String {
    let ms = left.as_millis().max(1);
    format!("SET statement_timeout = {ms}; {sql}")
}

/// Up to `buf.len()` bytes from the start of the file at `path` (fewer at its end),
/// without allocating: for the loop's per-iteration reads of small headers.
fn read_head(path: &Path, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    // Non-blocking, and only a regular file: a FIFO or a device at this path (a
    // copy's, or planted) must not hold the loop (L5).
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// `pg_control`'s `state` (a 4-byte `DBState` at offset 16, after the system
/// identifier and two version words) says the cluster last ran as a primary:
/// shut down (1), shutting down (3), in crash recovery (4) or in production (6).
/// A standby reports 2 or 5. Combined with the absence of `standby.signal` (a fresh
/// basebackup carries the primary's state but we write the signal at once), this
/// tells a former primary whose WAL may have forked from the new leader's.
fn was_primary(pg_control: &[u8]) -> bool {
    let Some(state) = pg_control.get(16..20) else {
        return false;
    };
    let state = u32::from_le_bytes([state[0], state[1], state[2], state[3]]);
    matches!(state, 1 | 3 | 4 | 6)
}

/// The `tenure.epoch` table, created if missing, with the `lease` column (seed
/// 253898 review) added to a table an older version created. Fresh-eyes review of
/// that fix, R3: `ALTER TABLE ... ADD COLUMN IF NOT EXISTS` takes an
/// AccessExclusiveLock (and WAL-logs it) even when the column exists, so on every
/// write it queued behind any reader idle in a transaction and, crashed before its
/// COMMIT, left standbys replaying the lock, unable to read the row. Now the ALTER
/// runs only when the catalog shows no `lease` column (once, after an upgrade), with
/// a short `lock_timeout` (a failed write is retried next iteration); the catalog
/// check and the `IF NOT EXISTS` creations take no lock on an existing table.
pub(crate) const EPOCH_TABLE: &str = "CREATE SCHEMA IF NOT EXISTS tenure; \
     CREATE TABLE IF NOT EXISTS tenure.epoch (id int PRIMARY KEY CHECK (id = 1), \
       epoch bigint NOT NULL, member text NOT NULL, \
       at timestamptz NOT NULL DEFAULT now(), lease bigint); \
     DO $tenure$ BEGIN \
       IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute \
           WHERE attrelid = 'tenure.epoch'::regclass AND attname = 'lease' \
             AND NOT attisdropped) THEN \
         SET LOCAL lock_timeout = '100ms'; \
         ALTER TABLE tenure.epoch ADD COLUMN IF NOT EXISTS lease bigint; \
       END IF; \
     END $tenure$;";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_url_round_trip() {
        let u = conn_url("10.0.0.5:5433");
        assert_eq!(u, "postgres://10.0.0.5:5433/postgres");
        let t = ConnTarget::from_conn_url("pg1", &u).unwrap();
        assert_eq!(
            t,
            ConnTarget {
                name: "pg1".into(),
                host: "10.0.0.5".into(),
                port: 5433
            }
        );
    }

    #[test]
    fn conn_url_variants() {
        let t =
            ConnTarget::from_conn_url("a", "postgresql://[::1]:6000/x?sslmode=require").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 6000));
        let t = ConnTarget::from_conn_url("a", "postgres://h").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("h", 5432));
        let t = ConnTarget::from_conn_url("a", "postgres://[fe80::1]/db").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("fe80::1", 5432));
    }

    #[test]
    fn conn_url_garbage() {
        for bad in [
            "",
            "http://h:1/x",
            "postgres://",
            "postgres:///db",
            "postgres://h:notaport/db",
            "postgres://h:70000/db",
            "postgres://u:pw@h:1/db",
            "postgres://:5432/db",
            "postgres://h x:1/db",
            "postgres://[zz]:1/db",
            "postgres://a:b:c/db",
        ] {
            let r = ConnTarget::from_conn_url("n", bad);
            assert!(r.is_err(), "{bad:?} parsed as {r:?}");
            assert!(r.unwrap_err().contains("conn_url"));
        }
    }

    #[test]
    fn slot_names() {
        assert_eq!(slot_name("pg_1"), "pg_1");
        assert_eq!(slot_name("node3"), "node3");
        let dashed = slot_name("pg-1");
        assert!(
            dashed.starts_with("pg_1_") && dashed.len() == 13,
            "{dashed}"
        );
        assert_ne!(
            dashed,
            slot_name("pg_1"),
            "pg-1 and pg_1 must not share a slot"
        );
        assert_ne!(slot_name("PG1"), slot_name("pg1"));
        assert_ne!(slot_name("a.b"), slot_name("a-b"));
        assert!(slot_name("Node.Äb").starts_with("node__b_"));
        assert!(slot_name("").starts_with('_'));
        for long in ["x".repeat(100), "é".repeat(100), "X".repeat(63)] {
            let s = slot_name(&long);
            assert!(s.len() <= 63, "{s}");
            assert!(
                s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            );
        }
        assert_eq!(slot_name(&"x".repeat(63)), "x".repeat(63));
        assert_ne!(slot_name(&"x".repeat(64)), slot_name(&"x".repeat(65)));
        // Stable: the same member always gets the same slot.
        assert_eq!(slot_name("pg-1"), slot_name("pg-1"));
    }

    #[test]
    fn segment_timeline() {
        let dir = std::env::temp_dir().join(format!("tenure-segtl-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("archive_status")).unwrap();
        assert_eq!(newest_segment_timeline(&dir), 0);
        for f in [
            "000000010000000000000003",
            "00000001000000000000000A",
            "00000002.history",
            "00000003.history",
            "000000020000000000000004.partial",
            "0000000200000000000000zz",
        ] {
            fs::write(dir.join(f), b"").unwrap();
        }
        // Only whole segments count: a fetched history file or a partial segment
        // does not mean the replica follows that timeline.
        assert_eq!(newest_segment_timeline(&dir), 1);
        fs::write(dir.join("000000020000000000000005"), b"").unwrap();
        assert_eq!(newest_segment_timeline(&dir), 2);
        assert_eq!(newest_segment_timeline(&dir.join("missing")), 0);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn lsn_parse() {
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("x/1"), None);
        assert_eq!(parse_lsn("1"), None);
        assert_eq!(parse_lsn("100000000/0"), None);
    }

    /// Issue 8, finding 10: the catch-up rule compares each standby's flush with
    /// the primary's position, so a flush that is NULL (no feedback yet) or does
    /// not parse must read as 0 (never caught up), and rows stay per standby.
    #[test]
    fn standby_flush_positions_parse_and_unknown_ones_read_as_zero() {
        let rows = parse_standbys(
            r#"[["pg2","streaming","sync","0/3000060"],
                ["pg3","streaming","potential",null],
                ["pg4","catchup","async","garbage"],
                ["pg5","streaming","sync","1/"],
                [null,"streaming","sync","0/1"]]"#,
        );
        let got: Vec<(&str, bool, bool, u64)> = rows
            .iter()
            .map(|s| (s.name.as_str(), s.streaming, s.sync, s.flush))
            .collect();
        assert_eq!(
            got,
            vec![
                ("pg2", true, true, 0x0300_0060),
                ("pg3", true, false, 0),
                ("pg4", false, false, 0),
                ("pg5", true, true, 0),
            ]
        );
        assert!(parse_standbys("not json").is_empty());
        assert!(parse_standbys("null").is_empty());
    }

    #[test]
    fn unknown_user_is_a_config_error() {
        let e = resolve_user(Some("no-such-user-tenure")).unwrap_err();
        assert!(e.to_string().contains("no-such-user-tenure"));
        assert!(resolve_user(None).unwrap().is_none());
    }

    /// A `PgCtl` on a scratch data directory (nothing started: these tests read
    /// files and processes only).
    fn scratch_ctl(tag: &str) -> (PgCtl, PathBuf) {
        let dir = crate::testbed::scratch_dir(tag)
            .unwrap()
            .canonicalize()
            .unwrap();
        let cfg = PgConfig {
            bin_dir: PathBuf::from("/nonexistent"),
            data_dir: dir.join("data"),
            listen: "127.0.0.1:1".into(),
            connect_address: "127.0.0.1:1".into(),
            socket_dir: dir.join("socket"),
            user: None,
            superuser: "postgres".into(),
            superuser_password: "x".into(),
            replication_user: "replicator".into(),
            replication_password: "x".into(),
            rewind_user: "rewinder".into(),
            rewind_password: "x".into(),
            parameters: Vec::new(),
            move_aside_unusable: false,
            replication_ssl: Default::default(),
            rewind_ssl: Default::default(),
            hba_clientcert: None,
            hba_cert: false,
            create_replica: Default::default(),
            bootstrap: Default::default(),
            pg_hba: Vec::new(),
        };
        let data = cfg.data_dir.clone();
        (PgCtl::new(&cfg, "n1").unwrap(), data)
    }

    /// A reload's node settings are judged on their own (defaults for the rest):
    /// a removal too (no answer needed from PostgreSQL's parser for one), against
    /// the slots on disk; a check broken before, the same way, is not this
    /// reload's doing, one broken another way is.
    #[test]
    fn node_settings_are_judged_on_their_own() {
        let (mut ctl, data) = scratch_ctl("nodeparams");
        for s in 0..12 {
            fs::create_dir_all(data.join("pg_replslot").join(format!("s{s}"))).unwrap();
        }
        let p = |l: &[(&str, &str)]| -> Vec<(String, String)> {
            l.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let far = clock::now().add(Duration::from_secs(5));
        // max_replication_slots = 20 removed: tenure's 10 < 12 slots.
        let old = p(&[("max_replication_slots", "20"), ("work_mem", "4MB")]);
        let new = p(&[("work_mem", "4MB")]);
        let r = ctl.check_node_parameters(&[], &new, &old, far).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].name, "max_replication_slots");
        assert_eq!(r[0].value, "(removed)");
        assert!(r[0].why.contains("12 replication slots"), "{r:?}");
        // Broken before in the same way: no refusal for an unrelated change.
        let old = p(&[("max_replication_slots", "8")]);
        let new = p(&[("max_replication_slots", "8"), ("work_mem", "8MB")]);
        assert!(
            ctl.check_node_parameters(&[], &new, &old, far)
                .unwrap()
                .is_empty()
        );
        // Broken another way: refused.
        let new = p(&[("max_replication_slots", "6")]);
        let r = ctl.check_node_parameters(&[], &new, &old, far).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].why.contains("6 is less than the 12"), "{r:?}");
        // The reserved connections against the default max_connections (the
        // cluster-wide ones are not counted on), then against the node's own.
        let old = p(&[
            ("superuser_reserved_connections", "150"),
            ("max_connections", "300"),
        ]);
        assert!(
            ctl.check_node_parameters(&[], &old, &[], far)
                .unwrap()
                .is_empty()
        );
        let new = p(&[("superuser_reserved_connections", "150")]);
        let r = ctl.check_node_parameters(&[], &new, &old, far).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            (r[0].name.as_str(), r[0].value.as_str()),
            ("max_connections", "(removed)")
        );
        assert!(r[0].why.contains("without the cluster-wide"), "{r:?}");
    }

    /// `pg_control`'s first 20 bytes: the system identifier, then the state at 16.
    fn pg_control(sysid: u64, state: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 8192];
        b[..8].copy_from_slice(&sysid.to_le_bytes());
        b[16..20].copy_from_slice(&state.to_le_bytes());
        b.truncate(len);
        b
    }

    /// The answers of `data_dir_state`, through its short path (a readable
    /// `pg_control`) and its full one (everything else) alike: the short path must
    /// never answer differently from the listing it skips.
    #[test]
    fn data_dir_state_answers_the_same_through_either_path() {
        let (ctl, d) = scratch_ctl("pg-datadir");
        assert_eq!(ctl.data_dir_state(), DataDir::Empty, "missing");
        fs::create_dir_all(d.join("global")).unwrap();
        // Only `global/` (empty): not empty, no PG_VERSION.
        assert!(matches!(ctl.data_dir_state(), DataDir::Unusable(w) if w.contains("PG_VERSION")));
        let ctl_path = d.join("global/pg_control");
        // pg_control present but no PG_VERSION: still unusable.
        fs::write(&ctl_path, pg_control(7, 6, 8192)).unwrap();
        assert!(matches!(ctl.data_dir_state(), DataDir::Unusable(w) if w.contains("PG_VERSION")));
        fs::write(d.join("PG_VERSION"), "15\n").unwrap();
        // State 6 (in production): a primary's.
        assert_eq!(
            ctl.data_dir_state(),
            DataDir::Present {
                sysid: 7,
                was_primary: true
            }
        );
        // In archive recovery (5): not a primary's.
        fs::write(&ctl_path, pg_control(7, 5, 8192)).unwrap();
        assert_eq!(
            ctl.data_dir_state(),
            DataDir::Present {
                sysid: 7,
                was_primary: false
            }
        );
        // A primary's state with standby.signal: a standby's.
        fs::write(&ctl_path, pg_control(9, 1, 8192)).unwrap();
        fs::write(d.join("standby.signal"), "").unwrap();
        assert_eq!(
            ctl.data_dir_state(),
            DataDir::Present {
                sysid: 9,
                was_primary: false
            }
        );
        fs::remove_file(d.join("standby.signal")).unwrap();
        // Cut short after the identifier: present, state unknown (not a primary's).
        fs::write(&ctl_path, pg_control(9, 6, 12)).unwrap();
        assert_eq!(
            ctl.data_dir_state(),
            DataDir::Present {
                sysid: 9,
                was_primary: false
            }
        );
        // The full path's answers, each naming what is wrong.
        fs::write(&ctl_path, pg_control(0, 6, 8192)).unwrap();
        assert!(
            matches!(ctl.data_dir_state(), DataDir::Unusable(w) if w.contains("system identifier 0"))
        );
        fs::write(&ctl_path, pg_control(9, 6, 5)).unwrap();
        assert!(matches!(ctl.data_dir_state(), DataDir::Unusable(w) if w.contains("only 5 bytes")));
        fs::remove_file(&ctl_path).unwrap();
        assert!(matches!(ctl.data_dir_state(), DataDir::Unusable(w) if w.contains("cannot read")));
    }

    /// `postmaster.pid`'s first line, read without allocating: a pid, or nothing
    /// for a file that names none (a stale or cut file is checked elsewhere).
    #[test]
    fn postmaster_file_pid_reads_the_first_line_only() {
        let (ctl, d) = scratch_ctl("pg-pidfile");
        assert_eq!(ctl.postmaster_file_pid(), None, "no file");
        fs::create_dir_all(&d).unwrap();
        let file = d.join("postmaster.pid");
        for (text, want) in [
            ("4242\n/var/lib/pg\n1700000000\n5432\n", Some(4242)),
            ("4242", Some(4242)),
            (" 4242 \n", Some(4242)),
            ("1\n", None),
            ("\n4242\n", None),
            ("abc\n", None),
            ("", None),
            ("123456789012345678901234567890\n", None),
        ] {
            fs::write(&file, text).unwrap();
            assert_eq!(ctl.postmaster_file_pid(), want, "{text:?}");
        }
    }

    /// The held pidfd answers for the postmaster it was opened for; an exited one,
    /// or one held for another pid, hands the question back to `/proc`. The process
    /// leaves the data directory after it was verified, so `/proc` would say no:
    /// only the pidfd's answer says yes (the short path is taken, and it says
    /// "running" for as long as the verified process lives).
    #[test]
    fn postmaster_pid_through_the_held_pidfd() {
        let (mut ctl, d) = scratch_ctl("pg-pidfd");
        fs::create_dir_all(&d).unwrap();
        let spawn = |script: &str| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(&d)
                .spawn()
                .unwrap()
        };
        let in_dir = |pid: u32, want: bool| {
            crate::testbed::wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
                (procs::cwd_is(pid, &d) == want).then_some(())
            })
            .unwrap();
        };
        let mut child = spawn("sleep 0.3; cd /; exec sleep 30");
        let pid = child.id();
        fs::write(d.join("postmaster.pid"), format!("{pid}\n")).unwrap();
        in_dir(pid, true);
        assert_eq!(ctl.postmaster_pid(), Some(pid), "through /proc");
        let fd = procs::pidfd_of_verified(pid, &d).expect("verified");
        ctl.postmaster_fd = Some((pid, fd));
        in_dir(pid, false);
        assert_eq!(ctl.postmaster_pid(), Some(pid), "through the pidfd");
        let held = ctl.postmaster_fd.take();
        assert_eq!(
            ctl.postmaster_pid(),
            None,
            "through /proc: not in the directory"
        );
        ctl.postmaster_fd = held;
        child.kill().unwrap();
        // A zombie (not reaped yet) is no postmaster, by either path.
        crate::testbed::wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
            (procs::proc_state(pid) == Some('Z')).then_some(())
        })
        .expect("a zombie");
        assert_eq!(
            ctl.postmaster_pid(),
            None,
            "an exited postmaster is not live"
        );
        child.wait().unwrap();
        assert_eq!(ctl.postmaster_pid(), None, "reaped");
        // A pidfd held for another pid is not asked.
        let mut other = spawn("exec sleep 30");
        fs::write(d.join("postmaster.pid"), format!("{}\n", other.id())).unwrap();
        in_dir(other.id(), true);
        assert_eq!(ctl.postmaster_pid(), Some(other.id()));
        other.kill().unwrap();
        other.wait().unwrap();
    }

    /// A replica build's methods as scripts on a scratch directory (review L10):
    /// what `advance` and `fall_back` do with a failing method, one that leaves a
    /// writer behind (H1), one that writes into the data directory (M3), a copy of
    /// another cluster, and all of them failing.
    /// Review of session 18, L5: a FIFO where `pg_control`, `postgresql.auto.conf`
    /// or `postgresql.conf` should be (a copy's, or planted) is refused at once,
    /// never opened blocking; a regular file keeps its group-readable mode when
    /// rewritten, and nothing wider (L6).
    #[test]
    fn fifos_are_refused_without_blocking_and_modes_are_kept_narrow() {
        let (ctl, data) = scratch_ctl("pg-fifo");
        fs::create_dir_all(data.join("global")).unwrap();
        fs::write(data.join("PG_VERSION"), "15\n").unwrap();
        let fifo = |p: &Path| {
            let _ = fs::remove_file(p);
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        };
        fifo(&data.join("global/pg_control"));
        // A writer would never come: a blocking open would hang this test.
        assert!(matches!(ctl.data_dir_state(), DataDir::Unusable(_)));
        let auto = data.join("postgresql.auto.conf");
        fifo(&auto);
        let e = ctl.sanitize_auto_conf(&data).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let pgconf = data.join("postgresql.conf");
        fifo(&pgconf);
        let e = read_regular(&pgconf, PG_CONF_MAX, false).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // A link is not followed for auto.conf.
        fs::remove_file(&auto).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &auto).unwrap();
        let e = ctl.sanitize_auto_conf(&data).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        fs::remove_file(&auto).unwrap();
        // 0640 is kept, a setuid 4755 becomes 0640.
        for (mode, want) in [(0o640, 0o640), (0o4755, 0o640)] {
            fs::write(&auto, "recovery_target = 'immediate'\n").unwrap();
            fs::set_permissions(&auto, fs::Permissions::from_mode(mode)).unwrap();
            assert!(ctl.sanitize_auto_conf(&data).unwrap().is_some());
            let got = fs::metadata(&auto).unwrap().permissions().mode() & 0o7777;
            assert_eq!(got, want, "mode {mode:o}");
        }
        let _ = fs::remove_dir_all(data.parent().unwrap());
    }

    mod replica_build {
        use super::*;
        use crate::config::{CommandMethod, CreateReplica, ReplicaMethod};

        /// A script that makes a fake cluster (PG_VERSION, a pg_control with
        /// system identifier `sysid`) in `$PGDATA`, after `pre` (shell lines).
        fn script(dir: &Path, name: &str, pre: &str, sysid: Option<u64>) -> PathBuf {
            let p = dir.join(format!("{name}.sh"));
            let make = match sysid {
                Some(id) => {
                    let bytes: String = id
                        .to_le_bytes()
                        .iter()
                        .map(|b| format!("\\{b:03o}"))
                        .collect();
                    format!(
                        "mkdir -p \"$PGDATA/global\" && printf 15 > \"$PGDATA/PG_VERSION\" && \
                         printf '{bytes}' > \"$PGDATA/global/pg_control\" && \
                         head -c 8184 /dev/zero >> \"$PGDATA/global/pg_control\"\n"
                    )
                }
                None => String::new(),
            };
            fs::write(&p, format!("#!/bin/sh\n{pre}\n{make}")).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            p
        }

        fn method(name: &str, program: &Path) -> ReplicaMethod {
            ReplicaMethod::Command(CommandMethod {
                name: name.into(),
                command: vec![program.display().to_string()],
                no_params: true,
                params: Vec::new(),
            })
        }

        /// Run a Basebackup job with `methods` to its end: (ok, detail).
        /// Start a Basebackup job from `pg1` with `methods`.
        fn start(ctl: &mut PgCtl, methods: Vec<ReplicaMethod>) -> Result<(), PgError> {
            ctl.cfg.create_replica = CreateReplica {
                methods,
                basebackup_args: Vec::new(),
                timeout: ctl.cfg.create_replica.timeout,
            };
            let src = ConnTarget {
                name: "pg1".into(),
                host: "127.0.0.1".into(),
                port: 1,
            };
            ctl.start_job(&basebackup(), Some(&src), clock::now())
        }

        fn basebackup() -> JobKind {
            JobKind::Basebackup { from: "pg1".into() }
        }

        fn build(ctl: &mut PgCtl, methods: Vec<ReplicaMethod>) -> (bool, String) {
            start(ctl, methods).unwrap();
            let until = clock::now().add(Duration::from_secs(60));
            loop {
                assert!(clock::now() < until, "the job never ended");
                match ctl.poll_job(clock::now()) {
                    Job::Finished { ok, detail, .. } => return (ok, detail),
                    _ => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }

        /// `create_replica_timeout`: a method that runs longer is killed with its
        /// whole process group (the children that make its copy too) and has
        /// failed; the next method builds. Before, one that hung held the build
        /// until a forced reinit or an agent restart.
        #[test]
        fn a_method_past_its_timeout_is_killed_with_its_group() {
            let (mut ctl, data) = scratch_ctl("pg-method-timeout");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            ctl.cfg.create_replica.timeout = Some(Duration::from_millis(500));
            let pids = dir.join("hung.pids");
            let hung = script(
                &dir,
                "hung",
                &format!(
                    "sleep 60 & echo $! > {}\necho $$ >> {}\nwait",
                    pids.display(),
                    pids.display()
                ),
                None,
            );
            let good = script(&dir, "good", "", Some(7));
            // `build` gives up after 60 s: the hung method's `wait` is 60 s.
            let (ok, detail) = build(&mut ctl, vec![method("hung", &hung), method("good", &good)]);
            assert!(ok, "{detail}");
            assert!(detail.contains("built by replica method good"), "{detail}");
            assert!(
                detail.contains("ran longer than create_replica_timeout (0.5 s): killed"),
                "{detail}"
            );
            for pid in fs::read_to_string(&pids).unwrap().split_whitespace() {
                let pid: u32 = pid.parse().unwrap();
                assert!(
                    procs::proc_state(pid).is_none_or(|s| s == 'Z'),
                    "{pid} of the hung method still runs"
                );
            }
            assert!(data.join("standby.signal").exists());
        }

        /// A method's process group that outlived SIGKILL (a process stuck in
        /// uninterruptible I/O) holds every later build until it is gone: it was
        /// given the build directory and may still write there.
        #[test]
        fn no_build_while_a_killed_method_s_group_lives() {
            use std::os::unix::process::CommandExt;
            let (mut ctl, data) = scratch_ctl("pg-method-lingering");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let mut stuck = std::process::Command::new("sleep")
                .arg("30")
                .process_group(0)
                .spawn()
                .unwrap();
            ctl.lingering = Some((stuck.id() as i32, "hung".into()));
            let good = script(&dir, "good", "", Some(7));
            let e = start(&mut ctl, vec![method("good", &good)]).expect_err("held");
            assert!(
                e.to_string().contains("replica method hung") && e.to_string().contains("outlived"),
                "{e}"
            );
            assert!(ctl.job.is_none(), "nothing started");
            stuck.kill().unwrap();
            stuck.wait().unwrap();
            let (ok, detail) = build(&mut ctl, vec![method("good", &good)]);
            assert!(ok, "{detail}");
            assert!(ctl.lingering.is_none(), "cleared once the group is gone");
        }

        #[test]
        fn methods_fall_back_in_order_and_a_failed_one_leaves_nothing_behind() {
            let (mut ctl, data) = scratch_ctl("pg-methods");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let tmp = ctl.sibling("basebackup-tmp");
            // A failing method whose background writer outlives it (H1), a copy of
            // another cluster, then a good one.
            let leaky = script(
                &dir,
                "leaky",
                "( sleep 0.4; mkdir -p \"$PGDATA/base\"; touch \"$PGDATA/base/STALE\" ) &\n\
                 ( sleep 100; touch \"$PGDATA/LATE\" ) &\nexit 3",
                None,
            );
            let foreign = script(&dir, "foreign", "", Some(8));
            let good = script(&dir, "good", "sleep 0.6", Some(7));
            let (ok, detail) = build(
                &mut ctl,
                vec![
                    method("leaky", &leaky),
                    method("foreign", &foreign),
                    method("good", &good),
                ],
            );
            assert!(ok, "{detail}");
            assert!(detail.contains("built by replica method good"), "{detail}");
            assert!(detail.contains("replica method leaky: "), "{detail}");
            assert!(
                detail.contains("the copy is of another cluster: system identifier 8"),
                "{detail}"
            );
            assert_eq!(
                ctl.data_dir_state(),
                DataDir::Present {
                    sysid: 7,
                    was_primary: false
                }
            );
            std::thread::sleep(Duration::from_millis(500));
            assert!(
                !data.join("base/STALE").exists(),
                "the failed method's writer reached the installed copy"
            );
            assert!(data.join("standby.signal").exists());
            assert!(!tmp.exists());
            assert!(!build_mark_of(&data).exists(), "a checked copy is not held");

            // Every method fails: the job fails, the build directory is removed,
            // the data directory stays empty.
            fs::remove_dir_all(&data).unwrap();
            let partial = script(&dir, "partial", "mkdir -p \"$PGDATA/base\"\nexit 1", None);
            let (ok, detail) = build(
                &mut ctl,
                vec![method("partial", &partial), method("foreign", &foreign)],
            );
            assert!(!ok, "{detail}");
            assert!(detail.contains("replica method foreign: "), "{detail}");
            assert!(detail.contains("replica method partial: "), "{detail}");
            assert!(!tmp.exists(), "the build directory was left behind");
            assert_eq!(ctl.data_dir_state(), DataDir::Empty);
            assert!(
                !build_mark_of(&data).exists(),
                "a build that left the data directory empty leaves no mark (it would \
                 hold what the operator restores there by hand)"
            );
            let _ = fs::remove_dir_all(&dir);
        }

        /// M3: a method that writes into the data directory ends the build; no
        /// other method runs, and nothing of it is removed.
        #[test]
        fn a_method_that_writes_into_the_data_directory_ends_the_build() {
            let (mut ctl, data) = scratch_ctl("pg-methods-dd");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let stray = script(
                &dir,
                "stray",
                &format!("PGDATA={}", data.display()),
                Some(7),
            );
            let good = script(&dir, "good", "", Some(7));
            let (ok, detail) = build(
                &mut ctl,
                vec![method("stray", &stray), method("good", &good)],
            );
            assert!(!ok, "{detail}");
            assert!(
                detail.contains("replica method stray wrote into the data directory"),
                "{detail}"
            );
            assert!(!detail.contains("built by"), "{detail}");
            assert!(data.join("PG_VERSION").exists(), "what it wrote is left");
            // Held for the operator: never started, built into or moved aside.
            let st = ctl.data_dir_state();
            assert!(
                matches!(&st, DataDir::Held(w) if w.contains("replica method stray")),
                "{st:?}"
            );
            let _ = fs::remove_dir_all(&dir);
        }

        /// Review of session 18, M4: a method that writes into the data
        /// directory and then fails ends the build under its own name (the next
        /// method does not run, and is not blamed), and the directory is held.
        #[test]
        fn a_failed_method_that_wrote_into_the_data_directory_is_named_and_held() {
            let (mut ctl, data) = scratch_ctl("pg-methods-dd-fail");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let torn = script(
                &dir,
                "torn",
                &format!(
                    "mkdir -p {d}/global && printf 15 > {d}/PG_VERSION\nexit 2",
                    d = data.display()
                ),
                None,
            );
            let good = script(&dir, "good", "touch \"$PGDATA/../GOOD-RAN\"", Some(7));
            let (ok, detail) = build(&mut ctl, vec![method("torn", &torn), method("good", &good)]);
            assert!(!ok, "{detail}");
            assert!(
                detail.contains("replica method torn wrote into the data directory"),
                "{detail}"
            );
            assert!(!detail.contains("replica method good"), "{detail}");
            assert!(!dir.join("GOOD-RAN").exists(), "the next method ran");
            let st = ctl.data_dir_state();
            assert!(matches!(&st, DataDir::Held(_)), "{st:?}");
            // The operator checked it and removed the mark: the directory is
            // what it holds again.
            fs::remove_file(build_mark_of(&data)).unwrap();
            assert!(matches!(ctl.data_dir_state(), DataDir::Unusable(_)));
            let _ = fs::remove_dir_all(&dir);
        }

        /// Review of session 18, M2 and L1: a data directory the copy could not
        /// be renamed onto (a symbolic link) is refused before anything is
        /// copied, and the refusal comes back from the next poll as a failed
        /// build (the core backs off and passes a failing source over).
        #[test]
        fn a_build_that_cannot_install_is_refused_before_it_copies() {
            let (mut ctl, data) = scratch_ctl("pg-methods-link");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let real = dir.join("real-data");
            fs::create_dir_all(&real).unwrap();
            std::os::unix::fs::symlink(&real, &data).unwrap();
            let good = script(&dir, "good", "touch \"$PGDATA/../GOOD-RAN\"", Some(7));
            let kind = basebackup();
            let e = start(&mut ctl, vec![method("good", &good)])
                .unwrap_err()
                .to_string();
            assert!(e.contains("is a symbolic link"), "{e}");
            match ctl.poll_job(clock::now()) {
                Job::Finished {
                    kind: k,
                    ok: false,
                    detail,
                } => {
                    assert_eq!(k, kind);
                    assert!(
                        detail.contains("did not start: ") && detail.contains("symbolic link"),
                        "{detail}"
                    );
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(ctl.poll_job(clock::now()), Job::Idle, "reported once");
            assert!(!dir.join("GOOD-RAN").exists(), "a method ran");
            // No source at all (a member's conn_url that does not parse): the
            // same, a failed build.
            fs::remove_file(&data).unwrap();
            assert!(ctl.start_job(&kind, None, clock::now()).is_err());
            assert!(matches!(
                ctl.poll_job(clock::now()),
                Job::Finished { ok: false, .. }
            ));
            let _ = fs::remove_dir_all(&dir);
        }

        /// Review of the hold (M2): a build cut short while its method was
        /// writing into the data directory (the agent stopped, a forced reinit)
        /// leaves it held, with no report and no rewrite of the mark.
        #[test]
        fn a_build_cut_short_holds_what_it_left_in_the_data_directory() {
            let (mut ctl, data) = scratch_ctl("pg-methods-cut");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let slow = script(
                &dir,
                "slow",
                &format!(
                    "mkdir -p {d}/global && printf 15 > {d}/PG_VERSION && touch {d}/STARTED\n\
                     sleep 100",
                    d = data.display()
                ),
                None,
            );
            start(&mut ctl, vec![method("slow", &slow)]).unwrap();
            let started = crate::testbed::wait_for(
                Duration::from_secs(10),
                Duration::from_millis(20),
                || {
                    let _ = ctl.poll_job(clock::now());
                    data.join("STARTED").exists().then_some(())
                },
            );
            assert!(started.is_some(), "the method never wrote");
            ctl.kill_job();
            let st = ctl.data_dir_state();
            assert!(
                matches!(&st, DataDir::Held(w) if w.contains("a replica build into")),
                "{st:?}"
            );
            let _ = fs::remove_dir_all(&dir);
        }

        /// Review of session 18, M3: a failed copy's tablespaces keep their
        /// files when its build directory goes; the report says where.
        #[test]
        fn a_failed_copy_names_the_tablespaces_it_leaves() {
            let (mut ctl, _data) = scratch_ctl("pg-methods-tblspc");
            let dir = _data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let ts = dir.join("ts1");
            let tblspc = script(
                &dir,
                "tblspc",
                &format!(
                    "mkdir -p {ts} \"$PGDATA/pg_tblspc\" && touch {ts}/FILE && \
                     ln -s {ts} \"$PGDATA/pg_tblspc/16400\"\nexit 1",
                    ts = ts.display()
                ),
                None,
            );
            let (ok, detail) = build(&mut ctl, vec![method("tblspc", &tblspc)]);
            assert!(!ok, "{detail}");
            assert!(
                detail.contains(&format!(
                    "its tablespaces ({}) keep what it wrote",
                    ts.display()
                )),
                "{detail}"
            );
            assert!(
                ts.join("FILE").exists(),
                "a tablespace is not tenure's to empty"
            );
            let _ = fs::remove_dir_all(&dir);
        }

        /// Review of session 18, M1: a method that exits 0 while a writer it
        /// started still runs in its process group did not finish its copy: the
        /// writer is killed, the method counts as failed, the next one builds.
        #[test]
        fn a_method_that_exits_before_its_writers_is_a_failed_one() {
            let (mut ctl, data) = scratch_ctl("pg-methods-early");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.set_cluster("s", Some(7));
            let early = script(
                &dir,
                "early",
                "( sleep 100; touch \"$PGDATA/LATE\" ) &",
                Some(7),
            );
            let good = script(&dir, "good", "", Some(7));
            let (ok, detail) = build(
                &mut ctl,
                vec![method("early", &early), method("good", &good)],
            );
            assert!(ok, "{detail}");
            assert!(detail.contains("built by replica method good"), "{detail}");
            assert!(
                detail.contains("replica method early: ")
                    && detail.contains("exited while processes it started were still running"),
                "{detail}"
            );
            assert!(!data.join("LATE").exists());
            let _ = fs::remove_dir_all(&dir);
        }
    }

    /// The bootstrap job (`JobKind::InitDb`) with stand-ins for `initdb` and
    /// `postgres` in `bin_dir`: the operator's initdb options reach initdb, and a
    /// bootstrap that does not finish holds what it wrote.
    mod bootstrap_job {
        use super::*;

        /// A `bin_dir` whose `initdb` records its arguments in `<dir>/initdb.args`
        /// and makes a fake cluster in the directory after `-D` (or nothing when
        /// `initdb_ok` is false: exit 1), whose `postgres` (the roles'
        /// single-user run) exits with `postgres_exit`, and whose `pg_ctl` appends
        /// its arguments to `<dir>/calls` and makes (`start`) or removes (`stop`)
        /// `<dir>/server.up`.
        fn bin(dir: &Path, initdb_ok: bool, postgres_exit: i32) -> PathBuf {
            let bin = dir.join("bin");
            fs::create_dir_all(&bin).unwrap();
            let make = if initdb_ok {
                "mkdir -p \"$2/global\" && printf 15 > \"$2/PG_VERSION\" && \
                 : > \"$2/postgresql.conf\" && \
                 printf '\\007\\0\\0\\0\\0\\0\\0\\0' > \"$2/global/pg_control\" && \
                 head -c 8184 /dev/zero >> \"$2/global/pg_control\""
            } else {
                "exit 1"
            };
            let initdb = format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}/initdb.args\n{make}\n",
                dir.display()
            );
            let d = dir.display();
            let pg_ctl = format!(
                "#!/bin/sh\necho \"pg_ctl $*\" >> {d}/calls\n\
                 case $1 in start) touch {d}/server.up;; stop) rm -f {d}/server.up;; esac\n"
            );
            for (name, text) in [
                ("initdb", initdb),
                ("postgres", format!("#!/bin/sh\nexit {postgres_exit}\n")),
                ("pg_ctl", pg_ctl),
            ] {
                let p = bin.join(name);
                fs::write(&p, text).unwrap();
                fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            }
            bin
        }

        fn run(ctl: &mut PgCtl) -> (bool, String) {
            ctl.start_job(&JobKind::InitDb, None, clock::now()).unwrap();
            let until = clock::now().add(Duration::from_secs(60));
            loop {
                assert!(clock::now() < until, "the job never ended");
                match ctl.poll_job(clock::now()) {
                    Job::Finished { ok, detail, .. } => return (ok, detail),
                    _ => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }

        #[test]
        fn the_operators_initdb_options_reach_initdb_and_tenures_follow() {
            let (mut ctl, data) = scratch_ctl("pg-initdb-args");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, true, 0);
            ctl.cfg.bootstrap.initdb_args =
                vec!["--locale=C.UTF-8".into(), "--wal-segsize=32".into()];
            let (ok, detail) = run(&mut ctl);
            assert!(ok, "{detail}");
            let args = fs::read_to_string(dir.join("initdb.args")).unwrap();
            let args: Vec<&str> = args.lines().collect();
            assert_eq!(
                args[..4],
                [
                    "-D",
                    data.to_str().unwrap(),
                    "--locale=C.UTF-8",
                    "--wal-segsize=32"
                ],
                "{args:?}"
            );
            for a in ["-U", "--auth-local=trust", "--auth-host=scram-sha-256"] {
                assert!(args.contains(&a), "{a} in {args:?}");
            }
            assert!(
                !args.iter().any(|a| a.contains("encoding") || *a == "-E"),
                "a list that is set replaces tenure's defaults: {args:?}"
            );
            assert!(matches!(
                ctl.data_dir_state(),
                DataDir::Present { sysid: 7, .. }
            ));
            assert!(
                !build_mark_of(&data).exists(),
                "a finished bootstrap is not held"
            );
            let _ = fs::remove_dir_all(&dir);
        }

        #[test]
        fn tenures_defaults_without_the_operators_list() {
            let (mut ctl, data) = scratch_ctl("pg-initdb-default");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, true, 0);
            let (ok, detail) = run(&mut ctl);
            assert!(ok, "{detail}");
            let args = fs::read_to_string(dir.join("initdb.args")).unwrap();
            let args: Vec<&str> = args.lines().collect();
            assert_eq!(
                args[2..4],
                ["--data-checksums", "--encoding=UTF8"],
                "{args:?}"
            );
            let _ = fs::remove_dir_all(&dir);
        }

        /// initdb made a cluster, the roles' step failed: the directory is held,
        /// not a cluster a later loop would re-create `initialize` from (before,
        /// it was `Present` and a node re-created the key from it).
        #[test]
        fn a_bootstrap_that_fails_after_initdb_holds_its_directory() {
            let (mut ctl, data) = scratch_ctl("pg-initdb-held");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, true, 1);
            let (ok, detail) = run(&mut ctl);
            assert!(!ok, "{detail}");
            assert!(detail.contains("create roles"), "{detail}");
            match ctl.data_dir_state() {
                DataDir::Held(why) => {
                    assert!(
                        why.contains("a bootstrap") && why.contains("did not finish"),
                        "{why}"
                    )
                }
                other => panic!("not held: {other:?}"),
            }
            let _ = fs::remove_dir_all(&dir);
        }

        /// initdb failed and left the directory empty: no mark is left to hold a
        /// directory an operator fills later (a restore), and the next bootstrap
        /// may run.
        #[test]
        fn a_failed_initdb_that_left_nothing_leaves_no_mark() {
            let (mut ctl, data) = scratch_ctl("pg-initdb-empty");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, false, 0);
            let (ok, detail) = run(&mut ctl);
            assert!(!ok, "{detail}");
            assert!(detail.contains("initdb failed"), "{detail}");
            assert_eq!(ctl.data_dir_state(), DataDir::Empty);
            assert!(!build_mark_of(&data).exists());
            let _ = fs::remove_dir_all(&dir);
        }

        /// A post-bootstrap script in `dir` that appends its arguments and
        /// libpq's variables to `<dir>/calls`, checks the server is up, then runs
        /// `then` (shell lines).
        fn post_script(dir: &Path, then: &str) -> Vec<String> {
            let p = dir.join("post.sh");
            let d = dir.display();
            fs::write(
                &p,
                format!(
                    "#!/bin/sh\necho \"post $* PGHOST=$PGHOST PGUSER=$PGUSER \
                     PGOPTIONS=$PGOPTIONS\" >> {d}/calls\ntest -e {d}/server.up || exit 9\n{then}\n"
                ),
            )
            .unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            vec![p.display().to_string(), "--fixed".into()]
        }

        fn calls(dir: &Path) -> Vec<String> {
            fs::read_to_string(dir.join("calls"))
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect()
        }

        /// `post_bootstrap` runs after the roles on a server started for it on
        /// the socket only, with a URL to it last, and that server is stopped
        /// before the bootstrap's mark goes.
        #[test]
        fn post_bootstrap_runs_on_a_socket_only_server_that_is_stopped_after() {
            let (mut ctl, data) = scratch_ctl("pg-post-bootstrap");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, true, 0);
            ctl.cfg.bootstrap.post_bootstrap = Some(post_script(&dir, "exit 0"));
            let (ok, detail) = run(&mut ctl);
            assert!(ok, "{detail}");
            let c = calls(&dir);
            assert_eq!(c.len(), 3, "{c:?}");
            assert!(
                c[0].starts_with("pg_ctl start")
                    && c[0].ends_with("-o -c listen_addresses='' -c archive_mode=off"),
                "{c:?}"
            );
            let sock = ctl.cfg.socket_dir.display().to_string();
            assert_eq!(
                c[1],
                format!(
                    "post --fixed postgresql://postgres@/postgres?host={sock}&port={} \
                     PGHOST={sock} PGUSER=postgres PGOPTIONS=-c synchronous_commit=local \
                     -c statement_timeout=0",
                    ctl.port
                ),
                "{c:?}"
            );
            assert!(
                c[2].starts_with("pg_ctl stop")
                    && c[2].contains("-m fast")
                    && c[2].ends_with("-t 600"),
                "{c:?}"
            );
            assert!(!dir.join("server.up").exists());
            assert!(matches!(ctl.data_dir_state(), DataDir::Present { .. }));
            assert!(!build_mark_of(&data).exists());
            let _ = fs::remove_dir_all(&dir);
        }

        /// A failing `post_bootstrap` fails the bootstrap: its server is stopped
        /// all the same and the directory is held.
        #[test]
        fn a_failing_post_bootstrap_stops_its_server_and_holds_the_directory() {
            let (mut ctl, data) = scratch_ctl("pg-post-bootstrap-fails");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, true, 0);
            ctl.cfg.bootstrap.post_bootstrap =
                Some(post_script(&dir, "echo no such role >&2; exit 3"));
            let (ok, detail) = run(&mut ctl);
            assert!(!ok, "{detail}");
            assert!(
                detail.contains("post_bootstrap ") && detail.contains("no such role"),
                "{detail}"
            );
            let c = calls(&dir);
            assert!(
                c.last().is_some_and(|l| l.starts_with("pg_ctl stop")),
                "{c:?}"
            );
            assert!(
                !dir.join("server.up").exists(),
                "the server was left running"
            );
            assert!(matches!(ctl.data_dir_state(), DataDir::Held(_)));
            let _ = fs::remove_dir_all(&dir);
        }

        /// Past `post_bootstrap_timeout` the command's whole process group is
        /// killed, the bootstrap has failed, and the server is stopped.
        #[test]
        fn post_bootstrap_past_its_timeout_is_killed_and_the_server_stopped() {
            let (mut ctl, data) = scratch_ctl("pg-post-bootstrap-timeout");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, true, 0);
            ctl.cfg.bootstrap.post_bootstrap = Some(post_script(&dir, "sleep 30 & wait"));
            ctl.cfg.bootstrap.post_bootstrap_timeout = Duration::from_millis(500);
            let (ok, detail) = run(&mut ctl);
            assert!(!ok, "{detail}");
            assert!(
                detail.contains("ran longer than post_bootstrap_timeout (0.5 s): killed"),
                "{detail}"
            );
            assert!(
                !dir.join("server.up").exists(),
                "the server was left running"
            );
            assert!(matches!(ctl.data_dir_state(), DataDir::Held(_)));
            let _ = fs::remove_dir_all(&dir);
        }

        /// `Action::HoldDataDir`: a directory with a cluster in it is held with
        /// the reason given; an empty one gets no mark.
        #[test]
        fn hold_data_dir_marks_a_directory_that_holds_something() {
            let (mut ctl, data) = scratch_ctl("pg-hold");
            let dir = data.parent().unwrap().to_path_buf();
            assert_eq!(ctl.hold_data_dir("why not"), Ok(false));
            assert!(!build_mark_of(&data).exists());
            ctl.cfg.bin_dir = bin(&dir, true, 0);
            let (ok, detail) = run(&mut ctl);
            assert!(ok, "{detail}");
            assert_eq!(ctl.hold_data_dir("the lock was lost"), Ok(true));
            match ctl.data_dir_state() {
                DataDir::Held(why) => assert!(why.starts_with("the lock was lost"), "{why}"),
                other => panic!("not held: {other:?}"),
            }
            let _ = fs::remove_dir_all(&dir);
        }

        /// Without `post_bootstrap` no server is started by the bootstrap.
        #[test]
        fn no_server_is_started_without_post_bootstrap() {
            let (mut ctl, data) = scratch_ctl("pg-no-post-bootstrap");
            let dir = data.parent().unwrap().to_path_buf();
            ctl.cfg.bin_dir = bin(&dir, true, 0);
            let (ok, detail) = run(&mut ctl);
            assert!(ok, "{detail}");
            assert!(calls(&dir).is_empty(), "{:?}", calls(&dir));
            let _ = fs::remove_dir_all(&dir);
        }
    }
}
