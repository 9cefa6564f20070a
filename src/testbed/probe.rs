//! The write probe (DESIGN §6): tries a tiny write on every node at a fixed rate,
//! each node on its own connection and thread, and records when each write was sent
//! and when it was acknowledged, on one clock (`std::time::Instant`, monotonic and
//! shared by all threads of this process).
//!
//! Owns: its threads and their connections. Must never: run inside the agent (it
//! is a test and demo aid; threads are fine here), or keep a caller waiting past
//! the bound given to `stop`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The table the probe writes into; created by `TestCluster::write_probe`.
pub const PROBE_TABLE: &str = "tenure_probe";

/// One write the probe sent.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub seq: u64,
    pub sent: Instant,
    /// When the commit was acknowledged; `None` if it failed (or never answered).
    pub acked: Option<Instant>,
    pub error: Option<String>,
}

/// Where one node's probe thread connects.
#[derive(Clone, Debug)]
pub struct ProbeTarget {
    pub node: usize,
    /// The server's address (127.0.0.1 on loopback, a namespace's address in a
    /// partition test).
    pub host: std::net::IpAddr,
    pub port: u16,
    pub user: String,
    pub password: String,
}

pub struct WriteProbe {
    stop: Arc<AtomicBool>,
    logs: Vec<Arc<Mutex<Vec<Attempt>>>>,
    threads: Vec<JoinHandle<()>>,
    pub started: Instant,
}

impl WriteProbe {
    /// Start one thread per target, each writing every `every`.
    pub fn start(targets: &[ProbeTarget], every: Duration) -> WriteProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let mut logs = Vec::new();
        let mut threads = Vec::new();
        for t in targets {
            let log = Arc::new(Mutex::new(Vec::new()));
            logs.push(log.clone());
            let (stop, t) = (stop.clone(), t.clone());
            threads.push(std::thread::spawn(move || {
                probe_loop(&t, every, &stop, &log)
            }));
        }
        WriteProbe {
            stop,
            logs,
            threads,
            started: Instant::now(),
        }
    }

    /// A copy of every attempt on target `k` (the index in the target list, which
    /// `TestCluster::write_probe` makes equal to the node index).
    pub fn attempts(&self, k: usize) -> Vec<Attempt> {
        self.logs
            .get(k)
            .map(|l| l.lock().map(|v| v.clone()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The first write acknowledged by node `k` that was sent at or after `after`.
    pub fn first_ack_after(&self, k: usize, after: Instant) -> Option<Attempt> {
        self.attempts(k)
            .into_iter()
            .filter(|a| a.sent >= after && a.acked.is_some())
            .min_by_key(|a| a.sent)
    }

    /// The last write acknowledged by node `k`.
    pub fn last_ack(&self, k: usize) -> Option<Attempt> {
        self.attempts(k)
            .into_iter()
            .filter(|a| a.acked.is_some())
            .max_by_key(|a| a.acked)
    }

    /// Number of acknowledged writes on node `k`.
    pub fn ack_count(&self, k: usize) -> usize {
        self.attempts(k)
            .iter()
            .filter(|a| a.acked.is_some())
            .count()
    }

    /// The ordering invariant (DESIGN §6): no write was acknowledged by `old` after
    /// the first write was sent to `new` as primary (the send instant of `new`'s
    /// first acknowledged write at or after `since`). Err names the offending write.
    pub fn check_no_overlap(&self, old: usize, new: usize, since: Instant) -> Result<(), String> {
        let first_new = self
            .first_ack_after(new, since)
            .ok_or_else(|| format!("node {new} acknowledged no probe write after the fault"))?;
        let late: Vec<Attempt> = self
            .attempts(old)
            .into_iter()
            .filter(|a| a.acked.is_some_and(|ack| ack >= first_new.sent))
            .collect();
        if let Some(a) = late.first() {
            return Err(format!(
                "split brain: old primary node {old} acknowledged write #{} {:?} after the first write \
                 (#{}) was sent to new primary node {new} ({} late writes in all)",
                a.seq,
                a.acked.map(|x| x.saturating_duration_since(first_new.sent)),
                first_new.seq,
                late.len()
            ));
        }
        Ok(())
    }

    /// Stop every thread; wait at most `limit` for them (a thread stuck on a frozen
    /// server is left behind, detached; its log stays readable).
    pub fn stop(&mut self, limit: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        for h in std::mem::take(&mut self.threads) {
            while !h.is_finished() && t0.elapsed() < limit {
                std::thread::sleep(Duration::from_millis(10));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for WriteProbe {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(2));
    }
}

fn connect(t: &ProbeTarget) -> Result<postgres::Client, postgres::Error> {
    postgres::Config::new()
        .host(&t.host.to_string())
        .port(t.port)
        .user(&t.user)
        .password(&t.password)
        .dbname("postgres")
        .application_name("tenure-probe")
        .connect_timeout(Duration::from_millis(300))
        .tcp_user_timeout(Duration::from_secs(1))
        // Short statement_timeout; synchronous_commit left at its default.
        .options("-c statement_timeout=500")
        .connect(postgres::NoTls)
}

fn probe_loop(t: &ProbeTarget, every: Duration, stop: &AtomicBool, log: &Mutex<Vec<Attempt>>) {
    let mut client: Option<postgres::Client> = None;
    let mut seq: u64 = 0;
    let mut next = Instant::now();
    let insert = format!("INSERT INTO {PROBE_TABLE}(node, seq) VALUES ($1, $2)");
    while !stop.load(Ordering::SeqCst) {
        // Fixed rate: the next tick does not slide when a write is slow.
        next += every;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = connect(t).ok();
        }
        let Some(c) = client.as_mut() else { continue };
        seq += 1;
        let sent = Instant::now();
        let node = i32::try_from(t.node).unwrap_or(i32::MAX);
        let res = c.execute(insert.as_str(), &[&node, &(seq as i64)]);
        let acked = Instant::now();
        let attempt = match res {
            Ok(_) => Attempt {
                seq,
                sent,
                acked: Some(acked),
                error: None,
            },
            Err(e) => Attempt {
                seq,
                sent,
                acked: None,
                error: Some(e.to_string()),
            },
        };
        if let Ok(mut l) = log.lock() {
            l.push(attempt);
        }
    }
}
