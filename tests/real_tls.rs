//! Issue 12 on real parts: etcd over TLS with client certificates and etcd
//! authentication, and secrets kept out of logs and API answers.
//!
//! One bed (CI time): three etcd members serving `https://` with
//! `--client-cert-auth` and `auth enable`, a role limited to the cluster's prefix.
//! pg1 and pg3 authenticate by certificate CN (`tenure`, no password, no token);
//! pg2 by user and password (`password_file`), with a certificate whose CN is no
//! user and `tls_server_name` naming the server certificate's DNS SAN. The cluster
//! bootstraps and fails over after a host crash. Then agents given an expired
//! client certificate, a wrong CA or a user without rights refuse to lead and say
//! why; `tenure ctl` takes the etcd password from `$CREDENTIALS_DIRECTORY`; and no
//! configured secret appears in any log line or API answer of the run.
//! Certificates are made here with Debian's `openssl` (an expired one with
//! `openssl ca -startdate/-enddate`: OpenSSL 3 refuses `-days -1`).

#[path = "support/certs.rs"]
mod certs;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use certs::{ca, sign, sign_expired};
use common::{FAILOVER, options, settled, start};
use tenure::config::EtcdAuth;
use tenure::dcs::{Etcd, Security};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::etcd::EtcdServerTls;
use tenure::testbed::{etcdkv, free_port, stop_child};

const ROOT_PW: &str = "rootpwTLS9";

struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn make() -> Certs {
        let dir = PathBuf::from(format!("/dev/shm/tenure-tls-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cert dir");
        ca(&dir, "ca");
        ca(&dir, "wrongca");
        sign(
            &dir,
            "server",
            "etcd",
            "subjectAltName=IP:127.0.0.1,DNS:etcd.test\nextendedKeyUsage=serverAuth,clientAuth\n",
        );
        let client = "extendedKeyUsage=clientAuth\n";
        sign(&dir, "tenure", "tenure", client);
        sign(&dir, "pg2", "pg2-cert-not-a-user", client);
        sign_expired(&dir, "expired", "tenure");
        Certs { dir }
    }

    fn p(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }

    /// `[etcd]` lines: CA, client certificate `cert` (.pem/.key), extra lines.
    fn etcd(&self, cacert: &str, cert: &str, extra: &str) -> String {
        format!(
            "cacert = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n{extra}",
            self.p(&format!("{cacert}.pem")),
            self.p(&format!("{cert}.pem")),
            self.p(&format!("{cert}.key")),
        )
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn etcdctl(c: &TestCluster, args: &[&str]) {
    common::etcdctl(c, args).unwrap_or_else(|e| panic!("{e}"));
}

/// A copy of node 0's config as a node `name` with its own directories and ports,
/// its `[etcd]` extra lines replaced by `etcd_extra`.
fn variant(c: &TestCluster, base_extra: &str, name: &str, etcd_extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(c.config_path(0)).expect("read pg1 config");
    let dir = c.dir().join(name);
    std::fs::create_dir_all(dir.join("socket")).expect("variant dir");
    let mut out = String::new();
    for line in text.replace(base_extra, etcd_extra).lines() {
        let l = if line.starts_with("name = ") {
            format!("name = \"{name}\"")
        } else if line.starts_with("data_dir = ") {
            format!("data_dir = \"{}\"", dir.join("data").display())
        } else if line.starts_with("socket_dir = ") {
            format!("socket_dir = \"{}\"", dir.join("socket").display())
        } else if line.starts_with("listen = ") {
            format!("listen = \"127.0.0.1:{}\"", free_port())
        } else {
            line.to_string()
        };
        out.push_str(&l);
        out.push('\n');
    }
    let path = c.dir().join(format!("{name}.toml"));
    std::fs::write(&path, out).expect("write variant");
    path
}

fn agent(c: &TestCluster, config: &Path, log: &Path) -> Child {
    let f = std::fs::File::create(log).expect("log");
    Command::new(&c.opts.binary)
        .args(["run", "--config"])
        .arg(config)
        .env("TENURE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("dup"))
        .stderr(f)
        .spawn()
        .expect("spawn agent")
}

#[test]
fn real_etcd_tls_auth_failover_refusals_and_no_secret_leaks() {
    let certs = Certs::make();
    let mut opts = options("tls", "tls");
    opts.start_agents = false;
    opts.etcd_tls = Some(EtcdServerTls {
        ca: certs.dir.join("ca.pem"),
        cert: certs.dir.join("server.pem"),
        key: certs.dir.join("server.key"),
    });
    let pw_file = certs.dir.join("pwuser.password");
    let pw_secret = format!("pwuserSecret{}", std::process::id());
    std::fs::write(&pw_file, format!("{pw_secret}\n")).expect("password file");
    let cn_extra = certs.etcd("ca", "tenure", "");
    let pw_extra = certs.etcd(
        "ca",
        "pg2",
        &format!(
            "tls_server_name = \"etcd.test\"\nusername = \"pwuser\"\npassword_file = \"{}\"\n",
            pw_file.display()
        ),
    );
    opts.etcd_extra = vec![cn_extra.clone(), pw_extra.clone(), cn_extra.clone()];
    let mut c = start(opts);
    let prefix = format!("/service/{}/", c.opts.scope);
    let norights_secret = format!("noRightsSecret{}", std::process::id());

    // etcd auth: a role limited to the cluster's prefix; CN `tenure` and `pwuser`
    // hold it, `norights` holds nothing.
    etcdctl(
        &c,
        &[
            "user",
            "add",
            &format!("root:{ROOT_PW}"),
            "--interactive=false",
        ],
    );
    etcdctl(&c, &["role", "add", "tenure"]);
    etcdctl(
        &c,
        &[
            "role",
            "grant-permission",
            "tenure",
            "--prefix=true",
            "readwrite",
            &prefix,
        ],
    );
    for (u, pw) in [
        ("tenure", "unusedCnUserPw1"),
        ("pwuser", pw_secret.as_str()),
        ("norights", norights_secret.as_str()),
    ] {
        etcdctl(
            &c,
            &["user", "add", &format!("{u}:{pw}"), "--interactive=false"],
        );
    }
    etcdctl(&c, &["user", "grant-role", "tenure", "tenure"]);
    etcdctl(&c, &["user", "grant-role", "pwuser", "tenure"]);
    etcdctl(&c, &["auth", "enable"]);
    // The bed's own reads (leader key, ...) go through the plain listener as root.
    etcdkv::use_auth(
        &c.endpoints(),
        Some(("root", ROOT_PW)),
        Duration::from_secs(5),
    )
    .expect("bed authenticates");

    // Bootstrap over TLS with both kinds of authentication, then a host crash.
    // pg3 first: it usually bootstraps, so after its crash pg1 leads and pg2 (the
    // one agent with a token) is a replica — the one that sends only
    // `LeaseTimeToLive` on an idle loop, which etcd answers without checking the
    // token, so the test below covers its way of noticing (a read every ttl/3).
    for i in (0..3).rev() {
        c.start_agent(i).expect("start agent");
    }
    let p = settled(&mut c);
    let (_, epoch) = c.leader_key().expect("leader key");
    c.host_crash(p).expect("host crash");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)));
    let (leader, new_epoch) = c.leader_key().expect("leader key after failover");
    assert_eq!(leader, c.name(np));
    assert!(new_epoch > epoch, "epoch {new_epoch} after {epoch}");
    println!("failover over TLS: {} -> {}", c.name(p), c.name(np));

    // An expired client certificate: refused at start-up, naming the file.
    let expired = variant(
        &c,
        &cn_extra,
        "bad-expired",
        &certs.etcd("ca", "expired", ""),
    );
    let out = Command::new(&c.opts.binary)
        .args(["run", "--config"])
        .arg(&expired)
        .output()
        .expect("run expired");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an expired certificate was accepted");
    println!("expired: {}", err.trim());
    assert!(
        err.contains(&certs.p("expired.pem")) && err.contains("expired"),
        "{err}"
    );

    // A wrong CA and a user without rights: the agents run, never lead, and log
    // the cause at error level.
    let wrong_ca = variant(
        &c,
        &cn_extra,
        "bad-ca",
        &certs.etcd("wrongca", "tenure", ""),
    );
    let nr_file = certs.dir.join("norights.password");
    std::fs::write(&nr_file, &norights_secret).expect("norights file");
    let norights = variant(
        &c,
        &cn_extra,
        "bad-rights",
        &certs.etcd(
            "ca",
            "pg2",
            &format!(
                "username = \"norights\"\npassword_file = \"{}\"\n",
                nr_file.display()
            ),
        ),
    );
    let logs = [c.dir().join("bad-ca.log"), c.dir().join("bad-rights.log")];
    let mut bad: Vec<Child> = vec![
        agent(&c, &wrong_ca, &logs[0]),
        agent(&c, &norights, &logs[1]),
    ];
    std::thread::sleep(Duration::from_secs(5));
    for ch in &mut bad {
        stop_child(ch, Duration::from_secs(3));
    }
    let ca_log = std::fs::read_to_string(&logs[0]).unwrap_or_default();
    let nr_log = std::fs::read_to_string(&logs[1]).unwrap_or_default();
    assert!(
        ca_log
            .lines()
            .any(|l| l.contains("ERROR") && l.to_ascii_lowercase().contains("certificate")),
        "wrong CA: no error naming the certificate:\n{ca_log}"
    );
    assert!(
        nr_log
            .lines()
            .any(|l| l.contains("ERROR") && l.contains("permission denied")),
        "no rights: no error naming the permission:\n{nr_log}"
    );
    // Once per distinct cause, not once per loop (the agent keeps retrying).
    let repeats = nr_log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("permission denied"))
        .count();
    assert!(repeats <= 2, "logged {repeats} times:\n{nr_log}");
    for l in ca_log.lines().chain(nr_log.lines()) {
        if l.contains("ERROR") {
            println!("refusal: {l}");
        }
    }
    let (leader, _) = c.leader_key().expect("leader key");
    assert!(!leader.starts_with("bad-"), "{leader} leads");

    // `$CREDENTIALS_DIRECTORY` (as systemd's LoadCredential= sets it): ctl reads
    // the etcd password from `tenure-etcd-password`.
    let creds = c.dir().join("credentials");
    std::fs::create_dir_all(&creds).expect("credentials dir");
    std::fs::write(creds.join(tenure::config::CRED_ETCD), &pw_secret).expect("credential");
    let via_cred = variant(
        &c,
        &cn_extra,
        "via-cred",
        &certs.etcd("ca", "pg2", "username = \"pwuser\"\n"),
    );
    let out = Command::new(&c.opts.binary)
        .args(["ctl", "--config"])
        .arg(&via_cred)
        .arg("list")
        .env("CREDENTIALS_DIRECTORY", &creds)
        .output()
        .expect("run ctl");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.contains(c.name(np)),
        "ctl with the credential: {}{}",
        listed,
        String::from_utf8_lossy(&out.stderr)
    );

    // Tokens forgotten by etcd (`auth disable` + `auth enable` drops every simple
    // token, as a member restart drops its own): a call with the old token fails
    // with "invalid auth token" and is NOT retried with a fresh token inside the
    // call (etcd-client's automatic refresh stays off); the explicit step gets a
    // new one. The running cluster keeps its leader (pg2 re-authenticates in its
    // own step, its member key is written again).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let in_s = |s: u64| tenure::clock::now().add(Duration::from_secs(s));
    let sec = Security {
        tls: None,
        auth: Some(EtcdAuth {
            username: "pwuser".into(),
            password: pw_secret.clone(),
        }),
    };
    let mut e = Etcd::connect_with(&rt, &c.endpoints(), &prefix, &sec, in_s(3)).expect("connect");
    assert!(!e.authenticated());
    e.authenticate(&rt, in_s(3)).expect("authenticate");
    e.read_cluster(&rt, in_s(3)).expect("read with a token");
    let (key_before, epoch_before) = c.leader_key().expect("leader key");
    let pg2_rev = c
        .get_kv("members/pg2")
        .map(|kv| kv.mod_revision)
        .unwrap_or(0);
    etcdctl(&c, &[&format!("--user=root:{ROOT_PW}"), "auth", "disable"]);
    etcdctl(&c, &["auth", "enable"]);
    let err = e
        .read_cluster(&rt, in_s(3))
        .expect_err("the old token must be refused, not refreshed inside the call")
        .to_string();
    assert!(tenure::dcs::is_invalid_auth_token(&err), "{err}");
    e.auth_lost();
    e.authenticate(&rt, in_s(3)).expect("authenticate again");
    e.read_cluster(&rt, in_s(3))
        .expect("read with the new token");
    etcdkv::use_auth(
        &c.endpoints(),
        Some(("root", ROOT_PW)),
        Duration::from_secs(5),
    )
    .expect("bed authenticates again");
    let rewritten =
        tenure::testbed::wait_for(Duration::from_secs(15), Duration::from_millis(200), || {
            c.get_kv("members/pg2")
                .filter(|kv| kv.mod_revision > pg2_rev)
                .map(|_| ())
        });
    assert!(
        rewritten.is_some(),
        "pg2 did not write its member key with a new token{}",
        c.logs_tail(30)
    );
    let pg2_log = c.agent_log(1);
    let refused = pg2_log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("invalid auth token"));
    assert!(
        refused.is_some(),
        "pg2 never saw its token refused:\n{pg2_log}"
    );
    println!("token refused: {}", refused.unwrap_or_default());
    assert_eq!(
        c.leader_key(),
        Some((key_before, epoch_before)),
        "the leader changed while tokens were renewed{}",
        c.logs_tail(30)
    );

    // No configured secret in any log line or API answer of the run.
    let pw = &c.passwords;
    let secrets = [
        pw.superuser.as_str(),
        pw.replication.as_str(),
        pw.rewind.as_str(),
        pw.api.as_str(),
        pw_secret.as_str(),
        norights_secret.as_str(),
    ];
    let mut seen = String::new();
    for i in 0..c.node_count() {
        seen.push_str(&c.agent_log(i));
        for path in ["/patroni", "/cluster", "/config", "/history", "/"] {
            if let Some((_, body)) = c.api_body(i, path) {
                seen.push_str(&body);
            }
        }
    }
    seen.push_str(&ca_log);
    seen.push_str(&nr_log);
    seen.push_str(&listed);
    for s in secrets {
        assert!(
            !seen.contains(s),
            "a secret leaked into a log or an API answer"
        );
    }
    let _ = etcdkv::use_auth(&c.endpoints(), None, Duration::from_secs(1));
}
