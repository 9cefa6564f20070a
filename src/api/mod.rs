//! The health/management HTTP API as pure functions: bytes in, bytes out.
//!
//! Owns: parsing an HTTP/1.0 or 1.1 request head (with `httparse`) and its query
//! string, routing, the health checks with Patroni's status codes and order of
//! checks (plus the lease: see [`ApiStatus::is_leader`]), and rendering complete
//! responses (`Connection: close`, JSON bodies) from an [`ApiStatus`] snapshot.
//! Must never: touch a socket, read a clock (the agent puts the request instant in
//! [`ApiStatus::now`]), block, allocate without bound (the head is capped at
//! [`MAX_HEAD`] bytes, [`MAX_HEADERS`] lines), or panic on any input. The agent owns
//! the socket, the deadline and the status snapshot; answers come from the agent's
//! lease state, so routing moves as soon as leadership does (DESIGN §1 step 6).
//!
//! Patroni 4.1's `patroni/api.py` is the reference for paths, status codes and the
//! status JSON. Where tenure answers differently, on purpose:
//! - `/`, `/primary`, `/read-write` and `/leader` need the leader key **and** more
//!   than `[api] primary_min_remaining` left to the fence deadline `F` (DESIGN S1),
//!   so a load balancer stops sending writes to a leader that stopped renewing
//!   before it fences; `/primary` also needs PostgreSQL to answer as a primary
//!   (Patroni answers 200 while the promotion is still running).
//! - `/replica` (and the read endpoints built on it) answers 503 on the node that
//!   holds the key: it is promoting, not a replica to read from.
//! - A malformed query value (`?lag=1 MiB`, `?mode=x`, an empty value) is refused
//!   with 400 naming it; Patroni ignores it and answers as if it were absent.
//!   Decimal numbers only: Patroni reads `lag=010` as octal (8 bytes).
//! - Unknown paths answer 404 (Patroni's fallback is a health check answering 503).
//!   HEAD and OPTIONS answer every path with the status GET would give (Patroni
//!   answers them from its generic health check: 503 for `/patroni`, `/liveness`,
//!   `/readiness`).
//! - tenure has no standby clusters: `/standby-leader` always answers 503.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::core::model::{PgReport, Tags};
use crate::core::time::Instant;

pub mod auth;
pub mod cluster;
pub mod fill;
pub mod metrics;
pub mod mgmt;
pub mod server;
mod tls;

/// Longest request head accepted (request line + headers + CRLFCRLF).
pub const MAX_HEAD: usize = 8 * 1024;
/// Most header lines accepted (httparse needs a fixed table).
pub const MAX_HEADERS: usize = 64;

/// A request method. GET, HEAD and OPTIONS read (health and cluster endpoints, open
/// to anyone, as Patroni's, unless `[api] read_auth` says otherwise:
/// [`auth::read_needs_access`]); POST, PUT, PATCH and DELETE write (the table in
/// [`mgmt`], behind HTTP basic auth and, over TLS, `verify_client`); anything else
/// is answered with 405.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    Post,
    Put,
    Patch,
    Delete,
    Other(String),
}

impl Method {
    /// The method's name as sent.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Options => "OPTIONS",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Other(m) => m,
        }
    }

    /// POST, PUT, PATCH, DELETE: routed through [`mgmt`].
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Method::Post | Method::Put | Method::Patch | Method::Delete
        )
    }
}

/// What the server needs from a request head besides the request line: its length
/// (the body starts there) and the headers that frame and authorise a body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// Bytes of the head, CRLFCRLF included.
    pub len: usize,
    /// `Content-Length`, if sent (repeated with different values is a 400).
    pub content_length: Option<u64>,
    /// A `Transfer-Encoding` header was sent (chunked bodies are not accepted: 411).
    pub transfer_encoding: bool,
    /// The `Authorization` header's value, if sent.
    pub authorization: Option<String>,
    /// `Expect: 100-continue` (curl sends it before larger bodies).
    pub expect_continue: bool,
}

/// The outcome of parsing the bytes received so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The head is not complete yet: read more (the caller's deadline bounds this).
    Incomplete,
    /// A complete, well-formed head: the path, and the query string after `?`
    /// (undecoded; empty when there is none).
    Request {
        method: Method,
        path: String,
        query: String,
        head: Head,
    },
    /// Refuse with this status; the text names what is wrong.
    Bad(u16, String),
}

/// What the agent knows right now, as the API reports it. Filled once per loop
/// iteration; `now`, `fence_deadline` and `last_iteration` are refreshed just
/// before requests are answered.
#[derive(Clone, Debug, Default)]
pub struct ApiStatus {
    pub name: String,
    pub scope: String,
    /// "primary", "replica" or "unknown" (PostgreSQL not answering).
    pub role: &'static str,
    /// Patroni's state: "running", "starting", "stopped".
    pub state: String,
    /// PostgreSQL answers queries.
    pub pg_running: bool,
    pub pg_primary: bool,
    /// A replica whose WAL receiver streams (Patroni's `replication_state`).
    pub streaming: bool,
    pub timeline: u32,
    /// The data directory's system identifier, while there is one (Patroni's
    /// `database_system_identifier`, a string).
    pub sysid: Option<u64>,
    /// Primary: current LSN. Replica: the larger of receive and replay.
    pub lsn: u64,
    /// The probe's report-only fields (server version, start time, positions).
    pub report: PgReport,
    /// Primary: `pg_stat_replication` as Patroni lists it (parsed once per loop).
    pub replication: Option<Value>,
    /// This node holds the leader key (its own leadership, not yet fenced).
    pub holds_leader_key: bool,
    /// Epoch of the leadership this node runs under (its own, or the key's).
    pub epoch: Option<i64>,
    /// The leader key's holder, as last read.
    pub leader: Option<String>,
    /// No leader key in the last cluster read (or no read yet).
    pub cluster_unlocked: bool,
    /// The `status` key's `optime` (the leader's WAL position), last read.
    pub status_optime: Option<u64>,
    /// `CLOCK_BOOTTIME` of the last successful cluster read.
    pub cluster_read_at: Option<Instant>,
    /// Wall-clock seconds of the last successful cluster read (Patroni's
    /// `dcs_last_seen`), 0 before the first.
    pub dcs_last_seen: u64,
    /// The `sync` key lists this node as the synchronous standby (synchronous mode).
    pub sync_standby: bool,
    pub tags: Tags,
    /// The lag `/readiness` allows by default (`maximum_lag_on_failover`).
    pub maximum_lag_on_failover: u64,
    pub ttl: u32,
    pub loop_wait: Duration,
    /// `[api] primary_min_remaining`.
    pub primary_min_remaining: Duration,
    /// Read-back watchdog timeout `W`, if armed.
    pub watchdog: Option<u32>,
    /// The last loop's reason sentence.
    pub reason: String,
    /// The instant the request is answered at (refreshed per service call).
    pub now: Instant,
    /// The fence deadline `F` of this node's leadership (refreshed per service call).
    pub fence_deadline: Option<Instant>,
    /// Start of the last loop iteration (refreshed per service call).
    pub last_iteration: Option<Instant>,
    /// Patroni's `scheduled_restart` (`{"schedule": ..., conditions}`), while one
    /// is scheduled (`POST /restart` with `schedule`).
    pub scheduled_restart: Option<Value>,
    /// What `/cluster`, `/history` and `/config` answer from (the last read).
    pub cluster: cluster::ClusterSnapshot,
    /// The `config` key in force says `pause: true` (maintenance mode).
    pub pause: bool,
    /// Why the `config` key's current value was refused (the last good one is
    /// kept), if it was.
    pub config_refused: Option<String>,
    /// The horizon `H` of this node's leadership (refreshed per service call).
    pub horizon: Option<Instant>,
    /// The TTL etcd granted for this node's lease, while it leads (refreshed per
    /// service call).
    pub lease_ttl: Option<u32>,
    /// The agent's counters and histograms (`GET /metrics`).
    pub metrics: crate::metrics::Metrics,
    /// `notAfter` of each certificate tenure uses (`crate::certs`), for `/metrics`.
    pub cert_expiry: crate::certs::Gauges,
    /// The local physical replication slots (`report.slots_json` parsed, again
    /// only when it changed), for `/metrics`.
    pub slots: Vec<crate::pg::slots::LocalSlot>,
}

impl ApiStatus {
    /// Time left to the fence deadline `F`, while this node leads.
    pub fn time_left(&self) -> Option<Duration> {
        self.fence_deadline.map(|f| self.now.until(f))
    }

    /// Patroni's `is_leader()` with the lease made explicit: this node holds the
    /// key and more than `primary_min_remaining` is left to `F`. A leader that
    /// stopped renewing turns this false `primary_min_remaining` before it fences.
    pub fn is_leader(&self) -> bool {
        self.holds_leader_key
            && self
                .time_left()
                .is_some_and(|left| left > self.primary_min_remaining)
    }

    /// Why [`ApiStatus::is_leader`] is false.
    fn not_leader_why(&self) -> String {
        match self.time_left() {
            Some(left) if self.holds_leader_key => format!(
                "{:.3} s left to the fence deadline F, not above primary_min_remaining \
                 {:.3} s",
                left.as_secs_f64(),
                self.primary_min_remaining.as_secs_f64()
            ),
            _ => "this node does not hold the leader key".into(),
        }
    }

    /// The last cluster read is recent enough to answer from (Patroni keeps its
    /// cached cluster for one ttl).
    fn cluster_valid(&self) -> bool {
        self.cluster_read_at
            .is_some_and(|t| self.now < t.add(Duration::from_secs(u64::from(self.ttl))))
    }

    /// Patroni's leader optime: the larger of the `status` key's `optime` (while the
    /// cluster read is valid) and the WAL end the sender last reported.
    fn leader_optime(&self) -> u64 {
        let status = if self.cluster_valid() {
            self.status_optime.unwrap_or(0)
        } else {
            0
        };
        status.max(self.report.latest_end_lsn.unwrap_or(0))
    }

    /// A tag's value as Patroni compares it (`str(value).lower()` for non-strings).
    fn tag(&self, name: &str) -> Option<String> {
        match name {
            "nofailover" => Some(self.tags.nofailover.to_string()),
            "noloadbalance" => Some(self.tags.noloadbalance.to_string()),
            "nosync" => Some(self.tags.nosync.to_string()),
            "clonefrom" => Some(self.tags.clonefrom.to_string()),
            _ => self
                .tags
                .custom
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone()),
        }
    }
}

// ---------------------------------------------------------------------------
// Request head
// ---------------------------------------------------------------------------

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Parse a request head from the bytes received so far.
pub fn parse_request(buf: &[u8]) -> Parsed {
    let head = &buf[..buf.len().min(MAX_HEAD)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= MAX_HEAD {
                return Parsed::Bad(431, format!("request head larger than {MAX_HEAD} bytes"));
            }
            return Parsed::Incomplete;
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Bad(431, format!("more than {MAX_HEADERS} header lines"));
        }
        Err(e) => return bad_head(head, e),
    };
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Parsed::Bad(400, "incomplete request line".into());
    };
    if !target.starts_with('/') {
        return Parsed::Bad(
            400,
            format!(
                "request target must be a path starting with /, found {:?}",
                truncate(target)
            ),
        );
    }
    let target = target.split('#').next().unwrap_or(target);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "OPTIONS" => Method::Options,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "PATCH" => Method::Patch,
        "DELETE" => Method::Delete,
        other => Method::Other(other.to_string()),
    };
    let mut h = Head {
        len: head_len,
        ..Head::default()
    };
    for hdr in req.headers.iter() {
        let name = hdr.name;
        if name.eq_ignore_ascii_case("content-length") {
            // RFC 9110: digits only; a repeated header must agree (a request
            // smuggling guard: two framings of one body are refused).
            let v = std::str::from_utf8(hdr.value).unwrap_or("").trim();
            let n = match v.parse::<u64>() {
                Ok(n) if !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()) => n,
                _ => {
                    return Parsed::Bad(400, format!("malformed Content-Length {:?}", truncate(v)));
                }
            };
            if h.content_length.is_some_and(|m| m != n) {
                return Parsed::Bad(400, "conflicting Content-Length headers".into());
            }
            h.content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            h.transfer_encoding = true;
        } else if name.eq_ignore_ascii_case("authorization") {
            h.authorization = Some(String::from_utf8_lossy(hdr.value).into_owned());
        } else if name.eq_ignore_ascii_case("expect") {
            h.expect_continue = hdr.value.eq_ignore_ascii_case(b"100-continue");
        }
    }
    Parsed::Request {
        method,
        path: path.to_string(),
        query: query.to_string(),
        head: h,
    }
}

/// The 400 (or 505) for a head httparse refused, naming what is wrong.
fn bad_head(head: &[u8], e: httparse::Error) -> Parsed {
    let line_end = head.iter().position(|&c| c == b'\n').unwrap_or(head.len());
    let line = &head[..line_end];
    let shown = String::from_utf8_lossy(line);
    let shown = truncate(shown.trim_end_matches('\r'));
    match e {
        httparse::Error::HeaderName => {
            Parsed::Bad(400, "malformed header line (bad header name)".into())
        }
        httparse::Error::HeaderValue => {
            Parsed::Bad(400, "malformed header line (bad header value)".into())
        }
        httparse::Error::Version => {
            // The version is the request line's last word.
            let v = shown.rsplit(' ').next().unwrap_or("");
            let b = v.as_bytes();
            if b.len() == 8
                && v.starts_with("HTTP/")
                && b[5].is_ascii_digit()
                && b[6] == b'.'
                && b[7].is_ascii_digit()
            {
                Parsed::Bad(505, format!("HTTP version {v} not supported"))
            } else {
                Parsed::Bad(400, format!("malformed HTTP version in {shown:?}"))
            }
        }
        _ => {
            // A non-token byte in the method (a TLS handshake, a binary probe).
            if let Some(&c) = line
                .iter()
                .take_while(|&&c| c != b' ')
                .find(|&&c| !is_tchar(c) && c != b'\r')
            {
                return Parsed::Bad(
                    400,
                    format!("malformed request line: byte 0x{c:02x} in the method"),
                );
            }
            if std::str::from_utf8(line).is_err() {
                return Parsed::Bad(400, "request line is not valid UTF-8".into());
            }
            Parsed::Bad(
                400,
                format!("malformed request line (expected \"METHOD /path HTTP/1.1\"): {shown:?}"),
            )
        }
    }
}

/// At most 80 characters of untrusted text for an error message.
fn truncate(s: &str) -> &str {
    match s.char_indices().nth(80) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

// ---------------------------------------------------------------------------
// Query string
// ---------------------------------------------------------------------------

/// `/readiness`'s `mode`: which position lag is measured from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LagMode {
    /// Replayed WAL (Patroni's default).
    #[default]
    Apply,
    /// Received WAL.
    Write,
}

/// The query parameters the health endpoints read. Others are ignored, as Patroni
/// ignores them; a repeated one counts once, the first (Patroni's `[0]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// `lag`: the most replication lag accepted, in bytes.
    pub lag: Option<u64>,
    /// `mode` (`/readiness`).
    pub mode: Option<LagMode>,
    /// `tag_<name>=<value>`, in order.
    pub tags: Vec<(String, String)>,
}

/// Decode one `application/x-www-form-urlencoded` component (`+` is a space).
fn form_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                let Some(v) = hex else {
                    return Err(format!("malformed percent escape in {:?}", truncate(s)));
                };
                out.push(v);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{:?} does not decode to UTF-8", truncate(s)))
}

/// Parse a query string. `Err` names the parameter and what is wrong with it.
pub fn parse_query(q: &str) -> Result<Query, String> {
    let mut out = Query::default();
    let mut seen_lag = false;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        // A field without `=` carries nothing (Python's parse_qs drops it too).
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        let k = form_decode(k)?;
        let v = form_decode(v)?;
        match k.as_str() {
            "lag" if !seen_lag => {
                seen_lag = true;
                out.lag = Some(parse_lag(&v).map_err(|e| format!("lag={v:?}: {e}"))?);
            }
            "mode" if out.mode.is_none() => {
                out.mode = Some(match v.as_str() {
                    "apply" => LagMode::Apply,
                    "write" => LagMode::Write,
                    _ => return Err(format!("mode={v:?}: expected \"apply\" or \"write\"")),
                });
            }
            _ => {
                if let Some(name) = k.strip_prefix("tag_") {
                    if name.is_empty() {
                        return Err("tag_: no tag name after tag_".into());
                    }
                    if v.is_empty() {
                        return Err(format!("{k}: empty value"));
                    }
                    if !out.tags.iter().any(|(n, _)| n == name) {
                        out.tags.push((name.to_string(), v));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// A lag as Patroni reads it (`parse_int(value, 'B')`): a decimal number with an
/// optional fraction and an optional unit, `B`, `kB`, `MB`, `GB` or `TB` (PostgreSQL's
/// units, case-sensitive, powers of 1024), whitespace allowed around them. A fraction
/// is rounded to a whole number of the next smaller unit, as Patroni does.
pub fn parse_lag(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty value".into());
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return Err("must not be negative".into());
    }
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(num_end);
    if num.is_empty() || num == "." {
        return Err("expected a number of bytes, optionally with a unit (16kB, 10MB)".into());
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.contains('.') {
        return Err("malformed number".into());
    }
    if int.len() > 1 && int.starts_with('0') {
        return Err(
            "leading zero (Patroni would read it as octal): write the number in decimal".into(),
        );
    }
    let (mult, step): (u128, u128) = match unit.trim() {
        "" | "B" => (1, 1),
        "kB" => (1 << 10, 1),
        "MB" => (1 << 20, 1 << 10),
        "GB" => (1 << 30, 1 << 20),
        "TB" => (1 << 40, 1 << 30),
        other => {
            return Err(format!(
                "unknown unit {other:?}: use B, kB, MB, GB or TB (case-sensitive, as in \
                 PostgreSQL)"
            ));
        }
    };
    let too_large = || "too large".to_string();
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large())?
    };
    let mut bytes = int.checked_mul(mult).ok_or_else(too_large)?;
    if !frac.is_empty() {
        // At most 18 fraction digits matter; the rest cannot change a whole `step`.
        let digits = &frac[..frac.len().min(18)];
        let f: u128 = digits.parse().map_err(|_| too_large())?;
        let scale = 10u128.pow(digits.len() as u32);
        // Round (f / scale × mult) to the nearest multiple of `step`.
        let steps = (f * (mult / step) * 2 + scale) / (scale * 2);
        bytes = bytes.checked_add(steps * step).ok_or_else(too_large)?;
    }
    u64::try_from(bytes).map_err(|_| too_large())
}

// ---------------------------------------------------------------------------
// Routing and the checks
// ---------------------------------------------------------------------------

/// The endpoints (Patroni's paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/`, `/primary`, `/read-write` (and the old `/master`).
    Primary,
    StandbyLeader,
    Leader,
    Replica,
    ReadOnly,
    Sync,
    Async,
    ReadOnlySync,
    Health,
    Liveness,
    Readiness,
    /// `/patroni`: the status, always 200.
    Status,
}

/// The endpoint a path names; `None` answers 404.
pub fn endpoint(path: &str) -> Option<Endpoint> {
    use Endpoint::*;
    Some(match path {
        // Patroni: `/` is `/primary`. HAProxy's plain `option httpchk` sends
        // `OPTIONS /`, so this is what a write port built that way checks.
        "/" | "/primary" | "/read-write" | "/master" => Primary,
        "/standby-leader" | "/standby_leader" => StandbyLeader,
        "/leader" => Leader,
        "/replica" => Replica,
        "/read-only" => ReadOnly,
        "/synchronous" | "/sync" => Sync,
        "/asynchronous" | "/async" => Async,
        "/read-only-sync" | "/read-only-synchronous" => ReadOnlySync,
        "/health" => Health,
        "/liveness" => Liveness,
        "/readiness" => Readiness,
        "/patroni" => Status,
        _ => return None,
    })
}

/// A check's answer: the status code and, for people, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub code: u16,
    pub why: String,
}

fn ok(why: impl Into<String>) -> Verdict {
    Verdict {
        code: 200,
        why: why.into(),
    }
}

fn unavailable(why: impl Into<String>) -> Verdict {
    Verdict {
        code: 503,
        why: why.into(),
    }
}

/// The health check of `ep` (not `Status`, which always answers 200), in Patroni's
/// order: the replica, leader and primary answers first, then the path picks one,
/// then `?tag_` on a 200 of an endpoint that honours tags.
pub fn check(ep: Endpoint, q: &Query, s: &ApiStatus) -> Verdict {
    match ep {
        Endpoint::Liveness => return liveness(s),
        Endpoint::Readiness => return readiness(q, s),
        Endpoint::Status => return ok("status"),
        _ => {}
    }
    let replica = replica_check(q, s);
    let leader = if s.is_leader() {
        ok("this node holds the leader key")
    } else {
        unavailable(s.not_leader_why())
    };
    let primary = if leader.code != 200 {
        leader.clone()
    } else if !(s.pg_running && s.pg_primary) {
        unavailable("PostgreSQL is not running as a primary (yet)")
    } else {
        ok("primary with the leader key")
    };
    let (verdict, honours_tags) = match ep {
        Endpoint::StandbyLeader => (unavailable("tenure runs no standby clusters"), false),
        Endpoint::Leader => (leader, false),
        Endpoint::Primary => (primary, false),
        Endpoint::Replica => (replica, true),
        Endpoint::ReadOnly => (
            if primary.code == 200 {
                primary
            } else {
                replica
            },
            true,
        ),
        Endpoint::Health => (
            if s.state == "running" {
                ok("PostgreSQL is running")
            } else {
                unavailable(format!("PostgreSQL is {}", s.state))
            },
            true,
        ),
        Endpoint::Sync | Endpoint::Async | Endpoint::ReadOnlySync => {
            let v = if !s.cluster_valid() {
                unavailable("the cluster state is unknown: etcd not read for a ttl")
            } else {
                match ep {
                    Endpoint::Sync if s.sync_standby => replica,
                    Endpoint::Sync => unavailable("not the synchronous standby"),
                    Endpoint::Async if !s.sync_standby => replica,
                    Endpoint::Async => unavailable("this node is the synchronous standby"),
                    _ if primary.code == 200 => primary,
                    _ if s.sync_standby => replica,
                    _ => unavailable("neither the primary nor the synchronous standby"),
                }
            };
            (v, true)
        }
        Endpoint::Liveness | Endpoint::Readiness | Endpoint::Status => {
            unreachable!("answered above")
        }
    };
    if honours_tags && verdict.code == 200 {
        for (name, want) in &q.tags {
            match s.tag(name) {
                None => return unavailable(format!("tag {name} is not set on this node")),
                Some(have) if &have != want => {
                    return unavailable(format!("tag {name} is {have:?}, not {want:?}"));
                }
                Some(_) => {}
            }
        }
    }
    verdict
}

/// Patroni's `replica_status_code`, in its order: load balancing allowed, not
/// lagging past `?lag=`, running as a replica; plus not holding the key.
fn replica_check(q: &Query, s: &ApiStatus) -> Verdict {
    if s.tags.noloadbalance {
        return unavailable("tag noloadbalance is set");
    }
    let optime = s.leader_optime();
    let replayed = s.report.replay_lsn.unwrap_or(0);
    if let Some(lag) = q.lag
        && optime > 0
        && optime > replayed.saturating_add(lag)
    {
        return unavailable(format!(
            "replayed WAL is {} bytes behind the leader's {optime}, more than lag={lag}",
            optime - replayed
        ));
    }
    if !s.pg_running || s.pg_primary {
        return unavailable(format!(
            "PostgreSQL is not running as a replica ({})",
            s.state
        ));
    }
    if s.holds_leader_key {
        return unavailable("this node holds the leader key (promoting)");
    }
    ok("replica")
}

/// Patroni's `/liveness`: the loop ran within `ttl` (on a primary) or `2 × ttl`
/// (elsewhere) of when it was due. Unlike Patroni's, a pause does not make it 200:
/// a stuck loop is as dangerous paused as not (the lease and S1 do not pause).
fn liveness(s: &ApiStatus) -> Verdict {
    let ttl = Duration::from_secs(u64::from(s.ttl));
    let limit = if s.pg_running && s.pg_primary {
        ttl
    } else {
        ttl * 2
    };
    match s.last_iteration {
        Some(t) if s.now < t.add(s.loop_wait + limit) => ok("the loop runs"),
        Some(t) => unavailable(format!(
            "no loop iteration for {:.3} s (limit {:.3} s)",
            s.now.since(t).as_secs_f64(),
            (s.loop_wait + limit).as_secs_f64()
        )),
        None => unavailable("no loop iteration yet"),
    }
}

/// Patroni's `/readiness`, in its order: the leader is ready; otherwise PostgreSQL
/// must run, stream, know the leader's position and not lag past `?lag=` (default
/// `maximum_lag_on_failover`) measured at `?mode=` (`apply`: replayed, `write`:
/// received).
fn readiness(q: &Query, s: &ApiStatus) -> Verdict {
    if s.is_leader() {
        return ok("this node holds the leader key");
    }
    if s.state != "running" {
        return unavailable("PostgreSQL is not running");
    }
    if !s.streaming {
        return unavailable("PostgreSQL replication state is not streaming");
    }
    let latest_end = s.report.latest_end_lsn.unwrap_or(0);
    if !s.cluster_valid() && latest_end == 0 {
        return unavailable("etcd is not accessible");
    }
    let optime = s.leader_optime();
    let mode = q.mode.unwrap_or_default();
    let (name, at) = match mode {
        LagMode::Write => ("write", s.report.receive_lsn),
        LagMode::Apply => ("apply", s.report.replay_lsn),
    };
    let lag = optime.saturating_sub(at.unwrap_or(0));
    let max = q.lag.unwrap_or(s.maximum_lag_on_failover);
    if lag > max {
        return unavailable(format!(
            "Replication {name} lag {lag} exceeds maximum allowable {max}"
        ));
    }
    ok("streaming and caught up")
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
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

const ALLOW: &str = "Allow: GET, HEAD, OPTIONS\r\n";

fn write_response(status: u16, body: &str, shape: Shape, extra: &str, out: &mut Vec<u8>) {
    write_typed(status, "application/json", body, shape, extra, out);
}

fn write_typed(
    status: u16,
    content_type: &str,
    body: &str,
    shape: Shape,
    extra: &str,
    out: &mut Vec<u8>,
) {
    let mut head = String::with_capacity(160);
    // Writing to a String cannot fail.
    let _ = write!(
        head,
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
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
    let body = json!({ "error": why }).to_string();
    write_response(status, &body, Shape::Full, "", out);
}

fn secs(d: Duration) -> Value {
    // Milliseconds are plenty for people and scripts.
    json!((d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// The status JSON: Patroni's fields (`state`, `postmaster_start_time`, `role`,
/// `server_version`, `xlog`, `sync_standby`, `timeline`, `replication_state`,
/// `replication`, `cluster_unlocked`, `dcs_last_seen`, `database_system_identifier`,
/// `tags`, `patroni`), then
/// tenure's own under `tenure`. `check`: a health endpoint's verdict, added there.
pub fn status_json(s: &ApiStatus, check: Option<&Verdict>) -> String {
    let mut m = Map::new();
    m.insert("state".into(), json!(s.state));
    if s.pg_running {
        if let Some(t) = &s.report.postmaster_start_time {
            m.insert("postmaster_start_time".into(), json!(t));
        }
        m.insert("role".into(), json!(s.role));
        if let Some(v) = s.report.server_version {
            m.insert("server_version".into(), json!(v));
        }
        let xlog = if s.pg_primary {
            json!({ "location": s.lsn })
        } else {
            let replayed = s.report.replay_lsn.unwrap_or(0);
            json!({
                "received_location": s.report.receive_lsn.unwrap_or(replayed),
                "replayed_location": replayed,
                "replayed_timestamp": s.report.replayed_timestamp,
                "paused": s.report.replay_paused.unwrap_or(false),
            })
        };
        m.insert("xlog".into(), xlog);
        if s.sync_standby && !s.pg_primary {
            m.insert("sync_standby".into(), json!(true));
        }
        m.insert("timeline".into(), json!(s.timeline));
        if s.streaming && !s.pg_primary {
            m.insert("replication_state".into(), json!("streaming"));
        }
        if s.pg_primary
            && let Some(r) = s.replication.as_ref().filter(|r| !r.is_null())
        {
            m.insert("replication".into(), r.clone());
        }
    } else {
        m.insert("role".into(), json!(s.role));
    }
    if s.pause {
        m.insert("pause".into(), json!(true));
    }
    if s.cluster_unlocked {
        m.insert("cluster_unlocked".into(), json!(true));
    }
    m.insert("dcs_last_seen".into(), json!(s.dcs_last_seen));
    if let Some(id) = s.sysid {
        m.insert("database_system_identifier".into(), json!(id.to_string()));
    }
    // Patroni's: present only when set.
    if s.report.pending_restart {
        m.insert("pending_restart".into(), json!(true));
    }
    if let Some(r) = &s.scheduled_restart {
        m.insert("scheduled_restart".into(), r.clone());
    }
    let mut tags = Map::new();
    tags.insert("nofailover".into(), json!(s.tags.nofailover));
    if s.tags.noloadbalance {
        tags.insert("noloadbalance".into(), json!(true));
    }
    if s.tags.nosync {
        tags.insert("nosync".into(), json!(true));
    }
    if s.tags.clonefrom {
        tags.insert("clonefrom".into(), json!(true));
    }
    for (k, v) in &s.tags.custom {
        tags.insert(k.clone(), json!(v));
    }
    m.insert("tags".into(), Value::Object(tags));
    m.insert(
        "patroni".into(),
        json!({ "version": env!("CARGO_PKG_VERSION"), "scope": s.scope, "name": s.name }),
    );
    let left = s.time_left();
    let mut t = Map::new();
    t.insert("epoch".into(), json!(s.epoch));
    t.insert("leader".into(), json!(s.leader));
    t.insert("holds_leader_key".into(), json!(s.holds_leader_key));
    t.insert(
        "lease_valid".into(),
        json!(left.is_some_and(|l| !l.is_zero())),
    );
    t.insert("fence_remaining".into(), left.map_or(Value::Null, secs));
    t.insert(
        "primary_min_remaining".into(),
        secs(s.primary_min_remaining),
    );
    t.insert("leader_optime".into(), json!(s.status_optime));
    t.insert("watchdog_timeout".into(), json!(s.watchdog));
    t.insert("pg_running".into(), json!(s.pg_running));
    t.insert("streaming".into(), json!(s.streaming));
    t.insert("sync_standby".into(), json!(s.sync_standby));
    t.insert("reason".into(), json!(s.reason));
    t.insert("pause".into(), json!(s.pause));
    // The cluster values in force (the `config` key's, once applied).
    t.insert("ttl".into(), json!(s.ttl));
    t.insert("loop_wait".into(), secs(s.loop_wait));
    t.insert(
        "maximum_lag_on_failover".into(),
        json!(s.maximum_lag_on_failover),
    );
    t.insert("config_refused".into(), json!(s.config_refused));
    if let Some(c) = check {
        t.insert("check".into(), json!(c.why));
    }
    m.insert("tenure".into(), Value::Object(t));
    Value::Object(m).to_string()
}

/// Write the complete response to `method path?query` given the agent's `status`.
/// GET: status line + JSON body; HEAD: the same head without the body; OPTIONS: the
/// same status with an empty body (HAProxy's `option httpchk` sends OPTIONS).
pub fn respond(method: &Method, path: &str, query: &str, s: &ApiStatus, out: &mut Vec<u8>) {
    let shape = match method {
        Method::Get => Shape::Full,
        Method::Head => Shape::HeadOnly,
        Method::Options => Shape::Empty,
        // Writes are routed by `mgmt::on_head` before this; one that gets here has
        // no handler.
        m => {
            let body = json!({ "error": format!("method {} not allowed", truncate(m.as_str())) })
                .to_string();
            write_response(405, &body, Shape::Full, ALLOW, out);
            return;
        }
    };
    let extra = if *method == Method::Options {
        ALLOW
    } else {
        ""
    };
    if path == "/metrics" {
        metrics::respond(s, shape, extra, out);
        return;
    }
    if mgmt::READ_PATHS.contains(&path) {
        let (code, body) = cluster::answer(path, s);
        write_response(code, &body, shape, extra, out);
        return;
    }
    let Some(ep) = endpoint(path) else {
        let body = json!({ "error": format!("no such endpoint: {}", truncate(path)) }).to_string();
        write_response(404, &body, shape, extra, out);
        return;
    };
    let q = match parse_query(query) {
        Ok(q) => q,
        Err(why) => {
            let body = json!({ "error": format!("bad query: {why}") }).to_string();
            write_response(400, &body, shape, extra, out);
            return;
        }
    };
    let verdict = check(ep, &q, s);
    let body = match ep {
        Endpoint::Status => status_json(s, None),
        // Patroni answers these with the status code alone; the reason helps people.
        Endpoint::Liveness | Endpoint::Readiness => json!({ "reason": verdict.why }).to_string(),
        _ => status_json(s, Some(&verdict)),
    };
    write_response(verdict.code, &body, shape, extra, out);
}

#[cfg(test)]
mod tests;
