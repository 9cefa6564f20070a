//! A three-member etcd cluster of Debian's `etcd-server`, tuned as DESIGN §6 says:
//! `--heartbeat-interval=50 --election-timeout=500`, data on tmpfs.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, stop_child, wait_for};

/// One member's fixed identity; ports stay the same across a restart.
pub struct EtcdMember {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
    /// The address it listens on (127.0.0.1 on loopback).
    pub addr: Ipv4Addr,
    /// The network namespace it runs in (`None`: ours).
    pub netns: Option<String>,
    /// With TLS: a second, plain `http://` client listener for the bed's own
    /// health checks and JSON-gateway reads (`endpoints()`); the agents get the
    /// `https://` one (`tls_endpoints()`). Without TLS: the client port.
    pub plain_port: u16,
}

/// Server TLS of a bed's etcd (issue 12): every member serves `cert`/`key` on its
/// `https://` client URL and requires a client certificate signed by `ca`
/// (`--client-cert-auth`). Peer traffic stays plain (loopback).
#[derive(Clone, Debug)]
pub struct EtcdServerTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct EtcdCluster {
    pub members: Vec<EtcdMember>,
    pub binary: PathBuf,
    token: String,
    initial_cluster: String,
    tls: Option<EtcdServerTls>,
}

impl EtcdCluster {
    /// Start `n` members under `dir` on loopback and wait until the cluster answers.
    pub fn start(dir: &Path, n: usize) -> Result<EtcdCluster, String> {
        EtcdCluster::start_placed(dir, &vec![(Ipv4Addr::LOCALHOST, None); n])
    }

    /// Start one member per entry of `placement` — its address and the network
    /// namespace to run it in (`None`: ours) — and wait until the cluster answers.
    pub fn start_placed(
        dir: &Path,
        placement: &[(Ipv4Addr, Option<String>)],
    ) -> Result<EtcdCluster, String> {
        EtcdCluster::start_secure(dir, placement, None)
    }

    /// [`EtcdCluster::start_placed`] with server TLS (`None`: plain).
    pub fn start_secure(
        dir: &Path,
        placement: &[(Ipv4Addr, Option<String>)],
        tls: Option<EtcdServerTls>,
    ) -> Result<EtcdCluster, String> {
        let binary = which_etcd()?;
        let n = placement.len();
        if n == 0 {
            return Err("an etcd cluster needs at least one member".into());
        }
        let mut members = Vec::new();
        for (i, (addr, netns)) in placement.iter().enumerate() {
            let name = format!("etcd{i}");
            let client_port = free_port();
            members.push(EtcdMember {
                addr: *addr,
                netns: netns.clone(),
                data_dir: dir.join(format!("{name}.data")),
                log: dir.join(format!("{name}.log")),
                name,
                client_port,
                peer_port: free_port(),
                child: None,
                plain_port: if tls.is_some() {
                    free_port()
                } else {
                    client_port
                },
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://{}:{}", m.name, m.addr, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("tenure-{}-{}", std::process::id(), members[0].client_port);
        let mut c = EtcdCluster {
            members,
            binary,
            token,
            initial_cluster,
            tls,
        };
        c.start_all_new()?;
        if !c.wait_healthy(Duration::from_secs(30)) {
            return Err(format!(
                "etcd cluster did not become healthy in 30 s; logs under {}",
                dir.display()
            ));
        }
        Ok(c)
    }

    /// Plain client URLs of all members (with TLS: the bed's own listener).
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://{}:{}", m.addr, m.plain_port))
            .collect()
    }

    /// `https://` client URLs of all members (with TLS; else the plain ones).
    pub fn tls_endpoints(&self) -> Vec<String> {
        if self.tls.is_none() {
            return self.endpoints();
        }
        self.members
            .iter()
            .map(|m| format!("https://{}:{}", m.addr, m.client_port))
            .collect()
    }

    /// Start every member with `--initial-cluster-state=new`, one after the other:
    /// each once the one before serves its peer URL. A new member first asks every
    /// other member whether it was bootstrapped already (etcd 3.4's
    /// `isMemberBootstrapped`), with a one-second timeout per peer; started
    /// together, each finds the others' listeners open but not yet serving and
    /// waits out both timeouts: 2 s of every bed's start. A peer not started yet
    /// refuses the connection at once, and one that serves answers at once.
    fn start_all_new(&mut self) -> Result<(), String> {
        let n = self.members.len();
        for i in 0..n {
            self.start_member(i, "new")?;
            // The last one asks no member started after it: the health wait follows.
            if i + 1 == n {
                break;
            }
            let m = &mut self.members[i];
            let (addr, port) = (IpAddr::V4(m.addr), m.peer_port);
            // Not an error if it never serves, or exits: the health wait after
            // says so (a member that exited is not waited for).
            let _ = wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
                let exited = m
                    .child
                    .as_mut()
                    .is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
                (exited || peer_serves(addr, port)).then_some(())
            });
        }
        Ok(())
    }

    /// (Re)start member `i` with its existing data (`state` = "new" or "existing").
    pub fn start_member(&mut self, i: usize, state: &str) -> Result<(), String> {
        let m = &mut self.members[i];
        let log = File::options()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|e| format!("open {}: {e}", m.log.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = match &m.netns {
            // `ip netns exec` execs etcd itself: the child's pid is etcd's.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.arg("netns").arg("exec").arg(ns).arg(&self.binary);
                c
            }
            None => Command::new(&self.binary),
        };
        let a = m.addr;
        if let Some(t) = &self.tls {
            cmd.arg(format!(
                "--listen-client-urls=https://{a}:{},http://{a}:{}",
                m.client_port, m.plain_port
            ))
            .arg(format!(
                "--advertise-client-urls=https://{a}:{}",
                m.client_port
            ))
            .arg(format!("--cert-file={}", t.cert.display()))
            .arg(format!("--key-file={}", t.key.display()))
            .arg(format!("--trusted-ca-file={}", t.ca.display()))
            .arg("--client-cert-auth");
        } else {
            cmd.arg(format!("--listen-client-urls=http://{a}:{}", m.client_port))
                .arg(format!(
                    "--advertise-client-urls=http://{a}:{}",
                    m.client_port
                ));
        }
        let child = cmd
            .arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", m.data_dir.display()))
            .arg(format!("--listen-peer-urls=http://{a}:{}", m.peer_port))
            .arg(format!(
                "--initial-advertise-peer-urls=http://{a}:{}",
                m.peer_port
            ))
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            .arg(format!("--initial-cluster-state={state}"))
            .arg(format!("--initial-cluster-token={}", self.token))
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500")
            .arg("--logger=zap")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.binary.display()))?;
        m.child = Some(child);
        Ok(())
    }

    /// SIGKILL member `i` (a crash).
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// etcd wiped and restarted empty (DESIGN §3): SIGKILL every member, move each
    /// data directory aside (renamed to `<data dir>.wiped-<k>`, never deleted, so a
    /// failed test can still be examined), start every member again as a new cluster
    /// with the same names, URLs and token (so the same cluster id) and wait until
    /// it is healthy. All keys and revisions are gone; revisions restart at 1.
    pub fn wipe_and_restart(&mut self) -> Result<(), String> {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
        for m in &self.members {
            if !m.data_dir.exists() {
                continue;
            }
            // The first free suffix: a test may wipe more than once.
            let aside = (0..1000)
                .map(|k| PathBuf::from(format!("{}.wiped-{k}", m.data_dir.display())))
                .find(|p| !p.exists())
                .ok_or_else(|| format!("no free name to move {} aside", m.data_dir.display()))?;
            std::fs::rename(&m.data_dir, &aside).map_err(|e| {
                format!(
                    "move {} aside to {}: {e}",
                    m.data_dir.display(),
                    aside.display()
                )
            })?;
        }
        self.start_all_new()?;
        if !self.wait_healthy(Duration::from_secs(30)) {
            return Err(format!(
                "wiped etcd cluster did not become healthy in 30 s; logs: {}",
                self.members
                    .iter()
                    .map(|m| m.log.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(())
    }

    /// A snapshot of the store (`etcdctl snapshot save`, from member 0) at `to`.
    pub fn snapshot(&self, to: &Path) -> Result<(), String> {
        let ep = self.endpoints()[0].clone();
        etcdctl(&[&format!("--endpoints={ep}"), "snapshot", "save"], to)
    }

    /// etcd restored from the snapshot `snap` at the same addresses: every member
    /// SIGKILLed and its data directory moved aside (never deleted), each restored
    /// (`etcdctl snapshot restore`) and started again. With `new_token` under a new
    /// cluster token (a new cluster id), else under the same one (the same id, as a
    /// restore with the cluster's own settings). Keys, revisions and leases are the
    /// snapshot's: the store goes back in time; a lease's TTL starts again when the
    /// restored cluster elects its leader.
    pub fn restore(&mut self, snap: &Path, new_token: bool) -> Result<(), String> {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
        if new_token {
            self.token = format!("{}-restored", self.token);
        }
        for m in &self.members {
            let aside = (0..1000)
                .map(|k| PathBuf::from(format!("{}.before-restore-{k}", m.data_dir.display())))
                .find(|p| !p.exists())
                .ok_or_else(|| format!("no free name to move {} aside", m.data_dir.display()))?;
            std::fs::rename(&m.data_dir, &aside)
                .map_err(|e| format!("move {} aside: {e}", m.data_dir.display()))?;
            etcdctl(
                &[
                    "snapshot",
                    "restore",
                    &snap.display().to_string(),
                    &format!("--name={}", m.name),
                    &format!("--initial-cluster={}", self.initial_cluster),
                    &format!("--initial-cluster-token={}", self.token),
                    &format!(
                        "--initial-advertise-peer-urls=http://{}:{}",
                        m.addr, m.peer_port
                    ),
                    &format!("--data-dir={}", m.data_dir.display()),
                ],
                snap,
            )?;
        }
        self.start_all_new()?;
        if !self.wait_healthy(Duration::from_secs(30)) {
            return Err("the restored etcd cluster did not become healthy in 30 s".into());
        }
        Ok(())
    }

    /// Pid of member `i`, if running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    /// The running member that reports itself raft leader (`etcd_server_is_leader 1`
    /// on `/metrics`), if exactly one does.
    pub fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..self.members.len())
            .filter(|&i| {
                let m = &self.members[i];
                m.child.is_some()
                    && http_get(IpAddr::V4(m.addr), m.plain_port, "/metrics")
                        .is_some_and(|b| b.lines().any(|l| l.trim() == "etcd_server_is_leader 1"))
            })
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    }

    /// True when every running member answers `/health` with `"health":"true"`.
    pub fn wait_healthy(&self, limit: Duration) -> bool {
        wait_for(limit, Duration::from_millis(100), || {
            let all = self.members.iter().filter(|m| m.child.is_some()).all(|m| {
                http_get(IpAddr::V4(m.addr), m.plain_port, "/health")
                    .is_some_and(|b| b.contains("\"health\":\"true\""))
            });
            all.then_some(())
        })
        .is_some()
    }

    pub fn stop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                stop_child(&mut c, Duration::from_secs(3));
            }
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `etcdctl args...` (API v3), `snap` last for `snapshot save`; its output in
/// the error when it fails. `snapshot restore` goes to `etcdutl` where it exists
/// (etcd 3.5 moved it there; 3.6's etcdctl no longer has it).
fn etcdctl(args: &[&str], snap: &Path) -> Result<(), String> {
    let utl = ["/usr/bin/etcdutl", "/usr/local/bin/etcdutl"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let program = match utl {
        Some(u) if args.starts_with(&["snapshot", "restore"]) => u,
        _ => "etcdctl",
    };
    let mut cmd = Command::new(program);
    cmd.env("ETCDCTL_API", "3").args(args);
    if args.last() == Some(&"save") {
        cmd.arg(snap);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("etcdctl {args:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "etcdctl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn which_etcd() -> Result<PathBuf, String> {
    for p in ["/usr/bin/etcd", "/usr/local/bin/etcd"] {
        if Path::new(p).exists() {
            return Ok(PathBuf::from(p));
        }
    }
    Err("etcd not found: install Debian's etcd-server (make deps)".into())
}

/// A tiny HTTP/1.0 GET against 127.0.0.1:`port`, for health checks. Bounded by a
/// one-second timeout on every step.
pub fn http_get_local(port: u16, path: &str) -> Option<String> {
    http_get(IpAddr::V4(Ipv4Addr::LOCALHOST), port, path)
}

/// Like [`http_get_local`], against `ip:port` (a test namespace's address).
pub fn http_get(ip: IpAddr, port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::new(ip, port);
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    let _ = s.take(1 << 20).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    Some(text)
}

/// Whether an etcd member's peer URL answers `GET /version`. Its peer listener
/// keeps even an HTTP/1.0 connection open after the answer, so this reads only
/// until the answer's JSON is complete ([`http_get`] would wait out its timeout).
fn peer_serves(ip: IpAddr, port: u16) -> bool {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::new(ip, port);
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    if s.set_read_timeout(Some(Duration::from_secs(1))).is_err()
        || s.set_write_timeout(Some(Duration::from_secs(1))).is_err()
        || write!(s, "GET /version HTTP/1.0\r\nHost: {ip}\r\n\r\n").is_err()
    {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while buf.len() < 4096 {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
        let text = String::from_utf8_lossy(&buf);
        if text.contains("\"etcdcluster\"") && text.trim_end().ends_with('}') {
            return true;
        }
    }
    false
}

/// `method path` with `extra` header lines and a body (`Content-Length`), against
/// `ip:port`: the whole response as text. Bounded: 2 s per write, 6 s per read
/// (a write endpoint may wait for the agent's loop, `api::mgmt::INTENT_WAIT`).
pub fn http_request(
    ip: IpAddr,
    port: u16,
    method: &str,
    path: &str,
    extra: &str,
    body: &str,
) -> Option<String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::new(ip, port);
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(6))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {ip}\r\n{extra}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut buf = Vec::new();
    let _ = s.take(1 << 20).read_to_end(&mut buf);
    Some(String::from_utf8_lossy(&buf).into_owned())
}
