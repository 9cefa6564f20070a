//! Logging: one line per record on stderr, and warnings and above to syslog when
//! `[log] syslog_socket` is configured.
//!
//! Owns: the process's `log::Log` implementation and its level (env `TENURE_LOG` =
//! error|warn|info|debug, default info). Must never: block the loop (the syslog
//! socket is non-blocking: a full or dead receiver drops the line, it never stalls
//! a renewal) or panic (a poisoned lock or a failed write loses one line only).

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};
use syslog::{Formatter3164, Logger, LoggerBackend};

/// The environment variable that sets the level.
pub const LEVEL_ENV: &str = "TENURE_LOG";

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

struct TenureLogger {
    level: LevelFilter,
    /// `log::Log` must be `Sync`; the agent is single-threaded, so this lock is
    /// never contended.
    syslog: Option<Mutex<Logger<LoggerBackend, Formatter3164>>>,
}

impl Log for TenureLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let t = crate::clock::now();
        let level = match record.level() {
            Level::Error => "ERROR",
            Level::Warn => "WARN ",
            Level::Info => "INFO ",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        };
        // One write per line so concurrent writers (children) do not interleave
        // within it; errors (closed stderr) lose the line, nothing else.
        let line = format!("[{t}] {level} {}\n", record.args());
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
        if record.level() <= Level::Warn
            && let Some(m) = &self.syslog
            && let Ok(mut s) = m.lock()
        {
            let msg = record.args().to_string();
            let _ = match record.level() {
                Level::Error => s.err(msg),
                _ => s.warning(msg),
            };
        }
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Install the logger: stderr at `level`, plus warn and above to the syslog
/// socket at `syslog_socket` (datagram or stream). Call once; `Err` names what
/// failed (a second call, or the socket could not be connected).
pub fn init(level: LevelFilter, syslog_socket: Option<&Path>) -> Result<(), String> {
    let syslog = match syslog_socket {
        None => None,
        Some(path) => {
            let formatter = Formatter3164 {
                facility: syslog::Facility::LOG_DAEMON,
                hostname: None,
                process: "tenure".into(),
                pid: std::process::id(),
            };
            let logger = syslog::unix_custom(formatter, path)
                .map_err(|e| format!("cannot connect to syslog socket {}: {e}", path.display()))?;
            // Never block the loop on a slow syslog daemon: drop lines instead.
            let nb = match &logger.backend {
                LoggerBackend::Unix(s) => s.set_nonblocking(true),
                LoggerBackend::UnixStream(w) => w.get_ref().set_nonblocking(true),
                _ => Ok(()),
            };
            nb.map_err(|e| format!("syslog socket {}: {e}", path.display()))?;
            Some(Mutex::new(logger))
        }
    };
    log::set_boxed_logger(Box::new(TenureLogger { level, syslog }))
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
    fn syslog_lines_arrive_on_the_socket() {
        let dir = crate::testbed::scratch_dir("logging").expect("scratch dir");
        let path = dir.join("log.sock");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).expect("bind");
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        init(LevelFilter::Info, Some(&path)).expect("init");
        log::info!("stays on stderr");
        log::warn!("lease lost: fenced");
        let mut buf = [0u8; 1024];
        let n = rx.recv(&mut buf).expect("a syslog datagram");
        let msg = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(msg.contains("tenure"), "{msg}");
        assert!(msg.contains("lease lost: fenced"), "{msg}");
        // LOG_DAEMON (3) × 8 + warning (4) = 28.
        assert!(msg.starts_with("<28>"), "{msg}");
        assert!(init(LevelFilter::Info, None).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
