//! A whole test cluster (DESIGN §6): three etcd members and N tenure agents, each
//! agent managing its own PostgreSQL 15 on loopback (or, with `opts.netns`, each
//! node and each etcd member in its own network namespace; with `opts.etcd_relays`,
//! each agent reaches etcd only through its own delaying relays), data on tmpfs.
//!
//! Owns: the scratch directory, every config file it writes, the agents it spawns
//! (and, through them, their PostgreSQL processes, found by their working
//! directory or their freezer cgroup), one freezer cgroup per node, the etcd
//! members, the etcd relays. Must never: signal a process it did not start (an agent it spawned, or
//! a process whose cwd is one of its own data directories, or a member of its own
//! cgroup), or send traffic outside 127.0.0.0/8 and, with `ClusterOptions::netns`,
//! the namespaces its `NetTopology` created (see `testbed::netns`).
//!
//! `tenure demo` runs this cluster on loopback. Namespaces, relays, watchdog
//! stand-ins and notify sockets are test-only: built with the `testbed` feature
//! (tests, examples and benches), absent from the shipped binary (see `testbed`).

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::etcd::{EtcdCluster, EtcdServerTls, http_get, http_request};
use super::etcdkv::{self, Kv};
#[cfg(feature = "testbed")]
use super::netns::NetTopology;
use super::probe::{PROBE_TABLE, ProbeTarget, WriteProbe};
#[cfg(feature = "testbed")]
use super::relay::Relay;
#[cfg(feature = "testbed")]
use super::watchdog::{HostKill, StandinOptions, WatchdogStandin};
use super::{free_port, scratch_dir, wait_for};

/// Where cgroup v1's freezer is mounted on this machine (DESIGN §6).
const FREEZER_ROOT: &str = "/sys/fs/cgroup/freezer";
/// The test table `write_row`/`count_rows` use.
pub const ROW_TABLE: &str = "tenure_rows";
/// Every etcd read the bed makes is bounded by this.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);
/// Every SQL call the bed makes is bounded by this (connect + query).
const SQL_TIMEOUT: Duration = Duration::from_secs(5);

/// How to build the cluster. `ClusterOptions::new(binary)` gives DESIGN §6's
/// values (ttl 7, loop 0.5, retry 0.25, margin 0.5, budget 1.0).
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub nodes: usize,
    pub scope: String,
    pub ttl: u32,
    pub loop_wait: Duration,
    pub retry_timeout: Duration,
    pub safety_margin: Duration,
    pub demote_budget: Duration,
    pub maximum_lag_on_failover: u64,
    /// Whole seconds.
    pub primary_start_timeout: u32,
    /// The agent binary; run as `<binary> run --config FILE`.
    pub binary: PathBuf,
    pub pg_bin_dir: PathBuf,
    /// Scratch directory tag (`/dev/shm/tenure-<tag>-...`).
    pub tag: String,
    /// Start every agent in `start()` (else call `start_agent(i)` yourself).
    pub start_agents: bool,
    /// Put each agent in its own freezer cgroup when the freezer exists.
    pub use_freezer: bool,
    /// `TENURE_LOG` for the agents (`None`: inherit ours).
    pub log_level: Option<String>,
    /// Run every node and every etcd member in its own network namespace (see
    /// `testbed::netns`), so a test can cut them apart; `false`: loopback.
    #[cfg(feature = "testbed")]
    pub netns: bool,
    /// Per-node watchdog settings, by node index; a node without an entry gets
    /// [`NodeWatchdog::default`] (mode off, no stand-in, no notify socket).
    pub watchdog: Vec<NodeWatchdog>,
    /// `[dynamic] synchronous_mode` / `synchronous_mode_strict` (seeded into the
    /// `config` key by the bootstrapping node).
    pub synchronous_mode: bool,
    pub synchronous_mode_strict: bool,
    /// `[dynamic] synchronous_node_count` (1 unless a test asks for more).
    pub synchronous_node_count: u32,
    /// Give every node its own delaying relays (`testbed::relay`), one per etcd
    /// member, and only their URLs as `[etcd] endpoints`, so a test can slow down
    /// or hold one node's etcd traffic (`TestCluster::relays`). Loopback only.
    #[cfg(feature = "testbed")]
    pub etcd_relays: bool,
    /// `[api] primary_min_remaining` (`None`: the agent's default).
    pub primary_min_remaining: Option<Duration>,
    /// `[api] username`/`password` (`API_USER` and a generated password) on every
    /// node; `false`: none, so every write endpoint answers 403.
    pub api_auth: bool,
    /// etcd with server TLS and client-certificate auth (issue 12): the agents get
    /// the `https://` endpoints, the bed keeps a plain listener of its own.
    pub etcd_tls: Option<EtcdServerTls>,
    /// Extra `[etcd]` lines per node index (`cacert`, `cert`, `username`, ...).
    pub etcd_extra: Vec<String>,
    /// TOML appended to every node's file (`[log]`, `[hooks]`, ...), with `{name}`
    /// replaced by the node's name and `{dir}` by its directory.
    pub extra_config: String,
    /// Lines added to a table the bed already writes, which TOML cannot reopen
    /// later: `(header, lines)`, e.g. `("[postgresql.parameters]", "ssl = \"on\"")`,
    /// inserted right after that header, `{name}` and `{dir}` replaced as above.
    pub section_extra: Vec<(String, String)>,
    /// Run each agent as systemd would with its stderr on the journal:
    /// `JOURNAL_STREAM` = the device and inode of its log file (issue 10).
    pub journal_stream: bool,
    /// Write the replication and rewind roles' passwords (default). `false` for
    /// `[postgresql] hba_method = "cert"`, which lets them be left out.
    pub role_passwords: bool,
    /// The roles' and the API's passwords (`None`: generated): a cluster restored
    /// from another bed's backup keeps that bed's roles.
    pub passwords: Option<Passwords>,
}

/// The API user the bed configures (`[api] username`).
pub const API_USER: &str = "admin";

/// One node's watchdog settings in the bed (DESIGN §6 "Watchdog:", "systemd notify").
#[derive(Clone, Debug, Default)]
pub struct NodeWatchdog {
    /// `[watchdog] mode`: "off", "automatic" or "required" (`None`: "off").
    pub mode: Option<String>,
    /// Start a stand-in device at `<node dir>/watchdog` (before the agent), which
    /// "resets the host" through the node's freezer cgroup.
    #[cfg(feature = "testbed")]
    pub standin: Option<StandinSettings>,
    /// A test-owned `NOTIFY_SOCKET` at `<node dir>/notify.sock`.
    #[cfg(feature = "testbed")]
    pub notify: bool,
    /// `WATCHDOG_USEC` for the agent (only with `notify`).
    #[cfg(feature = "testbed")]
    pub watchdog_usec: Option<u64>,
    /// `[watchdog] guardian` ("auto", "allow", "off"; `None`: the default, "auto").
    /// Only meaningful with a mode; the guardian runs where no stand-in and no
    /// notify socket exist (DESIGN §2 "The guardian").
    pub guardian: Option<String>,
    /// `WATCHDOG_PID` = the agent's own pid, as systemd sets it (only with
    /// `notify`; a shell exports its `$$` and execs the agent, keeping the pid).
    #[cfg(feature = "testbed")]
    pub watchdog_pid: bool,
}

/// The stand-in's options a test chooses (the rest follow the node).
#[cfg(feature = "testbed")]
#[derive(Clone, Debug)]
pub struct StandinSettings {
    /// `nowayout` (also written to `<node dir>/sysfs/watchdog0/nowayout`, where the
    /// agent reads it).
    pub nowayout: bool,
    pub max_timeout_s: u32,
    pub magic_close: bool,
    /// Start it already fired: every open fails with `ENODEV` until
    /// `WatchdogStandin::revive` (a host whose device is dead).
    pub dead: bool,
}

#[cfg(feature = "testbed")]
impl Default for StandinSettings {
    fn default() -> StandinSettings {
        StandinSettings {
            nowayout: false,
            max_timeout_s: 600,
            magic_close: true,
            dead: false,
        }
    }
}

impl NodeWatchdog {
    /// Mode `mode` with no device and no notify socket: the guardian is the fence
    /// (with `guardian` "auto" or "allow" as the mode needs), or none ("off").
    // Without the `testbed` feature these two are all the fields there are.
    #[cfg_attr(not(feature = "testbed"), allow(clippy::needless_update))]
    pub fn guardian(mode: &str, guardian: &str) -> NodeWatchdog {
        NodeWatchdog {
            mode: Some(mode.into()),
            guardian: Some(guardian.into()),
            ..NodeWatchdog::default()
        }
    }

    /// Mode `mode` with a default stand-in.
    #[cfg(feature = "testbed")]
    pub fn with_standin(mode: &str) -> NodeWatchdog {
        NodeWatchdog {
            mode: Some(mode.into()),
            standin: Some(StandinSettings::default()),
            ..NodeWatchdog::default()
        }
    }
}

/// Messages a node's agent sent to its notify socket: `(CLOCK_BOOTTIME, text)`.
#[cfg(feature = "testbed")]
type NotifyLog = std::sync::Arc<std::sync::Mutex<Vec<(crate::core::time::Instant, String)>>>;

impl ClusterOptions {
    pub fn new(binary: impl Into<PathBuf>) -> ClusterOptions {
        ClusterOptions {
            nodes: 3,
            scope: "demo".into(),
            ttl: 7,
            loop_wait: Duration::from_millis(500),
            retry_timeout: Duration::from_millis(250),
            safety_margin: Duration::from_millis(500),
            demote_budget: Duration::from_secs(1),
            maximum_lag_on_failover: 1_048_576,
            primary_start_timeout: 30,
            binary: binary.into(),
            pg_bin_dir: PathBuf::from("/usr/lib/postgresql/15/bin"),
            tag: "bed".into(),
            start_agents: true,
            use_freezer: true,
            log_level: None,
            #[cfg(feature = "testbed")]
            netns: false,
            watchdog: Vec::new(),
            synchronous_mode: false,
            synchronous_mode_strict: false,
            synchronous_node_count: 1,
            #[cfg(feature = "testbed")]
            etcd_relays: false,
            primary_min_remaining: None,
            api_auth: true,
            etcd_tls: None,
            etcd_extra: Vec::new(),
            extra_config: String::new(),
            section_extra: Vec::new(),
            journal_stream: false,
            role_passwords: true,
            passwords: None,
        }
    }
}

/// Passwords the bed generates per cluster (alphanumeric, so TOML-safe).
#[derive(Clone, Debug)]
pub struct Passwords {
    pub superuser: String,
    pub replication: String,
    pub rewind: String,
    /// `[api] password` (with [`API_USER`]).
    pub api: String,
}

/// One node's fixed identity: paths and ports stay the same across agent restarts.
#[derive(Debug)]
pub struct NodeSpec {
    pub name: String,
    pub dir: PathBuf,
    pub data_dir: PathBuf,
    pub socket_dir: PathBuf,
    pub config_path: PathBuf,
    pub log_path: PathBuf,
    /// The address PostgreSQL and the API listen on (127.0.0.1 on loopback).
    pub addr: std::net::Ipv4Addr,
    /// The node's network namespace (`None`: ours).
    pub netns: Option<String>,
    pub pg_port: u16,
    pub api_port: u16,
}

struct Node {
    spec: NodeSpec,
    agent: Option<Child>,
    /// This node's freezer cgroup directory, once created.
    cgroup: Option<PathBuf>,
    #[cfg(feature = "testbed")]
    wd: NodeWatchdog,
    #[cfg(feature = "testbed")]
    standin: Option<WatchdogStandin>,
    #[cfg(feature = "testbed")]
    notify: Option<NotifyReader>,
    /// With `opts.etcd_relays`: one relay per etcd member, the agent's only endpoints.
    #[cfg(feature = "testbed")]
    relays: Vec<Relay>,
}

/// The test-owned end of a node's `NOTIFY_SOCKET` and the thread reading it.
#[cfg(feature = "testbed")]
struct NotifyReader {
    path: PathBuf,
    log: NotifyLog,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(feature = "testbed")]
impl NotifyReader {
    fn start(path: &Path) -> Result<NotifyReader, String> {
        let _ = fs::remove_file(path);
        let sock = std::os::unix::net::UnixDatagram::bind(path)
            .map_err(|e| format!("bind notify socket {}: {e}", path.display()))?;
        // Bounded reads, so the thread sees `stop` within 100 ms.
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| format!("notify socket timeout: {e}"))?;
        let log: NotifyLog = Default::default();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (log2, stop2) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(n) = sock.recv(&mut buf) {
                    let at = crate::clock::now();
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if let Ok(mut l) = log2.lock() {
                        // One datagram may carry several lines (KEY=VALUE each).
                        for line in text.lines().filter(|l| !l.is_empty()) {
                            l.push((at, line.to_string()));
                        }
                    }
                }
            }
        });
        Ok(NotifyReader {
            path: path.to_path_buf(),
            log,
            stop,
        })
    }
}

#[cfg(feature = "testbed")]
impl Drop for NotifyReader {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = fs::remove_file(&self.path);
    }
}

pub struct TestCluster {
    pub opts: ClusterOptions,
    dir: PathBuf,
    etcd: Option<EtcdCluster>,
    endpoints: Vec<String>,
    nodes: Vec<Node>,
    pub passwords: Passwords,
    /// Set by `leave_running`: Drop then stops nothing and removes nothing.
    leave_running: bool,
    /// With `opts.netns`: hosts `0..nodes` are the nodes, then the etcd members.
    /// Declared last: dropped after `Drop::drop` stopped every process.
    #[cfg(feature = "testbed")]
    net: Option<NetTopology>,
}

/// The TOML config file the agent reads (the format the agent work defines).
pub fn agent_config_toml(
    opts: &ClusterOptions,
    spec: &NodeSpec,
    endpoints: &[String],
    pw: &Passwords,
) -> String {
    let eps = endpoints
        .iter()
        .map(|e| format!("{e:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    // `{:?}` on f64 always prints a decimal point (1.0, 0.5), so TOML reads a float.
    let toml = format!(
        r#"scope = "{scope}"
name = "{name}"

[etcd]
endpoints = [{eps}]
{etcd_extra}

[timing]
ttl = {ttl}
loop_wait = {loop_wait:?}
retry_timeout = {retry:?}
safety_margin = {margin:?}
demote_budget = {budget:?}

[dynamic]
maximum_lag_on_failover = {lag}
primary_start_timeout = {pst}
synchronous_mode = {sync}
synchronous_mode_strict = {strict}
synchronous_node_count = {sync_count}

[postgresql]
bin_dir = "{bin}"
data_dir = "{data}"
listen = "{addr}:{pg_port}"
socket_dir = "{socket}"
user = "postgres"
{hba}

# Dynamic shared memory in the data directory (pg_dynshmem), not /dev/shm: a
# postmaster the tests SIGKILL leaves its segments behind, and the scratch
# directory's removal then takes them along.
[postgresql.parameters]
dynamic_shared_memory_type = "mmap"

[postgresql.authentication.superuser]
username = "postgres"
password = "{su}"

[postgresql.authentication.replication]
username = "replicator"
{repl}
[postgresql.authentication.rewind]
username = "rewind_user"
{rewind}

[api]
listen = "{addr}:{api_port}"
{api_extra}

{watchdog}
{extra}"#,
        watchdog = watchdog_section(&node_watchdog(opts, spec), spec),
        extra = opts
            .extra_config
            .replace("{name}", &spec.name)
            .replace("{dir}", &spec.dir.display().to_string()),
        hba = observer_hba(spec),
        etcd_extra = node_index(spec)
            .and_then(|i| opts.etcd_extra.get(i))
            .cloned()
            .unwrap_or_default(),
        api_extra = opts
            .primary_min_remaining
            .map(|d| format!("primary_min_remaining = {:?}\n", d.as_secs_f64()))
            .unwrap_or_default()
            + &if opts.api_auth {
                format!("username = \"{API_USER}\"\npassword = \"{}\"\n", pw.api)
            } else {
                String::new()
            },
        scope = opts.scope,
        name = spec.name,
        ttl = opts.ttl,
        loop_wait = opts.loop_wait.as_secs_f64(),
        retry = opts.retry_timeout.as_secs_f64(),
        margin = opts.safety_margin.as_secs_f64(),
        budget = opts.demote_budget.as_secs_f64(),
        lag = opts.maximum_lag_on_failover,
        pst = opts.primary_start_timeout,
        sync = opts.synchronous_mode,
        strict = opts.synchronous_mode_strict,
        sync_count = opts.synchronous_node_count,
        bin = opts.pg_bin_dir.display(),
        data = spec.data_dir.display(),
        pg_port = spec.pg_port,
        addr = spec.addr,
        socket = spec.socket_dir.display(),
        su = pw.superuser,
        repl = role_password(opts, &pw.replication),
        rewind = role_password(opts, &pw.rewind),
        api_port = spec.api_port,
    );
    with_section_extra(toml, opts, spec)
}

/// A connecting role's `password = "..."` line, unless `opts.role_passwords` is off.
fn role_password(opts: &ClusterOptions, pw: &str) -> String {
    if opts.role_passwords {
        format!("password = \"{pw}\"\n")
    } else {
        String::new()
    }
}

/// `opts.section_extra` inserted after each named header of `toml`.
fn with_section_extra(mut toml: String, opts: &ClusterOptions, spec: &NodeSpec) -> String {
    for (header, lines) in &opts.section_extra {
        let lines = lines
            .replace("{name}", &spec.name)
            .replace("{dir}", &spec.dir.display().to_string());
        let at = format!("\n{header}\n");
        if let Some(i) = toml.find(&at) {
            toml.insert_str(i + at.len(), &format!("{}\n", lines.trim_end()));
        }
    }
    toml
}

/// `pg_hba.conf` admits members' addresses only (DESIGN §3a). On loopback the
/// test process shares 127.0.0.1 with the members; in namespaces it is the
/// observer (`.254` of the node's /24, see `netns.rs`) and needs its own line.
fn observer_hba(spec: &NodeSpec) -> String {
    if spec.netns.is_none() {
        return String::new();
    }
    let [a, b, c, _] = spec.addr.octets();
    format!("pg_hba = [\"host all all {a}.{b}.{c}.254/32 scram-sha-256\"]")
}

/// The bed names node `i` `pg<i+1>`: its index.
fn node_index(spec: &NodeSpec) -> Option<usize> {
    spec.name
        .strip_prefix("pg")
        .and_then(|n| n.parse::<usize>().ok())
        .map(|n| n.wrapping_sub(1))
}

/// The bed names node `i` `pg<i+1>`: its watchdog settings.
fn node_watchdog(opts: &ClusterOptions, spec: &NodeSpec) -> NodeWatchdog {
    spec.name
        .strip_prefix("pg")
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| opts.watchdog.get(n.wrapping_sub(1)))
        .cloned()
        .unwrap_or_default()
}

/// `[watchdog]`: mode off by default; with settings, the stand-in's path and the
/// directory its `nowayout` file is in.
fn watchdog_section(wd: &NodeWatchdog, spec: &NodeSpec) -> String {
    match &wd.mode {
        None => "[watchdog]\nmode = \"off\"\n".into(),
        Some(mode) => format!(
            "[watchdog]\nmode = \"{mode}\"\ndevice = \"{}\"\nsysfs_dir = \"{}\"\n{}",
            spec.dir.join("watchdog").display(),
            spec.dir.join("sysfs").display(),
            wd.guardian
                .as_ref()
                .map(|g| format!("guardian = \"{g}\"\n"))
                .unwrap_or_default()
        ),
    }
}

impl TestCluster {
    /// Scratch dir, 3 etcd members, per node a config file and directories owned
    /// by `postgres`, and (with `opts.start_agents`) every agent started.
    pub fn start(opts: ClusterOptions) -> Result<TestCluster, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err(
                "the test bed must run as root (the agent runs PostgreSQL as `postgres`)".into(),
            );
        }
        if !opts.binary.is_file() {
            return Err(format!("agent binary {} not found", opts.binary.display()));
        }
        let postgres_bin = opts.pg_bin_dir.join("postgres");
        if !postgres_bin.is_file() {
            return Err(format!(
                "{} not found: install PostgreSQL 15 (run `make deps`)",
                postgres_bin.display()
            ));
        }
        let pg_user = nix::unistd::User::from_name("postgres")
            .map_err(|e| format!("look up user postgres: {e}"))?
            .ok_or("no `postgres` OS user: install PostgreSQL 15 (run `make deps`)")?;
        let dir = scratch_dir(&opts.tag).map_err(|e| format!("create scratch dir: {e}"))?;
        let stamp = format!("{}{}", std::process::id(), dir.display().to_string().len());
        let salt = nanos_now();
        let passwords = opts.passwords.clone().unwrap_or_else(|| Passwords {
            superuser: format!("su{stamp}x{salt}"),
            replication: format!("repl{stamp}x{salt}"),
            rewind: format!("rw{stamp}x{salt}"),
            api: format!("api{stamp}x{salt}"),
        });
        // Build the struct first so Drop cleans up whatever a later step fails on.
        let mut c = TestCluster {
            opts,
            dir: dir.clone(),
            etcd: None,
            endpoints: Vec::new(),
            nodes: Vec::new(),
            passwords,
            leave_running: false,
            #[cfg(feature = "testbed")]
            net: None,
        };
        let etcd = c.start_etcd()?;
        c.endpoints = etcd.endpoints();
        c.etcd = Some(etcd);
        #[cfg(feature = "testbed")]
        if c.opts.etcd_relays && c.opts.netns {
            return Err(
                "etcd_relays listen on 127.0.0.1 in the test's namespace: not with netns".into(),
            );
        }
        for i in 0..c.opts.nodes {
            let name = format!("pg{}", i + 1);
            let ndir = dir.join(&name);
            let spec = NodeSpec {
                data_dir: ndir.join("data"),
                socket_dir: ndir.join("socket"),
                config_path: dir.join(format!("{name}.toml")),
                log_path: dir.join(format!("{name}.agent.log")),
                dir: ndir,
                name,
                addr: c.node_addr(i),
                netns: c.node_netns(i),
                pg_port: free_port(),
                api_port: free_port(),
            };
            for d in [&spec.dir, &spec.socket_dir] {
                fs::create_dir_all(d).map_err(|e| format!("create {}: {e}", d.display()))?;
                std::os::unix::fs::chown(d, Some(pg_user.uid.as_raw()), Some(pg_user.gid.as_raw()))
                    .map_err(|e| format!("chown postgres {}: {e}", d.display()))?;
                fs::set_permissions(d, fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("chmod {}: {e}", d.display()))?;
            }
            #[cfg(feature = "testbed")]
            let relays = if c.opts.etcd_relays {
                c.endpoints
                    .iter()
                    .map(|e| Relay::start(e))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("etcd relays of {}: {e}", spec.name))?
            } else {
                Vec::new()
            };
            #[cfg(feature = "testbed")]
            let endpoints = if relays.is_empty() {
                c.endpoints.clone()
            } else {
                relays.iter().map(Relay::url).collect()
            };
            #[cfg(not(feature = "testbed"))]
            let endpoints = c.endpoints.clone();
            let endpoints = match (&c.opts.etcd_tls, &c.etcd) {
                (Some(_), Some(e)) => e.tls_endpoints(),
                _ => endpoints,
            };
            let toml = agent_config_toml(&c.opts, &spec, &endpoints, &c.passwords);
            write_file(&spec.config_path, &toml, 0o600)?;
            #[cfg(feature = "testbed")]
            let wd = node_watchdog(&c.opts, &spec);
            c.nodes.push(Node {
                spec,
                agent: None,
                cgroup: None,
                #[cfg(feature = "testbed")]
                wd,
                #[cfg(feature = "testbed")]
                standin: None,
                #[cfg(feature = "testbed")]
                notify: None,
                #[cfg(feature = "testbed")]
                relays,
            });
        }
        if c.opts.start_agents {
            for i in 0..c.nodes.len() {
                c.start_agent(i)?;
            }
        }
        Ok(c)
    }

    /// The etcd members: with `opts.netns` each in a host namespace of its own
    /// (the topology is made here: the nodes' hosts first), else on loopback.
    fn start_etcd(&mut self) -> Result<EtcdCluster, String> {
        #[cfg(feature = "testbed")]
        if self.opts.netns {
            let nodes = self.opts.nodes;
            let net = NetTopology::create(nodes + 3)?;
            let placement: Vec<_> = (nodes..nodes + 3)
                .map(|h| (net.addr(h), Some(net.ns(h).to_string())))
                .collect();
            self.net = Some(net);
            return EtcdCluster::start_secure(&self.dir, &placement, self.opts.etcd_tls.clone());
        }
        EtcdCluster::start_secure(
            &self.dir,
            &vec![(std::net::Ipv4Addr::LOCALHOST, None); 3],
            self.opts.etcd_tls.clone(),
        )
    }

    /// Node `i`'s address: its host's in the namespace topology, else 127.0.0.1.
    #[cfg_attr(not(feature = "testbed"), allow(unused_variables))]
    fn node_addr(&self, i: usize) -> std::net::Ipv4Addr {
        #[cfg(feature = "testbed")]
        if let Some(n) = &self.net {
            return n.addr(i);
        }
        std::net::Ipv4Addr::LOCALHOST
    }

    /// Node `i`'s network namespace (`None`: ours).
    #[cfg_attr(not(feature = "testbed"), allow(unused_variables))]
    fn node_netns(&self, i: usize) -> Option<String> {
        #[cfg(feature = "testbed")]
        if let Some(n) = &self.net {
            return Some(n.ns(i).to_string());
        }
        None
    }

    // ----- identity -------------------------------------------------------------

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.clone()
    }
    pub fn etcd(&mut self) -> Option<&mut EtcdCluster> {
        self.etcd.as_mut()
    }
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
    pub fn spec(&self, i: usize) -> &NodeSpec {
        &self.nodes[i].spec
    }
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].spec.name
    }
    /// The node index of member `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.spec.name == name)
    }
    pub fn config_path(&self, i: usize) -> &Path {
        &self.nodes[i].spec.config_path
    }
    pub fn data_dir(&self, i: usize) -> &Path {
        &self.nodes[i].spec.data_dir
    }
    pub fn log_path(&self, i: usize) -> &Path {
        &self.nodes[i].spec.log_path
    }
    pub fn pg_port(&self, i: usize) -> u16 {
        self.nodes[i].spec.pg_port
    }
    pub fn api_port(&self, i: usize) -> u16 {
        self.nodes[i].spec.api_port
    }
    /// Node `i`'s address (127.0.0.1 unless `opts.netns`).
    pub fn addr(&self, i: usize) -> std::net::Ipv4Addr {
        self.nodes[i].spec.addr
    }
    /// `/service/<scope>/`
    pub fn prefix(&self) -> String {
        format!("/service/{}/", self.opts.scope)
    }
}

/// Partitions and etcd relays: test-only (the `testbed` feature).
#[cfg(feature = "testbed")]
impl TestCluster {
    // ----- partitions (with `opts.netns`) ----------------------------------------

    /// The namespace topology: hosts `0..node_count()` are the nodes, then the
    /// etcd members (see `etcd_host`). `None` on loopback.
    pub fn net(&self) -> Option<&NetTopology> {
        self.net.as_ref()
    }

    fn need_net(&self) -> Result<&NetTopology, String> {
        self.net
            .as_ref()
            .ok_or_else(|| "this cluster runs on loopback: set ClusterOptions::netns".into())
    }

    /// The topology's host index of etcd member `j`.
    pub fn etcd_host(&self, j: usize) -> usize {
        self.nodes.len() + j
    }

    /// Cut node `i` off from every other node and every etcd member.
    pub fn cut(&self, i: usize) -> Result<(), String> {
        self.need_net()?.cut(i)
    }

    /// Cut node `i` off from the etcd members only (other nodes still reach it).
    pub fn cut_from_etcd(&self, i: usize) -> Result<(), String> {
        let net = self.need_net()?;
        (0..3).try_for_each(|j| net.cut_between(i, self.etcd_host(j)))
    }

    /// Drop traffic between nodes (or hosts) `a` and `b`.
    pub fn cut_between(&self, a: usize, b: usize) -> Result<(), String> {
        self.need_net()?.cut_between(a, b)
    }

    /// Remove every cut made in node `i`'s namespace.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        self.need_net()?.heal(i)
    }

    // ----- etcd relays (with `opts.etcd_relays`) ----------------------------------

    /// Node `i`'s etcd relays, one per etcd member, in member order (empty without
    /// `opts.etcd_relays`). They are the agent's only endpoints.
    pub fn relays(&self, i: usize) -> &[Relay] {
        &self.nodes[i].relays
    }

    /// Delay node `i`'s etcd traffic by `d` each way on every relay (`ZERO` lifts
    /// it; chunks already queued then go out at once, in order).
    pub fn set_etcd_delay(&self, i: usize, d: Duration) -> Result<(), String> {
        let relays = self.need_relays(i)?;
        relays.iter().for_each(|r| r.set_delay(d));
        Ok(())
    }

    /// Forward none of node `i`'s etcd traffic until `release_etcd(i)`.
    pub fn hold_etcd(&self, i: usize) -> Result<(), String> {
        self.need_relays(i)?.iter().for_each(Relay::hold);
        Ok(())
    }

    /// Undo `hold_etcd(i)`.
    pub fn release_etcd(&self, i: usize) -> Result<(), String> {
        self.need_relays(i)?.iter().for_each(Relay::release);
        Ok(())
    }

    fn need_relays(&self, i: usize) -> Result<&[Relay], String> {
        let r = &self.nodes[i].relays;
        if r.is_empty() {
            return Err(format!(
                "{} has no etcd relays: set ClusterOptions::etcd_relays",
                self.name(i)
            ));
        }
        Ok(r)
    }
}

impl TestCluster {
    // ----- processes ------------------------------------------------------------

    /// Node `i`'s freezer cgroup directory, once its agent was started in one.
    pub fn cgroup(&self, i: usize) -> Option<&Path> {
        self.nodes[i].cgroup.as_deref()
    }

    /// Pid of node `i`'s agent, if the bed started it and it has not been reaped.
    pub fn agent_pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].agent.as_ref().map(|c| c.id())
    }

    /// Has node `i`'s agent exited? (reaps it; `None` while it runs or if none).
    pub fn agent_exited(&mut self, i: usize) -> Option<ExitStatus> {
        let n = &mut self.nodes[i];
        let st = n.agent.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if st.is_some() {
            n.agent = None;
        }
        st
    }

    /// Fails naming every agent that exited on its own (with its status and log
    /// tail); agents the bed stopped are not counted.
    pub fn check_agents(&mut self) -> Result<(), String> {
        let dead: Vec<String> = (0..self.nodes.len())
            .filter_map(|i| {
                self.agent_exited(i)
                    .map(|st| format!("{} ({st})", self.name(i)))
            })
            .collect();
        if dead.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "agent exited: {}{}",
                dead.join(", "),
                self.logs_tail(20)
            ))
        }
    }

    /// Start node `i`'s agent (again, after a kill): `<binary> run --config FILE`,
    /// stdout and stderr appended to `pgN.agent.log`, inside the node's freezer
    /// cgroup when there is one (its children inherit it).
    pub fn start_agent(&mut self, i: usize) -> Result<(), String> {
        if let Some(st) = self.agent_exited(i) {
            log_note(&format!("agent of {} had exited: {st}", self.name(i)));
        }
        if self.nodes[i].agent.is_some() {
            return Err(format!("agent of {} is already running", self.name(i)));
        }
        let cgroup = self.ensure_cgroup(i)?;
        #[cfg(feature = "testbed")]
        self.ensure_watchdog_parts(i, cgroup.as_deref())?;
        let n = &mut self.nodes[i];
        let log = fs::File::options()
            .create(true)
            .append(true)
            .open(&n.spec.log_path)
            .map_err(|e| format!("open {}: {e}", n.spec.log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| format!("dup agent log: {e}"))?;
        let mut cmd = match &cgroup {
            // A shell joins the cgroup, then execs the agent: the agent's pid is the
            // shell's, and it is in the cgroup before it runs a single instruction,
            // with no `unsafe` pre_exec hook.
            Some(cg) => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c")
                    .arg("echo $$ > \"$1\" || exit 121; shift; exec \"$@\"")
                    .arg("tenure-bed")
                    .arg(cg.join("cgroup.procs"));
                // Join the cgroup before `ip netns exec`: it remounts /sys in a new
                // mount namespace, hiding the freezer hierarchy.
                if let Some(ns) = &n.spec.netns {
                    c.args(["ip", "netns", "exec", ns.as_str()]);
                }
                c.arg(&self.opts.binary);
                c
            }
            None => match &n.spec.netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns.as_str()])
                        .arg(&self.opts.binary);
                    c
                }
                None => Command::new(&self.opts.binary),
            },
        };
        #[cfg(feature = "testbed")]
        if n.notify.is_some() && n.wd.watchdog_pid {
            // systemd names the main pid; every step above execs, so the shell's
            // `$$` is the agent's pid.
            let mut c = Command::new("/bin/sh");
            c.arg("-c")
                .arg("WATCHDOG_PID=$$; export WATCHDOG_PID; exec \"$@\"")
                .arg("tenure-bed")
                .arg(cmd.get_program())
                .args(cmd.get_args());
            cmd = c;
        }
        cmd.arg("run")
            .arg("--config")
            .arg(&n.spec.config_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some(level) = &self.opts.log_level {
            cmd.env("TENURE_LOG", level);
        }
        // Never the test runner's own (a run under systemd): only what the test asks.
        cmd.env_remove("JOURNAL_STREAM");
        if self.opts.journal_stream {
            let st = nix::sys::stat::stat(&n.spec.log_path)
                .map_err(|e| format!("stat {}: {e}", n.spec.log_path.display()))?;
            cmd.env("JOURNAL_STREAM", format!("{}:{}", st.st_dev, st.st_ino));
        }
        // Nothing of ours leaks in (a test or a demo run under systemd would
        // otherwise hand every agent its watchdog); only a node with a test-owned
        // notify socket gets one, below.
        cmd.env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID");
        #[cfg(feature = "testbed")]
        if let Some(nr) = &n.notify {
            cmd.env("NOTIFY_SOCKET", &nr.path);
            if let Some(u) = n.wd.watchdog_usec {
                cmd.env("WATCHDOG_USEC", u.to_string());
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn agent {}: {e}", self.opts.binary.display()))?;
        let pid = child.id();
        n.agent = Some(child);
        if let Some(cg) = &cgroup {
            // Confirm the move happened: the shell exits 121 if it could not. An
            // agent that already exited (bad config, say) has left the cgroup; that
            // is not a join failure: the caller sees it through `agent_exited`.
            let name = n.spec.name.clone();
            let Some(child) = n.agent.as_mut() else {
                return Err(format!("agent of {name} vanished"));
            };
            let joined = wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
                if cgroup_pids(cg).contains(&(pid as i32)) {
                    return Some(Ok(()));
                }
                match child.try_wait() {
                    Ok(Some(st)) if st.code() == Some(121) => Some(Err(format!(
                        "agent of {name}: could not join freezer cgroup {}",
                        cg.display()
                    ))),
                    Ok(Some(st)) => {
                        log_note(&format!("agent of {name} (pid {pid}) exited at once: {st}"));
                        Some(Ok(()))
                    }
                    _ => None,
                }
            });
            return joined.unwrap_or_else(|| {
                Err(format!(
                    "agent of {name} (pid {pid}) did not join freezer cgroup {} within 2 s",
                    cg.display()
                ))
            });
        }
        Ok(())
    }

    /// Node `i`'s stand-in and notify socket, started once (before its first agent)
    /// and kept across agent restarts, like a host's device.
    #[cfg(feature = "testbed")]
    fn ensure_watchdog_parts(&mut self, i: usize, cgroup: Option<&Path>) -> Result<(), String> {
        let n = &mut self.nodes[i];
        if let Some(st) = n.wd.standin.clone()
            && n.standin.is_none()
        {
            // The agent reads nowayout where the driver would publish it: the device
            // is `<dir>/watchdog`, which `sysfs_nowayout` maps to `watchdog0`.
            let attr_dir = n.spec.dir.join("sysfs").join("watchdog0");
            fs::create_dir_all(&attr_dir)
                .map_err(|e| format!("create {}: {e}", attr_dir.display()))?;
            write_file(
                &attr_dir.join("nowayout"),
                if st.nowayout { "1\n" } else { "0\n" },
                0o644,
            )?;
            let mut o =
                StandinOptions::new(n.spec.dir.join("watchdog"), n.spec.dir.join("standin"));
            o.host = match cgroup {
                Some(cg) => HostKill::Freezer(cg.to_path_buf()),
                None => HostKill::Pids {
                    pids: Vec::new(),
                    data_dir: Some(n.spec.data_dir.clone()),
                },
            };
            o.nowayout = st.nowayout;
            o.max_timeout_s = st.max_timeout_s;
            o.timeout_s = o.timeout_s.min(st.max_timeout_s);
            o.magic_close = st.magic_close;
            if st.dead {
                o.initial = crate::testbed::watchdog::Initial::Dead;
            }
            n.standin = Some(
                WatchdogStandin::start(&o, Duration::from_secs(10))
                    .map_err(|e| format!("watchdog stand-in of {}: {e}", n.spec.name))?,
            );
        }
        if n.wd.notify && n.notify.is_none() {
            n.notify = Some(NotifyReader::start(&n.spec.dir.join("notify.sock"))?);
        }
        Ok(())
    }

    /// Node `i`'s watchdog stand-in, once its agent was first started.
    #[cfg(feature = "testbed")]
    pub fn standin(&self, i: usize) -> Option<&WatchdogStandin> {
        self.nodes[i].standin.as_ref()
    }

    #[cfg(feature = "testbed")]
    pub fn standin_mut(&mut self, i: usize) -> Option<&mut WatchdogStandin> {
        self.nodes[i].standin.as_mut()
    }

    /// Every line node `i`'s agents sent to its notify socket so far, with the
    /// `CLOCK_BOOTTIME` instant it arrived.
    #[cfg(feature = "testbed")]
    pub fn notify_messages(&self, i: usize) -> Vec<(crate::core::time::Instant, String)> {
        self.nodes[i]
            .notify
            .as_ref()
            .and_then(|n| n.log.lock().ok().map(|l| l.clone()))
            .unwrap_or_default()
    }

    /// SIGKILL node `i`'s agent only (its PostgreSQL keeps running), and reap it.
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM node `i`'s agent and wait at most `limit` for it to exit.
    /// Err if it did not (it is left running; Drop kills it).
    pub fn term_agent(&mut self, i: usize, limit: Duration) -> Result<ExitStatus, String> {
        let name = self.name(i).to_string();
        let n = &mut self.nodes[i];
        let Some(c) = n.agent.as_mut() else {
            return Err(format!("agent of {name} is not running"));
        };
        let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
        let t0 = Instant::now();
        loop {
            match c.try_wait() {
                Ok(Some(st)) => {
                    n.agent = None;
                    return Ok(st);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("wait for agent of {name}: {e}")),
            }
            if t0.elapsed() >= limit {
                return Err(format!(
                    "agent of {name} did not exit within {limit:?} of SIGTERM"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Pids of node `i`'s PostgreSQL: every process whose cwd is its data dir.
    pub fn pg_pids(&self, i: usize) -> Vec<i32> {
        pids_with_cwd(&self.nodes[i].spec.data_dir)
    }

    /// The running postmaster's pid (from `postmaster.pid`, checked against /proc).
    pub fn postmaster_pid(&self, i: usize) -> Option<i32> {
        let text = fs::read_to_string(self.data_dir(i).join("postmaster.pid")).ok()?;
        let pid: i32 = text.lines().next()?.trim().parse().ok()?;
        self.pg_pids(i).contains(&pid).then_some(pid)
    }

    /// Node `i`'s System V shared memory segment as its last postmaster recorded it
    /// (`postmaster.pid` line 7: key and id), whether or not it still exists.
    pub fn pg_shmem(&self, i: usize) -> Option<(i32, i32)> {
        shmem_of(self.data_dir(i))
    }

    /// DESIGN §6 "host crash": every process of node `i` dies at once — agent,
    /// postmaster, all backends. With the freezer: FROZEN, SIGKILL every pid in
    /// the cgroup, THAWED. Without: SIGSTOP the agent, its descendants and every
    /// process in the data dir (until no new one appears), then SIGKILL them all.
    /// Returns the crash instant: the moment before the first process was stopped
    /// (so a failover time measured from it is never too short).
    pub fn host_crash(&mut self, i: usize) -> Result<Instant, String> {
        let at = Instant::now();
        match self.nodes[i].cgroup.clone() {
            Some(cg) => {
                freezer_set(&cg, "FROZEN")?;
                for pid in cgroup_pids(&cg) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
                // Frozen tasks die when thawed; SIGKILL is already pending.
                freezer_set(&cg, "THAWED")?;
                let gone = wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
                    cgroup_pids(&cg).is_empty().then_some(())
                });
                if gone.is_none() {
                    return Err(format!(
                        "{} survived SIGKILL in {}: {:?}",
                        self.name(i),
                        cg.display(),
                        cgroup_pids(&cg)
                    ));
                }
            }
            None => {
                let agent = self.agent_pid(i).map(|p| p as i32);
                let data_dir = self.nodes[i].spec.data_dir.clone();
                let mut stopped: Vec<i32> = Vec::new();
                // Keep stopping until a scan finds nothing new: a process forked
                // between two scans is caught by the next one.
                for _ in 0..50 {
                    let mut found = pids_with_cwd(&data_dir);
                    if let Some(a) = agent {
                        found.push(a);
                        found.extend(descendants(a));
                    }
                    found.retain(|p| !stopped.contains(p));
                    if found.is_empty() {
                        break;
                    }
                    for p in found {
                        let _ = kill(Pid::from_raw(p), Signal::SIGSTOP);
                        stopped.push(p);
                    }
                }
                for &p in &stopped {
                    let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                }
            }
        }
        if let Some(mut c) = self.nodes[i].agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let data_dir = self.nodes[i].spec.data_dir.clone();
        let gone = wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
            pids_with_cwd(&data_dir).is_empty().then_some(())
        });
        if gone.is_none() {
            return Err(format!("PostgreSQL of {} survived the crash", self.name(i)));
        }
        Ok(at)
    }

    /// Freeze every process of node `i` (a paused host). Needs the freezer.
    pub fn pause_host(&self, i: usize) -> Result<(), String> {
        let cg = self.nodes[i]
            .cgroup
            .as_ref()
            .ok_or("no freezer cgroup on this machine")?;
        freezer_set(cg, "FROZEN")
    }

    /// Thaw node `i` after `pause_host`.
    pub fn resume_host(&self, i: usize) -> Result<(), String> {
        let cg = self.nodes[i]
            .cgroup
            .as_ref()
            .ok_or("no freezer cgroup on this machine")?;
        freezer_set(cg, "THAWED")
    }

    fn ensure_cgroup(&mut self, i: usize) -> Result<Option<PathBuf>, String> {
        if !self.opts.use_freezer || !Path::new(FREEZER_ROOT).join("cgroup.procs").exists() {
            return Ok(None);
        }
        if let Some(cg) = &self.nodes[i].cgroup {
            return Ok(Some(cg.clone()));
        }
        let base = self
            .dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cg = Path::new(FREEZER_ROOT).join(format!("{base}-{}", self.nodes[i].spec.name));
        fs::create_dir_all(&cg)
            .map_err(|e| format!("create freezer cgroup {}: {e}", cg.display()))?;
        self.nodes[i].cgroup = Some(cg.clone());
        Ok(Some(cg))
    }

    /// Leave everything running (for `tenure demo --keep`): Drop stops nothing.
    pub fn leave_running(&mut self) {
        self.leave_running = true;
    }

    /// Pids of the etcd members.
    pub fn etcd_pids(&self) -> Vec<u32> {
        self.etcd
            .as_ref()
            .map(|e| (0..e.members.len()).filter_map(|i| e.pid(i)).collect())
            .unwrap_or_default()
    }

    // ----- etcd -----------------------------------------------------------------

    /// `leader`'s value and epoch (its create_revision), read linearizably.
    pub fn leader_key(&self) -> Option<(String, i64)> {
        self.get_kv("leader")
            .map(|kv| (kv.value, kv.create_revision))
    }

    /// Like `leader_key`, but tells "absent" (`Ok(None)`) from "etcd did not
    /// answer" (`Err`).
    pub fn try_leader_key(&self) -> Result<Option<(String, i64)>, String> {
        let key = format!("{}leader", self.prefix());
        let kvs = etcdkv::range(&self.endpoints, &key, false, ETCD_TIMEOUT)?;
        Ok(kvs
            .into_iter()
            .next()
            .map(|kv| (kv.value, kv.create_revision)))
    }

    /// The value of `/service/<scope>/<suffix>`.
    pub fn get_key(&self, suffix: &str) -> Option<String> {
        self.get_kv(suffix).map(|kv| kv.value)
    }

    /// The whole key `/service/<scope>/<suffix>`; `None` if absent or etcd did
    /// not answer within 2 s.
    pub fn get_kv(&self, suffix: &str) -> Option<Kv> {
        let key = format!("{}{suffix}", self.prefix());
        etcdkv::range(&self.endpoints, &key, false, ETCD_TIMEOUT)
            .ok()?
            .into_iter()
            .next()
    }

    /// Every key under `/service/<scope>/<suffix>`.
    pub fn get_prefix(&self, suffix: &str) -> Result<Vec<Kv>, String> {
        let key = format!("{}{suffix}", self.prefix());
        etcdkv::range(&self.endpoints, &key, true, ETCD_TIMEOUT)
    }

    /// `members/<name>` parsed as JSON.
    pub fn member(&self, name: &str) -> Option<serde_json::Value> {
        serde_json::from_str(&self.get_key(&format!("members/{name}"))?).ok()
    }

    /// Delete `/service/<scope>/<suffix>` (an operator's `etcdctl del`).
    pub fn delete_key(&self, suffix: &str) -> Result<i64, String> {
        etcdkv::delete(
            &self.endpoints,
            &format!("{}{suffix}", self.prefix()),
            ETCD_TIMEOUT,
        )
    }

    // ----- HTTP API ---------------------------------------------------------------

    /// Status code of `GET path` on node `i`'s API; `None` if it did not answer.
    pub fn api_get(&self, i: usize, path: &str) -> Option<u16> {
        etcdkv::http_status(&http_get(self.addr(i).into(), self.api_port(i), path)?)
    }

    /// Status and body of `GET path` on node `i`'s API.
    pub fn api_body(&self, i: usize, path: &str) -> Option<(u16, String)> {
        let text = http_get(self.addr(i).into(), self.api_port(i), path)?;
        let status = etcdkv::http_status(&text)?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((status, body))
    }

    /// `method path` with a JSON `body` on node `i`'s API, with the bed's
    /// credentials when `auth` (HTTP basic): status and body; `None` if it did
    /// not answer.
    pub fn api_write(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: &str,
        auth: bool,
    ) -> Option<(u16, String)> {
        use base64::Engine as _;
        let header = auth.then(|| {
            let token = base64::engine::general_purpose::STANDARD
                .encode(format!("{API_USER}:{}", self.passwords.api));
            format!("Authorization: Basic {token}\r\n")
        });
        let text = http_request(
            self.addr(i).into(),
            self.api_port(i),
            method,
            path,
            header.as_deref().unwrap_or(""),
            body,
        )?;
        let status = etcdkv::http_status(&text)?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((status, body))
    }

    /// The node whose `/primary` answers 200 (the first, if several would).
    /// Node `i` runs as a streaming replica: `/replica` answers 200, PostgreSQL is
    /// in recovery and its WAL receiver streams.
    pub fn is_streaming_replica(&self, i: usize) -> bool {
        self.api_get(i, "/replica") == Some(200)
            && self.is_in_recovery(i) == Ok(true)
            && self.is_streaming(i) == Ok(true)
    }

    /// Wait until every node but `p` and `skip` is a streaming replica.
    pub fn wait_replicas(&self, p: usize, skip: &[usize], limit: Duration) -> Result<(), String> {
        wait_for(limit, Duration::from_millis(100), || {
            (0..self.node_count())
                .filter(|&i| i != p && !skip.contains(&i))
                .all(|i| self.is_streaming_replica(i))
                .then_some(())
        })
        .ok_or_else(|| {
            format!(
                "replicas of {} not streaming within {limit:?}{}",
                self.name(p),
                self.logs_tail(40)
            )
        })
    }

    /// Wait for the first primary and for every other node to stream from it;
    /// fails at once if an agent exits.
    pub fn settled(&mut self, limit: Duration) -> Result<usize, String> {
        let t0 = std::time::Instant::now();
        let p = loop {
            self.check_agents()?;
            if let Some(p) = self.primary() {
                break p;
            }
            if t0.elapsed() >= limit {
                return Err(format!("no primary within {limit:?}{}", self.logs_tail(40)));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        self.wait_replicas(p, &[], limit)?;
        Ok(p)
    }

    pub fn primary(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.api_get(i, "/primary") == Some(200))
    }

    /// Nodes whose `/primary` answers 200 (a test asserts this has length <= 1).
    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.api_get(i, "/primary") == Some(200))
            .collect()
    }

    pub fn wait_primary(&self, limit: Duration) -> Option<usize> {
        wait_for(limit, Duration::from_millis(50), || self.primary())
    }

    /// Wait until `/primary` answers 200 on a node other than `not`.
    pub fn wait_new_primary(&self, not: usize, limit: Duration) -> Option<usize> {
        wait_for(limit, Duration::from_millis(20), || {
            self.primary().filter(|&p| p != not)
        })
    }

    // ----- SQL ------------------------------------------------------------------

    /// Run `query` (simple protocol, may hold several statements) on node `i` as
    /// the superuser over TCP; every row as text. Bounded by 5 s overall: the call
    /// runs on a helper thread that is abandoned if the server hangs (a frozen
    /// postmaster accepts TCP connections in the kernel and never answers).
    pub fn sql(&self, i: usize, query: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let (addr, port, pw, q) = (
            self.addr(i),
            self.pg_port(i),
            self.passwords.superuser.clone(),
            query.to_string(),
        );
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(sql_blocking(addr, port, &pw, &q));
        });
        match rx.recv_timeout(SQL_TIMEOUT) {
            Ok(r) => r.map_err(|e| format!("{} ({addr}:{port}): {e}", self.name(i))),
            Err(_) => Err(format!(
                "{} ({addr}:{port}): no answer within {SQL_TIMEOUT:?}",
                self.name(i)
            )),
        }
    }

    /// The first column of the first row of `query`.
    pub fn sql_one(&self, i: usize, query: &str) -> Result<String, String> {
        self.sql(i, query)?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten())
            .ok_or_else(|| format!("{}: `{query}` returned no value", self.name(i)))
    }

    /// Insert row `n` into the test table (created if missing) on node `i`.
    pub fn write_row(&self, i: usize, n: i64) -> Result<(), String> {
        self.sql(
            i,
            &format!(
                "CREATE TABLE IF NOT EXISTS {ROW_TABLE}(n bigint PRIMARY KEY, at timestamptz DEFAULT now()); \
                 INSERT INTO {ROW_TABLE}(n) VALUES ({n})"
            ),
        )
        .map(|_| ())
    }

    /// Rows in the test table on node `i`.
    pub fn count_rows(&self, i: usize) -> Result<i64, String> {
        let v = self.sql_one(i, &format!("SELECT count(*) FROM {ROW_TABLE}"))?;
        v.parse().map_err(|e| format!("count(*) = {v:?}: {e}"))
    }

    pub fn is_in_recovery(&self, i: usize) -> Result<bool, String> {
        Ok(self.sql_one(i, "SELECT pg_is_in_recovery()")? == "t")
    }

    /// True when node `i`'s WAL receiver is streaming.
    pub fn is_streaming(&self, i: usize) -> Result<bool, String> {
        let rows = self.sql(i, "SELECT status FROM pg_stat_wal_receiver")?;
        Ok(rows
            .iter()
            .any(|r| r.first().and_then(|v| v.as_deref()) == Some("streaming")))
    }

    /// `SELECT system_identifier FROM pg_control_system()` on node `i`.
    pub fn system_identifier(&self, i: usize) -> Result<String, String> {
        self.sql_one(i, "SELECT system_identifier FROM pg_control_system()")
    }

    /// Create the probe table on `primary` and start a `WriteProbe` over every
    /// node (target index == node index), writing every `every`.
    pub fn write_probe(&self, primary: usize, every: Duration) -> Result<WriteProbe, String> {
        self.sql(
            primary,
            &format!("CREATE TABLE IF NOT EXISTS {PROBE_TABLE}(node int, seq bigint, at timestamptz DEFAULT now())"),
        )?;
        let targets: Vec<ProbeTarget> = (0..self.nodes.len())
            .map(|i| ProbeTarget {
                node: i,
                host: std::net::IpAddr::V4(self.addr(i)),
                port: self.pg_port(i),
                user: "postgres".into(),
                password: self.passwords.superuser.clone(),
            })
            .collect();
        Ok(WriteProbe::start(&targets, every))
    }

    // ----- logs -----------------------------------------------------------------

    /// Everything node `i`'s agents wrote so far (all restarts).
    pub fn agent_log(&self, i: usize) -> String {
        fs::read(self.log_path(i))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// A failure message with every agent log's tail, for assertion messages.
    pub fn logs_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for i in 0..self.nodes.len() {
            let log = self.agent_log(i);
            let all: Vec<&str> = log.lines().collect();
            let from = all.len().saturating_sub(lines);
            out.push_str(&format!(
                "\n----- {} ({}) -----\n",
                self.name(i),
                self.log_path(i).display()
            ));
            out.push_str(&all[from..].join("\n"));
        }
        out
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.leave_running {
            // Nothing of the running cluster may stop with us: etcd's members (whose
            // own Drop would stop them), the relays, stand-ins and notify readers are
            // let go without running their destructors; the agents' handles never
            // kill on drop.
            std::mem::forget(self.etcd.take());
            #[cfg(feature = "testbed")]
            {
                for n in &mut self.nodes {
                    std::mem::forget(std::mem::take(&mut n.relays));
                    std::mem::forget(n.standin.take());
                    std::mem::forget(n.notify.take());
                }
                std::mem::forget(self.net.take());
            }
            return;
        }
        // Stand-ins first: one must not fire and "reset" a node while the bed is
        // already taking it down.
        #[cfg(feature = "testbed")]
        for n in &mut self.nodes {
            drop(n.standin.take());
            drop(n.notify.take());
        }
        // Thaw first: a frozen task does not die from SIGKILL until thawed.
        for n in &self.nodes {
            if let Some(cg) = &n.cgroup {
                let _ = freezer_set(cg, "THAWED");
            }
        }
        for n in &mut self.nodes {
            if let Some(mut c) = n.agent.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for n in &self.nodes {
            let mut pids = pids_with_cwd(&n.spec.data_dir);
            if let Some(cg) = &n.cgroup {
                pids.extend(cgroup_pids(cg));
            }
            for p in pids {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            }
            let dd = n.spec.data_dir.clone();
            let _ = wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
                pids_with_cwd(&dd).is_empty().then_some(())
            });
            remove_orphan_shmem(&dd);
            if let Some(cg) = &n.cgroup {
                let _ = wait_for(Duration::from_secs(2), Duration::from_millis(20), || {
                    fs::remove_dir(cg).ok()
                });
            }
        }
        if let Some(mut e) = self.etcd.take() {
            e.stop();
        }
        if std::env::var("TENURE_KEEP").is_ok_and(|v| v == "1") {
            log_note(&format!(
                "TENURE_KEEP=1: scratch dir kept at {}",
                self.dir.display()
            ));
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The System V segment `postmaster.pid` names (line 7: `key id`).
fn shmem_of(data_dir: &Path) -> Option<(i32, i32)> {
    let text = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let mut it = text.lines().nth(6)?.split_whitespace();
    let key = it.next()?.parse().ok()?;
    let id = it.next()?.parse().ok()?;
    Some((key, id))
}

/// Whether segment `id` exists with this key, and how many processes attach it.
pub fn shmem_attached(key: i32, id: i32) -> Option<u64> {
    // SAFETY: `shmid_ds` is plain data (integers); all zeroes is a valid value.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: IPC_STAT only writes into `ds`, a valid, exclusively borrowed
    // `shmid_ds`; an unknown id fails with EINVAL and writes nothing.
    let rc = unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) };
    (rc == 0 && ds.shm_perm.__key == key).then_some(ds.shm_nattch as u64)
}

/// PostgreSQL removes its System V segment on a clean stop, or when the next
/// postmaster starts in the same data directory; one SIGKILLed for good (a host
/// crash, the bed's teardown) leaves it behind. Three per cluster exhausted the
/// kernel's 4,096 ids after a few full test runs on one machine (every initdb then
/// fails: "could not create shared memory segment: No space left on device"), so
/// the bed removes a torn-down node's segment once nothing attaches it.
fn remove_orphan_shmem(data_dir: &Path) {
    let Some((key, id)) = shmem_of(data_dir) else {
        return;
    };
    // The key must still match: an id of a removed segment may have been reused.
    if shmem_attached(key, id) == Some(0) {
        // SAFETY: IPC_RMID takes no buffer (null is what the API expects); it
        // only marks the segment for removal, and nothing attaches it.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

fn log_note(s: &str) {
    let _ = writeln!(std::io::stderr(), "testbed: {s}");
}

fn nanos_now() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

fn sql_blocking(
    addr: std::net::Ipv4Addr,
    port: u16,
    password: &str,
    query: &str,
) -> Result<Vec<Vec<Option<String>>>, String> {
    let mut client = postgres::Config::new()
        .host(&addr.to_string())
        .port(port)
        .user("postgres")
        .password(password)
        .dbname("postgres")
        .application_name("tenure-bed")
        .connect_timeout(Duration::from_secs(2))
        .options("-c statement_timeout=3000 -c client_min_messages=warning")
        .connect(postgres::NoTls)
        .map_err(|e| format!("connect: {e}"))?;
    let msgs = client.simple_query(query).map_err(|e| e.to_string())?;
    Ok(msgs
        .into_iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|c| r.get(c).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect())
}

/// Number of threads of `pid` (entries in `/proc/<pid>/task`).
pub fn thread_count(pid: u32) -> Option<usize> {
    Some(fs::read_dir(format!("/proc/{pid}/task")).ok()?.count())
}

/// Every live process whose working directory is `dir`.
pub fn pids_with_cwd(dir: &Path) -> Vec<i32> {
    let Ok(want) = fs::canonicalize(dir) else {
        return Vec::new();
    };
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == want))
        .collect()
}

/// Every descendant of `root` (children, grandchildren...), from /proc's ppid.
pub fn descendants(root: i32) -> Vec<i32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pairs: Vec<(i32, i32)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, ppid_of(pid)?)))
        .collect();
    let mut out = vec![];
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &pairs {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

fn ppid_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn cgroup_pids(cg: &Path) -> Vec<i32> {
    fs::read_to_string(cg.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Write `state` to the freezer and wait (at most 5 s) until it reads back.
fn freezer_set(cg: &Path, state: &str) -> Result<(), String> {
    let f = cg.join("freezer.state");
    fs::write(&f, state).map_err(|e| format!("write {state} to {}: {e}", f.display()))?;
    wait_for(Duration::from_secs(5), Duration::from_millis(2), || {
        (fs::read_to_string(&f).ok()?.trim() == state).then_some(())
    })
    .ok_or_else(|| format!("{} did not reach {state} within 5 s", f.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> NodeSpec {
        NodeSpec {
            name: "pg1".into(),
            dir: "/dev/shm/x/pg1".into(),
            data_dir: "/dev/shm/x/pg1/data".into(),
            socket_dir: "/dev/shm/x/pg1/socket".into(),
            config_path: "/dev/shm/x/pg1.toml".into(),
            log_path: "/dev/shm/x/pg1.agent.log".into(),
            addr: std::net::Ipv4Addr::LOCALHOST,
            netns: None,
            pg_port: 20001,
            api_port: 20002,
        }
    }

    #[test]
    fn config_file_has_the_agreed_layout() {
        let opts = ClusterOptions::new("/bin/true");
        let pw = Passwords {
            superuser: "a".into(),
            replication: "b".into(),
            rewind: "c".into(),
            api: "d".into(),
        };
        let eps = vec![
            "http://127.0.0.1:1".to_string(),
            "http://127.0.0.1:2".to_string(),
        ];
        let text = agent_config_toml(&opts, &spec(), &eps, &pw);
        let v: toml::Value = toml::from_str(&text).expect("the bed writes valid TOML");
        assert_eq!(v["scope"].as_str(), Some("demo"));
        assert_eq!(v["name"].as_str(), Some("pg1"));
        assert_eq!(v["etcd"]["endpoints"].as_array().map(|a| a.len()), Some(2));
        assert_eq!(v["timing"]["ttl"].as_integer(), Some(7));
        assert_eq!(v["timing"]["loop_wait"].as_float(), Some(0.5));
        assert_eq!(v["timing"]["retry_timeout"].as_float(), Some(0.25));
        assert_eq!(v["timing"]["safety_margin"].as_float(), Some(0.5));
        assert_eq!(v["timing"]["demote_budget"].as_float(), Some(1.0));
        assert_eq!(
            v["dynamic"]["maximum_lag_on_failover"].as_integer(),
            Some(1_048_576)
        );
        assert_eq!(v["dynamic"]["primary_start_timeout"].as_integer(), Some(30));
        assert_eq!(v["postgresql"]["listen"].as_str(), Some("127.0.0.1:20001"));
        assert_eq!(
            v["postgresql"]["data_dir"].as_str(),
            Some("/dev/shm/x/pg1/data")
        );
        assert_eq!(v["postgresql"]["user"].as_str(), Some("postgres"));
        let auth = &v["postgresql"]["authentication"];
        assert_eq!(auth["superuser"]["username"].as_str(), Some("postgres"));
        assert_eq!(auth["replication"]["username"].as_str(), Some("replicator"));
        assert_eq!(auth["rewind"]["password"].as_str(), Some("c"));
        assert_eq!(v["api"]["listen"].as_str(), Some("127.0.0.1:20002"));
        assert_eq!(v["api"]["username"].as_str(), Some(API_USER));
        assert_eq!(v["api"]["password"].as_str(), Some("d"));
        assert_eq!(v["watchdog"]["mode"].as_str(), Some("off"));
    }

    #[test]
    fn ppid_parse_handles_spaces_in_comm() {
        let me = std::process::id() as i32;
        assert!(ppid_of(me).is_some_and(|p| p > 0));
        assert!(thread_count(std::process::id()).is_some_and(|n| n >= 1));
    }
}
