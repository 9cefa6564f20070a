//! Benchmark: the etcd round trips of one loop, against a real 3-member etcd 3.4 on
//! loopback (the test bed's `EtcdCluster`, `--election-timeout=500`).
//!
//! - The confirmed renewal (`Etcd::confirmed_renew`, DESIGN §1 step 2): a keepalive on
//!   a fresh stream (two keepalives: etcd-client answers the first itself) and then a
//!   linearizable read of `leader`. Timed back to back (default 2000,
//!   `TENURE_BENCH_RENEWALS`), and paced at the agent's rhythm (one every 0.5 s,
//!   default 100, `TENURE_BENCH_PACED`), since an idle connection between renewals
//!   is what the agent really sees.
//! - The keepalive alone (`keep_alive_once`), to split the renewal's cost.
//! - The cluster read (`Etcd::read_cluster`: one linearizable range over the scope,
//!   parsed into a `ClusterView`) with 3 and with 30 member keys, plus `leader`,
//!   `initialize`, `config` and a `history` of 3 entries (default 1000 reads each,
//!   `TENURE_BENCH_READS`).
//!
//! The client runs as the agent runs it: one current-thread tokio runtime, every call
//! `block_on` with a deadline. Fails only when etcd does not start or a call errs
//! against a healthy cluster (counted and reported; a renewal that did not count
//! fails the benchmark, since nothing here should make one fail).

#[path = "harness.rs"]
mod harness;

use std::time::{Duration, Instant as StdInstant};

use harness::{STATS_HEAD, Stats, Table, stats_row};
use tenure::clock;
use tenure::core::model::{MemberInfo, RenewalOutcome, Tags};
use tenure::dcs::encode_member;
use tenure::testbed::etcdkv;

const PREFIX: &str = "/service/bench/";
const CALL_LIMIT: Duration = Duration::from_secs(2);

fn member_json(name: &str, role: &str) -> String {
    encode_member(&MemberInfo {
        conn_url: format!("postgres://127.0.0.1:25432/postgres?application_name={name}"),
        api_url: "http://127.0.0.1:28008".into(),
        state: "running".into(),
        role: role.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        xlog_location: 50_331_648,
        receive_lsn: (role != "primary").then_some(50_331_648),
        replay_lsn: (role != "primary").then_some(50_331_648),
        replication_state: (role != "primary").then(|| "streaming".into()),
        timeline: 2,
        sysid: Some(7_298_031_012_345_678_901),
        tags: Tags::default(),
        epoch: Some(12),
        watchdog_timeout: None,
        leader_lease: (role == "primary").then_some(0x694d_8b2f_1a2b_3c4d),
        leader_ttl: (role == "primary").then_some(30),
        leader_ttl_seen: Some(30),
        poll_window: Some(Duration::from_millis(3_000)),
        pg_healthy: true,
        released: None,
        lacks_acquire_record: false,
        parse_error: None,
    })
}

fn main() {
    harness::main_with_etcd("renewal", "etcd round trips of the loop", run);
}

fn run(dir: &std::path::Path) -> Result<(), String> {
    let renewals = harness::env_num("TENURE_BENCH_RENEWALS", 2000) as usize;
    let paced = harness::env_num("TENURE_BENCH_PACED", 100) as usize;
    let reads = harness::env_num("TENURE_BENCH_READS", 1000) as usize;

    let (etcd, rt, mut client) = harness::etcd_with_client(dir, PREFIX, CALL_LIMIT)?;
    let endpoints = etcd.endpoints();
    let deadline = || clock::now().add(CALL_LIMIT);

    // The leader key, as the acquire txn writes it.
    let (lease, epoch) = match client.acquire_unbound(&rt, "pg1", 7, deadline()) {
        tenure::core::model::AcquireOutcome::Won { lease, epoch, .. } => (lease, epoch),
        other => return Err(format!("acquire: {other:?}")),
    };

    let mut renew = |n: usize, pause: Duration| -> Result<Vec<Duration>, String> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let t0 = StdInstant::now();
            let r = client.confirmed_renew(&rt, lease, epoch, "pg1", deadline());
            let took = t0.elapsed();
            if !matches!(r.outcome, RenewalOutcome::Counted { .. }) {
                return Err(format!("renewal {i} did not count: {:?}", r.outcome));
            }
            out.push(took);
            if !pause.is_zero() {
                std::thread::sleep(pause.saturating_sub(took));
            }
        }
        Ok(out)
    };
    renew(50, Duration::ZERO)?; // warm-up: connections to every member, code paths
    let back_to_back = renew(renewals, Duration::ZERO)?;
    let paced_times = renew(paced, Duration::from_millis(500))?;

    let mut keepalives = Vec::with_capacity(renewals / 2);
    for _ in 0..renewals / 2 {
        let t0 = StdInstant::now();
        client
            .keep_alive_once(&rt, lease, deadline())
            .map_err(|e| format!("keepalive: {e}"))?;
        keepalives.push(t0.elapsed());
    }

    // The rest of a scope: initialize, config, history, member keys (bound to a lease).
    let put = |suffix: &str, value: &str| {
        etcdkv::put(&endpoints, &format!("{PREFIX}{suffix}"), value, CALL_LIMIT)
    };
    put("initialize", "7391528044917362913")?;
    put(
        "config",
        r#"{"ttl":7,"loop_wait":0.5,"retry_timeout":0.25,"maximum_lag_on_failover":1048576}"#,
    )?;
    put(
        "history",
        r#"[[1,50331648,"no recovery target specified","2026-11-01T10:00:00+00:00","pg2"],[2,67108864,"no recovery target specified","2026-11-01T10:05:00+00:00","pg3"],[3,83886080,"no recovery target specified","2026-11-01T10:09:00+00:00","pg1"]]"#,
    )?;
    let (member_lease, _) = client
        .grant(&rt, 7, deadline())
        .map_err(|e| format!("grant: {e}"))?;
    let mut read =
        |members: usize, sizes: &mut Vec<(usize, usize)>| -> Result<Vec<Duration>, String> {
            for i in 1..=members {
                let name = format!("pg{i}");
                let role = if i == 1 { "primary" } else { "replica" };
                client
                    .put_member(
                        &rt,
                        &name,
                        &member_json(&name, role),
                        member_lease,
                        deadline(),
                    )
                    .map_err(|e| format!("put member: {e}"))?;
            }
            // The lease must outlive the reads (7 s TTL).
            client
                .keep_alive_once(&rt, member_lease, deadline())
                .map_err(|e| format!("member lease: {e}"))?;
            let v = client
                .read_cluster(&rt, deadline())
                .map_err(|e| format!("read: {e}"))?;
            if v.members.len() != members || v.leader.is_none() || v.history.len() != 3 {
                return Err(format!(
                    "read_cluster saw {} members, leader {:?}, {} history entries",
                    v.members.len(),
                    v.leader,
                    v.history.len()
                ));
            }
            sizes.push((members, member_json("pg10", "replica").len()));
            let mut out = Vec::with_capacity(reads);
            let mut last_keepalive = StdInstant::now();
            for _ in 0..reads {
                if last_keepalive.elapsed() > Duration::from_secs(2) {
                    client
                        .keep_alive_once(&rt, member_lease, deadline())
                        .map_err(|e| format!("member lease: {e}"))?;
                    last_keepalive = StdInstant::now();
                }
                let t0 = StdInstant::now();
                let v = client
                    .read_cluster(&rt, deadline())
                    .map_err(|e| format!("read: {e}"))?;
                out.push(t0.elapsed());
                std::hint::black_box(v);
            }
            Ok(out)
        };
    let mut sizes = Vec::new();
    let reads3 = read(3, &mut sizes)?;
    let reads30 = read(30, &mut sizes)?;
    drop(etcd);

    let mut t = Table::new(&STATS_HEAD);
    let rows: [(&str, &[Duration]); 5] = [
        ("confirmed renewal, back to back", &back_to_back),
        ("confirmed renewal, one per 0.5 s", &paced_times),
        ("keepalive alone (fresh stream)", &keepalives),
        ("read_cluster, 3 member keys", &reads3),
        ("read_cluster, 30 member keys", &reads30),
    ];
    for (name, d) in rows {
        if let Some(s) = Stats::of_durations(d) {
            t.row(stats_row(name, &s));
        }
    }
    println!();
    println!("etcd 3.4 (3 members on loopback), one current-thread runtime, wall time per call");
    print!("{}", t.render());
    if let Some((_, bytes)) = sizes.first() {
        println!(
            "(a member key's value is {bytes} bytes of JSON; the scope also holds leader, \
             initialize, config and a 3-entry history)"
        );
    }
    Ok(())
}
