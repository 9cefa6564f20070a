//! Finding and killing the processes of one PostgreSQL cluster through `/proc`.
//!
//! Owns: the answer to "which processes belong to this data directory" and the
//! immediate fence (DESIGN S1). Must never: signal a process that is not verified,
//! at the moment of the signal, to belong to this data directory (pids are reused:
//! signals go through a pidfd opened before the check), or return after the
//! fence's deadline.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use crate::clock;
use crate::core::model::FenceOutcome;
use crate::core::time::Instant;

/// One process as seen in `/proc/<pid>/stat`.
struct Stat {
    ppid: u32,
    zombie: bool,
}

fn read_stat(pid: u32) -> Option<Stat> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ')' or spaces:
    // the fields we need follow the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    Some(Stat {
        ppid,
        // 'Z' zombie, 'X' dead: they can no longer run, let alone commit.
        zombie: state == "Z" || state == "X",
    })
}

/// Whether `pid` is stopped (SIGSTOP or a tracer): it cannot answer anything.
pub fn is_stopped(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| {
                s[i + 1..]
                    .split_whitespace()
                    .next()
                    .map(|st| st == "T" || st == "t")
            })
            .unwrap_or(false)
    })
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

/// Every live process of the cluster in `dir`: those whose cwd is the data
/// directory, plus the children of `postmaster` (if given). Never our own pid.
pub fn cluster_pids(dir: &Path, postmaster: Option<u32>) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Some(st) = read_stat(pid) else { continue };
        if st.zombie {
            continue;
        }
        if Some(st.ppid) == postmaster || Some(pid) == postmaster || cwd_is(pid, dir) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// A pidfd (Linux >= 5.3): signals sent through it reach exactly the process it
/// was opened for, even if the pid is reused meanwhile.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no
    // memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a fresh file descriptor that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
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

/// Send `sig` to `pid` only if it still belongs to the cluster: open a pidfd
/// first, then check, then signal through the pidfd (no reuse race). Falls back
/// to kill() if pidfds are unavailable (check-then-kill, a tiny race).
pub fn signal_verified(pid: u32, dir: &Path, postmaster: Option<u32>, sig: libc::c_int) -> bool {
    let belongs = |pid: u32| {
        read_stat(pid).is_some_and(|s| !s.zombie && (Some(s.ppid) == postmaster))
            || alive_in(pid, dir)
    };
    match pidfd_open(pid) {
        Some(fd) => belongs(pid) && pidfd_signal(&fd, sig),
        None => {
            if !belongs(pid) {
                return false;
            }
            // SAFETY: kill() with a pid and a signal number has no memory effects.
            unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
        }
    }
}

/// DESIGN S1's fence: SIGQUIT the postmaster (or, with none alive, every process
/// of the cluster), wait until none remains, SIGKILL every survivor after half the
/// time to the deadline. Polls every few ms; never returns after `deadline`.
pub fn fence(dir: &Path, postmaster: Option<u32>, deadline: Instant) -> FenceOutcome {
    let start = clock::now();
    let escalate_at = start.add(start.until(deadline) / 2);
    let mut escalated = false;
    let first = cluster_pids(dir, postmaster);
    if first.is_empty() {
        return FenceOutcome::Complete;
    }
    let pm_alive = postmaster.is_some_and(|p| first.contains(&p));
    match postmaster {
        Some(pm) if pm_alive => {
            signal_verified(pm, dir, None, libc::SIGQUIT);
        }
        // No postmaster: surviving backends are on their own; SIGQUIT makes each
        // exit at once without touching shared state.
        _ => {
            for &p in &first {
                signal_verified(p, dir, postmaster, libc::SIGQUIT);
            }
        }
    }
    loop {
        let now = clock::now();
        let left = cluster_pids(dir, postmaster);
        if left.is_empty() {
            return FenceOutcome::Complete;
        }
        if now >= deadline {
            return FenceOutcome::Incomplete;
        }
        if !escalated && now >= escalate_at {
            escalated = true;
            for &p in &left {
                signal_verified(p, dir, postmaster, libc::SIGKILL);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_is_never_listed() {
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        assert!(!cluster_pids(&cwd, None).contains(&std::process::id()));
    }

    #[test]
    fn stat_parses_our_parent() {
        let st = read_stat(std::process::id()).unwrap();
        assert!(!st.zombie);
        assert_eq!(st.ppid, std::os::unix::process::parent_id());
    }

    #[test]
    fn fence_of_nothing_is_complete() {
        let d = std::env::temp_dir().join("tenure-no-such-dir-for-fence");
        let out = fence(&d, None, clock::now().add(Duration::from_millis(50)));
        assert_eq!(out, FenceOutcome::Complete);
    }

    #[test]
    fn fence_kills_a_process_in_the_dir() {
        // A child that sits in a scratch dir ignoring SIGQUIT: the fence must
        // escalate to SIGKILL and report Complete.
        let dir = crate::testbed::scratch_dir("fence-unit").unwrap();
        let dir = dir.canonicalize().unwrap();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("trap '' QUIT; while :; do sleep 0.01; done")
            .current_dir(&dir)
            .spawn()
            .unwrap();
        let pid = child.id();
        crate::testbed::wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
            cwd_is(pid, &dir).then_some(())
        })
        .unwrap();
        // The sh child reaped by us only after the fence: until then it is a
        // zombie, which the fence must not count.
        let out = fence(&dir, None, clock::now().add(Duration::from_millis(400)));
        assert_eq!(out, FenceOutcome::Complete);
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
