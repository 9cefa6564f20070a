//! The required watchdog's check before candidacy (issue 13 item 4 follow-ups).
//!
//! A node in `[watchdog] mode = "required"` whose device cannot be armed must not
//! race for the leader key: it would win, fail to arm (S3: no promotion without the
//! fence), give the key back, and the next winner would judge that DELETE early and
//! wait a whole promote delay (found by `bench/failover_dist`: a restarted node
//! whose device was dead). Only an open tells whether the device can be armed (a
//! busy device, a driver gone with its node left behind), so the shell opens it
//! once to check, then closes it with the magic character, and reports the outcome
//! in every observation (`Observation::watchdog_unusable`) until a check passes;
//! the core withholds candidacy meanwhile (`core::candidacy`), and the member key
//! says `nofailover`.
//!
//! Owns: when the check runs (the first iteration it may; after a failed open every
//! `ttl`, after a busy device at the next iteration), the check itself, and saying
//! its outcome once per change. A device that opened and was refused (its read-back
//! `W` breaks S6, no magic close) is refused for the run, as a leadership's open
//! refuses it (`Core::refuse_leadership`): it does not change by itself.
//!
//! Must never: open the device while a PostgreSQL of this node may accept writes,
//! or while it leads, adopts or fences (S2: only then is a pet free; S4: a local
//! primary opens the device only after adopting); check a device whose close could
//! leave it armed (`nowayout` set or unknown); leave a checked device armed and
//! dropped (one the close could not disarm is kept open and petted, like a refused
//! device, and leadership is refused for the run).

use std::time::Duration;

use log::{error, info};

use crate::clock;
use crate::config::WatchdogMode;
use crate::core::model::PgStatus;
use crate::core::time::Instant;
use crate::watchdog::{Device, WatchdogError};

use super::Agent;

/// When a failed check is made again.
enum Recheck {
    /// At the next iteration (the device was busy).
    Soon,
    /// After `ttl` (the open failed: the device may come back).
    Later,
    /// Never in this run: the device answered and was refused, or stayed armed.
    Never,
}

/// The check's state, kept for the run.
#[derive(Default)]
pub(super) struct WdCheck {
    /// The last check failed: why (reported to the core every iteration).
    pub(super) unusable: Option<String>,
    /// No check is needed any more: one passed, or none can be made safely.
    done: bool,
    /// The next check is due at this instant (`None`: at the first chance).
    next_at: Option<Instant>,
}

impl Agent {
    /// Check the required watchdog if a check is due and allowed now; `pg` is this
    /// iteration's probe of the local PostgreSQL.
    pub(super) fn check_required_watchdog(&mut self, pg: &PgStatus) {
        if self.wd.mode != WatchdogMode::Required
            || !self.wd.use_device
            || self.wd.device.is_some()
            || self.wd.check.done
        {
            return;
        }
        // S2/S4: a pet (the open is one) is free only while nothing of ours may
        // accept writes and no leadership is held or being given up.
        if self.core.leadership().is_some()
            || self.core.pets_need_proof()
            || self.core.fence_in_progress()
            || pg.may_accept_writes()
        {
            return;
        }
        let now = clock::now();
        if self.wd.check.next_at.is_some_and(|at| now < at) {
            return;
        }
        let sysfs = &self.cfg.watchdog.sysfs_dir;
        match crate::watchdog::device::sysfs_nowayout(sysfs, &self.wd.path) {
            Some(false) => {}
            other => {
                // A check would arm it for good (or may): not worth a host that
                // must be petted forever. A dead device is then found at the win,
                // as before (S3: the key is given back, never promoted without it).
                info!(
                    "watchdog {}: not checked before candidacy (nowayout {} in {}): a \
                     check would leave it armed",
                    self.wd.path.display(),
                    match other {
                        Some(_) => "set",
                        None => "unknown",
                    },
                    sysfs.display()
                );
                self.wd.check.done = true;
                return;
            }
        }
        let ttl = Duration::from_secs(u64::from(self.core.timing().ttl));
        match self.watchdog_check_open() {
            Ok(w) => {
                match self.wd.check.unusable.take() {
                    Some(_) => info!(
                        "required watchdog {} is usable again (checked: W = {w} s read back, \
                         disarmed): a candidate for leadership again",
                        self.wd.path.display()
                    ),
                    None => info!(
                        "required watchdog {} checked: W = {w} s read back, disarmed",
                        self.wd.path.display()
                    ),
                }
                self.wd.check.done = true;
            }
            Err((why, Recheck::Never)) => {
                // The device answered and was refused (its `W`, no magic close), or
                // stayed armed: as when a leadership's open refuses it, this node
                // never leads in this run (S3; docs/design.md "Watchdogs").
                error!(
                    "ALERT: required watchdog unusable: {why}; not a candidate for \
                     leadership in this run (S3)"
                );
                self.core
                    .refuse_leadership(format!("required watchdog unusable: {why}"));
                self.wd.check.unusable = None;
                self.wd.check.done = true;
            }
            Err((why, again)) => {
                if self.wd.check.unusable.as_deref() != Some(why.as_str()) {
                    error!(
                        "ALERT: required watchdog unusable: {why}; not a candidate for \
                         leadership until a check passes (S3)"
                    );
                }
                // A busy device may be a predecessor's close still in flight; a
                // failed open (a driver gone) is tried again every ttl.
                self.wd.check.next_at = Some(match again {
                    Recheck::Soon => now,
                    _ => now.add(ttl),
                });
                self.wd.check.unusable = Some(why);
            }
        }
    }

    /// Open the device as leadership would (the requested `W`, read back and
    /// checked against S6 for the ttl in force), then disarm it. `Ok`: the `W` read
    /// back. `Err`: why, and when to check again.
    fn watchdog_check_open(&mut self) -> Result<u32, (String, Recheck)> {
        let path = self.wd.path.clone();
        let dev =
            match Device::open_with_sysfs(&path, self.wd.requested, &self.cfg.watchdog.sysfs_dir) {
                Ok(d) => d,
                Err(e @ WatchdogError::Busy { .. }) => {
                    return Err((e.to_string(), Recheck::Soon));
                }
                Err(e) => return Err((e.to_string(), Recheck::Later)),
            };
        if dev.boot_status_watchdog_reset() && !self.wd.boot_reset_said {
            // Said once per run, whichever open reads it first.
            self.wd.boot_reset_said = true;
            crate::events::emit(&crate::events::Event::WatchdogReset {
                device: path.display().to_string(),
                via: "WDIOC_GETBOOTSTATUS",
            });
        }
        let w = dev.timeout();
        let usable = crate::watchdog::check_usable(
            &dev,
            &self.cfg.timing,
            self.core.timing().ttl,
            &self.wd.mode,
        );
        match dev.disarm() {
            Ok(_) => usable.map(|()| w).map_err(|why| (why, Recheck::Never)),
            Err(WatchdogError::NoWayOut(dev))
            | Err(WatchdogError::DisarmWrite { device: dev, .. }) => {
                // Never drop an armed device: keep it open and petted (no primary
                // runs here), and give up leadership for the run, as for a device
                // refused at a leadership's open that cannot be disarmed.
                let why = format!(
                    "{} stayed armed after its check (cannot be disarmed)",
                    path.display()
                );
                error!(
                    "ALERT: {why}: keeping it open and petted; this node gives up leadership for this run"
                );
                self.wd.device = Some(*dev);
                self.wd.keep_petting = true;
                Err((why, Recheck::Never))
            }
            Err(e) => Err((
                format!("{}: closing after the check: {e}", path.display()),
                Recheck::Later,
            )),
        }
    }
}
