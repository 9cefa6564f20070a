//! The API's write endpoints: the dispatch table, access, body framing and JSON
//! bodies, and the hand-over of an intent to the loop.
//!
//! Owns: which `METHOD /path` has a handler ([`WRITE_ROUTES`]), the order of checks
//! before a handler runs (route, then access — [`super::auth`] —, then framing,
//! then the JSON body), the typed field readers handlers use, and the
//! [`Intent`]s handlers hand to the loop.
//! Must never: run a handler before access is granted, read a body the head did
//! not frame with `Content-Length` (no chunked bodies: 411) or one above
//! [`MAX_BODY`] (413), do I/O, read a clock, or decide anything about leadership: a
//! handler only answers from the [`ApiStatus`] snapshot or hands an [`Intent`] to
//! the loop, which carries it out with its own deadlines (DESIGN §5: API input never
//! delays `F - B` or a renewal) and answers the parked connection afterwards.
//!
//! Adding an endpoint (`/switchover`, `/failover`, `/restart`, `/reload`,
//! `/reinitialize`): write a [`Handler`] (read fields with [`field_str`],
//! [`field_bool`], [`only_fields`]; answer with [`Reply::now`], or hand the loop an
//! [`Intent`] with [`Reply::intent`]), add a row to [`WRITE_ROUTES`], and, for an
//! intent, an arm in the agent's `intents.rs` that carries it out and answers it.
//! Patroni 4.1's `patroni/api.py` is the reference for bodies and status codes.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{ApiStatus, Head, Method, Shape, endpoint, truncate, write_typed};
use crate::config::ApiAuth;

pub mod manage;

/// Largest request body accepted (a `config` value with PostgreSQL parameters fits
/// many times over); larger is 413. Each connection's buffer holds a head and this.
pub const MAX_BODY: usize = 32 * 1024;

/// How long a connection whose request became an intent may wait for the loop's
/// answer before it gets a 503 (the loop carries intents out within the time an
/// iteration leaves, usually at once; see the agent's `intents.rs`).
pub const INTENT_WAIT: Duration = Duration::from_secs(5);

/// Whether a route takes a JSON body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyRule {
    /// A non-empty JSON object, framed by `Content-Length` (else 411, as Patroni).
    Required,
    /// A JSON object or nothing (no `Content-Length`, or 0).
    Optional,
}

/// A write request as a handler sees it: access granted, body parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteRequest<'a> {
    pub path: &'a str,
    /// The undecoded query string (empty when none).
    pub query: &'a str,
    /// The JSON object sent (empty when none was, for [`BodyRule::Optional`]).
    pub body: Map<String, Value>,
}

/// A response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// `application/json`.
    Json(String),
    /// `text/plain`: Patroni answers its management endpoints with a sentence,
    /// which patronictl prints.
    Text(String),
}

/// A complete answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub code: u16,
    pub body: Body,
    /// Extra header lines (each ending in CRLF).
    pub extra: String,
}

impl Response {
    pub fn text(code: u16, message: impl Into<String>) -> Response {
        Response {
            code,
            body: Body::Text(message.into()),
            extra: String::new(),
        }
    }

    pub fn json(code: u16, v: &Value) -> Response {
        Response {
            code,
            body: Body::Json(v.to_string()),
            extra: String::new(),
        }
    }

    /// Render the whole response (`Connection: close`).
    pub fn render(&self, out: &mut Vec<u8>) {
        let (ct, b) = match &self.body {
            Body::Json(b) => ("application/json", b.as_str()),
            Body::Text(b) => ("text/plain; charset=utf-8", b.as_str()),
        };
        write_typed(self.code, ct, b, Shape::Full, &self.extra, out);
    }
}

/// What the loop is asked to do for a write request. It carries the intent out
/// with its own deadlines (every call capped at `F - B` and the next renewal
/// tick while leading) and answers the parked connection with a [`Response`].
#[derive(Clone, Debug, PartialEq)]
pub enum Intent {
    /// `PATCH /config`: a JSON merge patch (RFC 7396, as Patroni's `patch_config`)
    /// of the `config` key, checked against S6 for every member's published
    /// `W`, `M`, `B`, `P`, stored with a compare-and-set on its mod revision.
    PatchConfig(Map<String, Value>),
    /// `PUT /config`: the whole value, with the same checks.
    PutConfig(Map<String, Value>),
    /// `POST /switchover`, `POST /failover`: write the `failover` key; a scheduled
    /// request is answered 202 once written, an immediate one after its outcome
    /// (bounded by [`switchover::outcome_wait`]).
    Failover(switchover::FailoverIntent),
    /// `DELETE /switchover`: delete a scheduled request.
    CancelSwitchover,
    /// `POST /restart` ([`manage`]): now, as a supervised job the loop answers for
    /// when it ends, or at its `schedule`.
    Restart(manage::RestartRequest),
    /// `DELETE /restart`: cancel the scheduled restart.
    CancelRestart,
    /// `POST /reload`: the agent's configuration file, then PostgreSQL's.
    Reload,
    /// `POST /reinitialize`: move this replica's data aside, clone the leader.
    Reinitialize { force: bool },
}

/// A handler's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Answer at once.
    Now(Response),
    /// Park the connection and hand the loop this intent; the loop answers within
    /// `wait` (or the connection gets a 503 saying so).
    Intent { intent: Intent, wait: Duration },
}

impl Reply {
    pub fn now(code: u16, message: impl Into<String>) -> Reply {
        Reply::Now(Response::text(code, message))
    }

    pub fn intent(intent: Intent) -> Reply {
        Reply::Intent {
            intent,
            wait: INTENT_WAIT,
        }
    }
}

/// A write endpoint's handler: pure, from the request and the agent's snapshot.
pub type Handler = fn(&WriteRequest<'_>, &ApiStatus) -> Reply;

/// One row of the dispatch table.
#[derive(Debug)]
pub struct WriteRoute {
    pub method: Method,
    pub path: &'static str,
    pub body: BodyRule,
    pub handler: Handler,
}

/// Every write endpoint. Access (HTTP basic, [`super::auth`]) is checked for all of
/// them before the body is read.
pub static WRITE_ROUTES: &[WriteRoute] = &[
    WriteRoute {
        method: Method::Patch,
        path: "/config",
        body: BodyRule::Required,
        handler: patch_config,
    },
    WriteRoute {
        method: Method::Put,
        path: "/config",
        body: BodyRule::Required,
        handler: put_config,
    },
    WriteRoute {
        method: Method::Post,
        path: "/switchover",
        body: BodyRule::Required,
        handler: switchover::post_switchover,
    },
    WriteRoute {
        method: Method::Delete,
        path: "/switchover",
        body: BodyRule::Optional,
        handler: switchover::delete_switchover,
    },
    WriteRoute {
        method: Method::Post,
        path: "/failover",
        body: BodyRule::Required,
        handler: switchover::post_failover,
    },
    WriteRoute {
        method: Method::Post,
        path: "/restart",
        body: BodyRule::Optional,
        handler: manage::post_restart,
    },
    WriteRoute {
        method: Method::Delete,
        path: "/restart",
        body: BodyRule::Optional,
        handler: manage::delete_restart,
    },
    WriteRoute {
        method: Method::Post,
        path: "/reload",
        body: BodyRule::Optional,
        handler: manage::post_reload,
    },
    WriteRoute {
        method: Method::Post,
        path: "/reinitialize",
        body: BodyRule::Optional,
        handler: manage::post_reinitialize,
    },
];

/// Read endpoints that are not health checks (answered by [`super::respond`]).
pub const READ_PATHS: &[&str] = &["/cluster", "/history", "/config"];

fn readable(path: &str) -> bool {
    endpoint(path).is_some() || READ_PATHS.contains(&path) || path == "/metrics"
}

/// What the server does once a write request's head is complete.
pub enum HeadDecision {
    /// Answered already (no route, refused access, bad framing): `out` holds it.
    Answered,
    /// Read `len` body bytes after the head, then call [`on_body`] with `route`.
    ReadBody {
        route: &'static WriteRoute,
        len: usize,
    },
}

/// The checks on a write request's head, in order: route (404, or 405 with the
/// methods the path has), access (403 while no credentials are configured, 401
/// with the challenge), framing (411 for chunked or a missing `Content-Length`
/// where a body is required, 413 above [`MAX_BODY`]).
pub fn on_head(
    method: &Method,
    path: &str,
    head: &Head,
    auth: Option<&ApiAuth>,
    out: &mut Vec<u8>,
) -> HeadDecision {
    let Some(route) = WRITE_ROUTES
        .iter()
        .find(|r| r.path == path && r.method == *method)
    else {
        let mut allow: Vec<&str> = Vec::new();
        if readable(path) {
            allow.extend(["GET", "HEAD", "OPTIONS"]);
        }
        allow.extend(
            WRITE_ROUTES
                .iter()
                .filter(|r| r.path == path)
                .map(|r| r.method.as_str()),
        );
        let r = if allow.is_empty() {
            let mut r = Response::json(
                404,
                &json!({ "error": format!("no such endpoint: {}", truncate(path)) }),
            );
            r.extra.clear();
            r
        } else {
            let mut r = Response::json(
                405,
                &json!({ "error": format!(
                    "method {} not allowed on {}", truncate(method.as_str()), truncate(path)
                ) }),
            );
            r.extra = format!("Allow: {}\r\n", allow.join(", "));
            r
        };
        r.render(out);
        return HeadDecision::Answered;
    };
    if let Err(refusal) = super::auth::check(head.authorization.as_deref(), auth) {
        let mut r = Response::text(refusal.code, &refusal.message);
        r.extra = refusal.extra_headers();
        r.render(out);
        return HeadDecision::Answered;
    }
    if head.transfer_encoding {
        Response::text(
            411,
            "Transfer-Encoding (chunked) bodies are not accepted: send the body with \
             Content-Length",
        )
        .render(out);
        return HeadDecision::Answered;
    }
    let len = match (head.content_length, route.body) {
        (None, BodyRule::Required) => {
            Response::text(
                411,
                format!(
                    "{} {path} takes a JSON body: send it with Content-Length",
                    method.as_str()
                ),
            )
            .render(out);
            return HeadDecision::Answered;
        }
        (None, BodyRule::Optional) => 0,
        (Some(n), _) if n > MAX_BODY as u64 => {
            Response::text(
                413,
                format!("request body of {n} bytes is larger than the {MAX_BODY} bytes accepted"),
            )
            .render(out);
            return HeadDecision::Answered;
        }
        // INVARIANT: n <= MAX_BODY, so it fits a usize and the connection's buffer.
        (Some(n), _) => n as usize,
    };
    HeadDecision::ReadBody { route, len }
}

/// Parse the body (a JSON object; errors say where) and run the route's handler.
pub fn on_body(route: &WriteRoute, path: &str, query: &str, body: &[u8], s: &ApiStatus) -> Reply {
    let map = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(m)) => m,
            Ok(other) => {
                return Reply::now(
                    400,
                    format!("the body must be a JSON object, found {}", kind(&other)),
                );
            }
            Err(e) => return Reply::now(400, format!("the body is not valid JSON: {e}")),
        }
    };
    if map.is_empty() && route.body == BodyRule::Required {
        return Reply::now(
            400,
            format!(
                "{} {path} needs a non-empty JSON object body",
                route.method.as_str()
            ),
        );
    }
    let req = WriteRequest {
        path,
        query,
        body: map,
    };
    (route.handler)(&req, s)
}

/// A JSON value's kind, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(k: &str, want: &str, v: &Value) -> Reply {
    Reply::now(
        400,
        format!("field \"{k}\": expected {want}, found {}", kind(v)),
    )
}

/// A string field (absent or `null`: `None`); another type is a 400 naming it.
pub fn field_str<'a>(m: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, Reply> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(wrong_type(k, "a string", v)),
    }
}

/// A boolean field (absent or `null`: `None`). Patroni's `parse_bool` also reads
/// the strings `"true"`/`"false"` (and `on`/`off`, `yes`/`no`, `1`/`0`), which
/// patronictl never sends: accepted here too, anything else is a 400 naming it.
pub fn field_bool(m: &Map<String, Value>, k: &str) -> Result<Option<bool>, Reply> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(Some(true)),
            "false" | "off" | "no" | "0" => Ok(Some(false)),
            _ => Err(Reply::now(
                400,
                format!("field \"{k}\": expected true or false, found {s:?}"),
            )),
        },
        Some(v) => Err(wrong_type(k, "true or false", v)),
    }
}

/// Refuse a body with a field outside `allowed` (400 naming it), as Patroni's
/// `/restart` refuses an unknown filter.
pub fn only_fields(m: &Map<String, Value>, allowed: &[&str]) -> Result<(), Reply> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(Reply::now(
            400,
            format!(
                "unknown field \"{}\" (expected one of: {})",
                truncate(k),
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// `PATCH /config` (Patroni's `do_PATCH_config`): the loop reads the key, merges,
/// checks S6 for every member, and stores with a compare-and-set.
fn patch_config(req: &WriteRequest<'_>, _s: &ApiStatus) -> Reply {
    Reply::intent(Intent::PatchConfig(req.body.clone()))
}

/// `PUT /config` (Patroni's `do_PUT_config`): the whole value, same checks.
fn put_config(req: &WriteRequest<'_>, _s: &ApiStatus) -> Reply {
    Reply::intent(Intent::PutConfig(req.body.clone()))
}

pub mod switchover;

#[cfg(test)]
mod tests;
