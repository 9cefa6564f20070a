//! `[etcd] srv`: the etcd members found by DNS SRV records, on real parts: every
//! node and etcd member in its own network namespace (`testbed::netns`), a real
//! DNS server (dnsmasq) on the observer's address that every namespace reaches,
//! named in `/etc/netns/<ns>/resolv.conf` (`ip netns exec` bind-mounts it), and
//! no endpoint in any node's configuration.
//!
//! What it shows: the cluster bootstraps from an SRV answer that names one member
//! (the names of the targets resolved by the same DNS server), and `tenure ctl`
//! finds the members the same way; then the records change to name the two
//! other members, every node is cut off from the first one, and every agent asks
//! DNS again once the last endpoint of its list failed, moves to the new members
//! and the cluster goes on (the primary takes writes, its leader renews; whether
//! the leader kept its key depends on the move fitting its outage tolerance, so
//! it is printed, not asserted). Then the records name a member of another etcd
//! cluster (a one-member etcd this test starts on the observer's address) and
//! the real members are cut off: every agent refuses it (its cluster id is not
//! the one it has used), writes nothing there, and once the records and the
//! network are right again the cluster goes on. Last, a SIGHUP that changes the
//! records asked (`srv_suffix`) is refused and the agent keeps its list.
//!
//! `srv_over_tls_with_a_suffix`: etcd over TLS with client certificates, the
//! records `_etcd-client-ssl-<suffix>._tcp` and `https://` URLs, each target's
//! certificate checked against its own name (no `tls_server_name`); the cluster
//! bootstraps, and `tenure ctl list` answers with the first target cut off (under
//! TLS it tries the targets one at a time).
//!
//! Needs root, iproute2, nftables, dnsmasq-base, etcd-server and postgresql-15,
//! like every `real_*` test; run one at a time (nextest group `real`, and
//! `flock /tmp/tenure-real.lock` by hand).

#[path = "support/certs.rs"]
mod certs;
mod common;

use std::fs;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{NetnsFiles, endpoint_opt, metric, metric_opt, settled};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");
/// The domain of the records (RFC 6761 reserves `.test`).
const DOMAIN: &str = "srv.test";
/// What tenure asks for without TLS.
const SERVICE: &str = "_etcd-client._tcp.srv.test";

/// A dnsmasq this test started, answering only from its command line (no
/// upstream, no hosts file); stopped by its pid on drop.
struct Dns(Child);

impl Dns {
    /// Serve `members` (name, address, port) as the targets of `service`, in
    /// that order of priority, on `listen`:53.
    fn start(listen: Ipv4Addr, service: &str, members: &[(String, String, u16)]) -> Dns {
        let mut cmd = Command::new("dnsmasq");
        cmd.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--no-poll",
            "--bind-interfaces",
            "--port=53",
            "--user=root",
            "--group=root",
            "--pid-file=",
            "--log-facility=/dev/null",
        ])
        .arg(format!("--listen-address={listen}"));
        for (k, (name, addr, port)) in members.iter().enumerate() {
            cmd.arg(format!(
                "--srv-host={service},{name},{port},{},0",
                10 * (k + 1)
            ));
            cmd.arg(format!("--host-record={name},{addr}"));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start dnsmasq (package dnsmasq-base): {e}"));
        Dns(child)
    }

    fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A one-member etcd cluster of its own on `addr` (another cluster id than the
/// bed's): what a wrong SRV record could name. Stopped by its pid on drop.
struct ForeignEtcd(Child);

impl ForeignEtcd {
    fn start(dir: &Path, addr: Ipv4Addr, client: u16, peer: u16) -> ForeignEtcd {
        let data = dir.join("foreign-etcd");
        let log = fs::File::create(dir.join("foreign-etcd.log")).expect("foreign etcd log");
        let child = Command::new("etcd")
            .arg("--name=foreign")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls=http://{addr}:{client}"))
            .arg(format!("--advertise-client-urls=http://{addr}:{client}"))
            .arg(format!("--listen-peer-urls=http://{addr}:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://{addr}:{peer}"
            ))
            .arg(format!("--initial-cluster=foreign=http://{addr}:{peer}"))
            .arg("--initial-cluster-token=tenure-test-foreign")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start the foreign etcd: {e}"));
        ForeignEtcd(child)
    }

    /// Keys it holds (`etcdctl get "" --prefix --keys-only`), once it answers.
    fn keys(addr: Ipv4Addr, client: u16) -> Option<String> {
        let o = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=http://{addr}:{client}"))
            .args(["--dial-timeout=1s", "--command-timeout=2s"])
            .args(["get", "", "--prefix", "--keys-only"])
            .output()
            .ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }
}

impl Drop for ForeignEtcd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `program args...` inside node `i`'s namespace (its resolv.conf and hosts).
fn in_ns(c: &TestCluster, i: usize, args: &[&str]) -> Output {
    let ns = c.spec(i).netns.clone().expect("node namespace");
    Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ip netns exec")
}

/// The SRV answer as node `i`'s namespace sees it (the agent's own resolver
/// child), once it names `want`.
fn wait_dns(c: &TestCluster, i: usize, service: &str, want: &str) {
    let seen = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        let o = in_ns(c, i, &[BIN, "__resolve_srv", "2", service]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.contains(want).then_some(out)
    });
    assert!(
        seen.is_some(),
        "DNS in {}'s namespace never answered {want}",
        c.name(i)
    );
}

/// Node `i`'s configuration with its `endpoints` line replaced by `srv_lines`.
fn use_srv(c: &TestCluster, i: usize, srv_lines: &str) {
    let path = c.config_path(i).to_path_buf();
    let toml = fs::read_to_string(&path).expect("read node config");
    let line = toml
        .lines()
        .find(|l| l.starts_with("endpoints = ["))
        .unwrap_or_else(|| panic!("no endpoints line in\n{toml}"))
        .to_string();
    fs::write(&path, toml.replace(&line, srv_lines)).expect("write node config");
}

/// Every node talks to one of `list` (within 30 s); `what` names the step.
fn all_on(c: &TestCluster, list: &[String], what: &str) {
    for i in 0..c.node_count() {
        let on = wait_for(Duration::from_secs(30), Duration::from_millis(200), || {
            endpoint_opt(c, i).filter(|e| list.contains(e))
        });
        assert!(
            on.is_some(),
            "{} still on {:?} {what}{}",
            c.name(i),
            endpoint_opt(c, i),
            c.logs_tail(40)
        );
    }
}

/// Node `np` takes row `row` (within 30 s).
fn takes_a_write(c: &TestCluster, np: usize, row: i64) {
    let wrote = wait_for(Duration::from_secs(30), Duration::from_millis(200), || {
        c.write_row(np, row).ok()
    });
    assert!(
        wrote.is_some(),
        "{} takes no write{}",
        c.name(np),
        c.logs_tail(40)
    );
}

#[test]
fn srv_bootstrap_ctl_and_rediscovery() {
    // Declared first: dropped last, after the cluster (and its agents) are gone.
    let mut files = NetnsFiles::default();
    let mut opts = common::options("srv", "srv");
    opts.netns = true;
    opts.start_agents = false;
    opts.log_level = Some("debug".into());
    // No timer: this test shows the asks after a failure (the timer's are in
    // `srv_over_tls_with_a_suffix`).
    opts.etcd_extra = vec!["resolve_timeout = 1.0\nresolve_interval = 0".into(); 3];
    let mut c = common::start(opts);
    let observer = c.net().expect("netns").observer();

    // Member j is `etcd<j+1>.srv.test`; at first the records name member 0 only.
    let members: Vec<(String, String, u16)> = c
        .endpoints()
        .iter()
        .enumerate()
        .map(|(j, e)| {
            let (addr, port) = e
                .trim_start_matches("http://")
                .rsplit_once(':')
                .expect("host:port");
            (
                format!("etcd{}.{DOMAIN}", j + 1),
                addr.to_string(),
                port.parse().expect("port"),
            )
        })
        .collect();
    let url = |j: usize| format!("http://{}:{}", members[j].0, members[j].2);
    let dns = Dns::start(observer, SERVICE, &members[..1]);
    let resolv = format!("nameserver {observer}\noptions timeout:1 attempts:2\n");
    for i in 0..c.node_count() {
        let ns = c.spec(i).netns.clone().expect("node namespace");
        files.make(&ns, "127.0.0.1 localhost\n", &resolv);
        use_srv(&c, i, &format!("srv = \"{DOMAIN}\""));
    }
    wait_dns(
        &c,
        0,
        SERVICE,
        &format!("{}:{}", members[0].0, members[0].2),
    );
    for i in 0..c.node_count() {
        c.start_agent(i)
            .unwrap_or_else(|e| panic!("start agent {i}: {e}"));
    }

    // --- 1. Bootstrap from the SRV answer; ctl finds the members the same way ---
    let p = settled(&mut c);
    for i in 0..c.node_count() {
        let log = c.agent_log(i);
        assert!(
            log.contains(&format!("etcd: DNS SRV {SERVICE}: {}", url(0))),
            "{} did not take its endpoints from DNS{}",
            c.name(i),
            c.logs_tail(20)
        );
        assert!(
            log.contains(&format!(
                "etcd: {} resolves to {}",
                members[0].0, members[0].1
            )),
            "{} did not resolve the target{}",
            c.name(i),
            c.logs_tail(20)
        );
        assert_eq!(endpoint_opt(&c, i), Some(url(0)), "{}", c.name(i));
    }
    let cfg = c.config_path(p).to_string_lossy().into_owned();
    let o = in_ns(&c, p, &[BIN, "ctl", "--config", &cfg, "list"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "tenure ctl list: {:?}\n{out}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    for i in 0..c.node_count() {
        assert!(
            out.contains(c.name(i)),
            "ctl list lacks {}:\n{out}",
            c.name(i)
        );
    }
    eprintln!("srv: bootstrapped on {}, ctl list:\n{out}", url(0));

    // --- 2. The records move to the other two members; the first is cut off ---
    dns.stop();
    let _dns = Dns::start(observer, SERVICE, &members[1..]);
    wait_dns(
        &c,
        p,
        SERVICE,
        &format!("{}:{}", members[1].0, members[1].2),
    );
    for i in 0..c.node_count() {
        c.cut_between(i, c.etcd_host(0))
            .unwrap_or_else(|e| panic!("cut {} from etcd1: {e}", c.name(i)));
    }
    let new = [url(1), url(2)];
    all_on(&c, &new, "after the records changed");
    for i in 0..c.node_count() {
        assert!(
            c.agent_log(i)
                .contains(&format!("etcd: DNS SRV {SERVICE}: {}, {}", url(1), url(2))),
            "{} did not say its new list{}",
            c.name(i),
            c.logs_tail(20)
        );
        // The new targets' addresses came with the SRV answer: etcd2's address
        // was taken before any lookup of a new target's name on its own (one loop
        // less for the move; a later lookup after a real failure is no matter).
        let log = c.agent_log(i);
        let taken = log.lines().position(|l| {
            l.contains(&format!(
                "etcd: {} resolves to {}",
                members[1].0, members[1].1
            ))
        });
        let own = log.lines().position(|l| {
            l.contains("etcd: resolving")
                && (l.contains(&members[1].0) || l.contains(&members[2].0))
        });
        assert!(
            taken.is_some_and(|t| own.is_none_or(|o| t < o)),
            "{} resolved a new target on its own before the answer's address (taken at \
             line {taken:?}, own lookup at {own:?}){}",
            c.name(i),
            c.logs_tail(20)
        );
    }

    // The cluster goes on from the new members: a primary takes writes, its
    // leader renews through them.
    let np = c
        .wait_primary(common::FAILOVER)
        .unwrap_or_else(|| panic!("no primary after the move{}", c.logs_tail(40)));
    let before = metric(&c, np, "tenure_renewals_counted_total");
    let renews = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        (metric(&c, np, "tenure_renewals_counted_total") >= before + 3.0).then_some(())
    });
    assert!(
        renews.is_some(),
        "{} does not renew{}",
        c.name(np),
        c.logs_tail(40)
    );
    takes_a_write(&c, np, 4242);
    eprintln!(
        "srv: every node moved to {} and {}; {} leads (was {})",
        url(1),
        url(2),
        c.name(np),
        c.name(p)
    );

    // --- 3. The records name another etcd cluster: refused ---
    let (fc, fp) = (tenure::testbed::free_port(), tenure::testbed::free_port());
    let foreign = ForeignEtcd::start(c.dir(), observer, fc, fp);
    let up = wait_for(Duration::from_secs(20), Duration::from_millis(200), || {
        ForeignEtcd::keys(observer, fc)
    });
    assert!(
        up.is_some_and(|k| k.trim().is_empty()),
        "the foreign etcd is not up, or not empty"
    );
    drop(_dns);
    let fname = format!("foreign.{DOMAIN}");
    let dns = Dns::start(
        observer,
        SERVICE,
        &[(fname.clone(), observer.to_string(), fc)],
    );
    wait_dns(&c, np, SERVICE, &format!("{fname}:{fc}"));
    for i in 0..c.node_count() {
        for j in 1..3 {
            c.cut_between(i, c.etcd_host(j))
                .unwrap_or_else(|e| panic!("cut {} from etcd{}: {e}", c.name(i), j + 1));
        }
    }
    // Every agent got to the foreign records: it refused the member (ALERT) or,
    // were the check missing, talks to it.
    let furl = format!("http://{fname}:{fc}");
    let alert = |c: &TestCluster, i: usize| {
        c.agent_log(i)
            .lines()
            .any(|l| l.contains("ALERT: etcd:") && l.contains("answers for etcd cluster"))
    };
    for i in 0..c.node_count() {
        let reached = wait_for(Duration::from_secs(30), Duration::from_millis(200), || {
            (alert(&c, i) || endpoint_opt(&c, i).as_deref() == Some(furl.as_str())).then_some(())
        });
        assert!(
            reached.is_some(),
            "{} never got to the foreign records{}",
            c.name(i),
            c.logs_tail(40)
        );
    }
    // A while on the foreign records: nothing of ours is written there, and each
    // agent said why.
    std::thread::sleep(Duration::from_secs(3));
    let keys = ForeignEtcd::keys(observer, fc).expect("the foreign etcd answers");
    assert!(
        keys.trim().is_empty(),
        "written into the foreign etcd:\n{keys}"
    );
    for i in 0..c.node_count() {
        assert!(
            alert(&c, i),
            "{} did not refuse the foreign etcd{}",
            c.name(i),
            c.logs_tail(40)
        );
    }
    for i in 0..c.node_count() {
        let refused = metric(&c, i, "tenure_etcd_foreign_answers_total");
        assert!(
            refused > 0.0,
            "{}: tenure_etcd_foreign_answers_total {refused}",
            c.name(i)
        );
    }
    eprintln!("srv: every agent refused the foreign etcd; it holds no key");

    // The records and the network right again: the cluster goes on.
    dns.stop();
    drop(foreign);
    let _dns = Dns::start(observer, SERVICE, &members[1..]);
    for i in 0..c.node_count() {
        c.heal(i)
            .unwrap_or_else(|e| panic!("heal {}: {e}", c.name(i)));
    }
    let np = c
        .wait_primary(common::FAILOVER)
        .unwrap_or_else(|| panic!("no primary after the foreign etcd{}", c.logs_tail(40)));
    all_on(
        &c,
        &new,
        "after the records and the network were right again",
    );
    takes_a_write(&c, np, 4343);

    // --- 4. Other records on reload: refused (a restart asks for them) ---
    let path = c.config_path(np).to_path_buf();
    let toml = fs::read_to_string(&path).expect("read node config");
    let line = format!("srv = \"{DOMAIN}\"");
    fs::write(
        &path,
        toml.replace(&line, &format!("{line}\nsrv_suffix = \"x\"")),
    )
    .expect("write node config");
    let before = c.agent_log(np).len();
    let pid = c.agent_pid(np).expect("agent runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let refused = wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        c.agent_log(np)[before..]
            .lines()
            .find(|l| l.contains("reload refused") && l.contains("srv or srv_suffix changed"))
            .map(str::to_string)
    });
    assert!(
        refused.is_some(),
        "no refusal of the new records{}",
        c.logs_tail(20)
    );
    let kept = endpoint_opt(&c, np);
    assert!(
        kept.as_ref().is_some_and(|e| new.contains(e)),
        "{} left its list after the refused reload: {kept:?}",
        c.name(np)
    );

    // --- 5. A restart while DNS is down: the list of the last answer ---
    // Without it the agent would start with no endpoint and fence the primary it
    // could adopt (S4).
    fs::write(&path, &toml).expect("restore node config");
    drop(_dns);
    let key = c.leader_key().expect("leader key");
    assert_eq!(key.0, c.name(np), "{} no longer leads", c.name(np));
    c.kill_agent(np);
    c.start_agent(np)
        .unwrap_or_else(|e| panic!("restart {}: {e}", c.name(np)));
    let renews = wait_for(Duration::from_secs(20), Duration::from_millis(200), || {
        (metric_opt(&c, np, "tenure_renewals_counted_total").unwrap_or(0.0) >= 3.0).then_some(())
    });
    assert!(
        renews.is_some(),
        "{} does not renew after its restart{}",
        c.name(np),
        c.logs_tail(40)
    );
    assert_eq!(
        c.leader_key().map(|k| (k.0, k.1)),
        Some((key.0.clone(), key.1)),
        "the leadership changed across the restart{}",
        c.logs_tail(40)
    );
    let said = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        c.agent_log(np)
            .contains("no DNS SRV answer at start-up; starting from the list of the last answer")
            .then_some(())
    });
    assert!(
        said.is_some(),
        "{} did not start from the saved list{}",
        c.name(np),
        c.logs_tail(20)
    );
    eprintln!(
        "srv: {} restarted with DNS down, adopted its key from the saved list",
        c.name(np)
    );
}

/// `[etcd] srv` over TLS with `srv_suffix`: the `-ssl-<suffix>` records,
/// `https://` URLs, each target checked against its own name.
#[test]
fn srv_over_tls_with_a_suffix() {
    let mut files = NetnsFiles::default();
    let dir = std::path::PathBuf::from(format!("/dev/shm/tenure-srv-certs-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("cert dir");
    struct Gone(std::path::PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(dir.clone());
    certs::ca(&dir, "ca");
    // One server certificate for the three members, naming each target (no IP:
    // the agents connect to addresses and check the target's name).
    certs::sign(
        &dir,
        "server",
        "etcd",
        &format!(
            "subjectAltName=DNS:etcd1.{DOMAIN},DNS:etcd2.{DOMAIN},DNS:etcd3.{DOMAIN}\n\
             extendedKeyUsage=serverAuth,clientAuth\n"
        ),
    );
    certs::sign(&dir, "tenure", "tenure", "extendedKeyUsage=clientAuth\n");
    let p = |f: &str| dir.join(f).display().to_string();
    let service = format!("_etcd-client-ssl-pga._tcp.{DOMAIN}");

    let mut opts = common::options("srv", "tls");
    opts.netns = true;
    opts.start_agents = false;
    opts.log_level = Some("debug".into());
    opts.etcd_tls = Some(tenure::testbed::etcd::EtcdServerTls {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    });
    // The records asked again every 2 s while the members answer.
    let extra = format!(
        "cacert = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\nresolve_timeout = 1.0\n\
         resolve_interval = 2",
        p("ca.pem"),
        p("tenure.pem"),
        p("tenure.key")
    );
    opts.etcd_extra = vec![extra; 3];
    let mut c = common::start(opts);
    let observer = c.net().expect("netns").observer();

    // The agents' endpoints as the bed wrote them (`https://ADDR:PORT`, the TLS
    // listeners; the bed keeps plain ones of its own): member j becomes
    // `etcd<j+1>.srv.test` at that address and port.
    let toml = fs::read_to_string(c.config_path(0)).expect("read node config");
    let line = toml
        .lines()
        .find(|l| l.starts_with("endpoints = ["))
        .expect("endpoints line")
        .to_string();
    let records: Vec<(String, String, u16)> = line
        .trim_start_matches("endpoints = [")
        .trim_end_matches(']')
        .split(", ")
        .enumerate()
        .map(|(j, u)| {
            let u = u.trim_matches('"');
            let (addr, port) = u
                .strip_prefix("https://")
                .unwrap_or_else(|| panic!("not https: {line}"))
                .rsplit_once(':')
                .expect("host:port");
            (
                format!("etcd{}.{DOMAIN}", j + 1),
                addr.to_string(),
                port.parse().expect("port"),
            )
        })
        .collect();
    assert_eq!(records.len(), 3, "{line}");
    let url = |j: usize| format!("https://{}:{}", records[j].0, records[j].2);
    let dns = Dns::start(observer, &service, &records);
    let resolv = format!("nameserver {observer}\noptions timeout:1 attempts:2\n");
    for i in 0..c.node_count() {
        let ns = c.spec(i).netns.clone().expect("node namespace");
        files.make(&ns, "127.0.0.1 localhost\n", &resolv);
        use_srv(&c, i, &format!("srv = \"{DOMAIN}\"\nsrv_suffix = \"pga\""));
    }
    wait_dns(
        &c,
        0,
        &service,
        &format!("{}:{}", records[0].0, records[0].2),
    );
    for i in 0..c.node_count() {
        c.start_agent(i)
            .unwrap_or_else(|e| panic!("start agent {i}: {e}"));
    }
    let p0 = settled(&mut c);
    let all = format!("{}, {}, {}", url(0), url(1), url(2));
    for i in 0..c.node_count() {
        assert!(
            c.agent_log(i)
                .contains(&format!("etcd: DNS SRV {service}: {all}")),
            "{} did not take its endpoints from the -ssl records{}",
            c.name(i),
            c.logs_tail(20)
        );
        let ep = endpoint_opt(&c, i).unwrap_or_default();
        assert!(ep.starts_with("https://etcd"), "{}: {ep}", c.name(i));
    }

    // ctl from p0's namespace with the first target cut off: under TLS one
    // client checks one name, so it tries the targets in turn.
    c.cut_between(p0, c.etcd_host(0))
        .unwrap_or_else(|e| panic!("cut: {e}"));
    let cfg = c.config_path(p0).to_string_lossy().into_owned();
    let o = in_ns(&c, p0, &[BIN, "ctl", "--config", &cfg, "list"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "tenure ctl list with {} cut off: {:?}\n{out}\n{}",
        url(0),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    for i in 0..c.node_count() {
        assert!(
            out.contains(c.name(i)),
            "ctl list lacks {}:\n{out}",
            c.name(i)
        );
    }
    eprintln!(
        "srv over TLS: bootstrapped from {service}; ctl list with {} cut off:\n{out}",
        url(0)
    );
    c.heal(p0).unwrap_or_else(|e| panic!("heal: {e}"));

    // --- `resolve_interval`: the records drop the first member while it still
    // answers. Every agent learns the new list from the timer (no call failed),
    // and none leaves the member it talks to: a client on the dropped member
    // stays on it; then that member is cut off and they move to the listed ones.
    let before: Vec<(Option<String>, f64)> = (0..c.node_count())
        .map(|i| {
            (
                endpoint_opt(&c, i),
                metric(&c, i, "tenure_etcd_endpoint_switches_total"),
            )
        })
        .collect();
    dns.stop();
    let dns = Dns::start(observer, &service, &records[1..]);
    wait_dns(
        &c,
        0,
        &service,
        &format!("{}:{}", records[1].0, records[1].2),
    );
    let two = format!("etcd: DNS SRV {service}: {}, {}", url(1), url(2));
    for (i, (ep, switches)) in before.iter().enumerate() {
        let heard = wait_for(Duration::from_secs(20), Duration::from_millis(200), || {
            c.agent_log(i).contains(&two).then_some(())
        });
        assert!(
            heard.is_some(),
            "{} did not ask the records again while its member answered{}",
            c.name(i),
            c.logs_tail(20)
        );
        assert_eq!(
            &endpoint_opt(&c, i),
            ep,
            "{} left the member it talked to because DNS changed{}",
            c.name(i),
            c.logs_tail(20)
        );
        assert_eq!(
            metric(&c, i, "tenure_etcd_endpoint_switches_total"),
            *switches,
            "{} switched endpoints though no call failed{}",
            c.name(i),
            c.logs_tail(20)
        );
        if ep.as_deref() == Some(url(0).as_str()) {
            assert!(
                c.agent_log(i).contains(&format!(
                    "etcd: {} is no longer in the SRV records; staying on it",
                    url(0)
                )),
                "{} did not say it stays on the dropped member{}",
                c.name(i),
                c.logs_tail(20)
            );
        }
    }
    for i in 0..c.node_count() {
        c.cut_between(i, c.etcd_host(0))
            .unwrap_or_else(|e| panic!("cut {} from etcd1: {e}", c.name(i)));
    }
    all_on(
        &c,
        &[url(1), url(2)],
        "after the dropped member was cut off",
    );
    let np = c
        .wait_primary(common::FAILOVER)
        .unwrap_or_else(|| panic!("no primary after the move{}", c.logs_tail(40)));
    takes_a_write(&c, np, 4545);
    eprintln!(
        "srv over TLS: the timer's answer dropped {}; every agent stayed on its member \
         until it was cut off, then moved",
        url(0)
    );
    drop(dns);
}
