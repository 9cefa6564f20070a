//! `tenure ctl failover` when the leader's API does not answer (its host crashed,
//! it is cut off): Patroni's ctl then writes the request into the DCS itself
//! ("Could not failover using Patroni api, falling back to DCS"). Ours asks the
//! named candidate's API instead, which runs the same checks a leader's would
//! (a running replica, within `maximum_lag_on_failover`, not `nofailover`) and
//! writes the same `failover` key; the candidate's agent then takes the key only by
//! the normal rules once the old lease is gone, with the early-expiry delay when it
//! applies (S3: the request only makes it the preferred candidate).
//!
//! Owns: the fallback request and which of its answers mean "written, outcome
//! pending". Must never: write to etcd itself (module `ctl`'s rule), or fall back
//! on an answer that refused (only when no answer came).

use serde_json::Value;

use super::http::Response;
use super::render::Snapshot;
use super::verbs::api;
use super::{CtlError, Ctx};

/// Ask `candidate`'s API after the leader's gave no answer (`why`).
pub(super) fn through_candidate(
    ctx: &Ctx,
    s: &Snapshot,
    leader: &str,
    candidate: &str,
    body: &Value,
    why: &str,
    timeout: std::time::Duration,
) -> Result<Response, CtlError> {
    if !ctx.inv.json {
        outln!(
            "{} Could not failover through the leader {leader}'s API ({why}); asking the \
             candidate {candidate} instead (it takes over once {leader}'s lease is gone)",
            crate::clock::rfc3339_utc(crate::clock::realtime()),
        );
    }
    let url = s
        .member(candidate)
        .map(|m| m.info.api_url.clone())
        .unwrap_or_default();
    api(
        ctx,
        candidate,
        &url,
        "POST",
        "/failover",
        Some(body),
        timeout,
    )
    .map_err(|e| match e {
        CtlError::Failed(e2) => CtlError::Failed(format!(
            "the leader {leader}'s API did not answer ({why}), nor did the candidate's: {e2}"
        )),
        other => other,
    })
}

/// The candidate wrote the key, but the old lease had not run out while its API
/// waited for the outcome (`2 × max(10 s, loop_wait)`): keep waiting here.
pub(super) fn pending(r: &Response) -> bool {
    r.status == 503 && r.body.contains("status unknown")
}
