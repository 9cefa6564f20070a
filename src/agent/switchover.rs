//! The loop's part of a planned switchover (issue 9): the release (`HandOver`), the
//! deletion of a request (`ClearFailover`), and `scheduled_at` put on the loop's
//! clock.
//!
//! Owns: reading the shutdown checkpoint, the marker's content, and what is
//! reported back (`handed_over`). Must never: decide (the core planned the
//! hand-over after a fast stop and a complete fence check), or report a release
//! whose txn's answer it did not get (that is `Unknown`: the marker may exist).

use log::{info, warn};

use super::Agent;
use crate::api::mgmt::Response;
use crate::api::mgmt::switchover::{
    self as switchover_api, Action as SwitchAction, FailoverIntent,
};
use crate::api::server::Ticket;
use crate::clock;
use crate::core::model::*;
use crate::core::time::Instant;

impl Agent {
    pub(super) fn hand_over(
        &mut self,
        lease: LeaseId,
        epoch: Epoch,
        candidate: Option<String>,
        deadline: Instant,
    ) {
        let me = self.cfg.name.clone();
        let out = match self.pg.shutdown_checkpoint() {
            Err(why) => HandOverOutcome::NotSent(why),
            Ok((timeline, lsn)) => {
                let marker = ReleaseMarker {
                    epoch,
                    lsn,
                    timeline,
                    candidate,
                    by: me.clone(),
                    taken_by: None,
                };
                match self.connect(deadline) {
                    None => HandOverOutcome::NotSent("etcd unreachable".into()),
                    Some((etcd, rt)) => {
                        match etcd.hand_over(rt, &me, epoch, lease, &marker, deadline) {
                            Ok(true) => {
                                info!(
                                    "released the leader key (epoch {epoch}) with the release \
                                     marker: shutdown checkpoint {lsn} on timeline {timeline}"
                                );
                                self.handed_over_hook();
                                HandOverOutcome::Released(marker)
                            }
                            Ok(false) => {
                                self.pending.guard_refused = Some("the release txn".into());
                                HandOverOutcome::NotSent("the epoch guard refused".into())
                            }
                            Err(e) => HandOverOutcome::Unknown(e.to_string()),
                        }
                    }
                }
            }
        };
        if let HandOverOutcome::NotSent(why) | HandOverOutcome::Unknown(why) = &out {
            warn!("switchover release: {why}");
        }
        self.pending.handed_over = Some(out);
    }

    pub(super) fn clear_failover(&mut self, epoch: Epoch, mod_revision: i64, deadline: Instant) {
        let me = self.cfg.name.clone();
        if let Some((etcd, rt)) = self.connect(deadline) {
            match etcd.clear_failover(rt, &me, epoch, mod_revision, deadline) {
                Ok(true) => info!("deleted the failover key"),
                Ok(false) => info!("the failover key changed or leadership moved: not deleted"),
                Err(e) => warn!("deleting the failover key: {e}"),
            }
        }
    }
}

/// `scheduled_at` (wall clock, RFC 3339 with offset) as an instant on the loop's
/// `CLOCK_BOOTTIME`, read against the wall clock now: the core compares instants.
pub(super) fn schedule_on_boottime(view: &mut ClusterView, now: Instant) {
    let Some(req) = &mut view.failover else {
        return;
    };
    let Some(at) = req
        .scheduled_text
        .as_deref()
        .and_then(crate::dcs::parse_rfc3339)
    else {
        return;
    };
    let wall = clock::realtime().as_secs_f64();
    let d = std::time::Duration::from_secs_f64((at - wall).abs().min(1e9));
    req.scheduled_at = Some(if at >= wall { now.add(d) } else { now.sub(d) });
}

/// An immediate `POST /switchover` or `/failover` whose connection stays parked
/// until the outcome shows in a cluster read (Patroni's `poll_failover_result`).
#[derive(Debug)]
pub(super) struct Awaiting {
    ticket: Ticket,
    action: SwitchAction,
    /// The leader when the request was written (`None`: the cluster had none).
    old_leader: Option<String>,
    candidate: Option<String>,
    /// The revision of the write: only a read at or after it can judge the outcome.
    written: i64,
    /// When the loop stops watching and answers 503 "status unknown"; the server's
    /// own deadline for the connection comes [`crate::api::mgmt::INTENT_WAIT`] later.
    until: Instant,
}

impl Agent {
    /// `POST /switchover` / `/failover` once the handler's checks passed: a time in
    /// the past is refused (422, Patroni's code), then the `failover` key is written
    /// (503 when that fails). A scheduled request is answered 202; an immediate one
    /// is parked (`ticket`) until its outcome, or answered 202 at once without one.
    pub(super) fn request_failover(
        &mut self,
        ticket: Option<Ticket>,
        f: FailoverIntent,
    ) -> Option<Response> {
        if let Some((text, secs)) = &f.scheduled_at
            && *secs < clock::realtime().as_secs_f64()
        {
            return Some(Response::text(
                422,
                format!("Cannot schedule {} in the past ({text})", f.action.word()),
            ));
        }
        let value = crate::dcs::encode_failover(
            f.leader.as_deref(),
            f.candidate.as_deref(),
            f.scheduled_at.as_ref().map(|(t, _)| t.as_str()),
        );
        let deadline = self.deadline(self.core.timing().retry_timeout);
        let Some((etcd, rt)) = self.connect(deadline) else {
            return Some(Response::text(
                503,
                "failed to write failover key into DCS (etcd unreachable)",
            ));
        };
        let written = match etcd.put_failover(rt, &value, deadline) {
            Ok(rev) => rev,
            Err(e) => {
                return Some(Response::text(
                    503,
                    format!("failed to write failover key into DCS ({e})"),
                ));
            }
        };
        info!(
            "api: {} requested: leader {}, candidate {}{} (failover key written at revision {written})",
            f.action.word(),
            f.leader.as_deref().unwrap_or("-"),
            f.candidate.as_deref().unwrap_or("any"),
            f.scheduled_at
                .as_ref()
                .map(|(t, _)| format!(", scheduled at {t}"))
                .unwrap_or_default(),
        );
        if f.scheduled_at.is_some() {
            return Some(Response::text(
                202,
                format!("{} scheduled", f.action.title()),
            ));
        }
        let Some(ticket) = ticket else {
            return Some(Response::text(
                202,
                format!(
                    "{} requested (the failover key is written)",
                    f.action.title()
                ),
            ));
        };
        let old_leader = self
            .last_view
            .as_ref()
            .and_then(|v| v.leader.as_ref().map(|k| k.name.clone()));
        self.awaiting.push(Awaiting {
            ticket,
            action: f.action,
            old_leader,
            candidate: f.candidate,
            written,
            until: clock::now().add(switchover_api::outcome_wait(self.cfg.timing.loop_wait)),
        });
        None
    }

    /// Answer the parked requests whose outcome the last cluster read shows (or
    /// whose time is up). Called wherever intents are carried out: no etcd call.
    pub(super) fn answer_awaiting(&mut self) {
        if self.awaiting.is_empty() {
            return;
        }
        let now = clock::now();
        let view = self.last_view.as_ref();
        let mut still = Vec::new();
        for a in std::mem::take(&mut self.awaiting) {
            let seen = view.filter(|v| v.revision >= a.written);
            let resp = match seen {
                Some(v) => match &v.leader {
                    Some(k) if Some(&k.name) != a.old_leader.as_ref() => Some(match &a.candidate {
                        Some(c) if *c != k.name => Response::text(
                            200,
                            format!(
                                "{} over to \"{}\" instead of \"{c}\"",
                                capitalize(a.action.past()),
                                k.name
                            ),
                        ),
                        _ => Response::text(
                            200,
                            format!("Successfully {} to \"{}\"", a.action.past(), k.name),
                        ),
                    }),
                    _ if v.failover.is_none() => Some(Response::text(
                        503,
                        format!(
                            "{} failed (the request was refused or called off: the leader's \
                             log says why)",
                            a.action.title()
                        ),
                    )),
                    _ => None,
                },
                None => None,
            };
            let resp = resp.or_else(|| {
                (now >= a.until)
                    .then(|| Response::text(503, format!("{} status unknown", a.action.title())))
            });
            match resp {
                Some(r) => {
                    info!("api: {} answered {}", a.action.word(), r.code);
                    if !self.api.complete(a.ticket, &r) {
                        log::debug!("api: the client left before its answer ({})", r.code);
                    }
                }
                None => still.push(a),
            }
        }
        self.awaiting = still;
    }

    /// `DELETE /switchover` (Patroni's `do_DELETE_switchover`): 200 when a scheduled
    /// request was deleted, 404 when none is scheduled, 409 when the key changed
    /// between the read and the delete, 503 when etcd does not answer.
    pub(super) fn cancel_switchover(&mut self) -> Response {
        let deadline = self.deadline(self.core.timing().retry_timeout);
        let Some((etcd, rt)) = self.connect(deadline) else {
            return Response::text(503, "etcd unreachable: nothing deleted");
        };
        let req = match etcd.read_failover(rt, deadline) {
            Ok(r) => r,
            Err(e) => return Response::text(503, format!("cannot read the failover key: {e}")),
        };
        let Some(req) = req.filter(|r| r.scheduled_text.is_some()) else {
            return Response::text(404, "no switchover is scheduled");
        };
        match etcd.delete_failover_at(rt, req.mod_revision, deadline) {
            Ok(true) => {
                info!(
                    "api: deleted the switchover scheduled at {}",
                    req.scheduled_text.as_deref().unwrap_or("?")
                );
                Response::text(200, "scheduled switchover deleted")
            }
            Ok(false) => Response::text(409, "the failover key changed: nothing deleted"),
            Err(e) => Response::text(503, format!("deleting the failover key: {e}")),
        }
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}
