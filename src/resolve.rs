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
/// Most output a resolver child may write (a few hundred addresses): more is
/// garbage, and the child is killed.
const MAX_OUTPUT: usize = 64 * 1024;
/// Most names one child resolves (`[etcd] endpoints` is a handful).
const MAX_NAMES: usize = 64;

/// What one name resolved to: its addresses (deduplicated, in the resolver's
/// order), or why not.
pub type Answer = (String, Result<Vec<IpAddr>, String>);

/// The outcome of a lookup, once it is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The child answered for every name (each answer may still be a failure).
    Done(Vec<Answer>),
    /// The deadline passed: the child was killed. The names it had answered by
    /// then are kept.
    TimedOut(Vec<Answer>),
    /// The child could not be started, or died without answering.
    Failed(String),
}

/// One resolver child in flight.
pub struct Lookup {
    child: Child,
    out: ChildStdout,
    buf: Vec<u8>,
    names: Vec<String>,
    started: Instant,
    deadline: Instant,
}

impl Lookup {
    /// Start `tenure __resolve` for `names`, to be done by `deadline`.
    pub fn start(names: &[String], deadline: Instant) -> Result<Lookup, String> {
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("tenure").arg(SUBCOMMAND);
        Lookup::start_with(cmd, names, deadline)
    }

    /// [`Lookup::start`] with another program (tests). `cmd` gets the child's
    /// own deadline in whole seconds and the names as arguments.
    pub fn start_with(
        mut cmd: Command,
        names: &[String],
        deadline: Instant,
    ) -> Result<Lookup, String> {
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
    pub fn poll(&mut self, now: Instant) -> Option<Outcome> {
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
    pub fn wait(mut self) -> Outcome {
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
fn parse_output(buf: &[u8], names: &[String]) -> Vec<Answer> {
    let text = String::from_utf8_lossy(buf);
    let mut out = Vec::new();
    // Only complete lines: a killed child may have written half of one.
    let complete = match text.rfind('\n') {
        Some(i) => &text[..i],
        None => "",
    };
    for (line, want) in complete.lines().zip(names) {
        let Some((name, rest)) = line.split_once(' ') else {
            break;
        };
        if name != want {
            break;
        }
        let answer = match rest.strip_prefix('!') {
            Some(why) => Err(why.to_string()),
            None => {
                let addrs: Result<Vec<IpAddr>, _> =
                    rest.split_whitespace().map(str::parse::<IpAddr>).collect();
                match addrs {
                    Ok(a) if a.is_empty() => Err("no address".to_string()),
                    Ok(a) => Ok(a),
                    Err(_) => break,
                }
            }
        };
        out.push((name.to_string(), answer));
    }
    out
}

/// `tenure __resolve SECS NAME...`: resolve each name with the C library (as
/// every program on this host would) and print one line per name. Exits by
/// itself after `SECS` seconds (SIGALRM) if nobody killed it before.
pub fn child_main(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
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
    for name in names.iter().take(MAX_NAMES) {
        let line = match (name.as_str(), 0u16).to_socket_addrs() {
            Ok(it) => {
                let mut addrs: Vec<IpAddr> = Vec::new();
                for a in it {
                    if !addrs.contains(&a.ip()) {
                        addrs.push(a.ip());
                    }
                }
                if addrs.is_empty() {
                    format!("{name} !no address\n")
                } else {
                    let list: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
                    format!("{name} {}\n", list.join(" "))
                }
            }
            Err(e) => format!("{name} !{}\n", e.to_string().replace('\n', " ")),
        };
        // Line by line: a parent that kills us at its deadline keeps the names
        // already answered.
        if out
            .write_all(line.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// The loop's resolver: at most one lookup in flight, plus killed children not
/// reaped yet. Never blocks.
#[derive(Default)]
pub struct Resolver {
    running: Option<Lookup>,
    dying: Vec<Child>,
}

impl Resolver {
    /// Start a lookup unless one is running. `Err`: it could not be started.
    pub fn start(&mut self, names: &[String], deadline: Instant) -> Result<bool, String> {
        if self.running.is_some() || names.is_empty() {
            return Ok(false);
        }
        self.running = Some(Lookup::start(names, deadline)?);
        Ok(true)
    }

    /// The running lookup (tests use their own program).
    pub fn start_lookup(&mut self, l: Lookup) {
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
    pub fn service(&mut self, now: Instant) -> Option<(Vec<String>, Instant, Outcome)> {
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
        self.running.as_ref().map(Lookup::deadline)
    }

    /// Whether `pid` is a child of ours (the loop's orphan reaper leaves it to us).
    pub fn owns(&self, pid: u32) -> bool {
        self.running.as_ref().is_some_and(|l| l.pid() == pid)
            || self.dying.iter().any(|c| c.id() == pid)
    }
}

impl Drop for Resolver {
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
        let a = parse_output(out, &n);
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
        assert!(parse_output(b"x.example 10.0.0.1\n", &n).is_empty());
        assert!(parse_output(b"a.example 10.0.0.999\n", &n).is_empty());
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
        let l = Lookup::start_with(sh("echo 'a.example 10.0.0.1'; exec sleep 30"), &n, deadline)
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
        let l = Lookup::start_with(sh("sleep 0.2; echo 'a.example 10.0.0.7'"), &n, deadline)
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
