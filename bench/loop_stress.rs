//! Benchmark: does the loop keep its schedule on a loaded host, what does it
//! allocate per iteration, and what does it cost at rest (issue 13 items 1 and 2).
//!
//! A real 3-node test cluster (3 etcd members, 3 agents, PostgreSQL 15; DESIGN §6's
//! timing: ttl 7, loop 0.5 s, retry 0.25 s; systemd's watchdog as the pet, a
//! test-owned notify socket with `WATCHDOG_USEC` 3 s, so every counted renewal is
//! followed by a pet) per run. Each agent writes its own per-iteration trace
//! (`TENURE_LOOP_TRACE`, src/agent/looptrace.rs): how late each tick started against
//! its slot on the renewal grid, the renewal round trip, the renewal's send → the
//! pet, whether the iteration overran `P` (+ `R`) or fell a whole period behind, the
//! thread's CPU time per phase, page faults and — with an agent built with the
//! `count-allocs` feature — heap allocations. The bench reads those traces: what the
//! agent measured on its own clock, not a guess from outside.
//!
//! Runs (`TENURE_BENCH_STRESS_RUNS`, comma-separated; default
//! `idle,stress,stress-rt-mlock`):
//! - `idle`: nothing else on the host (but other engineers' work: the load average
//!   is printed);
//! - `stress`: `stress-ng --cpu 2 --io 1 --vm 1 --vm-bytes 20%` on the host for the
//!   whole window, the agents as shipped by default (no `[agent]` settings);
//! - `stress-mlock`, `stress-rt`, `stress-rt-mlock`: the same with `[agent]
//!   lock_memory = true` and/or `realtime_priority = 50` (SCHED_FIFO).
//!
//! In every run the etcd members are moved to SCHED_FIFO 10 (`chrt -a -f -p 10`)
//! once the cluster is up: they stand for dedicated etcd hosts, so a starved etcd is
//! not blamed on the agent. PostgreSQL is not: it shares the host with the agent,
//! as in production.
//!
//! Each run: the cluster settles, 5 s of grace, stress-ng starts (stress runs),
//! 3 s for it to ramp, then the window (`TENURE_BENCH_STRESS_SECONDS`, 180): the
//! agents' /proc (RSS, CPU) once a second, and every trace line written in the
//! window. Printed per role: min / median / p99 / p99.9 / max with N for lateness,
//! renewal round trip, send → pet and iteration time; overrun counts; CPU per phase
//! and per hour; page faults; allocations per iteration by minute of the agent's
//! uptime (flat = independent of uptime).
//!
//! `TENURE_BENCH_AGENT` names the agent binary (default: this build's `tenure`);
//! `make bench` passes one built with `--features count-allocs`. Needs root, etcd,
//! PostgreSQL 15 and, for the stress runs, `stress-ng` (skips with a message
//! otherwise). Fails only when something is broken: the cluster does not settle, an
//! agent dies, or the primary changes during a window (a spurious failover).

#[path = "harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{
    ProcSample, STRESS, Stats, Table, etcd_realtime, fmt_ns, loadavg, proc_sample, start_stress,
    stop_stress,
};
use tenure::testbed::cluster::{ClusterOptions, NodeWatchdog};

/// Where the agents write their traces (tmpfs: a write costs no disk I/O).
const TRACE_DIR: &str = "/dev/shm/tenure-bench-stress";

fn main() {
    println!(
        "loop_stress: loop lateness, allocations and idle cost of the agent ({})",
        harness::machine_line()
    );
    if let Some(why) = harness::real_parts_missing() {
        println!("loop_stress: SKIPPED: {why}");
        return;
    }
    let _ = std::fs::remove_dir_all(TRACE_DIR);
    if let Err(e) = std::fs::create_dir_all(TRACE_DIR) {
        eprintln!("loop_stress: broken benchmark: {TRACE_DIR}: {e}");
        std::process::exit(1);
    }
    // SAFETY: no other thread exists yet (the clusters, and their notify readers,
    // start below); the agents inherit the variable.
    unsafe { std::env::set_var("TENURE_LOOP_TRACE", format!("{TRACE_DIR}/{{name}}.trace")) };
    let runs = std::env::var("TENURE_BENCH_STRESS_RUNS")
        .unwrap_or_else(|_| "idle,stress,stress-rt-mlock".into());
    let mut broken = Vec::new();
    for run in runs.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let Some(cfg) = RunCfg::parse(run) else {
            eprintln!(
                "loop_stress: unknown run {run:?} (idle, stress, stress-mlock, stress-rt, stress-rt-mlock)"
            );
            std::process::exit(2);
        };
        if cfg.stress && !Path::new("/usr/bin/stress-ng").is_file() {
            println!(
                "\n=== {run}: SKIPPED: /usr/bin/stress-ng not found (`make bench` installs it)"
            );
            continue;
        }
        println!("\n=== {run} ===");
        if let Err(e) = one_run(&cfg) {
            eprintln!("loop_stress: {run}: broken: {e}");
            broken.push(run.to_string());
        }
    }
    if !broken.is_empty() {
        eprintln!("loop_stress: broken runs: {}", broken.join(", "));
        std::process::exit(1);
    }
}

struct RunCfg {
    name: String,
    stress: bool,
    mlock: bool,
    rt: bool,
}

impl RunCfg {
    fn parse(s: &str) -> Option<RunCfg> {
        let (stress, mlock, rt) = match s {
            "idle" => (false, false, false),
            "idle-rt-mlock" => (false, true, true),
            "stress" => (true, false, false),
            "stress-mlock" => (true, true, false),
            "stress-rt" => (true, false, true),
            "stress-rt-mlock" => (true, true, true),
            _ => return None,
        };
        Some(RunCfg {
            name: s.into(),
            stress,
            mlock,
            rt,
        })
    }
}

/// One trace line (src/agent/looptrace.rs `HEADER`).
#[derive(Clone, Debug)]
struct Line {
    t_ms: u64,
    tick: bool,
    late_us: i64,
    rtt_us: i64,
    pet_us: i64,
    took_us: i64,
    over: bool,
    sched: bool,
    leader: bool,
    cpu_us: [u64; 7],
    minflt: u64,
    majflt: u64,
    allocs: u64,
    bytes: u64,
}

const PHASE_NAMES: [&str; 7] = [
    "wait + API",
    "renewal + pet",
    "other etcd calls",
    "PostgreSQL probe",
    "core step",
    "reason, log, status",
    "actions, member key",
];

fn parse_line(l: &str) -> Option<Line> {
    if l.starts_with('#') {
        return None;
    }
    let f: Vec<i64> = l
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 21 {
        return None;
    }
    let u = |i: usize| f[i].max(0) as u64;
    let mut cpu = [0u64; 7];
    for (j, c) in cpu.iter_mut().enumerate() {
        *c = u(9 + j);
    }
    Some(Line {
        t_ms: u(0),
        tick: f[1] == 1,
        late_us: f[2],
        rtt_us: f[3],
        pet_us: f[4],
        took_us: f[5],
        over: f[6] == 1,
        sched: f[7] == 1,
        leader: f[8] == 1,
        cpu_us: cpu,
        minflt: u(16),
        majflt: u(17),
        allocs: u(18),
        bytes: u(20),
    })
}

fn trace_path(node: &str) -> PathBuf {
    PathBuf::from(format!("{TRACE_DIR}/{node}.trace"))
}

fn read_trace(node: &str) -> Vec<Line> {
    std::fs::read_to_string(trace_path(node))
        .map(|s| s.lines().filter_map(parse_line).collect())
        .unwrap_or_default()
}

/// The agent's scheduling policy and priority (/proc/<pid>/stat fields 40, 41) and
/// locked memory (`VmLck`): proof that `[agent]` took effect.
fn sched_line(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let policy = match f.get(38).copied() {
        Some("0") => "SCHED_OTHER",
        Some("1") => "SCHED_FIFO",
        Some("2") => "SCHED_RR",
        Some(other) => other,
        None => "?",
    };
    let lck = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmLck:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    format!(
        "policy {policy}, rt priority {}, VmLck {lck}",
        f.get(37).copied().unwrap_or("?")
    )
}

fn one_run(cfg: &RunCfg) -> Result<(), String> {
    let seconds = harness::env_num("TENURE_BENCH_STRESS_SECONDS", 180);
    let binary = std::env::var("TENURE_BENCH_AGENT")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_tenure").to_string());
    println!("agent binary: {binary}");
    for n in ["pg1", "pg2", "pg3"] {
        let _ = std::fs::remove_file(trace_path(n));
    }
    let mut opts = ClusterOptions::new(&binary);
    opts.tag = format!("bench-{}", cfg.name);
    opts.scope = format!("bench-{}", cfg.name);
    opts.log_level = Some("info".into());
    // systemd's watchdog as the pet (W = 3 s: S6 b holds with ttl 7, loop 0.5,
    // retry 0.25, margin 0.5, budget 1): a datagram per counted renewal, so the
    // send → pet time is the agent's path and not a stand-in device's scheduling.
    let wd = NodeWatchdog {
        notify: true,
        watchdog_usec: Some(3_000_000),
        ..NodeWatchdog::default()
    };
    opts.watchdog = vec![wd; 3];
    let mut agent = String::new();
    if cfg.mlock || cfg.rt {
        agent.push_str("[agent]\n");
        if cfg.mlock {
            agent.push_str("lock_memory = true\n");
        }
        if cfg.rt {
            agent.push_str("realtime_priority = 50\n");
        }
    }
    opts.extra_config = agent.clone();
    println!(
        "[agent] settings: {}",
        if agent.is_empty() {
            "none (defaults)".into()
        } else {
            agent.trim().replace('\n', "; ")
        }
    );
    let loop_wait = opts.loop_wait;
    let (mut c, p) = harness::start_settled(opts, "")?;
    etcd_realtime(&mut c)?;
    println!("etcd members: SCHED_FIFO 10 (chrt -a -f -p 10 <pid>)");
    std::thread::sleep(Duration::from_secs(5));
    c.check_agents()?;
    let n = c.node_count();
    let names: Vec<String> = (0..n).map(|i| c.name(i).to_string()).collect();
    let pids: Vec<u32> = (0..n)
        .map(|i| {
            c.agent_pid(i)
                .ok_or(format!("agent of {} not running", names[i]))
        })
        .collect::<Result<_, _>>()?;

    for (i, &pid) in pids.iter().enumerate() {
        println!("{}: {}", names[i], sched_line(pid));
    }
    let stress = if cfg.stress {
        let out = PathBuf::from(format!("{TRACE_DIR}/stress-ng.{}.log", cfg.name));
        let child = start_stress(seconds + 30, &out)?;
        println!(
            "load: stress-ng {} --timeout {}s (pid {})",
            STRESS.join(" "),
            seconds + 30,
            child.id()
        );
        std::thread::sleep(Duration::from_secs(3));
        Some(child)
    } else {
        println!("load: none added");
        None
    };
    let load0 = loadavg();
    let start_lines: Vec<usize> = names.iter().map(|n| read_trace(n).len()).collect();
    let t0 = Instant::now();
    let mut samples: Vec<Vec<ProcSample>> = vec![Vec::new(); n];
    let mut next = t0;
    let mut failure = None;
    while t0.elapsed() < Duration::from_secs(seconds) {
        for (i, &pid) in pids.iter().enumerate() {
            match proc_sample(pid) {
                Some(s) => samples[i].push(s),
                None => failure = Some(format!("agent of {} vanished", names[i])),
            }
        }
        if failure.is_some() {
            break;
        }
        next += Duration::from_secs(1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let window = t0.elapsed();
    let load1 = loadavg();
    if let Some(s) = stress {
        stop_stress(s);
    }
    if let Some(f) = failure {
        return Err(f);
    }
    let traces: Vec<Vec<Line>> = names
        .iter()
        .zip(&start_lines)
        .map(|(n, &k)| read_trace(n).into_iter().skip(k).collect())
        .collect();
    c.check_agents()?;
    let p_end = c.primary();
    if p_end != Some(p) {
        return Err(format!(
            "the primary changed during the window ({} -> {:?}): a spurious failover{}",
            c.name(p),
            p_end.map(|q| c.name(q).to_string()),
            c.logs_tail(30)
        ));
    }
    drop(c);
    println!(
        "window {:.1} s; load average at its start {load0}, at its end {load1}",
        window.as_secs_f64()
    );
    if traces.iter().all(Vec::is_empty) {
        return Err("no trace lines: does the agent binary know TENURE_LOOP_TRACE?".into());
    }
    report(cfg, &names, p, &traces, &samples, window, loop_wait);
    Ok(())
}

fn us_stats(v: &[i64]) -> Option<Stats> {
    let ns: Vec<f64> = v
        .iter()
        .filter(|&&x| x >= 0)
        .map(|&x| x as f64 * 1e3)
        .collect();
    Stats::of(&ns)
}

fn stats_cells(name: &str, s: &Stats) -> Vec<String> {
    vec![
        name.to_string(),
        s.n.to_string(),
        fmt_ns(s.min),
        fmt_ns(s.median),
        fmt_ns(s.p99),
        fmt_ns(s.p999),
        fmt_ns(s.max),
    ]
}

fn report(
    cfg: &RunCfg,
    names: &[String],
    primary: usize,
    traces: &[Vec<Line>],
    samples: &[Vec<ProcSample>],
    window: Duration,
    loop_wait: Duration,
) {
    let role = |i: usize| if i == primary { "leader" } else { "replica" };
    // Timing per role: the tick iterations (the ones on the renewal grid).
    let mut t = Table::new(&["what", "n", "min", "median", "p99", "p99.9", "max"]);
    for r in ["leader", "replica"] {
        // The role each line's iteration ran in (the trace says), not the node's.
        let lines: Vec<&Line> = traces
            .iter()
            .flatten()
            .filter(|l| l.leader == (r == "leader"))
            .collect();
        let ticks: Vec<&&Line> = lines.iter().filter(|l| l.tick).collect();
        let col = |f: fn(&Line) -> i64| -> Vec<i64> { ticks.iter().map(|l| f(l)).collect() };
        if let Some(s) = us_stats(&col(|l| l.late_us)) {
            t.row(stats_cells(
                &format!("{r}: tick lateness (actual - scheduled)"),
                &s,
            ));
        }
        if let Some(s) = us_stats(&col(|l| l.rtt_us)) {
            t.row(stats_cells(&format!("{r}: renewal round trip"), &s));
        }
        if let Some(s) = us_stats(&col(|l| l.pet_us)) {
            t.row(stats_cells(&format!("{r}: renewal send -> pet"), &s));
        }
        if let Some(s) = us_stats(&col(|l| l.took_us)) {
            t.row(stats_cells(
                &format!("{r}: tick iteration, start -> end"),
                &s,
            ));
        }
    }
    println!(
        "\n{}: per-iteration timing from the agents' traces",
        cfg.name
    );
    print!("{}", t.render());

    let mut o = Table::new(&[
        "agent",
        "role",
        "iterations",
        "ticks",
        "over P (+R)",
        "schedule overruns",
        "late > 10 ms",
        "minflt/iter",
        "majflt",
        "max minflt",
    ]);
    for (i, l) in traces.iter().enumerate() {
        let ticks = l.iter().filter(|x| x.tick).count();
        let minflt: u64 = l.iter().map(|x| x.minflt).sum();
        o.row(vec![
            names[i].clone(),
            role(i).into(),
            l.len().to_string(),
            ticks.to_string(),
            l.iter().filter(|x| x.over).count().to_string(),
            l.iter().filter(|x| x.sched).count().to_string(),
            l.iter()
                .filter(|x| x.tick && x.late_us > 10_000)
                .count()
                .to_string(),
            format!("{:.2}", minflt as f64 / l.len().max(1) as f64),
            l.iter().map(|x| x.majflt).sum::<u64>().to_string(),
            l.iter().map(|x| x.minflt).max().unwrap_or(0).to_string(),
        ]);
    }
    println!("\n{}: overruns and page faults", cfg.name);
    print!("{}", o.render());

    // CPU: /proc (whole process) and the trace's per-phase split (loop thread).
    let hz = harness::ticks_per_second();
    let mut head = vec![
        "agent",
        "role",
        "RSS median",
        "RSS max",
        "anon",
        "file",
        "CPU s/h (/proc)",
    ];
    head.extend(PHASE_NAMES);
    let mut cpu_t = Table::new(&head);
    for (i, l) in traces.iter().enumerate() {
        let s = &samples[i];
        let mut rss: Vec<u64> = s.iter().map(|x| x.rss).collect();
        rss.sort_unstable();
        let last = s.last().copied();
        let proc_cpu = match (s.first(), s.last()) {
            (Some(a), Some(b)) if s.len() > 1 => {
                b.cpu.saturating_sub(a.cpu) as f64 / hz / window.as_secs_f64() * 3600.0
            }
            _ => 0.0,
        };
        let span_s = match (l.first(), l.last()) {
            (Some(a), Some(b)) if b.t_ms > a.t_ms => (b.t_ms - a.t_ms) as f64 / 1e3,
            _ => window.as_secs_f64(),
        };
        let mut row = vec![
            names[i].clone(),
            role(i).into(),
            format!(
                "{:.2} MiB",
                rss.get(rss.len() / 2).copied().unwrap_or(0) as f64 / 1024.0
            ),
            format!(
                "{:.2} MiB",
                rss.last().copied().unwrap_or(0) as f64 / 1024.0
            ),
            format!("{:.2} MiB", last.map_or(0, |x| x.anon) as f64 / 1024.0),
            format!("{:.2} MiB", last.map_or(0, |x| x.file) as f64 / 1024.0),
            format!("{proc_cpu:.2}"),
        ];
        for ph in 0..7 {
            let us: u64 = l.iter().map(|x| x.cpu_us[ph]).sum();
            row.push(format!("{:.3}", us as f64 / 1e6 / span_s * 3600.0));
        }
        cpu_t.row(row);
    }
    println!(
        "\n{}: memory and CPU (CPU as seconds per hour; phases: the loop thread's CPU time by phase, s/h)",
        cfg.name
    );
    print!("{}", cpu_t.render());

    // Allocations per iteration, by minute of the agent's uptime.
    if traces.iter().flatten().any(|l| l.allocs > 0) {
        let mut a = Table::new(&[
            "agent",
            "role",
            "uptime minute",
            "iterations",
            "allocs/iter median",
            "mean",
            "max",
            "bytes/iter mean",
        ]);
        for (i, l) in traces.iter().enumerate() {
            let mut by_min: BTreeMap<u64, Vec<&Line>> = BTreeMap::new();
            for x in l {
                by_min.entry(x.t_ms / 60_000 + 1).or_default().push(x);
            }
            for (m, xs) in by_min {
                let mut v: Vec<u64> = xs.iter().map(|x| x.allocs).collect();
                v.sort_unstable();
                let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
                let bytes = xs.iter().map(|x| x.bytes).sum::<u64>() as f64 / v.len() as f64;
                a.row(vec![
                    names[i].clone(),
                    role(i).into(),
                    m.to_string(),
                    v.len().to_string(),
                    v[v.len() / 2].to_string(),
                    format!("{mean:.1}"),
                    v.last().copied().unwrap_or(0).to_string(),
                    format!("{bytes:.0}"),
                ]);
            }
        }
        println!(
            "\n{}: heap allocations per iteration (a whole cycle: wait, API, iteration)",
            cfg.name
        );
        print!("{}", a.render());
    } else {
        println!(
            "\n{}: no allocation counts (the agent was built without `--features count-allocs`)",
            cfg.name
        );
    }
    let _ = loop_wait;
}
