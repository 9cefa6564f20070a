//! The loop's events and hooks (issue 10, `crate::events`, `crate::hooks`): which
//! transitions it says, once each, and which hooks they run.
//!
//! Owns: the little state that makes events edge-triggered (etcd reachable or not,
//! a renewal streak, the vacancy start for `PROMOTED after=`, the switchover request
//! last said, synchronous mode degraded or not) and the agent's [`Hooks`].
//! Must never: decide anything (the core does: these only report what a plan or an
//! observation shows), call etcd or PostgreSQL, or wait for a hook.

use std::time::Duration;

use super::Agent;
use crate::core::model::*;
use crate::core::time::Instant;
use crate::events::{self, Event};
use crate::hooks::{HookAction, Hooks};

/// Most members `OLDER_AGENT` names in one run.
const OLDER_SAID_CAP: usize = 256;

/// How often at most dropped log lines are said (`LOG_DROPPED`).
const DROPS_EVERY: Duration = Duration::from_secs(10);

/// Edge-trigger state: what was last said.
#[derive(Debug, Default)]
pub(super) struct EventState {
    /// etcd did not answer since this instant (and `ETCD_UNREACHABLE` was said).
    etcd_down_since: Option<Instant>,
    /// A renewal failed in this leadership and `RENEWAL_LATE` was said.
    renewal_late: bool,
    /// The epoch this node led at the end of the last iteration.
    led: Option<Epoch>,
    /// The leader key was first seen vacant at this instant (for `PROMOTED after=`).
    vacant_since: Option<Instant>,
    /// The `failover` key's mod revision last said (`SWITCHOVER_REQUESTED`).
    switchover_said: Option<i64>,
    sync_degraded: bool,
    /// The last release marker seen, for `SWITCHOVER_COMPLETED`.
    release: Option<ReleaseMarker>,
    /// Members `OLDER_AGENT` named in this run (finding L1: once each).
    older_said: std::collections::BTreeSet<String>,
    /// The epoch of the last leader key seen held by another member: a marker
    /// counts only for the leadership it vacated (an old one may linger).
    foreign_epoch: Option<Epoch>,
    /// The epoch `LEASE_LOST` named, for the `FENCED` that follows in the same
    /// iteration (the core has already dropped the leadership by then).
    fence_epoch: Option<Epoch>,
    /// The last iteration overran: a run of overruns is said once, when it starts.
    overrunning: bool,
}

/// The agent's hook runner for `cfg`.
pub(super) fn hooks(cfg: &crate::config::Config) -> Hooks {
    Hooks::new(cfg.hooks.clone(), &cfg.scope)
}

impl Agent {
    /// Once per iteration, after the core's step: say the transitions this
    /// observation and plan show, then the dropped log lines.
    pub(super) fn events_after_step(&mut self, now: Instant, obs: &Observation, plan: &Plan) {
        self.etcd_events(now, &obs.cluster);
        let leading = self.core.leadership().map(|l| l.epoch);
        if let Some(r) = &obs.renewal {
            match &r.outcome {
                RenewalOutcome::Counted { .. } => self.ev.renewal_late = false,
                other if !self.ev.renewal_late => {
                    self.ev.renewal_late = true;
                    let why = match other {
                        RenewalOutcome::LeaseGone => "lease gone".to_string(),
                        RenewalOutcome::KeyLost { found } => match found {
                            Some(k) => format!("key now {} epoch {}", k.name, k.epoch),
                            None => "key missing".into(),
                        },
                        RenewalOutcome::Failed(e) => e.clone(),
                        RenewalOutcome::Counted { .. } => String::new(),
                    };
                    events::emit(&Event::RenewalLate {
                        epoch: self.ev.led.or(leading).unwrap_or(0),
                        why,
                    });
                }
                _ => {}
            }
        }
        // S1: a fence planned while this node led is a lost lease (a clean stop
        // or hand-over stops PostgreSQL with a job instead, never with `Fence`).
        if let Some(epoch) = self.ev.led
            && plan.actions.contains(&Action::Fence)
            && !self.shutdown
        {
            self.ev.fence_epoch = Some(epoch);
            events::emit(&Event::LeaseLost {
                epoch,
                why: plan.reason.to_string(),
            });
        }
        if let Ok(view) = &obs.cluster {
            self.view_events(now, view, leading);
        }
        self.ev.led = leading;
        if leading.is_none() {
            self.ev.renewal_late = false;
        }
        if let Job::Finished { kind, ok: true, .. } = &obs.job {
            match kind {
                JobKind::StartPrimary => self.hooks.fire(HookAction::Start, "primary", now),
                JobKind::StartReplica { .. } => self.hooks.fire(HookAction::Start, "replica", now),
                JobKind::Stop => self.hooks.fire(HookAction::Stop, self.role_name(), now),
                _ => {}
            }
        }
        crate::logging::report_drops(now, DROPS_EVERY);
    }

    fn role_name(&self) -> &'static str {
        if self.core.leadership().is_some() {
            "primary"
        } else {
            "replica"
        }
    }

    /// `ETCD_UNREACHABLE` on the first failed read, `ETCD_BACK` on the first good
    /// one after it. A read skipped past `F - B` says nothing about etcd.
    fn etcd_events(&mut self, now: Instant, cluster: &Result<ClusterView, String>) {
        match cluster {
            Ok(_) => {
                if let Some(since) = self.ev.etcd_down_since.take() {
                    events::emit(&Event::EtcdBack {
                        after: now.since(since),
                    });
                }
            }
            Err(e) if e.starts_with("not read") => {}
            Err(e) => {
                if self.ev.etcd_down_since.is_none() {
                    self.ev.etcd_down_since = Some(now);
                    events::emit(&Event::EtcdUnreachable { error: e.clone() });
                }
            }
        }
    }

    fn view_events(&mut self, now: Instant, view: &ClusterView, leading: Option<Epoch>) {
        match &view.leader {
            None => {
                self.ev.vacant_since.get_or_insert(now);
            }
            Some(k) if k.name != self.cfg.name => {
                self.ev.vacant_since = None;
                self.ev.foreign_epoch = Some(k.epoch);
            }
            Some(_) => {}
        }
        // A marker another node's acquisition took speaks for an older hand-over.
        if let Some(Ok(m)) = &view.release
            && m.taken_by.as_deref().is_none_or(|t| t == self.cfg.name)
        {
            self.ev.release = Some(m.clone());
        }
        // Finding L1: a member whose agent is older than the acquisition record,
        // once per member per run (bounded: a name churn cannot grow it for ever).
        for m in crate::core::older_agents(view, &self.cfg.name) {
            if self.ev.older_said.len() < OLDER_SAID_CAP && !self.ev.older_said.contains(&m.name) {
                self.ev.older_said.insert(m.name.clone());
                events::emit(&Event::OlderAgent {
                    other: m.name.clone(),
                    version: m.info.version.clone(),
                });
            }
        }
        // The leader says a request once (per value of the key).
        if let Some(f) = &view.failover
            && leading.is_some()
            && f.parse_error.is_none()
            && self.ev.switchover_said != Some(f.mod_revision)
        {
            self.ev.switchover_said = Some(f.mod_revision);
            events::emit(&Event::SwitchoverRequested {
                from: f.leader.clone().unwrap_or_else(|| self.cfg.name.clone()),
                to: f.member.clone(),
                scheduled_at: f.scheduled_text.clone(),
            });
        }
        // Synchronous mode with no synchronous standby under our leadership.
        let degraded = leading.is_some()
            && self.cfg.dynamic.synchronous_mode
            && matches!(&view.sync, Some(Ok(k)) if k.leader == self.cfg.name && k.sync_standbys.is_empty());
        if degraded && !self.ev.sync_degraded {
            events::emit(&Event::SyncDegraded {
                why: if self.cfg.dynamic.synchronous_mode_strict {
                    "no synchronous standby: commits wait (strict)".into()
                } else {
                    "no synchronous standby: commits are acknowledged by the primary alone".into()
                },
            });
        }
        self.ev.sync_degraded = degraded;
    }

    /// After `pg_promote()` succeeded: `PROMOTED` (and `SWITCHOVER_COMPLETED` after a
    /// clean hand-over to us), then the `on_role_change primary` hook.
    pub(super) fn promoted_events(&mut self, epoch: Epoch) {
        let now = crate::clock::now();
        events::emit(&Event::Promoted {
            epoch,
            after: self.ev.vacant_since.map(|t| now.since(t)),
        });
        if let Some(m) = self.ev.release.take()
            && m.candidate.as_deref().is_none_or(|c| c == self.cfg.name)
            && m.by != self.cfg.name
            && self.ev.foreign_epoch == Some(m.epoch)
        {
            events::emit(&Event::SwitchoverCompleted { from: m.by, epoch });
        }
        self.ev.vacant_since = None;
        self.hooks.fire(HookAction::RoleChange, "primary", now);
    }

    /// After a fence: `FENCED` when complete within its budget, else `FENCE_FAILED`;
    /// a complete fence runs the `on_role_change replica` hook (no primary runs here
    /// any more).
    pub(super) fn fence_events(&mut self, out: &FenceOutcome, took: Duration, budget: Duration) {
        let epoch = self.ev.fence_epoch.take().or(self.ev.led);
        if *out == FenceOutcome::Complete && took <= budget {
            events::emit(&Event::Fenced {
                epoch,
                took,
                why: self.last_reason.clone(),
            });
        } else {
            events::emit(&Event::FenceFailed {
                outcome: format!("{out:?}"),
                took,
                budget,
            });
        }
        if *out == FenceOutcome::Complete {
            self.hooks
                .fire(HookAction::RoleChange, "replica", crate::clock::now());
        }
    }

    /// After a clean hand-over released the key (PostgreSQL stopped with a
    /// shutdown checkpoint): the `on_role_change replica` hook.
    pub(super) fn handed_over_hook(&mut self) {
        self.hooks
            .fire(HookAction::RoleChange, "replica", crate::clock::now());
    }

    /// A deadline overrun (an iteration over `P`, the schedule a period behind, a
    /// stall): `DEADLINE_OVERRUN` when a run of them starts, the rest at debug (an
    /// etcd outage makes every iteration wait out its timeouts).
    pub(super) fn deadline_overrun(&mut self, ev: Event) {
        if self.ev.overrunning {
            log::debug!("{}", ev.line(&self.cfg.scope, &self.cfg.name));
        } else {
            self.ev.overrunning = true;
            events::emit(&ev);
        }
    }

    /// An iteration within its budget ends a run of overruns.
    pub(super) fn on_time(&mut self) {
        self.ev.overrunning = false;
    }

    /// The `on_restart` / `on_reload` hooks, after the operator's restart or reload
    /// of PostgreSQL succeeded (`manage`).
    pub(super) fn pg_hook(&mut self, action: HookAction) {
        let role = self.role_name();
        self.hooks.fire(action, role, crate::clock::now());
    }

    /// Reap or kill hooks; on every wake-up of the loop (never waits).
    pub(super) fn service_hooks(&mut self) {
        self.hooks.service(crate::clock::now());
    }
}
