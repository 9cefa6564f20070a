//! Network partitions for the real-part tests (DESIGN §6 "Partitions"): every host
//! (a node's agent and its PostgreSQL, or one etcd member) in its own network
//! namespace, all joined through a bridge in a bridge namespace, and cuts made
//! with nftables drop rules inside a host's namespace.
//!
//! Layout (`p` = our pid, `s` = a per-process sequence number):
//! - bridge namespace `tenure-<p>-<s>br` holding bridge `br0`;
//! - host `h` in namespace `tenure-<p>-<s>-<h>`, interface `eth0` with
//!   `10.231.K.(10+h)/24`, its veth peer `v<h>` enslaved to `br0`;
//! - the observer: the test process itself reaches every host through a veth
//!   `tnb<p>x<s>` in the initial namespace (`10.231.K.254/24`) whose peer is on the
//!   bridge, so the bed's SQL, HTTP and etcd probes run in-process, unchanged.
//!
//! `K` comes from the pid, so two test processes rarely share a subnet (they run
//! one at a time anyway). Cuts never drop the observer's traffic: a partitioned
//! old primary stays visible to the write probe, which is what the invariant
//! needs ("no write acknowledged by the old primary after ...").
//!
//! Owns: the namespaces, veths and bridge it creates, the nftables ruleset inside
//! its own host namespaces, and (on Drop) every process still inside one of its
//! namespaces — which can only be a process the bed started there. Must never:
//! touch a namespace, link or ruleset it did not create, route the test range
//! anywhere but into its own namespaces, or signal a process outside them.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Topologies made by this process (names and subnets stay distinct).
static SEQ: AtomicU32 = AtomicU32::new(0);
/// Every `ip`/`nft` call is bounded by this.
const CMD_TIMEOUT: Duration = Duration::from_secs(10);
/// The observer's last octet.
const OBSERVER: u8 = 254;

/// One host's namespace and address.
#[derive(Clone, Debug)]
pub struct NetHost {
    pub ns: String,
    pub addr: Ipv4Addr,
}

/// A cut on one host: traffic to and from these peers is dropped in its namespace.
#[derive(Clone, Debug, PartialEq)]
enum Cut {
    /// Every host of the topology (the observer still gets through).
    All,
    /// One host's address.
    Peer(Ipv4Addr),
}

pub struct NetTopology {
    bridge_ns: Option<String>,
    host_link: Option<String>,
    hosts: Vec<NetHost>,
    /// Namespaces created so far (cleanup deletes exactly these).
    created: Vec<String>,
    subnet: [u8; 3],
    cuts: Mutex<Vec<Vec<Cut>>>,
}

impl NetTopology {
    /// Create `n` host namespaces joined through a bridge namespace, plus the
    /// observer veth; every link up, loopback up in every namespace. On error,
    /// whatever was created is removed again (Drop).
    pub fn create(n: usize) -> Result<NetTopology, String> {
        if n == 0 || n > 200 {
            return Err(format!("NetTopology::create({n}): want 1..=200 hosts"));
        }
        let pid = std::process::id();
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let k = ((pid + seq * 7) % 250) as u8 + 1;
        let subnet = [10, 231, k];
        let mut t = NetTopology {
            bridge_ns: None,
            host_link: None,
            hosts: Vec::new(),
            created: Vec::new(),
            subnet,
            cuts: Mutex::new(vec![Vec::new(); n]),
        };
        let br = format!("tenure-{pid}-{seq}br");
        run(&["ip", "netns", "add", &br])?;
        t.created.push(br.clone());
        t.bridge_ns = Some(br.clone());
        run(&["ip", "-n", &br, "link", "set", "lo", "up"])?;
        run(&["ip", "-n", &br, "link", "add", "br0", "type", "bridge"])?;
        run(&["ip", "-n", &br, "link", "set", "br0", "up"])?;
        // The observer: a veth from our own namespace onto the bridge.
        let link = format!("tnb{pid}x{seq}");
        run(&[
            "ip", "link", "add", &link, "type", "veth", "peer", "name", "obs", "netns", &br,
        ])?;
        t.host_link = Some(link.clone());
        run(&["ip", "-n", &br, "link", "set", "obs", "master", "br0"])?;
        run(&["ip", "-n", &br, "link", "set", "obs", "up"])?;
        let obs = format!("{}/24", t.observer());
        run(&["ip", "addr", "add", &obs, "dev", &link])?;
        run(&["ip", "link", "set", &link, "up"])?;
        for h in 0..n {
            let ns = format!("tenure-{pid}-{seq}-{h}");
            run(&["ip", "netns", "add", &ns])?;
            t.created.push(ns.clone());
            let addr = Ipv4Addr::new(subnet[0], subnet[1], subnet[2], 10 + h as u8);
            let v = format!("v{h}");
            run(&[
                "ip", "-n", &br, "link", "add", &v, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ])?;
            run(&["ip", "-n", &br, "link", "set", &v, "master", "br0"])?;
            run(&["ip", "-n", &br, "link", "set", &v, "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            run(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            t.hosts.push(NetHost { ns, addr });
        }
        Ok(t)
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
    pub fn host(&self, h: usize) -> &NetHost {
        &self.hosts[h]
    }
    /// Host `h`'s namespace name.
    pub fn ns(&self, h: usize) -> &str {
        &self.hosts[h].ns
    }
    /// Host `h`'s address.
    pub fn addr(&self, h: usize) -> Ipv4Addr {
        self.hosts[h].addr
    }
    /// The test process's own address on the bridge.
    pub fn observer(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], OBSERVER)
    }

    /// `ip netns exec <ns of h> program`: a command that runs `program` inside
    /// host `h`'s namespace (`ip` execs it, so the child's pid is the program's).
    pub fn command(&self, h: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.arg("netns").arg("exec").arg(self.ns(h)).arg(program);
        c
    }

    /// Cut host `h` off from every other host (the observer still reaches it).
    pub fn cut(&self, h: usize) -> Result<(), String> {
        self.add_cut(h, Cut::All)
    }

    /// Drop traffic between hosts `a` and `b` only (rules in `a`'s namespace, both
    /// directions); other hosts still reach both.
    pub fn cut_between(&self, a: usize, b: usize) -> Result<(), String> {
        if a == b {
            return Err(format!(
                "cut_between({a}, {b}): a host cannot be cut from itself"
            ));
        }
        let peer = self.addr(b);
        self.add_cut(a, Cut::Peer(peer))
    }

    /// Remove every cut made in host `h`'s namespace (cuts made in another host's
    /// namespace against `h` stay: heal that host too, or use `heal_all`).
    pub fn heal(&self, h: usize) -> Result<(), String> {
        self.set_cuts(h, Vec::new())
    }

    pub fn heal_all(&self) -> Result<(), String> {
        (0..self.len()).try_for_each(|h| self.heal(h))
    }

    fn add_cut(&self, h: usize, c: Cut) -> Result<(), String> {
        let mut cuts = self.current(h)?;
        if !cuts.contains(&c) {
            cuts.push(c);
        }
        self.set_cuts(h, cuts)
    }

    fn current(&self, h: usize) -> Result<Vec<Cut>, String> {
        let g = self.cuts.lock().map_err(|_| "cut table poisoned")?;
        g.get(h)
            .cloned()
            .ok_or_else(|| format!("no host {h} (topology has {})", self.len()))
    }

    /// Replace host `h`'s ruleset with one dropping `cuts`, atomically (one
    /// `nft -f` transaction), then record it.
    fn set_cuts(&self, h: usize, cuts: Vec<Cut>) -> Result<(), String> {
        if h >= self.len() {
            return Err(format!("no host {h} (topology has {})", self.len()));
        }
        let script = ruleset(&cuts, self.observer());
        run_stdin(
            &["ip", "netns", "exec", self.ns(h), "nft", "-f", "-"],
            &script,
        )?;
        let mut g = self.cuts.lock().map_err(|_| "cut table poisoned")?;
        g[h] = cuts;
        Ok(())
    }

    /// Every process inside any of our namespaces.
    pub fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for ns in &self.created {
            if let Ok(text) = output(&["ip", "netns", "pids", ns]) {
                out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        out
    }
}

/// The nftables script for one host: `flush ruleset` (the namespace is ours and
/// holds nothing else), then drops on `eth0` for each cut, never the observer's
/// traffic. Loopback is untouched, so the agent still reaches its own PostgreSQL.
fn ruleset(cuts: &[Cut], observer: Ipv4Addr) -> String {
    let mut s = String::from("flush ruleset\n");
    if cuts.is_empty() {
        return s;
    }
    let mut input = String::new();
    let mut out = String::new();
    for c in cuts {
        match c {
            Cut::All => {
                input.push_str(&format!(
                    "    iifname \"eth0\" ip saddr != {observer} drop\n"
                ));
                out.push_str(&format!(
                    "    oifname \"eth0\" ip daddr != {observer} drop\n"
                ));
            }
            Cut::Peer(p) => {
                input.push_str(&format!("    iifname \"eth0\" ip saddr {p} drop\n"));
                out.push_str(&format!("    oifname \"eth0\" ip daddr {p} drop\n"));
            }
        }
    }
    s.push_str(&format!(
        "table inet tenure_cut {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n{input}  }}\n  chain output {{\n    type filter hook output priority 0; policy accept;\n{out}  }}\n}}\n"
    ));
    s
}

impl Drop for NetTopology {
    fn drop(&mut self) {
        // Processes first: anything still in one of our namespaces was started
        // there by the bed (a namespace outlives its name while a process holds it).
        for _ in 0..3 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for p in pids {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Deleting a namespace destroys the veth ends inside it, and with them
        // their peers.
        for ns in self.created.drain(..).rev() {
            let _ = run(&["ip", "netns", "del", &ns]);
        }
        if let Some(l) = self.host_link.take() {
            let _ = Command::new("ip")
                .args(["link", "del", &l])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Run `args` (program first) to completion within `CMD_TIMEOUT`; Err names the
/// command and its stderr.
fn run(args: &[&str]) -> Result<(), String> {
    run_stdin_opt(args, None).map(|_| ())
}

fn run_stdin(args: &[&str], input: &str) -> Result<(), String> {
    run_stdin_opt(args, Some(input)).map(|_| ())
}

fn output(args: &[&str]) -> Result<String, String> {
    run_stdin_opt(args, None)
}

fn run_stdin_opt(args: &[&str], input: Option<&str>) -> Result<String, String> {
    let (prog, rest) = args.split_first().ok_or("empty command")?;
    let mut child = Command::new(prog)
        .args(rest)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{}`: spawn: {e}", args.join(" ")))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // Tiny scripts: fits the pipe buffer, cannot block.
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| format!("`{}`: write stdin: {e}", args.join(" ")))?;
    }
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() >= CMD_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{}`: no exit within {CMD_TIMEOUT:?}",
                    args.join(" ")
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("`{}`: wait: {e}", args.join(" "))),
        }
    }
    // Exited: reading its pipes cannot block past their (small) contents.
    let out = child
        .wait_with_output()
        .map_err(|e| format!("`{}`: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_never_drops_the_observer_or_loopback() {
        let obs = Ipv4Addr::new(10, 231, 5, 254);
        assert_eq!(ruleset(&[], obs), "flush ruleset\n");
        let s = ruleset(&[Cut::All, Cut::Peer(Ipv4Addr::new(10, 231, 5, 11))], obs);
        assert!(s.contains("iifname \"eth0\" ip saddr != 10.231.5.254 drop"));
        assert!(s.contains("oifname \"eth0\" ip daddr 10.231.5.11 drop"));
        assert!(!s.contains("\"lo\""));
    }
}
