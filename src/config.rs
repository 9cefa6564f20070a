//! Configuration: the node's TOML file, validated fail-closed against the timing
//! contract (DESIGN S6), and the cluster-wide dynamic config (`config` key).
//!
//! Owns: parsing, defaults, validation, the derived budget table `tenure check-config`
//! prints, and merging the etcd `config` key with this node's own values.
//! Must never: adjust a value silently, accept a timing that breaks S6, accept an
//! unknown key (a typo would silently fall back to a default), or panic on bad input.
//! Every error names the file, the dotted key and what is wrong.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::{Table, Value};

pub use crate::core::model::{MAX_TTL, MAX_WATCHDOG};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchdogMode {
    Off,
    Automatic,
    Required,
}

/// `[watchdog] guardian`: when the guardian process is this node's fence (DESIGN §2
/// "The guardian").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardianMode {
    /// In `automatic` mode, when no device exists and `WATCHDOG_USEC` is unset.
    Auto,
    /// As `Auto`, and also accepted as the fence in `required` mode.
    Allow,
    /// Never.
    Off,
}

#[derive(Clone, Debug)]
pub struct TimingConfig {
    /// Requested lease TTL, whole seconds (etcd may grant more).
    pub ttl: u32,
    pub loop_wait: Duration,
    pub retry_timeout: Duration,
    pub safety_margin: Duration,
    pub demote_budget: Duration,
    /// `Some(d)`: always wait `d` before promoting.
    pub promote_delay: Option<Duration>,
    /// `P`: the budget for everything an iteration does besides the renewal.
    /// Default `loop_wait - retry_timeout`.
    pub iteration_budget: Duration,
}

#[derive(Clone, Debug)]
pub struct DynamicConfig {
    pub maximum_lag_on_failover: u64,
    pub primary_start_timeout: Duration,
    /// `synchronous_mode` (DESIGN §3a).
    pub synchronous_mode: bool,
    /// `synchronous_mode_strict`: with no standby left, commits wait instead of the
    /// primary degrading to asynchronous. Meaningful only with `synchronous_mode`.
    pub synchronous_mode_strict: bool,
    /// `synchronous_node_count` (Patroni's name): how many synchronous standbys the
    /// primary keeps when that many are fit, 1 to [`MAX_SYNC_NODES`]. Every commit
    /// waits for each of them. Meaningful only with `synchronous_mode`.
    pub synchronous_node_count: u32,
    /// `maximum_lag_on_syncnode` (Patroni's name): bytes a synchronous standby may
    /// fall behind the most advanced standby before a healthy one replaces it;
    /// `None` (Patroni's -1, or 0): never.
    pub maximum_lag_on_syncnode: Option<u64>,
    /// `pause`: maintenance mode (Patroni's). Health-driven actions stop (no
    /// automatic failover or promotion, no restart of a stopped PostgreSQL, no
    /// rewind); S1 and S2 still hold.
    pub pause: bool,
    /// `slots` (Patroni's permanent slots; physical only): replication slots the
    /// leader keeps on its PostgreSQL beside the members' own, for consumers that
    /// are not members (pg_receivewal, a backup server). Sorted, no duplicates.
    pub slots: Vec<String>,
    /// `ignore_slots` (Patroni's): slots the leader never drops, matched by any of
    /// name, type, database, plugin.
    pub ignore_slots: Vec<IgnoreSlot>,
    /// Permanent logical slots the `config` key names (Patroni's): not managed by
    /// tenure, which never touches logical slots; the agent says so once.
    pub logical_slots: Vec<String>,
    /// `member_slots_ttl` (Patroni 4's): how long the leader keeps the slot of a
    /// member whose key went away (a replica's host rebooting), so it can stream
    /// again from where it stopped. Zero: dropped at once. Default 30 min.
    pub member_slots_ttl: Duration,
    /// `postgresql.parameters` (Patroni's cluster-wide PostgreSQL settings): what
    /// `tenure.params.conf` gives every member's PostgreSQL, before the node's own
    /// `[postgresql.parameters]`. The key is the one source: absent means none.
    pub pg_parameters: cluster::PgParameters,
}

/// `maximum_lag_on_syncnode` as Patroni takes it: a whole number of bytes; 0 or
/// less (Patroni's default is -1) turns it off. `Err` names what is wrong.
pub fn parse_syncnode_lag(v: &serde_json::Value) -> Result<Option<u64>, String> {
    let x = match v {
        serde_json::Value::Number(n) => n.as_f64().ok_or("not a usable number")?,
        // Patroni reads a number written as a string too.
        serde_json::Value::String(s) => s.trim().parse::<f64>().map_err(|_| {
            format!("expected a whole number of bytes (-1: off), found the string {s:?}")
        })?,
        other => {
            return Err(format!(
                "expected a whole number of bytes (-1: off), found {}",
                json_kind(other)
            ));
        }
    };
    if !x.is_finite() || x.fract() != 0.0 {
        return Err(format!(
            "expected a whole number of bytes (-1: off), found {x}"
        ));
    }
    if x > 9.0e18 {
        return Err(format!("{x} bytes is too large"));
    }
    Ok((x > 0.0).then_some(x as u64))
}

/// `member_slots_ttl`'s default, Patroni's.
pub const MEMBER_SLOTS_TTL: Duration = Duration::from_secs(30 * 60);
/// The longest `member_slots_ttl` accepted: a larger value is most likely a
/// typo (a slot kept that long holds WAL up to `max_slot_wal_keep_size`).
pub const MAX_MEMBER_SLOTS_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// `member_slots_ttl` as Patroni takes it: a number of seconds (`0`: off), or a
/// string with PostgreSQL's time units (`"30min"`, `"2h"`, `"90s"`, `"1d"`; a bare
/// number is seconds). `Err` names what is wrong.
pub fn parse_retention(v: &serde_json::Value) -> Result<Duration, String> {
    use serde_json::Value;
    let secs = match v {
        Value::Number(n) => n.as_f64().ok_or("not a usable number")?,
        Value::String(s) => {
            let t = s.trim();
            let split = t
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(t.len());
            let (num, unit) = (t[..split].trim(), t[split..].trim());
            let x: f64 = num.parse().map_err(|_| {
                format!("expected a number of seconds or a time such as \"30min\", found {s:?}")
            })?;
            let scale = match unit {
                "" | "s" => 1.0,
                "us" => 0.000_001,
                "ms" => 0.001,
                "min" => 60.0,
                "h" => 3600.0,
                "d" => 86_400.0,
                other => {
                    return Err(format!(
                        "unknown time unit {other:?} in {s:?} (us, ms, s, min, h or d)"
                    ));
                }
            };
            x * scale
        }
        other => {
            return Err(format!(
                "expected a number of seconds or a time such as \"30min\", found {}",
                json_kind(other)
            ));
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("must be 0 or more seconds, found {secs}"));
    }
    if secs > MAX_MEMBER_SLOTS_TTL.as_secs_f64() {
        return Err(format!(
            "must be at most {} seconds (30 days), found {secs}",
            MAX_MEMBER_SLOTS_TTL.as_secs()
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// One `ignore_slots` entry: a slot matches when every field given equals the
/// slot's (an entry names at least one field).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IgnoreSlot {
    pub name: Option<String>,
    /// `physical` or `logical`.
    pub kind: Option<String>,
    pub database: Option<String>,
    pub plugin: Option<String>,
}

impl IgnoreSlot {
    /// Does a physical slot named `name` match? (`database` and `plugin` are those
    /// of logical slots: an entry that gives either matches no physical slot.)
    pub fn matches_physical(&self, name: &str) -> bool {
        self.name.as_deref().is_none_or(|n| n == name)
            && self.kind.as_deref().is_none_or(|k| k == "physical")
            && self.database.is_none()
            && self.plugin.is_none()
    }
}

/// A replication slot name PostgreSQL accepts: 1 to 63 of `[a-z0-9_]`.
pub fn valid_slot_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `slots` as Patroni writes it: `{"<name>": {"type": "physical"}, ...}` (`null` or
/// `{}`: none; a slot's value `null`, `0`, `""` or `{}` is Patroni's shorthand for a
/// physical one; other fields, such as Patroni 4's `cluster_type`, are Patroni's
/// business). Permanent logical slots (their copies on replicas, advanced for a
/// failover) are not built: returned apart (the second list) so the agent can say
/// so, without refusing a key Patroni wrote.
pub fn parse_slots(v: &serde_json::Value) -> Result<(Vec<String>, Vec<String>), String> {
    use serde_json::Value;
    let map = match v {
        Value::Null => return Ok((Vec::new(), Vec::new())),
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "slots: expected an object of slot names, found {}",
                json_kind(other)
            ));
        }
    };
    // Bounded as the `status` key's slots are: a map of tens of thousands (another
    // writer's, in etcd) would cost the leader's slot upkeep seconds a round
    // (review of bad input, finding 2).
    if map.len() > crate::dcs::MAX_STATUS_SLOTS {
        return Err(format!(
            "slots: {} slots, more than the {} any cluster keeps",
            map.len(),
            crate::dcs::MAX_STATUS_SLOTS
        ));
    }
    let mut out = Vec::new();
    let mut logical = Vec::new();
    for (name, spec) in map {
        if !valid_slot_name(name) {
            return Err(format!(
                "slots: {name:?} is not a replication slot name (1 to 63 of a-z, 0-9, _)"
            ));
        }
        let kind = match spec {
            Value::Object(o) => o.get("type"),
            Value::Null => None,
            Value::Number(n) if n.as_u64() == Some(0) => None,
            Value::String(s) if s.is_empty() => None,
            other => {
                return Err(format!(
                    "slots.{name}: expected an object like {{\"type\": \"physical\"}}, found {}",
                    json_kind(other)
                ));
            }
        };
        match kind {
            None | Some(Value::Null) => out.push(name.clone()),
            Some(Value::String(k)) if k == "physical" => out.push(name.clone()),
            Some(Value::String(k)) if k == "logical" => logical.push(name.clone()),
            Some(other) => {
                return Err(format!(
                    "slots.{name}.type: expected \"physical\" or \"logical\", found {other}"
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    logical.sort();
    Ok((out, logical))
}

/// `ignore_slots` as Patroni writes it: `[{"name": ..., "type": ..., "database":
/// ..., "plugin": ...}, ...]` (`null`: none).
pub fn parse_ignore_slots(v: &serde_json::Value) -> Result<Vec<IgnoreSlot>, String> {
    use serde_json::Value;
    let list = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a,
        other => {
            return Err(format!(
                "ignore_slots: expected a list of objects, found {}",
                json_kind(other)
            ));
        }
    };
    if list.len() > crate::dcs::MAX_STATUS_SLOTS {
        return Err(format!(
            "ignore_slots: {} entries, more than the {} any cluster keeps",
            list.len(),
            crate::dcs::MAX_STATUS_SLOTS
        ));
    }
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let Value::Object(o) = e else {
            return Err(format!(
                "ignore_slots[{i}]: expected an object with name, type, database or plugin, \
                 found {}",
                json_kind(e)
            ));
        };
        let mut m = IgnoreSlot::default();
        for (k, v) in o {
            let slot = match k.as_str() {
                "name" => &mut m.name,
                "type" => &mut m.kind,
                "database" => &mut m.database,
                "plugin" => &mut m.plugin,
                _ => {
                    return Err(format!(
                        "ignore_slots[{i}]: unknown field {k:?} (name, type, database, plugin)"
                    ));
                }
            };
            match v {
                Value::String(s) if !s.is_empty() => *slot = Some(s.clone()),
                other => {
                    return Err(format!(
                        "ignore_slots[{i}].{k}: expected a non-empty string, found {}",
                        json_kind(other)
                    ));
                }
            }
        }
        if let Some(k) = &m.kind
            && k != "physical"
            && k != "logical"
        {
            return Err(format!(
                "ignore_slots[{i}].type: expected \"physical\" or \"logical\", found {k:?}"
            ));
        }
        if m == IgnoreSlot::default() {
            return Err(format!(
                "ignore_slots[{i}]: an empty entry would match every slot; give a name, type, \
                 database or plugin"
            ));
        }
        out.push(m);
    }
    Ok(out)
}

impl DynamicConfig {
    pub fn sync_mode(&self) -> crate::core::model::SyncMode {
        use crate::core::model::SyncMode;
        match (self.synchronous_mode, self.synchronous_mode_strict) {
            (false, _) => SyncMode::Off,
            (true, false) => SyncMode::On,
            (true, true) => SyncMode::Strict,
        }
    }
}

#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// `http://127.0.0.1:2379` or `https://etcd1.example:2379` style URLs (checked
    /// by [`Endpoint::parse`]); names are resolved in a child process, never in
    /// the loop (DESIGN §5, crate::resolve). All `http://` or all `https://`.
    /// With `srv`: empty in the file, filled from the SRV answer by the agent
    /// (agent/names.rs) and by one-shot commands ([`crate::resolve::endpoints_now`]).
    pub endpoints: Vec<String>,
    /// `[etcd] srv` (+ `srv_suffix`): the members found by DNS SRV instead.
    pub srv: Option<EtcdSrv>,
    /// `[etcd] resolve_timeout`: how long one resolution of the endpoints' names
    /// may take before its child process is killed (the last good addresses stay).
    pub resolve_timeout: Duration,
    /// `[etcd] resolve_interval`: how often the endpoints' names (or, with `srv`,
    /// the SRV records) are asked again while the endpoints answer; `None`
    /// (`resolve_interval = 0`): only after a failure.
    pub resolve_interval: Option<Duration>,
    /// `Some` with `https://` endpoints: CA bundle, client certificate, server name.
    pub tls: Option<EtcdTls>,
    /// etcd user/password authentication (`[etcd] username` + a password).
    pub auth: Option<EtcdAuth>,
}

/// `[etcd] srv = "example.com"`: the members' client URLs come from DNS SRV
/// records, named as etcd's own DNS discovery names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSrv {
    pub domain: String,
    /// `[etcd] srv_suffix`: etcd's `--discovery-srv-name`, for several clusters
    /// under one domain.
    pub suffix: Option<String>,
    /// TLS (`cacert` set): `_etcd-client-ssl` records and `https://` URLs.
    pub https: bool,
}

impl EtcdSrv {
    /// `_etcd-client-ssl[-SUFFIX]._tcp.DOMAIN` with TLS, `_etcd-client[-SUFFIX]._tcp.DOMAIN`
    /// without: the records etcd's documentation has members publish for clients.
    pub fn service(&self) -> String {
        let kind = if self.https { "client-ssl" } else { "client" };
        match &self.suffix {
            Some(x) => format!("_etcd-{kind}-{x}._tcp.{}", self.domain),
            None => format!("_etcd-{kind}._tcp.{}", self.domain),
        }
    }

    /// The endpoint URL of one target.
    pub fn endpoint(&self, t: &crate::resolve::SrvTarget) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}:{}", t.host, t.port)
    }
}

/// `Debug` hides the passwords (config/secrets.rs).
#[derive(Clone)]
pub struct PgConfig {
    pub bin_dir: PathBuf,
    pub data_dir: PathBuf,
    /// Address and port PostgreSQL listens on, e.g. `127.0.0.1:5432`.
    pub listen: String,
    /// host:port others use to reach this PostgreSQL (default: `listen`).
    pub connect_address: String,
    /// Directory for the Unix socket the agent connects through (default:
    /// `<parent of data_dir>/<name>-socket`).
    pub socket_dir: PathBuf,
    /// OS user to run PostgreSQL's programs as when the agent runs as root.
    pub user: Option<String>,
    pub superuser: String,
    pub superuser_password: String,
    pub replication_user: String,
    pub replication_password: String,
    pub rewind_user: String,
    pub rewind_password: String,
    /// Extra `postgresql.conf` parameters (name, value), sorted by name.
    pub parameters: Vec<(String, String)>,
    /// Move an unusable data directory aside instead of refusing to start.
    pub move_aside_unusable: bool,
    /// libpq TLS settings of the replication role's connections: streaming
    /// replication (`primary_conninfo`) and pg_basebackup. `sslmode` defaults to
    /// `[postgresql] sslmode`, else `prefer`.
    pub replication_ssl: PgSsl,
    /// The same for the rewind role: pg_rewind and the CHECKPOINT before it.
    pub rewind_ssl: PgSsl,
    /// Extra `pg_hba.conf` lines (applications, monitoring), after the entries
    /// tenure writes per member.
    pub pg_hba: Vec<String>,
    /// `[postgresql] hba_clientcert`: `verify-ca` or `verify-full`, added as
    /// `clientcert=` to tenure's own member lines (a client certificate required
    /// besides the password; `config/pgssl.rs`). `None`: not required.
    pub hba_clientcert: Option<String>,
    /// `[postgresql] hba_method = "cert"`: tenure's member lines authenticate by
    /// the client certificate alone (`cert`: verified in full, its commonName the
    /// role's name), no password; the replication and rewind passwords may then be
    /// left out (empty here). `false`: `scram-sha-256`, the default.
    pub hba_cert: bool,
    /// `[postgresql] create_replica_methods` and the methods' tables: how this
    /// node builds a replica (`config::replica`).
    pub create_replica: CreateReplica,
    /// `[bootstrap]`: initdb's options (`config::bootstrap`).
    pub bootstrap: BootstrapConfig,
}

impl PgConfig {
    /// Whether tenure's member lines require a client certificate
    /// (`hba_clientcert`, or `hba_method = "cert"`).
    pub fn client_certs_required(&self) -> bool {
        self.hba_cert || self.hba_clientcert.is_some()
    }

    /// What the member lines require of a client certificate, as the file sets
    /// it, for messages; `None` when they require none.
    pub fn client_cert_rule(&self) -> Option<String> {
        if self.hba_cert {
            Some("hba_method = \"cert\"".into())
        } else {
            self.hba_clientcert
                .as_ref()
                .map(|v| format!("hba_clientcert = \"{v}\""))
        }
    }

    /// Whether that certificate's first commonName must be the role's name
    /// (`verify-full`, and `cert`, which always verifies in full).
    pub fn client_cn_is_role(&self) -> bool {
        self.hba_cert || self.hba_clientcert.as_deref() == Some("verify-full")
    }
}

#[derive(Clone, Debug)]
pub struct ApiConfig {
    pub listen: String,
    /// URL others use to reach this API (default `http://<listen>`).
    pub connect_url: String,
    /// `/primary`, `/read-write`, `/` and `/leader` answer 200 only while the time
    /// left to the fence deadline `F` (DESIGN S1) is above this (default
    /// `loop_wait + retry_timeout`): a load balancer that checks every `inter`
    /// and marks a server down after `fall` failures must have
    /// `inter × fall + its check timeout` inside it to stop sending writes before `F`.
    pub primary_min_remaining: Duration,
    /// `[api] username` / `password`: HTTP basic credentials every write endpoint
    /// requires (both or neither). `None`: write endpoints answer 403.
    pub auth: Option<ApiAuth>,
    /// `[api] certfile`/`keyfile`/`cafile`/`verify_client`: https:// only (issue 12).
    pub tls: Option<ApiTls>,
    /// `[api] read_auth`: which reads need the write endpoints' access.
    pub read_auth: ReadAuth,
}

/// Credentials for the API's write endpoints (HTTP basic, as patronictl sends them).
/// `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiAuth {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for ApiAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ApiAuth {{ username: {:?}, password: <hidden> }}",
            self.username
        )
    }
}

#[derive(Clone, Debug)]
pub struct WatchdogConfig {
    pub mode: WatchdogMode,
    pub device: PathBuf,
    /// Where the device's `nowayout` attribute is read (`<sysfs_dir>/<name>/nowayout`):
    /// `/sys/class/watchdog`, or a test's directory for a device outside `/dev`.
    pub sysfs_dir: PathBuf,
    pub guardian: GuardianMode,
    /// `B_g`: the time the guardian's SIGKILL of the postmaster and every backend may
    /// take to leave no process; it kills from `G = F - B_g`. `0 < B_g <= B`.
    pub guardian_kill_budget: Duration,
}

/// `[etcd] resolve_timeout` when not set: a resolver that has not answered by
/// then is killed and the last good addresses stay in use (crate::resolve). A
/// DNS server that lost a packet is not waited for (glibc retries only after its
/// `timeout`, 5 s by default): the next endpoint failure resolves again.
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of a configuration file read (a real one is a few KB).
pub const CONFIG_FILE_MAX: u64 = 1 << 20;

/// The most of a secret, certificate, CA bundle, CRL or key file read: far past
/// any real one (an enterprise CRL of tens of thousands of revocations is a few
/// MiB), only there so `/dev/zero` or a runaway file cannot fill memory.
pub const SMALL_FILE_MAX: u64 = 64 << 20;

/// Read the text file `path`, at most `max` bytes: opened non-blocking and only
/// as a regular file (a reload reads the configuration, its secrets and its
/// certificates on the loop, where a FIFO or `/dev/zero` must not hold it or
/// fill memory: review of bad input). The error says what is wrong.
pub fn read_text(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_bytes(path, max)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// [`read_text`] for any bytes (PEM files whose comments are not UTF-8).
pub fn read_bytes(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_file(path, max, false).map(|(b, _)| b)
}

/// The one bounded read behind [`read_text`], [`read_bytes`] and `pg`'s reads of
/// the data directory's files: opened non-blocking (and, with `nofollow`, not
/// through a symbolic link: ELOOP), checked to be a regular file of at most
/// `max` bytes on the open descriptor, read through it. Returns the bytes and
/// the descriptor's metadata.
pub fn read_file(
    path: &Path,
    max: u64,
    nofollow: bool,
) -> std::io::Result<(Vec<u8>, std::fs::Metadata)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK;
    if nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Err(std::io::Error::other(format!(
            "{} bytes, more than the {max} read",
            meta.len()
        )));
    }
    let mut s = Vec::with_capacity(meta.len() as usize);
    f.take(max + 1).read_to_end(&mut s)?;
    if s.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "more than the {max} bytes read"
        )));
    }
    Ok((s, meta))
}

/// `[etcd] resolve_interval` when not set: names and SRV records are asked again
/// every five minutes while the endpoints answer (Patroni refreshes its etcd
/// member list as often), so members added to DNS, or names that moved, are
/// known before the ones in use fail.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(300);

/// `guardian_kill_budget`'s default, unless `demote_budget` is smaller.
pub const GUARDIAN_KILL_BUDGET: Duration = Duration::from_millis(500);

impl WatchdogConfig {
    /// Whether the guardian is this node's fence, given what start-up found: a
    /// device in use, systemd's watchdog (`WATCHDOG_USEC`). DESIGN §2: only where
    /// neither exists; `required` mode accepts it only with `guardian = "allow"`.
    pub fn guardian_applies(&self, device_in_use: bool, systemd_watchdog: bool) -> bool {
        if device_in_use || systemd_watchdog {
            return false;
        }
        match (&self.mode, self.guardian) {
            (WatchdogMode::Off, _) | (_, GuardianMode::Off) => false,
            (WatchdogMode::Automatic, _) => true,
            (WatchdogMode::Required, GuardianMode::Allow) => true,
            (WatchdogMode::Required, GuardianMode::Auto) => false,
        }
    }
}

/// `[agent]`: how the agent's own process runs.
#[derive(Clone, Debug, Default)]
pub struct AgentConfig {
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)` at start-up, so a swap storm cannot stall
    /// the loop past its deadlines (DESIGN S5).
    pub lock_memory: bool,
    /// `SCHED_FIFO` at this priority (1..=99); `None` keeps the normal scheduler.
    pub realtime_priority: Option<u8>,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub scope: String,
    pub name: String,
    pub namespace: String,
    pub etcd: EtcdConfig,
    pub timing: TimingConfig,
    pub dynamic: DynamicConfig,
    pub postgresql: PgConfig,
    pub api: ApiConfig,
    pub watchdog: WatchdogConfig,
    /// Tags (`nofailover`).
    pub nofailover: bool,
    /// `[tags] noloadbalance`: the read health endpoints answer 503 (Patroni's).
    pub noloadbalance: bool,
    /// `[tags] nosync`: never made a synchronous standby (Patroni's).
    pub nosync: bool,
    /// `[tags] clonefrom`: new replicas are built from this one (Patroni's).
    pub clonefrom: bool,
    /// `[tags]` string values other than the boolean tags, sorted by name: published
    /// in the member key and matched by `?tag_<name>=<value>`.
    pub custom_tags: Vec<(String, String)>,
    /// `[log]`: where syslog lines go (`logging`).
    pub log: crate::logging::LogConfig,
    /// `[hooks]`: the operator's commands and their deadline (`hooks`).
    pub hooks: crate::hooks::HooksConfig,
    pub agent: AgentConfig,
    /// `[ctl]`: how `tenure ctl` checks an https:// API.
    pub ctl: CtlConfig,
    /// The `notAfter` of each certificate `load` read (API, etcd client, each
    /// role's `sslcert`): `crate::certs` watches them. Empty after `parse` alone.
    pub certs: Vec<crate::certs::CertExpiry>,
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a configuration file was refused. Display: `<file>: <key>: <problem>`.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Read {
        file: PathBuf,
        error: std::io::Error,
    },
    /// The file is not valid TOML (the parser's message carries line and column).
    Syntax { file: PathBuf, message: String },
    /// A key is missing, has the wrong type, an invalid value, or is unknown.
    Key {
        file: PathBuf,
        key: String,
        problem: String,
    },
    /// The values parse but break the timing contract (DESIGN S6).
    Timing { file: PathBuf, error: TimingError },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { file, error } => {
                write!(f, "{}: cannot read: {error}", file.display())
            }
            ConfigError::Syntax { file, message } => {
                write!(
                    f,
                    "{}: not valid TOML: {}",
                    file.display(),
                    message.trim_end()
                )
            }
            ConfigError::Key { file, key, problem } => {
                write!(f, "{}: {key}: {problem}", file.display())
            }
            ConfigError::Timing { file, error } => write!(f, "{}: {error}", file.display()),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Which part of the timing contract a [`TimingError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingRule {
    /// A duration (or the ttl) is not > 0, or the ttl is above [`MAX_TTL`].
    Positive,
    /// S6(a): `L_w + 2R <= ttl`.
    A,
    /// S6(b): `L_w + R + B < W <= (ttl - M - R) / 2`.
    B,
    /// S6(c): `L_w + R + B < ttl - M` (no watchdog).
    C,
    /// S6(d): `R + P <= L_w`, `P > 0`.
    D,
    /// S6(e): `W > L_w + R + 1 s - M`.
    E,
    /// S6(f): `ttl - 2W - R + B >= floor(L_w + R) + 1 s` (review of 88463a7,
    /// F1).
    F,
    /// Watchdog `required`, but no whole-second `W` satisfies (b) and (e).
    WatchdogRange,
}

/// A timing contract violation. Display prints the rule, the inequality and the
/// numbers, e.g. `S6(a) violated: loop_wait + 2 × retry_timeout <= ttl, but 5 + 2 × 3 = 11 > 10`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimingError {
    pub rule: TimingRule,
    /// The inequality and the numbers.
    pub detail: String,
}

impl fmt::Display for TimingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = match self.rule {
            TimingRule::Positive => "timing",
            TimingRule::A => "S6(a)",
            TimingRule::B => "S6(b)",
            TimingRule::C => "S6(c)",
            TimingRule::D => "S6(d)",
            TimingRule::E => "S6(e)",
            TimingRule::F => "S6(f)",
            TimingRule::WatchdogRange => "S6(b)+(e)+(f)",
        };
        write!(f, "{rule} violated: {}", self.detail)
    }
}

impl std::error::Error for TimingError {}

// ---------------------------------------------------------------------------
// Exact seconds arithmetic
// ---------------------------------------------------------------------------

/// Durations as signed nanoseconds: the inequalities are checked exactly (no float
/// rounding at the boundary: `0.5 + 0.25 + 0.3` must equal `1.05`), and a
/// difference may be negative.
fn ns(d: Duration) -> i128 {
    d.as_nanos() as i128
}

fn ns_secs(s: u32) -> i128 {
    i128::from(s) * 1_000_000_000
}

/// The fence deadline without a watchdog, `F - s = min(ttl - M, ttl - (L_w + R +
/// 1 s))` (core::lease, `unwatched_deadline`), in nanoseconds: the one formula the
/// budget table, S6(c) and `primary_min_remaining`'s bound share.
fn unwatched_f_ns(ttl: i128, lw: i128, r: i128, m: i128) -> i128 {
    (ttl - m).min(ttl - (lw + r + 1_000_000_000))
}

/// Seconds for humans: `5`, `0.25`, `1.05`, `-0.5` (trailing zeros trimmed).
fn show(n: i128) -> String {
    let neg = n < 0;
    let a = n.unsigned_abs();
    let whole = a / 1_000_000_000;
    let frac = a % 1_000_000_000;
    let mut s = if frac == 0 {
        format!("{whole}")
    } else {
        let f = format!("{frac:09}");
        format!("{whole}.{}", f.trim_end_matches('0'))
    };
    if neg {
        s.insert(0, '-');
    }
    s
}

fn show_d(d: Duration) -> String {
    show(ns(d))
}

fn from_ns(n: i128) -> Duration {
    if n <= 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
    }
}

// ---------------------------------------------------------------------------
// S6
// ---------------------------------------------------------------------------

fn positive(name: &str, d: Duration) -> Result<(), TimingError> {
    if d.is_zero() {
        return Err(TimingError {
            rule: TimingRule::Positive,
            detail: format!("{name} must be > 0, found 0"),
        });
    }
    Ok(())
}

/// The whole-second watchdog timeouts S6(b) and (e) allow for `ttl`, as
/// `(lowest, highest)`; `None` when the range is empty.
pub fn watchdog_range(t: &TimingConfig, ttl: u32) -> Option<(u32, u32)> {
    let (lw, r, m, b) = (
        ns(t.loop_wait),
        ns(t.retry_timeout),
        ns(t.safety_margin),
        ns(t.demote_budget),
    );
    let lower = (lw + r + b).max(lw + r + 1_000_000_000 - m); // exclusive
    let upper2 = (ns_secs(ttl) - m - r).min(f_upper2(lw, r, b, ns_secs(ttl))); // 2W <= upper2
    if upper2 < 0 {
        return None;
    }
    let lo = if lower < 0 {
        1
    } else {
        u32::try_from(lower / 1_000_000_000 + 1).ok()?
    };
    let hi = u32::try_from(upper2 / 2 / 1_000_000_000).ok()?;
    let lo = lo.max(1);
    (lo <= hi).then_some((lo, hi))
}

/// S6(f)'s bound on `2W`, signed nanoseconds: `ttl - R + B - floor(L_w + R) - 1 s`.
///
/// Why (review of 88463a7, F1): a leader's agent that dies just before `F - B`
/// leaves its host running until the kernel's close ping plus `W`, i.e. up to
/// `s + R + 2W - B`; a replica's poll can show the lease at TTL 0 from
/// `s + ttl - 1 s` on (etcd truncates to whole seconds), and its `E_max` then
/// lets an early DELETE look on time. An
/// agent restarted on that host could also adopt the key after an etcd leader
/// change reset the lease's TTL, and its pets would keep the old primary running
/// past what the replica predicted. With (f) the host is reset before any replica
/// can poll TTL 0, `floor(L_w + R)` more for the poll age the judgement accepts.
/// One `R` (the pet's delay after the renewal) is enough: a replica's poll can be
/// computed by etcd up to `R` after its send (so `E_max` can be `exp - R - 1 s`),
/// but the replica can act on a TTL of `n` only after etcd computed it, i.e. after
/// `exp - n - 1 s`, and an on-time DELETE needs `n <= floor(L_w + R)`
/// (tests/core_review_s6f.rs, a sweep of 32,400 poll schedules).
fn f_upper2(lw: i128, r: i128, b: i128, ttl: i128) -> i128 {
    ttl - r + b - f_floor(lw, r)
}

/// S6(f)'s right side, signed nanoseconds: `floor(L_w + R) + 1 s`.
fn f_floor(lw: i128, r: i128) -> i128 {
    (lw + r) / 1_000_000_000 * 1_000_000_000 + 1_000_000_000
}

/// DESIGN S6 (a)–(e), with `granted_ttl` the TTL etcd granted and `watchdog` the
/// read-back `W` (`None`: no watchdog, so (c) instead of (b) and (e)). Also every
/// duration > 0. Never adjusts anything: the first violated rule is returned.
pub fn validate_timing(
    t: &TimingConfig,
    granted_ttl: u32,
    watchdog: Option<u32>,
) -> Result<(), TimingError> {
    if granted_ttl == 0 {
        return Err(TimingError {
            rule: TimingRule::Positive,
            detail: "ttl must be > 0, found 0".into(),
        });
    }
    // The upper bound every member also applies to the TTLs others publish
    // (`MAX_TTL`): a larger one would be read as garbage by the rest of the cluster.
    if granted_ttl > MAX_TTL {
        return Err(TimingError {
            rule: TimingRule::Positive,
            detail: format!("ttl must be <= {MAX_TTL} s, found {granted_ttl}"),
        });
    }
    positive("loop_wait", t.loop_wait)?;
    positive("retry_timeout", t.retry_timeout)?;
    positive("safety_margin", t.safety_margin)?;
    positive("demote_budget", t.demote_budget)?;
    if let Some(d) = t.promote_delay {
        positive("promote_delay", d)?;
    }
    let (lw, r, m, b, p) = (
        ns(t.loop_wait),
        ns(t.retry_timeout),
        ns(t.safety_margin),
        ns(t.demote_budget),
        ns(t.iteration_budget),
    );
    let ttl = ns_secs(granted_ttl);
    let sh = show;

    // (a) Patroni's rule: two retries fit in one ttl after a loop.
    if lw + 2 * r > ttl {
        return Err(TimingError {
            rule: TimingRule::A,
            detail: format!(
                "loop_wait + 2 × retry_timeout <= ttl, but {} + 2 × {} = {} > {}",
                sh(lw),
                sh(r),
                sh(lw + 2 * r),
                sh(ttl)
            ),
        });
    }
    // (d) the keepalives keep their fixed rate.
    if r + p > lw {
        return Err(TimingError {
            rule: TimingRule::D,
            detail: format!(
                "retry_timeout + iteration_budget <= loop_wait, but {} + {} = {} > {}",
                sh(r),
                sh(p),
                sh(r + p),
                sh(lw)
            ),
        });
    }
    if p <= 0 {
        return Err(TimingError {
            rule: TimingRule::D,
            detail: format!(
                "iteration_budget must be > 0 (default loop_wait - retry_timeout), but it is {} \
                 (loop_wait {}, retry_timeout {})",
                sh(p),
                sh(lw),
                sh(r)
            ),
        });
    }
    match watchdog {
        Some(w_secs) => {
            let w = ns_secs(w_secs);
            // (b) left: a healthy leader is never reset or fenced between renewals.
            if lw + r + b >= w {
                return Err(TimingError {
                    rule: TimingRule::B,
                    detail: format!(
                        "loop_wait + retry_timeout + demote_budget < W, but {} + {} + {} = {} >= W = {}",
                        sh(lw),
                        sh(r),
                        sh(b),
                        sh(lw + r + b),
                        sh(w)
                    ),
                });
            }
            // (b) right: S2's `t + 2W <= H` holds for every renewal that met its deadline.
            if 2 * w > ttl - m - r {
                return Err(TimingError {
                    rule: TimingRule::B,
                    detail: format!(
                        "W <= (ttl - safety_margin - retry_timeout) / 2, but W = {} > ({} - {} - {}) / 2 = {}",
                        sh(w),
                        sh(ttl),
                        sh(m),
                        sh(r),
                        sh((ttl - m - r) / 2)
                    ),
                });
            }
            // (e) an on-time DELETE comes after the old leader's fence deadline.
            if w <= lw + r + 1_000_000_000 - m {
                return Err(TimingError {
                    rule: TimingRule::E,
                    detail: format!(
                        "W > loop_wait + retry_timeout + 1 s - safety_margin, but W = {} <= {} + {} + 1 - {} = {}",
                        sh(w),
                        sh(lw),
                        sh(r),
                        sh(m),
                        sh(lw + r + 1_000_000_000 - m)
                    ),
                });
            }
            // (f) a crashed leader's host is reset before a replica can poll its
            // lease at TTL 0 (`f_upper2`).
            if 2 * w > f_upper2(lw, r, b, ttl) {
                return Err(TimingError {
                    rule: TimingRule::F,
                    detail: format!(
                        "ttl - 2W - retry_timeout + demote_budget >= floor(loop_wait + retry_timeout) + 1 s, \
                         but {} - 2 × {} - {} + {} = {} < {} (a crashed leader's host could outlive a \
                         replica's poll of its lease at TTL 0)",
                        sh(ttl),
                        sh(w),
                        sh(r),
                        sh(b),
                        sh(ttl - 2 * w - r + b),
                        sh(f_floor(lw, r))
                    ),
                });
            }
        }
        None => {
            // (c) without a watchdog the fence deadline is the horizon, or earlier
            // the unwatched deadline `s + ttl - (L_w + R + 1 s)` (core::lease): a
            // healthy leader's next renewal must count before the fence starts.
            if lw + r + b >= ttl - m {
                return Err(TimingError {
                    rule: TimingRule::C,
                    detail: format!(
                        "loop_wait + retry_timeout + demote_budget < ttl - safety_margin (no watchdog), \
                         but {} + {} + {} = {} >= {} - {} = {}",
                        sh(lw),
                        sh(r),
                        sh(b),
                        sh(lw + r + b),
                        sh(ttl),
                        sh(m),
                        sh(ttl - m)
                    ),
                });
            }
            let unwatched = ttl - (lw + r + 1_000_000_000);
            if lw + r + b >= unwatched_f_ns(ttl, lw, r, m) {
                return Err(TimingError {
                    rule: TimingRule::C,
                    detail: format!(
                        "loop_wait + retry_timeout + demote_budget < ttl - (loop_wait + retry_timeout \
                         + 1 s) (no watchdog: the fence deadline a replica's on-time judgement \
                         needs), but {} + {} + {} = {} >= {} - ({} + {} + 1 s) = {}",
                        sh(lw),
                        sh(r),
                        sh(b),
                        sh(lw + r + b),
                        sh(ttl),
                        sh(lw),
                        sh(r),
                        sh(unwatched)
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The error for watchdog mode `required` when no whole-second `W` fits.
fn empty_range_error(t: &TimingConfig, ttl: u32) -> TimingError {
    let (lw, r, m, b) = (
        ns(t.loop_wait),
        ns(t.retry_timeout),
        ns(t.safety_margin),
        ns(t.demote_budget),
    );
    let ttl = ns_secs(ttl);
    TimingError {
        rule: TimingRule::WatchdogRange,
        detail: format!(
            "watchdog mode is \"required\" but no whole-second W satisfies \
             loop_wait + retry_timeout + demote_budget < W (S6(b): {} + {} + {} = {}), \
             W > loop_wait + retry_timeout + 1 s - safety_margin (S6(e): {} + {} + 1 - {} = {}) \
             W <= (ttl - safety_margin - retry_timeout) / 2 (S6(b): ({} - {} - {}) / 2 = {}) \
             and W <= (ttl - retry_timeout + demote_budget - floor(loop_wait + retry_timeout) - 1 s) / 2 \
             (S6(f): {})",
            show(lw),
            show(r),
            show(b),
            show(lw + r + b),
            show(lw),
            show(r),
            show(m),
            show(lw + r + 1_000_000_000 - m),
            show(ttl),
            show(m),
            show(r),
            show((ttl - m - r) / 2),
            show(f_upper2(lw, r, b, ttl) / 2)
        ),
    }
}

// ---------------------------------------------------------------------------
// The budget table
// ---------------------------------------------------------------------------

/// What the timing contract means in practice, for `tenure check-config`. All
/// durations are measured from the send instant `s` of the last counted renewal
/// (or the last pet) unless said otherwise.
#[derive(Clone, Debug)]
pub struct Budget {
    pub ttl: u32,
    pub loop_wait: Duration,
    pub retry_timeout: Duration,
    pub safety_margin: Duration,
    pub demote_budget: Duration,
    /// S6(b) lower bound `L_w + R + B` (exclusive).
    pub w_above_b: Duration,
    /// S6(e) lower bound `L_w + R + 1 s - M` (exclusive), signed nanoseconds (may be <= 0).
    pub w_above_e: i128,
    /// S6(b) upper bound `(ttl - M - R) / 2` (inclusive), exact.
    pub w_at_most: Duration,
    /// S6(f) upper bound `(ttl - R + B - floor(L_w + R) - 1 s) / 2` (inclusive),
    /// signed nanoseconds (may be <= 0).
    pub w_at_most_f: i128,
    /// The whole-second range of `W`, if not empty.
    pub w_range: Option<(u32, u32)>,
    /// The `W` the derived rows use (`None`: no watchdog).
    pub watchdog: Option<u32>,
    /// Horizon `H - s = ttl - M`.
    pub horizon: Duration,
    /// With a watchdog: a pet is allowed while `t - s <= ttl - M - 2W`.
    pub pet_window: Option<Duration>,
    /// Fence deadline `F`: `last_pet + W` with a watchdog, `s + ttl - M` without.
    pub fence_deadline: Duration,
    /// The fence starts at `F - B`.
    pub fence_start: Duration,
    /// The etcd outage tolerated without fencing: `W - B - L_w - R`, or
    /// `F - B - L_w - R` without a watchdog (`F` the unwatched deadline), in signed
    /// nanoseconds: <= 0 means none.
    pub outage_tolerated: i128,
    /// `P`, and the most S6(d) allows (`L_w - R`, signed nanoseconds).
    pub iteration_budget: Duration,
    pub iteration_budget_max: i128,
    /// Worst-case failover after the leader died: ttl + 0.5 s expiry sweep + L_w + R
    /// (+ a configured promote_delay).
    pub failover_worst: Duration,
    /// The delay a winner waits after an early expiry: `2W + R + M` with a watchdog,
    /// `ttl + R` without (or the configured promote_delay if larger).
    pub early_expiry_delay: Duration,
    pub promote_delay: Option<Duration>,
}

/// The budget table for timing `t`, granted `ttl` and read-back `watchdog`.
pub fn budget(t: &TimingConfig, ttl: u32, watchdog: Option<u32>) -> Budget {
    let (lw, r, m, b) = (
        ns(t.loop_wait),
        ns(t.retry_timeout),
        ns(t.safety_margin),
        ns(t.demote_budget),
    );
    let ttl_ns = ns_secs(ttl);
    let horizon = ttl_ns - m;
    let (pet_window, fence_deadline, outage, early) = match watchdog {
        Some(w) => {
            let w = ns_secs(w);
            (
                Some(from_ns(horizon - 2 * w)),
                w,
                w - b - lw - r,
                2 * w + r + m,
            )
        }
        // Without a watchdog `F = min(H, s + ttl - (L_w + R + 1 s))` (core::lease,
        // `unwatched_deadline`).
        None => {
            let f = unwatched_f_ns(ttl_ns, lw, r, m);
            (None, f, f - b - lw - r, ttl_ns + r)
        }
    };
    let pd = t.promote_delay.map(ns).unwrap_or(0);
    Budget {
        ttl,
        loop_wait: t.loop_wait,
        retry_timeout: t.retry_timeout,
        safety_margin: t.safety_margin,
        demote_budget: t.demote_budget,
        w_above_b: from_ns(lw + r + b),
        w_above_e: lw + r + 1_000_000_000 - m,
        w_at_most_f: f_upper2(lw, r, b, ns_secs(ttl)) / 2,
        w_at_most: from_ns((ttl_ns - m - r) / 2),
        w_range: watchdog_range(t, ttl),
        watchdog,
        horizon: from_ns(horizon),
        pet_window,
        fence_deadline: from_ns(fence_deadline),
        fence_start: from_ns(fence_deadline - b),
        outage_tolerated: outage,
        iteration_budget: t.iteration_budget,
        iteration_budget_max: lw - r,
        // Takeover 3 L_w + 2 R: candidates compare only positions published after the
        // vacancy was seen (DESIGN §3a), which can take one more loop than the
        // acquire itself (found by the simulation: seed 1978); and a better rival
        // that died after publishing holds the others back for its head start of
        // 2 (L_w + R), noticed at the next tick (seed 29722, `core::candidacy`).
        failover_worst: from_ns(ttl_ns + 500_000_000 + 3 * lw + 2 * r + pd),
        early_expiry_delay: from_ns(early.max(pd)),
        promote_delay: t.promote_delay,
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sd = show_d;
        writeln!(
            f,
            "timing: ttl {} s, loop_wait (L_w) {} s, retry_timeout (R) {} s, safety_margin (M) {} s, demote_budget (B) {} s",
            self.ttl,
            sd(self.loop_wait),
            sd(self.retry_timeout),
            sd(self.safety_margin),
            sd(self.demote_budget)
        )?;
        writeln!(
            f,
            "  watchdog W (S6(b))       {} < W <= {}   (L_w + R + B < W <= (ttl - M - R) / 2 = {})",
            sd(self.w_above_b),
            self.w_at_most.as_secs(),
            sd(self.w_at_most)
        )?;
        writeln!(
            f,
            "  watchdog W (S6(e))       W > {}   (L_w + R + 1 s - M)",
            show(self.w_above_e)
        )?;
        writeln!(
            f,
            "  watchdog W (S6(f))       W <= {}   ((ttl - R + B - floor(L_w + R) - 1 s) / 2)",
            show(self.w_at_most_f)
        )?;
        match self.w_range {
            Some((lo, hi)) => writeln!(f, "  W may be (whole seconds) {lo}..={hi} s")?,
            None => writeln!(
                f,
                "  W may be (whole seconds) none: this timing cannot run with a watchdog"
            )?,
        }
        match self.watchdog {
            Some(w) => writeln!(f, "  rows below assume        W = {w} s")?,
            None => writeln!(f, "  rows below assume        no watchdog")?,
        }
        writeln!(
            f,
            "  horizon H                s + {} s   (s = send instant of the last counted renewal; ttl - M)",
            sd(self.horizon)
        )?;
        match self.pet_window {
            Some(p) => writeln!(
                f,
                "  pet window               s .. s + {} s   (a pet at t needs t + 2W <= H)",
                sd(p)
            )?,
            None => writeln!(f, "  pet window               none (no watchdog)")?,
        }
        match self.watchdog {
            Some(_) => writeln!(
                f,
                "  fence deadline F         last pet + {} s (<= H - W); fence starts at last pet + {} s (F - B)",
                sd(self.fence_deadline),
                sd(self.fence_start)
            )?,
            None => writeln!(
                f,
                "  fence deadline F         s + {} s (min(H, ttl - (L_w + R + 1 s)): no watchdog); fence starts at s + {} s (F - B)",
                sd(self.fence_deadline),
                sd(self.fence_start)
            )?,
        }
        let formula = if self.watchdog.is_some() {
            "W - B - L_w - R"
        } else {
            "F - B - L_w - R"
        };
        if self.outage_tolerated > 0 {
            writeln!(
                f,
                "  etcd outage tolerated T  {} s without fencing ({formula})",
                show(self.outage_tolerated)
            )?;
        } else {
            writeln!(
                f,
                "  etcd outage tolerated T  none ({formula} = {} s)",
                show(self.outage_tolerated)
            )?;
        }
        writeln!(
            f,
            "  iteration budget P       {} s (S6(d) allows up to L_w - R = {} s)",
            sd(self.iteration_budget),
            show(self.iteration_budget_max)
        )?;
        let pd = match self.promote_delay {
            Some(d) => format!(" + promote_delay {} s", sd(d)),
            None => String::new(),
        };
        writeln!(
            f,
            "  worst-case failover      {} s   (ttl + 0.5 s expiry sweep + takeover 3 L_w + 2 R{pd})",
            sd(self.failover_worst)
        )?;
        let early = if self.watchdog.is_some() {
            "2W + R + M"
        } else {
            "ttl + R"
        };
        writeln!(
            f,
            "  after an early expiry    the winner waits promote_delay {} s ({early}) after the DELETE, \
             then promotes within L_w + R",
            sd(self.early_expiry_delay)
        )?;
        match self.watchdog {
            Some(_) => writeln!(
                f,
                "  old primary writable     nothing after F: a partitioned or frozen old primary is fenced \
                 or its host reset by last pet + {} s, before etcd can expire its lease",
                sd(self.fence_deadline)
            ),
            None => writeln!(
                f,
                "  old primary writable     a partitioned agent fences by s + {} s (F); but without a \
                 watchdog or the guardian (below) a FROZEN agent (SIGSTOP, swap storm, suspended VM) leaves PostgreSQL writable \
                 until it thaws: no bound. Use a watchdog or synchronous replication",
                sd(self.fence_deadline)
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/// What a missing sub-table reads as.
static EMPTY: std::sync::LazyLock<Table> = std::sync::LazyLock::new(Table::new);

/// A TOML table being read, with its dotted prefix for error messages.
struct Sect<'a> {
    file: &'a Path,
    prefix: String,
    table: &'a Table,
}

fn a_type(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a datetime",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

impl<'a> Sect<'a> {
    fn key(&self, k: &str) -> String {
        if self.prefix.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.prefix)
        }
    }

    fn err(&self, k: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::Key {
            file: self.file.to_path_buf(),
            key: self.key(k),
            problem: problem.into(),
        }
    }

    fn wrong(&self, k: &str, expected: &str, v: &Value) -> ConfigError {
        self.err(k, format!("expected {expected}, found {}", a_type(v)))
    }

    /// Refuse keys we do not know: a typo must not fall back to a default.
    fn only(&self, allowed: &[&str]) -> Result<(), ConfigError> {
        for k in self.table.keys() {
            if !allowed.contains(&k.as_str()) {
                return Err(self.err(
                    k,
                    format!("unknown key (allowed here: {})", allowed.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// A sub-table; absent = empty (so a missing table reports its first missing key).
    fn sub(&self, k: &str) -> Result<Sect<'a>, ConfigError> {
        let table = match self.table.get(k) {
            None => &*EMPTY,
            Some(Value::Table(t)) => t,
            Some(v) => return Err(self.wrong(k, "a table", v)),
        };
        Ok(Sect {
            file: self.file,
            prefix: self.key(k),
            table,
        })
    }

    fn required<T>(&self, k: &str, v: Option<T>) -> Result<T, ConfigError> {
        v.ok_or_else(|| self.err(k, "missing"))
    }

    /// A string value; none of the file's has a use for a control character, and
    /// one would end up in `tenure.conf`, a passfile or a child's arguments, where
    /// a line break breaks the file (review of bad input, finding 1).
    fn string(&self, k: &str) -> Result<Option<String>, ConfigError> {
        match self.table.get(k) {
            None => Ok(None),
            // A tab is a character some passwords hold; a line break or NUL is
            // not one any of these files or arguments can carry.
            Some(Value::String(s)) if s.contains(['\n', '\r', '\0']) => {
                Err(self.err(k, "must not contain a line break or NUL"))
            }
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(k, "a string", v)),
        }
    }

    fn nonempty(&self, k: &str) -> Result<Option<String>, ConfigError> {
        match self.string(k)? {
            Some(s) if s.is_empty() => Err(self.err(k, "must not be empty")),
            other => Ok(other),
        }
    }

    fn path(&self, k: &str) -> Result<Option<PathBuf>, ConfigError> {
        match self.nonempty(k)? {
            None => Ok(None),
            Some(s) if !s.starts_with('/') => {
                Err(self.err(k, format!("must be an absolute path, found \"{s}\"")))
            }
            Some(s) => Ok(Some(PathBuf::from(s))),
        }
    }

    fn boolean(&self, k: &str) -> Result<Option<bool>, ConfigError> {
        match self.table.get(k) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(k, "true or false", v)),
        }
    }

    /// Seconds, integer or float, > 0.
    fn secs(&self, k: &str) -> Result<Option<Duration>, ConfigError> {
        let x = match self.table.get(k) {
            None => return Ok(None),
            Some(Value::Integer(i)) => *i as f64,
            Some(Value::Float(x)) => *x,
            Some(v) => return Err(self.wrong(k, "a number of seconds", v)),
        };
        secs_from_f64(x)
            .map(Some)
            .map_err(|problem| self.err(k, problem))
    }

    /// `synchronous_node_count`: a whole number from 1 to [`MAX_SYNC_NODES`].
    fn node_count(&self, k: &str) -> Result<Option<u32>, ConfigError> {
        match self.table.get(k) {
            None => Ok(None),
            Some(Value::Integer(i)) => sync_node_count(*i as f64)
                .map(Some)
                .map_err(|p| self.err(k, p)),
            Some(v) => Err(self.wrong(k, "a whole number of standbys", v)),
        }
    }

    /// Whole seconds as `u32`, > 0.
    fn whole_secs(&self, k: &str) -> Result<Option<u32>, ConfigError> {
        match self.table.get(k) {
            None => Ok(None),
            Some(Value::Integer(i)) if *i <= 0 => {
                Err(self.err(k, format!("must be > 0, found {i}")))
            }
            Some(Value::Integer(i)) => u32::try_from(*i)
                .map(Some)
                .map_err(|_| self.err(k, format!("too large: {i}"))),
            Some(v) => Err(self.wrong(k, "a whole number of seconds", v)),
        }
    }

    fn bytes(&self, k: &str) -> Result<Option<u64>, ConfigError> {
        match self.table.get(k) {
            None => Ok(None),
            Some(Value::Integer(i)) => u64::try_from(*i)
                .map(Some)
                .map_err(|_| self.err(k, format!("must be >= 0, found {i}"))),
            Some(v) => Err(self.wrong(k, "a number of bytes", v)),
        }
    }
}

/// `[log]` (issue 10): a datagram socket or a UDP target (an `IP:port`, never a
/// name: resolving would block the loop), the facility, or `syslog = false`.
fn parse_log(lg: &Sect<'_>) -> Result<crate::logging::LogConfig, ConfigError> {
    let mut log = crate::logging::LogConfig {
        syslog_socket: lg.path("syslog_socket")?,
        ..Default::default()
    };
    if let Some(u) = lg.nonempty("syslog_udp")? {
        let addr = u.parse::<std::net::SocketAddr>().map_err(|_| {
            lg.err(
                "syslog_udp",
                format!("expected an IP address and port (\"127.0.0.1:514\"), found \"{u}\""),
            )
        })?;
        if log.syslog_socket.is_some() {
            return Err(lg.err("syslog_udp", "set syslog_socket or syslog_udp, not both"));
        }
        log.syslog_udp = Some(addr);
    }
    if let Some(f) = lg.nonempty("syslog_facility")? {
        if crate::logging::parse_facility(&f).is_none() {
            return Err(lg.err(
                "syslog_facility",
                format!("unknown facility \"{f}\" (daemon, user, local0 ... local7, ...)"),
            ));
        }
        log.facility = f;
    }
    if let Some(b) = lg.boolean("syslog")? {
        log.syslog = b;
    }
    Ok(log)
}

/// `[hooks]` (issue 10): `on_start`, `on_stop`, `on_restart`, `on_reload`,
/// `on_role_change` (absolute program plus fixed words, no shell) and `timeout`.
fn parse_hooks(h: &Sect<'_>) -> Result<crate::hooks::HooksConfig, ConfigError> {
    use crate::hooks::{HookAction, MAX_TIMEOUT, parse_command};
    let mut keys: Vec<&str> = HookAction::ALL.iter().map(|a| a.name()).collect();
    keys.push("timeout");
    h.only(&keys)?;
    let mut cfg = crate::hooks::HooksConfig::default();
    for a in HookAction::ALL {
        let cmd = match h.nonempty(a.name())? {
            None => None,
            Some(s) => Some(parse_command(&s).map_err(|p| h.err(a.name(), p))?),
        };
        match a {
            HookAction::Start => cfg.on_start = cmd,
            HookAction::Stop => cfg.on_stop = cmd,
            HookAction::Restart => cfg.on_restart = cmd,
            HookAction::Reload => cfg.on_reload = cmd,
            HookAction::RoleChange => cfg.on_role_change = cmd,
        }
    }
    if let Some(t) = h.secs("timeout")? {
        if t > MAX_TIMEOUT {
            return Err(h.err(
                "timeout",
                format!(
                    "at most {} s, found {}",
                    MAX_TIMEOUT.as_secs(),
                    t.as_secs_f64()
                ),
            ));
        }
        cfg.timeout = t;
    }
    Ok(cfg)
}

/// Seconds from a float: finite, > 0, at most a day (a typo in ms would be
/// 1000 × too large; a day is beyond any sane lease timing).
fn secs_from_f64(x: f64) -> Result<Duration, String> {
    if !x.is_finite() {
        return Err(format!("must be a finite number of seconds, found {x}"));
    }
    if x <= 0.0 {
        return Err(format!("must be > 0, found {x}"));
    }
    if x > 86_400.0 {
        return Err(format!("must be at most 86400 seconds, found {x}"));
    }
    // Round to whole nanoseconds so 0.3 is exactly 300 ms.
    let n = (x * 1e9).round() as u64;
    if n == 0 {
        return Err(format!("must be > 0, found {x}"));
    }
    Ok(Duration::from_nanos(n))
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// `http(s)://<host>:<port>[/]`, the host an IP literal or a host name.
fn check_endpoint(url: &str) -> Result<(), String> {
    Endpoint::parse(url).map(|_| ())
}

/// `[api] primary_min_remaining` must stay below the least time a healthy leader
/// has left to `F`: just before a renewal counts, `F - now` can be as low as
/// `span - loop_wait - retry_timeout`, with `span` = `W` (with a watchdog, the `W`
/// tenure will ask for) or `ttl - max(safety_margin, loop_wait + retry_timeout + 1 s)`
/// (without). At or above it, `/primary`
/// would answer 503 on a healthy leader once per loop.
pub fn check_primary_min_remaining(
    threshold: Duration,
    t: &TimingConfig,
    ttl: u32,
    watchdog: Option<u32>,
) -> Result<(), String> {
    let (healthy_min, what) = healthy_time_left(t, ttl, watchdog);
    if threshold >= healthy_min {
        return Err(format!(
            "must be < {what} - loop_wait - retry_timeout = {:.3} s (the least time to the \
             fence deadline a healthy leader has just before a renewal), found {:.3} s",
            healthy_min.as_secs_f64(),
            threshold.as_secs_f64()
        ));
    }
    Ok(())
}

/// The least time to `F` a healthy leader has (just before a renewal counts), and
/// the span it is measured from, named for messages.
fn healthy_time_left(t: &TimingConfig, ttl: u32, watchdog: Option<u32>) -> (Duration, String) {
    let (span, what) = match watchdog {
        Some(w) => (Duration::from_secs(u64::from(w)), format!("W {w}")),
        // Without a watchdog `F = min(H, s + ttl - (L_w + R + 1 s))` (core::lease).
        None => {
            let f = unwatched_f_ns(
                ns_secs(ttl),
                ns(t.loop_wait),
                ns(t.retry_timeout),
                ns(t.safety_margin),
            );
            let unwatched = t.loop_wait + t.retry_timeout + Duration::from_secs(1);
            let what = if unwatched > t.safety_margin {
                format!(
                    "ttl - (loop_wait + retry_timeout + 1 s) = {ttl} - {:.3}",
                    unwatched.as_secs_f64()
                )
            } else {
                format!(
                    "ttl - safety_margin = {ttl} - {:.3}",
                    t.safety_margin.as_secs_f64()
                )
            };
            (from_ns(f.max(0)), what)
        }
    };
    (span.saturating_sub(t.loop_wait + t.retry_timeout), what)
}

/// `host:port` with a non-empty host and a numeric port.
/// `connect_address`: checked by the parser every other member reads it with
/// (`ConnTarget::from_conn_url` on the published `conn_url`), so a value they
/// would refuse, or read as another host, is refused here (review of bad input,
/// finding 6).
fn check_host_port(s: &str) -> Result<(), String> {
    let url = format!("postgres://{s}/postgres");
    match crate::pg::ConnTarget::from_conn_url("connect_address", &url) {
        // The same host and port back: not a prefix of it (`a/b:5432` reads as
        // host `a`).
        Ok(t)
            if s.rsplit_once(':').is_some_and(|(h, p)| {
                h.trim_start_matches('[').trim_end_matches(']') == t.host
                    && p.parse::<u16>() == Ok(t.port)
            }) =>
        {
            Ok(())
        }
        Ok(_) => Err(format!(
            "expected \"host:port\" (IPv6 as \"[addr]:port\"), found \"{s}\""
        )),
        Err(e) => Err(format!(
            "expected \"host:port\" (IPv6 as \"[addr]:port\"), found \"{s}\": {e}"
        )),
    }
}

impl Config {
    /// Read and validate `path`. Every error names the file, the key and the
    /// problem. Timing is checked against S6 with the configured ttl and no
    /// watchdog (the agent checks again with the granted TTL and the real `W`); with
    /// watchdog mode `required` some whole-second `W` must also satisfy (b) and (e).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_text(path, CONFIG_FILE_MAX).map_err(|error| ConfigError::Read {
            file: path.to_path_buf(),
            error,
        })?;
        let mut c = Config::parse(path, &text)?;
        // Each certificate's notAfter is kept from the check that reads its file
        // (crate::certs): no second read, on the loop or anywhere.
        let mut certs = Vec::new();
        // The etcd TLS files here, not in `parse`: they are files of their own,
        // and a reload (SIGHUP) with an expired or unreadable one is refused.
        if let Some(tls) = &c.etcd.tls {
            let not_after = check_tls_files(tls, crate::clock::realtime().as_secs() as i64)
                .map_err(|problem| ConfigError::Key {
                    file: path.to_path_buf(),
                    key: "etcd".into(),
                    problem,
                })?;
            if let (Some(not_after), Some((file, _))) = (not_after, &tls.cert) {
                certs.push(crate::certs::CertExpiry {
                    role: crate::certs::CertRole::Etcd,
                    file: file.clone(),
                    not_after,
                });
            }
        }
        if let Some(tls) = &c.api.tls {
            let not_after = check_api_tls_files(tls, crate::clock::realtime().as_secs() as i64)
                .map_err(|problem| ConfigError::Key {
                    file: path.to_path_buf(),
                    key: "api".into(),
                    problem,
                })?;
            certs.push(crate::certs::CertExpiry {
                role: crate::certs::CertRole::Api,
                file: tls.certfile.clone(),
                not_after,
            });
        }
        // PostgreSQL's TLS files likewise, as its OS user will read them (issue 12).
        let pg_certs = pgssl::check_files(&c.postgresql, crate::clock::realtime().as_secs() as i64)
            .map_err(|(key, problem)| ConfigError::Key {
                file: path.to_path_buf(),
                key,
                problem,
            })?;
        certs.extend(pg_certs);
        certs.sort_by_key(|e| e.role);
        c.certs = certs;
        Ok(c)
    }

    /// [`Config::load`] on text already read; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let table: Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Syntax {
                file: path.to_path_buf(),
                message: secrets::syntax_message(&e, text),
            })?;
        let root = Sect {
            file: path,
            prefix: String::new(),
            table: &table,
        };
        root.only(&[
            "scope",
            "name",
            "namespace",
            "etcd",
            "timing",
            "dynamic",
            "tags",
            "postgresql",
            "api",
            "watchdog",
            "log",
            "hooks",
            "agent",
            "ctl",
            "bootstrap",
        ])?;
        let scope = root.required("scope", root.string("scope")?)?;
        if !valid_name(&scope) {
            return Err(root.err(
                "scope",
                format!("must match [A-Za-z0-9_.-]+, found \"{scope}\""),
            ));
        }
        let name = root.required("name", root.string("name")?)?;
        if !valid_name(&name) {
            return Err(root.err(
                "name",
                format!("must match [A-Za-z0-9_.-]+, found \"{name}\""),
            ));
        }
        let namespace = root
            .string("namespace")?
            .unwrap_or_else(|| "/service".into());
        if !namespace.starts_with('/')
            || namespace.len() < 2
            || namespace.ends_with('/')
            || namespace.contains("//")
        {
            return Err(root.err(
                "namespace",
                format!(
                    "must look like \"/service\" (leading /, no trailing /), found \"{namespace}\""
                ),
            ));
        }

        // [etcd]
        let etcd = root.sub("etcd")?;
        etcd.only(&[
            "endpoints",
            "cacert",
            "cert",
            "key",
            "tls_server_name",
            "username",
            "password",
            "password_file",
            "resolve_timeout",
            "resolve_interval",
            "srv",
            "srv_suffix",
        ])?;
        let resolve_timeout = etcd
            .secs("resolve_timeout")?
            .unwrap_or(DEFAULT_RESOLVE_TIMEOUT);
        // 0 turns the timer off (names asked again only after a failure, as
        // before this setting); otherwise at least `resolve_timeout`, so one
        // lookup can end before the next is due.
        let resolve_interval = match etcd.table.get("resolve_interval") {
            Some(Value::Integer(0)) => None,
            Some(Value::Float(x)) if *x == 0.0 => None,
            _ => Some(
                etcd.secs("resolve_interval")?
                    .unwrap_or(DEFAULT_RESOLVE_INTERVAL.max(resolve_timeout)),
            ),
        };
        if let Some(iv) = resolve_interval
            && iv < resolve_timeout
        {
            return Err(etcd.err(
                "resolve_interval",
                format!(
                    "{} s is shorter than resolve_timeout = {} s (one lookup must be able \
                     to end before the next is due; 0 turns the timer off)",
                    iv.as_secs_f64(),
                    resolve_timeout.as_secs_f64()
                ),
            ));
        }
        let srv_domain = etcd.nonempty("srv")?;
        let srv_suffix = etcd.nonempty("srv_suffix")?;
        if let Some(d) = &srv_domain
            && let Err(why) = check_host_name(d.trim_end_matches('.'))
        {
            return Err(etcd.err("srv", format!("\"{d}\" is not a DNS domain: {why}")));
        }
        if let Some(x) = &srv_suffix
            && !(x.len() <= 40 && x.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'))
        {
            return Err(etcd.err(
                "srv_suffix",
                format!("\"{x}\" must be letters, digits and '-' (etcd's --discovery-srv-name)"),
            ));
        }
        if srv_suffix.is_some() && srv_domain.is_none() {
            return Err(etcd.err("srv_suffix", "needs srv (the domain the records are in)"));
        }
        if srv_domain.is_some() && etcd.table.contains_key("endpoints") {
            return Err(etcd.err(
                "srv",
                "set either endpoints or srv, not both (srv finds the endpoints by DNS)",
            ));
        }
        let srv = srv_domain.map(|d| EtcdSrv {
            domain: d.trim_end_matches('.').to_ascii_lowercase(),
            suffix: srv_suffix,
            // TLS when its CA bundle is given: the members publish
            // `_etcd-client-ssl` records for https:// URLs.
            https: etcd.table.contains_key("cacert"),
        });
        if let Some(s) = &srv
            && s.service().len() > 253
        {
            return Err(etcd.err(
                "srv",
                format!(
                    "the record name {} is {} characters long (DNS allows 253)",
                    s.service(),
                    s.service().len()
                ),
            ));
        }
        let endpoints = match etcd.table.get("endpoints") {
            None if srv.is_some() => Vec::new(),
            None => {
                return Err(etcd.err(
                    "endpoints",
                    "missing (list the members' URLs, or set srv = \"<domain>\" to find them by DNS SRV)",
                ));
            }
            Some(Value::Array(a)) => {
                let mut out = Vec::with_capacity(a.len());
                for (i, v) in a.iter().enumerate() {
                    let k = format!("endpoints[{i}]");
                    let Value::String(s) = v else {
                        return Err(etcd.wrong(&k, "a string", v));
                    };
                    check_endpoint(s).map_err(|p| etcd.err(&k, p))?;
                    out.push(s.clone());
                }
                if out.is_empty() {
                    return Err(etcd.err("endpoints", "must list at least one endpoint"));
                }
                out
            }
            Some(v) => return Err(etcd.wrong("endpoints", "an array of URLs", v)),
        };
        let https = match &srv {
            Some(s) => s.https,
            None => endpoints.iter().any(|e| e.starts_with("https://")),
        };
        if https && endpoints.iter().any(|e| e.starts_with("http://")) {
            return Err(etcd.err(
                "endpoints",
                "mixes http:// and https:// (one TLS setting serves every member)",
            ));
        }
        let (etcd_tls, etcd_auth) = secrets::etcd_security(&etcd, https)?;

        // [timing]
        let tm = root.sub("timing")?;
        tm.only(&[
            "ttl",
            "loop_wait",
            "retry_timeout",
            "safety_margin",
            "demote_budget",
            "promote_delay",
            "iteration_budget",
        ])?;
        let ttl = tm.required("ttl", tm.whole_secs("ttl")?)?;
        let loop_wait = tm.required("loop_wait", tm.secs("loop_wait")?)?;
        let retry_timeout = tm.required("retry_timeout", tm.secs("retry_timeout")?)?;
        let safety_margin = tm.required("safety_margin", tm.secs("safety_margin")?)?;
        let demote_budget = tm.required("demote_budget", tm.secs("demote_budget")?)?;
        let promote_delay = tm.secs("promote_delay")?;
        let iteration_budget = match tm.secs("iteration_budget")? {
            Some(p) => p,
            // May be zero (loop_wait <= retry_timeout): validate_timing names S6(d).
            None => loop_wait.saturating_sub(retry_timeout),
        };
        let timing = TimingConfig {
            ttl,
            loop_wait,
            retry_timeout,
            safety_margin,
            demote_budget,
            promote_delay,
            iteration_budget,
        };

        // [dynamic]
        let dy = root.sub("dynamic")?;
        dy.only(&[
            "maximum_lag_on_failover",
            "primary_start_timeout",
            "synchronous_mode",
            "synchronous_mode_strict",
            "synchronous_node_count",
            "maximum_lag_on_syncnode",
            "pause",
            "slots",
            "ignore_slots",
            "member_slots_ttl",
        ])?;
        // `slots` and `ignore_slots` take the config key's JSON form, written as
        // TOML tables (`[dynamic.slots.barman]`, `[[dynamic.ignore_slots]]`): one
        // parser for both.
        let as_json = |k: &str| -> Result<serde_json::Value, ConfigError> {
            match dy.table.get(k) {
                None => Ok(serde_json::Value::Null),
                Some(v) => serde_json::to_value(v).map_err(|e| dy.err(k, e.to_string())),
            }
        };
        let (slots, logical_slots) =
            parse_slots(&as_json("slots")?).map_err(|p| root.err("dynamic", p))?;
        if let Some(l) = logical_slots.first() {
            return Err(root.err(
                "dynamic",
                format!("slots.{l}: permanent logical slots are not supported (physical only)"),
            ));
        }
        let ignore_slots =
            parse_ignore_slots(&as_json("ignore_slots")?).map_err(|p| root.err("dynamic", p))?;
        let member_slots_ttl = match as_json("member_slots_ttl")? {
            serde_json::Value::Null => MEMBER_SLOTS_TTL,
            v => parse_retention(&v).map_err(|p| dy.err("member_slots_ttl", p))?,
        };
        let dynamic = DynamicConfig {
            maximum_lag_on_failover: dy.bytes("maximum_lag_on_failover")?.unwrap_or(1_048_576),
            primary_start_timeout: dy
                .secs("primary_start_timeout")?
                .unwrap_or(Duration::from_secs(30)),
            synchronous_mode: dy.boolean("synchronous_mode")?.unwrap_or(false),
            synchronous_mode_strict: dy.boolean("synchronous_mode_strict")?.unwrap_or(false),
            synchronous_node_count: dy.node_count("synchronous_node_count")?.unwrap_or(1),
            maximum_lag_on_syncnode: match as_json("maximum_lag_on_syncnode")? {
                // TOML's nan and inf become JSON null: refused, not read as off.
                serde_json::Value::Null
                    if matches!(
                        dy.table.get("maximum_lag_on_syncnode"),
                        Some(Value::Float(f)) if !f.is_finite()
                    ) =>
                {
                    return Err(dy.err(
                        "maximum_lag_on_syncnode",
                        "expected a whole number of bytes (-1: off), found a non-finite number",
                    ));
                }
                serde_json::Value::Null => None,
                v => parse_syncnode_lag(&v).map_err(|p| dy.err("maximum_lag_on_syncnode", p))?,
            },
            pause: dy.boolean("pause")?.unwrap_or(false),
            slots,
            ignore_slots,
            logical_slots,
            member_slots_ttl,
            // Only the `config` key sets them (a node's file has its own
            // `[postgresql.parameters]`, which win over these).
            pg_parameters: cluster::PgParameters::default(),
        };

        // [tags]
        let tags = root.sub("tags")?;
        let nofailover = tags.boolean("nofailover")?.unwrap_or(false);
        let noloadbalance = tags.boolean("noloadbalance")?.unwrap_or(false);
        let nosync = tags.boolean("nosync")?.unwrap_or(false);
        let clonefrom = tags.boolean("clonefrom")?.unwrap_or(false);
        let mut custom_tags = Vec::new();
        for (k, v) in tags.table {
            if matches!(
                k.as_str(),
                "nofailover" | "noloadbalance" | "nosync" | "clonefrom"
            ) {
                continue;
            }
            if !valid_name(k) {
                return Err(tags.err(k, "a tag name must match [A-Za-z0-9_.-]+"));
            }
            match v {
                Value::String(s) => custom_tags.push((k.clone(), s.clone())),
                // A boolean under another name is most likely a misspelt boolean
                // tag: refused rather than published as a tag nobody reads.
                other => {
                    return Err(tags.wrong(
                        k,
                        "a string (tenure's boolean tags are nofailover, noloadbalance, nosync \
                         and clonefrom; other tags take string values)",
                        other,
                    ));
                }
            }
        }
        custom_tags.sort();

        // [postgresql]
        let pg = root.sub("postgresql")?;
        {
            // The keys of [postgresql] itself, then the replica methods' tables
            // (their names are the operator's, listed in create_replica_methods).
            let method_keys = replica::table_keys(&pg);
            let mut keys: Vec<&str> = replica::RESERVED.to_vec();
            keys.extend(method_keys.iter().map(String::as_str));
            pg.only(&keys)?;
        }
        let create_replica = replica::parse(&pg)?;
        // [bootstrap]
        let bootstrap = bootstrap::parse(&root.sub("bootstrap")?)?;
        let bin_dir = pg
            .path("bin_dir")?
            .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"));
        let data_dir = pg.required("data_dir", pg.path("data_dir")?)?;
        let Some(data_parent) = data_dir.parent() else {
            return Err(pg.err("data_dir", "must not be /"));
        };
        let listen = pg.required("listen", pg.string("listen")?)?;
        if listen.parse::<SocketAddr>().is_err() {
            return Err(pg.err(
                "listen",
                format!("expected \"ip:port\" (an IP literal), found \"{listen}\""),
            ));
        }
        let connect_address = match pg.string("connect_address")? {
            Some(s) => {
                check_host_port(&s).map_err(|p| pg.err("connect_address", p))?;
                s
            }
            None => listen.clone(),
        };
        let socket_dir = pg
            .path("socket_dir")?
            .unwrap_or_else(|| data_parent.join(format!("{name}-socket")));
        let user = pg.nonempty("user")?;
        let move_aside_unusable = pg.boolean("move_aside_unusable")?.unwrap_or(false);
        // The default of each role's own `sslmode` (issue 12, config/pgssl.rs).
        let sslmode = pgssl::sslmode(&pg)?.unwrap_or_else(|| "prefer".to_string());

        let pg_hba = match pg.table.get("pg_hba") {
            None => Vec::new(),
            Some(Value::Array(a)) => {
                let mut out = Vec::with_capacity(a.len());
                for (i, v) in a.iter().enumerate() {
                    let k = format!("pg_hba[{i}]");
                    let Value::String(line) = v else {
                        return Err(pg.wrong(&k, "a string", v));
                    };
                    check_hba_line(line).map_err(|p| pg.err(&k, p))?;
                    out.push(line.clone());
                }
                out
            }
            Some(v) => return Err(pg.wrong("pg_hba", "an array of pg_hba.conf lines", v)),
        };

        let hba_cert = pgssl::hba_method(&pg)?;
        let auth = pg.sub("authentication")?;
        auth.only(&["superuser", "replication", "rewind"])?;
        let role = |k: &str, default: &str, cred: &str| -> Result<(String, String), ConfigError> {
            let s = auth.sub(k)?;
            // The superuser connects over the Unix socket only: no TLS keys there.
            let mut keys = vec!["username", "password", "password_file"];
            if k != "superuser" {
                keys.extend_from_slice(pgssl::ROLE_KEYS);
            }
            s.only(&keys)?;
            let user = s
                .nonempty("username")?
                .unwrap_or_else(|| default.to_string());
            // PostgreSQL cuts a role name to NAMEDATALEN - 1 = 63 bytes: a longer
            // one would name another role than the passfile and the certificate
            // checks (`hba_clientcert`) compare with.
            if user.len() > 63 {
                return Err(s.err(
                    "username",
                    format!(
                        "{} bytes: PostgreSQL cuts role names to 63 bytes, so the role \
                         would not be the one named here",
                        user.len()
                    ),
                ));
            }
            let password = match secrets::secret(&s, cred)? {
                Some(p) => p,
                // `cert` on the member lines: the connecting roles need no
                // password (the superuser's is set at bootstrap all the same).
                None if hba_cert && k != "superuser" => String::new(),
                None => {
                    return Err(s.err(
                        "password",
                        format!("missing (or password_file, or the {cred} credential)"),
                    ));
                }
            };
            Ok((user, password))
        };
        let (superuser, superuser_password) =
            role("superuser", "postgres", secrets::CRED_PG_SUPERUSER)?;
        let (replication_user, replication_password) =
            role("replication", "replicator", secrets::CRED_PG_REPLICATION)?;
        let (rewind_user, rewind_password) =
            role("rewind", "rewind_user", secrets::CRED_PG_REWIND)?;
        let (repl_sect, rewind_sect) = (auth.sub("replication")?, auth.sub("rewind")?);
        let replication_ssl = pgssl::role_ssl(&repl_sect, &sslmode)?;
        let rewind_ssl = pgssl::role_ssl(&rewind_sect, &sslmode)?;

        let params = pg.sub("parameters")?;
        let mut parameters = Vec::with_capacity(params.table.len());
        for (k, v) in params.table {
            if !crate::pg::conf::node_param_name_ok(k) {
                return Err(params.err(
                    k,
                    "not a PostgreSQL parameter name a configuration file can hold: a \
                     lower-case NAME or PREFIX.NAME of a-z, 0-9 and '_', not starting with \
                     a digit (a.b.c is a syntax error in PostgreSQL's files)",
                ));
            }
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Integer(i) => i.to_string(),
                Value::Float(x) => x.to_string(),
                Value::Boolean(b) => if *b { "on" } else { "off" }.to_string(),
                other => {
                    return Err(params.wrong(k, "a string, number or boolean", other));
                }
            };
            if value.contains(['\n', '\r', '\0']) {
                return Err(params.err(k, "must not contain a newline or NUL"));
            }
            if crate::pg::conf::AGENT_OWNED.contains(&k.to_ascii_lowercase().as_str()) {
                return Err(params.err(
                    k,
                    "set by tenure itself (tenure.conf), so it cannot be set here: the \
                     listen address and port are [postgresql] listen, the standby settings \
                     follow the leader, and no recovery target or trigger file may end a \
                     standby's recovery behind the leader key",
                ));
            }
            parameters.push((k.clone(), value));
        }
        pgssl::check_server(
            &params,
            &parameters,
            &[(&repl_sect, &replication_ssl), (&rewind_sect, &rewind_ssl)],
        )?;
        let hba_clientcert = pgssl::hba_clientcert(
            &pg,
            hba_cert,
            &parameters,
            &[(&repl_sect, &replication_ssl), (&rewind_sect, &rewind_ssl)],
        )?;

        // [api]
        let api = root.sub("api")?;
        let mut api_keys = vec![
            "listen",
            "connect_url",
            "primary_min_remaining",
            "username",
            "password",
            "password_file",
        ];
        api_keys.extend_from_slice(api_tls::API_KEYS);
        api.only(&api_keys)?;
        let api_listen = api.required("listen", api.string("listen")?)?;
        if api_listen.parse::<SocketAddr>().is_err() {
            return Err(api.err(
                "listen",
                format!("expected \"ip:port\" (an IP literal), found \"{api_listen}\""),
            ));
        }
        let has_credentials = api.table.contains_key("username");
        let (api_tls, read_auth) = api_tls::parse_api(&api, has_credentials)?;
        let connect_url = match api.string("connect_url")? {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                api_tls::check_connect_url(&api, &u, api_tls.as_ref())?;
                u
            }
            Some(u) => {
                return Err(api.err(
                    "connect_url",
                    format!("must start with http:// or https://, found \"{u}\""),
                ));
            }
            None if api_tls.is_some() => format!("https://{api_listen}"),
            None => format!("http://{api_listen}"),
        };
        let primary_min_remaining = api.secs("primary_min_remaining")?;
        let auth = match (
            api.string("username")?,
            secrets::secret(&api, secrets::CRED_API)?,
        ) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(api.err(
                    "password",
                    "missing: username and password (or password_file, or the \
                     tenure-api-password credential) are set together (both or neither)",
                ));
            }
            (None, Some(_)) => {
                return Err(api.err(
                    "username",
                    "missing: username and password are set together (both or neither)",
                ));
            }
            (Some(username), Some(password)) => {
                // HTTP basic sends `username:password`: a colon in the name would
                // split it elsewhere; control characters cannot be typed by clients.
                if username.is_empty() || username.contains(':') {
                    return Err(api.err(
                        "username",
                        "must be non-empty and contain no colon (HTTP basic splits at the first one)",
                    ));
                }
                if password.is_empty() {
                    return Err(api.err("password", "must be non-empty"));
                }
                for (k, v) in [("username", &username), ("password", &password)] {
                    if v.chars().any(char::is_control) {
                        return Err(api.err(k, "must not contain control characters"));
                    }
                }
                Some(ApiAuth { username, password })
            }
        };

        // [watchdog]
        let wd = root.sub("watchdog")?;
        wd.only(&[
            "mode",
            "device",
            "sysfs_dir",
            "guardian",
            "guardian_kill_budget",
        ])?;
        let mode = match wd.string("mode")?.as_deref() {
            None | Some("automatic") => WatchdogMode::Automatic,
            Some("off") => WatchdogMode::Off,
            Some("required") => WatchdogMode::Required,
            Some(other) => {
                return Err(wd.err(
                    "mode",
                    format!("expected \"off\", \"automatic\" or \"required\", found \"{other}\""),
                ));
            }
        };
        let device = wd
            .path("device")?
            .unwrap_or_else(|| PathBuf::from("/dev/watchdog"));
        let sysfs_dir = wd
            .path("sysfs_dir")?
            .unwrap_or_else(|| PathBuf::from("/sys/class/watchdog"));
        let guardian = match wd.string("guardian")?.as_deref() {
            None | Some("auto") => GuardianMode::Auto,
            Some("allow") => GuardianMode::Allow,
            Some("off") => GuardianMode::Off,
            Some(other) => {
                return Err(wd.err(
                    "guardian",
                    format!("expected \"auto\", \"allow\" or \"off\", found \"{other}\""),
                ));
            }
        };
        // DESIGN §2: the guardian only acts if the agent's own fence (from F - B,
        // F = min(H, s + ttl - (L_w + R + 1 s)) without a device) has not completed,
        // so it starts no earlier: G = F - B_g >= F - B.
        // With S6(c) that also gives L_w + R + B_g < ttl - M (a healthy leader's
        // next G arrives before the current one passes).
        let guardian_kill_budget = match wd.secs("guardian_kill_budget")? {
            Some(b) if b > timing.demote_budget => {
                return Err(wd.err(
                    "guardian_kill_budget",
                    format!(
                        "must be <= timing.demote_budget ({} s), found {} s: the guardian kills \
                         from G = F - guardian_kill_budget, which must not come before the \
                         agent's own fence starts at F - demote_budget (DESIGN §2)",
                        show_d(timing.demote_budget),
                        show_d(b)
                    ),
                ));
            }
            Some(b) => b,
            None => GUARDIAN_KILL_BUDGET.min(timing.demote_budget),
        };

        // [agent]
        let ag = root.sub("agent")?;
        ag.only(&["lock_memory", "realtime_priority"])?;
        let lock_memory = ag.boolean("lock_memory")?.unwrap_or(false);
        let realtime_priority = match ag.table.get("realtime_priority") {
            None => None,
            Some(Value::Integer(i)) if (1..=99).contains(i) => Some(*i as u8),
            Some(Value::Integer(i)) => {
                return Err(ag.err(
                    "realtime_priority",
                    format!("must be a SCHED_FIFO priority 1..=99, found {i}"),
                ));
            }
            Some(v) => return Err(ag.wrong("realtime_priority", "an integer 1..=99", v)),
        };

        // [ctl]
        let ctl = api_tls::parse_ctl(&root.sub("ctl")?, api_tls.as_ref())?;

        // [log]
        let lg = root.sub("log")?;
        lg.only(&["syslog", "syslog_socket", "syslog_udp", "syslog_facility"])?;
        let log = parse_log(&lg)?;
        // [hooks]
        let hooks = parse_hooks(&root.sub("hooks")?)?;

        let timing_err = |error| ConfigError::Timing {
            file: path.to_path_buf(),
            error,
        };
        validate_timing(&timing, ttl, None).map_err(timing_err)?;
        if mode == WatchdogMode::Required && watchdog_range(&timing, ttl).is_none() {
            return Err(timing_err(empty_range_error(&timing, ttl)));
        }
        let w = match mode {
            WatchdogMode::Off => None,
            _ => watchdog_range(&timing, ttl).map(|(_, hi)| hi),
        };
        let primary_min_remaining = match primary_min_remaining {
            Some(t) => {
                check_primary_min_remaining(t, &timing, ttl, w)
                    .map_err(|p| api.err("primary_min_remaining", p))?;
                t
            }
            // Not set: loop_wait + retry_timeout, capped at half the least time a
            // healthy leader has left (a derived default, not an adjusted value).
            None => (timing.loop_wait + timing.retry_timeout)
                .min(healthy_time_left(&timing, ttl, w).0 / 2),
        };

        Ok(Config {
            scope,
            name,
            namespace,
            etcd: EtcdConfig {
                endpoints,
                srv,
                tls: etcd_tls,
                auth: etcd_auth,
                resolve_timeout,
                resolve_interval,
            },
            timing,
            dynamic,
            postgresql: PgConfig {
                bin_dir,
                data_dir,
                listen,
                connect_address,
                socket_dir,
                user,
                superuser,
                superuser_password,
                replication_user,
                replication_password,
                rewind_user,
                rewind_password,
                parameters,
                move_aside_unusable,
                replication_ssl,
                rewind_ssl,
                pg_hba,
                hba_clientcert,
                hba_cert,
                create_replica,
                bootstrap,
            },
            api: ApiConfig {
                listen: api_listen,
                connect_url,
                primary_min_remaining,
                auth,
                tls: api_tls.clone(),
                read_auth,
            },
            watchdog: WatchdogConfig {
                mode,
                device,
                sysfs_dir,
                guardian,
                guardian_kill_budget,
            },
            nofailover,
            noloadbalance,
            nosync,
            clonefrom,
            custom_tags,
            log,
            hooks,
            agent: AgentConfig {
                lock_memory,
                realtime_priority,
            },
            ctl,
            certs: Vec::new(),
        })
    }

    /// The budget table `tenure check-config` prints: with a watchdog at the top of
    /// its allowed range (mode `off`, or an empty range: without one).
    pub fn budget(&self) -> Budget {
        let w = match self.watchdog.mode {
            WatchdogMode::Off => None,
            _ => watchdog_range(&self.timing, self.timing.ttl).map(|(_, hi)| hi),
        };
        budget(&self.timing, self.timing.ttl, w)
    }

    // -----------------------------------------------------------------------
    // Dynamic config (the etcd `config` key, DESIGN §3)
    // -----------------------------------------------------------------------

    /// The `config` key this node would seed at bootstrap (Patroni's names).
    pub fn dynamic_json(&self) -> String {
        let t = &self.timing;
        let mut v = serde_json::json!({
            "ttl": t.ttl,
            "loop_wait": secs_json(t.loop_wait),
            "retry_timeout": secs_json(t.retry_timeout),
            "maximum_lag_on_failover": self.dynamic.maximum_lag_on_failover,
            "primary_start_timeout": secs_json(self.dynamic.primary_start_timeout),
            "promote_delay": t.promote_delay.map(secs_json),
            "synchronous_mode": self.dynamic.synchronous_mode,
            "synchronous_mode_strict": self.dynamic.synchronous_mode_strict,
            "synchronous_node_count": self.dynamic.synchronous_node_count,
            "member_slots_ttl": secs_json(self.dynamic.member_slots_ttl),
            "maximum_lag_on_syncnode": self
                .dynamic
                .maximum_lag_on_syncnode
                .map_or(serde_json::json!(-1), |b| serde_json::json!(b)),
        });
        // Patroni stores `pause` only while paused (resuming deletes it).
        if self.dynamic.pause
            && let Some(m) = v.as_object_mut()
        {
            m.insert("pause".into(), serde_json::Value::Bool(true));
        }
        if let Some(m) = v.as_object_mut() {
            if !self.dynamic.slots.is_empty() {
                let slots: serde_json::Map<String, serde_json::Value> = self
                    .dynamic
                    .slots
                    .iter()
                    .map(|s| (s.clone(), serde_json::json!({"type": "physical"})))
                    .collect();
                m.insert("slots".into(), serde_json::Value::Object(slots));
            }
            if !self.dynamic.ignore_slots.is_empty() {
                let list: Vec<serde_json::Value> = self
                    .dynamic
                    .ignore_slots
                    .iter()
                    .map(|i| {
                        let mut o = serde_json::Map::new();
                        for (k, v) in [
                            ("name", &i.name),
                            ("type", &i.kind),
                            ("database", &i.database),
                            ("plugin", &i.plugin),
                        ] {
                            if let Some(v) = v {
                                o.insert(k.into(), serde_json::Value::String(v.clone()));
                            }
                        }
                        serde_json::Value::Object(o)
                    })
                    .collect();
                m.insert("ignore_slots".into(), serde_json::Value::Array(list));
            }
        }
        v.to_string()
    }

    /// Merge the `config` key with this node's own `safety_margin`, `demote_budget`
    /// and `iteration_budget`, validated with S6 like [`Config::load`] (no watchdog:
    /// (c); with watchdog mode `required` the whole-second `W` range must not be empty).
    /// A node running a watchdog must use [`Config::apply_dynamic_for`] with its
    /// read-back `W`. `Err` names what is wrong; the caller keeps its old values.
    pub fn apply_dynamic(&self, json: &str) -> Result<(TimingConfig, DynamicConfig), String> {
        let (t, d) = self.merge_dynamic(json)?;
        validate_timing(&t, t.ttl, None).map_err(|e| format!("config key refused: {e}"))?;
        if self.watchdog.mode == WatchdogMode::Required && watchdog_range(&t, t.ttl).is_none() {
            return Err(format!(
                "config key refused: {}",
                empty_range_error(&t, t.ttl)
            ));
        }
        Ok((t, d))
    }

    /// [`Config::apply_dynamic`] checked against this node's read-back watchdog
    /// timeout `W` (`None`: no watchdog).
    pub fn apply_dynamic_for(
        &self,
        json: &str,
        watchdog: Option<u32>,
    ) -> Result<(TimingConfig, DynamicConfig), String> {
        let (t, d) = self.merge_dynamic(json)?;
        validate_timing(&t, t.ttl, watchdog).map_err(|e| format!("config key refused: {e}"))?;
        Ok((t, d))
    }

    /// Parse defensively: another writer may have left anything there. Unknown
    /// keys are ignored (Patroni keeps `tags`, `postgresql.use_pg_rewind`, ...
    /// here; of `postgresql` only `parameters` is read);
    /// a known key with a bad value is an error; a missing key keeps this node's
    /// file value. `iteration_budget` left at its default (`loop_wait -
    /// retry_timeout` of the file) follows the new `loop_wait - retry_timeout`.
    pub fn merge_dynamic(&self, json: &str) -> Result<(TimingConfig, DynamicConfig), String> {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("config key is not JSON: {e}"))?;
        let obj = v
            .as_object()
            .ok_or_else(|| format!("config key is not a JSON object: {}", json_kind(&v)))?;
        let num = |k: &str| -> Result<Option<f64>, String> {
            match obj.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Number(n)) => n
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| format!("config key: {k}: not a usable number")),
                Some(other) => Err(format!(
                    "config key: {k}: expected a number, found {}",
                    json_kind(other)
                )),
            }
        };
        let secs = |k: &str| -> Result<Option<Duration>, String> {
            match num(k)? {
                None => Ok(None),
                Some(x) => secs_from_f64(x)
                    .map(Some)
                    .map_err(|p| format!("config key: {k}: {p}")),
            }
        };
        let own = &self.timing;
        let mut t = own.clone();
        if let Some(x) = num("ttl")? {
            if x.fract() != 0.0 || x <= 0.0 || x > f64::from(u32::MAX) {
                return Err(format!(
                    "config key: ttl: expected a whole number of seconds > 0, found {x}"
                ));
            }
            t.ttl = x as u32;
        }
        if let Some(d) = secs("loop_wait")? {
            t.loop_wait = d;
        }
        if let Some(d) = secs("retry_timeout")? {
            t.retry_timeout = d;
        }
        // promote_delay: absent keeps ours, null means none.
        match obj.get("promote_delay") {
            None => {}
            Some(serde_json::Value::Null) => t.promote_delay = None,
            Some(_) => t.promote_delay = secs("promote_delay")?,
        }
        if own.iteration_budget == own.loop_wait.saturating_sub(own.retry_timeout) {
            t.iteration_budget = t.loop_wait.saturating_sub(t.retry_timeout);
        }
        let mut d = self.dynamic.clone();
        if let Some(x) = num("maximum_lag_on_failover")? {
            if x.fract() != 0.0 || !(0.0..=9.0e18).contains(&x) {
                return Err(format!(
                    "config key: maximum_lag_on_failover: expected a whole number of bytes >= 0, found {x}"
                ));
            }
            d.maximum_lag_on_failover = x as u64;
        }
        if let Some(p) = secs("primary_start_timeout")? {
            d.primary_start_timeout = p;
        }
        // Slots: the key is the one source once it exists (Patroni's rule): absent
        // or `null` means none, whatever a node's file says, so every leader keeps
        // the same slots (review 2, finding 3). A file only seeds them.
        let none = serde_json::Value::Null;
        (d.slots, d.logical_slots) = parse_slots(obj.get("slots").unwrap_or(&none))
            .map_err(|p| format!("config key: {p}"))?;
        d.ignore_slots = parse_ignore_slots(obj.get("ignore_slots").unwrap_or(&none))
            .map_err(|p| format!("config key: {p}"))?;
        if let Some(x) = num("synchronous_node_count")? {
            d.synchronous_node_count = sync_node_count(x)
                .map_err(|p| format!("config key: synchronous_node_count: {p}"))?;
        }
        // These two follow the key alone once it exists, as `slots` does: absent
        // or `null` (a PATCH that removed it) is Patroni's default, whatever a
        // node's file says, so every node and every later leader agrees (review of
        // member_slots_ttl, M3). A node's file only seeds them.
        d.maximum_lag_on_syncnode = match obj.get("maximum_lag_on_syncnode") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => parse_syncnode_lag(v)
                .map_err(|p| format!("config key: maximum_lag_on_syncnode: {p}"))?,
        };
        // The key alone, as `slots`: absent or `null` means none.
        d.pg_parameters = cluster::parse_pg_parameters(obj.get("postgresql"))
            .map_err(|p| format!("config key: {p}"))?;
        d.member_slots_ttl = match obj.get("member_slots_ttl") {
            None | Some(serde_json::Value::Null) => MEMBER_SLOTS_TTL,
            Some(v) => {
                parse_retention(v).map_err(|p| format!("config key: member_slots_ttl: {p}"))?
            }
        };
        // Booleans; absent keeps ours. Patroni 3's `"quorum"` is not supported:
        // refuse it by name rather than run a weaker mode than the operator asked.
        for (k, slot) in [
            ("synchronous_mode", &mut d.synchronous_mode),
            ("synchronous_mode_strict", &mut d.synchronous_mode_strict),
        ] {
            match obj.get(k) {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::Bool(b)) => *slot = *b,
                Some(other) => {
                    return Err(format!(
                        "config key: {k}: expected true or false, found {} ({other}); \
                         tenure supports synchronous standbys (synchronous_node_count), \
                         not quorum commit",
                        json_kind(other)
                    ));
                }
            }
        }
        // `pause`: absent means not paused, whatever the file says (the file only
        // seeds the key; resuming deletes `pause`, as Patroni does).
        d.pause = match obj.get("pause") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(other) => {
                return Err(format!(
                    "config key: pause: expected true or false, found {} ({other})",
                    json_kind(other)
                ));
            }
        };
        cluster::check_sync_commit(&mut d.pg_parameters, d.synchronous_mode);
        Ok((t, d))
    }

    /// The timing the core uses.
    pub fn core_timing(t: &TimingConfig, d: &DynamicConfig) -> crate::core::model::Timing {
        crate::core::model::Timing {
            ttl: t.ttl,
            loop_wait: t.loop_wait,
            retry_timeout: t.retry_timeout,
            safety_margin: t.safety_margin,
            demote_budget: t.demote_budget,
            promote_delay: t.promote_delay,
            maximum_lag_on_failover: d.maximum_lag_on_failover,
            primary_start_timeout: d.primary_start_timeout,
            synchronous: d.sync_mode(),
            synchronous_node_count: d.synchronous_node_count,
            maximum_lag_on_syncnode: d.maximum_lag_on_syncnode,
        }
    }
}

/// The most synchronous standbys `synchronous_node_count` may ask for (far more
/// than a cluster has members; a larger number is a typo, refused by name).
pub const MAX_SYNC_NODES: u32 = 100;

/// `synchronous_node_count` from the file or the `config` key: a whole number from
/// 1 to [`MAX_SYNC_NODES`]; `Err` says what is wrong with `x`.
fn sync_node_count(x: f64) -> Result<u32, String> {
    if x.fract() != 0.0 || !(1.0..=f64::from(MAX_SYNC_NODES)).contains(&x) {
        return Err(format!(
            "expected a whole number of standbys from 1 to {MAX_SYNC_NODES}, found {x}"
        ));
    }
    Ok(x as u32)
}

/// One `pg_hba.conf` line: a single line that starts with a connection type.
fn check_hba_line(line: &str) -> Result<(), String> {
    if line.contains(['\n', '\r', '\0']) {
        return Err("must be a single line (no line break or NUL)".into());
    }
    let first = line.split_whitespace().next().unwrap_or("");
    const TYPES: &[&str] = &[
        "local",
        "host",
        "hostssl",
        "hostnossl",
        "hostgssenc",
        "hostnogssenc",
    ];
    if !TYPES.contains(&first) {
        return Err(format!(
            "{line:?}: expected a line starting with local, host, hostssl, hostnossl, \
             hostgssenc or hostnogssenc"
        ));
    }
    Ok(())
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Whole seconds as a JSON integer (what Patroni writes), fractions as a float.
fn secs_json(d: Duration) -> serde_json::Value {
    if d.subsec_nanos() == 0 {
        serde_json::Value::from(d.as_secs())
    } else {
        serde_json::Value::from(d.as_secs_f64())
    }
}

mod api_tls;
mod bootstrap;
pub mod cluster;
mod endpoint;
mod pgssl;
mod replica;
mod secrets;
pub use api_tls::{ApiTls, CtlConfig, ReadAuth, VerifyClient, check_api_tls_files};
pub use bootstrap::{BootstrapConfig, DEFAULT_INITDB};
pub(crate) use endpoint::check_name as check_host_name;
pub use endpoint::{Endpoint, Host};
pub use pgssl::{PgSsl, check_files as check_pg_tls_files, server_ssl_on};
pub use replica::{CommandMethod, CreateReplica, ReplicaMethod};
pub use secrets::{
    CRED_API, CRED_ETCD, CRED_PG_REPLICATION, CRED_PG_REWIND, CRED_PG_SUPERUSER, EtcdAuth, EtcdTls,
    check_tls_files, readable_secret_warning,
};

#[cfg(test)]
mod tests;
