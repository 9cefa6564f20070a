//! The API's sockets: a listener and a fixed table of non-blocking connections,
//! driven by readiness on the loop's own thread (Firecracker's event-manager
//! subscribers are the model).
//!
//! Owns: accepting, per-connection buffers (fixed, allocated once at start-up),
//! per-connection deadlines, and moving bytes in and out without ever blocking.
//!
//! Must never: block (every read and write is `try_*`: one that would block waits
//! for the next readiness), hold a connection past its deadline, keep more than
//! [`MAX_CONNS`] connections open (file descriptors stay in reserve for the fence,
//! which reads `/proc`), or decide when it runs: the loop calls [`ApiServer::service`]
//! only when no deadline is due (DESIGN §5 "Order of service", issue 8 finding 1), and
//! one call does a bounded amount of work: at most [`ACCEPTS_PER_SERVICE`] accepts
//! and one read and one write per open connection, and with TLS (issue 12, the
//! [`super::tls`] module) at most [`HANDSHAKE_STEPS_PER_SERVICE`] handshake steps
//! (a step that processes handshake records: the server's signature, a client
//! certificate's verification), so a flood of TLS clients adds at most that many
//! signatures to a pass (docs/hardening.md has the measured cost).
//!
//! Hand-written rather than an HTTP server crate: a server crate owns its own task
//! scheduling and buffers; this one must stay on the loop's terms (fixed buffers,
//! no task, no allocation per request beyond the response text the pure `api`
//! functions render into a reused buffer). Parsing and answers stay in `api`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;

use super::auth::{self, ClientCert};
use super::mgmt::{self, HeadDecision, Intent, Reply, Response};
use super::tls::{Got, Tls};
use super::{ApiStatus, MAX_HEAD, Parsed, parse_request, respond, respond_error};
use crate::config::{ApiAuth, ReadAuth, VerifyClient};
use crate::core::time::Instant;

/// Connections open at once; more are accepted and closed at once (no answer).
pub const MAX_CONNS: usize = 32;
/// Accepts per service call: a connection flood cannot make one call long.
pub const ACCEPTS_PER_SERVICE: usize = 16;
/// How long one connection may take from accept to the last byte written: a slow or
/// idle client loses its connection, never the loop's time.
pub const CONN_DEADLINE: Duration = Duration::from_secs(2);
/// TLS handshake steps per service call (each may cost a signature or a
/// certificate chain's verification): more wait for the next call, their
/// readiness kept, while the loop's deadlines keep their precedence.
pub const HANDSHAKE_STEPS_PER_SERVICE: usize = 4;
/// The answer to a plain HTTP request on the TLS port (nginx's words).
pub const PLAIN_HTTP_ON_TLS: &str = "The plain HTTP request was sent to HTTPS port: this API \
     serves https:// only (see [api] certfile)";

enum Phase {
    /// Reading the request head (and a write's body) into `inbuf[..len]`.
    Reading,
    /// The request became an [`Intent`] the loop carries out; the connection waits
    /// for [`ApiServer::complete`] (or its deadline: a 503).
    Waiting,
    /// Writing `out[written..]`.
    Writing,
    /// The answer is out and our side shut down: reading what the client still
    /// sends, discarded, until it closes (or the deadline). Closing with unread
    /// input would send a reset, and a reset can destroy the answer in flight
    /// (an oversized or garbled request is exactly that case).
    Draining,
}

struct Conn {
    stream: TcpStream,
    phase: Phase,
    len: usize,
    written: usize,
    deadline: Instant,
    /// Tells this connection from a later one in the same slot (a [`Ticket`]).
    generation: u64,
    /// `100 Continue` was sent (or is not needed any more).
    continued: bool,
    /// TLS state, when the API serves https:// (`None`: plain HTTP, or a plain
    /// request on the TLS port being answered with a plain 400).
    tls: Option<Box<Tls>>,
}

impl Conn {
    /// Whether a verified client certificate came with this connection.
    fn client_cert(&self, verify: VerifyClient) -> ClientCert {
        match (verify, &self.tls) {
            (VerifyClient::None, _) | (_, None) => ClientCert::NotAsked,
            (_, Some(t)) if t.client_cert_verified() => ClientCert::Verified,
            _ => ClientCert::Missing,
        }
    }

    /// Send `bytes` (plain or through TLS); false when they did not all go out.
    fn send_small(&mut self, bytes: &[u8]) -> bool {
        match self.tls.as_mut() {
            None => matches!(self.stream.try_write(bytes), Ok(n) if n == bytes.len()),
            Some(t) => matches!(t.write(&self.stream, bytes), Ok(n) if n == bytes.len()),
        }
    }
}

/// Names a parked connection for [`ApiServer::complete`]; stale once the
/// connection is gone (its answer is then dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    slot: usize,
    generation: u64,
}

/// One slot of the table: its buffers live as long as the server, whether a
/// connection uses them or not.
struct Slot {
    conn: Option<Conn>,
    inbuf: Box<[u8]>,
    out: Vec<u8>,
    /// An intent handed over by this slot's request, not yet taken by the loop.
    intent: Option<Intent>,
}

/// What one service call did (for the log and the tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    pub accepted: usize,
    /// Accepted over the cap and closed at once.
    pub refused: usize,
    pub answered: usize,
    /// Closed at their deadline without a complete exchange.
    pub expired: usize,
    /// Requests handed to the loop as intents (parked until answered).
    pub parked: usize,
    /// TLS connections ended by a TLS error (a failed handshake: no client
    /// certificate under `verify_client = "required"`, an unknown CA, ...).
    pub tls_failed: usize,
    /// Plain HTTP requests on the TLS port (answered 400 in plain text).
    pub plain_http: usize,
    /// TLS handshake steps run (at most [`HANDSHAKE_STEPS_PER_SERVICE`] a call).
    pub handshake_steps: usize,
}

impl std::ops::AddAssign for Served {
    /// Totals over several service calls (the tests' loops).
    fn add_assign(&mut self, d: Served) {
        self.accepted += d.accepted;
        self.refused += d.refused;
        self.answered += d.answered;
        self.expired += d.expired;
        self.parked += d.parked;
        self.tls_failed += d.tls_failed;
        self.plain_http += d.plain_http;
        self.handshake_steps += d.handshake_steps;
    }
}

pub struct ApiServer {
    /// A std listener (non-blocking) under `AsyncFd`: readiness can be polled
    /// without taking a connection, and accepting is a plain `accept(2)`.
    listener: AsyncFd<std::net::TcpListener>,
    slots: Vec<Slot>,
    /// Total refused over the cap since start (reported now and then).
    pub refused_total: u64,
    /// After an accept that failed for want of a resource (EMFILE, ENFILE, ENOMEM):
    /// readiness was cleared so the loop does not spin on it; accepting is tried
    /// again at this instant (the loop wakes for it through `next_deadline`).
    accept_retry_at: Option<Instant>,
    /// `[api] username`/`password`: the write endpoints' credentials.
    auth: Option<ApiAuth>,
    /// `[api] certfile`...: new connections speak TLS with this configuration.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// `[api] verify_client`.
    verify_client: VerifyClient,
    /// `[api] read_auth`.
    read_auth: ReadAuth,
    /// The next connection's generation.
    generation: u64,
}

/// How long a parked connection whose deadline passed may take to receive its 503.
const LATE_ANSWER: Duration = Duration::from_millis(500);

/// How long to leave the listener alone after an accept failed for want of a
/// resource: the loop must not spin at full CPU on a readiness it cannot consume.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

impl ApiServer {
    /// Takes a bound listener; must be called inside the loop's runtime context.
    pub fn new(listener: std::net::TcpListener) -> std::io::Result<ApiServer> {
        listener.set_nonblocking(true)?;
        // SAFETY: the AsyncFd takes ownership of the listener, so its descriptor stays
        // open and names the same socket until the AsyncFd is dropped, and
        // `TcpListener::as_raw_fd` always returns that one descriptor.
        let listener =
            unsafe { AsyncFd::register_with_interest(listener, tokio::io::Interest::READABLE) }
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        let slots = (0..MAX_CONNS)
            .map(|_| Slot {
                conn: None,
                inbuf: vec![0u8; MAX_HEAD + mgmt::MAX_BODY].into_boxed_slice(),
                // Sized for the largest answer, a `/metrics` scrape: it never grows.
                out: Vec::with_capacity(super::metrics::SCRAPE_CAPACITY),
                intent: None,
            })
            .collect();
        Ok(ApiServer {
            listener,
            slots,
            refused_total: 0,
            accept_retry_at: None,
            auth: None,
            tls: None,
            verify_client: VerifyClient::None,
            read_auth: ReadAuth::None,
            generation: 0,
        })
    }

    /// The write endpoints' credentials (at start-up and on reload).
    pub fn set_auth(&mut self, auth: Option<ApiAuth>) {
        self.auth = auth;
    }

    /// TLS for connections accepted from now on (at start-up and on reload:
    /// open connections finish with the configuration they started with), the
    /// client-certificate rule and which reads need access.
    pub fn set_tls(
        &mut self,
        tls: Option<Arc<rustls::ServerConfig>>,
        verify_client: VerifyClient,
        read_auth: ReadAuth,
    ) {
        self.verify_client = if tls.is_some() {
            verify_client
        } else {
            VerifyClient::None
        };
        self.tls = tls;
        self.read_auth = read_auth;
    }

    /// The next intent handed over and not taken yet (in slot order). The loop
    /// carries it out and answers it with [`ApiServer::complete`].
    pub fn take_intent(&mut self) -> Option<(Ticket, Intent)> {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(c) = slot.conn.as_ref()
                && let Some(intent) = slot.intent.take()
            {
                return Some((
                    Ticket {
                        slot: i,
                        generation: c.generation,
                    },
                    intent,
                ));
            }
        }
        None
    }

    /// Whether an intent waits to be taken.
    pub fn has_intents(&self) -> bool {
        self.slots.iter().any(|s| s.intent.is_some())
    }

    /// Answer a parked connection. Returns false when it is gone (closed by the
    /// client or at its deadline): the answer is dropped. The bytes go out at the
    /// next `service` (the connection is then ready to write).
    pub fn complete(&mut self, ticket: Ticket, r: &Response) -> bool {
        let Some(slot) = self.slots.get_mut(ticket.slot) else {
            return false;
        };
        match slot.conn.as_mut() {
            Some(c) if c.generation == ticket.generation && matches!(c.phase, Phase::Waiting) => {
                slot.out.clear();
                r.render(&mut slot.out);
                c.phase = Phase::Writing;
                c.written = 0;
                true
            }
            _ => false,
        }
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.slots.iter().filter(|s| s.conn.is_some()).count()
    }

    /// A future that is ready when the listener or any open connection can make
    /// progress (or a connection's deadline needs enforcing is left to `service`,
    /// which the loop calls at least once per iteration). It never consumes
    /// anything: `service` does the work.
    pub fn ready(&self) -> Ready<'_> {
        Ready { server: self }
    }

    /// Make progress on everything that can, without blocking: accept (bounded),
    /// read what has arrived, answer complete requests, write what fits, close what
    /// is done or past its deadline. `status` must be current (the caller refreshes
    /// the lease-derived fields at `now`). Must be called inside the loop's runtime
    /// context (accepted sockets are registered with its poller).
    pub fn service(&mut self, now: Instant, status: &ApiStatus) -> Served {
        let mut served = Served::default();
        let mut handshake_steps = HANDSHAKE_STEPS_PER_SERVICE;
        for _ in 0..ACCEPTS_PER_SERVICE {
            let Some(stream) = self.try_accept(now) else {
                break;
            };
            let tls = match self.tls.as_ref().map(|c| Tls::new(Arc::clone(c))) {
                None => None,
                Some(Ok(t)) => Some(Box::new(t)),
                Some(Err(e)) => {
                    log::debug!("api: cannot start TLS on a connection: {e}");
                    continue;
                }
            };
            match self.slots.iter_mut().find(|s| s.conn.is_none()) {
                Some(slot) => {
                    self.generation += 1;
                    slot.intent = None;
                    slot.conn = Some(Conn {
                        stream,
                        phase: Phase::Reading,
                        len: 0,
                        written: 0,
                        deadline: now.add(CONN_DEADLINE),
                        generation: self.generation,
                        continued: false,
                        tls,
                    });
                    served.accepted += 1;
                }
                None => {
                    // Over the cap: close at once (dropping the stream), so the
                    // backlog drains and no descriptor is held for it.
                    drop(stream);
                    served.refused += 1;
                    self.refused_total += 1;
                }
            }
        }
        for slot in &mut self.slots {
            let Some(conn) = slot.conn.as_mut() else {
                continue;
            };
            if now >= conn.deadline {
                if let Phase::Waiting = conn.phase {
                    // The loop did not answer in time: say so rather than drop it.
                    slot.intent = None;
                    slot.out.clear();
                    Response::text(
                        503,
                        "the agent did not carry the request out in time (its loop gives \
                         renewals and the fence precedence); retry",
                    )
                    .render(&mut slot.out);
                    conn.phase = Phase::Writing;
                    conn.written = 0;
                    conn.deadline = now.add(LATE_ANSWER);
                } else {
                    slot.conn = None;
                    served.expired += 1;
                    continue;
                }
            }
            if let Phase::Waiting = conn.phase {
                continue;
            }
            if let Phase::Draining = conn.phase {
                match conn.stream.try_read(&mut slot.inbuf[..]) {
                    Ok(0) => slot.conn = None,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => slot.conn = None,
                }
                continue;
            }
            if let Phase::Reading = conn.phase {
                // A full buffer is answered below (431), never read into.
                if conn.len < slot.inbuf.len() {
                    let got = match conn.tls.as_mut() {
                        Some(t) => t.read(
                            &conn.stream,
                            &mut slot.inbuf[conn.len..],
                            &mut handshake_steps,
                        ),
                        None => match conn.stream.try_read(&mut slot.inbuf[conn.len..]) {
                            Ok(0) => Got::Closed,
                            Ok(n) => Got::Data(n),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Got::Nothing,
                            Err(e) => Got::Failed(e.to_string()),
                        },
                    };
                    match got {
                        Got::Data(n) => conn.len += n,
                        Got::Nothing | Got::Throttled => {}
                        // The client closed before a complete head.
                        Got::Closed => {
                            slot.conn = None;
                            continue;
                        }
                        Got::Failed(e) => {
                            if conn.tls.is_some() {
                                log::debug!("api: TLS connection ended: {e}");
                                served.tls_failed += 1;
                            }
                            slot.conn = None;
                            continue;
                        }
                        Got::PlainHttp => {
                            // Answered in plain text, which the client can read;
                            // the request itself is drained unread.
                            log::debug!("api: a plain HTTP request on the TLS port, answered 400");
                            served.plain_http += 1;
                            conn.tls = None;
                            slot.out.clear();
                            Response::text(400, PLAIN_HTTP_ON_TLS).render(&mut slot.out);
                            conn.phase = Phase::Writing;
                            conn.written = 0;
                            served.answered += 1;
                        }
                    }
                }
            }
            if let Phase::Reading = conn.phase {
                slot.out.clear();
                match parse_request(&slot.inbuf[..conn.len]) {
                    Parsed::Incomplete if conn.len < MAX_HEAD => continue,
                    Parsed::Incomplete => respond_error(
                        431,
                        &format!("request head larger than {MAX_HEAD} bytes"),
                        &mut slot.out,
                    ),
                    Parsed::Request {
                        method,
                        path,
                        query,
                        head,
                    } if method.is_write() => {
                        let cert = conn.client_cert(self.verify_client);
                        let decision = match auth::check_cert(cert) {
                            Err(refusal) => {
                                refused(&refusal).render(&mut slot.out);
                                HeadDecision::Answered
                            }
                            Ok(()) => mgmt::on_head(
                                &method,
                                &path,
                                &head,
                                self.auth.as_ref(),
                                &mut slot.out,
                            ),
                        };
                        match decision {
                            HeadDecision::Answered => {}
                            HeadDecision::ReadBody { route, len } => {
                                let end = head.len + len;
                                if conn.len < end {
                                    if head.expect_continue && !conn.continued {
                                        // Access and framing passed: let the client send
                                        // the body now rather than after its own timeout.
                                        // A fresh socket takes these 25 bytes whole; a
                                        // short write would garble the answer: give up.
                                        conn.continued = true;
                                        let c = b"HTTP/1.1 100 Continue\r\n\r\n";
                                        if !conn.send_small(c) {
                                            slot.conn = None;
                                        }
                                    }
                                    continue;
                                }
                                let body = &slot.inbuf[head.len..end];
                                match mgmt::on_body(route, &path, &query, body, status) {
                                    Reply::Now(r) => r.render(&mut slot.out),
                                    Reply::Intent { intent, wait } => {
                                        slot.intent = Some(intent);
                                        conn.phase = Phase::Waiting;
                                        let until = now.add(wait);
                                        if until > conn.deadline {
                                            conn.deadline = until;
                                        }
                                        served.parked += 1;
                                        continue;
                                    }
                                }
                            }
                        }
                    }
                    Parsed::Request {
                        method,
                        path,
                        query,
                        head,
                    } => {
                        let access = if auth::read_needs_access(self.read_auth, &path) {
                            auth::check_cert(conn.client_cert(self.verify_client)).and_then(|()| {
                                auth::check(head.authorization.as_deref(), self.auth.as_ref())
                            })
                        } else {
                            Ok(())
                        };
                        match access {
                            Ok(()) => respond(&method, &path, &query, status, &mut slot.out),
                            Err(refusal) => refused(&refusal).render(&mut slot.out),
                        }
                    }
                    Parsed::Bad(code, why) => respond_error(code, &why, &mut slot.out),
                }
                conn.phase = Phase::Writing;
                conn.written = 0;
                served.answered += 1;
            }
            let wrote = match conn.tls.as_mut() {
                None => conn.stream.try_write(&slot.out[conn.written..]),
                Some(t) => t.write(&conn.stream, &slot.out[conn.written..]),
            };
            match wrote {
                Ok(n) => {
                    conn.written += n;
                    if conn.written >= slot.out.len()
                        && conn.tls.as_mut().is_none_or(|t| {
                            // Everything taken by rustls must reach the socket first.
                            t.close(&conn.stream);
                            !t.wants_write()
                        })
                    {
                        // `Connection: close`: our side is done; the client's close
                        // (or the deadline) ends the connection.
                        use std::os::fd::AsRawFd;
                        let _ = nix::sys::socket::shutdown(
                            conn.stream.as_raw_fd(),
                            nix::sys::socket::Shutdown::Write,
                        );
                        conn.phase = Phase::Draining;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => slot.conn = None,
            }
        }
        served.handshake_steps = HANDSHAKE_STEPS_PER_SERVICE - handshake_steps;
        served
    }

    /// One non-blocking accept; `None` when nothing is waiting (readiness is then
    /// cleared, so the wait sleeps until the next connection) or accept failed
    /// (EMFILE and the like: tried again at the next service).
    fn try_accept(&mut self, now: Instant) -> Option<TcpStream> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let accepted = match self.listener.poll_read_ready(&mut cx) {
            Poll::Ready(Ok(mut guard)) => match guard.try_io(|fd| fd.get_ref().accept()) {
                Ok(r) => {
                    if r.is_err() {
                        // Not WouldBlock (`try_io` keeps readiness then): clear it by
                        // hand, or the wait would return at once for ever.
                        guard.clear_ready();
                    }
                    r
                }
                Err(_would_block) => return None,
            },
            // Readiness cleared after a failure: retry once the pause is over.
            _ if self.accept_retry_at.is_some_and(|t| now >= t) => {
                self.accept_retry_at = None;
                match self.listener.get_ref().accept() {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                    r => r,
                }
            }
            _ => return None,
        };
        match accepted {
            Ok((s, _)) => {
                self.accept_retry_at = None;
                if s.set_nonblocking(true).is_err() {
                    return None;
                }
                TcpStream::from_std(s).ok()
            }
            Err(_) => {
                self.accept_retry_at = Some(now.add(ACCEPT_RETRY));
                None
            }
        }
    }

    /// The earliest connection deadline, so the loop wakes to enforce it even when
    /// the client sends nothing.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter_map(|s| s.conn.as_ref().map(|c| c.deadline))
            .chain(self.accept_retry_at)
            .min()
    }
}

/// The TLS configuration `[api]` asks for (`None`: plain HTTP), built from its
/// files now; the error names the file. At start-up and on reload, before
/// anything moves: a failed reload keeps the running certificates.
pub fn tls_of(api: &crate::config::ApiConfig) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    api.tls
        .as_ref()
        .map(|t| {
            crate::tls::server_config(
                &t.certfile,
                &t.keyfile,
                t.cafile.as_deref(),
                t.verify_client,
            )
        })
        .transpose()
}

/// The answer to a refused access (403, or 401 with the challenge).
fn refused(r: &auth::Refusal) -> Response {
    let mut resp = Response::text(r.code, &r.message);
    resp.extra = r.extra_headers();
    resp
}

/// See [`ApiServer::ready`].
pub struct Ready<'a> {
    server: &'a ApiServer,
}

impl Future for Ready<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let s = self.server;
        if s.listener.poll_read_ready(cx).is_ready() {
            return Poll::Ready(());
        }
        for slot in &s.slots {
            if let Some(c) = &slot.conn {
                let ready = match c.phase {
                    Phase::Reading | Phase::Draining => {
                        c.stream.poll_read_ready(cx).is_ready()
                            || (c.tls.as_ref().is_some_and(|t| t.wants_write())
                                && c.stream.poll_write_ready(cx).is_ready())
                    }
                    Phase::Writing => c.stream.poll_write_ready(cx).is_ready(),
                    // Nothing to do until the loop answers (or the deadline).
                    Phase::Waiting => false,
                };
                if ready {
                    return Poll::Ready(());
                }
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn server(rt: &tokio::runtime::Runtime) -> (ApiServer, std::net::SocketAddr) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _g = rt.enter();
        (ApiServer::new(l).unwrap(), addr)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .unwrap()
    }

    /// Service until `f` holds or 2 s pass (real sockets need a moment to arrive).
    fn service_until(
        rt: &tokio::runtime::Runtime,
        s: &mut ApiServer,
        now: Instant,
        mut f: impl FnMut(&ApiServer, &Served) -> bool,
    ) -> Served {
        let mut all = Served::default();
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(2) {
            // The loop's wait: readiness comes from the runtime's poller.
            rt.block_on(async {
                let _ = tokio::time::timeout(Duration::from_millis(20), s.ready()).await;
            });
            let _g = rt.enter();
            let d = s.service(now, &ApiStatus::default());
            all += d;
            if f(s, &all) {
                break;
            }
        }
        all
    }

    #[test]
    fn a_request_is_answered_without_blocking_and_the_connection_closes() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let now = Instant::from_nanos(1_000_000_000);
        let d = service_until(&rt, &mut s, now, |_, d| d.answered == 1);
        assert_eq!((d.accepted, d.answered), (1, 1));
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 "), "{out}");
        drop(c);
        service_until(&rt, &mut s, now, |s, _| s.open() == 0);
        assert_eq!(s.open(), 0);
    }

    #[test]
    fn an_idle_client_is_dropped_at_its_deadline_and_never_waited_for() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        let _idle = std::net::TcpStream::connect(addr).unwrap();
        let now = Instant::from_nanos(1_000_000_000);
        service_until(&rt, &mut s, now, |s, _| s.open() == 1);
        assert_eq!(s.open(), 1);
        assert_eq!(s.next_deadline(), Some(now.add(CONN_DEADLINE)));
        let _g = rt.enter();
        let d = s.service(now.add(CONN_DEADLINE), &ApiStatus::default());
        assert_eq!(d.expired, 1);
        assert_eq!(s.open(), 0);
    }

    #[test]
    fn connections_over_the_cap_are_closed_unanswered() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        let clients: Vec<_> = (0..MAX_CONNS + 5)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let now = Instant::from_nanos(1_000_000_000);
        let d = service_until(&rt, &mut s, now, |_, d| {
            d.accepted + d.refused == clients.len()
        });
        assert_eq!(d.accepted, MAX_CONNS);
        assert_eq!(d.refused, 5);
        assert_eq!(s.open(), MAX_CONNS);
    }

    #[test]
    fn an_oversized_head_gets_431_and_the_answer_survives_the_rest_of_the_input() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let writer = {
            let mut c = c.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
                big.resize(256 * 1024, b'a');
                let _ = c.write_all(&big);
                let _ = c.shutdown(std::net::Shutdown::Write);
            })
        };
        let now = Instant::from_nanos(1_000_000_000);
        service_until(&rt, &mut s, now, |s, d| d.answered == 1 && s.open() == 0);
        writer.join().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    }

    fn read_all(c: &mut std::net::TcpStream) -> String {
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    }

    fn with_auth(s: &mut ApiServer) {
        s.set_auth(Some(ApiAuth {
            username: "admin".into(),
            password: "pw".into(),
        }));
    }

    /// `admin:pw`.
    const AUTH: &str = "Authorization: Basic YWRtaW46cHc=\r\n";

    #[test]
    fn a_write_body_sent_in_pieces_becomes_an_intent_and_the_loops_answer_goes_out() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        with_auth(&mut s);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let body = br#"{"pause": true}"#;
        c.write_all(
            format!(
                "PATCH /config HTTP/1.1\r\n{AUTH}Content-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
        c.write_all(&body[..5]).unwrap();
        let now = Instant::from_nanos(1_000_000_000);
        service_until(&rt, &mut s, now, |s, _| s.open() == 1);
        // Half a body: nothing is handed over yet, nothing answered.
        let d = service_until(&rt, &mut s, now, |_, d| d.parked > 0 || d.answered > 0);
        assert_eq!((d.parked, d.answered), (0, 0));
        assert!(!s.has_intents());
        c.write_all(&body[5..]).unwrap();
        let d = service_until(&rt, &mut s, now, |_, d| d.parked == 1);
        assert_eq!((d.parked, d.answered), (1, 0));
        let taken = s.take_intent().expect("one intent");
        let mut want = serde_json::Map::new();
        want.insert("pause".into(), serde_json::Value::Bool(true));
        assert_eq!(taken.1, Intent::PatchConfig(want));
        assert!(s.take_intent().is_none(), "an intent is handed over once");
        // Parked: waits for the loop, well past the 2 s a reading client gets.
        assert!(s.next_deadline() >= Some(now.add(mgmt::INTENT_WAIT)));
        assert!(s.complete(taken.0, &Response::text(200, "done")));
        assert!(!s.complete(taken.0, &Response::text(200, "twice")));
        service_until(&rt, &mut s, now, |s, _| s.open() == 0);
        let out = read_all(&mut c);
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\ndone"), "{out}");
    }

    #[test]
    fn a_write_without_credentials_is_refused_before_its_body_is_read() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        with_auth(&mut s);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        // Announces a body it never sends: the 401 must not wait for it.
        c.write_all(b"PUT /config HTTP/1.1\r\nContent-Length: 100\r\n\r\n")
            .unwrap();
        let now = Instant::from_nanos(1_000_000_000);
        let d = service_until(&rt, &mut s, now, |_, d| d.answered == 1);
        assert_eq!((d.answered, d.parked), (1, 0));
        let _ = c.shutdown(std::net::Shutdown::Write);
        let out = read_all(&mut c);
        assert!(out.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{out}");
        assert!(
            out.contains("WWW-Authenticate: Basic realm=\"tenure\"\r\n"),
            "{out}"
        );
        // No credentials configured at all: 403.
        s.set_auth(None);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"PATCH /config HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap();
        service_until(&rt, &mut s, now, |_, d| d.answered == 1);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let out = read_all(&mut c);
        assert!(out.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{out}");
    }

    #[test]
    fn expect_100_continue_is_answered_once_access_passed() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        with_auth(&mut s);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(
            format!(
                "PUT /config HTTP/1.1\r\n{AUTH}Content-Length: 10\r\nExpect: 100-continue\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let now = Instant::from_nanos(1_000_000_000);
        service_until(&rt, &mut s, now, |s, _| s.open() == 1);
        service_until(&rt, &mut s, now, |_, _| false);
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 25];
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"HTTP/1.1 100 Continue\r\n\r\n");
        c.write_all(br#"{"ttl": 7}"#).unwrap();
        let d = service_until(&rt, &mut s, now, |_, d| d.parked == 1);
        assert_eq!(d.parked, 1);
    }

    #[test]
    fn a_parked_request_the_loop_never_answers_gets_a_503_at_its_deadline() {
        let rt = rt();
        let (mut s, addr) = server(&rt);
        with_auth(&mut s);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(
            format!("PATCH /config HTTP/1.1\r\n{AUTH}Content-Length: 14\r\n\r\n{{\"pause\":true}}")
                .as_bytes(),
        )
        .unwrap();
        let now = Instant::from_nanos(1_000_000_000);
        service_until(&rt, &mut s, now, |_, d| d.parked == 1);
        let late = now.add(mgmt::INTENT_WAIT);
        service_until(&rt, &mut s, late, |s, _| s.open() == 0);
        let out = read_all(&mut c);
        assert!(out.starts_with("HTTP/1.1 503 "), "{out}");
        assert!(
            out.contains("did not carry the request out in time"),
            "{out}"
        );
        // The intent was never taken: it is gone with its connection.
        assert!(s.take_intent().is_none());
    }
}
