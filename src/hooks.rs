//! Hooks (`[hooks]`): operator commands run on start, stop, restart, reload and role
//! change, called as Patroni calls its callbacks: `<cmd> <action> <role> <scope>`
//! (`on_role_change primary demo`), so existing Patroni callback scripts (moving a
//! virtual IP, telling a connection pooler) work unchanged.
//!
//! Each hook runs as a child: stdin `/dev/null`, its own process group, no shell
//! (the command is split on whitespace; the first word must be an absolute path).
//! It is never waited on: the loop reaps it without blocking on its wake-ups
//! (SIGCHLD wakes the loop) and kills its whole process group with SIGKILL at its
//! deadline (`[hooks] timeout`, default 10 s). One hook runs at a time: a new event
//! while one runs kills the old one first (Patroni's behaviour: only the latest
//! role matters to whatever the hook moves).
//!
//! Owns: the running hook, its deadline, and the hooks it killed until reaped.
//! Must never: wait for a hook, run one through a shell, or let one outlive its
//! deadline by more than the loop's next wake-up (the loop wakes at
//! [`Hooks::deadline`]).

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::core::time::Instant;
use crate::events::{self, Event};

/// The default deadline of a hook. Patroni's callbacks have none (only a newer
/// event kills one). A VIP move or a pooler reload takes well under a second; 10 s
/// leaves room for a slow `arping` or a busy host, and a hook still running after
/// that is hung: it is killed and said (HOOK_KILLED) rather than left to pile up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `[hooks] timeout` accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// What happened (Patroni's callback action names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookAction {
    Start,
    Stop,
    Restart,
    Reload,
    RoleChange,
}

impl HookAction {
    /// The action argument (and the `[hooks]` key).
    pub fn name(self) -> &'static str {
        match self {
            HookAction::Start => "on_start",
            HookAction::Stop => "on_stop",
            HookAction::Restart => "on_restart",
            HookAction::Reload => "on_reload",
            HookAction::RoleChange => "on_role_change",
        }
    }

    pub const ALL: [HookAction; 5] = [
        HookAction::Start,
        HookAction::Stop,
        HookAction::Restart,
        HookAction::Reload,
        HookAction::RoleChange,
    ];
}

/// `[hooks]`: a command (program and fixed arguments) per action, and the deadline.
#[derive(Clone, Debug, PartialEq)]
pub struct HooksConfig {
    pub on_start: Option<Vec<String>>,
    pub on_stop: Option<Vec<String>>,
    pub on_restart: Option<Vec<String>>,
    pub on_reload: Option<Vec<String>>,
    pub on_role_change: Option<Vec<String>>,
    pub timeout: Duration,
}

impl Default for HooksConfig {
    fn default() -> HooksConfig {
        HooksConfig {
            on_start: None,
            on_stop: None,
            on_restart: None,
            on_reload: None,
            on_role_change: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl HooksConfig {
    pub fn command(&self, a: HookAction) -> Option<&[String]> {
        match a {
            HookAction::Start => self.on_start.as_deref(),
            HookAction::Stop => self.on_stop.as_deref(),
            HookAction::Restart => self.on_restart.as_deref(),
            HookAction::Reload => self.on_reload.as_deref(),
            HookAction::RoleChange => self.on_role_change.as_deref(),
        }
    }
}

/// Split and check one `[hooks] on_*` value: whitespace-separated words, no shell;
/// the program an absolute path; no control characters. `Err` says why.
pub fn parse_command(s: &str) -> Result<Vec<String>, String> {
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    let words: Vec<String> = s.split_whitespace().map(str::to_string).collect();
    match words.first() {
        None => Err("must name a program".into()),
        Some(p) if !Path::new(p).is_absolute() => Err(format!(
            "the program {p:?} must be an absolute path (hooks run without a shell or PATH)"
        )),
        Some(_) => Ok(words),
    }
}

/// A hook under way.
#[derive(Debug)]
struct Running {
    child: Child,
    action: HookAction,
    role: &'static str,
    started: Instant,
    deadline: Instant,
}

/// The hook runner the loop owns.
#[derive(Debug)]
pub struct Hooks {
    cfg: HooksConfig,
    scope: String,
    running: Option<Running>,
    /// Killed (SIGKILL to the group), not reaped yet.
    dying: Vec<Child>,
}

impl Hooks {
    pub fn new(cfg: HooksConfig, scope: &str) -> Hooks {
        Hooks {
            cfg,
            scope: scope.to_string(),
            running: None,
            dying: Vec::new(),
        }
    }

    /// A reload's new `[hooks]` (a running hook keeps its deadline).
    pub fn set_config(&mut self, cfg: HooksConfig) {
        self.cfg = cfg;
    }

    /// Run the hook for `action` with `role`, if one is configured: a running hook
    /// is killed first. Never waits.
    pub fn fire(&mut self, action: HookAction, role: &'static str, now: Instant) {
        let Some(cmd) = self.cfg.command(action) else {
            return;
        };
        let cmd = cmd.to_vec();
        if let Some(old) = self.running.take() {
            self.kill(old, "replaced", now);
        }
        let mut c = Command::new(&cmd[0]);
        c.args(&cmd[1..])
            .arg(action.name())
            .arg(role)
            .arg(&self.scope)
            .stdin(Stdio::null())
            // Its own group: the deadline's SIGKILL reaches whatever it started.
            .process_group(0);
        match c.spawn() {
            Ok(child) => {
                log::info!(
                    "hook {} started (pid {}): {} {} {role} {}",
                    action.name(),
                    child.id(),
                    cmd.join(" "),
                    action.name(),
                    self.scope
                );
                self.running = Some(Running {
                    child,
                    action,
                    role,
                    started: now,
                    deadline: now.add(self.cfg.timeout),
                });
            }
            Err(e) => events::emit(&Event::HookFailed {
                action: action.name(),
                role,
                why: format!("cannot start {}: {e}", cmd[0]),
            }),
        }
    }

    fn kill(&mut self, r: Running, why: &'static str, now: Instant) {
        let pgid = nix::unistd::Pid::from_raw(r.child.id() as i32);
        // The group is the child's own (process_group(0)): its pid is the pgid.
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        events::emit(&Event::HookKilled {
            action: r.action.name(),
            role: r.role,
            why,
            after: now.since(r.started),
        });
        self.dying.push(r.child);
    }

    /// Reap a finished hook (without waiting), say a failure, and kill one past its
    /// deadline. Call on every wake-up of the loop.
    pub fn service(&mut self, now: Instant) {
        self.dying.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        let Some(r) = self.running.as_mut() else {
            return;
        };
        match r.child.try_wait() {
            Ok(None) if now >= r.deadline => {
                if let Some(r) = self.running.take() {
                    self.kill(r, "deadline", now);
                }
            }
            Ok(None) => {}
            Ok(Some(status)) => {
                if status.success() {
                    log::info!(
                        "hook {} done in {:.3} s",
                        r.action.name(),
                        now.since(r.started).as_secs_f64()
                    );
                } else {
                    events::emit(&Event::HookFailed {
                        action: r.action.name(),
                        role: r.role,
                        why: format!("exited {status}"),
                    });
                }
                self.running = None;
            }
            Err(e) => {
                log::warn!("hook {}: {e}", r.action.name());
                self.running = None;
            }
        }
    }

    /// At a clean exit (the loop is over: no lease, no primary): let the running
    /// hook (an `on_stop`, say) finish until its deadline, then kill its group.
    /// Bounded by `[hooks] timeout`.
    pub fn finish(&mut self) {
        while let Some(deadline) = self.deadline() {
            let now = crate::clock::now();
            self.service(now);
            if now >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20).min(now.until(deadline)));
        }
    }

    /// When the loop must wake to kill the running hook.
    pub fn deadline(&self) -> Option<Instant> {
        self.running.as_ref().map(|r| r.deadline)
    }

    /// Whether `pid` is a hook of ours (the loop's orphan reaper leaves it to us).
    pub fn owns(&self, pid: u32) -> bool {
        self.running.as_ref().is_some_and(|r| r.child.id() == pid)
            || self.dying.iter().any(|c| c.id() == pid)
    }
}

impl Drop for Hooks {
    /// A hook never outlives the agent's clean exit unreaped for long: kill the
    /// running one's group (its deadline would have).
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let pgid = nix::unistd::Pid::from_raw(r.child.id() as i32);
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_checked() {
        assert_eq!(
            parse_command("/usr/local/bin/vip --dev eth0"),
            Ok(vec![
                "/usr/local/bin/vip".to_string(),
                "--dev".into(),
                "eth0".into()
            ])
        );
        assert!(parse_command("vip.sh").is_err());
        assert!(parse_command("   ").is_err());
        assert!(parse_command("/bin/true\n/bin/false").is_err());
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into(), "hook".into()]
    }

    fn wait_until(h: &mut Hooks, limit: Duration, done: impl Fn(&Hooks) -> bool) {
        let end = crate::clock::now().add(limit);
        while crate::clock::now() < end && !done(h) {
            h.service(crate::clock::now());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_hook_gets_action_role_and_scope_and_is_reaped() {
        let dir = crate::testbed::scratch_dir("hooks-args").expect("scratch");
        let out = dir.join("out");
        let cfg = HooksConfig {
            on_role_change: Some(sh(&format!("echo \"$@\" >> {}", out.display()))),
            ..HooksConfig::default()
        };
        let mut h = Hooks::new(cfg, "demo");
        h.fire(HookAction::Start, "replica", crate::clock::now()); // not configured
        assert!(h.deadline().is_none());
        h.fire(HookAction::RoleChange, "primary", crate::clock::now());
        assert!(h.deadline().is_some());
        wait_until(&mut h, Duration::from_secs(5), |h| h.deadline().is_none());
        assert!(h.deadline().is_none(), "the hook was reaped");
        let text = std::fs::read_to_string(&out).expect("hook output");
        assert_eq!(text, "on_role_change primary demo\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_hung_hook_is_killed_with_its_group_at_its_deadline() {
        let dir = crate::testbed::scratch_dir("hooks-hang").expect("scratch");
        let pidf = dir.join("grandchild");
        let cfg = HooksConfig {
            // A grandchild in the same group: the kill must reach it too.
            on_start: Some(sh(&format!(
                "sleep 1000 & echo $! > {}; wait",
                pidf.display()
            ))),
            timeout: Duration::from_millis(300),
            ..HooksConfig::default()
        };
        let mut h = Hooks::new(cfg, "demo");
        let t0 = crate::clock::now();
        h.fire(HookAction::Start, "replica", t0);
        let pid = h.running.as_ref().map(|r| r.child.id()).expect("running");
        assert!(h.owns(pid));
        wait_until(&mut h, Duration::from_secs(5), |h| h.deadline().is_none());
        assert!(h.deadline().is_none(), "killed at the deadline");
        assert!(crate::clock::now().since(t0) >= Duration::from_millis(300));
        let gc: i32 = std::fs::read_to_string(&pidf)
            .expect("grandchild pid")
            .trim()
            .parse()
            .expect("pid");
        // The grandchild got SIGKILL too (reaped by init or a zombie: not running).
        let end = crate::clock::now().add(Duration::from_secs(5));
        let alive = |p: i32| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        };
        while alive(gc) && crate::clock::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(gc), "the hook's process group was killed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn finish_lets_a_hook_end_but_not_past_its_deadline() {
        let dir = crate::testbed::scratch_dir("hooks-finish").expect("scratch");
        let out = dir.join("out");
        let cfg = HooksConfig {
            on_stop: Some(sh(&format!("sleep 0.2; echo \"$1\" > {}", out.display()))),
            timeout: Duration::from_secs(5),
            ..HooksConfig::default()
        };
        let mut h = Hooks::new(cfg, "demo");
        h.fire(HookAction::Stop, "replica", crate::clock::now());
        h.finish();
        assert_eq!(
            std::fs::read_to_string(&out).expect("the hook finished"),
            "on_stop\n"
        );
        let cfg = HooksConfig {
            on_stop: Some(sh("sleep 1000")),
            timeout: Duration::from_millis(200),
            ..HooksConfig::default()
        };
        let mut h = Hooks::new(cfg, "demo");
        let t0 = crate::clock::now();
        h.fire(HookAction::Stop, "replica", t0);
        h.finish();
        assert!(h.deadline().is_none(), "killed at the deadline");
        assert!(crate::clock::now().since(t0) < Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_event_kills_the_running_hook() {
        let dir = crate::testbed::scratch_dir("hooks-replace").expect("scratch");
        let out = dir.join("out");
        let cfg = HooksConfig {
            on_role_change: Some(sh(&format!(
                "[ \"$2\" = primary ] && sleep 1000; echo \"$2\" >> {}",
                out.display()
            ))),
            ..HooksConfig::default()
        };
        let mut h = Hooks::new(cfg, "demo");
        h.fire(HookAction::RoleChange, "primary", crate::clock::now());
        let first = h.running.as_ref().map(|r| r.child.id()).expect("running");
        h.fire(HookAction::RoleChange, "replica", crate::clock::now());
        let second = h.running.as_ref().map(|r| r.child.id()).expect("running");
        assert_ne!(first, second);
        assert!(h.owns(first), "the killed hook is ours until reaped");
        wait_until(&mut h, Duration::from_secs(5), |h| {
            h.deadline().is_none() && h.dying.is_empty()
        });
        assert!(!h.owns(first));
        assert_eq!(
            std::fs::read_to_string(&out).expect("output"),
            "replica\n",
            "the replaced hook never finished"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
