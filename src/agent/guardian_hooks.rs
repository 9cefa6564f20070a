//! The loop's hooks for the guardian (DESIGN §2 "The guardian", docs/design.md): start
//! it at start-up, hand it `G` after each step, stand it down where the core plans
//! `DisarmWatchdog`, check it once per iteration, stop it on a clean exit.
//!
//! Owns: the agent's [`Guardian`] handle and what the loop reports about it
//! (`guardian_holds`, and `watchdog_failed` when a required guardian is gone).
//! Must never: decide when to kill (the core computes `G`), block the loop (every
//! send is non-blocking), or stand the guardian down anywhere but after a complete
//! fence or a clean stop.

use std::time::Duration;

use log::{debug, error, info, warn};

use super::{Agent, Watchdogs};
use crate::config::{Config, WatchdogMode};
use crate::core::Core;
use crate::core::time::Instant;
use crate::guardian::{Guardian, SendError};

/// The guardian, if it is this node's fence, and whether it was last seen stopped.
#[derive(Debug, Default)]
pub(super) struct GuardianSlot {
    g: Option<Guardian>,
    stopped: bool,
}

/// At start-up, before any leadership: fork the guardian when no device and no
/// systemd watchdog will be used and `[watchdog] guardian` allows it for the mode.
/// Tells the core its `B_g`; a required guardian that cannot start refuses
/// leadership for the run (S3).
pub(super) fn start(cfg: &Config, wd: &Watchdogs, core: &mut Core) -> GuardianSlot {
    let w = &cfg.watchdog;
    if !w.guardian_applies(wd.use_device, wd.systemd_w.is_some()) {
        return GuardianSlot::default();
    }
    match Guardian::spawn(&cfg.postgresql.data_dir, cfg.agent.realtime_priority) {
        Ok(g) => {
            crate::events::emit(&crate::events::Event::GuardianStarted { pid: g.pid() });
            info!(
                "fence for a frozen agent: the guardian (pid {}, its own session): it SIGKILLs \
                 PostgreSQL at G = F - B_g (B_g = {:.3} s) unless a newer G arrives, and at once if \
                 this agent dies while leading",
                g.pid(),
                w.guardian_kill_budget.as_secs_f64()
            );
            if !g.memory_locked() {
                error!(
                    "ALERT: the guardian (pid {}) could not lock its memory (mlockall; raise \
                     LimitMEMLOCK=): a swap storm could delay its kill",
                    g.pid()
                );
            }
            core.set_guardian(Some(w.guardian_kill_budget));
            GuardianSlot {
                g: Some(g),
                stopped: false,
            }
        }
        Err(e) if w.mode == WatchdogMode::Required => {
            let why = format!("no watchdog device and the guardian could not start: {e}");
            error!("ALERT: {why}; watchdog mode required: this node will never lead");
            core.refuse_leadership(why);
            GuardianSlot::default()
        }
        Err(e) => {
            warn!(
                "the guardian could not start ({e}); mode automatic: running WITHOUT a watchdog: \
                 a frozen agent would leave its primary writable until it thaws"
            );
            GuardianSlot::default()
        }
    }
}

impl Agent {
    /// The `G` the guardian holds (an observation: what was delivered, not planned).
    pub(super) fn guardian_holds(&self) -> Option<Instant> {
        self.guardian.g.as_ref().and_then(Guardian::holds)
    }

    /// After each `Core::step`: while leading, hand over `G` when it changed (it
    /// moves with each counted renewal). Before `act`, so a promotion in this plan
    /// already has its `G` in the guardian.
    pub(super) fn guardian_after_step(&mut self) {
        let Some(at) = self.core.guardian_deadline() else {
            return;
        };
        let Some(g) = self.guardian.g.as_mut() else {
            return;
        };
        if g.holds() == Some(at) {
            return;
        }
        match g.arm(at) {
            Ok(()) => debug!("guardian: G = {at}"),
            Err(e @ SendError::Full) => {
                warn!("guardian (pid {}): {e}; it keeps the previous G", g.pid())
            }
            Err(e) => {
                let why = format!("handing G to the guardian (pid {}) failed: {e}", g.pid());
                self.guardian_lost(why);
            }
        }
    }

    /// Where the core planned `DisarmWatchdog`: after a complete fence or a clean stop.
    pub(super) fn guardian_stand_down(&mut self) {
        let Some(g) = self.guardian.g.as_mut() else {
            return;
        };
        if g.holds().is_none() {
            return;
        }
        match g.stand_down() {
            Ok(()) => info!("guardian (pid {}) stood down: no deadline pending", g.pid()),
            Err(e) => warn!("guardian (pid {}): stand-down not delivered: {e}", g.pid()),
        }
    }

    /// Once per iteration, before the observation: a dead guardian is a lost fence
    /// (reported); a stopped one is said at crit (residual risk, DESIGN §2).
    pub(super) fn check_guardian(&mut self) {
        let Some(g) = self.guardian.g.as_mut() else {
            return;
        };
        if !g.is_alive() {
            let pid = g.pid();
            let how = g
                .wait_exit(Duration::ZERO)
                .map_or_else(|| "exit status unknown".to_string(), |e| e.to_string());
            self.guardian_lost(format!("the guardian (pid {pid}) died ({how})"));
            return;
        }
        let stopped = g.is_stopped();
        if stopped != self.guardian.stopped {
            self.guardian.stopped = stopped;
            if stopped {
                error!(
                    "ALERT: the guardian (pid {}) is stopped (SIGSTOP?): it cannot kill PostgreSQL \
                     if this agent freezes",
                    g.pid()
                );
            } else {
                info!("the guardian (pid {}) runs again", g.pid());
            }
        }
    }

    /// The guardian is gone: `required` mode treats the fence as gone (S3: a leader
    /// releases the key after fencing; no leadership for the rest of the run);
    /// `automatic` runs without a fence and says so.
    fn guardian_lost(&mut self, why: String) {
        self.guardian.g = None;
        crate::events::emit(&crate::events::Event::GuardianLost { why: why.clone() });
        if self.cfg.watchdog.mode == WatchdogMode::Required {
            error!("ALERT: {why}: the required fence is gone; giving up leadership (S3)");
            self.core.refuse_leadership(why.clone());
            self.pending.watchdog_failed = Some(why);
        } else {
            error!(
                "ALERT: {why}; mode automatic: running WITHOUT a fence: a frozen agent would leave \
                 its primary writable until it thaws"
            );
            self.core.set_guardian(None);
        }
    }

    /// A clean exit: stand down, exit, reap. Kills nothing.
    pub(super) fn stop_guardian(&mut self) {
        let Some(g) = self.guardian.g.take() else {
            return;
        };
        let pid = g.pid();
        match g.stop(Duration::from_secs(1)) {
            Ok(e) => info!("guardian (pid {pid}) stopped ({e})"),
            Err(e) => warn!("{e}"),
        }
    }

    /// SIGHUP: a new `guardian_kill_budget` (validated `<= demote_budget` with the
    /// file) applies to the next `G`.
    pub(super) fn guardian_reloaded(&mut self, new: &Config) {
        self.cfg.watchdog.guardian_kill_budget = new.watchdog.guardian_kill_budget;
        if self.core.guardian().is_some() {
            self.core
                .set_guardian(Some(new.watchdog.guardian_kill_budget));
        }
    }
}
