//! A small timing harness shared by the benchmarks (`#[path = "harness.rs"] mod harness;`).
//!
//! Owns: warm-up, repeated timing, order statistics (min / median / p99 / max) and
//! plain-text tables. Must never: assert a timing (benchmarks report; a benchmark
//! fails only when something is broken, e.g. a cluster that never settles).
//!
//! Why no benchmark crate (criterion, divan, ...): the house rule is no new crates,
//! and what we need is small: the pure core is timed in batches (one `Instant::now`
//! pair per batch, so the ~25 ns of a vDSO clock read does not swamp a step that
//! takes a few hundred ns), and the real-part benchmarks time single events of
//! milliseconds to seconds, where a batch is not possible and the clock's cost is
//! noise. Criterion's extra value (outlier classification, regression against a
//! saved baseline, HTML plots) does not pay for a new dependency tree here; the
//! numbers are recorded by hand in docs/benchmarks.md.

// Each bench binary uses a different subset.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tenure::testbed::cluster::TestCluster;

/// Order statistics of a set of samples, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    /// 99.9th percentile (nearest rank: with fewer than 1000 samples, the max).
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Stats {
    /// Statistics of `samples` (nanoseconds). `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        Some(Stats {
            n,
            min: s[0],
            median: quantile(&s, 0.5),
            p99: quantile(&s, 0.99),
            p999: quantile(&s, 0.999),
            max: s[n - 1],
            mean: s.iter().sum::<f64>() / n as f64,
        })
    }

    /// Statistics of durations.
    pub fn of_durations(samples: &[Duration]) -> Option<Stats> {
        let ns: Vec<f64> = samples.iter().map(|d| d.as_nanos() as f64).collect();
        Stats::of(&ns)
    }
}

/// Nearest-rank quantile of sorted samples (`q` in 0..=1).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// Time `f` in batches: `warmup` untimed calls first, then `samples` batches of
/// `batch` calls each, one clock pair per batch. Each sample is a batch's mean per
/// call, in ns. `f` receives the call's index (so it can advance its own clock).
pub fn time_batched(warmup: u64, samples: usize, batch: u64, mut f: impl FnMut(u64)) -> Vec<f64> {
    let mut i = 0u64;
    for _ in 0..warmup {
        f(i);
        i += 1;
    }
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t0 = Instant::now();
        for _ in 0..batch {
            f(i);
            i += 1;
        }
        out.push(t0.elapsed().as_nanos() as f64 / batch as f64);
    }
    out
}

/// A duration in ns, printed with a unit that keeps 3-4 significant digits.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// A plain-text table: a header row, then rows; columns padded to their widest cell
/// (right-aligned but for the first).
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.head.len();
        let mut w = vec![0usize; cols];
        for r in std::iter::once(&self.head).chain(&self.rows) {
            for (j, c) in r.iter().enumerate().take(cols) {
                w[j] = w[j].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let mut s = String::new();
            for (j, width) in w.iter().enumerate() {
                let c = r.get(j).map(String::as_str).unwrap_or("");
                let pad = width - c.chars().count();
                if j == 0 {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str("  ");
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.head);
        out.push('\n');
        out.push_str(&"-".repeat(w.iter().sum::<usize>() + 2 * (cols - 1)));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

/// The standard row of a timing table: name, n, min, median, p99, max.
pub fn stats_row(name: &str, s: &Stats) -> Vec<String> {
    vec![
        name.to_string(),
        s.n.to_string(),
        fmt_ns(s.min),
        fmt_ns(s.median),
        fmt_ns(s.p99),
        fmt_ns(s.max),
    ]
}

pub const STATS_HEAD: [&str; 6] = ["what", "n", "min", "median", "p99", "max"];

/// Why a real-part benchmark cannot run here, or `None` when it can: root, etcd,
/// PostgreSQL 15. A missing part is a skip (exit 0 with a message), not a failure.
pub fn real_parts_missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (PostgreSQL runs as the postgres user)".into());
    }
    for p in ["/usr/bin/etcd", "/usr/lib/postgresql/15/bin/postgres"] {
        if !std::path::Path::new(p).is_file() {
            return Some(format!("{p} not found (run `make deps`)"));
        }
    }
    None
}

/// An environment variable as a number, or `default` (a value that does not parse
/// is reported and ignored, never a panic).
pub fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("{name}={v:?} is not a whole number; using {default}");
            default
        }),
        Err(_) => default,
    }
}

/// The machine, for the header of every benchmark's output.
pub fn machine_line() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, load average {load}")
}

/// Start a test cluster and wait (up to 120 s) until it has settled: the primary's
/// index. Prints how long the boot took, after `label` (empty: none).
pub fn start_settled(
    opts: tenure::testbed::cluster::ClusterOptions,
    label: &str,
) -> Result<(tenure::testbed::cluster::TestCluster, usize), String> {
    let boot = Instant::now();
    let mut c = tenure::testbed::cluster::TestCluster::start(opts)?;
    let p = c.settled(Duration::from_secs(120))?;
    println!(
        "{label}cluster settled in {:.1} s, primary {}",
        boot.elapsed().as_secs_f64(),
        c.name(p)
    );
    Ok((c, p))
}

// ----- host load and the agents' processes (loop_stress, soak_hour) -----------

/// The load, exactly as run (the command); `--timeout` is added so it
/// stops by itself even if this bench dies.
pub const STRESS: &[&str] = &["--cpu", "2", "--io", "1", "--vm", "1", "--vm-bytes", "20%"];

/// `/proc/<pid>`: VmRSS, RssAnon, RssFile (kB), utime + stime (ticks).
#[derive(Clone, Copy, Debug)]
pub struct ProcSample {
    pub rss: u64,
    pub anon: u64,
    pub file: u64,
    pub cpu: u64,
}

pub fn proc_sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let cpu = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ProcSample {
        rss: kb("VmRSS:")?,
        anon: kb("RssAnon:")?,
        file: kb("RssFile:")?,
        cpu,
    })
}

/// The load average (1, 5, 15 minutes).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// stress-ng in its own process group (so its workers can be stopped together).
pub fn start_stress(seconds: u64, out: &Path) -> Result<Child, String> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new("/usr/bin/stress-ng");
    cmd.args(STRESS)
        .arg("--timeout")
        .arg(format!("{seconds}s"))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0);
    cmd.spawn().map_err(|e| format!("stress-ng: {e}"))
}

pub fn stop_stress(mut child: Child) {
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    // Our own child's process group: stress-ng and the workers it forked.
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGTERM);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
}

/// Every thread of every etcd member to SCHED_FIFO 10.
pub fn etcd_realtime(c: &mut TestCluster) -> Result<(), String> {
    let Some(e) = c.etcd() else {
        return Err("no etcd cluster".into());
    };
    for i in 0..e.members.len() {
        let pid = e.pid(i).ok_or(format!("etcd member {i} not running"))?;
        let st = Command::new("chrt")
            .args(["-a", "-f", "-p", "10", &pid.to_string()])
            .status()
            .map_err(|e| format!("chrt: {e}"))?;
        if !st.success() {
            return Err(format!("chrt -a -f -p 10 {pid}: {st}"));
        }
    }
    Ok(())
}

/// The watchdog stand-in binary, or why there is none. `WatchdogStandin::binary`
/// looks in `examples/` above this executable (`target/release/examples` for a
/// bench); the stand-in is a test aid that `cargo build --example wdt_standin`
/// builds in the debug profile, so look there too and point the bed at it.
pub fn find_standin() -> Result<std::path::PathBuf, String> {
    use tenure::testbed::watchdog::WatchdogStandin;
    if let Ok(p) = WatchdogStandin::binary() {
        return Ok(p);
    }
    let debug =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/examples/wdt_standin");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| std::path::PathBuf::from(d).join("debug/examples/wdt_standin"));
    for cand in target_dir.into_iter().chain([debug]) {
        if cand.is_file() {
            // SAFETY: called from `main` before any thread is spawned, so nothing
            // reads the environment concurrently.
            unsafe { std::env::set_var("TENURE_WDT_STANDIN", &cand) };
            return Ok(cand);
        }
    }
    Err(
        "watchdog stand-in not built (`cargo build --example wdt_standin`, or set \
         TENURE_WDT_STANDIN)"
            .into(),
    )
}

/// Revoke lease `id` through etcd's JSON gateway (as an operator's `etcdctl lease
/// revoke` would), trying each endpoint once.
pub fn revoke(endpoints: &[String], id: i64) -> Result<(), String> {
    use tenure::testbed::{etcd, etcdkv};
    let body = format!("{{\"ID\":\"{id}\"}}");
    let mut errors = Vec::new();
    for ep in endpoints {
        let addr = etcdkv::endpoint_addr(ep)?;
        match etcd::http_request(
            addr.ip(),
            addr.port(),
            "POST",
            "/v3/lease/revoke",
            "",
            &body,
        ) {
            Some(answer) if etcdkv::http_status(&answer) == Some(200) => return Ok(()),
            Some(answer) => errors.push(format!(
                "{ep}: {}",
                answer.lines().next().unwrap_or("").trim()
            )),
            None => errors.push(format!("{ep}: no answer")),
        }
    }
    Err(format!("lease revoke {id:x}: {}", errors.join("; ")))
}

/// Clock ticks per second (`/proc/<pid>/stat`'s utime and stime unit); 100 if
/// sysconf cannot say.
pub fn ticks_per_second() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

/// The agent: this profile's build, or `TENURE_BENCH_AGENT` (another build of the
/// agent, to measure a before/after with the same bench and test bed).
pub fn agent_binary() -> std::path::PathBuf {
    std::env::var_os("TENURE_BENCH_AGENT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tenure").into())
}

/// Time on a CPU, ns, summed over `/proc/<pid>/task/*/schedstat` (the scheduler's
/// own account of every thread; `/proc/<pid>/stat`'s ticks are 10 ms apart).
pub fn run_ns(pid: u32) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for e in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let path = e
            .map_err(|e| format!("{dir}: {e}"))?
            .path()
            .join("schedstat");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        total += text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("{}: no run time", path.display()))?;
    }
    Ok(total)
}

/// `main` of a benchmark that needs etcd and a scratch directory: prints its title
/// with the machine, skips (exit 0) without `/usr/bin/etcd`, runs `run` in a fresh
/// `scratch_dir("bench-<name>")`, removes it, and exits 1 naming what broke.
pub fn main_with_etcd(name: &str, title: &str, run: impl FnOnce(&Path) -> Result<(), String>) {
    println!("{name}: {title} ({})", machine_line());
    if !Path::new("/usr/bin/etcd").is_file() {
        println!("{name}: SKIPPED: /usr/bin/etcd not found (run `make deps`)");
        return;
    }
    let result = tenure::testbed::scratch_dir(&format!("bench-{name}"))
        .map_err(|e| format!("scratch dir: {e}"))
        .and_then(|dir| {
            let r = run(&dir);
            let _ = std::fs::remove_dir_all(&dir);
            r
        });
    if let Err(e) = result {
        eprintln!("{name}: broken benchmark: {e}");
        std::process::exit(1);
    }
}

/// A real 3-member etcd in `dir` and a client of it as the agent runs one: a
/// current-thread runtime, `Etcd::connect` with the key prefix `prefix`, bounded
/// by `limit`.
pub fn etcd_with_client(
    dir: &Path,
    prefix: &str,
    limit: Duration,
) -> Result<
    (
        tenure::testbed::etcd::EtcdCluster,
        tokio::runtime::Runtime,
        tenure::dcs::Etcd,
    ),
    String,
> {
    let etcd = tenure::testbed::etcd::EtcdCluster::start(dir, 3)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let client = tenure::dcs::Etcd::connect(
        &rt,
        &etcd.endpoints(),
        prefix,
        tenure::clock::now().add(limit),
    )
    .map_err(|e| format!("connect: {e}"))?;
    Ok((etcd, rt, client))
}
