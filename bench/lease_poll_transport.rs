//! Benchmark: what one replica's lease poll (DESIGN §1 step 4, `LeaseTimeToLive(lease,
//! keys)` once a loop) costs in CPU, the agent's and etcd's, through five transports
//! (issue 13 item 2: is the 2 s/h target reachable, and with what client?).
//!
//! - `etcd-client`: the agent's own call, `Etcd::lease_ttl` (etcd-client over tonic:
//!   tower's balance and buffer layers, hyper, h2, prost).
//! - `h2 direct`: the same gRPC request written by hand (a 5-byte gRPC frame header
//!   and two protobuf fields) and sent through the `h2` crate alone on one
//!   connection, on the same current-thread runtime. What a leaner etcd client that
//!   keeps HTTP/2 could reach.
//! - `HTTP/1.1 gateway`: etcd's JSON gateway (`POST /v3/lease/timetolive`) on a
//!   blocking socket, no runtime at all. What the smallest client could reach, at a
//!   price etcd pays (the gateway calls etcd's own gRPC server).
//! - `HTTP/2 by hand`: the gRPC call's frames written and read on a blocking
//!   socket by this thread, no runtime and no h2 crate (`RawH2Poller`): what a
//!   client on the loop's own terms could reach while etcd keeps serving gRPC.
//! - `etcd-client, one channel, no balance`: the agent's call through etcd-client
//!   built on one plain tonic channel to the same member (`Client::from_channel`,
//!   the `raw-channel` feature, benches only): tonic, hyper and tower's buffer
//!   without tower's balance layer, to tell which of them the cost is.
//!
//! Each transport polls a live lease `TENURE_BENCH_POLLS` times (default 1000), one
//! every `TENURE_BENCH_POLL_GAP_MS` (default 20 ms: an idle gap between polls, as in
//! the agent's loop), in rounds that alternate the transports (`TENURE_BENCH_ROUNDS`,
//! default 2), against a real 3-member etcd on loopback. CPU is the scheduler's run
//! time (`/proc/<pid>/task/*/schedstat`) of this process and of all three etcd
//! members over the polls, divided by the number of polls; etcd's idle work (Raft
//! heartbeats, the lease checkpoints) is measured over an idle window of the same
//! length and reported beside it. Loopback TCP is processed in the sender's context,
//! so both sides' figures include their kernel's share. Fails only when a poll
//! errs or answers a TTL that is not the live lease's.

#[path = "harness.rs"]
mod harness;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant as StdInstant};

use harness::Table;
use tenure::clock;
use tenure::testbed::etcd::EtcdCluster;

const PREFIX: &str = "/service/bench/";
const CALL_LIMIT: Duration = Duration::from_secs(2);
/// The lease's TTL: long enough that no poll of a run sees it run out.
const TTL: i64 = 600;

fn main() {
    harness::main_with_etcd(
        "lease_poll_transport",
        "CPU of one lease poll by transport",
        run,
    );
}

/// The hand-written gRPC request: `LeaseTimeToLiveRequest { ID: lease, keys: true }`
/// (field 1 varint, field 2 bool) behind the 5-byte gRPC message header.
fn grpc_ttl_request(lease: i64) -> Vec<u8> {
    let mut msg = vec![0x08];
    let mut v = lease as u64;
    while v >= 0x80 {
        msg.push((v as u8) | 0x80);
        v >>= 7;
    }
    msg.push(v as u8);
    msg.extend_from_slice(&[0x10, 1]);
    let mut out = vec![0];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// `LeaseTimeToLiveResponse.TTL` (field 3) from a gRPC message: a walk over the
/// top-level fields, skipping the others.
fn grpc_ttl_of(frame: &[u8]) -> Option<i64> {
    let msg = frame.get(5..)?;
    let mut i = 0;
    while i < msg.len() {
        let tag = varint(msg, &mut i)?;
        match tag & 7 {
            0 => {
                let v = varint(msg, &mut i)?;
                if tag >> 3 == 3 {
                    return Some(v as i64);
                }
            }
            2 => {
                let len = varint(msg, &mut i)? as usize;
                i = i.checked_add(len)?;
            }
            _ => return None,
        }
    }
    None
}

struct H2Poller {
    send: h2::client::SendRequest<bytes::Bytes>,
    uri: http::Uri,
    body: bytes::Bytes,
}

impl H2Poller {
    fn connect(rt: &tokio::runtime::Runtime, addr: SocketAddr, lease: i64) -> Result<Self, String> {
        let send = rt.block_on(async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("h2 connect {addr}: {e}"))?;
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            let (send, conn) = h2::client::handshake(tcp)
                .await
                .map_err(|e| format!("h2 handshake: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            send.ready().await.map_err(|e| format!("h2 ready: {e}"))
        })?;
        Ok(H2Poller {
            send,
            uri: format!("http://{addr}/etcdserverpb.Lease/LeaseTimeToLive")
                .parse()
                .map_err(|e| format!("uri: {e}"))?,
            body: bytes::Bytes::from(grpc_ttl_request(lease)),
        })
    }

    fn poll(&mut self, rt: &tokio::runtime::Runtime) -> Result<i64, String> {
        let req = http::Request::post(self.uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| e.to_string())?;
        let (resp, mut stream) = self
            .send
            .send_request(req, false)
            .map_err(|e| format!("h2 send: {e}"))?;
        stream
            .send_data(self.body.clone(), true)
            .map_err(|e| format!("h2 data: {e}"))?;
        rt.block_on(async {
            tokio::time::timeout(CALL_LIMIT, async {
                let resp = resp.await.map_err(|e| format!("h2 response: {e}"))?;
                let mut body = resp.into_body();
                let mut got = Vec::new();
                while let Some(d) = body.data().await {
                    let d = d.map_err(|e| format!("h2 body: {e}"))?;
                    let _ = body.flow_control().release_capacity(d.len());
                    got.extend_from_slice(&d);
                }
                let trailers = body
                    .trailers()
                    .await
                    .map_err(|e| format!("h2 trailers: {e}"))?;
                let status = trailers
                    .as_ref()
                    .and_then(|t| t.get("grpc-status"))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?");
                if status != "0" {
                    return Err(format!("grpc-status {status}"));
                }
                grpc_ttl_of(&got).ok_or_else(|| "no TTL in the answer".to_string())
            })
            .await
            .map_err(|_| "h2 poll: no answer in time".to_string())?
        })
    }
}

/// HTTP/2 by hand on a blocking socket: the gRPC call with no runtime, the
/// frames written and read by this loop (what a client on the agent's own terms —
/// synchronous, one buffer, no task — could reach while keeping etcd's gRPC
/// server, so etcd pays what it pays for etcd-client).
///
/// Measurement only, not a client: the header blocks etcd sends are not HPACK-
/// decoded (a real client must, Huffman included: ~60 bytes a poll); the answer is
/// taken as good when a DATA frame carries a `LeaseTimeToLiveResponse` with the
/// lease's TTL and the stream ends in a trailers HEADERS frame. SETTINGS and PING
/// are acknowledged, the connection's receive window is topped up, GOAWAY and
/// RST_STREAM end the run with an error.
struct RawH2Poller {
    tcp: TcpStream,
    /// HEADERS + DATA of one request; the stream id (bytes 5..9) is patched per poll.
    req: Vec<u8>,
    /// Offset of the DATA frame's stream id in `req`.
    data_sid_at: usize,
    next_sid: u32,
    buf: Vec<u8>,
    /// DATA bytes received since the last connection WINDOW_UPDATE.
    unacked: u32,
}

const H2_DATA: u8 = 0;
const H2_HEADERS: u8 = 1;
const H2_RST: u8 = 3;
const H2_SETTINGS: u8 = 4;
const H2_PING: u8 = 6;
const H2_GOAWAY: u8 = 7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;

fn h2_frame(out: &mut Vec<u8>, kind: u8, flags: u8, sid: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&sid.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK string literal, not Huffman-coded (7-bit length prefix: < 127 bytes).
fn hpack_str(out: &mut Vec<u8>, s: &str) {
    assert!(s.len() < 127);
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

impl RawH2Poller {
    fn connect(addr: SocketAddr, lease: i64) -> Result<Self, String> {
        let mut tcp = TcpStream::connect_timeout(&addr, CALL_LIMIT)
            .map_err(|e| format!("raw h2 connect {addr}: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(CALL_LIMIT))
            .map_err(|e| e.to_string())?;
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // SETTINGS: HEADER_TABLE_SIZE 0 (no dynamic table to keep), ENABLE_PUSH 0.
        h2_frame(
            &mut hello,
            H2_SETTINGS,
            0,
            0,
            &[0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0],
        );
        tcp.write_all(&hello)
            .map_err(|e| format!("raw h2 preface: {e}"))?;

        let mut block = vec![0x83, 0x86]; // :method POST, :scheme http (static)
        block.push(0x04); // :path, literal without indexing, static name 4
        hpack_str(&mut block, "/etcdserverpb.Lease/LeaseTimeToLive");
        block.push(0x01); // :authority, static name 1
        hpack_str(&mut block, &addr.to_string());
        block.extend_from_slice(&[0x0f, 0x10]); // content-type, static name 31
        hpack_str(&mut block, "application/grpc");
        block.push(0x00); // te: a new name
        hpack_str(&mut block, "te");
        hpack_str(&mut block, "trailers");
        let mut req = Vec::new();
        h2_frame(&mut req, H2_HEADERS, 0x4, 1, &block); // END_HEADERS
        let data_sid_at = req.len() + 5;
        h2_frame(&mut req, H2_DATA, END_STREAM, 1, &grpc_ttl_request(lease));
        Ok(RawH2Poller {
            tcp,
            req,
            data_sid_at,
            next_sid: 1,
            buf: vec![0; 16 * 1024],
            unacked: 0,
        })
    }

    fn poll(&mut self) -> Result<i64, String> {
        let sid = self.next_sid;
        // Stream ids are odd and below 2^31; a real client reconnects at the end.
        self.next_sid += 2;
        self.req[5..9].copy_from_slice(&sid.to_be_bytes());
        let at = self.data_sid_at;
        self.req[at..at + 4].copy_from_slice(&sid.to_be_bytes());
        self.tcp
            .write_all(&self.req)
            .map_err(|e| format!("raw h2 write: {e}"))?;
        let (mut got, mut ttl, mut ended) = (0usize, None, false);
        let mut replies: Vec<u8> = Vec::new();
        while !ended {
            if got == self.buf.len() {
                return Err("raw h2: a frame over 16 KiB".into());
            }
            let n = self
                .tcp
                .read(&mut self.buf[got..])
                .map_err(|e| format!("raw h2 read: {e}"))?;
            if n == 0 {
                return Err("raw h2: etcd closed the connection".into());
            }
            got += n;
            let mut at = 0;
            while got - at >= 9 {
                let h = &self.buf[at..at + 9];
                let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                if got - at < 9 + len {
                    break;
                }
                let (kind, flags) = (h[3], h[4]);
                let fsid = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                let payload = &self.buf[at + 9..at + 9 + len];
                match kind {
                    H2_DATA if fsid == sid => {
                        self.unacked += len as u32;
                        // Not padded (etcd does not pad); one whole gRPC message.
                        ttl = grpc_ttl_of(payload);
                        ended |= flags & END_STREAM != 0;
                    }
                    H2_HEADERS if fsid == sid => ended |= flags & END_STREAM != 0,
                    H2_SETTINGS if flags & ACK == 0 => {
                        h2_frame(&mut replies, H2_SETTINGS, ACK, 0, &[])
                    }
                    H2_PING if flags & ACK == 0 => h2_frame(&mut replies, H2_PING, ACK, 0, payload),
                    H2_GOAWAY => return Err("raw h2: GOAWAY".into()),
                    H2_RST if fsid == sid => return Err("raw h2: RST_STREAM".into()),
                    _ => {}
                }
                at += 9 + len;
            }
            self.buf.copy_within(at..got, 0);
            got -= at;
        }
        if self.unacked >= 1 << 15 {
            h2_frame(&mut replies, 8, 0, 0, &self.unacked.to_be_bytes());
            self.unacked = 0;
        }
        if !replies.is_empty() {
            self.tcp
                .write_all(&replies)
                .map_err(|e| format!("raw h2 write: {e}"))?;
        }
        ttl.ok_or_else(|| "raw h2: no TTL in the answer".to_string())
    }
}

struct GatewayPoller {
    tcp: TcpStream,
    req: Vec<u8>,
    buf: Vec<u8>,
}

impl GatewayPoller {
    fn connect(addr: SocketAddr, lease: i64) -> Result<Self, String> {
        let tcp = TcpStream::connect_timeout(&addr, CALL_LIMIT)
            .map_err(|e| format!("gateway connect {addr}: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(CALL_LIMIT))
            .map_err(|e| e.to_string())?;
        let body = format!("{{\"ID\":\"{lease}\",\"keys\":true}}");
        let req = format!(
            "POST /v3/lease/timetolive HTTP/1.1\r\nHost: {addr}\r\nContent-Type: \
             application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        Ok(GatewayPoller {
            tcp,
            req: req.into_bytes(),
            buf: vec![0; 8192],
        })
    }

    fn poll(&mut self) -> Result<i64, String> {
        self.tcp
            .write_all(&self.req)
            .map_err(|e| format!("gateway write: {e}"))?;
        let mut got = 0;
        loop {
            if got == self.buf.len() {
                return Err("gateway answer over 8 KiB".into());
            }
            let n = self
                .tcp
                .read(&mut self.buf[got..])
                .map_err(|e| format!("gateway read: {e}"))?;
            if n == 0 {
                return Err("gateway closed the connection".into());
            }
            got += n;
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut resp = httparse::Response::new(&mut headers);
            let Ok(httparse::Status::Complete(head)) = resp.parse(&self.buf[..got]) else {
                continue;
            };
            let len = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| {
                    std::str::from_utf8(h.value)
                        .ok()?
                        .trim()
                        .parse::<usize>()
                        .ok()
                })
                .ok_or("gateway answer without Content-Length")?;
            if got < head + len {
                continue;
            }
            if resp.code != Some(200) {
                return Err(format!("gateway answered {:?}", resp.code));
            }
            let v: serde_json::Value = serde_json::from_slice(&self.buf[head..head + len])
                .map_err(|e| format!("gateway JSON: {e}"))?;
            // int64 fields travel as strings in etcd's JSON.
            return v["TTL"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("gateway answer without TTL: {v}"));
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Cost {
    polls: u64,
    own_ns: u64,
    etcd_ns: u64,
    wall: Duration,
}

fn etcd_ns(etcd: &EtcdCluster) -> Result<u64, String> {
    let mut total = 0;
    for i in 0..etcd.members.len() {
        let pid = etcd.pid(i).ok_or("an etcd member is not running")?;
        total += harness::run_ns(pid)?;
    }
    Ok(total)
}

/// `n` polls, `gap` apart; every answer must be the live lease's TTL.
fn measure(
    etcd: &EtcdCluster,
    n: usize,
    gap: Duration,
    mut poll: impl FnMut() -> Result<i64, String>,
) -> Result<Cost, String> {
    let me = std::process::id();
    let (own0, etcd0, t0) = (harness::run_ns(me)?, etcd_ns(etcd)?, StdInstant::now());
    for i in 0..n {
        let ttl = poll()?;
        if !(1..=TTL).contains(&ttl) {
            return Err(format!(
                "poll {i} answered TTL {ttl} for a live lease of {TTL} s"
            ));
        }
        std::thread::sleep(gap);
    }
    Ok(Cost {
        polls: n as u64,
        own_ns: harness::run_ns(me)? - own0,
        etcd_ns: etcd_ns(etcd)? - etcd0,
        wall: t0.elapsed(),
    })
}

fn run(dir: &std::path::Path) -> Result<(), String> {
    let n = harness::env_num("TENURE_BENCH_POLLS", 1000) as usize;
    let gap = Duration::from_millis(harness::env_num("TENURE_BENCH_POLL_GAP_MS", 20));
    let rounds = harness::env_num("TENURE_BENCH_ROUNDS", 2) as usize;

    let (etcd, rt, mut client) = harness::etcd_with_client(dir, PREFIX, CALL_LIMIT)?;
    let endpoints = etcd.endpoints();
    let deadline = || clock::now().add(CALL_LIMIT);
    let lease = match client.acquire_unbound(&rt, "pg1", TTL as u32, deadline()) {
        tenure::core::model::AcquireOutcome::Won { lease, .. } => lease,
        other => return Err(format!("acquire: {other:?}")),
    };
    // The direct transports talk to etcd's leader: a lease's TTL is its memory.
    let leader = etcd.leader().ok_or("no etcd leader")?;
    let addr: SocketAddr = endpoints[leader]
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| format!("endpoint {}: {e}", endpoints[leader]))?;
    let mut h2 = H2Poller::connect(&rt, addr, lease)?;
    let mut gw = GatewayPoller::connect(addr, lease)?;
    let mut raw = RawH2Poller::connect(addr, lease)?;
    let mut unbal = rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("endpoint: {e}"))?
            .connect()
            .await
            .map_err(|e| format!("tonic connect: {e}"))?;
        etcd_client::Client::from_channel(etcd_client::Channel::Tonic(ch), None)
            .await
            .map_err(|e| format!("from_channel: {e}"))
    })?;
    let mut unbal_poll = || -> Result<i64, String> {
        rt.block_on(async {
            let r = tokio::time::timeout(
                CALL_LIMIT,
                unbal.lease_time_to_live(
                    lease,
                    Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
                ),
            )
            .await
            .map_err(|_| "unbalanced poll: no answer in time".to_string())?
            .map_err(|e| format!("unbalanced poll: {e}"))?;
            Ok(r.ttl())
        })
    };

    let mut agent_poll = || -> Result<i64, String> {
        let p = client
            .lease_ttl(&rt, lease, deadline())
            .map_err(|e| format!("lease_ttl: {e}"))?;
        p.ttl
            .ok_or_else(|| "lease_ttl: lease not found".to_string())
    };
    // Warm-up: connections, code paths.
    for _ in 0..50 {
        agent_poll()?;
        h2.poll(&rt)?;
        gw.poll()?;
        raw.poll()?;
        unbal_poll()?;
    }

    let names = [
        "etcd-client (the agent's call)",
        "h2 direct",
        "HTTP/1.1 gateway",
        "HTTP/2 by hand, blocking",
        "etcd-client, one channel, no balance",
    ];
    let mut costs = [Cost::default(); 5];
    let mut idle = Cost::default();
    for round in 0..rounds {
        for (k, cost) in costs.iter_mut().enumerate() {
            let c = match k {
                0 => measure(&etcd, n, gap, &mut agent_poll)?,
                1 => measure(&etcd, n, gap, || h2.poll(&rt))?,
                2 => measure(&etcd, n, gap, || gw.poll())?,
                3 => measure(&etcd, n, gap, || raw.poll())?,
                _ => measure(&etcd, n, gap, &mut unbal_poll)?,
            };
            println!(
                "  round {round} {}: {:.0} µs here, {:.0} µs in etcd per poll (load {})",
                names[k],
                c.own_ns as f64 / 1e3 / c.polls as f64,
                c.etcd_ns as f64 / 1e3 / c.polls as f64,
                harness::loadavg()
            );
            cost.polls += c.polls;
            cost.own_ns += c.own_ns;
            cost.etcd_ns += c.etcd_ns;
            cost.wall += c.wall;
        }
        // etcd's own idle work over a window as long as one transport's run.
        let window = costs[0].wall / (round as u32 + 1);
        let e0 = etcd_ns(&etcd)?;
        std::thread::sleep(window);
        idle.etcd_ns += etcd_ns(&etcd)? - e0;
        idle.wall += window;
    }

    // etcd's idle work per poll-slot: what it spends anyway over one poll's share
    // of wall time.
    let idle_per_ns = idle.etcd_ns as f64 / idle.wall.as_nanos() as f64;
    let mut t = Table::new(&[
        "transport",
        "polls",
        "µs CPU here / poll",
        "µs CPU in etcd / poll",
        "of which etcd idle",
        "s/h here at loop 0.5 s",
    ]);
    for (k, c) in costs.iter().enumerate() {
        let per = |ns: u64| ns as f64 / 1e3 / c.polls as f64;
        let idle_share = idle_per_ns * c.wall.as_nanos() as f64 / 1e3 / c.polls as f64;
        t.row(vec![
            names[k].to_string(),
            c.polls.to_string(),
            format!("{:.0}", per(c.own_ns)),
            format!("{:.0}", per(c.etcd_ns)),
            format!("{idle_share:.0}"),
            format!("{:.2}", per(c.own_ns) * 7200.0 / 1e6),
        ]);
    }
    println!(
        "\n{} polls per transport, {} ms apart, {rounds} alternating rounds; load {}\n{}",
        n,
        gap.as_millis(),
        harness::loadavg(),
        t.render()
    );
    Ok(())
}
