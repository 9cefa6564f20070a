//! Benchmark: what a running agent costs its host. A real 3-node test cluster (3 etcd
//! members, 3 agents built in this profile, PostgreSQL 15; DESIGN §6's timing: ttl 7,
//! loop 0.5 s), settled, then every agent process sampled once a second for 60 s
//! (`TENURE_BENCH_SECONDS`) from /proc:
//!
//! - memory: `VmRSS` (min / median / max over the samples) and `VmHWM` (the peak,
//!   since the agent started, boot included);
//! - threads: `Threads` of /proc/<pid>/status (DESIGN §5: must be 1);
//! - CPU: utime + stime of /proc/<pid>/stat, as CPU-milliseconds per wall second
//!   over the whole window, leader and replicas apart;
//! - etcd requests per loop: every gRPC message etcd received during the window
//!   (`grpc_server_msg_received_total` on each member's /metrics, summed over the 3
//!   members, per method), divided by the loops the agents ran in it (window /
//!   `loop_wait` per agent: the ticks are on a fixed grid). Nothing else talks to
//!   etcd during the window (the bench reads only /proc).
//!
//! `TENURE_BENCH_WRITE_LOAD=1` writes a row on the primary every 100 ms through the
//! window (each write a `psql` child; the positions in the member keys and the
//! leader's `status` key then move every loop), to count etcd writes per loop under
//! write load (issue 13 item 5). Off by default.
//!
//! The agent process alone is measured, not its PostgreSQL. Needs root, etcd and
//! PostgreSQL 15 (skips with a message otherwise). Fails only if the cluster does not
//! settle or an agent dies.

#[path = "harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use harness::Table;
use tenure::testbed::cluster::ClusterOptions;
use tenure::testbed::etcd::http_get_local;

fn main() {
    println!(
        "agent_footprint: one agent's cost on its host ({})",
        harness::machine_line()
    );
    if let Some(why) = harness::real_parts_missing() {
        println!("agent_footprint: SKIPPED: {why}");
        return;
    }
    if let Err(e) = run() {
        eprintln!("agent_footprint: broken benchmark: {e}");
        std::process::exit(1);
    }
}

/// One /proc sample of a process.
#[derive(Clone, Copy, Debug)]
struct Sample {
    rss_kb: u64,
    /// `RssAnon` / `RssFile`: the agent's own memory, and the mapped pages of its
    /// binary and libraries (clean, shared with every process mapping them).
    anon_kb: u64,
    file_kb: u64,
    hwm_kb: u64,
    threads: u64,
    /// utime + stime, clock ticks.
    cpu_ticks: u64,
    /// Time on a CPU, ns, summed over the threads' `/proc/<pid>/task/*/schedstat`
    /// (the scheduler's own account: the ticks above are 10 ms apart, too coarse
    /// for an agent that runs ~1 ms a second).
    run_ns: u64,
}

fn sample(pid: u32) -> Result<Sample, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let field = |name: &str| -> Result<u64, String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/status has no {name}"))
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may hold spaces and parentheses): the
    // state is field 3, so utime (14) and stime (15) are at 11 and 12 from there.
    let after = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("/proc/{pid}/stat: no command name"))?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let num = |i: usize| -> Result<u64, String> {
        f.get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: field {} unreadable", i + 3))
    };
    Ok(Sample {
        rss_kb: field("VmRSS:")?,
        anon_kb: field("RssAnon:")?,
        file_kb: field("RssFile:")?,
        hwm_kb: field("VmHWM:")?,
        threads: field("Threads:")?,
        cpu_ticks: num(11)? + num(12)?,
        run_ns: harness::run_ns(pid)?,
    })
}

/// `grpc_server_msg_received_total` per `service/method`, summed over the members.
fn etcd_messages(ports: &[u16]) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    for &port in ports {
        let text = http_get_local(port, "/metrics")
            .ok_or_else(|| format!("etcd on port {port}: no /metrics"))?;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("grpc_server_msg_received_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let label = |k: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                    .map(|v| v.trim_end_matches('"').to_string())
                    .unwrap_or_default()
            };
            let service = label("grpc_service");
            let short = service.rsplit('.').next().unwrap_or(&service).to_string();
            let v: f64 = value.trim().parse().unwrap_or(0.0);
            *out.entry(format!("{short}/{}", label("grpc_method")))
                .or_insert(0.0) += v;
        }
    }
    Ok(out)
}

fn run() -> Result<(), String> {
    let seconds = harness::env_num("TENURE_BENCH_SECONDS", 60);
    let write_load = harness::env_num("TENURE_BENCH_WRITE_LOAD", 0) != 0;
    // `TENURE_BENCH_AGENT`: another build of the agent (a release-profile change,
    // before/after), same bench and test bed.
    let agent = harness::agent_binary();
    println!("agent binary: {}", agent.display());
    let mut opts = ClusterOptions::new(agent);
    opts.tag = "bench-footprint".into();
    opts.scope = "bench-footprint".into();
    opts.log_level = Some("info".into());
    let loop_wait = opts.loop_wait;
    let (mut c, p) = harness::start_settled(opts, "")?;
    // Let the first loops' one-off work (slots, pg_hba, sync names) pass.
    std::thread::sleep(Duration::from_secs(5));
    c.check_agents()?;

    let n = c.node_count();
    let pids: Vec<u32> = (0..n)
        .map(|i| {
            c.agent_pid(i)
                .ok_or(format!("agent of {} not running", c.name(i)))
        })
        .collect::<Result<_, _>>()?;
    let etcd_ports: Vec<u16> = c
        .etcd()
        .map(|e| e.members.iter().map(|m| m.client_port).collect())
        .unwrap_or_default();

    let msgs0 = etcd_messages(&etcd_ports)?;
    let t0 = Instant::now();
    let first: Vec<Sample> = pids.iter().map(|&p| sample(p)).collect::<Result<_, _>>()?;
    let mut series: Vec<Vec<Sample>> = first.iter().map(|s| vec![*s]).collect();
    let mut next = t0;
    let mut row = 0i64;
    while t0.elapsed() < Duration::from_secs(seconds) {
        next += Duration::from_secs(1);
        while write_load && Instant::now() + Duration::from_millis(100) < next {
            row += 1;
            c.write_row(p, row)?;
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        for (i, &pid) in pids.iter().enumerate() {
            series[i].push(sample(pid)?);
        }
    }
    let window = t0.elapsed();
    let msgs1 = etcd_messages(&etcd_ports)?;
    c.check_agents()?;
    let p_end = c.primary();
    if p_end != Some(p) {
        return Err(format!(
            "the primary changed during the window ({} -> {:?}): not a steady state{}",
            c.name(p),
            p_end.map(|q| c.name(q).to_string()),
            c.logs_tail(20)
        ));
    }

    let hz = harness::ticks_per_second();
    let mut t = Table::new(&[
        "agent",
        "role",
        "RSS min",
        "RSS median",
        "RSS max",
        "anon median",
        "file median",
        "VmHWM",
        "threads",
        "CPU ms/s",
        "schedstat ms/s",
    ]);
    for (i, s) in series.iter().enumerate() {
        let mut rss: Vec<u64> = s.iter().map(|x| x.rss_kb).collect();
        rss.sort_unstable();
        let median = |f: fn(&Sample) -> u64| {
            let mut v: Vec<u64> = s.iter().map(f).collect();
            v.sort_unstable();
            v[v.len() / 2]
        };
        let (tmin, tmax) = (
            s.iter().map(|x| x.threads).min().unwrap_or(0),
            s.iter().map(|x| x.threads).max().unwrap_or(0),
        );
        let cpu = match (s.first(), s.last()) {
            (Some(a), Some(b)) => {
                (b.cpu_ticks.saturating_sub(a.cpu_ticks)) as f64 / hz * 1000.0
                    / window.as_secs_f64()
            }
            _ => 0.0,
        };
        let run = match (s.first(), s.last()) {
            (Some(a), Some(b)) => {
                b.run_ns.saturating_sub(a.run_ns) as f64 / 1e6 / window.as_secs_f64()
            }
            _ => 0.0,
        };
        let kb = |v: u64| format!("{:.1} MiB", v as f64 / 1024.0);
        t.row(vec![
            c.name(i).to_string(),
            if i == p { "leader" } else { "replica" }.to_string(),
            kb(rss[0]),
            kb(rss[rss.len() / 2]),
            kb(rss[rss.len() - 1]),
            kb(median(|x| x.anon_kb)),
            kb(median(|x| x.file_kb)),
            kb(s.last().map_or(0, |x| x.hwm_kb)),
            if tmin == tmax {
                tmin.to_string()
            } else {
                format!("{tmin}..{tmax}")
            },
            format!("{cpu:.2}"),
            format!("{run:.3}"),
        ]);
    }
    println!();
    println!(
        "agent processes, {} samples over {:.1} s (CPU: utime+stime / wall time, {} ticks/s; \
         schedstat: the scheduler's run time, ns)",
        series[0].len(),
        window.as_secs_f64(),
        hz
    );
    print!("{}", t.render());

    let loops = n as f64 * window.as_secs_f64() / loop_wait.as_secs_f64();
    let mut m = Table::new(&["etcd gRPC method", "messages", "per agent loop"]);
    let mut total = 0.0;
    for (k, v1) in &msgs1 {
        let d = v1 - msgs0.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            total += d;
            m.row(vec![
                k.clone(),
                format!("{d:.0}"),
                format!("{:.2}", d / loops),
            ]);
        }
    }
    m.row(vec![
        "all".into(),
        format!("{total:.0}"),
        format!("{:.2}", total / loops),
    ]);
    println!();
    if write_load {
        println!("write load: {row} rows written on the primary in the window");
    }
    println!(
        "etcd requests (gRPC messages received by the 3 members) over {:.0} agent loops \
         ({n} agents x {:.1} s / loop_wait {:.1} s)",
        loops,
        window.as_secs_f64(),
        loop_wait.as_secs_f64()
    );
    print!("{}", m.render());
    Ok(())
}
