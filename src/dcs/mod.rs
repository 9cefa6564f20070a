//! etcd v3 backend: the key layout (DESIGN §4), leases, the acquire txn, guarded
//! writes, the watch on `leader`. Blocking calls, each bounded by a deadline.
//!
//! Owns: every byte exchanged with etcd, and the defensive parsing of what other
//! writers left there. Must never: decide anything (it reports outcomes to the
//! core), block past the deadline it was given, resolve a host name, or reuse a
//! keepalive stream after a timeout (DESIGN §3).
//!
//! How it is driven: etcd-client is async; every call here is
//! `rt.block_on(async { tokio::time::timeout(d, call).await })` on the caller's
//! current-thread runtime, with `d` the time left until the call's deadline. No
//! threads are started: endpoints are IP literals (hyper skips the resolver, which
//! would use `spawn_blocking`; endpoint names are resolved by a child process,
//! crate::resolve, and reach this module as addresses), and the client's own background tasks (the balance
//! channel, HTTP/2 connections) run on the caller's runtime whenever it is driven.

mod handover;
mod keys;
mod member_cache;
mod pin;
mod raw;
mod secure;
pub mod view;

pub use pin::ClusterPin;
use pin::Headed;
pub use secure::{Security, is_invalid_auth_token, is_security_error};

pub use handover::{encode_failover, parse_rfc3339};

pub use keys::{MAX_STATUS_SLOTS, encode_status, encode_sync};

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, LeaseKeepAliveStream,
    LeaseKeeper, LeaseTimeToLiveOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
    WatchOptions, WatchStream,
};
use tokio::runtime::Runtime;

use crate::clock;
use crate::core::model::{
    AcquireOutcome, AcquiredRecord, ClaimOutcome, ClusterView, Epoch, HistoryEntry, LeaderKey,
    LeaseId, LeasePoll, ReleaseMarker, Renewal, RenewalOutcome, RollbackMarker, RollbackSeen,
};
use crate::core::time::Instant;

pub use keys::{
    encode_member, encode_member_with, encode_rollback, parse_member, parse_rollback, tags_json,
};

/// A failure talking to etcd (timeout, no leader, connection refused...). The text
/// names what failed; the loop treats it as an observation.
#[derive(Debug, Clone)]
pub struct DcsError(pub String);

impl std::fmt::Display for DcsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What [`Etcd::read_config_and_members`] read: the `config` key (value, mod
/// revision) and each member key (name, raw JSON).
#[derive(Debug, Clone, Default)]
pub struct ConfigAndMembers {
    pub config: Option<(String, i64)>,
    pub members: Vec<(String, String)>,
}

/// What a candidate decided to take the key on, compared by the acquire txn
/// ([`Etcd::acquire_seen`]): the `config` and `release` keys' mod revisions as it
/// read them (0: absent) and the marker it read (`None` if absent or garbage).
#[derive(Debug, Clone, Copy)]
pub struct AcquireBasis<'a> {
    pub config_revision: i64,
    pub release_revision: i64,
    pub release: Option<&'a ReleaseMarker>,
}

impl<'a> AcquireBasis<'a> {
    /// The basis a decision made on `view` had.
    pub fn of(view: &'a ClusterView) -> AcquireBasis<'a> {
        AcquireBasis {
            config_revision: view.config_revision,
            release_revision: view.release_revision,
            release: view.release.as_ref().and_then(|r| r.as_ref().ok()),
        }
    }
}

/// A change to `leader` or to a member key seen by the watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// `leader` was deleted (expiry, release, revoke, operator).
    LeaderDeleted { revision: i64 },
    /// `leader` was written (created or overwritten) with this value; `epoch` is the
    /// key's create revision and `lease` its lease, so a leadership shorter than a
    /// loop is known even if no read ever showed it (DESIGN §1 step 4).
    LeaderPut {
        name: String,
        revision: i64,
        epoch: i64,
        lease: i64,
    },
    /// `members/<name>` was written (a member published its state).
    MemberPut { name: String, revision: i64 },
    /// The watch broke (cancelled, compacted, no leader): reopen it.
    Broken(String),
}

/// How long a TCP connect to one endpoint may take. Loopback and LAN connects take
/// well under this; a black-holed member must not hold a call, but every call is
/// bounded by its own deadline anyway.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// HTTP/2 pings detect a dead connection that sent no RST (a partition). etcd's
/// server punishes pings more frequent than `--grpc-keepalive-min-time` (5 s by
/// default) with a GOAWAY, so stay above it.
const H2_PING_INTERVAL: Duration = Duration::from_secs(6);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(3);
/// Read-modify-write attempts of `history` before giving up (each one only retries
/// when another writer changed `history` in between, not when our guard failed).
const HISTORY_ATTEMPTS: usize = 5;

pub struct Etcd {
    client: Client,
    /// `<namespace>/<scope>/`, with the trailing slash.
    prefix: String,
    /// The open watch on `leader`, if any. Kept whole: dropping its request sender
    /// would half-close the stream.
    watch: Option<WatchStream>,
    /// Events of one watch response not yet handed out (a response can carry several).
    pending: VecDeque<WatchEvent>,
    /// The start revision the open watch was created with (`watch_from`).
    watch_start: i64,
    /// `[etcd] username`/password, used only by `authenticate` (secure.rs).
    user: Option<crate::config::EtcdAuth>,
    /// Whether `authenticate` got a token that no call has refused since.
    authed: bool,
    /// The parse of the scope's keys (log-once, the member cache) and the view kept
    /// from the watch (issue 13 item 5, view.rs).
    keeper: view::ViewKeeper,
    /// The range the last `confirmed_renew` read, kept for `take_renewal_view`: the
    /// leader's confirm read is the iteration's cluster read.
    renewal_read: Option<GetResponse>,
    /// Keepalive streams kept open between keepalives, at most `KEPT_KEEPALIVES`.
    keepalives: Vec<KeptKeepAlive>,
    /// The etcd cluster every answer must come from (pin.rs): the process's own
    /// when the caller passed it ([`Etcd::pinned`], [`Etcd::observed`]), else
    /// this client's.
    pin: ClusterPin,
    /// `false`: the pin's cluster is only noted, never refused
    /// ([`Etcd::observed`]).
    enforce: bool,
    /// The endpoints, for the pin's messages.
    endpoint: String,
    /// An answer of this client passed the pin: writes may be sent. Until then a
    /// write is preceded by a read (`verify`), so nothing of ours is written into
    /// another etcd cluster through a new client (pin.rs).
    verified: std::cell::Cell<bool>,
}

/// A keepalive stream kept open for one lease between its keepalives (issue 13
/// item 5: one message a keepalive instead of a fresh stream's two). Kept only
/// while every keepalive sent on it was answered (`fresh_keepalive`).
struct KeptKeepAlive {
    lease: LeaseId,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

/// Kept keepalive streams: the leader lease, the member lease, the bootstrap lock.
const KEPT_KEEPALIVES: usize = 3;

/// Why a keepalive did not give a TTL.
enum KeepAliveError {
    /// etcd answered TTL <= 0: the lease does not exist (any more).
    Gone,
    Failed(DcsError),
}

/// Run `fut` on `rt`, bounded by `deadline`. A deadline already reached fails at
/// once without sending anything.
fn bounded<T, F>(rt: &Runtime, deadline: Instant, what: &str, fut: F) -> Result<T, DcsError>
where
    F: Future<Output = Result<T, etcd_client::Error>>,
{
    let d = clock::now().until(deadline);
    if d.is_zero() {
        return Err(DcsError(format!("{what}: deadline already passed")));
    }
    // The `async` block matters: `timeout` must be created inside the runtime.
    match rt.block_on(async { tokio::time::timeout(d, fut).await }) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(DcsError(format!("{what}: {}", with_sources(&e)))),
        Err(_) => Err(DcsError(format!(
            "{what}: no answer within {:.3} s",
            d.as_secs_f64()
        ))),
    }
}

/// `e` and its sources: tonic's transport error says only "transport error"; the
/// cause an operator needs (a certificate, a refused connection) is in its sources.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// True for etcd's "etcdserver: requested lease not found" (gRPC NotFound). The
/// message is matched because tonic is not a direct dependency (its `Code` type
/// cannot be named here).
fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("lease not found"))
}

/// `http://IP:port`, or `https://IP:port` with TLS settings: a host name would
/// need the resolver (a blocking thread).
fn check_endpoint(e: &str, tls: bool) -> Result<(), DcsError> {
    let scheme = if tls { "https://" } else { "http://" };
    let rest = e.strip_prefix(scheme).ok_or_else(|| {
        DcsError(format!(
            "etcd endpoint {e:?}: must start with {scheme} ({})",
            if tls {
                "TLS is configured"
            } else {
                "https:// needs [etcd] cacert"
            }
        ))
    })?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    rest.parse::<SocketAddr>().map(|_| ()).map_err(|_| {
        DcsError(format!(
            "etcd endpoint {e:?}: must be http://IP:port here (names are resolved before: \
             crate::resolve)"
        ))
    })
}

/// The epoch a successful acquire txn created: the revision of its put (all writes
/// of one txn share one revision, which is the new key's create_revision).
fn txn_put_revision(resp: &TxnResponse) -> Option<i64> {
    let from_put = resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Put(p) => p.header().map(|h| h.revision()),
        _ => None,
    });
    from_put
        .filter(|r| *r > 0)
        .or_else(|| resp.header().map(|h| h.revision()).filter(|r| *r > 0))
}

fn leader_key(kv: &etcd_client::KeyValue) -> LeaderKey {
    LeaderKey {
        name: String::from_utf8_lossy(kv.value()).into_owned(),
        epoch: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    }
}

impl Etcd {
    /// Connect to `endpoints` (IP addresses only) with require-leader set.
    /// `prefix` is `<namespace>/<scope>/` (with the trailing slash).
    ///
    /// Sends nothing: connections are opened on the first call and reopened by the
    /// client when they break.
    pub fn connect(
        rt: &Runtime,
        endpoints: &[String],
        prefix: &str,
        deadline: Instant,
    ) -> Result<Etcd, DcsError> {
        Etcd::connect_with(rt, endpoints, prefix, &Security::default(), deadline)
    }

    /// [`Etcd::connect`] with TLS and credentials (secure.rs). Sends nothing
    /// either: the credentials are used by [`Etcd::authenticate`], a step of its
    /// own, never by a connect on the renewal path.
    pub fn connect_with(
        rt: &Runtime,
        endpoints: &[String],
        prefix: &str,
        sec: &Security,
        deadline: Instant,
    ) -> Result<Etcd, DcsError> {
        if endpoints.is_empty() {
            return Err(DcsError("etcd endpoints: the list is empty".into()));
        }
        for e in endpoints {
            check_endpoint(e, sec.tls.is_some())?;
        }
        if !prefix.ends_with('/') || prefix.len() < 2 {
            return Err(DcsError(format!(
                "etcd key prefix {prefix:?}: must be <namespace>/<scope>/ with the trailing slash"
            )));
        }
        let opts = ConnectOptions::new()
            // Unary calls fail fast and watches are cancelled on a member without a
            // leader (DESIGN §3); etcd-client sets this only client-wide.
            .with_require_leader(true)
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(H2_PING_INTERVAL, H2_PING_TIMEOUT)
            .with_keep_alive_while_idle(false);
        // No `with_user`: etcd-client would authenticate inside `connect`
        // (secure.rs); `with_auto_token_refresh` stays off (its default).
        let opts = match &sec.tls {
            Some(tls) => secure::with_tls(opts, tls)?,
            None => opts,
        };
        let eps = endpoints.to_vec();
        let client = bounded(
            rt,
            deadline,
            "connect to etcd",
            Client::connect(eps, Some(opts)),
        )?;
        Ok(Etcd {
            client,
            prefix: prefix.to_string(),
            watch: None,
            pending: VecDeque::new(),
            watch_start: 0,
            user: sec.auth.clone(),
            authed: false,
            keeper: view::ViewKeeper::new(prefix),
            renewal_read: None,
            keepalives: Vec::new(),
            pin: ClusterPin::default(),
            enforce: true,
            endpoint: endpoints.join(","),
            verified: std::cell::Cell::new(false),
        })
    }

    /// This client checks its answers against `pin`, the process's (the agent's:
    /// kept across endpoint switches, each of which makes a new client); `label`
    /// is the endpoint as configured (a name), said with the address it has now.
    pub fn pinned(mut self, pin: ClusterPin, label: &str) -> Etcd {
        self.pin = pin;
        if !label.is_empty() && label != self.endpoint {
            self.endpoint = format!("{label} ({})", self.endpoint);
        }
        self
    }

    /// Answers are noted against `pin` but never refused: a new cluster id is
    /// said as an `ALERT` (the agent's clients to endpoints given as addresses,
    /// DESIGN §3: "only an extra signal"; the rollback marker is the check).
    pub fn observed(mut self, pin: ClusterPin, label: &str) -> Etcd {
        self = self.pinned(pin, label);
        self.enforce = false;
        self.verified.set(true);
        self
    }

    /// [`bounded`], then the answer's header checked against the pinned etcd
    /// cluster (pin.rs): an answer from another cluster fails the call.
    fn call<T, F>(&self, rt: &Runtime, deadline: Instant, what: &str, fut: F) -> Result<T, DcsError>
    where
        T: Headed,
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        let r = bounded(rt, deadline, what, fut)?;
        self.check(what, &r)?;
        Ok(r)
    }

    /// [`Etcd::call`] for a request that writes (a put, a txn, a grant): on a
    /// client none of whose answers passed the pin yet, a read first (`verify`).
    fn write<T, F>(
        &self,
        rt: &Runtime,
        deadline: Instant,
        what: &str,
        fut: F,
    ) -> Result<T, DcsError>
    where
        T: Headed,
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        // `fut` is lazy: nothing is sent before it is polled in `call`.
        self.verify(rt, deadline)?;
        self.call(rt, deadline, what, fut)
    }

    /// One answer's header against the pin; the error names the call. An answer
    /// that passes lets this client write.
    fn check(&self, what: &str, answer: &impl Headed) -> Result<(), DcsError> {
        if !self.enforce {
            // Observed only: every answer stands, nothing is left to verify.
            self.pin.observe(&self.endpoint, answer);
            self.verified.set(true);
            return Ok(());
        }
        match self.pin.check(&self.endpoint, answer) {
            Ok(true) => {
                self.verified.set(true);
                Ok(())
            }
            // It names no cluster: used, but it verifies nothing.
            Ok(false) => Ok(()),
            Err(e) => {
                // A refusal makes the client's next write verify first again: its
                // channel reconnected to another cluster's member under it.
                self.verified.set(false);
                Err(DcsError(format!("{what}: {}", e.0)))
            }
        }
    }

    /// Before a new client's first write: one serializable count of `leader` (the
    /// member answers from its own store, no Raft round; any role that may use
    /// the scope may make it), whose header must pass the pin. Nothing when an
    /// answer of this client already passed. Not at connect: an authenticated
    /// user's token is fetched after the connect, by a step of its own.
    fn verify(&self, rt: &Runtime, deadline: Instant) -> Result<(), DcsError> {
        if self.verified.get() {
            return Ok(());
        }
        let mut kv = self.client.kv_client();
        let opts = GetOptions::new().with_count_only().with_serializable();
        let what = "check which etcd cluster answers";
        self.call(rt, deadline, what, kv.get(self.key("leader"), Some(opts)))?;
        // An answer that names no cluster (id 0) passed without verifying.
        if self.verified.get() {
            Ok(())
        } else {
            Err(DcsError(format!(
                "{what}: {} answered without naming its etcd cluster (id 0)",
                self.endpoint
            )))
        }
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}{}", self.prefix, suffix)
    }

    /// Log a parse problem once per distinct text.
    fn warn_once(&mut self, key: &str, problem: &str) {
        self.keeper.warn_once(key, problem);
    }

    /// One linearizable range over the prefix; parses leader/members/initialize/
    /// history/config defensively into a `ClusterView` (garbage is logged once per
    /// distinct problem and carried in `MemberInfo.parse_error` /
    /// `Initialize::Garbage` / skipped history entries; never an `Err` because of
    /// content). The view also restarts the one kept from the watch (view.rs).
    pub fn read_cluster(
        &mut self,
        rt: &Runtime,
        deadline: Instant,
    ) -> Result<ClusterView, DcsError> {
        let prefix = self.prefix.clone();
        let mut kv = self.client.kv_client();
        let resp = self.call(
            rt,
            deadline,
            "read the cluster",
            kv.get(prefix, Some(GetOptions::new().with_prefix())),
        )?;
        Ok(self.view_of(&resp))
    }

    /// The view of a range over the scope (view.rs parses it).
    fn view_of(&mut self, resp: &GetResponse) -> ClusterView {
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let prefix = self.prefix.as_bytes();
        let kvs = resp.kvs().iter().filter_map(|item| {
            Some(view::Kv {
                key: item.key().strip_prefix(prefix)?,
                value: item.value(),
                create_revision: item.create_revision(),
                mod_revision: item.mod_revision(),
                lease: item.lease(),
            })
        });
        self.keeper.read(revision, kvs)
    }

    /// The view kept from the scope watch (issue 13 item 5): the last full read with
    /// every watch event since applied in order. `None` while it is not known to be
    /// complete: no read yet, no watch open, or a gap since (broken, cancelled,
    /// compacted). Who may decide on it is the core's call (`core::watched`).
    pub fn watched_view(&self) -> Option<ClusterView> {
        self.watch.as_ref()?;
        self.keeper.view().cloned()
    }

    /// The cluster view of this iteration's confirmed renewal: its read is a
    /// linearizable range over the whole scope, so the leader needs no second read
    /// (issue 13 item 5). Taken once; `None` if the renewal made no read. Parsed
    /// here, after the pet, not inside the renewal (S2: nothing between a counted
    /// renewal and its pet).
    pub fn take_renewal_view(&mut self) -> Option<ClusterView> {
        let resp = self.renewal_read.take()?;
        Some(self.view_of(&resp))
    }

    /// Forget the renewal's read unparsed (an iteration that made no renewal).
    pub fn drop_renewal_read(&mut self) {
        self.renewal_read = None;
    }

    /// A keepalive for `lease`: on the stream kept open for it if there is one (one
    /// message), else on a fresh stream (two), which is then kept (issue 13 item 5).
    ///
    /// INVARIANT: a kept stream has nothing outstanding: every keepalive sent on it
    /// was answered before the stream was put back, and it is dropped after any
    /// timeout, error, end or odd answer. A stream answers its keepalives one for
    /// one and in order, so the answer read here is the answer to the keepalive sent
    /// here, never a late one (DESIGN §3: after a timeout the late answer stays
    /// queued on the stream). A kept stream that fails before the deadline (its
    /// connection broke while idle) is replaced by a fresh one within the same
    /// deadline; the caller's send instant, taken before, stays the conservative `s`.
    fn keepalive(
        &mut self,
        rt: &Runtime,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<i64, KeepAliveError> {
        let what = format!("keepalive of lease {lease:x}");
        self.verify(rt, deadline).map_err(KeepAliveError::Failed)?;
        if let Some(i) = self.keepalives.iter().position(|k| k.lease == lease) {
            // Taken out: put back only after a whole, matching answer.
            let mut k = self.keepalives.swap_remove(i);
            let fut = async {
                k.keeper.keep_alive().await?;
                k.stream.message().await
            };
            match bounded(rt, deadline, &what, fut) {
                Ok(Some(r)) => {
                    // Another cluster's answer: the stream goes, and so does the call.
                    self.check(&what, &r).map_err(KeepAliveError::Failed)?;
                    if r.id() == lease && r.ttl() > 0 {
                        let ttl = r.ttl();
                        self.keepalives.push(k);
                        return Ok(ttl);
                    }
                    // etcd answers TTL 0 on the stream for a lease it does not know.
                    if r.id() == lease {
                        return Err(KeepAliveError::Gone);
                    }
                }
                Ok(None) => {}
                Err(e) if clock::now() >= deadline => return Err(KeepAliveError::Failed(e)),
                Err(e) => log::debug!("{what} on the kept stream: {e}; on a fresh one"),
            }
        }
        let mut lc = self.client.lease_client();
        let fut = async move {
            let (mut keeper, mut stream) = match lc.keep_alive(lease).await {
                Ok(ks) => ks,
                Err(etcd_client::Error::LeaseKeepAliveError(m)) if m == "lease not found" => {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            // etcd-client's `keep_alive()` sent the first keepalive and checked its
            // answer (TTL <= 0 → "lease not found") but does not hand that answer
            // out; to learn the TTL a second one is sent on the same fresh stream.
            // That answer is the one whose header is checked (pin.rs).
            keeper.keep_alive().await?;
            match stream.message().await? {
                Some(r) => Ok(Some((r, keeper, stream))),
                None => Err(etcd_client::Error::LeaseKeepAliveError(
                    "keepalive stream ended without an answer".into(),
                )),
            }
        };
        let answered = bounded(rt, deadline, &what, fut);
        if let Ok(Some((r, _, _))) = &answered {
            self.check(&what, r).map_err(KeepAliveError::Failed)?;
        }
        if matches!(answered, Ok(None)) && self.enforce {
            // "Lease not found" in the first answer, whose header etcd-client keeps
            // to itself: from our cluster only if this member still answers for
            // it now (a channel that reconnected to another cluster's member would
            // otherwise make a healthy leader step down; review of the pin, M2).
            self.verified.set(false);
            self.verify(rt, deadline).map_err(KeepAliveError::Failed)?;
        }
        match answered {
            Ok(Some((r, keeper, stream))) if r.ttl() > 0 => {
                let ttl = r.ttl();
                if self.keepalives.len() >= KEPT_KEEPALIVES {
                    self.keepalives.remove(0);
                }
                self.keepalives.push(KeptKeepAlive {
                    lease,
                    keeper,
                    stream,
                });
                Ok(ttl)
            }
            Ok(_) => Err(KeepAliveError::Gone),
            Err(e) => Err(KeepAliveError::Failed(e)),
        }
    }

    /// The confirm read (DESIGN §1 step 2): one linearizable range over the whole
    /// scope, `leader` among it. A range over the scope is a linearizable read of
    /// `leader` as much as a get of it is (the same request, the same Raft read
    /// index), and the leader's iteration needs the rest anyway: the response is kept
    /// for `take_renewal_view`, so a leader's loop makes two requests, not three
    /// (issue 13 item 5). Nothing is parsed here but `leader` itself.
    fn get_leader(
        &mut self,
        rt: &Runtime,
        deadline: Instant,
    ) -> Result<Option<LeaderKey>, DcsError> {
        let prefix = self.prefix.clone();
        let mut kv = self.client.kv_client();
        let resp = self.call(
            rt,
            deadline,
            "read leader (with the scope)",
            kv.get(prefix, Some(GetOptions::new().with_prefix())),
        )?;
        let key = self.key("leader");
        let found = resp
            .kvs()
            .iter()
            .find(|kv| kv.key() == key.as_bytes())
            .map(leader_key);
        self.renewal_read = Some(resp);
        Ok(found)
    }

    /// DESIGN §1 step 2: a keepalive for `lease` (on its kept stream, or a fresh one:
    /// `keepalive`), then a linearizable read of `leader` (a range over the scope,
    /// `get_leader`).
    /// `sent_at` = now just before sending the keepalive. Counted only if both
    /// answered before the deadline, TTL > 0, and the key shows value == me,
    /// create_revision == epoch, lease == lease.
    pub fn confirmed_renew(
        &mut self,
        rt: &Runtime,
        lease: LeaseId,
        epoch: Epoch,
        me: &str,
        deadline: Instant,
    ) -> Renewal {
        // Only this renewal's read may stand for this iteration's cluster read.
        self.renewal_read = None;
        let sent_at = clock::now();
        let outcome = match self.keepalive(rt, lease, deadline) {
            Err(KeepAliveError::Gone) => RenewalOutcome::LeaseGone,
            Err(KeepAliveError::Failed(e)) => RenewalOutcome::Failed(e.0),
            Ok(ttl) => match self.get_leader(rt, deadline) {
                Err(e) => RenewalOutcome::Failed(e.0),
                Ok(Some(k)) if k.name == me && k.epoch == epoch && k.lease == lease => {
                    RenewalOutcome::Counted { ttl }
                }
                Ok(found) => RenewalOutcome::KeyLost { found },
            },
        };
        Renewal {
            lease,
            sent_at,
            outcome,
        }
    }

    /// Revoke a lease we gave up on, logging a failure (etcd expires it anyway).
    fn revoke_best_effort(&mut self, rt: &Runtime, lease: LeaseId, deadline: Instant) {
        if let Err(e) = self.revoke(rt, lease, deadline) {
            log::warn!("could not revoke lease {lease:x} (etcd expires it after its TTL): {e}");
        }
    }

    /// DESIGN §1 step 1: grant a fresh lease of `ttl` (granted_at = now before
    /// sending the grant; granted_ttl = the TTL etcd answered), then txn
    /// `If(version(leader)==0) Then(put(leader, me, lease))`. `Won{epoch}` is the
    /// key's create_revision (the revision of the txn's put). On Lost/Failed the
    /// granted lease is revoked (best effort, same deadline); on a txn that went
    /// unanswered it is kept (`AcquireOutcome::Unanswered`).
    ///
    /// Bound to no read: for tests and benchmarks only. The agent always uses
    /// [`Etcd::acquire_seen`] (review F1: an unbound acquire would not take a
    /// release marker).
    pub fn acquire_unbound(
        &mut self,
        rt: &Runtime,
        me: &str,
        ttl: u32,
        deadline: Instant,
    ) -> AcquireOutcome {
        self.acquire_txn(rt, me, ttl, None, deadline)
    }

    /// [`Etcd::acquire`], and only if the keys the candidate decided on are as it
    /// read them ([`AcquireBasis`]): a node that missed a change of `config` (a
    /// pause) loses the race (DESIGN §3), and so does one that read `release`
    /// before another acquisition: each writes its record there (S3: a leadership
    /// that came and went after the candidate's read, unseen, makes it lose).
    ///
    /// INVARIANT (review F1): every acquisition that sees a `release` marker marks
    /// it taken in its own txn, and compares its mod revision. So a marker still at
    /// the revision this txn compares was written, with the DELETE of its epoch's
    /// key, after the last acquisition before ours: no leadership came between that
    /// DELETE and this one, and the marker speaks for the key we take over.
    pub fn acquire_seen(
        &mut self,
        rt: &Runtime,
        me: &str,
        ttl: u32,
        basis: &AcquireBasis,
        deadline: Instant,
    ) -> AcquireOutcome {
        self.acquire_txn(rt, me, ttl, Some(basis), deadline)
    }

    fn acquire_txn(
        &mut self,
        rt: &Runtime,
        me: &str,
        ttl: u32,
        basis: Option<&AcquireBasis>,
        deadline: Instant,
    ) -> AcquireOutcome {
        let granted_at = clock::now();
        let (lease, granted_ttl) = match self.grant(rt, ttl, deadline) {
            Ok(g) => g,
            Err(e) => return AcquireOutcome::Failed(e.0),
        };
        let key = self.key("leader");
        let mut when = vec![Compare::version(key.clone(), CompareOp::Equal, 0)];
        let mut then = vec![TxnOp::put(
            key,
            me,
            Some(PutOptions::new().with_lease(lease)),
        )];
        if let Some(b) = basis {
            // A missing key compares as mod revision 0.
            when.push(Compare::mod_revision(
                self.key("config"),
                CompareOp::Equal,
                b.config_revision,
            ));
            when.push(Compare::mod_revision(
                self.key("release"),
                CompareOp::Equal,
                b.release_revision,
            ));
            // INVARIANT (S3, DESIGN §1 step 1): every bound acquisition writes
            // `release` in its own txn (one revision: the record's mod revision is
            // the new epoch), and every one compares it. So a win proves no
            // acquisition since the candidate's read, and a read shows the last
            // acquisition even when no read showed its key (docs/design.md "the
            // acquisition record"). A marker read is kept, marked taken, for
            // operators; a value that does not parse is replaced.
            let taken = b.release.map(|m| ReleaseMarker {
                taken_by: Some(me.to_string()),
                ..m.clone()
            });
            let record = AcquiredRecord {
                by: me.to_string(),
                lease,
                ttl: i64::from(granted_ttl),
            };
            then.push(TxnOp::put(
                self.key("release"),
                handover::encode_acquired(&record, taken.as_ref()),
                None,
            ));
        }
        let txn = Txn::new().when(when).and_then(then);
        let mut kv = self.client.kv_client();
        match self.write(rt, deadline, "acquire txn on leader", kv.txn(txn)) {
            Ok(resp) if resp.succeeded() => match txn_put_revision(&resp) {
                Some(epoch) => AcquireOutcome::Won {
                    lease,
                    granted_ttl,
                    granted_at,
                    epoch,
                },
                None => {
                    self.revoke_best_effort(rt, lease, deadline);
                    AcquireOutcome::Failed("acquire txn succeeded but named no revision".into())
                }
            },
            Ok(_) => {
                self.revoke_best_effort(rt, lease, deadline);
                AcquireOutcome::Lost
            }
            // No answer in time: etcd may have applied it. The lease is kept and the
            // core's next read decides (`AcquireOutcome::Unanswered`): a revoke here,
            // past the deadline, was rarely sent, and when it was the node's next
            // win waited the promote delay for its own key's early DELETE.
            Err(e) => AcquireOutcome::Unanswered {
                lease,
                granted_ttl,
                granted_at,
                why: e.0,
            },
        }
    }

    /// Bootstrap lock: grant a lease, txn `If(version(initialize)==0)
    /// Then(put(initialize, "", lease))`. The lease is revoked on Lost/Failed.
    pub fn claim_initialize(&mut self, rt: &Runtime, ttl: u32, deadline: Instant) -> ClaimOutcome {
        let (lease, _) = match self.grant(rt, ttl, deadline) {
            Ok(g) => g,
            Err(e) => return ClaimOutcome::Failed(e.0),
        };
        let key = self.key("initialize");
        let txn = Txn::new()
            .when(vec![Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(
                key,
                "",
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let mut kv = self.client.kv_client();
        match self.write(rt, deadline, "claim initialize", kv.txn(txn)) {
            Ok(resp) if resp.succeeded() => ClaimOutcome::Won { lease },
            Ok(_) => {
                self.revoke_best_effort(rt, lease, deadline);
                ClaimOutcome::Lost
            }
            Err(e) => {
                self.revoke_best_effort(rt, lease, deadline);
                ClaimOutcome::Failed(e.0)
            }
        }
    }

    /// txn `If(lease(initialize)==lease) Then(put(initialize, sysid, no lease))
    /// Else(get(initialize))`; then, once etcd answered, revoke `lease` (the lock
    /// has served its purpose). `Ok(true)` = written, now or by an earlier attempt
    /// whose answer was lost (`initialize` already holds `sysid`); `Ok(false)` =
    /// the lock is gone and the key is not ours: the core then holds the new data
    /// directory, so a lost answer must never read as that (review of d918f33,
    /// H1). On `Err` the lease is kept for the retry's compare.
    pub fn record_initialize(
        &mut self,
        rt: &Runtime,
        sysid: u64,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        if lease == 0 {
            return Err(DcsError(
                "record initialize: lease 0 would match a key bound to no lease".into(),
            ));
        }
        let key = self.key("initialize");
        let value = sysid.to_string();
        let txn = Txn::new()
            .when(vec![Compare::lease(key.clone(), CompareOp::Equal, lease)])
            .and_then(vec![TxnOp::put(key.clone(), value.clone(), None)])
            .or_else(vec![TxnOp::get(key, None)]);
        let mut kv = self.client.kv_client();
        let resp = self.write(rt, deadline, "record initialize", kv.txn(txn))?;
        let written = resp.succeeded()
            || resp.op_responses().into_iter().any(|r| match r {
                TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .is_some_and(|kv| kv.value() == value.as_bytes() && kv.lease() == 0),
                _ => false,
            });
        self.revoke_best_effort(rt, lease, deadline);
        Ok(written)
    }

    /// Create-only `initialize` = sysid with no lease (a node with data re-creating a
    /// lost key), and in the same txn the `rollback` marker if none exists (a nested
    /// txn: the first marker's writer keeps its word). `initialize` is never deleted,
    /// so its absence next to data means etcd lost its memory (DESIGN §3).
    /// `Ok(false)` = `initialize` exists (nothing written).
    pub fn create_initialize(
        &mut self,
        rt: &Runtime,
        sysid: u64,
        rollback: &RollbackSeen,
        me: &str,
        at: &str,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let ikey = self.key("initialize");
        let rkey = self.key("rollback");
        let marker = Txn::new()
            .when(vec![Compare::version(rkey.clone(), CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(
                rkey,
                keys::encode_rollback(rollback, me, at),
                None,
            )]);
        let txn = Txn::new()
            .when(vec![Compare::version(ikey.clone(), CompareOp::Equal, 0)])
            .and_then(vec![
                TxnOp::put(ikey, sysid.to_string(), None),
                TxnOp::txn(marker),
            ]);
        let mut kv = self.client.kv_client();
        self.write(rt, deadline, "create initialize", kv.txn(txn))
            .map(|r| r.succeeded())
    }

    /// Create-only `rollback` marker (the first writer wins). `Ok(true)` = written
    /// by us, `Ok(false)` = a marker exists.
    pub fn mark_rollback(
        &mut self,
        rt: &Runtime,
        seen: &RollbackSeen,
        me: &str,
        at: &str,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        self.create_if_absent(
            rt,
            "rollback",
            &keys::encode_rollback(seen, me, at),
            deadline,
        )
    }

    /// An operator's `tenure confirm-epoch` (DESIGN §3): in one txn, put
    /// `confirm_epoch` and delete the `rollback` marker, guarded by the marker's
    /// mod_revision as read just before (0: absent), so a marker written after the
    /// operator looked is not cleared unseen. Not guarded by the leader key: it only
    /// lifts refusals, it elects nobody. Returns the marker cleared (parsed; garbage
    /// too), if any.
    pub fn confirm_epoch(
        &mut self,
        rt: &Runtime,
        c: &crate::core::model::ConfirmEpoch,
        deadline: Instant,
    ) -> Result<Option<RollbackMarker>, DcsError> {
        let ckey = self.key("confirm_epoch");
        let rkey = self.key("rollback");
        let mut kv = self.client.kv_client();
        let resp = self.call(rt, deadline, "read rollback", kv.get(rkey.clone(), None))?;
        let (marker, mod_rev) = match resp.kvs().first() {
            Some(item) => (
                Some(keys::parse_rollback(&rkey, item.value())),
                item.mod_revision(),
            ),
            None => (None, 0),
        };
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                rkey.clone(),
                CompareOp::Equal,
                mod_rev,
            )])
            .and_then(vec![
                TxnOp::put(ckey, keys::encode_confirm_epoch(c), None),
                TxnOp::delete(rkey.clone(), None),
            ]);
        let resp = self.write(
            rt,
            deadline,
            "put confirm_epoch and delete rollback",
            kv.txn(txn),
        )?;
        if !resp.succeeded() {
            return Err(DcsError(format!(
                "{rkey} changed while confirming (another node wrote a new marker): nothing \
                 written; check again and re-run confirm-epoch"
            )));
        }
        Ok(marker)
    }

    /// `PATCH`/`PUT /config` (the API's intents): one linearizable range over the
    /// scope, keeping the `config` key (value and mod revision) and every member
    /// key's raw value, for the check against each member's published timing before
    /// a compare-and-set.
    pub fn read_config_and_members(
        &mut self,
        rt: &Runtime,
        deadline: Instant,
    ) -> Result<ConfigAndMembers, DcsError> {
        let prefix = self.prefix.clone();
        let mut kv = self.client.kv_client();
        let resp = self.call(
            rt,
            deadline,
            "read config and members",
            kv.get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )?;
        let mut out = ConfigAndMembers::default();
        for item in resp.kvs() {
            let Some(rel) = item.key().strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            let value = String::from_utf8_lossy(item.value()).into_owned();
            if rel == b"config" {
                out.config = Some((value, item.mod_revision()));
            } else if let Some(name) = rel.strip_prefix(b"members/") {
                out.members
                    .push((String::from_utf8_lossy(name).into_owned(), value));
            }
        }
        Ok(out)
    }

    /// Store `config` with a compare-and-set: only if its mod revision is still
    /// `expect` (`None`: only if the key does not exist). `Ok(false)`: it changed
    /// since it was read (Patroni answers 409).
    pub fn put_config_cas(
        &mut self,
        rt: &Runtime,
        value: &str,
        expect: Option<i64>,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let key = self.key("config");
        let cmp = match expect {
            Some(rev) => Compare::mod_revision(key.clone(), CompareOp::Equal, rev),
            None => Compare::version(key.clone(), CompareOp::Equal, 0),
        };
        let txn = Txn::new()
            .when(vec![cmp])
            .and_then(vec![TxnOp::put(key, value, None)]);
        let mut kv = self.client.kv_client();
        self.write(rt, deadline, "write config (compare-and-set)", kv.txn(txn))
            .map(|r| r.succeeded())
    }

    /// Create `config` only if absent (bootstrap seeding). `Ok(true)` = created.
    /// Create `config` if absent. `leader`: the writer leads at this epoch, and the
    /// write is guarded by it too (DESIGN §1 step 5); `None` only while
    /// bootstrapping, before any leader key exists. `Ok(false)`: not written (the key
    /// exists, or the guard refused).
    pub fn put_config_if_absent(
        &mut self,
        rt: &Runtime,
        json: &str,
        leader: Option<(&str, Epoch)>,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let Some((me, epoch)) = leader else {
            return self.create_if_absent(rt, "config", json, deadline);
        };
        let key = self.key("config");
        let mut when = self.guard(me, epoch);
        when.push(Compare::version(key.clone(), CompareOp::Equal, 0));
        let txn = Txn::new()
            .when(when)
            .and_then(vec![TxnOp::put(key, json, None)]);
        let mut kv = self.client.kv_client();
        self.write(rt, deadline, "create config (guarded)", kv.txn(txn))
            .map(|r| r.succeeded())
    }

    fn create_if_absent(
        &mut self,
        rt: &Runtime,
        suffix: &str,
        value: &str,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let key = self.key(suffix);
        let txn = Txn::new()
            .when(vec![Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(key, value, None)]);
        let mut kv = self.client.kv_client();
        self.write(rt, deadline, &format!("create {suffix}"), kv.txn(txn))
            .map(|r| r.succeeded())
    }

    /// Grant a lease of `ttl` seconds: `(lease, granted TTL)`. etcd raises a TTL
    /// below its minimum, so the granted one is what counts.
    pub fn grant(
        &mut self,
        rt: &Runtime,
        ttl: u32,
        deadline: Instant,
    ) -> Result<(LeaseId, u32), DcsError> {
        let mut lc = self.client.lease_client();
        let resp = self.write(
            rt,
            deadline,
            "grant a lease",
            lc.grant(i64::from(ttl), None),
        )?;
        if !resp.error().is_empty() {
            return Err(DcsError(format!(
                "grant a lease: etcd said {}",
                resp.error()
            )));
        }
        let granted = u32::try_from(resp.ttl())
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| DcsError(format!("grant a lease: etcd granted TTL {}", resp.ttl())))?;
        Ok((resp.id(), granted))
    }

    /// One keepalive (on the lease's kept stream, or a fresh one: `keepalive`);
    /// `Ok(ttl)` (TTL <= 0 → Err "lease not found").
    pub fn keep_alive_once(
        &mut self,
        rt: &Runtime,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<i64, DcsError> {
        match self.keepalive(rt, lease, deadline) {
            Ok(ttl) => Ok(ttl),
            Err(KeepAliveError::Gone) => Err(DcsError(format!(
                "keepalive of lease {lease:x}: lease not found"
            ))),
            Err(KeepAliveError::Failed(e)) => Err(e),
        }
    }

    /// Revoke `lease`; a lease etcd no longer knows counts as revoked.
    pub fn revoke(
        &mut self,
        rt: &Runtime,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        // No keepalive for it again: its kept stream goes now.
        self.keepalives.retain(|k| k.lease != lease);
        self.verify(rt, deadline)?;
        let mut lc = self.client.lease_client();
        let what = format!("revoke lease {lease:x}");
        let d = clock::now().until(deadline);
        if d.is_zero() {
            return Err(DcsError(format!("{what}: deadline already passed")));
        }
        match rt.block_on(async { tokio::time::timeout(d, lc.revoke(lease)).await }) {
            // Revoked in another cluster is not revoked in ours.
            Ok(Ok(r)) => self.check(&what, &r),
            // Unchecked (no header), and harmless: no decision reads a revoke's
            // outcome; the lease expires by its TTL wherever it lives.
            Ok(Err(e)) if is_lease_not_found(&e) => Ok(()),
            Ok(Err(e)) => Err(DcsError(format!("{what}: {e}"))),
            Err(_) => Err(DcsError(format!(
                "{what}: no answer within {:.3} s",
                d.as_secs_f64()
            ))),
        }
    }

    /// `LeaseTimeToLive(lease, keys=true)`. Not found / TTL -1 → `ttl: None`.
    pub fn lease_ttl(
        &mut self,
        rt: &Runtime,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<LeasePoll, DcsError> {
        let sent_at = clock::now();
        let mut lc = self.client.lease_client();
        let what = format!("time-to-live of lease {lease:x}");
        let d = sent_at.until(deadline);
        if d.is_zero() {
            return Err(DcsError(format!("{what}: deadline already passed")));
        }
        let fut = lc.time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()));
        match rt.block_on(async { tokio::time::timeout(d, fut).await }) {
            Ok(Ok(r)) => self.check(&what, &r).map(|()| LeasePoll {
                lease,
                sent_at,
                // etcd answers -1 for a lease it does not know; 0 or less while
                // an expired lease's revoke is still in flight (DESIGN §1 step 4).
                ttl: (r.ttl() != -1).then_some(r.ttl()),
                // Kept, not dropped: after an early expiry a candidate without a
                // watchdog figure waits the old lease's own TTL (issue 8 finding 2).
                granted_ttl: (r.ttl() != -1 && r.granted_ttl() > 0).then_some(r.granted_ttl()),
                has_keys: !r.keys().is_empty(),
            }),
            // etcd answers a lease it does not know with TTL -1 and a header
            // (above). An error status saying so carries no header: which cluster
            // it speaks for cannot be told, and "the leader's lease is gone" is
            // what lets a candidate act (S3), so it is no answer (review of the
            // pin, M1).
            Ok(Err(e)) => Err(DcsError(format!("{what}: {e}"))),
            Err(_) => Err(DcsError(format!(
                "{what}: no answer within {:.3} s",
                d.as_secs_f64()
            ))),
        }
    }

    /// put `members/<me>` = json bound to `lease`.
    pub fn put_member(
        &mut self,
        rt: &Runtime,
        me: &str,
        json: &str,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        let key = self.key(&format!("members/{me}"));
        let mut kv = self.client.kv_client();
        self.write(
            rt,
            deadline,
            &format!("put members/{me}"),
            kv.put(key, json, Some(PutOptions::new().with_lease(lease))),
        )
        .map(|_| ())
    }

    /// Is `members/<me>` currently held by a lease other than `my_lease` that is
    /// still alive (TTL > 0)? The agent refuses to start when it is (DESIGN §3a).
    pub fn member_held_elsewhere(
        &mut self,
        rt: &Runtime,
        me: &str,
        my_lease: Option<LeaseId>,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let key = self.key(&format!("members/{me}"));
        let mut kv = self.client.kv_client();
        let resp = self.call(
            rt,
            deadline,
            &format!("read members/{me}"),
            kv.get(key, None),
        )?;
        let Some(item) = resp.kvs().first() else {
            return Ok(false);
        };
        let lease = item.lease();
        if lease == 0 || Some(lease) == my_lease {
            return Ok(false);
        }
        let poll = self.lease_ttl(rt, lease, deadline)?;
        Ok(poll.ttl.is_some_and(|t| t > 0))
    }

    /// The fence guard of DESIGN §1 step 5.
    fn guard(&self, me: &str, epoch: Epoch) -> Vec<Compare> {
        let leader = self.key("leader");
        vec![
            Compare::create_revision(leader.clone(), CompareOp::Equal, epoch),
            Compare::value(leader, CompareOp::Equal, me),
        ]
    }

    /// DESIGN §1 step 5: txn `If(create_revision(leader)==epoch && value(leader)==me)
    /// Then(op)`. `Ok(false)` = guard refused.
    fn guarded(
        &mut self,
        rt: &Runtime,
        op: TxnOp,
        what: &str,
        me: &str,
        epoch: Epoch,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let txn = Txn::new().when(self.guard(me, epoch)).and_then(vec![op]);
        let mut kv = self.client.kv_client();
        self.write(rt, deadline, what, kv.txn(txn))
            .map(|r| r.succeeded())
    }

    /// The guarded put of `key_suffix`. `Ok(false)` = guard refused.
    pub fn guarded_put(
        &mut self,
        rt: &Runtime,
        key_suffix: &str,
        value: &str,
        me: &str,
        epoch: Epoch,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let op = TxnOp::put(self.key(key_suffix), value, None);
        let what = format!("guarded put of {key_suffix}");
        self.guarded(rt, op, &what, me, epoch, deadline)
    }

    /// The guarded delete of `key_suffix`. `Ok(false)` = guard refused.
    pub fn guarded_delete(
        &mut self,
        rt: &Runtime,
        key_suffix: &str,
        me: &str,
        epoch: Epoch,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let op = TxnOp::delete(self.key(key_suffix), None);
        let what = format!("guarded delete of {key_suffix}");
        self.guarded(rt, op, &what, me, epoch, deadline)
    }

    /// Guarded read-modify-write of `history`: append `entry` (Patroni's list form),
    /// guarded by the epoch and by history's mod_revision so a concurrent writer
    /// cannot lose entries. Retries only when `history` changed underneath while our
    /// guard still held. `Ok(false)` = the epoch guard refused.
    pub fn append_history(
        &mut self,
        rt: &Runtime,
        entry: &HistoryEntry,
        me: &str,
        epoch: Epoch,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let hkey = self.key("history");
        let lkey = self.key("leader");
        for _ in 0..HISTORY_ATTEMPTS {
            let mut kv = self.client.kv_client();
            let resp = self.call(rt, deadline, "read history", kv.get(hkey.clone(), None))?;
            let (old, mod_rev) = match resp.kvs().first() {
                Some(item) => (Some(item.value().to_vec()), item.mod_revision()),
                // A missing key compares as mod_revision 0.
                None => (None, 0),
            };
            let (value, problem) = keys::append_history_value(old.as_deref(), entry);
            if let Some(p) = problem {
                self.warn_once("history", &p);
            }
            let mut when = self.guard(me, epoch);
            when.push(Compare::mod_revision(
                hkey.clone(),
                CompareOp::Equal,
                mod_rev,
            ));
            let txn = Txn::new()
                .when(when)
                .and_then(vec![TxnOp::put(hkey.clone(), value, None)])
                .or_else(vec![TxnOp::get(lkey.clone(), None)]);
            let resp = self.write(rt, deadline, "append to history", kv.txn(txn))?;
            if resp.succeeded() {
                return Ok(true);
            }
            let leader = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(leader_key),
                _ => None,
            });
            let still_ours = leader.is_some_and(|k| k.name == me && k.epoch == epoch);
            if !still_ours {
                return Ok(false);
            }
        }
        Err(DcsError(format!(
            "append to history: history kept changing underneath ({HISTORY_ATTEMPTS} attempts)"
        )))
    }

    /// Guarded delete of `leader`, then revoke `lease` (whatever the delete did: we
    /// never resume on a released lease). `Ok(true)` = we deleted it.
    pub fn release(
        &mut self,
        rt: &Runtime,
        me: &str,
        epoch: Epoch,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let deleted = self.guarded_delete(rt, "leader", me, epoch, deadline);
        self.revoke_best_effort(rt, lease, deadline);
        deleted
    }

    /// (Re)open the watch from `start_revision` (cluster read revision + 1): on the
    /// whole scope, of which `leader` and the member keys are reported (a vacancy's
    /// candidates wake on their rivals' fresh positions, issue 13 item 4), every
    /// other key dropped here. Returns once etcd confirmed the watch was created.
    pub fn watch_leader(
        &mut self,
        rt: &Runtime,
        start_revision: i64,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.watch = None;
        self.pending.clear();
        self.keeper.watch_closed();
        let key = self.key("");
        let mut wc = self.client.watch_client();
        let opts = WatchOptions::new()
            .with_start_revision(start_revision)
            .with_prefix();
        let fut = async move {
            let mut stream = wc.watch(key, Some(opts)).await?;
            // etcd answers the create request first; events follow.
            match stream.message().await? {
                Some(r) if r.created() && !r.canceled() => Ok(Ok((stream, r))),
                Some(r) => Ok(Err(format!(
                    "watch on leader not created: canceled={} compact_revision={} reason {:?}",
                    r.canceled(),
                    r.compact_revision(),
                    r.cancel_reason()
                ))),
                None => Ok(Err(
                    "watch stream ended before the watch was created".to_string()
                )),
            }
        };
        match bounded(rt, deadline, "open the watch on leader", fut)? {
            Ok((stream, created)) => {
                self.check("open the watch on leader", &created)?;
                self.watch = Some(stream);
                // INVARIANT: the kept view is complete only if this watch starts
                // right after the read it comes from (view.rs checks the revisions).
                self.keeper.watch_opened(start_revision);
                self.watch_start = start_revision;
                Ok(())
            }
            Err(why) => Err(DcsError(why)),
        }
    }

    /// The watch's events that have arrived, without waiting for any (issue 13 item
    /// 5): the kept view is brought up to date with them and the events are handed
    /// out for the agent's own handling. A broken watch yields `Broken`, as in the
    /// wait. Never blocks: the stream is polled once after the runtime has read
    /// what the sockets hold, and whatever has not arrived is left for the wait.
    pub fn poll_watch(&mut self, rt: &Runtime) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        if self.watch.is_none() && self.pending.is_empty() {
            return out;
        }
        rt.block_on(async {
            // Let the connection tasks move what the sockets hold into the stream:
            // a yield polls the I/O driver, the next runs the tasks it woke. Best
            // effort: nothing depends on it but how fresh the kept view is.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            loop {
                // `next_watch_event` is cancel-safe: a branch not taken loses nothing.
                let ev = tokio::select! {
                    biased;
                    ev = self.next_watch_event() => Some(ev),
                    () = std::future::ready(()) => None,
                };
                match ev {
                    Some(ev) => {
                        let broken = matches!(ev, WatchEvent::Broken(_));
                        out.push(ev);
                        if broken {
                            break;
                        }
                    }
                    None => break,
                }
            }
        });
        out
    }

    pub fn watch_is_open(&self) -> bool {
        self.watch.is_some()
    }

    /// The revision from which the open watch has reported every change without a
    /// gap (its start revision; a broken watch is closed, and a reopened one starts
    /// afresh): `Observation::watch_from`. `None`: no watch open.
    pub fn watch_from(&self) -> Option<i64> {
        self.watch.as_ref().map(|_| self.watch_start)
    }

    /// Cancel-safe: waits for the next event on the open watch; pends forever if none
    /// is open (so the caller's `tokio::select!` with a timer still works). A
    /// cancelled watch (compaction: `compact_revision` set; no leader) or a broken
    /// stream yields `Broken` and marks the watch closed.
    pub async fn next_watch_event(&mut self) -> WatchEvent {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return ev;
            }
            let Some(stream) = self.watch.as_mut() else {
                return std::future::pending().await;
            };
            // Cancel-safety: `message()` keeps a partly received message inside the
            // stream, and nothing below awaits, so a dropped call loses nothing.
            let msg = stream.message().await;
            match msg {
                Err(e) => {
                    self.watch = None;
                    self.keeper.watch_closed();
                    return WatchEvent::Broken(format!("watch on leader failed: {e}"));
                }
                Ok(None) => {
                    self.watch = None;
                    self.keeper.watch_closed();
                    return WatchEvent::Broken("watch on leader: stream ended".into());
                }
                Ok(Some(r)) => {
                    if let Err(why) = self.check("watch on leader", &r) {
                        self.watch = None;
                        self.keeper.watch_closed();
                        return WatchEvent::Broken(why.0);
                    }
                    let prefix = self.prefix.as_bytes();
                    // The whole response goes into the kept view at once, before
                    // any of its events is handed out (view.rs).
                    let changes = r.events().iter().filter_map(|ev| {
                        let kv = ev.kv()?;
                        let key = kv.key().strip_prefix(prefix)?;
                        // See below: version 0 is a DELETE's tombstone.
                        Some(if kv.version() != 0 {
                            view::Change::Put(view::Kv {
                                key,
                                value: kv.value(),
                                create_revision: kv.create_revision(),
                                mod_revision: kv.mod_revision(),
                                lease: kv.lease(),
                            })
                        } else {
                            view::Change::Delete {
                                key,
                                revision: kv.mod_revision(),
                            }
                        })
                    });
                    let header = r.header().map(|h| h.revision()).unwrap_or(0);
                    if !r.canceled() {
                        self.keeper.apply(header, changes);
                    }
                    let prefix = self.prefix.as_bytes();
                    for ev in r.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let Some(rel) = kv.key().strip_prefix(prefix) else {
                            continue;
                        };
                        // A DELETE event's kv is a tombstone with version 0; a PUT
                        // has version >= 1. Read it that way rather than through
                        // `event_type()`, which panics on a type it does not know.
                        let put = kv.version() != 0;
                        let we = match rel {
                            b"leader" if put => WatchEvent::LeaderPut {
                                name: String::from_utf8_lossy(kv.value()).into_owned(),
                                revision: kv.mod_revision(),
                                epoch: kv.create_revision(),
                                lease: kv.lease(),
                            },
                            b"leader" => WatchEvent::LeaderDeleted {
                                revision: kv.mod_revision(),
                            },
                            _ => match rel.strip_prefix(b"members/") {
                                Some(name) if put => WatchEvent::MemberPut {
                                    name: String::from_utf8_lossy(name).into_owned(),
                                    revision: kv.mod_revision(),
                                },
                                _ => continue,
                            },
                        };
                        self.pending.push_back(we);
                    }
                    if r.canceled() {
                        self.watch = None;
                        self.keeper.watch_closed();
                        self.pending.push_back(WatchEvent::Broken(format!(
                            "watch on leader canceled by etcd (compact_revision {}, reason {:?})",
                            r.compact_revision(),
                            r.cancel_reason()
                        )));
                    }
                }
            }
        }
    }
}
