//! Finding and killing the processes of one PostgreSQL cluster through `/proc`.
//!
//! Owns: the answer to "which processes belong to this data directory" and the
//! immediate fence (DESIGN S1). Fails closed (DESIGN §5): a process table that cannot
//! be listed, or a process whose membership cannot be read, keeps the fence
//! incomplete; only "the process is gone" (ENOENT, ESRCH) is an answer. Must never:
//! signal a process that is not verified to belong to this data directory (pids are
//! reused: a signal goes through a pidfd opened before checking that the pid still
//! is the process the scan verified, by its start time), or return after the
//! fence's deadline.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clock;
use crate::core::model::FenceOutcome;
use crate::core::time::Instant;

/// One process as seen in `<proc>/<pid>/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    ppid: u32,
    /// The process group.
    pgrp: u32,
    /// `PF_EXITING` in its flags: in `do_exit`, which releases the memory and
    /// the files before the cwd (`exit_mm`, `exit_files`, then `exit_fs`).
    exiting: bool,
    zombie: bool,
    /// Start time, in clock ticks after boot: with the pid it names one process.
    start: u64,
}

/// The fields of a `/proc/<pid>/stat` line after the command name, which is in
/// parentheses and may hold any bytes but NUL — spaces, `)`, bytes that are not
/// UTF-8 (a process exec'd through a link so named): the fields we need follow
/// the last `)` (field 3 is the first after it) and are ASCII. Read as bytes, so
/// no command name on the host can make a process unreadable (a process "in
/// doubt" refuses this PostgreSQL's starts and keeps a fence incomplete).
fn stat_fields(b: &[u8]) -> Option<impl Iterator<Item = &[u8]>> {
    let rest = &b[b.iter().rposition(|&c| c == b')')? + 1..];
    Some(
        rest.split(|c| c.is_ascii_whitespace())
            .filter(|w| !w.is_empty()),
    )
}

fn field<T: std::str::FromStr>(w: Option<&[u8]>) -> Option<T> {
    std::str::from_utf8(w?).ok()?.parse().ok()
}

fn parse_stat(b: &[u8]) -> Option<Stat> {
    let mut f = stat_fields(b)?;
    let state = f.next()?;
    let ppid = field(f.next())?;
    let pgrp = field(f.next())?;
    // flags is field 9: the fourth after pgrp (session, tty_nr, tpgid, flags).
    let flags: u32 = field(f.nth(3))?;
    // num_threads is field 20, 11 after flags; starttime field 22, 2 after it.
    let threads: u32 = field(f.nth(10))?;
    let start = field(f.nth(1))?;
    Some(Stat {
        ppid,
        pgrp,
        // One thread only: a thread group whose leader exits while other threads
        // run (they could still write) is not taken as exiting.
        exiting: flags & PF_EXITING != 0 && threads <= 1,
        // 'Z' zombie, 'X' dead: they can no longer run, let alone commit.
        zombie: state == b"Z" || state == b"X",
        start,
    })
}

/// The kernel's `PF_EXITING` task flag (include/linux/sched.h).
const PF_EXITING: u32 = 0x0000_0004;

fn read_stat(pid: u32) -> Option<Stat> {
    ProcFs::system().stat(pid).ok().flatten()
}

/// "The process is gone": the only read failure that is an answer.
fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH))
}

fn is_denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
}

/// Where process facts come from: `/proc`, or a directory laid out like it (tests
/// inject failures that way). Signals always go to the real pids.
#[derive(Clone, Debug)]
pub struct ProcFs {
    root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> ProcFs {
        ProcFs::system()
    }
}

impl ProcFs {
    /// The real `/proc`.
    pub fn system() -> ProcFs {
        ProcFs::at("/proc")
    }

    /// A process table rooted at `root` (`<root>/<pid>/stat`, `<root>/<pid>/cwd`).
    pub fn at(root: impl Into<PathBuf>) -> ProcFs {
        ProcFs { root: root.into() }
    }

    fn entry(&self, pid: u32) -> PathBuf {
        self.root.join(pid.to_string())
    }

    /// Every pid listed; any error of the listing (EMFILE, ENOMEM, ...) is an error.
    fn list(&self) -> io::Result<Vec<u32>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.root)? {
            if let Some(pid) = e?.file_name().to_str().and_then(|n| n.parse().ok()) {
                out.push(pid);
            }
        }
        Ok(out)
    }

    /// `Ok(None)`: the process is gone.
    fn stat(&self, pid: u32) -> io::Result<Option<Stat>> {
        match fs::read(self.entry(pid).join("stat")) {
            Ok(s) => parse_stat(&s)
                .map(Some)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "stat does not parse")),
            Err(e) if is_gone(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `Ok(None)`: no cwd to read (the process is exiting or gone).
    fn cwd(&self, pid: u32) -> io::Result<Option<PathBuf>> {
        match fs::read_link(self.entry(pid).join("cwd")) {
            Ok(p) => Ok(Some(p)),
            Err(e) if is_gone(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Provably not a process of the cluster, by the owner of `<proc>/<pid>` (the
    /// process's effective uid): root (PostgreSQL refuses to run as root), or none
    /// of `owners` when they are known (PostgreSQL refuses a data directory that is
    /// not its user's). Consulted only when a read is denied: an agent without
    /// every capability (or running as the PostgreSQL user) may not read the cwd of
    /// a process with more privileges than its own.
    fn foreign(&self, pid: u32, owners: &[u32]) -> bool {
        fs::metadata(self.entry(pid))
            .is_ok_and(|m| m.uid() == 0 || (!owners.is_empty() && !owners.contains(&m.uid())))
    }

    /// Whether `pid`'s cwd is the cluster's directory; `Err` when that cannot be told.
    fn in_dir(&self, pid: u32, c: &Cluster) -> Result<bool, String> {
        match self.cwd(pid) {
            Ok(Some(d)) => Ok(d == c.dir),
            // No cwd: an exiting process, unless it is still there and running.
            // One the kernel says is exiting is past `exit_fs`, so past
            // `exit_mm` and `exit_files` too: it holds no memory and no file,
            // and can write nothing. Counting it made any process of the host
            // caught in its exit (another node's startup process ending at a
            // promotion) a process of this cluster, refusing the next start.
            Ok(None) => match self.stat(pid) {
                Ok(None) => Ok(false),
                Ok(Some(st)) if st.zombie || st.exiting => Ok(false),
                Ok(Some(_)) => Err("cwd gone while the process lives".into()),
                Err(e) => Err(format!("stat: {e}")),
            },
            Err(e) if is_denied(&e) && self.foreign(pid, &c.owners) => Ok(false),
            Err(e) => Err(format!("cwd: {e}")),
        }
    }

    /// One pass over the process table: the processes of the cluster `c`, and those
    /// whose membership could not be read. `Err` when the table cannot be listed.
    /// `seen` (pid -> start time): processes an earlier scan of the same fence
    /// verified; they count until they are gone, whatever their parent or cwd now.
    /// Never lists our own pid.
    pub fn scan(&self, c: &Cluster, seen: &BTreeMap<u32, u64>) -> Result<Scan, String> {
        let me = std::process::id();
        let pids = self
            .list()
            .map_err(|e| format!("cannot list {}: {e}", self.root.display()))?;
        let mut out = Scan::default();
        let mut stats = BTreeMap::new();
        for pid in pids {
            if pid == me {
                continue;
            }
            match self.stat(pid) {
                Ok(Some(st)) => {
                    stats.insert(pid, st);
                }
                Ok(None) => {}
                Err(e) if is_denied(&e) && self.foreign(pid, &c.owners) => {}
                Err(e) => out.unknown.push((pid, format!("stat: {e}"))),
            }
        }
        let live = |pid: u32| stats.get(&pid).filter(|st| !st.zombie);
        let in_job = |pid: u32| descends_from(&stats, pid, c.job);
        // The pid in postmaster.pid is the postmaster only once verified here (a
        // stale file, a reused pid); its children then count whatever their cwd.
        let pm = c.postmaster.filter(|&pm| {
            live(pm).is_some_and(|st| {
                seen.get(&pm) == Some(&st.start) || in_job(pm) || self.in_dir(pm, c) == Ok(true)
            })
        });
        for (&pid, st) in &stats {
            if st.zombie {
                continue;
            }
            let why = if Some(pid) == pm {
                Why::Postmaster
            } else if pm.is_some() && Some(st.ppid) == pm {
                Why::PostmasterChild
            } else if in_job(pid) {
                Why::Job
            } else if seen.get(&pid) == Some(&st.start) {
                Why::Seen
            } else {
                match self.in_dir(pid, c) {
                    Ok(true) => Why::Dir,
                    Ok(false) => continue,
                    Err(e) => {
                        out.unknown.push((pid, e));
                        continue;
                    }
                }
            };
            out.members.push(Member {
                pid,
                start: st.start,
                why,
            });
        }
        Ok(out)
    }
}

/// Whether `pid` is `job` or one of its descendants, by the ppid chain in `stats`.
fn descends_from(stats: &BTreeMap<u32, Stat>, pid: u32, job: Option<u32>) -> bool {
    let Some(job) = job else { return false };
    let mut cur = pid;
    // Bounded: a chain cannot be longer than the table (and a garbage one that
    // loops ends here too).
    for _ in 0..=stats.len() {
        if cur == job {
            return stats.get(&job).is_some_and(|st| !st.zombie);
        }
        match stats.get(&cur) {
            Some(st) if st.ppid > 1 && st.ppid != cur => cur = st.ppid,
            _ => return false,
        }
    }
    false
}

/// What the scan looks for.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// The data directory, canonical, as `/proc/<pid>/cwd` shows it.
    pub dir: PathBuf,
    /// The uids the cluster's processes can run as (PostgreSQL's user, the data
    /// directory's owner; never root). Empty: no uid but root is ruled out.
    pub owners: Vec<u32>,
    /// The pid in `postmaster.pid`, unverified.
    pub postmaster: Option<u32>,
    /// The agent's running job child (pg_ctl, initdb, ...): it and every descendant
    /// belong to the cluster wherever their cwd is (a postmaster pg_ctl just forked
    /// has not changed into the data directory yet).
    pub job: Option<u32>,
}

/// Why a process belongs to the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The pid in `postmaster.pid`, verified.
    Postmaster,
    /// A child of that postmaster.
    PostmasterChild,
    /// The running job or one of its descendants.
    Job,
    /// Its cwd is the data directory.
    Dir,
    /// An earlier scan of the same fence verified it; it is not gone yet.
    Seen,
}

/// A process of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub pid: u32,
    /// Start time (with the pid, names the process).
    start: u64,
    pub why: Why,
}

/// What one scan found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Verified processes of the cluster.
    pub members: Vec<Member>,
    /// Processes whose membership could not be read, and why. Never signalled;
    /// while any is left the fence is not complete.
    pub unknown: Vec<(u32, String)>,
}

impl Scan {
    /// Nothing of the cluster remains, and nothing is in doubt.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.unknown.is_empty()
    }

    /// Every pid that counts as still running (members and unknown), sorted.
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.members.iter().map(|m| m.pid).collect();
        v.extend(self.unknown.iter().map(|(p, _)| *p));
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The state letter of `/proc/<pid>/stat` (`R`, `S`, `T`, `Z`, ...); `None`: no
/// such process. The command name before it is in parentheses and may hold spaces
/// and parentheses itself: the state is the first field after the last `)`.
pub fn proc_state(pid: u32) -> Option<char> {
    let b = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let state = stat_fields(&b)?.next()?;
    state.first().map(|&c| char::from(c))
}

/// Whether `pid` is stopped (SIGSTOP or a tracer): it cannot answer anything.
pub fn is_stopped(pid: u32) -> bool {
    matches!(proc_state(pid), Some('T' | 't'))
}

/// Whether `pid`'s working directory is `dir` (already canonical). PostgreSQL's
/// postmaster and every backend chdir into the data directory.
pub fn cwd_is(pid: u32, dir: &Path) -> bool {
    fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir)
}

/// The live, non-zombie process `pid`, if its cwd is `dir`.
pub fn alive_in(pid: u32, dir: &Path) -> bool {
    read_stat(pid).is_some_and(|s| !s.zombie) && cwd_is(pid, dir)
}

/// A pidfd for `pid` if it is, now, a live process whose cwd is `dir` (the
/// postmaster, verified): the agent holds one for the running postmaster so the
/// fence can signal it even when `/proc` cannot be read (EMFILE, ENOMEM) — S1's
/// SIGQUIT to the postmaster never depends on a scan. The check comes after the
/// open, so the fd names the verified process even if the pid is reused later.
pub fn pidfd_of_verified(pid: u32, dir: &Path) -> Option<OwnedFd> {
    let fd = pidfd_open(pid).ok()?;
    alive_in(pid, dir).then_some(fd)
}

/// Whether the process a pidfd names has exited (a zombie counts as exited, as in
/// [`alive_in`]): `Some(false)` while it runs, `None` when the kernel cannot say (a
/// caller then checks through `/proc`). One `poll(2)` with a zero timeout: a pidfd
/// turns readable when its process exits, and it names that one process even after
/// its pid is reused, so no `/proc` read is needed while it runs.
pub fn pidfd_exited(fd: &OwnedFd) -> Option<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid, initialised pollfd and its count; a zero timeout never
    // blocks; the kernel writes only `revents`.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    match r {
        0 => Some(false),
        1 if p.revents & libc::POLLIN != 0 => Some(true),
        _ => None,
    }
}

/// A pidfd (Linux >= 5.3): signals sent through it reach exactly the process it
/// was opened for, even if the pid is reused meanwhile.
pub(super) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no
    // memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a fresh file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn pidfd_signal(fd: &OwnedFd, sig: libc::c_int) -> bool {
    // SAFETY: the fd is a valid pidfd we own; info is NULL (kernel fills it in
    // as for kill()); flags 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    r == 0
}

/// Send `sig` to the process `m` names, only if the pid still is that process: a
/// pidfd first, then the check (same start time, not a zombie), then the signal
/// through the pidfd (no reuse race). Without pidfds (ENOSYS: a kernel before 5.3)
/// check-then-kill, a tiny race. Any other failure sends nothing: what cannot be
/// verified is not signalled, and stays counted.
fn signal_member(procs: &ProcFs, m: &Member, sig: libc::c_int) -> bool {
    let same = || {
        procs
            .stat(m.pid)
            .ok()
            .flatten()
            .is_some_and(|st| !st.zombie && st.start == m.start)
    };
    match pidfd_open(m.pid) {
        Ok(fd) => same() && pidfd_signal(&fd, sig),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            if !same() {
                return false;
            }
            // SAFETY: kill() with a pid and a signal number has no memory effects.
            unsafe { libc::kill(m.pid as libc::pid_t, sig) == 0 }
        }
        Err(_) => false,
    }
}

/// DESIGN S1's fence: SIGQUIT the postmaster (its immediate shutdown ends its
/// children) and every other process of the cluster, SIGKILL the running job's
/// process tree at once, wait until none remains, SIGKILL every survivor after half
/// the time to the deadline. Complete only when a scan listed the whole table and
/// found nothing of the cluster and nothing in doubt (DESIGN §5: fail closed).
/// `held` is a pidfd to the postmaster opened while it was verified (see
/// [`pidfd_of_verified`]): it is signalled first and at the escalation whatever the
/// scans say, so an unreadable process table never keeps the postmaster from its
/// SIGQUIT (S1). Polls every few ms; never returns after `deadline`.
pub fn fence(
    procs: &ProcFs,
    c: &Cluster,
    held: Option<&OwnedFd>,
    deadline: Instant,
) -> FenceOutcome {
    let start = clock::now();
    let escalate_at = start.add(start.until(deadline) / 2);
    // The held pidfd is the way around an unreadable process table only: while the
    // scans work, the postmaster is signalled as a verified member (and recorded
    // first, so its children are counted until gone). A dead process's pidfd refuses
    // the signal (ESRCH): harmless.
    let mut held_sent: libc::c_int = 0;
    let mut seen: BTreeMap<u32, u64> = BTreeMap::new();
    // (pid, start) -> the strongest signal sent to it.
    let mut sent: BTreeMap<(u32, u64), libc::c_int> = BTreeMap::new();
    let mut said = false;
    loop {
        let escalated = clock::now() >= escalate_at;
        let scan = procs.scan(c, &seen);
        if let Some(fd) = held {
            let sig = if escalated {
                libc::SIGKILL
            } else {
                libc::SIGQUIT
            };
            // The table could not be listed, or it is time to escalate.
            if (scan.is_err() || escalated) && held_sent != sig && held_sent != libc::SIGKILL {
                held_sent = sig;
                pidfd_signal(fd, sig);
            }
        }
        match scan {
            Ok(s) if s.is_empty() => return FenceOutcome::Complete,
            Ok(s) => {
                if !s.unknown.is_empty() && !said {
                    said = true;
                    log::warn!(
                        "fence: cannot tell whether these processes belong to {} (they count as \
                         running, and are not signalled): {:?}",
                        c.dir.display(),
                        s.unknown
                    );
                }
                for m in &s.members {
                    seen.insert(m.pid, m.start);
                    let sig = match m.why {
                        _ if escalated => libc::SIGKILL,
                        // The postmaster's immediate shutdown SIGQUITs its children;
                        // one that died first would look like a crash to it.
                        Why::PostmasterChild => continue,
                        // A job has no reason to finish under a fence: it ends now.
                        Why::Job => libc::SIGKILL,
                        // No postmaster: surviving backends are on their own; SIGQUIT
                        // makes each exit at once without touching shared state.
                        Why::Postmaster | Why::Dir | Why::Seen => libc::SIGQUIT,
                    };
                    let key = (m.pid, m.start);
                    let done = sent
                        .get(&key)
                        .is_some_and(|&s| s == sig || s == libc::SIGKILL);
                    if !done && signal_member(procs, m, sig) {
                        sent.insert(key, sig);
                    }
                }
            }
            Err(e) => {
                if !said {
                    said = true;
                    log::warn!("fence: {e}: the fence is not complete (DESIGN §5)");
                }
            }
        }
        let now = clock::now();
        if now >= deadline {
            return FenceOutcome::Incomplete;
        }
        let nap = Duration::from_millis(3).min(now.until(deadline));
        std::thread::sleep(nap);
    }
}

/// Zombie children of `parent` (the agent is a child subreaper, DESIGN §6: orphaned
/// postmasters and backends are reparented to it and must be reaped, or a zombie
/// postmaster's pid in `postmaster.pid` keeps PostgreSQL from starting again).
pub fn zombie_children(parent: u32) -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| read_stat(pid).is_some_and(|s| s.zombie && s.ppid == parent))
        .collect()
}

/// The live (not zombie) processes of process group `pgid` other than `except`:
/// what a replica method left running when its own process exited (`pg::job`).
/// One pass over `/proc`, taken once per method, not per loop. Fail-closed: a
/// listing that cannot be read, or a process whose stat cannot be read for any
/// reason but its being gone, is in the answer (review of this fix, L1): the
/// method is then counted as failed rather than a writer missed.
pub fn group_members(pgid: u32, except: u32) -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return vec![0];
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != except)
        .filter(|&pid| match ProcFs::system().stat(pid) {
            Ok(st) => st.is_some_and(|st| st.pgrp == pgid && !st.zombie),
            Err(_) => true,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    fn cluster(dir: &Path) -> Cluster {
        Cluster {
            dir: dir.to_path_buf(),
            ..Cluster::default()
        }
    }

    fn soon(ms: u64) -> Instant {
        clock::now().add(Duration::from_millis(ms))
    }

    fn scratch(tag: &str) -> PathBuf {
        crate::testbed::scratch_dir(tag)
            .unwrap()
            .canonicalize()
            .unwrap()
    }

    /// A shell in `cwd` that ignores SIGQUIT: only SIGKILL ends it.
    fn stubborn(cwd: &Path) -> Child {
        Command::new("sh")
            .arg("-c")
            .arg("trap '' QUIT; while :; do sleep 0.01; done")
            .current_dir(cwd)
            .spawn()
            .unwrap()
    }

    fn running(pid: u32) -> bool {
        read_stat(pid).is_some_and(|s| !s.zombie)
    }

    fn wait_in(pid: u32, dir: &Path) {
        crate::testbed::wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
            cwd_is(pid, dir).then_some(())
        })
        .unwrap();
    }

    fn end(mut c: Child) {
        let _ = c.kill();
        let _ = c.wait();
    }

    /// What `PgCtl::postmaster_pid`'s short path relies on: a pidfd says "running"
    /// until its process exits, and "exited" for a zombie as for a reaped one.
    #[test]
    fn a_pidfd_tells_a_running_process_from_an_exited_one() {
        let dir = scratch("pidfd-exited");
        let mut c = Command::new("sleep")
            .arg("30")
            .current_dir(&dir)
            .spawn()
            .unwrap();
        wait_in(c.id(), &dir);
        let fd = pidfd_of_verified(c.id(), &dir).expect("verified");
        assert_eq!(pidfd_exited(&fd), Some(false));
        c.kill().unwrap();
        crate::testbed::wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
            (pidfd_exited(&fd) == Some(true)).then_some(())
        })
        .expect("a killed process reads as exited");
        assert_eq!(proc_state(c.id()), Some('Z'), "not reaped yet: a zombie");
        c.wait().unwrap();
        assert_eq!(pidfd_exited(&fd), Some(true), "reaped");
    }

    #[test]
    fn our_own_process_is_never_listed() {
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        let s = ProcFs::system()
            .scan(&cluster(&cwd), &BTreeMap::new())
            .unwrap();
        assert!(!s.pids().contains(&std::process::id()));
    }

    #[test]
    fn stat_parses_our_parent_and_start_time() {
        let st = read_stat(std::process::id()).unwrap();
        assert!(!st.zombie);
        assert_eq!(st.ppid, std::os::unix::process::parent_id());
        assert!(st.start > 0);
        assert_eq!(st.pgrp as i32, nix::unistd::getpgrp().as_raw());
        // A name with ') ' in it does not shift the fields.
        let line = b"42 (a) b) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                ppid: 7,
                pgrp: 42,
                exiting: false,
                zombie: false,
                start: 12345
            })
        );
        assert_eq!(parse_stat(b"42 (a) S 7"), None, "truncated: no start time");
        // PF_EXITING (0x4) in the flags, field 9, of a one-thread process; not
        // with other threads (field 20) still there.
        let exiting = b"42 (a) R 7 42 42 0 -1 4194564 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        assert!(parse_stat(exiting).is_some_and(|s| s.exiting && s.start == 12345));
        let threads = b"42 (a) R 7 42 42 0 -1 4194564 1 0 0 0 0 0 0 0 20 0 3 0 12345 0 0";
        assert!(parse_stat(threads).is_some_and(|s| !s.exiting && s.start == 12345));
        // A command name that is not UTF-8 does not make the line unreadable.
        let odd = b"42 (\xff) b) Z 7 99 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        assert_eq!(
            parse_stat(odd),
            Some(Stat {
                ppid: 7,
                pgrp: 99,
                exiting: false,
                zombie: true,
                start: 12345
            })
        );
    }

    /// A process whose command name is not UTF-8 (exec'd through a link so
    /// named) is read like any other: a member when it sits in the data
    /// directory, nothing at all when it does not. Before, its stat did not
    /// read as text and it was "in doubt" in every scan of every cluster on the
    /// host, refusing their starts and keeping their fences incomplete.
    #[test]
    fn a_command_name_that_is_not_utf8_is_read() {
        use std::os::unix::ffi::OsStrExt;
        let dir = scratch("stat-not-utf8");
        let other = scratch("stat-not-utf8-other");
        let link = dir.join(std::ffi::OsStr::from_bytes(b"sl\xffep"));
        std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
        let mut c = Command::new(&link)
            .arg("30")
            .current_dir(&dir)
            .spawn()
            .unwrap();
        wait_in(c.id(), &dir);
        let comm = fs::read(format!("/proc/{}/comm", c.id())).unwrap();
        assert_eq!(comm, b"sl\xffep\n", "the kernel names it after the link");
        let st = read_stat(c.id()).expect("its stat reads");
        assert_eq!(st.ppid, std::process::id());
        assert_eq!(proc_state(c.id()).map(|s| s != 'Z'), Some(true));
        assert!(alive_in(c.id(), &dir));
        let s = ProcFs::system()
            .scan(&cluster(&dir), &BTreeMap::new())
            .unwrap();
        assert_eq!(s.pids(), vec![c.id()], "a member, not in doubt: {s:?}");
        assert_eq!(s.members[0].why, Why::Dir);
        let s = ProcFs::system()
            .scan(&cluster(&other), &BTreeMap::new())
            .unwrap();
        assert!(s.is_empty(), "another cluster's scan: {s:?}");
        // Its own process group, as a replica method's: found by the group check.
        let pgid = nix::unistd::getpgrp().as_raw() as u32;
        assert!(group_members(pgid, std::process::id()).contains(&c.id()));
        c.kill().unwrap();
        c.wait().unwrap();
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_dir_all(&other);
    }

    #[test]
    fn fence_of_nothing_is_complete() {
        let d = std::env::temp_dir().join("tenure-no-such-dir-for-fence");
        let out = fence(&ProcFs::system(), &cluster(&d), None, soon(50));
        assert_eq!(out, FenceOutcome::Complete);
    }

    #[test]
    fn fence_kills_a_process_in_the_dir() {
        // A child that sits in a scratch dir ignoring SIGQUIT: the fence must
        // escalate to SIGKILL and report Complete.
        let dir = scratch("fence-unit");
        let child = stubborn(&dir);
        let pid = child.id();
        wait_in(pid, &dir);
        // The sh child reaped by us only after the fence: until then it is a
        // zombie, which the fence must not count.
        let out = fence(&ProcFs::system(), &cluster(&dir), None, soon(400));
        assert_eq!(out, FenceOutcome::Complete);
        assert!(!running(pid));
        end(child);
        let _ = fs::remove_dir_all(&dir);
    }

    /// S1 whatever `/proc` says: the postmaster's pidfd, opened while it was verified,
    /// is signalled even when the process table cannot be listed (the fence stays
    /// Incomplete: nothing proves the rest is gone). Before, nothing was sent.
    #[test]
    fn a_held_postmaster_pidfd_is_signalled_when_the_table_cannot_be_read() {
        let dir = scratch("fence-held");
        let child = stubborn(&dir);
        let pid = child.id();
        wait_in(pid, &dir);
        let held = pidfd_of_verified(pid, &dir).expect("pidfd of a verified process");
        assert!(pidfd_of_verified(pid, &dir.join("elsewhere")).is_none());
        let procs = ProcFs::at(dir.join("no-such-proc"));
        let out = fence(&procs, &cluster(&dir), Some(&held), soon(200));
        assert_eq!(out, FenceOutcome::Incomplete);
        // SIGQUIT is ignored by the stubborn child; the escalation's SIGKILL is not.
        assert!(!running(pid), "the held postmaster was not killed");
        end(child);
        let _ = fs::remove_dir_all(&dir);
    }

    /// DESIGN §5 (issue 8, finding 7): a process table that cannot be listed is no
    /// proof that nothing runs. Before the fix the scan returned an empty list and
    /// the fence said Complete without a signal.
    #[test]
    fn fence_with_an_unlistable_process_table_is_incomplete() {
        let dir = scratch("fence-unlistable");
        let child = stubborn(&dir);
        wait_in(child.id(), &dir);
        let procs = ProcFs::at(dir.join("no-such-proc"));
        assert!(procs.scan(&cluster(&dir), &BTreeMap::new()).is_err());
        let out = fence(&procs, &cluster(&dir), None, soon(100));
        assert_eq!(out, FenceOutcome::Incomplete);
        assert!(
            running(child.id()),
            "nothing could be verified: nothing sent"
        );
        end(child);
        let _ = fs::remove_dir_all(&dir);
    }

    /// The same with the real `/proc` and the real failure the review named: the
    /// process out of file descriptors (EMFILE). Runs in a child process of this
    /// test binary, so exhausting its descriptors disturbs no other test.
    #[test]
    fn fence_out_of_file_descriptors_is_incomplete() {
        const NAME: &str = "pg::procs::tests::fence_out_of_file_descriptors_is_incomplete";
        if std::env::var_os("TENURE_EMFILE_CHILD").is_none() {
            let out = Command::new(std::env::current_exe().unwrap())
                .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
                .env("TENURE_EMFILE_CHILD", "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("EMFILE child checked"), "{text}");
            return;
        }
        let dir = scratch("fence-emfile");
        let child = stubborn(&dir);
        wait_in(child.id(), &dir);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit fill or read the struct we pass; no other memory.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
            let low = libc::rlimit {
                rlim_cur: 64.min(lim.rlim_cur),
                rlim_max: lim.rlim_max,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &low), 0);
        }
        let mut fds = Vec::new();
        while let Ok(f) = fs::File::open("/dev/null") {
            fds.push(f);
        }
        let err = fs::read_dir("/proc").err().and_then(|e| e.raw_os_error());
        let out = fence(&ProcFs::system(), &cluster(&dir), None, soon(100));
        drop(fds);
        assert_eq!(err, Some(libc::EMFILE));
        assert_eq!(out, FenceOutcome::Incomplete);
        assert!(running(child.id()), "nothing verified, nothing sent");
        end(child);
        let _ = fs::remove_dir_all(&dir);
        println!("EMFILE child checked");
    }

    /// A fake process table: `<root>/<pid>` links to the real `/proc/<pid>` (reads
    /// follow the process, and fail as "gone" once it is), or is a directory whose
    /// `stat` or `cwd` cannot be read.
    fn fake_root(tag: &str) -> PathBuf {
        let root = scratch(tag).join("proc");
        fs::create_dir(&root).unwrap();
        root
    }

    fn link_real(root: &Path, pid: u32) {
        std::os::unix::fs::symlink(format!("/proc/{pid}"), root.join(pid.to_string())).unwrap();
    }

    /// DESIGN §5: a process whose membership cannot be read (any failure but "gone")
    /// keeps the fence incomplete and is never signalled; the verified ones still
    /// are. Before the fix such a process was skipped and the fence said Complete.
    #[test]
    fn unreadable_process_keeps_the_fence_incomplete_and_is_not_signalled() {
        let dir = scratch("fence-unreadable");
        let root = fake_root("fence-unreadable-proc");
        let ok = stubborn(&dir);
        let bad_stat = stubborn(&dir);
        let bad_cwd = stubborn(&dir);
        for c in [&ok, &bad_stat, &bad_cwd] {
            wait_in(c.id(), &dir);
        }
        link_real(&root, ok.id());
        // stat unreadable (EISDIR), cwd pointing into the data directory.
        let e = root.join(bad_stat.id().to_string());
        fs::create_dir_all(e.join("stat")).unwrap();
        std::os::unix::fs::symlink(&dir, e.join("cwd")).unwrap();
        // stat readable, cwd unreadable (not a link: EINVAL).
        let e = root.join(bad_cwd.id().to_string());
        fs::create_dir_all(&e).unwrap();
        std::os::unix::fs::symlink(format!("/proc/{}/stat", bad_cwd.id()), e.join("stat")).unwrap();
        fs::write(e.join("cwd"), "").unwrap();

        let procs = ProcFs::at(&root);
        let s = procs.scan(&cluster(&dir), &BTreeMap::new()).unwrap();
        let unknown: Vec<u32> = s.unknown.iter().map(|(p, _)| *p).collect();
        assert!(unknown.contains(&bad_stat.id()), "{s:?}");
        assert!(unknown.contains(&bad_cwd.id()), "{s:?}");
        assert_eq!(s.members.len(), 1, "{s:?}");

        let out = fence(&procs, &cluster(&dir), None, soon(300));
        assert_eq!(out, FenceOutcome::Incomplete);
        assert!(!running(ok.id()), "the verified process was killed");
        assert!(running(bad_stat.id()), "unverified: never signalled");
        assert!(running(bad_cwd.id()), "unverified: never signalled");
        for c in [ok, bad_stat, bad_cwd] {
            end(c);
        }
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_dir_all(root.parent().unwrap());
    }

    /// A pid listed but gone by the time its stat is read is fine: "gone" is an
    /// answer. So is a process that is someone else's (cwd elsewhere).
    #[test]
    fn vanished_and_foreign_processes_do_not_hold_the_fence() {
        let dir = scratch("fence-vanished");
        let root = fake_root("fence-vanished-proc");
        fs::create_dir(root.join("3999999999")).unwrap();
        let mut gone = Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        gone.wait().unwrap();
        link_real(&root, gone_pid);
        link_real(&root, std::os::unix::process::parent_id());
        let procs = ProcFs::at(&root);
        let s = procs.scan(&cluster(&dir), &BTreeMap::new()).unwrap();
        assert!(s.is_empty(), "{s:?}");
        assert_eq!(
            fence(&procs, &cluster(&dir), None, soon(100)),
            FenceOutcome::Complete
        );
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_dir_all(root.parent().unwrap());
    }

    /// A process whose `/proc` entry belongs to a uid PostgreSQL cannot run as is
    /// provably not the cluster's (an agent running as the PostgreSQL user cannot
    /// read other users' cwd); an entry of one of those uids is not ruled out.
    #[test]
    fn foreign_owner_rules_a_process_out() {
        let root = fake_root("fence-foreign-proc");
        let e = root.join("77");
        fs::create_dir(&e).unwrap();
        nix::unistd::chown(&e, Some(nix::unistd::Uid::from_raw(12345)), None).unwrap();
        fs::create_dir(root.join("78")).unwrap();
        let procs = ProcFs::at(&root);
        assert!(procs.foreign(77, &[999]));
        assert!(!procs.foreign(77, &[999, 12345]));
        assert!(
            !procs.foreign(77, &[]),
            "no owners known: only root ruled out"
        );
        assert!(
            procs.foreign(78, &[]),
            "root-owned: PostgreSQL never runs as root"
        );
        assert!(procs.foreign(78, &[12345]));
        assert!(!procs.foreign(79, &[999]), "no entry: nothing ruled out");
        let _ = fs::remove_dir_all(root.parent().unwrap());
    }

    /// Issue 8, finding 7: a postmaster pg_ctl just forked has not changed into the
    /// data directory yet; the cwd scan misses it and, before the fix, the fence
    /// said Complete and the server came up after it. The job's whole process tree
    /// (here a shell in `/` with a child that ignores SIGQUIT) is the cluster's.
    #[test]
    fn fence_kills_the_job_tree_outside_the_dir() {
        let dir = scratch("fence-job-tree");
        let mut job = Command::new("sh")
            .arg("-c")
            .arg("sh -c 'trap \"\" QUIT; while :; do sleep 0.01; done' & wait")
            .current_dir("/")
            .spawn()
            .unwrap();
        let kid =
            crate::testbed::wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
                ProcFs::system()
                    .list()
                    .unwrap()
                    .into_iter()
                    .find(|&p| read_stat(p).is_some_and(|s| s.ppid == job.id() && !s.zombie))
            })
            .expect("the job's child");
        let c = Cluster {
            job: Some(job.id()),
            ..cluster(&dir)
        };
        let s = ProcFs::system().scan(&c, &BTreeMap::new()).unwrap();
        assert!(
            s.members.iter().any(|m| m.pid == kid && m.why == Why::Job),
            "{s:?}"
        );
        let out = fence(&ProcFs::system(), &c, None, soon(400));
        assert_eq!(out, FenceOutcome::Complete);
        assert!(!running(kid), "the job's child was killed");
        assert!(!running(job.id()), "the job itself was killed");
        let _ = job.wait();
        let _ = fs::remove_dir_all(&dir);
    }

    /// A stale `postmaster.pid` naming someone else's live process does not hold
    /// the fence (nor get it signalled); a verified one is the postmaster.
    #[test]
    fn postmaster_pid_counts_only_once_verified() {
        let dir = scratch("fence-pm");
        let elsewhere = scratch("fence-pm-elsewhere");
        let other = stubborn(&elsewhere);
        wait_in(other.id(), &elsewhere);
        let c = Cluster {
            postmaster: Some(other.id()),
            ..cluster(&dir)
        };
        assert_eq!(
            fence(&ProcFs::system(), &c, None, soon(100)),
            FenceOutcome::Complete
        );
        assert!(running(other.id()));
        let pm = stubborn(&dir);
        wait_in(pm.id(), &dir);
        let c = Cluster {
            postmaster: Some(pm.id()),
            ..cluster(&dir)
        };
        let s = ProcFs::system().scan(&c, &BTreeMap::new()).unwrap();
        // The stand-in postmaster (a shell) may have a `sleep` child at this instant:
        // it counts as the postmaster's child, never as another postmaster.
        let pm_member = s.members.iter().find(|m| m.pid == pm.id());
        assert_eq!(
            pm_member.map(|m| m.why),
            Some(Why::Postmaster),
            "{:?}",
            s.members
        );
        assert!(
            s.members
                .iter()
                .all(|m| m.pid == pm.id() || m.why == Why::PostmasterChild),
            "{:?}",
            s.members
        );
        end(other);
        end(pm);
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_dir_all(&elsewhere);
    }
}
