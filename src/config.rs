//! Configuration: the node's TOML file, validated fail-closed against the timing
//! contract (DESIGN S6).
//!
//! Owns: parsing, defaults, validation, the derived budget table `tenure check-config`
//! prints. Must never: adjust a value silently, or accept a timing that breaks S6.
//!
//! STUB: the field layout is the contract between modules; parsing and validation
//! are filled in by the config work.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchdogMode {
    Off,
    Automatic,
    Required,
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
}

#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// `http://127.0.0.1:2379` style URLs; hosts must be IP addresses (no name
    /// resolution in the loop, DESIGN §5).
    pub endpoints: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct PgConfig {
    pub bin_dir: PathBuf,
    pub data_dir: PathBuf,
    /// Address and port PostgreSQL listens on, e.g. `127.0.0.1:5432`.
    pub listen: String,
    /// host:port others use to reach this PostgreSQL (default: `listen`).
    pub connect_address: String,
    /// Directory for the Unix socket the agent connects through (default:
    /// `<data_dir>/../<name>-socket`... see docs).
    pub socket_dir: PathBuf,
    /// OS user to run PostgreSQL's programs as when the agent runs as root.
    pub user: Option<String>,
    pub superuser: String,
    pub superuser_password: String,
    pub replication_user: String,
    pub replication_password: String,
    pub rewind_user: String,
    pub rewind_password: String,
    /// Extra `postgresql.conf` parameters (name, value).
    pub parameters: Vec<(String, String)>,
    /// Move an unusable data directory aside instead of refusing to start.
    pub move_aside_unusable: bool,
}

#[derive(Clone, Debug)]
pub struct ApiConfig {
    pub listen: String,
    /// URL others use to reach this API (default `http://<listen>`).
    pub connect_url: String,
}

#[derive(Clone, Debug)]
pub struct WatchdogConfig {
    pub mode: WatchdogMode,
    pub device: PathBuf,
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
    /// Syslog socket path (default `/dev/log`); `None` = log to stderr only.
    pub syslog_socket: Option<PathBuf>,
}
