//! Logging: every line goes to one place, never twice, and never blocks the loop.
//!
//! - Under systemd (`JOURNAL_STREAM` names stderr's device and inode): stderr only,
//!   each line with the `<N>` severity prefix journald reads (sd-daemon's
//!   convention), so `journalctl -p warning` shows the right lines.
//! - Elsewhere: stderr as before (`[time] LEVEL text`), and syslog through the
//!   `syslog` crate for events ([`crate::events`], every severity) and warnings and
//!   above: a configured local datagram socket (`[log] syslog_socket`), a UDP target
//!   (`[log] syslog_udp`), or `/dev/log` when it exists. Facility `[log]
//!   syslog_facility`, default `daemon`. No TCP and no stream socket: a stream can
//!   block or split a line.
//!
//! Owns: the process's `log::Log` implementation, its level (env `TENURE_LOG` =
//! error|warn|info|debug, default info), the sinks, and the count of dropped lines
//! ([`dropped`], for `/metrics`; [`report_drops`] says it as a `LOG_DROPPED` event).
//! Must never: block (every socket is non-blocking: a full or dead receiver costs
//! the line and one count, never a renewal), or panic (a poisoned lock or a failed
//! write loses one line only).

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use log::{Level, LevelFilter, Log, Metadata, Record};
use syslog::{Facility, Formatter3164, Logger, LoggerBackend};

use crate::events::Severity;

/// The environment variable that sets the level.
pub const LEVEL_ENV: &str = "TENURE_LOG";

/// systemd sets it to `<dev>:<inode>` of the stream it connected stdout/stderr to.
pub const JOURNAL_STREAM_ENV: &str = "JOURNAL_STREAM";

/// Where syslog lines go (`[log]`).
#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// `[log] syslog_socket`: a local datagram socket.
    pub syslog_socket: Option<PathBuf>,
    /// `[log] syslog_udp`: `IP:port` of a syslog receiver (no host names: resolving
    /// would block).
    pub syslog_udp: Option<SocketAddr>,
    /// `[log] syslog_facility` (default `daemon`).
    pub facility: String,
    /// `[log] syslog = false` turns syslog off (stderr only).
    pub syslog: bool,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            syslog_socket: None,
            syslog_udp: None,
            facility: "daemon".into(),
            syslog: true,
        }
    }
}

/// The facility for a name (`daemon`, `local0` ... `local7`, ...), as syslog(3) names them.
pub fn parse_facility(s: &str) -> Option<Facility> {
    s.parse().ok()
}

/// Parse a level name: error, warn, info, debug (case-insensitive).
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    match s.trim().to_ascii_lowercase().as_str() {
        "error" => Some(LevelFilter::Error),
        "warn" | "warning" => Some(LevelFilter::Warn),
        "info" => Some(LevelFilter::Info),
        "debug" => Some(LevelFilter::Debug),
        _ => None,
    }
}

/// The level from `TENURE_LOG`: `Ok(Info)` when unset, `Err` naming a bad value.
pub fn level_from_env() -> Result<LevelFilter, String> {
    match std::env::var(LEVEL_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(LevelFilter::Info),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{LEVEL_ENV} is not valid UTF-8")),
        Ok(v) => parse_level(&v)
            .ok_or_else(|| format!("{LEVEL_ENV}={v:?}: expected one of error, warn, info, debug")),
    }
}

/// Whether `journal_stream` (`JOURNAL_STREAM`'s value) names the file whose
/// device and inode are `dev`, `ino` (sd_journal_stream_fd's convention: a
/// mismatch means stderr was redirected since systemd started us).
pub fn journal_stream_matches(journal_stream: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = journal_stream.trim().split_once(':') else {
        return false;
    };
    d.parse::<u64>().ok() == Some(dev) && i.parse::<u64>().ok() == Some(ino)
}

/// Whether stderr is the journal stream systemd gave us.
fn stderr_is_journal() -> bool {
    let Ok(js) = std::env::var(JOURNAL_STREAM_ENV) else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr()) {
        Ok(st) => journal_stream_matches(&js, st.st_dev, st.st_ino),
        Err(_) => false,
    }
}

/// The `<N>` prefix journald reads for a severity.
pub fn journal_prefix(sev: Severity) -> String {
    format!("<{}>", sev.code())
}

/// The severity of a plain `log` record.
fn record_severity(l: Level) -> Severity {
    match l {
        Level::Error => Severity::Err,
        Level::Warn => Severity::Warning,
        Level::Info => Severity::Info,
        Level::Debug | Level::Trace => Severity::Debug,
    }
}

/// Lines a sink refused (full buffer, dead receiver): counted, never waited for.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The count last said in a `LOG_DROPPED` event.
static REPORTED: AtomicU64 = AtomicU64::new(0);

/// Log lines dropped since start (for `/metrics`: `tenure_log_dropped_total`).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn count_drop() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// Say the lines dropped since the last report as one `LOG_DROPPED` event, at most
/// once per `every` (the loop calls it once per iteration). The event itself may be
/// dropped: it is then counted, and said next time.
pub fn report_drops(now: crate::core::time::Instant, every: Duration) {
    static LAST: Mutex<Option<crate::core::time::Instant>> = Mutex::new(None);
    let total = dropped();
    let before = REPORTED.load(Ordering::Relaxed);
    if total == before {
        return;
    }
    let Ok(mut last) = LAST.lock() else { return };
    if last.is_some_and(|t| now.since(t) < every) {
        return;
    }
    *last = Some(now);
    REPORTED.store(total, Ordering::Relaxed);
    crate::events::emit(&crate::events::Event::LogDropped {
        count: total - before,
    });
}

type Syslog = Logger<LoggerBackend, Formatter3164>;

/// The sinks, set once by [`init`].
struct Sinks {
    level: LevelFilter,
    journal: bool,
    /// `log::Log` must be `Sync`; the agent is single-threaded, so this lock is
    /// never contended.
    syslog: Option<Mutex<Syslog>>,
}

static SINKS: OnceLock<Sinks> = OnceLock::new();

impl Sinks {
    /// One line at `sev`: `event` lines always go; plain records only when their
    /// level is enabled (checked by the caller).
    fn write(&self, sev: Severity, text: &str, plain_level: Option<Level>, to_syslog: bool) {
        if self.journal {
            // Each line once: the journal has it from stderr, with its severity.
            let line = format!("{}{text}\n", journal_prefix(sev));
            write_stderr(line.as_bytes());
            return;
        }
        let t = crate::clock::now();
        let tag = match plain_level {
            Some(Level::Error) => "ERROR",
            Some(Level::Warn) => "WARN ",
            Some(Level::Info) => "INFO ",
            Some(Level::Debug) => "DEBUG",
            Some(Level::Trace) => "TRACE",
            None => "EVENT",
        };
        write_stderr(format!("[{t}] {tag} {text}\n").as_bytes());
        if to_syslog
            && let Some(m) = &self.syslog
            && let Ok(mut s) = m.lock()
        {
            let r = match sev {
                Severity::Emerg => s.emerg(text),
                Severity::Alert => s.alert(text),
                Severity::Crit => s.crit(text),
                Severity::Err => s.err(text),
                Severity::Warning => s.warning(text),
                Severity::Notice => s.notice(text),
                Severity::Info => s.info(text),
                Severity::Debug => s.debug(text),
            };
            if r.is_err() {
                count_drop();
            }
        }
    }
}

/// One write per line so concurrent writers (children) do not interleave within
/// it; a failed or short write (a non-blocking pipe that is full, a closed stderr)
/// loses the line and counts it.
fn write_stderr(b: &[u8]) {
    match std::io::stderr().lock().write(b) {
        Ok(n) if n == b.len() => {}
        _ => count_drop(),
    }
}

/// Forwards `log` records to the sinks.
struct TenureLogger;

impl Log for TenureLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        SINKS.get().is_some_and(|s| metadata.level() <= s.level)
    }

    fn log(&self, record: &Record) {
        let Some(s) = SINKS.get() else { return };
        if record.level() > s.level {
            return;
        }
        let sev = record_severity(record.level());
        let text = record.args().to_string();
        s.write(
            sev,
            &text,
            Some(record.level()),
            record.level() <= Level::Warn,
        );
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Emit one event line at `sev` (whatever the level: events are rare and each one
/// matters). Before [`init`], stderr only.
pub fn emit(sev: Severity, line: &str) {
    match SINKS.get() {
        Some(s) => s.write(sev, line, None, true),
        None => write_stderr(format!("{line}\n").as_bytes()),
    }
}

/// Whether lines go to journald (stderr with `<N>` prefixes) in this process.
pub fn to_journal() -> bool {
    SINKS.get().is_some_and(|s| s.journal)
}

/// The syslog connection `cfg` asks for, non-blocking; `Ok(None)` for none.
fn open_syslog(cfg: &LogConfig) -> Result<Option<Syslog>, String> {
    if !cfg.syslog {
        return Ok(None);
    }
    let facility = parse_facility(&cfg.facility)
        .ok_or_else(|| format!("[log] syslog_facility {:?}: unknown facility", cfg.facility))?;
    let formatter = Formatter3164 {
        facility,
        hostname: None,
        process: "tenure".into(),
        pid: std::process::id(),
    };
    let backend = if let Some(addr) = cfg.syslog_udp {
        let local: SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = std::net::UdpSocket::bind(local)
            .map_err(|e| format!("syslog UDP socket for {addr}: {e}"))?;
        sock.set_nonblocking(true)
            .map_err(|e| format!("syslog UDP socket for {addr}: {e}"))?;
        LoggerBackend::Udp(sock, addr)
    } else {
        let path: &Path = match &cfg.syslog_socket {
            Some(p) => p,
            None if Path::new("/dev/log").exists() => Path::new("/dev/log"),
            None => return Ok(None),
        };
        // A datagram socket only: a stream socket can block mid-line.
        let sock = UnixDatagram::unbound()
            .and_then(|s| s.connect(path).map(|()| s))
            .map_err(|e| format!("cannot connect to syslog socket {}: {e}", path.display()))?;
        // Never block the loop on a slow syslog daemon: drop lines instead.
        sock.set_nonblocking(true)
            .map_err(|e| format!("syslog socket {}: {e}", path.display()))?;
        LoggerBackend::Unix(sock)
    };
    Ok(Some(Logger::new(backend, formatter)))
}

/// Install the logger: journald (stderr with `<N>`) when `JOURNAL_STREAM` matches
/// stderr, else stderr plus syslog as `cfg` says. Call once; `Err` names what failed
/// (a second call, or the socket could not be opened).
pub fn init(level: LevelFilter, cfg: &LogConfig) -> Result<(), String> {
    let journal = stderr_is_journal();
    let syslog = if journal {
        None
    } else {
        open_syslog(cfg)?.map(Mutex::new)
    };
    SINKS
        .set(Sinks {
            level,
            journal,
            syslog,
        })
        .map_err(|_| "logger already installed".to_string())?;
    log::set_boxed_logger(Box::new(TenureLogger))
        .map_err(|e| format!("logger already installed: {e}"))?;
    log::set_max_level(level);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(parse_level("error"), Some(LevelFilter::Error));
        assert_eq!(parse_level("WARN"), Some(LevelFilter::Warn));
        assert_eq!(parse_level("info"), Some(LevelFilter::Info));
        assert_eq!(parse_level(" debug "), Some(LevelFilter::Debug));
        assert_eq!(parse_level("loud"), None);
    }

    #[test]
    fn journal_stream_must_name_stderr() {
        assert!(journal_stream_matches("8:1234", 8, 1234));
        assert!(journal_stream_matches("8:1234\n", 8, 1234));
        assert!(!journal_stream_matches("8:1235", 8, 1234));
        assert!(!journal_stream_matches("9:1234", 8, 1234));
        assert!(!journal_stream_matches("garbage", 8, 1234));
        assert!(!journal_stream_matches("", 8, 1234));
    }

    #[test]
    fn journal_prefixes_are_the_severity_numbers() {
        assert_eq!(journal_prefix(Severity::Alert), "<1>");
        assert_eq!(journal_prefix(Severity::Crit), "<2>");
        assert_eq!(journal_prefix(Severity::Warning), "<4>");
        assert_eq!(journal_prefix(Severity::Notice), "<5>");
        assert_eq!(record_severity(Level::Error), Severity::Err);
        assert_eq!(record_severity(Level::Info), Severity::Info);
    }

    #[test]
    fn facilities_parse() {
        assert!(matches!(
            parse_facility("daemon"),
            Some(Facility::LOG_DAEMON)
        ));
        assert!(matches!(
            parse_facility("local3"),
            Some(Facility::LOG_LOCAL3)
        ));
        assert!(parse_facility("nope").is_none());
    }

    /// A receiver that never reads: the sends fail at once (non-blocking) and
    /// every lost line is counted; none waits.
    #[test]
    fn a_full_syslog_socket_drops_and_counts_without_blocking() {
        let dir = crate::testbed::scratch_dir("logging-full").expect("scratch dir");
        let path = dir.join("full.sock");
        let _rx = UnixDatagram::bind(&path).expect("bind");
        let cfg = LogConfig {
            syslog_socket: Some(path.clone()),
            ..LogConfig::default()
        };
        let s = open_syslog(&cfg).expect("open").expect("a logger");
        let sinks = Sinks {
            level: LevelFilter::Info,
            journal: false,
            syslog: Some(Mutex::new(s)),
        };
        let before = dropped();
        let start = std::time::Instant::now();
        let long = "x".repeat(200);
        for i in 0..2000 {
            sinks.write(Severity::Err, &format!("line {i} {long}"), None, true);
        }
        // The default datagram queue holds a few hundred lines at most.
        assert!(
            dropped() - before > 100,
            "a receiver that never reads must cost counted lines"
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "sending must never wait for the receiver"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn syslog_lines_arrive_on_the_socket_with_their_severities() {
        let dir = crate::testbed::scratch_dir("logging").expect("scratch dir");
        let path = dir.join("log.sock");
        let rx = UnixDatagram::bind(&path).expect("bind");
        rx.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let cfg = LogConfig {
            syslog_socket: Some(path.clone()),
            facility: "local1".into(),
            ..LogConfig::default()
        };
        init(LevelFilter::Info, &cfg).expect("init");
        log::info!("stays on stderr");
        log::warn!("lease lost: fenced");
        crate::events::set_identity("demo", "pg2");
        crate::events::emit(&crate::events::Event::Promoted {
            epoch: 73,
            after: None,
        });
        let mut buf = [0u8; 1024];
        let n = rx.recv(&mut buf).expect("a syslog datagram");
        let msg = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(msg.contains("tenure["), "{msg}");
        assert!(msg.contains("lease lost: fenced"), "{msg}");
        // LOG_LOCAL1 (17) × 8 + warning (4) = 140.
        assert!(msg.starts_with("<140>"), "{msg}");
        let n = rx.recv(&mut buf).expect("the event's datagram");
        let msg = String::from_utf8_lossy(&buf[..n]).to_string();
        // × 8 + notice (5) = 141, the event's name first in the message.
        assert!(msg.starts_with("<141>"), "{msg}");
        assert!(
            msg.contains("]: PROMOTED scope=demo member=pg2 epoch=73"),
            "{msg}"
        );
        assert!(init(LevelFilter::Info, &LogConfig::default()).is_err());
        // The counter only goes up, and report_drops says nothing when nothing was lost.
        let d = dropped();
        report_drops(crate::clock::now(), Duration::ZERO);
        assert!(dropped() >= d);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
