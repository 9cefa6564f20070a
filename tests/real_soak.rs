//! The real-parts soak (issue 4, `make soak`): one cluster, many rounds, one
//! random fault per round, the invariants checked after every round.
//!
//! One cluster per run: three agents, each with its own PostgreSQL 15 and its own
//! watchdog stand-in armed in `required` mode, on a real three-member etcd, every
//! node and every etcd member in its own network namespace (`ClusterOptions::netns`)
//! so the primary can be cut off. Synchronous mode is on or off, chosen by the seed.
//! The bed's delaying etcd relays listen on the test's loopback and cannot be
//! combined with namespaces (`TestCluster::start` refuses), so "etcd slow for the
//! leader" is not among the faults here (it has its own tests in `real_faults.rs`).
//!
//! Each round draws one fault and its parameters from a seeded generator, applies
//! it, heals what it broke (restarts crashed hosts, revives a stand-in that reset
//! its host, lifts cuts, restarts etcd members), waits until the cluster converges
//! (exactly one primary, the leader key naming it, every other node streaming from
//! it, the write probe getting writes through it, and in synchronous mode a
//! standby listed and `sync`), and checks with the write probe, which runs on every
//! node for the whole soak:
//! - invariant (a), every round: no write is acknowledged by one node after a
//!   write was sent to another node that acknowledged it (the acknowledged
//!   [sent, ack] intervals of different nodes never overlap, which is "no write
//!   acknowledged by an old primary after the first write sent to its successor"
//!   for every succession, however many happened in a round), and
//!   `WriteProbe::check_no_overlap` for the primary before and after the round;
//! - invariant (b), with synchronous mode: every acknowledged probe row (of the
//!   whole soak) is on the primary at the end of the round.
//!
//! Environment: `TENURE_SOAK_SEED` (default: from the clock; always printed first,
//! so a failure can be replayed), `TENURE_SOAK_ROUNDS` (default 12), and
//! `TENURE_SOAK_FAIL_ROUND=N` (round N fails on purpose right after its fault, to
//! check that a failure cleans up). The fault sequence and its parameters are a
//! function of the seed alone; which node is primary when is not (real timing).
//!
//! `#[ignore]`: `make test` does not run it; `make soak` runs it with
//! `cargo nextest run --profile ci --run-ignored only --test real_soak`. Needs
//! root, `make deps` (etcd-server, etcdctl, postgresql-15, iproute2, nftables,
//! fuse3) and the stand-in example built (nextest builds the examples).

mod common;

use std::time::{Duration, Instant};

use common::{acked_rows_on, etcdctl};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure::testbed::Stopped;
use tenure::testbed::cluster::{ClusterOptions, NodeWatchdog, TestCluster};
use tenure::testbed::probe::{PROBE_TABLE, WriteProbe};
use tenure::testbed::wait_for;

const BOOT: Duration = Duration::from_secs(120);
/// A generous bound for a round's convergence after the heal (a rewind, a
/// watchdog reset and a restart, a replacement synchronous standby).
const CONVERGE: Duration = Duration::from_secs(180);
/// How long a crashed host's armed stand-in may take to fire (W = 3 s, plus FUSE's
/// asynchronous release).
const DEVICE_QUIET: Duration = Duration::from_secs(10);
const DEFAULT_ROUNDS: u64 = 12;

// ----- a small seeded generator (splitmix64, the idea of tests/sim/rng.rs) --------

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[lo, hi]` milliseconds.
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo) + 1))
    }
}

// ----- faults ------------------------------------------------------------------

/// One round's fault. Node parameters are relative to the round's primary (the
/// `k`-th other node), so the sequence of faults depends on the seed only.
#[derive(Clone, Debug)]
enum Fault {
    /// Every process of the primary's host dies; it comes back after `down`
    /// (and never before its armed stand-in has fired).
    PrimaryHostCrash { down: Duration },
    /// The same for the `k`-th replica.
    ReplicaHostCrash { k: usize, down: Duration },
    /// The primary's agent SIGSTOPped for `span`, then SIGCONTed (if its stand-in
    /// reset the host meanwhile, the host is "rebooted": revived and restarted).
    PrimaryAgentFrozen { span: Duration },
    /// SIGKILL of the primary's postmaster (and, with `backends`, every backend).
    PrimaryPostgresKilled { backends: bool },
    /// The primary cut off from every node and every etcd member for `span`.
    PrimaryCutOff { span: Duration },
    /// The primary cut off from the etcd members only for `span`.
    PrimaryCutFromEtcd { span: Duration },
    /// etcd member `member` SIGKILLed, restarted after `span`.
    EtcdMemberStopped { member: usize, span: Duration },
    /// The etcd raft leader SIGKILLed, restarted after `span`.
    EtcdLeaderKilled { span: Duration },
    /// `leader` deleted behind the leader's back (`etcdctl del`).
    LeaderKeyDeleted,
    /// The leader's lease revoked (`etcdctl lease revoke`).
    LeaseRevoked,
}

impl Fault {
    /// Draw a fault. Always the same number of draws, so one round's choice does
    /// not shift the next round's.
    fn draw(rng: &mut Rng) -> Fault {
        let kind = rng.below(10);
        let k = rng.below(2) as usize;
        let member = rng.below(3) as usize;
        let flag = rng.below(2) == 1;
        let down = rng.ms(0, 20_000);
        // "Around ttl" (7 s): from well inside W (3 s) to twice the ttl.
        let frozen = rng.ms(1_000, 14_000);
        let cut = rng.ms(1_000, 20_000);
        let etcd = rng.ms(500, 15_000);
        match kind {
            0 => Fault::PrimaryHostCrash { down },
            1 => Fault::ReplicaHostCrash { k, down },
            2 => Fault::PrimaryAgentFrozen { span: frozen },
            3 => Fault::PrimaryPostgresKilled { backends: flag },
            4 => Fault::PrimaryCutOff { span: cut },
            5 => Fault::PrimaryCutFromEtcd { span: cut },
            6 => Fault::EtcdMemberStopped { member, span: etcd },
            7 => Fault::EtcdLeaderKilled { span: etcd },
            8 => Fault::LeaderKeyDeleted,
            _ => Fault::LeaseRevoked,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Fault::PrimaryHostCrash { .. } => "primary-host-crash",
            Fault::ReplicaHostCrash { .. } => "replica-host-crash",
            Fault::PrimaryAgentFrozen { .. } => "primary-agent-frozen",
            Fault::PrimaryPostgresKilled { .. } => "primary-postgres-killed",
            Fault::PrimaryCutOff { .. } => "primary-cut-off",
            Fault::PrimaryCutFromEtcd { .. } => "primary-cut-from-etcd",
            Fault::EtcdMemberStopped { .. } => "etcd-member-stopped",
            Fault::EtcdLeaderKilled { .. } => "etcd-leader-killed",
            Fault::LeaderKeyDeleted => "leader-key-deleted",
            Fault::LeaseRevoked => "lease-revoked",
        }
    }

    /// The parameters, as printed on the round's line.
    fn params(&self) -> String {
        let s = |d: &Duration| format!("{:.1}s", d.as_secs_f64());
        match self {
            Fault::PrimaryHostCrash { down } => format!("down {}", s(down)),
            Fault::ReplicaHostCrash { k, down } => format!("replica #{k}, down {}", s(down)),
            Fault::PrimaryAgentFrozen { span } => format!("span {}", s(span)),
            Fault::PrimaryPostgresKilled { backends } => {
                format!("backends {}", if *backends { "too" } else { "left" })
            }
            Fault::PrimaryCutOff { span } | Fault::PrimaryCutFromEtcd { span } => {
                format!("span {}", s(span))
            }
            Fault::EtcdMemberStopped { member, span } => format!("etcd{member}, span {}", s(span)),
            Fault::EtcdLeaderKilled { span } => format!("span {}", s(span)),
            Fault::LeaderKeyDeleted | Fault::LeaseRevoked => "-".into(),
        }
    }

    /// Whether the design expects a new primary (the others may still see one,
    /// e.g. a freeze past the watchdog timeout).
    fn expects_failover(&self) -> bool {
        matches!(
            self,
            Fault::PrimaryHostCrash { .. } | Fault::LeaderKeyDeleted | Fault::LeaseRevoked
        )
    }
}

// ----- the soak ------------------------------------------------------------------

/// What the soak carries from round to round.
struct Soak {
    seed: u64,
    sync: bool,
    primary: usize,
    epoch: i64,
    /// Watchdog resets seen (node names), over the whole soak.
    resets: usize,
}

/// One round's outcome, printed as one line.
struct Round {
    before: usize,
    after: usize,
    epoch_changed: bool,
    /// From the fault to the send instant of the new primary's first acknowledged
    /// write (only when the primary changed).
    failover: Option<Duration>,
    /// The longest span in the round with no acknowledged write on any node.
    max_gap: Duration,
    acked: usize,
    /// Nodes whose stand-in reset the host this round.
    resets: Vec<String>,
    /// Acknowledged rows checked on the primary (synchronous mode).
    rows_checked: Option<usize>,
    wall: Duration,
}

fn env_u64(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| format!("{name}={v:?} is not a whole number: {e}")),
        _ => Ok(None),
    }
}

#[test]
#[ignore = "the long real-parts soak: `make soak` runs it"]
fn real_soak_random_faults() {
    let seed = env_u64("TENURE_SOAK_SEED")
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            // Small enough to retype, varied enough between runs.
            (t.as_secs() * 1000 + u64::from(t.subsec_millis())) % 1_000_000_000
        });
    let rounds = env_u64("TENURE_SOAK_ROUNDS")
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or(DEFAULT_ROUNDS);
    let fail_round = env_u64("TENURE_SOAK_FAIL_ROUND").unwrap_or_else(|e| panic!("{e}"));
    println!(
        "real_soak: TENURE_SOAK_SEED={seed} TENURE_SOAK_ROUNDS={rounds} (replay: TENURE_SOAK_SEED={seed} make soak-real)"
    );
    let mut rng = Rng::new(seed);
    let sync = rng.below(2) == 1;

    let mut opts = ClusterOptions::new(env!("CARGO_BIN_EXE_tenure"));
    opts.tag = "soak".into();
    opts.scope = format!("soak-{seed}");
    opts.netns = true;
    opts.watchdog = vec![NodeWatchdog::with_standin("required"); 3];
    opts.synchronous_mode = sync;
    let t_boot = Instant::now();
    let mut c = TestCluster::start(opts).unwrap_or_else(|e| panic!("seed {seed}: test bed: {e}"));
    let boot = (|| -> Result<(usize, i64, WriteProbe), String> {
        c.settled(BOOT)?;
        let p = converge(&mut c, None, sync, Instant::now(), &mut Vec::new())?;
        let probe = c.write_probe(p, Duration::from_millis(20))?;
        let p = converge(&mut c, Some(&probe), sync, Instant::now(), &mut Vec::new())?;
        let (_, epoch) = c.leader_key().ok_or("no leader key after boot")?;
        Ok((p, epoch, probe))
    })();
    let (p, epoch, mut probe) = boot.unwrap_or_else(|e| {
        panic!(
            "seed {seed}: the cluster did not boot: {e}{}",
            logs_tail(&c, 40)
        )
    });
    println!(
        "real_soak: 3 nodes in namespaces, watchdog stand-ins required, synchronous mode {}; \
         {} primary after {:.1} s",
        if sync { "on" } else { "off" },
        c.name(p),
        t_boot.elapsed().as_secs_f64()
    );
    let mut soak = Soak {
        seed,
        sync,
        primary: p,
        epoch,
        resets: 0,
    };
    let mut done: Vec<(Fault, Round)> = Vec::new();

    for round in 1..=rounds {
        let fault = Fault::draw(&mut rng);
        let pre = rng.ms(0, 2_000);
        let fail_here = fail_round == Some(round);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_round(&mut c, &probe, &mut soak, &fault, pre, fail_here)
        }))
        .unwrap_or_else(|p| {
            Err(format!(
                "panicked: {}",
                p.downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| p.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)")
            ))
        });
        match r {
            Ok(r) => {
                println!(
                    "round {round:>2}/{rounds} {:<24} {:<22} primary {} -> {}{} failover {} max write gap {:.2}s, \
                     {} writes acked{}{}, {:.1}s",
                    fault.name(),
                    fault.params(),
                    c.name(r.before),
                    c.name(r.after),
                    if r.epoch_changed {
                        " (new epoch),"
                    } else {
                        ","
                    },
                    r.failover
                        .map(|d| format!("{:.2}s,", d.as_secs_f64()))
                        .unwrap_or_else(|| "-,".into()),
                    r.max_gap.as_secs_f64(),
                    r.acked,
                    r.rows_checked
                        .map(|n| format!(", {n} acked rows all on the primary"))
                        .unwrap_or_default(),
                    if r.resets.is_empty() {
                        String::new()
                    } else {
                        format!(", watchdog reset {}", r.resets.join(" "))
                    },
                    r.wall.as_secs_f64()
                );
                done.push((fault, r));
            }
            Err(e) => {
                let msg = format!(
                    "real_soak FAILED: TENURE_SOAK_SEED={seed} round {round}/{rounds}, fault {} ({}), \
                     synchronous mode {}: {e}\n(replay: TENURE_SOAK_SEED={seed} TENURE_SOAK_ROUNDS={round} make soak-real){}",
                    fault.name(),
                    fault.params(),
                    if sync { "on" } else { "off" },
                    logs_tail(&c, 40)
                );
                eprintln!("{msg}");
                // Clean up before the panic message: the probe's threads first, then
                // every process and namespace the bed started.
                probe.stop(Duration::from_secs(2));
                drop(probe);
                drop(c);
                panic!("{msg}");
            }
        }
    }
    probe.stop(Duration::from_secs(2));
    summary(&soak, &done, &c);
}

fn summary(soak: &Soak, done: &[(Fault, Round)], c: &TestCluster) {
    let n = done.len().max(1) as f64;
    let walls: Vec<f64> = done.iter().map(|(_, r)| r.wall.as_secs_f64()).collect();
    let failovers: Vec<f64> = done
        .iter()
        .filter_map(|(_, r)| r.failover.map(|d| d.as_secs_f64()))
        .collect();
    let unexpected: Vec<String> = done
        .iter()
        .enumerate()
        .filter(|(_, (f, r))| r.epoch_changed && !f.expects_failover())
        .map(|(i, (f, _))| format!("round {} {}", i + 1, f.name()))
        .collect();
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for (f, _) in done {
        match kinds.iter_mut().find(|(k, _)| *k == f.name()) {
            Some((_, n)) => *n += 1,
            None => kinds.push((f.name(), 1)),
        }
    }
    println!(
        "real_soak summary: seed {}, synchronous mode {}, {} rounds passed; faults: {}",
        soak.seed,
        if soak.sync { "on" } else { "off" },
        done.len(),
        kinds
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "real_soak summary: wall time per round mean {:.1}s, max {:.1}s; {} failovers (max {:.2}s); \
         {} watchdog resets; {} writes acknowledged; primary at the end {}",
        walls.iter().sum::<f64>() / n,
        walls.iter().cloned().fold(0.0, f64::max),
        failovers.len(),
        failovers.iter().cloned().fold(0.0, f64::max),
        soak.resets,
        done.iter().map(|(_, r)| r.acked).sum::<usize>(),
        c.name(soak.primary)
    );
    if !unexpected.is_empty() {
        println!(
            "real_soak summary: a new epoch after a fault that needs none (not a safety \
             violation): {}",
            unexpected.join(", ")
        );
    }
}

/// Apply `fault`, heal, converge, check. Errors carry what went wrong; the
/// caller adds the seed, the round and the logs.
fn run_round(
    c: &mut TestCluster,
    probe: &WriteProbe,
    soak: &mut Soak,
    fault: &Fault,
    pre: Duration,
    fail_here: bool,
) -> Result<Round, String> {
    let t_round = Instant::now();
    let before = soak.primary;
    let others: Vec<usize> = (0..c.node_count()).filter(|&i| i != before).collect();
    let mut resets = Vec::new();
    // A varying phase relative to the agents' loops.
    std::thread::sleep(pre);
    let t_fault = Instant::now();
    let deliberate = || -> Result<(), String> {
        if fail_here {
            Err("deliberate failure (TENURE_SOAK_FAIL_ROUND) while the fault is in force".into())
        } else {
            Ok(())
        }
    };
    match fault {
        Fault::PrimaryHostCrash { down } => {
            c.host_crash(before)?;
            deliberate()?;
            std::thread::sleep(*down);
            reboot(c, before, &mut resets)?;
        }
        Fault::ReplicaHostCrash { k, down } => {
            let r = others[*k % others.len()];
            c.host_crash(r)?;
            deliberate()?;
            std::thread::sleep(*down);
            reboot(c, r, &mut resets)?;
        }
        Fault::PrimaryAgentFrozen { span } => {
            let pid = c
                .agent_pid(before)
                .ok_or_else(|| format!("{} has no agent to freeze", c.name(before)))?;
            let frozen = Stopped::stop(vec![pid])?;
            deliberate()?;
            std::thread::sleep(*span);
            // SIGCONT before anything reaps it: a pid the stand-in killed is still
            // our unreaped child (a zombie), never someone else's process.
            frozen.resume();
        }
        Fault::PrimaryPostgresKilled { backends } => {
            let pm = c
                .postmaster_pid(before)
                .ok_or_else(|| format!("{} runs no postmaster", c.name(before)))?;
            let pids = c.pg_pids(before);
            let _ = kill(Pid::from_raw(pm), Signal::SIGKILL);
            if *backends {
                for pid in pids.into_iter().filter(|&x| x != pm) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            deliberate()?;
        }
        Fault::PrimaryCutOff { span } => {
            c.cut(before)?;
            deliberate()?;
            std::thread::sleep(*span);
            c.heal(before)?;
        }
        Fault::PrimaryCutFromEtcd { span } => {
            c.cut_from_etcd(before)?;
            deliberate()?;
            std::thread::sleep(*span);
            c.heal(before)?;
        }
        Fault::EtcdMemberStopped { member, span } => {
            let etcd = c.etcd().ok_or("no etcd")?;
            etcd.kill_member(*member);
            deliberate()?;
            std::thread::sleep(*span);
            restart_member(c, *member)?;
        }
        Fault::EtcdLeaderKilled { span } => {
            let etcd = c.etcd().ok_or("no etcd")?;
            let leader = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
                etcd.leader()
            })
            .ok_or("no single etcd raft leader to kill")?;
            etcd.kill_member(leader);
            deliberate()?;
            std::thread::sleep(*span);
            restart_member(c, leader)?;
        }
        Fault::LeaderKeyDeleted => {
            let n = c.delete_key("leader")?;
            if n != 1 {
                return Err(format!("`etcdctl del leader` deleted {n} keys, not 1"));
            }
            deliberate()?;
        }
        Fault::LeaseRevoked => {
            let kv = c.get_kv("leader").ok_or("no leader key to revoke")?;
            if kv.lease == 0 {
                return Err(format!("the leader key has no lease: {kv:?}"));
            }
            etcdctl(c, &["lease", "revoke", &format!("{:x}", kv.lease)])?;
            deliberate()?;
        }
    }
    let t_heal = Instant::now();
    let after = converge(c, Some(probe), soak.sync, t_heal, &mut resets)?;
    let (_, epoch) = c.leader_key().ok_or("no leader key after the round")?;

    // Invariant (a).
    no_overlapping_acks(c, probe)?;
    let failover = if after != before {
        probe.check_no_overlap(before, after, t_fault)?;
        probe
            .first_ack_after(after, t_fault)
            .map(|a| a.sent.saturating_duration_since(t_fault))
    } else {
        None
    };
    // Invariant (b).
    let rows_checked = if soak.sync {
        let (acked, missing) = acked_rows_on(c, probe, after)?;
        if !missing.is_empty() {
            return Err(format!(
                "invariant (b): {} of {acked} acknowledged probe rows are not on the primary {}; \
                 first (node, seq): {:?}",
                missing.len(),
                c.name(after),
                &missing[..missing.len().min(10)]
            ));
        }
        Some(acked)
    } else {
        None
    };
    let (acked, max_gap) = acks_in(probe, c.node_count(), t_round);
    soak.resets += resets.len();
    let epoch_changed = epoch != soak.epoch;
    soak.primary = after;
    soak.epoch = epoch;
    Ok(Round {
        before,
        after,
        epoch_changed,
        failover,
        max_gap,
        acked,
        resets,
        rows_checked,
        wall: t_round.elapsed(),
    })
}

/// Bring node `i`'s host back after a crash: wait until its stand-in is no longer
/// armed (an armed device fires `W` after the crash and would "reset" the rebooted
/// host), revive it if it fired, start the agent.
fn reboot(c: &mut TestCluster, i: usize, resets: &mut Vec<String>) -> Result<(), String> {
    let quiet = wait_for(DEVICE_QUIET, Duration::from_millis(20), || {
        (!device_armed(c, i)).then_some(())
    });
    if quiet.is_none() {
        return Err(format!(
            "{}'s stand-in still armed {DEVICE_QUIET:?} after its host crashed: {}",
            c.name(i),
            c.standin(i).map(|s| s.events()).unwrap_or_default()
        ));
    }
    if c.standin(i).is_some_and(|s| s.fired().is_some()) {
        resets.push(c.name(i).to_string());
        c.standin_mut(i)
            .ok_or("stand-in vanished")?
            .revive()
            .map_err(|e| format!("revive {}'s stand-in: {e}", c.name(i)))?;
    }
    c.start_agent(i)
}

/// Whether node `i`'s stand-in is armed: the last of its pings, disarms, firings
/// and revivals is a ping (every activation pings; only those end one).
fn device_armed(c: &TestCluster, i: usize) -> bool {
    let Some(s) = c.standin(i) else {
        return false;
    };
    s.event_list()
        .iter()
        .rev()
        .find(|(_, ev, d)| {
            ev == "ping" || ev == "disarm" || ev == "fire" || (ev == "control" && d == "revive")
        })
        .is_some_and(|(_, ev, _)| ev == "ping")
}

fn restart_member(c: &mut TestCluster, j: usize) -> Result<(), String> {
    let etcd = c.etcd().ok_or("no etcd")?;
    etcd.start_member(j, "existing")?;
    if !etcd.wait_healthy(Duration::from_secs(30)) {
        return Err(format!("etcd{j} restarted, etcd not healthy within 30 s"));
    }
    Ok(())
}

/// Wait until the cluster converges: exactly one primary, the leader key naming
/// it, every other node a streaming replica, (with `probe`) a probe write
/// acknowledged by it after `since`, (with `sync`) a synchronous standby listed and
/// `sync`. An agent killed by its stand-in is restarted (its host "rebooted"); an
/// agent that exits on its own fails the round. Returns the primary.
fn converge(
    c: &mut TestCluster,
    probe: Option<&WriteProbe>,
    sync: bool,
    since: Instant,
    resets: &mut Vec<String>,
) -> Result<usize, String> {
    let t0 = Instant::now();
    let mut last: String;
    loop {
        for i in 0..c.node_count() {
            if c.agent_pid(i).is_some()
                && let Some(st) = c.agent_exited(i)
            {
                // The stand-in writes its firing record just after the kill.
                let fired = wait_for(Duration::from_secs(3), Duration::from_millis(20), || {
                    c.standin(i)?.fired()
                });
                if fired.is_none() {
                    return Err(format!(
                        "the agent of {} exited on its own: {st}",
                        c.name(i)
                    ));
                }
                reboot(c, i, resets)?;
            }
        }
        match converged(c, probe, sync, since) {
            Ok(p) => {
                // Stable: the same single primary a few samples in a row.
                let stable = (0..5).all(|_| {
                    std::thread::sleep(Duration::from_millis(100));
                    c.primaries() == vec![p]
                });
                if stable {
                    return Ok(p);
                }
                last = "the primary did not stay the only one".into();
            }
            Err(why) => last = why,
        }
        if t0.elapsed() >= CONVERGE {
            return Err(format!(
                "not converged within {CONVERGE:?}: {last}; {}",
                cluster_state(c)
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One look: `Ok(primary)` if converged, else what is missing.
fn converged(
    c: &TestCluster,
    probe: Option<&WriteProbe>,
    sync: bool,
    since: Instant,
) -> Result<usize, String> {
    let prim = c.primaries();
    let [p] = prim[..] else {
        return Err(format!("primaries {:?}", names(c, &prim)));
    };
    match c.try_leader_key() {
        Ok(Some((name, _))) if name == c.name(p) => {}
        other => return Err(format!("{} is primary, leader key {other:?}", c.name(p))),
    }
    let lagging: Vec<usize> = (0..c.node_count())
        .filter(|&i| i != p && !c.is_streaming_replica(i))
        .collect();
    if !lagging.is_empty() {
        return Err(format!("not streaming: {:?}", names(c, &lagging)));
    }
    if let Some(probe) = probe {
        let first = probe
            .first_ack_after(p, since)
            .ok_or_else(|| format!("{} acknowledged no probe write yet", c.name(p)))?;
        // "Streaming" alone is not enough: a replica whose WAL forked off the new
        // timeline reconnects, shows `streaming` for a moment and fails again.
        // A row the primary acknowledged after the heal, present on every
        // replica, shows each one really replays the primary's WAL.
        let q = format!(
            "SELECT count(*) FROM {PROBE_TABLE} WHERE node = {p} AND seq = {}",
            first.seq
        );
        let behind: Vec<usize> = (0..c.node_count())
            .filter(|&i| i != p && c.sql_one(i, &q).ok().as_deref() != Some("1"))
            .collect();
        if !behind.is_empty() {
            return Err(format!(
                "{:?} do not have {}'s probe row #{} (acknowledged after the heal)",
                names(c, &behind),
                c.name(p),
                first.seq
            ));
        }
    }
    if sync {
        let (leader, standby) = sync_key(c).ok_or("no readable sync key")?;
        let s = standby.ok_or("the sync key lists no standby")?;
        if leader != c.name(p) {
            return Err(format!("sync key names leader {leader}"));
        }
        let state = c.sql_one(
            p,
            &format!("SELECT sync_state FROM pg_stat_replication WHERE application_name = '{s}'"),
        )?;
        if state != "sync" {
            return Err(format!("listed standby {s} is {state}"));
        }
    }
    Ok(p)
}

fn names(c: &TestCluster, v: &[usize]) -> Vec<String> {
    v.iter().map(|&i| c.name(i).to_string()).collect()
}

/// What each node says, for a convergence failure.
fn cluster_state(c: &TestCluster) -> String {
    let nodes: Vec<String> = (0..c.node_count())
        .map(|i| {
            format!(
                "{}: agent {}, /primary {:?}, /replica {:?}, recovery {:?}, streaming {:?}, stand-in fired {:?}",
                c.name(i),
                c.agent_pid(i).map_or("none".into(), |p| p.to_string()),
                c.api_get(i, "/primary"),
                c.api_get(i, "/replica"),
                c.is_in_recovery(i),
                c.is_streaming(i),
                c.standin(i).and_then(|s| s.fired())
            )
        })
        .collect();
    format!(
        "leader key {:?}, sync key {:?}; {}",
        c.try_leader_key(),
        sync_key(c),
        nodes.join("; ")
    )
}

/// The `sync` key: `(leader, sync_standby)`.
fn sync_key(c: &TestCluster) -> Option<(String, Option<String>)> {
    let v: serde_json::Value = serde_json::from_str(&c.get_key("sync")?).ok()?;
    Some((
        v.get("leader")?.as_str()?.to_string(),
        v.get("sync_standby")
            .and_then(|s| s.as_str())
            .map(String::from),
    ))
}

/// Invariant (a) for every succession at once: two acknowledged writes on
/// different nodes never overlap — if `a` (node x) was sent before `b` (node y),
/// `a` was acknowledged before `b` was sent. (An old primary's write acknowledged
/// after its successor's first acknowledged write was sent is exactly such an
/// overlap.) Checked over the whole soak, so nothing slips between two rounds.
fn no_overlapping_acks(c: &TestCluster, probe: &WriteProbe) -> Result<(), String> {
    let mut all: Vec<(Instant, Instant, usize, u64)> = (0..c.node_count())
        .flat_map(|k| {
            probe
                .attempts(k)
                .into_iter()
                .filter_map(move |a| Some((a.sent, a.acked?, k, a.seq)))
        })
        .collect();
    all.sort_by_key(|&(sent, ..)| sent);
    // Per node, its latest acknowledgement so far: (ack, seq).
    let mut latest: Vec<Option<(Instant, u64)>> = vec![None; c.node_count()];
    for (sent, ack, k, seq) in all {
        for (x, l) in latest.iter().enumerate() {
            if x != k
                && let Some((x_ack, x_seq)) = *l
                && x_ack >= sent
            {
                return Err(format!(
                    "invariant (a): {} acknowledged write #{x_seq} {:.3} s after write #{seq} \
                     was sent to {}, which acknowledged it",
                    c.name(x),
                    x_ack.duration_since(sent).as_secs_f64(),
                    c.name(k)
                ));
            }
        }
        if latest[k].is_none_or(|(a, _)| a < ack) {
            latest[k] = Some((ack, seq));
        }
    }
    Ok(())
}

/// Writes acknowledged since `from` (any node), and the longest span from `from`
/// to now without an acknowledgement.
fn acks_in(probe: &WriteProbe, nodes: usize, from: Instant) -> (usize, Duration) {
    let mut acks: Vec<Instant> = (0..nodes)
        .flat_map(|k| probe.attempts(k).into_iter().filter_map(|a| a.acked))
        .filter(|&t| t >= from)
        .collect();
    acks.sort();
    let now = Instant::now();
    let mut prev = from;
    let mut gap = Duration::ZERO;
    for &t in acks.iter().chain(std::iter::once(&now)) {
        gap = gap.max(t.saturating_duration_since(prev));
        prev = t;
    }
    (acks.len(), gap)
}

/// The last `lines` lines of every agent's log, a run of lines that differ only
/// in their `[<secs>s]` stamp shown once with its count (an agent repeats its
/// loop's sentence every `loop_wait`, which would push the cause out of a plain
/// tail). Set `TENURE_KEEP=1` to keep the whole logs.
fn logs_tail(c: &TestCluster, lines: usize) -> String {
    let mut out = String::new();
    for i in 0..c.node_count() {
        let log = c.agent_log(i);
        let mut runs: Vec<(&str, &str, usize)> = Vec::new();
        for l in log.lines() {
            let body = l.split_once("s] ").map_or(l, |(_, b)| b);
            match runs.last_mut() {
                Some((_, b, n)) if *b == body => *n += 1,
                _ => runs.push((l, body, 1)),
            }
        }
        let from = runs.len().saturating_sub(lines);
        out.push_str(&format!(
            "\n----- {} ({}) -----\n",
            c.name(i),
            c.log_path(i).display()
        ));
        for (first, _, n) in &runs[from..] {
            out.push_str(first);
            if *n > 1 {
                out.push_str(&format!("   [and {} more times]", n - 1));
            }
            out.push('\n');
        }
    }
    out.push_str("\n(TENURE_KEEP=1 keeps the scratch directory with the whole logs)");
    out
}
