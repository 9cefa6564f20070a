//! systemd's notify protocol (sd_notify(3)), without a crate: datagrams of
//! `KEY=VALUE` lines to the socket named by `NOTIFY_SOCKET`.
//!
//! Owns: reading `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`, one unbound
//! non-blocking `UnixDatagram` made once, and one reused message buffer.
//! Must never: block the loop (a full or dead socket drops the message and counts it),
//! allocate per message in steady state, or decide when `WATCHDOG=1` is due: on the
//! leader that follows S2's pet rule, on a replica it only proves the loop is alive
//! (DESIGN §5); the agent decides.

use std::fmt;
use std::io::{self, Write as _};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Why the notify environment was refused. Each names the variable and the value.
#[derive(Debug)]
pub enum NotifyError {
    /// A variable's value is not what systemd would set.
    Bad {
        var: &'static str,
        value: String,
        why: &'static str,
    },
    /// A variable is not valid UTF-8.
    NotUnicode { var: &'static str },
    /// Creating the datagram socket failed.
    Socket { socket: String, error: io::Error },
}

impl fmt::Display for NotifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotifyError::Bad { var, value, why } => write!(f, "{var}={value:?}: {why}"),
            NotifyError::NotUnicode { var } => write!(f, "{var}: not valid UTF-8"),
            NotifyError::Socket { socket, error } => {
                write!(
                    f,
                    "NOTIFY_SOCKET={socket:?}: cannot create a socket: {error}"
                )
            }
        }
    }
}

impl std::error::Error for NotifyError {}

/// A handle on systemd's notify socket; every call is a silent no-op when the
/// service manager gave none.
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog_usec: Option<Duration>,
    buf: Vec<u8>,
    sent: u64,
    dropped: u64,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field("enabled", &self.target.is_some())
            .field("watchdog_usec", &self.watchdog_usec)
            .field("sent", &self.sent)
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// Longest `STATUS=` text sent (systemd shows one line; the rest is cut, at a char
/// boundary, so the buffer never grows past its first size).
const STATUS_MAX: usize = 512;

impl Notifier {
    /// From the process environment (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`)
    /// and our own pid.
    pub fn from_env() -> Result<Notifier, NotifyError> {
        fn var(name: &'static str) -> Result<Option<String>, NotifyError> {
            match std::env::var(name) {
                Ok(v) => Ok(Some(v)),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => {
                    Err(NotifyError::NotUnicode { var: name })
                }
            }
        }
        let socket = var("NOTIFY_SOCKET")?;
        let usec = var("WATCHDOG_USEC")?;
        let pid = var("WATCHDOG_PID")?;
        Notifier::from_values(
            socket.as_deref(),
            usec.as_deref(),
            pid.as_deref(),
            std::process::id(),
        )
    }

    /// From explicit values (tests run in parallel and must not share the process
    /// environment). `socket`: a path (`/run/systemd/notify`) or an abstract name
    /// (`@name`); `None` or empty: no service manager, every call is a no-op.
    /// `watchdog_usec` is honoured only when `watchdog_pid` is absent or `my_pid`.
    pub fn from_values(
        socket: Option<&str>,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
        my_pid: u32,
    ) -> Result<Notifier, NotifyError> {
        let for_us =
            match watchdog_pid {
                None => true,
                Some(p) => {
                    let pid: u32 = p.trim().parse().ok().filter(|&p| p > 0).ok_or_else(|| {
                        NotifyError::Bad {
                            var: "WATCHDOG_PID",
                            value: p.to_string(),
                            why: "not a positive process id",
                        }
                    })?;
                    pid == my_pid
                }
            };
        let watchdog_usec =
            match watchdog_usec {
                Some(u) if for_us => {
                    let n: u64 = u.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        NotifyError::Bad {
                            var: "WATCHDOG_USEC",
                            value: u.to_string(),
                            why: "not a positive number of microseconds",
                        }
                    })?;
                    Some(Duration::from_micros(n))
                }
                _ => None,
            };
        let target = match socket {
            None | Some("") => None,
            Some(s) => {
                let addr = if let Some(name) = s.strip_prefix('@') {
                    // Abstract namespace: the leading '@' stands for the NUL byte.
                    SocketAddr::from_abstract_name(name.as_bytes())
                } else if s.starts_with('/') {
                    SocketAddr::from_pathname(s)
                } else {
                    return Err(NotifyError::Bad {
                        var: "NOTIFY_SOCKET",
                        value: s.to_string(),
                        why: "neither an absolute path nor an abstract name (@name)",
                    });
                }
                .map_err(|_| NotifyError::Bad {
                    var: "NOTIFY_SOCKET",
                    value: s.to_string(),
                    why: "not a valid Unix socket address (too long, or contains NUL)",
                })?;
                let sock = UnixDatagram::unbound().map_err(|error| NotifyError::Socket {
                    socket: s.to_string(),
                    error,
                })?;
                sock.set_nonblocking(true)
                    .map_err(|error| NotifyError::Socket {
                        socket: s.to_string(),
                        error,
                    })?;
                Some((sock, addr))
            }
        };
        Ok(Notifier {
            target,
            watchdog_usec,
            buf: Vec::with_capacity(STATUS_MAX + 64),
            sent: 0,
            dropped: 0,
        })
    }

    /// Whether there is a service manager to talk to.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// `WATCHDOG_USEC` when it was meant for this process: systemd expects
    /// `WATCHDOG=1` well within it.
    pub fn watchdog_usec(&self) -> Option<Duration> {
        self.watchdog_usec
    }

    /// Messages handed to the socket.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Messages dropped (full queue, no listener, any send error).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// `READY=1`: start-up finished (also ends a reload).
    pub fn ready(&mut self) {
        self.send_fixed(b"READY=1");
    }

    /// `STOPPING=1`: a clean stop began.
    pub fn stopping(&mut self) {
        self.send_fixed(b"STOPPING=1");
    }

    /// `WATCHDOG=1`: the service watchdog's keepalive.
    pub fn watchdog(&mut self) {
        self.send_fixed(b"WATCHDOG=1");
    }

    /// `WATCHDOG_USEC=<w>`: replace the unit's `WatchdogSec=` for this run
    /// (systemd >= 236; a restart of the unit goes back to `WatchdogSec=`). True only
    /// when the message was handed to the socket; only then does
    /// [`Notifier::watchdog_usec`] report `w`, so the `W` the agent plays is never one
    /// systemd was not told (S2). Without a socket, or when the send is dropped,
    /// nothing changes.
    pub fn override_watchdog_usec(&mut self, w: Duration) -> bool {
        if self.target.is_none() || w.is_zero() {
            return false;
        }
        self.buf.clear();
        self.buf.extend_from_slice(b"WATCHDOG_USEC=");
        // Writing into a Vec with spare capacity does not allocate or fail.
        let _ = write!(self.buf, "{}", w.as_micros());
        let sent = self.sent;
        self.flush();
        if self.sent == sent {
            return false;
        }
        self.watchdog_usec = Some(w);
        true
    }

    /// `RELOADING=1` with `MONOTONIC_USEC` (required by `Type=notify-reload`); send
    /// [`Notifier::ready`] when the reload is done.
    pub fn reloading(&mut self) {
        if self.target.is_none() {
            return;
        }
        let usec = crate::clock::monotonic().as_micros();
        self.buf.clear();
        self.buf.extend_from_slice(b"RELOADING=1\nMONOTONIC_USEC=");
        // Writing into a Vec with spare capacity does not allocate or fail.
        let _ = write!(self.buf, "{usec}");
        self.flush();
    }

    /// `STATUS=<text>`: one line for `systemctl status`. Newlines (and other control
    /// characters) become spaces; text longer than 512 bytes is cut.
    pub fn status(&mut self, text: &str) {
        if self.target.is_none() {
            return;
        }
        self.buf.clear();
        self.buf.extend_from_slice(b"STATUS=");
        let mut cut = text.len().min(STATUS_MAX);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.buf.extend(
            text[..cut]
                .bytes()
                .map(|b| if b.is_ascii_control() { b' ' } else { b }),
        );
        self.flush();
    }

    fn send_fixed(&mut self, msg: &[u8]) {
        if self.target.is_none() {
            return;
        }
        self.buf.clear();
        self.buf.extend_from_slice(msg);
        self.flush();
    }

    fn flush(&mut self) {
        let Some((sock, addr)) = &self.target else {
            return;
        };
        // Non-blocking: EAGAIN (the manager's queue is full), ECONNREFUSED or ENOENT
        // (nobody listens) and the rest are dropped and counted, never waited on.
        match sock.send_to_addr(&self.buf, addr) {
            Ok(n) if n == self.buf.len() => self.sent += 1,
            Ok(_) | Err(_) => self.dropped += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn recv_all(rx: &UnixDatagram) -> Vec<String> {
        rx.set_nonblocking(true).expect("nonblocking");
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = rx.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    fn unique(tag: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        format!(
            "tenure-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    #[test]
    fn path_socket_receives_exactly_the_messages() {
        let dir = crate::testbed::scratch_dir("notify").expect("scratch dir");
        let path = dir.join("notify.sock");
        let rx = UnixDatagram::bind(&path).expect("bind");
        let p = path.to_str().expect("utf-8 path");
        let mut n = Notifier::from_values(Some(p), None, None, 1).expect("notifier");
        assert!(n.enabled());
        n.ready();
        n.status("leader with the lock\nlease valid 8.7 s");
        n.watchdog();
        n.reloading();
        n.stopping();
        let got = recv_all(&rx);
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(got[0], "READY=1");
        assert_eq!(got[1], "STATUS=leader with the lock lease valid 8.7 s");
        assert_eq!(got[2], "WATCHDOG=1");
        let (first, usec) = got[3].split_once('\n').expect("two lines");
        assert_eq!(first, "RELOADING=1");
        let usec = usec
            .strip_prefix("MONOTONIC_USEC=")
            .expect("MONOTONIC_USEC");
        assert!(usec.parse::<u64>().expect("number") > 0);
        assert_eq!(got[4], "STOPPING=1");
        assert_eq!((n.sent(), n.dropped()), (5, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn abstract_socket_names_work() {
        let name = unique("abstract");
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let rx = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        let mut n =
            Notifier::from_values(Some(&format!("@{name}")), None, None, 1).expect("notifier");
        n.watchdog();
        assert_eq!(recv_all(&rx), ["WATCHDOG=1"]);
    }

    #[test]
    fn watchdog_usec_override_is_reported_only_once_sent() {
        let name = unique("override");
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let rx = UnixDatagram::bind_addr(&addr).expect("bind");
        let mut n = Notifier::from_values(Some(&format!("@{name}")), Some("13000000"), None, 1)
            .expect("notifier");
        assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(13)));
        assert!(n.override_watchdog_usec(Duration::from_secs(3)));
        assert_eq!(recv_all(&rx), ["WATCHDOG_USEC=3000000"]);
        assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(3)));
        assert!(
            !n.override_watchdog_usec(Duration::ZERO),
            "0 would turn it off"
        );
        assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(3)));

        // Nobody told: the unit's value stays the one in force.
        let mut n = Notifier::from_values(None, Some("13000000"), None, 1).expect("notifier");
        assert!(!n.override_watchdog_usec(Duration::from_secs(3)));
        assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(13)));
        let dir = crate::testbed::scratch_dir("notify-override").expect("scratch dir");
        let gone = dir.join("gone.sock");
        let mut n =
            Notifier::from_values(gone.to_str(), Some("13000000"), None, 1).expect("notifier");
        assert!(!n.override_watchdog_usec(Duration::from_secs(3)));
        assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(13)));
        assert_eq!((n.sent(), n.dropped()), (0, 1));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_socket_is_a_silent_no_op() {
        for s in [None, Some("")] {
            let mut n = Notifier::from_values(s, Some("1000000"), None, 1).expect("notifier");
            assert!(!n.enabled());
            n.ready();
            n.status("x");
            n.watchdog();
            n.reloading();
            n.stopping();
            assert_eq!((n.sent(), n.dropped()), (0, 0));
            // WATCHDOG_USEC is still reported: the agent may log the mismatch.
            assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(1)));
        }
    }

    #[test]
    fn watchdog_usec_only_for_our_pid() {
        let n = Notifier::from_values(None, Some("20000000"), Some("42"), 42).expect("ok");
        assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(20)));
        let n = Notifier::from_values(None, Some("20000000"), None, 42).expect("ok");
        assert_eq!(n.watchdog_usec(), Some(Duration::from_secs(20)));
        let n = Notifier::from_values(None, Some("20000000"), Some("43"), 42).expect("ok");
        assert_eq!(n.watchdog_usec(), None);
        // Meant for another process: its value is not ours to judge.
        let n = Notifier::from_values(None, Some("garbage"), Some("43"), 42).expect("ok");
        assert_eq!(n.watchdog_usec(), None);
        let n = Notifier::from_values(None, None, Some("42"), 42).expect("ok");
        assert_eq!(n.watchdog_usec(), None);
    }

    #[test]
    fn garbage_values_name_the_variable() {
        for (s, u, p, var) in [
            (None, Some("ten"), None, "WATCHDOG_USEC"),
            (None, Some("0"), None, "WATCHDOG_USEC"),
            (None, Some("-5"), None, "WATCHDOG_USEC"),
            (None, Some("5"), Some("pid1"), "WATCHDOG_PID"),
            (None, Some("5"), Some("0"), "WATCHDOG_PID"),
            (Some("relative/path"), None, None, "NOTIFY_SOCKET"),
            (Some("vsock:2:1234"), None, None, "NOTIFY_SOCKET"),
        ] {
            let e = Notifier::from_values(s, u, p, 42).expect_err("refused");
            let msg = e.to_string();
            assert!(msg.starts_with(var), "{msg}");
        }
        let long = format!("/{}", "x".repeat(200));
        let e = Notifier::from_values(Some(&long), None, None, 1).expect_err("too long");
        assert!(e.to_string().starts_with("NOTIFY_SOCKET"), "{e}");
    }

    #[test]
    fn dead_socket_drops_and_counts() {
        let dir = crate::testbed::scratch_dir("notify-dead").expect("scratch dir");
        let path = dir.join("gone.sock");
        drop(UnixDatagram::bind(&path).expect("bind")); // the file stays, nobody listens
        let mut n = Notifier::from_values(path.to_str(), None, None, 1).expect("notifier");
        n.ready();
        n.watchdog();
        assert_eq!((n.sent(), n.dropped()), (0, 2));
        let missing = dir.join("missing.sock");
        let mut n = Notifier::from_values(missing.to_str(), None, None, 1).expect("notifier");
        n.ready();
        assert_eq!((n.sent(), n.dropped()), (0, 1));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn full_socket_never_blocks() {
        let name = unique("full");
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let _rx = UnixDatagram::bind_addr(&addr).expect("bind"); // never read
        let mut n = Notifier::from_values(Some(&format!("@{name}")), None, None, 1).expect("ok");
        for _ in 0..5000 {
            n.watchdog();
        }
        assert!(
            n.dropped() > 0,
            "the queue filled up and sends were dropped"
        );
        assert_eq!(n.sent() + n.dropped(), 5000);
    }

    #[test]
    fn status_is_one_line_and_bounded() {
        let name = unique("status");
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let rx = UnixDatagram::bind_addr(&addr).expect("bind");
        let mut n = Notifier::from_values(Some(&format!("@{name}")), None, None, 1).expect("ok");
        let cap = n.buf.capacity();
        n.status(&"é".repeat(1000)); // 2000 bytes, cut at a char boundary
        n.status("a\r\nb\tc");
        let got = recv_all(&rx);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), "STATUS=".len() + 512);
        assert!(!got[0].contains('\u{fffd}'), "cut at a char boundary");
        assert_eq!(got[1], "STATUS=a  b c");
        assert_eq!(n.buf.capacity(), cap, "the buffer never grew");
    }
}
