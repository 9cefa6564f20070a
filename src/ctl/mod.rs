//! `tenure ctl --config FILE <command>`: operate a cluster, like patronictl. Reads
//! etcd directly (through [`crate::dcs`], every call bounded by a deadline) and
//! talks to the members' REST APIs (a small blocking client, [`http`]).
//!
//! Owns: the command line after `ctl`, what is printed (tables for people, JSON
//! for scripts), the confirmation prompts, the exit codes ([`CtlError::exit_code`],
//! listed in [`args::HELP`], docs/operations.md and tenure(8)), and checking an
//! `edit-config` change against the timing contract (DESIGN S6) before it is sent.
//! Must never: write to etcd (every change goes through a member's API, which
//! applies the same checks as for any client), decide anything for the cluster,
//! print a password, or panic on what etcd or an API returns.
//!
//! Patroni 4.1's `patroni/ctl.py` is the reference for the verbs, the endpoints
//! they call, the bodies they send and the order of the checks.

/// `print!` for ctl's output: through [`out`], so a reader that went away ends ctl
/// quietly instead of `print!`'s panic on the broken pipe.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::ctl::out(&format!($($t)*))
    };
}

/// `println!` for ctl's output (see [`out!`]).
macro_rules! outln {
    () => {
        $crate::ctl::out("\n")
    };
    ($($t:tt)*) => {
        $crate::ctl::out(&format!("{}\n", format_args!($($t)*)))
    };
}

pub mod args;
mod fallback;
pub mod http;
pub mod render;
mod verbs;

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::clock;
use crate::config::{Config, ConfigError};
use crate::dcs::Etcd;
use args::Invocation;
use http::Credentials;
use render::Snapshot;

/// How long one etcd read may take.
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one API request may take (a restart or a switchover answers after
/// the member acted; the server bounds its own side).
const API_TIMEOUT: Duration = Duration::from_secs(10);

/// ctl's own version line, with the git revision the binary was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("TENURE_GIT_REV"),
    ")"
);

/// Everything ctl can fail with; each variant is one exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtlError {
    /// A usage error naming the argument (exit 2).
    Usage(String),
    /// The configuration file is unreadable or invalid (exit 3).
    Config(String),
    /// `edit-config`: the change breaks DESIGN S6; nothing was sent (exit 4).
    Timing(String),
    /// The operator did not confirm (exit 5).
    Aborted(String),
    /// 401 or 403 from a member's API (exit 6).
    Auth(String),
    /// Anything else: etcd unreachable, an API unreachable or refusing, an
    /// unknown member, a wait that ran out of time (exit 1).
    Failed(String),
}

impl CtlError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Failed(_) => 1,
            CtlError::Usage(_) => 2,
            CtlError::Config(_) => 3,
            CtlError::Timing(_) => 4,
            CtlError::Aborted(_) => 5,
            CtlError::Auth(_) => 6,
        }
    }
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CtlError::Usage(s) => write!(f, "usage error: {s} (see tenure ctl --help)"),
            CtlError::Config(s) => write!(f, "invalid configuration: {s}"),
            CtlError::Timing(s) => write!(f, "refused, nothing sent: {s}"),
            CtlError::Aborted(s) => write!(f, "aborted: {s}"),
            CtlError::Auth(s) | CtlError::Failed(s) => f.write_str(s),
        }
    }
}

/// Write `text` to stdout, now. A reader that went away (`tenure ctl list | head
/// -1`, a pager quit early) ends ctl with exit 0: what it did is done, and the
/// reader asked for no more. Any other failure to write (a full disk behind a
/// redirect) ends it with exit 1 and the reason on stderr. Never the panic
/// `print!` gives on a closed pipe.
pub fn out(text: &str) {
    stdout_or_exit("tenure ctl", text);
}

/// Write `text` to stdout and flush it, for every command that prints (`who`
/// names it in an error): a reader that went away (`| head`) ends the process
/// with exit 0, another write error with exit 1 and the reason on stderr — never
/// `print!`'s panic.
pub fn stdout_or_exit(who: &str, text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "{who}: cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// `tenure ctl ARGS...`: run it and return the exit code. Errors go to stderr.
pub fn main<I>(args: I) -> u8
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tenure ctl: {e}");
            e.exit_code()
        }
    }
}

fn run<I>(args: I) -> Result<(), CtlError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let inv = args::parse(args).map_err(CtlError::Usage)?;
    if inv.command == args::Command::Help {
        out!("{}", args::HELP);
        return Ok(());
    }
    // Problems in keys other writers left are logged once on stderr (warn), so
    // an operator sees them next to the table.
    let stderr_only = crate::logging::LogConfig {
        syslog: false,
        ..Default::default()
    };
    let _ = crate::logging::init(log::LevelFilter::Warn, &stderr_only);
    // A timing violation in the node's own file is a file problem here (exit 3).
    let cfg =
        Config::load(&inv.config).map_err(|e: ConfigError| CtlError::Config(e.to_string()))?;
    // `Config::load` already checked `[api] username`/`password` (both or neither).
    let creds = cfg.api.auth.as_ref().map(|a| Credentials {
        username: a.username.clone(),
        password: a.password.clone(),
    });
    // Built now, needed only for https:// APIs: the error waits until one is.
    let tls = crate::tls::client_config(
        cfg.ctl.cacert.as_deref(),
        cfg.ctl
            .cert
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path())),
        cfg.ctl.insecure,
    );
    let mut ctx = Ctx {
        cfg,
        creds,
        tls,
        inv,
        dcs: None,
    };
    verbs::run(&mut ctx)
}

/// etcd, connected on first use.
struct Dcs {
    rt: Runtime,
    etcd: Etcd,
    endpoints: String,
}

/// What every verb works with.
pub(crate) struct Ctx {
    cfg: Config,
    creds: Option<Credentials>,
    /// `[ctl]` TLS for https:// APIs, or why there is none.
    tls: Result<std::sync::Arc<rustls::ClientConfig>, String>,
    inv: Invocation,
    dcs: Option<Dcs>,
}

impl Ctx {
    fn prefix(&self) -> String {
        format!(
            "{}/{}/",
            self.cfg.namespace.trim_end_matches('/'),
            self.cfg.scope
        )
    }

    fn dcs(&mut self) -> Result<&mut Dcs, CtlError> {
        if self.dcs.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(|e| CtlError::Failed(format!("cannot build the event loop: {e}")))?;
            let deadline = clock::now().add(ETCD_TIMEOUT);
            // `[etcd] srv`: the members from DNS first (crate::resolve).
            let list = crate::resolve::endpoints_now(&self.cfg.etcd, deadline)
                .map_err(CtlError::Failed)?;
            let endpoints = list.join(",");
            let sec = crate::dcs::Security::of(&self.cfg.etcd);
            let etcd = Etcd::connect_authenticated(&rt, &list, &self.prefix(), &sec, deadline)
                .map_err(|e| CtlError::Failed(format!("etcd unreachable ({endpoints}): {e}")))?;
            self.dcs = Some(Dcs {
                rt,
                etcd,
                endpoints,
            });
        }
        self.dcs
            .as_mut()
            .ok_or_else(|| CtlError::Failed("etcd: not connected".into()))
    }

    /// One read of the scope: the parsed view, the raw member values and the
    /// leader lease's time to live.
    fn snapshot(&mut self) -> Result<Snapshot, CtlError> {
        let scope = self.cfg.scope.clone();
        let d = self.dcs()?;
        let deadline = clock::now().add(ETCD_TIMEOUT);
        let endpoints = d.endpoints.clone();
        let fail = |e: crate::dcs::DcsError| {
            CtlError::Failed(format!("etcd unreachable ({endpoints}): {e}"))
        };
        let view = d.etcd.read_cluster(&d.rt, deadline).map_err(fail)?;
        let raw = d.etcd.read_raw(&d.rt, "members/", deadline).map_err(fail)?;
        let raw_members = raw
            .into_iter()
            .filter_map(|(k, v)| {
                let name = k.strip_prefix("members/")?.to_string();
                match serde_json::from_slice::<serde_json::Value>(&v) {
                    Ok(serde_json::Value::Object(o)) => Some((name, o)),
                    _ => None,
                }
            })
            .collect();
        let leader_lease_ttl = match &view.leader {
            Some(k) if k.lease != 0 => d
                .etcd
                .lease_ttl(&d.rt, k.lease, deadline)
                .ok()
                .and_then(|p| p.ttl),
            _ => None,
        };
        Ok(Snapshot {
            scope,
            view,
            raw_members,
            leader_lease_ttl,
        })
    }
}

#[cfg(test)]
mod tests;
