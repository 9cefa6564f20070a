//! The loop's side of `POST /restart`, `DELETE /restart`, `POST /reload` and `POST
//! /reinitialize` (`api::mgmt::manage`): it asks the core whether the action may
//! run, starts it as a supervised job, and answers the parked connection when the
//! job ends; it keeps the scheduled restart and runs it when its time comes.
//!
//! Owns: the one connection waiting for an operator's job, the scheduled restart
//! (in memory, as Patroni keeps it; published in the member key and the status
//! JSON), and the answers' sentences.
//! Must never: wait for a job (the job is a child the loop polls, so renewals keep
//! their fixed schedule and `F - B` comes first, DESIGN §5, S1), start one the core
//! refused, or delete a data directory (a reinitialize moves it aside, §3a).

use std::time::Duration;

use log::{error, info, warn};
use serde_json::{Value, json};

use crate::api::mgmt::manage::{RestartFacts, RestartRequest};
use crate::api::mgmt::{Intent, Response};
use crate::api::server::Ticket;
use crate::clock;
use crate::core::job_name;
use crate::core::model::{JobKind, PgRole};

use super::Agent;

/// What the loop did with an intent.
pub(super) enum Handled {
    /// Answer now.
    Now(Response),
    /// Answered when the job it started ends ([`Agent::operator_job_ended`]).
    Later,
    /// Not one of this module's intents.
    NotMine(Intent),
}

/// A restart scheduled with `POST /restart` `schedule`.
#[derive(Clone, Debug)]
struct Scheduled {
    req: RestartRequest,
    /// Wall clock, seconds since the Unix epoch.
    at: Duration,
    /// PostgreSQL's start time when it was scheduled: a restart that happened
    /// since (by any means) cancels it, as Patroni does.
    postmaster_start_time: Option<String>,
}

/// The operator's jobs in flight and the scheduled restart.
#[derive(Default)]
pub(super) struct OperatorJobs {
    /// The connection waiting for the job running now, and that job.
    waiting: Option<(Ticket, JobKind)>,
    scheduled: Option<Scheduled>,
}

/// A scheduled restart found this much later than its time (the loop stalled, or
/// was down) is dropped rather than run: Patroni's 1.5 `loop_wait`, plus a second
/// for a loop_wait below one.
fn stale_after(loop_wait: Duration) -> Duration {
    loop_wait.mul_f64(1.5) + Duration::from_secs(1)
}

impl Agent {
    /// `Intent`s of the four endpoints, carried out or started; others are handed
    /// back.
    pub(super) fn carry_out_operator(&mut self, ticket: Ticket, intent: Intent) -> Handled {
        match intent {
            Intent::Restart(req) if req.schedule.is_some() => {
                Handled::Now(self.schedule_restart(req))
            }
            Intent::Restart(req) => match self.start_restart(&req) {
                Ok(kind) => {
                    self.ops.waiting = Some((ticket, kind));
                    Handled::Later
                }
                Err(resp) => Handled::Now(resp),
            },
            Intent::CancelRestart => Handled::Now(match self.ops.scheduled.take() {
                Some(s) => {
                    info!("the scheduled restart at {} was deleted", describe(&s));
                    self.status.scheduled_restart = None;
                    Response::text(200, "scheduled restart deleted")
                }
                None => Response::text(404, "no restarts are scheduled"),
            }),
            Intent::Reload => Handled::Now(self.reload_for_api()),
            Intent::Reinitialize { force } => match self.start_reinitialize(force) {
                Ok(()) => {
                    self.ops.waiting = Some((ticket, JobKind::Reinitialize));
                    Handled::Later
                }
                Err(resp) => Handled::Now(resp),
            },
            other => Handled::NotMine(other),
        }
    }

    /// `POST /restart` with `schedule` (Patroni's `schedule_future_restart`): 202,
    /// 409 when another is scheduled, 422 for a time in the past, 500 while paused.
    fn schedule_restart(&mut self, req: RestartRequest) -> Response {
        let Some((at, text)) = req.schedule.clone() else {
            return Response::text(500, "no schedule given");
        };
        if self.core.paused() {
            return Response::text(500, "Can't schedule restart in the paused state");
        }
        if at < clock::realtime() {
            return Response::text(422, "Cannot schedule restart in the past");
        }
        if self.ops.scheduled.is_some() {
            return Response::text(409, "Another restart is already scheduled");
        }
        let s = Scheduled {
            postmaster_start_time: self
                .last_pg
                .as_ref()
                .and_then(|p| p.report.postmaster_start_time.clone()),
            req,
            at,
        };
        info!("restart scheduled at {}", describe(&s));
        self.status.scheduled_restart = Some(scheduled_json(&s.req, &text));
        self.ops.scheduled = Some(s);
        Response::text(202, "Restart scheduled")
    }

    /// Check the conditions against the last probe, ask the core, start the job.
    /// `Err`: Patroni's answer for a refusal (503).
    fn start_restart(&mut self, req: &RestartRequest) -> Result<JobKind, Response> {
        let Some(pg) = self.last_pg.as_ref() else {
            return Err(Response::text(
                503,
                "the agent is starting up: retry in a moment",
            ));
        };
        let facts = RestartFacts {
            role: match pg.role {
                PgRole::Primary => "primary",
                PgRole::Replica => "replica",
                PgRole::Stopped | PgRole::Unresponsive => "unknown",
            },
            server_version: pg.report.server_version,
            pending_restart: pg.report.pending_restart,
        };
        if let Some(why) = req.mismatch(&facts) {
            info!("not proceeding with the restart: {why}");
            return Err(Response::text(
                503,
                format!("restart conditions are not satisfied: {why}"),
            ));
        }
        let kind = self
            .core
            .restart_job(pg, self.pg.running_job(), req.timeout)
            .map_err(|why| Response::text(503, why))?;
        // A replica's restart writes its standby settings for the leader of the
        // last view (a restart applies the node's configuration as it is now).
        let source = (pg.role == PgRole::Replica)
            .then(|| {
                let view = self.last_view.as_ref()?;
                let leader = view.leader.as_ref().filter(|l| l.name != self.cfg.name)?;
                let m = view.member(&leader.name)?;
                crate::pg::ConnTarget::from_conn_url(&leader.name, &m.info.conn_url).ok()
            })
            .flatten();
        if let Err(e) = self.pg.start_job(&kind, source.as_ref(), clock::now()) {
            error!("cannot start the restart: {e}");
            return Err(Response::text(503, format!("restart failed: {e}")));
        }
        info!(
            "restarting PostgreSQL ({}) for the API: fast stop, then start",
            if pg.role == PgRole::Primary {
                "the primary, keeping the leader key (S1: renewals and F unchanged)"
            } else {
                "a replica"
            }
        );
        // A job forgets the slots made on the running primary (`Agent::slots`).
        self.slots = None;
        // Until the next probe: `/primary` and `/replica` answer 503 from now on.
        self.status.state = "restarting".into();
        self.status.pg_running = false;
        self.status.pg_primary = false;
        self.status.streaming = false;
        Ok(kind)
    }

    /// `POST /reinitialize`: ask the core, kill a running job if forced, start the
    /// stop-and-move-aside job. `Err`: Patroni's answer for a refusal (503).
    fn start_reinitialize(&mut self, force: bool) -> Result<(), Response> {
        let Some(pg) = self.last_pg.as_ref() else {
            return Err(Response::text(
                503,
                "the agent is starting up: retry in a moment",
            ));
        };
        self.core
            .reinitialize_job(self.last_view.as_ref(), pg, self.pg.running_job(), force)
            .map_err(|why| Response::text(503, why))?;
        if let Some(kind) = self.pg.running_job().cloned() {
            warn!(
                "reinitialize (force): killing the running {}",
                job_name(&kind)
            );
            self.pg.kill_job();
            if let Some((t, _)) = self.ops.waiting.take() {
                let r = Response::text(
                    503,
                    format!("{} cancelled by a forced reinitialize", job_name(&kind)),
                );
                self.api.complete(t, &r);
            }
        }
        if let Err(e) = self
            .pg
            .start_job(&JobKind::Reinitialize, None, clock::now())
        {
            error!("cannot start the reinitialize: {e}");
            return Err(Response::text(503, format!("reinitialize failed: {e}")));
        }
        info!(
            "reinitializing for the API: stopping PostgreSQL, then moving the data directory aside"
        );
        self.slots = None;
        self.status.state = "stopping".into();
        self.status.pg_running = false;
        self.status.streaming = false;
        Ok(())
    }

    /// `POST /reload`: the agent's file (the SIGHUP path, S6 checked against what is
    /// armed), then PostgreSQL's. 202 (Patroni's code) once both are done; 400 with
    /// the refusal (nothing changed); 500 when PostgreSQL's reload failed.
    fn reload_for_api(&mut self) -> Response {
        if let Err(e) = self.reload_config() {
            crate::events::emit(&crate::events::Event::ConfigRefused {
                source: "reload",
                error: format!(
                    "POST /reload: reload refused, keeping the running configuration: {e}"
                ),
            });
            return Response::text(
                400,
                format!("reload refused, keeping the running configuration: {e}"),
            );
        }
        info!(
            "POST /reload: configuration reloaded from {}",
            self.config_path.display()
        );
        let deadline = self.deadline(Duration::from_secs(1));
        let reloaded = self.pg.reload_conf(deadline);
        if matches!(reloaded, Ok(true)) {
            self.pg_hook(crate::hooks::HookAction::Reload);
        }
        match reloaded {
            Ok(true) => Response::text(
                202,
                format!(
                    "reload done: configuration reloaded from {}; PostgreSQL re-read its \
                     configuration files",
                    self.config_path.display()
                ),
            ),
            Ok(false) => Response::text(
                202,
                format!(
                    "reload done: configuration reloaded from {}; PostgreSQL is not running",
                    self.config_path.display()
                ),
            ),
            Err(e) => {
                error!("POST /reload: pg_reload_conf(): {e}");
                Response::text(
                    500,
                    format!("configuration reloaded, but PostgreSQL's reload failed: {e}"),
                )
            }
        }
    }

    /// A job ended (reported by this iteration's poll): answer the connection
    /// waiting for it, if it is an operator's.
    pub(super) fn operator_job_ended(&mut self, kind: &JobKind, ok: bool, detail: &str) {
        let same = |k: &JobKind| std::mem::discriminant(k) == std::mem::discriminant(kind);
        if matches!(kind, JobKind::Reinitialize) {
            if ok {
                warn!("reinitialize: {detail}; cloning from the leader next");
            } else {
                error!("reinitialize failed: {detail}");
            }
        }
        if ok && matches!(kind, JobKind::Restart { .. }) {
            self.pg_hook(crate::hooks::HookAction::Restart);
        }
        let Some((ticket, _)) = self.ops.waiting.take_if(|(_, k)| same(k)) else {
            return;
        };
        let r = match (kind, ok) {
            (JobKind::Restart { .. }, true) => Response::text(200, "restarted successfully"),
            (JobKind::Restart { .. }, false) => {
                Response::text(503, format!("restart failed: {detail}"))
            }
            (_, true) => Response::text(
                200,
                format!("reinitialize started: {detail}; cloning from the leader"),
            ),
            (_, false) => Response::text(503, format!("reinitialize failed: {detail}")),
        };
        if !self.api.complete(ticket, &r) {
            info!(
                "api: the client left before the answer to its {}",
                job_name(kind)
            );
        }
    }

    /// Once per iteration: run the scheduled restart when its time came (Patroni's
    /// `evaluate_scheduled_restart`): not while paused; cancelled if PostgreSQL
    /// restarted since it was scheduled, or found stale; its conditions judged
    /// then, as for an immediate one.
    pub(super) fn run_scheduled_restart(&mut self) {
        let Some(s) = self.ops.scheduled.as_ref() else {
            return;
        };
        if self.core.paused() || self.pg.running_job().is_some() {
            return;
        }
        let started = self
            .last_pg
            .as_ref()
            .and_then(|p| p.report.postmaster_start_time.clone());
        if let (Some(then), Some(now)) = (&s.postmaster_start_time, &started)
            && then != now
        {
            info!("cancelling the scheduled restart: PostgreSQL restarted already, at {now}");
            self.ops.scheduled = None;
            self.status.scheduled_restart = None;
            return;
        }
        let now = clock::realtime();
        if now < s.at {
            return;
        }
        let Some(s) = self.ops.scheduled.take() else {
            return;
        };
        self.status.scheduled_restart = None;
        let late = now.saturating_sub(s.at);
        if late > stale_after(self.core.timing().loop_wait) {
            warn!(
                "dropping a stale scheduled restart ({}; {:.1} s late)",
                describe(&s),
                late.as_secs_f64()
            );
            return;
        }
        info!("running the restart scheduled at {}", describe(&s));
        if let Err(r) = self.start_restart(&s.req) {
            let Response { body, .. } = r;
            warn!("scheduled restart not run: {body:?}");
        }
    }

    /// The member key's fields for these endpoints (Patroni's names): present only
    /// when set.
    pub(super) fn operator_member_fields(
        &self,
        pending_restart: bool,
    ) -> Vec<(&'static str, Value)> {
        let mut v = Vec::new();
        if pending_restart {
            v.push(("pending_restart", json!(true)));
        }
        if let Some(s) = &self.status.scheduled_restart {
            v.push(("scheduled_restart", s.clone()));
        }
        v
    }
}

/// Patroni's `scheduled_restart` object: the schedule and the conditions given.
fn scheduled_json(req: &RestartRequest, schedule: &str) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("schedule".into(), json!(schedule));
    if let Some(r) = &req.role {
        m.insert("role".into(), json!(r));
    }
    if let Some(v) = req.postgres_version {
        m.insert("postgres_version".into(), json!(v));
    }
    if let Some(t) = req.timeout {
        m.insert("timeout".into(), json!(t));
    }
    if req.restart_pending {
        m.insert("restart_pending".into(), json!(true));
    }
    Value::Object(m)
}

fn describe(s: &Scheduled) -> String {
    clock::rfc3339_utc(s.at)
}
