//! `tenure demo --keep` leaves a working cluster behind (issue 11): after the
//! command returns, etcd still runs, the surviving agents still lead and follow,
//! and the printed pids stop everything it left (agents first, then etcd).

use std::process::Command;
use std::time::Duration;

use tenure::testbed::wait_for;

/// The pids on the line of the demo's output that ends with `# <what>`.
fn pids_on(out: &str, what: &str) -> Vec<i32> {
    out.lines()
        .find(|l| l.contains(&format!("# {what}")))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse::<i32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Stops what the demo left (by the pids it printed), even when an assertion fails.
struct Leftovers {
    agents: Vec<i32>,
    etcd: Vec<i32>,
    dir: Option<String>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        for &p in &self.agents {
            let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
        }
        let agents = self.agents.clone();
        let _ = wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            agents.iter().all(|&p| !alive(p)).then_some(())
        });
        for &p in self.agents.iter().chain(&self.etcd) {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        if let Some(d) = &self.dir {
            // PostgreSQL's processes left by a crashed node's host are gone with its
            // cgroup; what remains in the scratch directory is files.
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[test]
fn real_demo_keep_leaves_etcd_and_the_cluster_running() {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["demo", "--keep"])
        .output()
        .expect("run tenure demo --keep");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let left = Leftovers {
        agents: pids_on(&text, "agents"),
        etcd: pids_on(&text, "etcd"),
        dir: text
            .lines()
            .find_map(|l| l.trim().strip_prefix("scratch: ").map(String::from)),
    };
    assert!(out.status.success(), "demo failed:\n{text}");
    assert_eq!(left.etcd.len(), 3, "etcd pids not printed:\n{text}");
    assert_eq!(
        left.agents.len(),
        2,
        "two surviving agents expected:\n{text}"
    );
    // Seconds after the demo returned: etcd and both agents still run, and the
    // agents still have etcd (a leader without it would fence within a ttl).
    std::thread::sleep(Duration::from_secs(10));
    for &p in left.etcd.iter().chain(&left.agents) {
        assert!(alive(p), "pid {p} is gone after the demo returned:\n{text}");
    }
    let api_ports: Vec<u16> = text
        .lines()
        .filter(|l| l.contains(": config ") && !l.contains("(down)"))
        .filter_map(|l| {
            l.split("API http://127.0.0.1:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let primary = api_ports.iter().filter(|&&port| {
        tenure::testbed::etcd::http_get_local(port, "/primary")
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
    });
    assert_eq!(
        primary.count(),
        1,
        "exactly one kept node should answer /primary with 200 (ports {api_ports:?}):\n{text}"
    );
    drop(left);
}
