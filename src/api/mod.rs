//! The health/management HTTP API as pure functions: bytes in, bytes out.
//!
//! Owns: parsing an HTTP/1.0 or 1.1 request head, routing, and rendering complete
//! responses (`Connection: close`, JSON bodies) from an [`ApiStatus`] snapshot.
//! Must never: touch a socket, read a clock, block, allocate without bound (the head
//! is capped at [`MAX_HEAD`] bytes), or panic on any input. The agent owns the
//! socket, the deadline and the status snapshot; answers come from the agent's lease
//! state, so routing moves as soon as leadership does (DESIGN §1 step 6).

use std::fmt::Write as _;

pub mod server;

/// Longest request head accepted (request line + headers + CRLFCRLF).
pub const MAX_HEAD: usize = 8 * 1024;

/// A request method. Anything but GET, HEAD and OPTIONS is answered with 405.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    Other(String),
}

/// The outcome of parsing the bytes received so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The head is not complete yet: read more (the caller's deadline bounds this).
    Incomplete,
    /// A complete, well-formed head. `path` has its query string removed.
    Request { method: Method, path: String },
    /// Refuse with this status; the text names what is wrong.
    Bad(u16, String),
}

/// What the agent knows right now, as the API reports it.
#[derive(Clone, Debug, Default)]
pub struct ApiStatus {
    pub name: String,
    /// "primary", "replica" or "unknown".
    pub role: &'static str,
    pub holds_leader_key: bool,
    pub lease_valid: bool,
    pub pg_running: bool,
    pub pg_primary: bool,
    /// A replica receiving WAL from the primary (judged by progress, DESIGN §3a).
    pub streaming: bool,
    pub epoch: Option<i64>,
    pub timeline: u32,
    pub lsn: u64,
    pub leader: Option<String>,
    /// Patroni-style state: "running", "starting", "stopped", "fenced", ...
    pub state: String,
    /// The last loop's reason sentence.
    pub reason: String,
    /// Read-back watchdog timeout `W`, if armed.
    pub watchdog: Option<u32>,
    /// The `sync` key lists this node as the synchronous standby (DESIGN §3a).
    pub sync_standby: bool,
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Parse a request head from the bytes received so far.
pub fn parse_request(buf: &[u8]) -> Parsed {
    let limit = buf.len().min(MAX_HEAD);
    let Some(end) = find_head_end(&buf[..limit]) else {
        if buf.len() >= MAX_HEAD {
            return Parsed::Bad(431, format!("request head larger than {MAX_HEAD} bytes"));
        }
        // Reject obvious garbage early instead of waiting for the deadline.
        if let Some(why) = early_garbage(buf) {
            return Parsed::Bad(400, why);
        }
        return Parsed::Incomplete;
    };
    let Ok(head) = std::str::from_utf8(&buf[..end]) else {
        return Parsed::Bad(400, "request head is not valid UTF-8".into());
    };
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Parsed::Bad(
            400,
            format!(
                "malformed request line (expected \"METHOD /path HTTP/1.1\"): {:?}",
                truncate(request_line)
            ),
        );
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Parsed::Bad(400, format!("malformed method {:?}", truncate(method)));
    }
    match version {
        "HTTP/1.0" | "HTTP/1.1" => {}
        v if v.len() == 8
            && v.starts_with("HTTP/")
            && v.as_bytes()[5].is_ascii_digit()
            && v.as_bytes()[6] == b'.'
            && v.as_bytes()[7].is_ascii_digit() =>
        {
            return Parsed::Bad(505, format!("HTTP version {v} not supported"));
        }
        v => return Parsed::Bad(400, format!("malformed HTTP version {:?}", truncate(v))),
    }
    if !target.starts_with('/') {
        return Parsed::Bad(
            400,
            format!(
                "request target must be a path starting with /, found {:?}",
                truncate(target)
            ),
        );
    }
    if target.bytes().any(|c| c <= b' ' || c == 0x7f) {
        return Parsed::Bad(400, "control character in request target".into());
    }
    for line in lines {
        let Some((name, _value)) = line.split_once(':') else {
            return Parsed::Bad(400, format!("malformed header line {:?}", truncate(line)));
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Parsed::Bad(400, format!("malformed header name {:?}", truncate(name)));
        }
    }
    let path = target
        .split(['?', '#'])
        .next()
        .unwrap_or(target)
        .to_string();
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_string()),
    };
    Parsed::Request { method, path }
}

/// A head that cannot become a request however many bytes follow: a non-token
/// byte before the first space (TLS handshakes, binary probes).
fn early_garbage(buf: &[u8]) -> Option<String> {
    for &c in buf {
        if c == b' ' {
            return None;
        }
        if !is_tchar(c) {
            return Some(format!(
                "malformed request line: byte 0x{c:02x} in the method"
            ));
        }
    }
    None
}

/// At most 80 characters of untrusted text for an error message.
fn truncate(s: &str) -> &str {
    match s.char_indices().nth(80) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// How much of a response to send.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Head and body (GET, errors).
    Full,
    /// HEAD: the head GET would send (same Content-Length), no body.
    HeadOnly,
    /// OPTIONS: same status, an empty body.
    Empty,
}

fn write_response(status: u16, body: &str, shape: Shape, extra: &str, out: &mut Vec<u8>) {
    let mut head = String::with_capacity(160);
    // Writing to a String cannot fail.
    let _ = write!(
        head,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\n{extra}Connection: close\r\n\r\n",
        reason_phrase(status),
        if shape == Shape::Empty { 0 } else { body.len() },
    );
    out.extend_from_slice(head.as_bytes());
    if shape == Shape::Full {
        out.extend_from_slice(body.as_bytes());
    }
}

/// A complete error response (for [`Parsed::Bad`], or a timed-out read: 408).
pub fn respond_error(status: u16, why: &str, out: &mut Vec<u8>) {
    let body = serde_json::json!({ "error": why }).to_string();
    write_response(status, &body, Shape::Full, "", out);
}

/// The status JSON (Patroni-like fields plus ours under `tenure`).
pub fn status_json(s: &ApiStatus) -> String {
    serde_json::json!({
        "state": s.state,
        "role": s.role,
        "timeline": s.timeline,
        "xlog": { "location": s.lsn },
        "patroni": { "name": s.name, "version": env!("CARGO_PKG_VERSION") },
        "tenure": {
            "epoch": s.epoch,
            "leader": s.leader,
            "reason": s.reason,
            "watchdog_timeout": s.watchdog,
            "holds_leader_key": s.holds_leader_key,
            "lease_valid": s.lease_valid,
            "pg_running": s.pg_running,
            "streaming": s.streaming,
            "sync_standby": s.sync_standby,
        },
    })
    .to_string()
}

/// Status code for a health endpoint, `None` for an unknown path.
fn route(path: &str, s: &ApiStatus) -> Option<u16> {
    let primary = s.holds_leader_key && s.lease_valid && s.pg_running && s.pg_primary;
    let streaming_replica = s.pg_running && !s.pg_primary && s.streaming;
    let ok = match path {
        "/" | "/patroni" | "/status" => true,
        "/primary" | "/master" | "/read-write" => primary,
        "/replica" => streaming_replica && !s.holds_leader_key,
        "/read-only" => primary || streaming_replica,
        "/health" => s.pg_running,
        "/leader" => s.holds_leader_key,
        // Patroni's: the synchronous standby the `sync` key lists, and the others.
        "/sync" | "/synchronous" => streaming_replica && !s.holds_leader_key && s.sync_standby,
        "/async" | "/asynchronous" => streaming_replica && !s.holds_leader_key && !s.sync_standby,
        _ => return None,
    };
    Some(if ok { 200 } else { 503 })
}

/// Write the complete response to `method path` given the agent's `status`.
/// GET: status line + JSON body; HEAD and OPTIONS: the same status, no body
/// (HAProxy's `option httpchk` sends OPTIONS by default).
pub fn respond(method: &Method, path: &str, status: &ApiStatus, out: &mut Vec<u8>) {
    const ALLOW: &str = "Allow: GET, HEAD, OPTIONS\r\n";
    let shape = match method {
        Method::Get => Shape::Full,
        Method::Head => Shape::HeadOnly,
        Method::Options => Shape::Empty,
        Method::Other(m) => {
            let body =
                serde_json::json!({ "error": format!("method {} not allowed", truncate(m)) })
                    .to_string();
            write_response(405, &body, Shape::Full, ALLOW, out);
            return;
        }
    };
    match route(path, status) {
        Some(code) => {
            let extra = if *method == Method::Options {
                ALLOW
            } else {
                ""
            };
            write_response(code, &status_json(status), shape, extra, out);
        }
        None => {
            let body =
                serde_json::json!({ "error": format!("no such endpoint: {}", truncate(path)) })
                    .to_string();
            write_response(404, &body, shape, "", out);
        }
    }
}

#[cfg(test)]
mod tests;
