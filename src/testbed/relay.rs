//! A delaying TCP relay the test bed owns (DESIGN §6: this kernel has no tc netem).
//!
//! It listens on `127.0.0.1:<free_port()>` and forwards every connection it accepts
//! to one target (an etcd member's client URL), byte for byte, in order, both ways.
//! A test switches it at run time: [`Relay::set_delay`] makes every chunk wait
//! `delay` after it arrived before it is forwarded (so an etcd member answers late,
//! "etcd slow"), [`Relay::hold`] forwards nothing until [`Relay::release`].
//!
//! Owns: its listening socket, the connections it accepted and opened, and the
//! threads that move their bytes (threads are fine here: this is test code, never
//! the agent). Must never: reorder, drop or duplicate a byte of a connection while
//! it is open, connect anywhere but the target it was given (loopback), or keep a
//! caller of `stop` waiting past the bound it documents.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::free_port;

/// How often a blocked thread looks at the stop flag (socket read timeouts,
/// accept polling, condvar waits are bounded by this).
const TICK: Duration = Duration::from_millis(20);
/// Longest a connect to the target may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A write to a peer that stops reading gives up after this (the connection is
/// then closed both ways: a relay never blocks forever).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the test switches: read by every forwarding thread.
#[derive(Clone, Copy, Debug)]
struct Mode {
    delay: Duration,
    held: bool,
}

struct Shared {
    mode: Mutex<Mode>,
    /// Notified whenever `mode` changes or `stop` is set, so writers re-check.
    changed: Condvar,
    stop: AtomicBool,
    /// Bytes read from one side and not yet written to the other.
    pending: AtomicUsize,
    /// Connections accepted so far.
    accepted: AtomicUsize,
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One direction's queue: chunks with the instant they arrived, then `None` for
/// the end of the stream (the reader saw EOF).
struct Queue {
    chunks: Mutex<VecDeque<(Instant, Option<Vec<u8>>)>>,
    ready: Condvar,
}

/// A running relay to one target. Dropping it stops it.
pub struct Relay {
    port: u16,
    target: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Start a relay to `target`: `"http://127.0.0.1:2379"`, or `"127.0.0.1:2379"`.
    /// No delay, not held.
    pub fn start(target: &str) -> Result<Relay, String> {
        let hostport = target
            .strip_prefix("http://")
            .unwrap_or(target)
            .trim_end_matches('/');
        let target: SocketAddr = hostport
            .parse()
            .map_err(|e| format!("relay target {target:?} is not http://<ip>:<port>: {e}"))?;
        if !target.ip().is_loopback() {
            return Err(format!(
                "relay target {target} is not on loopback: the bed sends traffic only to 127.0.0.0/8"
            ));
        }
        let port = free_port();
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
            .map_err(|e| format!("relay: bind 127.0.0.1:{port}: {e}"))?;
        // Non-blocking accept, polled every TICK, so `stop` is seen promptly.
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("relay: non-blocking listener: {e}"))?;
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode {
                delay: Duration::ZERO,
                held: false,
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
        });
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (s2, t2) = (shared.clone(), threads.clone());
        let accept = std::thread::Builder::new()
            .name(format!("relay-{port}"))
            .spawn(move || accept_loop(listener, target, &s2, &t2))
            .map_err(|e| format!("relay: spawn accept thread: {e}"))?;
        Ok(Relay {
            port,
            target,
            shared,
            threads,
            accept: Some(accept),
        })
    }

    /// The URL a client connects to: `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address every accepted connection is forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// From now on a chunk is forwarded once `delay` has passed since it arrived
    /// (the delay in force when the writer looks at it, so lowering it releases
    /// chunks already queued), and never before the chunks ahead of it. Applies to
    /// both directions: a request/answer round trip takes at least `2 × delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.set_mode(|m| m.delay = delay);
    }

    /// The delay in force.
    pub fn delay(&self) -> Duration {
        self.shared.mode().delay
    }

    /// Forward nothing (either way) until `release`; bytes keep being read and queued.
    pub fn hold(&self) {
        self.set_mode(|m| m.held = true);
    }

    /// Undo `hold`: queued bytes go on as the delay allows.
    pub fn release(&self) {
        self.set_mode(|m| m.held = false);
    }

    /// Bytes read from one side and not yet forwarded to the other (0: nothing is
    /// in flight inside the relay).
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::SeqCst)
    }

    /// Connections accepted so far (a client that reconnects shows up here).
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    fn set_mode(&self, f: impl FnOnce(&mut Mode)) {
        let mut m = self.shared.mode.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut m);
        drop(m);
        self.shared.changed.notify_all();
    }

    /// Close the listener and every connection, and wait for the relay's threads:
    /// at most about `TICK` plus one `WRITE_TIMEOUT` (a write already blocked on a
    /// peer that does not read). Idempotent.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let handles = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = h.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    shared: &Arc<Shared>,
    threads: &Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    while !shared.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(TICK);
                continue;
            }
            Err(_) => {
                std::thread::sleep(TICK);
                continue;
            }
        };
        // The target refused or is down: close the client at once, as a dead
        // member would (the client sees a reset, not a hang).
        let Ok(server) = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        match connection(client, server, shared) {
            Ok(hs) => {
                let mut t = threads.lock().unwrap_or_else(|e| e.into_inner());
                // Forget threads that finished, so a long test does not pile them up.
                t.retain(|h| !h.is_finished());
                t.extend(hs);
            }
            Err(_) => continue,
        }
    }
}

/// Start the four threads of one connection: per direction a reader (socket to
/// queue) and a writer (queue to socket, when the delay and hold allow).
fn connection(
    client: TcpStream,
    server: TcpStream,
    shared: &Arc<Shared>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    for s in [&client, &server] {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(TICK))?;
        s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    }
    // Set when either side fails: every thread of this connection then ends and
    // both sockets are shut down.
    let broken = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for (from, to) in [
        (client.try_clone()?, server.try_clone()?),
        (server.try_clone()?, client.try_clone()?),
    ] {
        let q = Arc::new(Queue {
            chunks: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        });
        let (sh, qr, br, peer) = (shared.clone(), q.clone(), broken.clone(), to.try_clone()?);
        hs.push(std::thread::spawn(move || {
            read_side(from, peer, &qr, &sh, &br)
        }));
        let (sh, br) = (shared.clone(), broken.clone());
        hs.push(std::thread::spawn(move || write_side(to, &q, &sh, &br)));
    }
    Ok(hs)
}

fn done(shared: &Shared, broken: &AtomicBool) -> bool {
    shared.stop.load(Ordering::SeqCst) || broken.load(Ordering::SeqCst)
}

fn read_side(
    mut from: TcpStream,
    peer: TcpStream,
    q: &Queue,
    shared: &Shared,
    broken: &AtomicBool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let end = loop {
        if done(shared, broken) {
            break false;
        }
        match from.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => {
                shared.pending.fetch_add(n, Ordering::SeqCst);
                let mut c = q.chunks.lock().unwrap_or_else(|e| e.into_inner());
                c.push_back((Instant::now(), Some(buf[..n].to_vec())));
                drop(c);
                q.ready.notify_all();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break false,
        }
    };
    if end {
        // EOF: the writer half-closes the peer after everything queued went out.
        let mut c = q.chunks.lock().unwrap_or_else(|e| e.into_inner());
        c.push_back((Instant::now(), None));
        drop(c);
        q.ready.notify_all();
    } else {
        broken.store(true, Ordering::SeqCst);
        let _ = from.shutdown(Shutdown::Both);
        let _ = peer.shutdown(Shutdown::Both);
        q.ready.notify_all();
    }
}

fn write_side(mut to: TcpStream, q: &Queue, shared: &Shared, broken: &AtomicBool) {
    loop {
        if done(shared, broken) {
            break;
        }
        // The head of the queue, once its time has come; the lock is not held
        // while writing.
        let head = {
            let mut c = q.chunks.lock().unwrap_or_else(|e| e.into_inner());
            match c.front() {
                None => {
                    let _ = q.ready.wait_timeout(c, TICK);
                    continue;
                }
                Some((arrived, _)) => {
                    let m = shared.mode();
                    let due = *arrived + m.delay;
                    let now = Instant::now();
                    if m.held || now < due {
                        drop(c);
                        // Wake on a mode change (set_delay/release) or at `due`.
                        let wait = if m.held { TICK } else { (due - now).min(TICK) };
                        let g = shared.mode.lock().unwrap_or_else(|e| e.into_inner());
                        let _ = shared.changed.wait_timeout(g, wait);
                        continue;
                    }
                    c.pop_front()
                }
            }
        };
        match head {
            Some((_, Some(bytes))) => {
                let ok = to.write_all(&bytes).is_ok();
                shared.pending.fetch_sub(bytes.len(), Ordering::SeqCst);
                if !ok {
                    broken.store(true, Ordering::SeqCst);
                    break;
                }
            }
            Some((_, None)) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            None => {}
        }
    }
    // Stopped or broken: whatever is still queued will never go out.
    let c = q.chunks.lock().unwrap_or_else(|e| e.into_inner());
    let left: usize = c.iter().map(|(_, b)| b.as_ref().map_or(0, Vec::len)).sum();
    drop(c);
    shared.pending.fetch_sub(left, Ordering::SeqCst);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback (one connection), for the relay's own tests.
    fn echo() -> (u16, JoinHandle<()>) {
        let port = free_port();
        let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).expect("bind");
        let h = std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        });
        (port, h)
    }

    fn read_exact_by(s: &mut TcpStream, n: usize, limit: Duration) -> Vec<u8> {
        s.set_read_timeout(Some(limit)).expect("timeout");
        let mut out = vec![0u8; n];
        s.read_exact(&mut out).expect("read through the relay");
        out
    }

    #[test]
    fn relays_in_order_and_delays_and_holds() {
        let (port, echo_thread) = echo();
        let mut r = Relay::start(&format!("http://127.0.0.1:{port}")).expect("relay");
        let mut s = TcpStream::connect(("127.0.0.1", r.port())).expect("connect");
        // Order: many small writes come back as one ordered stream.
        let msg: Vec<u8> = (0..2000u32).flat_map(|i| i.to_le_bytes()).collect();
        for c in msg.chunks(7) {
            s.write_all(c).expect("write");
        }
        assert_eq!(
            read_exact_by(&mut s, msg.len(), Duration::from_secs(5)),
            msg
        );

        // Delay: an echo round trip takes at least twice the delay.
        r.set_delay(Duration::from_millis(150));
        let t0 = Instant::now();
        s.write_all(b"slow").expect("write");
        assert_eq!(read_exact_by(&mut s, 4, Duration::from_secs(5)), b"slow");
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );

        // Hold: nothing comes back until release; then everything, in order.
        r.set_delay(Duration::ZERO);
        r.hold();
        s.write_all(b"held1").expect("write");
        s.write_all(b"held2").expect("write");
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut b = [0u8; 1];
        assert!(s.read(&mut b).is_err(), "a held relay forwarded bytes");
        assert!(r.pending() > 0);
        r.release();
        assert_eq!(
            read_exact_by(&mut s, 10, Duration::from_secs(5)),
            b"held1held2"
        );
        assert_eq!(r.accepted(), 1);

        // Stop closes the connection: the client sees EOF or a reset.
        r.stop();
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
        drop(s);
        let _ = echo_thread.join();
    }

    #[test]
    fn refuses_a_target_off_loopback() {
        assert!(Relay::start("http://10.1.2.3:2379").is_err());
        assert!(Relay::start("not an address").is_err());
    }
}
