//! Host names of etcd endpoints, resolved in a child process (issue 12, "Host
//! names").
//!
//! Owns: the resolver child (`tenure __resolve SECS NAME...`, a re-exec of
//! `/proc/self/exe`), reading its answers without blocking, killing it at its
//! deadline and reaping it; and, for one-shot commands, turning endpoints into
//! addresses within a deadline ([`targets_now`]). Must never: call the system's
//! resolver in this process, block the agent's loop on a child (the loop only
//! polls, [`Resolver::service`]; only start-up and one-shot commands, which hold
//! no lease, wait, and never past their deadline), or leave a child unreaped
//! that it signalled (a pid is only signalled while it is still our unreaped
//! child, so it cannot have been reused).
//!
//! Why a child process and not the runtime's resolver or an async DNS crate:
//! - tonic/hyper-util resolve a name with `GaiResolver`, which runs `getaddrinfo`
//!   under `tokio::task::spawn_blocking`. A current-thread runtime still has a
//!   blocking pool: `spawn_blocking` starts an OS thread on demand (tokio's
//!   `Builder::new_current_thread` docs), and DESIGN §5 allows one thread per
//!   process. So the client is only ever given IP addresses (hyper skips the
//!   resolver for an IP literal) and TLS is given the name to check.
//! - An async DNS crate (hickory-resolver) would run on the loop's runtime without
//!   a thread, but it is a second resolver with its own rules: it reads
//!   `/etc/hosts` and `resolv.conf` itself and ignores nsswitch (LDAP, mDNS,
//!   systemd-resolved's `nss-resolve`, `myhostname`), so a name could resolve one
//!   way for tenure and another for `ping` and `etcdctl` on the same host. And it
//!   is a large dependency tree for a lookup made at start-up and after a failure.
//! - A child calls the C library's `getaddrinfo` through `ToSocketAddrs`, exactly
//!   as every other program on the host does (nsswitch, `/etc/hosts`, and the
//!   files `ip netns exec` bind-mounts from `/etc/netns/<ns>/`). It is started
//!   with `posix_spawn` (std's `Command` uses it: no copy of the agent's memory),
//!   costs about a millisecond of the loop's time, and whatever it waits for, it
//!   waits in its own process: the loop reads its pipe only when it is readable,
//!   kills it at its deadline, and keeps the last good addresses meanwhile.
//!   The child also sets an `alarm` for its own deadline (rounded up, plus a
//!   second), so one whose parent died, or polls late, never outlives it by long;
//!   a child that ended so is counted as timed out.
//!
//! Wire format (child → parent, one line per name, in the order asked):
//! `NAME ADDR ADDR ...` or `NAME !why it failed`.
//!
//! DNS SRV discovery (`[etcd] srv`) takes the same way: `tenure __resolve_srv
//! SECS NAME` answers `NAME HOST:PORT HOST:PORT ...` (the records' targets in the
//! order RFC 2782 says to try them), asked with the C library's `res_query(3)` in
//! the child, so `resolv.conf` counts as it does for every other program; the
//! answer is parsed with the `simple-dns` crate (a DNS message parser is a format
//! of its own, with name compression; not one to keep by hand). The targets are
//! then host names like any other endpoint's.

use std::io::{Read, Write};
use std::net::{IpAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::time::Duration;

use crate::clock;
use crate::config::{DEFAULT_RESOLVE_TIMEOUT, Endpoint, Host};
use crate::core::time::Instant;

/// The hidden subcommand `main` hands to [`child_main`].
pub const SUBCOMMAND: &str = "__resolve";
/// The hidden subcommand `main` hands to [`srv_child_main`].
pub const SRV_SUBCOMMAND: &str = "__resolve_srv";
/// Most targets kept from one SRV answer (an etcd cluster has a handful).
const MAX_TARGETS: usize = 64;

/// What a resolver child answers per name: one token of its line.
pub trait Token: Sized + Clone + PartialEq + std::fmt::Debug {
    /// The hidden subcommand that answers with this kind of token.
    const SUBCOMMAND: &'static str;
    /// Why a line with no token is no answer.
    const NONE: &'static str;
    /// A second line for the same name refines the first (the child writes what
    /// it has, then more: a parent that kills it keeps the first).
    const REFINED: bool = false;
    fn parse(tok: &str) -> Option<Self>;
}

impl Token for IpAddr {
    const SUBCOMMAND: &'static str = SUBCOMMAND;
    const NONE: &'static str = "no address";
    fn parse(tok: &str) -> Option<Self> {
        tok.parse().ok()
    }
}

/// One SRV record's target: a host name and a port, and the addresses the
/// child resolved the name to (empty: it did not resolve; the name is then
/// resolved on its own, as any endpoint's). Resolving in the same child saves a
/// loop when the list moves (review of the SRV change, finding 8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvTarget {
    pub host: String,
    pub port: u16,
    pub addrs: Vec<IpAddr>,
}

impl Token for SrvTarget {
    const SUBCOMMAND: &'static str = SRV_SUBCOMMAND;
    const NONE: &'static str = "no SRV record";
    // The targets first, then again with their addresses (second review, M2: a
    // target name slow to resolve must not cost the whole answer).
    const REFINED: bool = true;
    /// `HOST:PORT` or `HOST:PORT@ADDR,ADDR...`.
    fn parse(tok: &str) -> Option<Self> {
        let (target, addrs) = match tok.split_once('@') {
            Some((t, a)) => {
                let addrs: Option<Vec<IpAddr>> = a.split(',').map(|x| x.parse().ok()).collect();
                (t, addrs?)
            }
            None => (tok, Vec::new()),
        };
        let (host, port) = target.rsplit_once(':')?;
        let port = port.parse().ok().filter(|p| *p != 0)?;
        host_name_ok(host).then(|| SrvTarget {
            host: host.to_string(),
            port,
            addrs,
        })
    }
}

impl std::fmt::Display for SrvTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)?;
        for (k, a) in self.addrs.iter().enumerate() {
            write!(f, "{}{a}", if k == 0 { '@' } else { ',' })?;
        }
        Ok(())
    }
}

/// A DNS host name this crate will put in a URL: exactly what an `[etcd]
/// endpoints` entry may name (`config::endpoint`'s rule: labels of letters,
/// digits, `-`, `_`, not starting or ending with `-`, no all-digit last label),
/// so an SRV target is never an entry the endpoint parser refuses later.
pub fn host_name_ok(h: &str) -> bool {
    crate::config::check_host_name(h).is_ok()
}

/// Most output a resolver child may write (a few hundred addresses): more is
/// garbage, and the child is killed.
const MAX_OUTPUT: usize = 64 * 1024;
/// Most names one child resolves (`[etcd] endpoints` is a handful).
const MAX_NAMES: usize = 64;

/// What one name resolved to: its addresses (deduplicated, in the resolver's
/// order) or SRV targets, or why not.
pub type AnswerOf<T> = (String, Result<Vec<T>, String>);
/// A host name's answer.
pub type Answer = AnswerOf<IpAddr>;

/// The outcome of a lookup, once it is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T = IpAddr> {
    /// The child answered for every name (each answer may still be a failure).
    Done(Vec<AnswerOf<T>>),
    /// The deadline passed: the child was killed. The names it had answered by
    /// then are kept.
    TimedOut(Vec<AnswerOf<T>>),
    /// The child could not be started, or died without answering.
    Failed(String),
}

/// One resolver child in flight.
pub struct Lookup<T = IpAddr> {
    child: Child,
    out: ChildStdout,
    buf: Vec<u8>,
    names: Vec<String>,
    started: Instant,
    deadline: Instant,
    kind: std::marker::PhantomData<T>,
}

impl<T: Token> Lookup<T> {
    /// Start `tenure __resolve` (or `__resolve_srv`) for `names`, to be done by
    /// `deadline`.
    pub fn start(names: &[String], deadline: Instant) -> Result<Lookup<T>, String> {
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("tenure").arg(T::SUBCOMMAND);
        Lookup::start_with(cmd, names, deadline)
    }

    /// [`Lookup::start`] with another program (tests). `cmd` gets the child's
    /// own deadline in whole seconds and the names as arguments.
    pub fn start_with(
        mut cmd: Command,
        names: &[String],
        deadline: Instant,
    ) -> Result<Lookup<T>, String> {
        let names: Vec<String> = names.iter().take(MAX_NAMES).cloned().collect();
        let now = clock::now();
        // The child's own end: its deadline rounded up, plus a second, so the
        // parent (which polls at its loop's pace) normally kills it first.
        let left = now.until(deadline);
        let secs = left
            .as_secs()
            .saturating_add(u64::from(left.subsec_nanos() > 0))
            .saturating_add(1);
        cmd.arg(secs.to_string())
            .args(&names)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env_remove("RUST_BACKTRACE");
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the resolver: {e}"))?;
        let Some(out) = child.stdout.take() else {
            kill_and_reap(&mut child);
            return Err("resolver: no pipe".into());
        };
        if let Err(e) = set_nonblocking(&out) {
            kill_and_reap(&mut child);
            return Err(format!("resolver pipe: {e}"));
        }
        Ok(Lookup {
            child,
            out,
            buf: Vec::new(),
            names,
            started: now,
            deadline,
            kind: std::marker::PhantomData,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    /// The names asked.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Read what the child wrote so far without blocking. `Ok(true)`: end of
    /// output.
    fn drain(&mut self) -> Result<bool, String> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.out.read(&mut chunk) {
                Ok(0) => return Ok(true),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf.len() > MAX_OUTPUT {
                        return Err(format!("resolver wrote more than {MAX_OUTPUT} bytes"));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("resolver pipe: {e}")),
            }
        }
    }

    /// Never blocks. `None`: still running and its deadline not reached. Past
    /// the deadline the child is killed and what it answered is kept. The child
    /// is handed back for reaping (it may not have exited yet).
    pub fn poll(&mut self, now: Instant) -> Option<Outcome<T>> {
        match self.drain() {
            Ok(true) => {
                let answers = parse_output(&self.buf, &self.names);
                if answers.len() == self.names.len() {
                    Some(Outcome::Done(answers))
                } else if now >= self.deadline {
                    // Its own alarm (set past the deadline) ended it before we
                    // polled: a timeout all the same.
                    Some(Outcome::TimedOut(answers))
                } else {
                    Some(Outcome::Failed(format!(
                        "resolver ended after {} of {} names",
                        answers.len(),
                        self.names.len()
                    )))
                }
            }
            Ok(false) if now >= self.deadline => {
                let _ = self.child.kill();
                Some(Outcome::TimedOut(parse_output(&self.buf, &self.names)))
            }
            Ok(false) => None,
            Err(e) => {
                let _ = self.child.kill();
                Some(Outcome::Failed(e))
            }
        }
    }

    /// Wait for the outcome, at most until the deadline (poll(2) on the pipe).
    /// Only where no lease is held: start-up and one-shot commands. The child is
    /// killed and reaped before this returns.
    pub fn wait(mut self) -> Outcome<T> {
        loop {
            let now = clock::now();
            if let Some(o) = self.poll(now) {
                kill_and_reap(&mut self.child);
                return o;
            }
            let left = now.until(self.deadline).max(Duration::from_millis(1));
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
            let mut pfd = libc::pollfd {
                fd: self.out.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is one valid pollfd on our stack for the length of the
            // call; the fd is our pipe's, open while `self.out` lives.
            let _ = unsafe { libc::poll(&mut pfd, 1, ms) };
        }
    }

    /// Give the child up for reaping: the caller's [`Resolver`] reaps it.
    fn into_child(self) -> Child {
        self.child
    }
}

/// `read` on the pipe must never block the loop.
fn set_nonblocking(out: &ChildStdout) -> std::io::Result<()> {
    let fd = out.as_raw_fd();
    // SAFETY: fcntl on a file descriptor we own (the child's stdout pipe), with
    // integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// SIGKILL (harmless if it already exited: it is still our unreaped child) and
/// reap, waiting at most 100 ms: a killed resolver is gone within milliseconds;
/// one stuck in the kernel stays a zombie until the process exits (only
/// start-up, one-shot commands and `Drop` call this; the loop's
/// [`Resolver::service`] reaps without waiting).
fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    for _ in 0..50 {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The child's lines, matched to the names asked in order; garbage lines end the
/// parse (what came before is kept).
fn parse_output<T: Token>(buf: &[u8], names: &[String]) -> Vec<AnswerOf<T>> {
    let text = String::from_utf8_lossy(buf);
    let mut out = Vec::new();
    // Only complete lines: a killed child may have written half of one.
    let complete = match text.rfind('\n') {
        Some(i) => &text[..i],
        None => "",
    };
    for line in complete.lines() {
        let Some((name, rest)) = line.split_once(' ') else {
            break;
        };
        let refines = T::REFINED && out.last().is_some_and(|(n, _): &AnswerOf<T>| n == name);
        if !refines && names.get(out.len()).is_none_or(|want| name != want) {
            break;
        }
        let answer = match rest.strip_prefix('!') {
            Some(why) => Err(why.to_string()),
            None => {
                let toks: Option<Vec<T>> = rest.split_whitespace().map(T::parse).collect();
                match toks {
                    Some(a) if a.is_empty() => Err(T::NONE.to_string()),
                    Some(a) => Ok(a),
                    None => break,
                }
            }
        };
        if refines {
            if let (Some(last), Ok(_)) = (out.last_mut(), &answer) {
                last.1 = answer;
            }
        } else {
            out.push((name.to_string(), answer));
        }
    }
    out
}

/// `tenure __resolve SECS NAME...`: resolve each name with the C library (as
/// every program on this host would) and print one line per name. Exits by
/// itself after `SECS` seconds (SIGALRM) if nobody killed it before.
pub fn child_main(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    answer_lines(args, |name, _| {
        let mut addrs: Vec<IpAddr> = Vec::new();
        for a in (name, 0u16).to_socket_addrs().map_err(|e| e.to_string())? {
            if !addrs.contains(&a.ip()) {
                addrs.push(a.ip());
            }
        }
        if addrs.is_empty() {
            return Err("no address".into());
        }
        Ok(addrs.iter().map(IpAddr::to_string).collect())
    })
}

/// `tenure __resolve_srv SECS NAME...`: the SRV records of each name, asked with
/// the C library's `res_query(3)`, and each target's addresses (`getaddrinfo`,
/// as for any name), one line per name (`NAME HOST:PORT@ADDR,ADDR ...`; a target
/// whose name did not resolve goes without `@`).
pub fn srv_child_main(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    answer_lines(args, |name, first| {
        let mut targets = srv_query(name)?;
        // The targets alone first: a name slow to resolve below costs only its
        // addresses, not the answer (second review, M2).
        first(targets.iter().map(SrvTarget::to_string).collect());
        for t in &mut targets {
            if let Ok(it) = (t.host.as_str(), 0u16).to_socket_addrs() {
                for a in it {
                    if !t.addrs.contains(&a.ip()) {
                        t.addrs.push(a.ip());
                    }
                }
            }
        }
        Ok(targets.iter().map(SrvTarget::to_string).collect())
    })
}

/// `res_query(3)` for the SRV records of `name`, class IN: the C library's stub
/// resolver, with `resolv.conf`'s servers, timeouts and attempts. In the child
/// only (it blocks for as long as the servers take).
fn srv_query(name: &str) -> Result<Vec<SrvTarget>, String> {
    const C_IN: libc::c_int = 1;
    const T_SRV: libc::c_int = 33;
    unsafe extern "C" {
        // glibc >= 2.34 (Debian 12 has 2.36) has these in libc itself.
        fn res_query(
            dname: *const libc::c_char,
            class: libc::c_int,
            typ: libc::c_int,
            answer: *mut libc::c_uchar,
            anslen: libc::c_int,
        ) -> libc::c_int;
        fn __h_errno_location() -> *mut libc::c_int;
    }
    let c = std::ffi::CString::new(name).map_err(|_| "a NUL byte in the name".to_string())?;
    let mut buf = vec![0u8; 65_535];
    let len = libc::c_int::try_from(buf.len()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `c` is a NUL-terminated string and `buf` a writable buffer of `len`
    // bytes, both alive for the call; res_query writes at most `len` bytes.
    let n = unsafe { res_query(c.as_ptr(), C_IN, T_SRV, buf.as_mut_ptr(), len) };
    if n < 0 {
        // SAFETY: glibc's per-thread h_errno; this child has one thread.
        let h = unsafe { *__h_errno_location() };
        return Err(match h {
            1 => "no such name (NXDOMAIN)".into(),
            2 => "temporary failure (no answer, or SERVFAIL)".into(),
            3 => "the server refused or could not answer".into(),
            4 => "no SRV record".into(),
            // NETDB_INTERNAL (-1): the reason is in errno.
            -1 => format!("lookup failed: {}", std::io::Error::last_os_error()),
            h => format!("lookup failed (h_errno {h})"),
        });
    }
    let n = usize::try_from(n).unwrap_or(0).min(buf.len());
    srv_targets(&buf[..n])
}

/// The SRV targets of a DNS answer, in the order RFC 2782 says to try them
/// (lowest priority first, then the heavier weight; no random draw: every agent
/// tries them in the same, stable order), deduplicated, at most [`MAX_TARGETS`].
/// A target of `.` says the service is not offered there; a target that is no
/// host name, or port 0, is garbage and left out.
pub fn srv_targets(msg: &[u8]) -> Result<Vec<SrvTarget>, String> {
    let p = simple_dns::Packet::parse(msg).map_err(|e| format!("malformed DNS answer: {e}"))?;
    let mut found: Vec<(u16, std::cmp::Reverse<u16>, SrvTarget)> = Vec::new();
    let (mut dot, mut garbage) = (false, 0usize);
    for rr in &p.answers {
        let simple_dns::rdata::RData::SRV(srv) = &rr.rdata else {
            continue;
        };
        let host = srv.target.to_string();
        let host = host.trim_end_matches('.');
        if host.is_empty() {
            dot = true;
            continue;
        }
        if srv.port == 0 || !host_name_ok(host) {
            garbage += 1;
            continue;
        }
        let t = SrvTarget {
            host: host.to_ascii_lowercase(),
            port: srv.port,
            addrs: Vec::new(),
        };
        if !found.iter().any(|(_, _, x)| *x == t) {
            found.push((srv.priority, std::cmp::Reverse(srv.weight), t));
        }
    }
    found.sort_by(|a, b| (a.0, a.1, &a.2.host, a.2.port).cmp(&(b.0, b.1, &b.2.host, b.2.port)));
    if found.is_empty() {
        return Err(if dot {
            "the SRV record's target is \".\": the service is not offered there".into()
        } else if garbage > 0 {
            format!("{garbage} SRV record(s), none with a usable host name and port")
        } else {
            "no SRV record".into()
        });
    }
    Ok(found
        .into_iter()
        .take(MAX_TARGETS)
        .map(|(_, _, t)| t)
        .collect())
}

/// The child's body: its own alarm, then one line per name as `answer` gives it
/// (`NAME TOKEN...`, or `NAME !why`).
/// `answer` may hand a first line to `first` before it returns its last (a
/// [`Token::REFINED`] kind).
fn answer_lines(
    args: impl Iterator<Item = std::ffi::OsString>,
    answer: impl Fn(&str, &mut dyn FnMut(Vec<String>)) -> Result<Vec<String>, String>,
) -> ExitCode {
    let args: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    let Some((secs, names)) = args.split_first() else {
        return ExitCode::from(2);
    };
    let secs: u32 = secs.parse().unwrap_or(1).clamp(1, 3600);
    // SAFETY: alarm(2) takes an integer and only arms this process's timer; the
    // default action of SIGALRM ends the process.
    unsafe { libc::alarm(secs) };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let line = |name: &str, r: Result<Vec<String>, String>| match r {
        Ok(toks) if toks.is_empty() => format!("{name} !no answer\n"),
        Ok(toks) => format!("{name} {}\n", toks.join(" ")),
        Err(e) => format!("{name} !{}\n", e.replace('\n', " ")),
    };
    let mut failed = false;
    for name in names.iter().take(MAX_NAMES) {
        // Line by line: a parent that kills us at its deadline keeps the names
        // already answered.
        let mut write = |l: String| {
            failed |= out
                .write_all(l.as_bytes())
                .and_then(|()| out.flush())
                .is_err();
        };
        let last = answer(name, &mut |toks| write(line(name, Ok(toks))));
        write(line(name, last));
        if failed {
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// The loop's resolver: at most one lookup in flight, plus killed children not
/// reaped yet. Never blocks.
pub struct Resolver<T: Token = IpAddr> {
    running: Option<Lookup<T>>,
    dying: Vec<Child>,
}

impl<T: Token> Default for Resolver<T> {
    fn default() -> Self {
        Resolver {
            running: None,
            dying: Vec::new(),
        }
    }
}

impl<T: Token> Resolver<T> {
    /// Start a lookup unless one is running. `Err`: it could not be started.
    pub fn start(&mut self, names: &[String], deadline: Instant) -> Result<bool, String> {
        if self.running.is_some() || names.is_empty() {
            return Ok(false);
        }
        self.running = Some(Lookup::start(names, deadline)?);
        Ok(true)
    }

    /// The running lookup (tests use their own program).
    pub fn start_lookup(&mut self, l: Lookup<T>) {
        if let Some(old) = self.running.replace(l) {
            let mut c = old.into_child();
            let _ = c.kill();
            self.dying.push(c);
        }
    }

    pub fn running(&self) -> bool {
        self.running.is_some()
    }

    /// Reap what can be reaped, and the running lookup's outcome once it is over
    /// (with the names it asked and when it started). Call on every wake-up.
    pub fn service(&mut self, now: Instant) -> Option<(Vec<String>, Instant, Outcome<T>)> {
        self.dying.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        let l = self.running.as_mut()?;
        let o = l.poll(now)?;
        let l = self.running.take()?;
        let (names, started) = (l.names.clone(), l.started);
        let mut c = l.into_child();
        if matches!(c.try_wait(), Ok(None)) {
            self.dying.push(c);
        }
        Some((names, started, o))
    }

    /// When the running lookup must be killed.
    pub fn deadline(&self) -> Option<Instant> {
        self.running.as_ref().map(|l| l.deadline)
    }

    /// Whether `pid` is a child of ours (the loop's orphan reaper leaves it to us).
    pub fn owns(&self, pid: u32) -> bool {
        self.running.as_ref().is_some_and(|l| l.pid() == pid)
            || self.dying.iter().any(|c| c.id() == pid)
    }
}

impl<T: Token> Drop for Resolver<T> {
    fn drop(&mut self) {
        if let Some(l) = self.running.take() {
            let mut c = l.into_child();
            kill_and_reap(&mut c);
        }
        for c in &mut self.dying {
            kill_and_reap(c);
        }
    }
}

/// The endpoints a one-shot command (`ctl`, `confirm-epoch`) starts from: the
/// configured list, or with `[etcd] srv` the SRV answer's targets, asked now
/// within `resolve_timeout` (the default when 0) and `deadline`.
pub fn endpoints_now(
    cfg: &crate::config::EtcdConfig,
    deadline: Instant,
) -> Result<Vec<String>, String> {
    let Some(srv) = &cfg.srv else {
        return Ok(cfg.endpoints.clone());
    };
    let timeout = if cfg.resolve_timeout.is_zero() {
        DEFAULT_RESOLVE_TIMEOUT
    } else {
        cfg.resolve_timeout
    };
    let service = srv.service();
    let d = clock::now().add(timeout).min(deadline);
    let why = match Lookup::<SrvTarget>::start(std::slice::from_ref(&service), d)?.wait() {
        Outcome::Done(a) | Outcome::TimedOut(a) => match a.into_iter().next() {
            Some((_, Ok(targets))) => return Ok(targets.iter().map(|t| srv.endpoint(t)).collect()),
            Some((_, Err(why))) => why,
            None => format!("no answer within {:.3} s", timeout.as_secs_f64()),
        },
        Outcome::Failed(why) => why,
    };
    Err(format!("etcd: DNS SRV lookup of {service}: {why}"))
}

/// What a one-shot command (`ctl`, `confirm-epoch`) connects to: the endpoints
/// with names replaced by their addresses, resolved now within `timeout` and
/// `deadline`, and the name TLS must check (when not configured). Under TLS a
/// client checks one name for all its connections, so with endpoints of several
/// names only those of the first name that resolved are used (an IP endpoint
/// counts as its own group).
pub fn targets_now(
    endpoints: &[String],
    tls: bool,
    server_name: Option<&str>,
    timeout: Duration,
    deadline: Instant,
) -> Result<(Vec<String>, Option<String>), String> {
    let mut parsed = Vec::with_capacity(endpoints.len());
    for e in endpoints {
        parsed.push(Endpoint::parse(e).map_err(|why| format!("etcd endpoint {why}"))?);
    }
    let mut names: Vec<String> = Vec::new();
    for p in &parsed {
        if let Some(n) = p.name()
            && !names.iter().any(|x| x == n)
        {
            names.push(n.to_string());
        }
    }
    if names.is_empty() {
        return Ok((endpoints.to_vec(), None));
    }
    let timeout = if timeout.is_zero() {
        DEFAULT_RESOLVE_TIMEOUT
    } else {
        timeout
    };
    let d = clock::now().add(timeout).min(deadline);
    let answers = match Lookup::start(&names, d)?.wait() {
        Outcome::Done(a) | Outcome::TimedOut(a) => a,
        Outcome::Failed(why) => return Err(format!("resolving {}: {why}", names.join(", "))),
    };
    let addrs_of = |n: &str| {
        answers
            .iter()
            .find(|(k, _)| k == n)
            .and_then(|(_, r)| r.as_ref().ok())
    };
    // (group, url): group = the name TLS checks for that URL.
    let mut urls: Vec<(Option<String>, String)> = Vec::new();
    for p in &parsed {
        match &p.host {
            Host::Ip(ip) => urls.push((None, p.url_with(*ip))),
            Host::Name(n) => {
                for ip in addrs_of(n).into_iter().flatten() {
                    urls.push((Some(n.clone()), p.url_with(*ip)));
                }
            }
        }
    }
    if urls.is_empty() {
        let why: Vec<String> = names
            .iter()
            .map(|n| match answers.iter().find(|(k, _)| k == n) {
                Some((_, Err(e))) => format!("{n}: {e}"),
                Some((_, Ok(_))) => format!("{n}: no address"),
                None => format!("{n}: no answer within {:.3} s", timeout.as_secs_f64()),
            })
            .collect();
        return Err(format!("no etcd endpoint resolved ({})", why.join("; ")));
    }
    if !tls || server_name.is_some() {
        return Ok((urls.into_iter().map(|(_, u)| u).collect(), None));
    }
    let group = urls[0].0.clone();
    let chosen = urls
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(_, u)| u)
        .collect();
    Ok((chosen, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn output_lines_match_the_names_asked() {
        let n = names(&["a.example", "b.example", "c.example"]);
        let out = b"a.example 10.0.0.1 fd00::2\nb.example !Name or service not known\nc.exa";
        let a = parse_output::<IpAddr>(out, &n);
        assert_eq!(a.len(), 2, "the half line is not an answer: {a:?}");
        assert_eq!(
            a[0],
            (
                "a.example".to_string(),
                Ok(vec![
                    "10.0.0.1".parse().expect("ip"),
                    "fd00::2".parse().expect("ip")
                ])
            )
        );
        assert_eq!(
            a[1],
            (
                "b.example".to_string(),
                Err("Name or service not known".to_string())
            )
        );
        // A line for another name, or garbage, ends the parse.
        assert!(parse_output::<IpAddr>(b"x.example 10.0.0.1\n", &n).is_empty());
        assert!(parse_output::<IpAddr>(b"a.example 10.0.0.999\n", &n).is_empty());
    }

    /// A DNS answer with these SRV records (priority, weight, port, target), as
    /// a server sends it (`compressed`: names as pointers into the message).
    fn srv_answer(recs: &[(u16, u16, u16, &str)], compressed: bool) -> Vec<u8> {
        use simple_dns::rdata::{RData, SRV};
        use simple_dns::{CLASS, Name, Packet, ResourceRecord};
        let mut p = Packet::new_reply(7);
        for &(priority, weight, port, target) in recs {
            p.answers.push(ResourceRecord::new(
                Name::new_unchecked("_etcd-client._tcp.srv.test"),
                CLASS::IN,
                60,
                RData::SRV(SRV {
                    priority,
                    weight,
                    port,
                    target: Name::new_unchecked(target),
                }),
            ));
        }
        if compressed {
            p.build_bytes_vec_compressed().expect("build")
        } else {
            p.build_bytes_vec().expect("build")
        }
    }

    fn target(host: &str, port: u16) -> SrvTarget {
        SrvTarget {
            host: host.into(),
            port,
            addrs: Vec::new(),
        }
    }

    /// RFC 2782's order (lowest priority, then heavier weight; a stable order
    /// for equal ones), duplicates once, names lower-cased, the root dot gone.
    #[test]
    fn srv_targets_come_in_the_order_to_try_them() {
        for compressed in [false, true] {
            let msg = srv_answer(
                &[
                    (20, 0, 2379, "etcd3.srv.test"),
                    (10, 5, 2379, "ETCD2.srv.test"),
                    (10, 50, 2379, "etcd1.srv.test."),
                    (10, 5, 2379, "etcd2.srv.test"),
                    (10, 5, 2381, "etcd2.srv.test"),
                ],
                compressed,
            );
            assert_eq!(
                srv_targets(&msg),
                Ok(vec![
                    target("etcd1.srv.test", 2379),
                    target("etcd2.srv.test", 2379),
                    target("etcd2.srv.test", 2381),
                    target("etcd3.srv.test", 2379),
                ]),
                "compressed {compressed}"
            );
        }
    }

    /// What an answer without a usable target says: each case named.
    #[test]
    fn srv_answers_without_a_target_say_why() {
        let e = srv_targets(&srv_answer(&[], false)).expect_err("empty");
        assert_eq!(e, "no SRV record");
        let e = srv_targets(&srv_answer(&[(0, 0, 0, ".")], false)).expect_err("dot");
        assert!(e.contains("not offered"), "{e}");
        let e =
            srv_targets(&srv_answer(&[(0, 0, 0, "etcd1.srv.test")], false)).expect_err("port 0");
        assert!(e.contains("none with a usable host name and port"), "{e}");
        // What an `[etcd] endpoints` entry may not name, an SRV target may not
        // either (review finding 6): a space, a leading or trailing '-', an
        // all-digit last label (a mistyped address).
        for bad in [
            "etcd 1.srv.test",
            "-x.srv.test",
            "x-.srv.test",
            "etcd.123",
            "10.0.0.300",
        ] {
            let e = srv_targets(&srv_answer(&[(0, 0, 2379, bad)], false)).expect_err(bad);
            assert!(e.contains("none with a usable"), "{bad}: {e}");
            assert!(crate::config::Endpoint::parse(&format!("http://{bad}:2379")).is_err());
        }
        // Garbage beside a good one: the good one.
        let msg = srv_answer(
            &[(0, 0, 0, "x.test"), (1, 0, 2379, "etcd1.srv.test")],
            false,
        );
        assert_eq!(srv_targets(&msg), Ok(vec![target("etcd1.srv.test", 2379)]));
        let e = srv_targets(b"\x00\x07garbage").expect_err("garbage");
        assert!(e.starts_with("malformed DNS answer"), "{e}");
    }

    /// Hostile answers (a DNS server, or anyone who can spoof one): truncated
    /// and bit-flipped copies of a good answer, and random bytes, never panic
    /// and never yield a target that is no host name (it goes into a URL).
    #[test]
    fn hostile_srv_answers_never_panic_nor_yield_a_bad_target() {
        let good = srv_answer(
            &[
                (10, 5, 2379, "etcd1.srv.test"),
                (20, 0, 2380, "etcd2.srv.test"),
            ],
            true,
        );
        let mut seed = 0x5eed_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let check = |msg: &[u8]| match srv_targets(msg) {
            Ok(ts) => {
                for t in &ts {
                    assert!(host_name_ok(&t.host) && t.port != 0, "{t:?} from {msg:?}");
                }
                1
            }
            Err(_) => 0,
        };
        for cut in 0..good.len() {
            check(&good[..cut]);
        }
        let mut answered = 0;
        for _ in 0..20_000 {
            let mut m = good.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() as usize) % m.len();
                m[i] ^= 1 << (next() % 8);
            }
            answered += check(&m);
            let n = (next() % 600) as usize;
            let r: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            check(&r);
        }
        // The flipped copies reach the target checks, not only the parser's errors.
        assert!(answered > 1_000, "only {answered} flipped answers parsed");
    }

    /// The SRV child's lines: `NAME HOST:PORT ...`; garbage ends the parse.
    #[test]
    fn srv_output_lines_parse_into_targets() {
        let n = names(&["_etcd-client._tcp.srv.test", "_etcd-client._tcp.other.test"]);
        let out = b"_etcd-client._tcp.srv.test etcd1.srv.test:2379 etcd2.srv.test:2380\n\
                    _etcd-client._tcp.other.test !no such name (NXDOMAIN)\n";
        let a = parse_output::<SrvTarget>(out, &n);
        assert_eq!(
            a,
            vec![
                (
                    n[0].clone(),
                    Ok(vec![
                        target("etcd1.srv.test", 2379),
                        target("etcd2.srv.test", 2380)
                    ])
                ),
                (n[1].clone(), Err("no such name (NXDOMAIN)".into())),
            ]
        );
        // With the addresses the child found (IPv6 included).
        let with = b"_etcd-client._tcp.srv.test etcd1.srv.test:2379@10.0.0.1,fd00::1 \
                     etcd2.srv.test:2380\n_etcd-client._tcp.other.test !x\n";
        let a = parse_output::<SrvTarget>(with, &n);
        let mut t1 = target("etcd1.srv.test", 2379);
        t1.addrs = vec![
            "10.0.0.1".parse().expect("ip"),
            "fd00::1".parse().expect("ip"),
        ];
        assert_eq!(a[0].1, Ok(vec![t1.clone(), target("etcd2.srv.test", 2380)]));
        assert_eq!(t1.to_string(), "etcd1.srv.test:2379@10.0.0.1,fd00::1");
        assert_eq!(SrvTarget::parse(&t1.to_string()), Some(t1));
        // The child's first line (targets), then its refinement (addresses): the
        // last complete one counts; a killed child's first line still does.
        let first = "_etcd-client._tcp.srv.test etcd1.srv.test:2379\n";
        let refined = "_etcd-client._tcp.srv.test etcd1.srv.test:2379@10.0.0.1\n";
        let n1 = &n[..1];
        let a = parse_output::<SrvTarget>(format!("{first}{refined}").as_bytes(), n1);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].1.as_ref().map(|t| t[0].addrs.len()), Ok(1));
        let a = parse_output::<SrvTarget>(format!("{first}etcd1.srv").as_bytes(), n1);
        assert_eq!(
            a,
            vec![(n[0].clone(), Ok(vec![target("etcd1.srv.test", 2379)]))]
        );
        let a = parse_output::<SrvTarget>(format!("{first}{} x:0\n", n[0]).as_bytes(), n1);
        assert_eq!(
            a,
            vec![(n[0].clone(), Ok(vec![target("etcd1.srv.test", 2379)]))]
        );
        // Names' lines are not refined: a second line for a name ends the parse.
        let two = b"a.example 10.0.0.1\na.example 10.0.0.2\n";
        let a = parse_output::<IpAddr>(two, &names(&["a.example", "b.example"]));
        assert_eq!(a.len(), 1);
        for bad in [
            "_etcd-client._tcp.srv.test etcd1.srv.test:2379@\n",
            "_etcd-client._tcp.srv.test etcd1.srv.test:2379@10.0.0.300\n",
            "_etcd-client._tcp.srv.test etcd1.srv.test\n",
            "_etcd-client._tcp.srv.test etcd1.srv.test:0\n",
            "_etcd-client._tcp.srv.test etcd1.srv.test:99999\n",
            "_etcd-client._tcp.srv.test http://x:1\n",
        ] {
            assert!(
                parse_output::<SrvTarget>(bad.as_bytes(), &n).is_empty(),
                "{bad}"
            );
        }
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg(script).arg("resolver");
        c
    }

    /// A resolver that hangs is killed at its deadline, and the wait returns
    /// then, keeping what it had answered (no answer at all would fail the
    /// test's first assertion).
    #[test]
    fn a_hanging_resolver_is_killed_at_its_deadline() {
        let n = names(&["a.example", "b.example"]);
        let start = clock::now();
        let deadline = start.add(Duration::from_millis(300));
        let l = Lookup::<IpAddr>::start_with(
            sh("echo 'a.example 10.0.0.1'; exec sleep 30"),
            &n,
            deadline,
        )
        .expect("start");
        let pid = l.pid();
        let o = l.wait();
        let took = clock::now().since(start);
        match o {
            Outcome::TimedOut(a) => {
                assert_eq!(a.len(), 1);
                assert_eq!(a[0].0, "a.example");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(
            took >= Duration::from_millis(300),
            "returned early: {took:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "held past its deadline: {took:?}"
        );
        // Killed and reaped: no such process any more.
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None);
        assert_eq!(gone, Err(nix::errno::Errno::ESRCH));
    }

    /// The loop's side never blocks: `service` says nothing until the child
    /// answers, then hands back every answer.
    #[test]
    fn the_loop_polls_without_blocking() {
        let n = names(&["a.example"]);
        let deadline = clock::now().add(Duration::from_secs(10));
        let l =
            Lookup::<IpAddr>::start_with(sh("sleep 0.2; echo 'a.example 10.0.0.7'"), &n, deadline)
                .expect("start");
        let pid = l.pid();
        let mut r = Resolver::default();
        r.start_lookup(l);
        assert!(r.owns(pid));
        let t = clock::now();
        assert!(r.service(t).is_none());
        assert!(
            clock::now().since(t) < Duration::from_millis(100),
            "service blocked"
        );
        let mut got = None;
        for _ in 0..500 {
            if let Some(x) = r.service(clock::now()) {
                got = Some(x);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let (asked, _, o) = got.expect("an outcome within 5 s");
        assert_eq!(asked, n);
        assert_eq!(
            o,
            Outcome::Done(vec![(
                "a.example".to_string(),
                Ok(vec!["10.0.0.7".parse().expect("ip")])
            )])
        );
        assert!(!r.running());
    }

    #[test]
    fn ip_endpoints_need_no_resolver() {
        let eps = names(&["http://10.0.0.1:2379", "http://[::1]:2379"]);
        let (urls, name) = targets_now(
            &eps,
            false,
            None,
            Duration::from_secs(1),
            clock::now().add(Duration::from_secs(1)),
        )
        .expect("ip endpoints");
        assert_eq!(urls, eps);
        assert_eq!(name, None);
        let bad = targets_now(
            &names(&["http://etcd1:x"]),
            false,
            None,
            Duration::from_secs(1),
            clock::now().add(Duration::from_secs(1)),
        );
        assert!(matches!(bad, Err(e) if e.contains("port \"x\"")));
    }
}
