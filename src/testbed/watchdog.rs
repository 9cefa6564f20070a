//! Test bed: a watchdog stand-in device (DESIGN §6 "Watchdog:").
//!
//! This machine has no `/dev/watchdog`, no softdog and no CUSE, but a FUSE file
//! receives the real watchdog ioctls. `examples/wdt_standin.rs` is such a file
//! system (one file, mounted as root); this module starts it as a child process,
//! talks to it over its stdin/stdout, and reads the files it writes: the event
//! log (every open, ioctl, ping, write, release and the firing, stamped on
//! `CLOCK_BOOTTIME`) and the firing record (the instant and the reason).
//!
//! The ioctl numbers live here too (pure constants, checked against the literal
//! values of `<linux/watchdog.h>` below) so the stand-in and the tests agree
//! without depending on the agent's own driver module.
//!
//! Owns: the stand-in child (started and stopped by pid), its mount (unmounted
//! on drop with `fusermount3 -u`), its state directory. Must never: kill a
//! process it was not told belongs to the test's "node", or depend on `fuser`
//! (that crate is a dev-dependency of the example only).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use crate::core::time::Instant;

/// `struct watchdog_info` from `<linux/watchdog.h>`: 4 + 4 + 32 bytes.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct WatchdogInfo {
    pub options: u32,
    pub firmware_version: u32,
    pub identity: [u8; 32],
}

/// Size of [`WatchdogInfo`] on the wire (what `WDIOC_GETSUPPORT` encodes).
pub const WATCHDOG_INFO_SIZE: usize = std::mem::size_of::<WatchdogInfo>();

// The ioctl requests, built the way the kernel header builds them.
pub const WDIOC_GETSUPPORT: u32 = nix::request_code_read!(b'W', 0, WATCHDOG_INFO_SIZE) as u32;
pub const WDIOC_GETSTATUS: u32 = nix::request_code_read!(b'W', 1, 4) as u32;
pub const WDIOC_GETBOOTSTATUS: u32 = nix::request_code_read!(b'W', 2, 4) as u32;
pub const WDIOC_GETTEMP: u32 = nix::request_code_read!(b'W', 3, 4) as u32;
pub const WDIOC_SETOPTIONS: u32 = nix::request_code_read!(b'W', 4, 4) as u32;
pub const WDIOC_KEEPALIVE: u32 = nix::request_code_read!(b'W', 5, 4) as u32;
pub const WDIOC_SETTIMEOUT: u32 = nix::request_code_readwrite!(b'W', 6, 4) as u32;
pub const WDIOC_GETTIMEOUT: u32 = nix::request_code_read!(b'W', 7, 4) as u32;
pub const WDIOC_SETPRETIMEOUT: u32 = nix::request_code_readwrite!(b'W', 8, 4) as u32;
pub const WDIOC_GETPRETIMEOUT: u32 = nix::request_code_read!(b'W', 9, 4) as u32;
pub const WDIOC_GETTIMELEFT: u32 = nix::request_code_read!(b'W', 10, 4) as u32;

pub const WDIOF_CARDRESET: u32 = 0x0020;
pub const WDIOF_SETTIMEOUT: u32 = 0x0080;
pub const WDIOF_MAGICCLOSE: u32 = 0x0100;
pub const WDIOF_PRETIMEOUT: u32 = 0x0200;
pub const WDIOF_KEEPALIVEPING: u32 = 0x8000;

/// What `WDIOC_GETSUPPORT` reports as the identity.
pub const STANDIN_IDENTITY: &str = "tenure-standin";

/// Environment variable that overrides where the stand-in binary is.
pub const STANDIN_BIN_ENV: &str = "TENURE_WDT_STANDIN";

/// How the stand-in "resets the host" when it fires (DESIGN §6 "host crash").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKill {
    /// Kill nothing (the firing is only recorded).
    Nothing,
    /// A cgroup v1 freezer directory: freeze, SIGKILL every pid in
    /// `cgroup.procs`, thaw.
    Freezer(PathBuf),
    /// No freezer: SIGSTOP these pids, their descendants and every process
    /// whose cwd is `data_dir` (until a scan finds nothing new), then SIGKILL.
    Pids {
        pids: Vec<i32>,
        data_dir: Option<PathBuf>,
    },
}

/// The device state the stand-in starts in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Initial {
    /// Not running: the first open starts it (a real driver after boot).
    Inactive,
    /// Already running, last ping at start-up (a device left armed).
    Active,
    /// Already fired: opens fail until [`WatchdogStandin::revive`].
    Dead,
}

/// Options for [`WatchdogStandin::start`].
#[derive(Clone, Debug)]
pub struct StandinOptions {
    /// The device file (created empty if missing; the mount covers it).
    pub path: PathBuf,
    /// Where `events.log`, `fired` and the stand-in's stderr go.
    pub state_dir: PathBuf,
    pub host: HostKill,
    pub nowayout: bool,
    /// `WDIOC_GETBOOTSTATUS` reports `WDIOF_CARDRESET` (the last boot was a
    /// watchdog reset).
    pub cardreset: bool,
    pub initial: Initial,
    /// The timeout before any `WDIOC_SETTIMEOUT`, seconds.
    pub timeout_s: u32,
    /// `WDIOC_SETTIMEOUT` clamps to `1..=max_timeout_s`.
    pub max_timeout_s: u32,
    /// Report `WDIOF_PRETIMEOUT` and answer the pretimeout ioctls.
    pub pretimeout: bool,
    /// Report `WDIOF_MAGICCLOSE` (without it, any close disarms).
    pub magic_close: bool,
}

impl StandinOptions {
    /// Defaults like a common driver: 60 s timeout, max 600 s, magic close and
    /// pretimeout supported, `nowayout` off, inactive, kills nothing.
    pub fn new(path: impl Into<PathBuf>, state_dir: impl Into<PathBuf>) -> StandinOptions {
        StandinOptions {
            path: path.into(),
            state_dir: state_dir.into(),
            host: HostKill::Nothing,
            nowayout: false,
            cardreset: false,
            initial: Initial::Inactive,
            timeout_s: 60,
            max_timeout_s: 600,
            pretimeout: true,
            magic_close: true,
        }
    }

    /// The stand-in's command line for these options.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--mount".to_string(),
            self.path.display().to_string(),
            "--state-dir".to_string(),
            self.state_dir.display().to_string(),
            "--timeout".to_string(),
            self.timeout_s.to_string(),
            "--max-timeout".to_string(),
            self.max_timeout_s.to_string(),
            "--initial".to_string(),
            match self.initial {
                Initial::Inactive => "inactive",
                Initial::Active => "active",
                Initial::Dead => "dead",
            }
            .to_string(),
        ];
        if self.nowayout {
            a.push("--nowayout".into());
        }
        if self.cardreset {
            a.push("--cardreset".into());
        }
        if !self.pretimeout {
            a.push("--no-pretimeout".into());
        }
        if !self.magic_close {
            a.push("--no-magicclose".into());
        }
        a.extend(host_args(&self.host));
        a
    }
}

/// `host` as command-line words (also the words of the `host` control command).
pub fn host_args(host: &HostKill) -> Vec<String> {
    let mut a = Vec::new();
    match host {
        HostKill::Nothing => {}
        HostKill::Freezer(dir) => {
            a.push("--freezer".into());
            a.push(dir.display().to_string());
        }
        HostKill::Pids { pids, data_dir } => {
            for p in pids {
                a.push("--pid".into());
                a.push(p.to_string());
            }
            if let Some(d) = data_dir {
                a.push("--data-dir".into());
                a.push(d.display().to_string());
            }
        }
    }
    a
}

/// Name of the event log in the state directory. One line per event:
/// `<CLOCK_BOOTTIME ns> <event> <details>`.
pub const EVENTS_FILE: &str = "events.log";
/// Name of the firing record: `<CLOCK_BOOTTIME ns> <reason>`, written once.
pub const FIRED_FILE: &str = "fired";

/// A running stand-in. Dropping it unmounts the file and stops the process.
pub struct WatchdogStandin {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<String>,
    path: PathBuf,
    state_dir: PathBuf,
}

impl WatchdogStandin {
    /// The stand-in binary: `$TENURE_WDT_STANDIN`, else `examples/wdt_standin`
    /// in the first ancestor of this executable that has it (test binaries
    /// live in `target/debug/deps`, examples in `target/debug/examples`).
    pub fn binary() -> Result<PathBuf, String> {
        if let Some(p) = std::env::var_os(STANDIN_BIN_ENV) {
            return Ok(PathBuf::from(p));
        }
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        for dir in exe.ancestors().skip(1) {
            let cand = dir.join("examples").join("wdt_standin");
            if cand.is_file() {
                return Ok(cand);
            }
        }
        Err(format!(
            "watchdog stand-in not found in any examples/ above {} \
             (build it with `cargo build --examples`, or set {STANDIN_BIN_ENV})",
            exe.display()
        ))
    }

    /// Start the stand-in and wait (at most `limit`) until its file answers.
    pub fn start(opts: &StandinOptions, limit: Duration) -> Result<WatchdogStandin, String> {
        let bin = Self::binary()?;
        std::fs::create_dir_all(&opts.state_dir)
            .map_err(|e| format!("create {}: {e}", opts.state_dir.display()))?;
        if !opts.path.exists() {
            std::fs::write(&opts.path, b"")
                .map_err(|e| format!("create mount point {}: {e}", opts.path.display()))?;
        }
        let stderr_path = opts.state_dir.join("standin.stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| format!("create {}: {e}", stderr_path.display()))?;
        let mut child = Command::new(&bin)
            .args(opts.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("stand-in has no stdout pipe")?;
        let (tx, replies) = channel();
        // A reader thread turns stdout lines into a channel, so every wait for a
        // reply has a deadline (`recv_timeout`). It ends when the pipe closes.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut me = WatchdogStandin {
            stdin: child.stdin.take(),
            child,
            replies,
            path: opts.path.clone(),
            state_dir: opts.state_dir.clone(),
        };
        match me.replies.recv_timeout(limit) {
            Ok(line) if line == "ready" => Ok(me),
            Ok(line) => Err(format!("stand-in said {line:?} instead of ready")),
            Err(_) => {
                let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                let status = me.child.try_wait().ok().flatten();
                Err(format!(
                    "stand-in not ready within {limit:?} (exit: {status:?}); stderr: {err}"
                ))
            }
        }
    }

    /// The device file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stand-in's pid (it is not part of any test node).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// When it fired (`CLOCK_BOOTTIME`) and why; `None` while it has not (or
    /// since the last [`revive`](Self::revive)).
    pub fn fired(&self) -> Option<(Instant, String)> {
        let text = std::fs::read_to_string(self.state_dir.join(FIRED_FILE)).ok()?;
        let (ns, reason) = text.trim_end().split_once(' ')?;
        Some((Instant::from_nanos(ns.parse().ok()?), reason.to_string()))
    }

    /// Poll [`fired`](Self::fired) every 5 ms until it fires or `limit` passes.
    pub fn wait_fired(&self, limit: Duration) -> Option<(Instant, String)> {
        super::wait_for(limit, Duration::from_millis(5), || self.fired())
    }

    /// The event log so far (empty if unreadable).
    pub fn events(&self) -> String {
        std::fs::read_to_string(self.state_dir.join(EVENTS_FILE)).unwrap_or_default()
    }

    /// The events as `(instant, event, details)`, in order.
    pub fn event_list(&self) -> Vec<(Instant, String, String)> {
        parse_events(&self.events())
    }

    /// The last ping (a line whose event is `ping`), if any.
    pub fn last_ping(&self) -> Option<Instant> {
        self.event_list()
            .into_iter()
            .rev()
            .find(|(_, ev, _)| ev == "ping")
            .map(|(t, _, _)| t)
    }

    /// Switch `nowayout` (then a magic close only pings, never disarms).
    pub fn set_nowayout(&mut self, on: bool) -> Result<(), String> {
        self.command(if on { "nowayout on" } else { "nowayout off" })
    }

    /// Change who dies when it fires (e.g. once the node's pids are known).
    pub fn set_host(&mut self, host: &HostKill) -> Result<(), String> {
        let words = host_args(host);
        if words.iter().any(|w| w.contains('\n') || w.contains('\t')) {
            return Err(format!(
                "host paths must not contain tabs or newlines: {host:?}"
            ));
        }
        let mut cmd = "host".to_string();
        for w in words {
            cmd.push('\t');
            cmd.push_str(&w);
        }
        self.command(&cmd)
    }

    /// After a firing: the host "rebooted". The device is inactive again, not
    /// open, its boot status reports `WDIOF_CARDRESET`, `fired()` is `None`.
    pub fn revive(&mut self) -> Result<(), String> {
        self.command("revive")
    }

    /// Send one control line and wait (at most 5 s) for its `ok` or error.
    fn command(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stand-in stdin already closed")?;
        writeln!(stdin, "{line}")
            .and_then(|_| stdin.flush())
            .map_err(|e| format!("stand-in control {line:?}: {e}"))?;
        match self.replies.recv_timeout(Duration::from_secs(5)) {
            Ok(r) if r == "ok" => Ok(()),
            Ok(r) => Err(format!("stand-in control {line:?}: {r}")),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("stand-in control {line:?}: no answer in 5 s"))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(format!("stand-in control {line:?}: stand-in exited"))
            }
        }
    }
}

impl Drop for WatchdogStandin {
    fn drop(&mut self) {
        // Closing stdin asks the stand-in to unmount and exit on its own.
        drop(self.stdin.take());
        let exited = super::wait_for(Duration::from_secs(3), Duration::from_millis(10), || {
            self.child.try_wait().ok().flatten()
        });
        if exited.is_none() {
            super::stop_child(&mut self.child, Duration::from_secs(1));
        }
        // Belt and braces: if it died without unmounting, the mount is stale.
        // `-z` detaches it even if someone still holds the file open.
        if is_mounted(&self.path) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Whether `path` is a mount point (listed in `/proc/self/mountinfo`).
pub fn is_mounted(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.display().to_string();
    // Field 5 is the mount point, with spaces etc. octal-escaped.
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| m.replace("\\040", " ") == want)
    })
}

/// Parse `events.log` lines: `<ns> <event> <details...>`. Malformed lines are
/// skipped (a line being written is not complete yet).
pub fn parse_events(text: &str) -> Vec<(Instant, String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let ns: u64 = it.next()?.parse().ok()?;
            let ev = it.next()?.to_string();
            let rest = it.next().unwrap_or("").to_string();
            Some((Instant::from_nanos(ns), ev, rest))
        })
        .collect()
}

/// What [`crash_host`] did.
#[derive(Clone, Copy, Debug)]
pub struct HostCrash {
    /// How many processes were sent SIGKILL.
    pub killed: usize,
    /// When every process of the node had stopped running (frozen or in
    /// SIGSTOP), `CLOCK_BOOTTIME`: the instant a real reset stands for. Nothing
    /// the node's processes did after it can have happened; a reply already on
    /// its way (a commit acknowledged a moment before) can still arrive later.
    pub stopped: Instant,
}

/// DESIGN §6 "host crash": every process of the node dies at once. `spare`
/// (the caller, its parent) is never touched even if a scan finds it. Every
/// wait is bounded (a few seconds).
pub fn crash_host(host: &HostKill, spare: &[i32]) -> Result<HostCrash, String> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let signal = |p: i32, s: Signal| {
        if !spare.contains(&p) {
            let _ = kill(Pid::from_raw(p), s);
        }
    };
    match host {
        HostKill::Nothing => Ok(HostCrash {
            killed: 0,
            stopped: crate::clock::now(),
        }),
        HostKill::Freezer(cg) => {
            let state = cg.join("freezer.state");
            std::fs::write(&state, "FROZEN")
                .map_err(|e| format!("write FROZEN to {}: {e}", state.display()))?;
            // Wait for FROZEN, but SIGKILL regardless after 2 s: a pending
            // SIGKILL is delivered at thaw either way, and a stuck freeze must
            // not keep the node alive.
            let frozen = super::wait_for(Duration::from_secs(2), Duration::from_millis(1), || {
                (std::fs::read_to_string(&state).ok()?.trim() == "FROZEN").then_some(())
            });
            // FROZEN means every task of the cgroup is frozen: nothing of the
            // node runs after this instant.
            let frozen_at = crate::clock::now();
            let pids = cgroup_pids(cg);
            for &p in &pids {
                signal(p, Signal::SIGKILL);
            }
            std::fs::write(&state, "THAWED")
                .map_err(|e| format!("write THAWED to {}: {e}", state.display()))?;
            let gone = super::wait_for(Duration::from_secs(5), Duration::from_millis(2), || {
                cgroup_pids(cg).is_empty().then_some(())
            });
            match (frozen, gone) {
                (Some(()), Some(())) => Ok(HostCrash {
                    killed: pids.len(),
                    stopped: frozen_at,
                }),
                // Never froze: the node ran until it was gone.
                (None, Some(())) => Ok(HostCrash {
                    killed: pids.len(),
                    stopped: crate::clock::now(),
                }),
                (None, None) => Err(format!(
                    "{} never froze and {:?} survived SIGKILL",
                    cg.display(),
                    cgroup_pids(cg)
                )),
                (Some(()), None) => Err(format!(
                    "{:?} survived SIGKILL in {}",
                    cgroup_pids(cg),
                    cg.display()
                )),
            }
        }
        HostKill::Pids { pids, data_dir } => {
            let mut stopped: Vec<i32> = Vec::new();
            // Keep stopping until a scan finds nothing new: a process forked
            // between two scans is caught by the next one.
            for _ in 0..50 {
                let mut found: Vec<i32> = Vec::new();
                for &p in pids {
                    if std::path::Path::new(&format!("/proc/{p}")).exists() {
                        found.push(p);
                    }
                    found.extend(super::cluster::descendants(p));
                }
                if let Some(d) = data_dir {
                    found.extend(super::cluster::pids_with_cwd(d));
                }
                found.retain(|p| !stopped.contains(p) && !spare.contains(p));
                found.dedup();
                if found.is_empty() {
                    break;
                }
                for p in found {
                    signal(p, Signal::SIGSTOP);
                    stopped.push(p);
                }
            }
            // SIGSTOP is delivered on the way back to user space: wait (bounded)
            // until every process shows state T (or is gone) before taking the
            // instant the node stopped.
            let all_stopped =
                super::wait_for(Duration::from_secs(1), Duration::from_millis(1), || {
                    stopped
                        .iter()
                        .all(|&p| proc_stopped_or_gone(p))
                        .then_some(())
                });
            let stopped_at = crate::clock::now();
            for &p in &stopped {
                signal(p, Signal::SIGKILL);
            }
            let stopped_at = match all_stopped {
                Some(()) => stopped_at,
                // One never showed T: count the node as running until SIGKILL.
                None => crate::clock::now(),
            };
            Ok(HostCrash {
                killed: stopped.len(),
                stopped: stopped_at,
            })
        }
    }
}

/// Whether the process is stopped (`T`, `t`) or dead (`Z`, `X`, or gone).
fn proc_stopped_or_gone(pid: i32) -> bool {
    let Ok(pid) = u32::try_from(pid) else {
        return true;
    };
    matches!(
        crate::pg::procs::proc_state(pid),
        None | Some('T' | 't' | 'Z' | 'X')
    )
}

fn cgroup_pids(cg: &Path) -> Vec<i32> {
    std::fs::read_to_string(cg.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literal values from `<linux/watchdog.h>` on x86_64, so a mistake in
    /// the macros above cannot hide behind a test that uses the same macros.
    #[test]
    fn ioctl_numbers_match_the_kernel_header() {
        assert_eq!(WATCHDOG_INFO_SIZE, 40);
        assert_eq!(WDIOC_GETSUPPORT, 0x8028_5700);
        assert_eq!(WDIOC_GETSTATUS, 0x8004_5701);
        assert_eq!(WDIOC_GETBOOTSTATUS, 0x8004_5702);
        assert_eq!(WDIOC_GETTEMP, 0x8004_5703);
        assert_eq!(WDIOC_SETOPTIONS, 0x8004_5704);
        assert_eq!(WDIOC_KEEPALIVE, 0x8004_5705);
        assert_eq!(WDIOC_SETTIMEOUT, 0xc004_5706);
        assert_eq!(WDIOC_GETTIMEOUT, 0x8004_5707);
        assert_eq!(WDIOC_SETPRETIMEOUT, 0xc004_5708);
        assert_eq!(WDIOC_GETPRETIMEOUT, 0x8004_5709);
        assert_eq!(WDIOC_GETTIMELEFT, 0x8004_570a);
    }

    #[test]
    fn events_parse_and_skip_partial_lines() {
        let ev = parse_events("10 open pid=3\n20 ping open\nbad\n30 fire x y\n40");
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[1].0, Instant::from_nanos(20));
        assert_eq!(ev[1].1, "ping");
        assert_eq!(ev[2].2, "x y");
    }

    #[test]
    fn options_render_host_and_switches() {
        let mut o = StandinOptions::new("/x/wd", "/x/st");
        o.nowayout = true;
        o.host = HostKill::Pids {
            pids: vec![5, 6],
            data_dir: Some("/d".into()),
        };
        let a = o.args().join(" ");
        assert!(a.contains("--nowayout"));
        assert!(a.ends_with("--pid 5 --pid 6 --data-dir /d"), "{a}");
    }
}
