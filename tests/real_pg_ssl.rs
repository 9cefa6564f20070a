//! Issue 12 on real parts, the PostgreSQL side: replication, pg_basebackup and
//! pg_rewind over TLS with `sslmode = verify-full`.
//!
//! One bed (CI time): three nodes, each PostgreSQL with `ssl = on`, a server
//! certificate whose SAN is IP:127.0.0.1, and `ssl_ca_file` (so clients present
//! their certificates); the replication and rewind roles each with their own
//! client certificate, the replication role with a CRL too. Every certificate
//! lives in a directory whose name has a space and a quote, so every path goes
//! through the conninfo quoting. The cluster bootstraps (replicas basebackup),
//! both replicas stream over TLS (`pg_stat_ssl` joined to `pg_stat_replication`,
//! with the client certificate's DN), tenure's pg_hba lines are `hostssl` only.
//! After the primary's host crash a replica takes over and the old primary
//! rejoins through pg_rewind (or a basebackup) over TLS: the new primary's log
//! (`log_connections`) shows the connection with `SSL enabled`. tenure's member
//! lines carry `clientcert=verify-full` (`[postgresql] hba_clientcert`): the
//! rewind role's password over TLS without its certificate is refused, with
//! another role's certificate refused for the name, with its own accepted; and a
//! reload whose file drops the option while the running pg_hba keeps it is
//! refused when a certificate file at the running path no longer fits. Last, a node given
//! a wrong root certificate cannot basebackup, its agent's log names the cause,
//! and it retries once per loop (not at every wake-up). `tenure check-config`
//! refuses a key others can read, naming it. A second bed runs the member lines
//! with `hba_method = "cert"` and no role passwords at all: bootstrap, streaming,
//! failover and rejoin on certificates alone.

#[path = "support/certs.rs"]
mod certs;
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use certs::{ca, crl, sign};
use common::{BOOT, FAILOVER, REJOIN, options, settled, start};
use tenure::testbed::cluster::{ClusterOptions, TestCluster};
use tenure::testbed::wait_for;

/// The certificates, in a directory whose name needs quoting everywhere.
struct Certs {
    top: PathBuf,
    dir: PathBuf,
}

impl Certs {
    fn make() -> Certs {
        let top = PathBuf::from(format!(
            "/dev/shm/tenure-pgssl-certs-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&top);
        let dir = top.join("pg ssl 'q'");
        std::fs::create_dir_all(&dir).expect("cert dir");
        for d in [&top, &dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        ca(&dir, "ca");
        ca(&dir, "wrongca");
        sign(
            &dir,
            "server",
            "tenure-pg",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        let client = "extendedKeyUsage=clientAuth\n";
        sign(&dir, "replicator", "replicator", client);
        sign(&dir, "rewind", "rewind_user", client);
        crl(&dir);
        // The PostgreSQL user reads everything; keys are its own and 0600, as
        // libpq and the postmaster require.
        let pg = nix::unistd::User::from_name("postgres")
            .expect("look up postgres")
            .expect("the postgres user");
        for f in std::fs::read_dir(&dir).expect("list") {
            let f = f.expect("entry").path();
            let key = f.extension().is_some_and(|e| e == "key");
            let mode = if key { 0o600 } else { 0o644 };
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).expect("chmod");
            if key {
                std::os::unix::fs::chown(&f, Some(pg.uid.as_raw()), Some(pg.gid.as_raw()))
                    .expect("chown");
            }
        }
        // One root certificate per node, so one node can be given a wrong one.
        for n in 1..=3 {
            std::fs::copy(dir.join("ca.pem"), dir.join(format!("root-pg{n}.crt"))).expect("copy");
        }
        Certs { top, dir }
    }

    fn p(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.top);
    }
}

fn sql_rows(c: &TestCluster, i: usize, q: &str) -> Vec<Vec<String>> {
    c.sql(i, q)
        .unwrap_or_else(|e| panic!("{q}: {e}"))
        .into_iter()
        .map(|r| r.into_iter().map(|v| v.unwrap_or_default()).collect())
        .collect()
}

/// `(application_name, ssl, client_dn)` of every streaming standby of `p`.
fn ssl_standbys(c: &TestCluster, p: usize) -> Vec<Vec<String>> {
    sql_rows(
        c,
        p,
        "SELECT r.application_name, s.ssl::text, coalesce(s.client_dn, '') \
         FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) \
         WHERE r.state = 'streaming' ORDER BY 1",
    )
}

/// The settled primary and its two replicas, each streaming over TLS and presenting
/// the replication role's certificate (`/CN=replicator`) in the primary's
/// `pg_stat_replication` (`what` names the bed in the message).
fn settled_streaming_as_replicator(c: &mut TestCluster, what: &str) -> (usize, Vec<usize>) {
    let p = settled(c);
    let others: Vec<usize> = (0..3).filter(|&i| i != p).collect();
    let expect: Vec<Vec<String>> = others
        .iter()
        .map(|&i| {
            vec![
                c.name(i).to_string(),
                "true".into(),
                "/CN=replicator".into(),
            ]
        })
        .collect();
    // A replica's wal receiver says "streaming" a moment before the primary's
    // pg_stat_replication row leaves "catchup": wait for the primary's view.
    let rows = standbys_until(c, p, |rows| rows == expect.as_slice());
    assert_eq!(rows, expect, "standbys of {} {what}", c.name(p));
    (p, others)
}

/// The primary `p`'s host crashes; a replica takes over and `p`'s restarted agent
/// rejoins it as a streaming replica (pg_rewind or a basebackup). The new primary.
fn crash_and_rejoin(c: &mut TestCluster, p: usize) -> usize {
    c.host_crash(p).expect("host crash");
    let n = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
    c.start_agent(p).expect("restart the old primary's agent");
    wait_for(REJOIN, Duration::from_millis(200), || {
        c.is_streaming_replica(p).then_some(())
    })
    .unwrap_or_else(|| panic!("{} did not rejoin{}", c.name(p), c.logs_tail(60)));
    n
}

/// `ssl_standbys(c, p)` once `done` holds of it, or its last reading after 10 s.
fn standbys_until(
    c: &TestCluster,
    p: usize,
    done: impl Fn(&[Vec<String>]) -> bool,
) -> Vec<Vec<String>> {
    let mut rows = ssl_standbys(c, p);
    let t0 = Instant::now();
    while !done(&rows) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        rows = ssl_standbys(c, p);
    }
    rows
}

/// Node `i`'s PostgreSQL server log (`<data_dir>.log`, next to the data dir).
fn server_log(c: &TestCluster, i: usize) -> String {
    let mut p = c.data_dir(i).as_os_str().to_os_string();
    p.push(".log");
    std::fs::read_to_string(PathBuf::from(p)).unwrap_or_default()
}

/// The instants (agent log stamps, seconds) of every "starting job Basebackup".
fn basebackup_starts(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains("starting job Basebackup"))
        .filter_map(|l| l.strip_prefix('[')?.split_once("s]")?.0.parse().ok())
        .collect()
}

/// The rewind role's connection to `i` without a client certificate is refused with
/// PostgreSQL's own words (`hba_clientcert` and `hba_method = "cert"` alike).
fn refused_without_a_certificate(c: &TestCluster, certs: &Certs, i: usize) {
    let no_cert = rewind_psql(c, certs, i, None);
    assert!(
        !no_cert.0
            && no_cert
                .1
                .contains("connection requires a valid client certificate"),
        "rewind_user without a certificate: {no_cert:?}"
    );
}

/// `psql` as `rewind_user` (its password) over TLS to node `i`'s PostgreSQL,
/// presenting `cert` (certificate, key) or no certificate: (succeeded, stderr).
fn rewind_psql(
    c: &TestCluster,
    certs: &Certs,
    i: usize,
    cert: Option<(&str, &str)>,
) -> (bool, String) {
    // A client certificate libpq is told to use but that does not exist is not
    // sent (and ~/.postgresql holds none here).
    let (crt, key) = cert.map_or_else(
        || {
            (
                "/nonexistent/none.crt".to_string(),
                "/nonexistent/none.key".to_string(),
            )
        },
        |(c, k)| (certs.p(c), certs.p(k)),
    );
    let conn = format!(
        "host=127.0.0.1 port={} dbname=postgres user=rewind_user sslmode=verify-ca \
         sslrootcert='{}' sslcert='{}' sslkey='{}' connect_timeout=5",
        c.pg_port(i),
        certs.p("ca.pem").replace('\'', "\\'"),
        crt.replace('\'', "\\'"),
        key.replace('\'', "\\'"),
    );
    let out = Command::new("/usr/lib/postgresql/15/bin/psql")
        .args(["-X", "-w", "-At", "-c", "SELECT 1", &conn])
        .env("PGPASSWORD", &c.passwords.rewind)
        .output()
        .expect("run psql");
    (
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "1",
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The bed's options for TLS on both sides: the server's certificate and CA, each
/// connecting role's root certificate, client certificate and key (replication's
/// with a CRL), `sslmode = verify-full`, and `member_rule` (the `[postgresql]` line
/// that says what tenure's member lines require of a client) in `[postgresql]`.
fn tls_options(certs: &Certs, tag: &str, member_rule: &str) -> ClusterOptions {
    let mut opts = options("pgssl", tag);
    opts.section_extra = vec![
        (
            "[postgresql]".into(),
            // The bed's own SQL connects without TLS as the superuser: a line of
            // its own after tenure's hostssl ones (which it does not match).
            format!(
                "sslmode = \"verify-full\"\n{member_rule}\n\
                 pg_hba = [\"host all postgres 127.0.0.1/32 scram-sha-256\"]"
            ),
        ),
        (
            "[postgresql.parameters]".into(),
            format!(
                "ssl = \"on\"\nssl_cert_file = \"{}\"\nssl_key_file = \"{}\"\n\
                 ssl_ca_file = \"{}\"\nlog_connections = \"on\"",
                certs.p("server.pem"),
                certs.p("server.key"),
                certs.p("ca.pem"),
            ),
        ),
        (
            "[postgresql.authentication.replication]".into(),
            format!(
                "sslrootcert = \"{}\"\nsslcert = \"{}\"\nsslkey = \"{}\"\nsslcrl = \"{}\"",
                certs.p("root-{name}.crt"),
                certs.p("replicator.pem"),
                certs.p("replicator.key"),
                certs.p("ca.crl"),
            ),
        ),
        (
            "[postgresql.authentication.rewind]".into(),
            format!(
                "sslrootcert = \"{}\"\nsslcert = \"{}\"\nsslkey = \"{}\"",
                certs.p("root-{name}.crt"),
                certs.p("rewind.pem"),
                certs.p("rewind.key"),
            ),
        ),
    ];
    opts
}

#[test]
fn real_pg_over_tls_verify_full_failover_rewind_and_a_wrong_root_cert() {
    let certs = Certs::make();
    let opts = tls_options(&certs, "pgssl", "hba_clientcert = \"verify-full\"");
    let mut c = start(opts);

    // A key others can read is refused before anything starts, by name.
    let bad_key = certs.dir.join("world.key");
    std::fs::copy(certs.dir.join("replicator.key"), &bad_key).expect("copy key");
    std::fs::set_permissions(&bad_key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let bad_cfg = c.dir().join("bad-key.toml");
    let text = std::fs::read_to_string(c.config_path(0)).expect("config");
    std::fs::write(
        &bad_cfg,
        text.replace(&certs.p("replicator.key"), &bad_key.display().to_string()),
    )
    .expect("write");
    let out = Command::new(&c.opts.binary)
        .arg("check-config")
        .arg(&bad_cfg)
        .output()
        .expect("check-config");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("postgresql.authentication.replication.sslkey")
            && err.contains("world.key")
            && err.contains("group or world access"),
        "{err}"
    );

    // Bootstrap: both replicas basebackup and stream over TLS, each presenting
    // the replication role's certificate.
    let (p, others) = settled_streaming_as_replicator(&mut c, "over TLS");
    let hba = std::fs::read_to_string(c.data_dir(p).join("pg_hba.conf")).expect("pg_hba");
    assert!(
        hba.contains(
            "hostssl replication \"replicator\" 127.0.0.1/32 scram-sha-256 \
             clientcert=verify-full\n"
        ) && hba.contains(
            "hostssl all \"postgres\",\"rewind_user\" 127.0.0.1/32 scram-sha-256 \
             clientcert=verify-full\n"
        ),
        "{hba}"
    );
    // `hba_clientcert = "verify-full"`: the right password over TLS is not enough
    // without the role's certificate, and with it the role connects.
    refused_without_a_certificate(&c, &certs, p);
    let with_cert = rewind_psql(&c, &certs, p, Some(("rewind.pem", "rewind.key")));
    assert!(
        with_cert.0,
        "rewind_user with its certificate: {with_cert:?}"
    );
    // verify-full: another role's certificate (CN replicator) with rewind_user's
    // password is refused too, for the name (PostgreSQL logs the CN mismatch).
    let wrong_cn = rewind_psql(&c, &certs, p, Some(("replicator.pem", "replicator.key")));
    assert!(
        !wrong_cn.0,
        "rewind_user with replicator's certificate: {wrong_cn:?}"
    );
    let mismatch = "certificate validation (clientcert=verify-full) failed for user \
                    \"rewind_user\": CN mismatch";
    wait_for(Duration::from_secs(5), Duration::from_millis(100), || {
        server_log(&c, p).contains(mismatch).then_some(())
    })
    .unwrap_or_else(|| panic!("no CN mismatch in {}'s server log", c.name(p)));
    assert!(
        !hba.lines().any(|l| l.starts_with("host replication")),
        "{hba}"
    );
    let conf = std::fs::read_to_string(c.data_dir(others[0]).join("tenure.conf")).expect("conf");
    assert!(
        conf.contains("sslmode=verify-full sslrootcert=''")
            && conf.contains("pg ssl \\\\''q\\\\''"),
        "{conf}"
    );

    // The primary's host crashes: a replica takes over, the old primary rejoins
    // through pg_rewind (or a basebackup) over TLS.
    let n = crash_and_rejoin(&mut c, p);
    let log = c.agent_log(p);
    let rewound = log
        .lines()
        .any(|l| l.contains("Rewind {") && l.contains("finished"));
    let rebuilt = log
        .lines()
        .any(|l| l.contains("Basebackup {") && l.contains("finished"));
    assert!(
        rewound || rebuilt,
        "no rewind or basebackup finished:\n{log}"
    );
    let slog = server_log(&c, n);
    let (who, what) = if rewound {
        ("connection authorized: user=rewind_user", "pg_rewind")
    } else {
        (
            "replication connection authorized: user=replicator application_name=tenure-basebackup",
            "pg_basebackup",
        )
    };
    let lines: Vec<&str> = slog.lines().filter(|l| l.contains(who)).collect();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.contains("SSL enabled")),
        "{what} of {} against {}: {lines:?}",
        c.name(p),
        c.name(n)
    );
    let mine = vec![
        c.name(p).to_string(),
        "true".to_string(),
        "/CN=replicator".to_string(),
    ];
    let rows = standbys_until(&c, n, |rows| rows.contains(&mine));
    assert!(
        rows.contains(&vec![
            c.name(p).to_string(),
            "true".into(),
            "/CN=replicator".into()
        ]),
        "{rows:?}"
    );
    eprintln!(
        "{} rejoined {} through {what} over TLS; standbys: {rows:?}",
        c.name(p),
        c.name(n)
    );

    // A node given a wrong root certificate: its fresh basebackup fails, it never
    // streams, and its agent's log names the cause.
    let w = (0..3).find(|&i| i != n && i != p).expect("a third node");
    c.term_agent(w, Duration::from_secs(30))
        .expect("stop the agent");
    wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
        c.pg_pids(w).is_empty().then_some(())
    })
    .expect("its PostgreSQL stopped");
    std::fs::copy(
        certs.dir.join("wrongca.pem"),
        certs.dir.join(format!("root-{}.crt", c.name(w))),
    )
    .expect("wrong root cert");
    std::fs::remove_dir_all(c.data_dir(w)).expect("remove the test's data dir");
    c.start_agent(w).expect("restart");
    let cause = wait_for(BOOT, Duration::from_millis(200), || {
        c.agent_log(w)
            .lines()
            .rev()
            .find(|l| l.contains("Basebackup {") && l.contains("failed"))
            .map(str::to_string)
    })
    .unwrap_or_else(|| panic!("no failed basebackup{}", c.logs_tail(40)));
    assert!(
        cause.contains("certificate verify failed"),
        "the cause is named: {cause}"
    );
    // Retried once per loop (0.5 s here), not at every wake-up the failed child's
    // exit causes (it fails within milliseconds): the starts in its log, on the
    // agent's own clock, are a loop_wait apart.
    let starts = wait_for(BOOT, Duration::from_millis(200), || {
        let s = basebackup_starts(&c.agent_log(w));
        (s.len() >= 4).then_some(s)
    })
    .unwrap_or_else(|| panic!("no retries{}", c.logs_tail(40)));
    let gaps: Vec<f64> = starts.windows(2).map(|p| p[1] - p[0]).collect();
    assert!(
        gaps.iter().all(|&g| g >= 0.45),
        "basebackup starts: {starts:?}"
    );
    assert!(!c.is_streaming_replica(w));
    assert!(
        !ssl_standbys(&c, n).iter().any(|r| r[0] == c.name(w)),
        "{} streams with a wrong root cert",
        c.name(w)
    );
    assert_eq!(c.primaries(), vec![n]);

    // A reload cannot hide a certificate the running pg_hba would refuse: the
    // file no longer sets hba_clientcert (it takes a restart, so verify-full still
    // runs), and the rewind role's certificate file now holds replicator's. The
    // agent says the option differs and refuses the reload, naming the key and
    // the certificate's name.
    let path = c.config_path(n);
    let text = std::fs::read_to_string(path).expect("config");
    assert!(
        text.contains("hba_clientcert = \"verify-full\"\n"),
        "{text}"
    );
    std::fs::write(path, text.replace("hba_clientcert = \"verify-full\"\n", ""))
        .expect("write config");
    std::fs::copy(
        certs.dir.join("replicator.pem"),
        certs.dir.join("rewind.pem"),
    )
    .expect("swap the rewind certificate");
    let before = c.agent_log(n).len();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.agent_pid(n).expect("agent runs") as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let said = wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        let log = c.agent_log(n);
        let new = log[before..].to_string();
        let refused = new
            .lines()
            .find(|l| l.contains("reload refused"))?
            .to_string();
        Some((new, refused))
    });
    let (new, refused) = said.unwrap_or_else(|| panic!("no refusal{}", c.logs_tail(30)));
    assert!(
        refused.contains("postgresql.authentication.rewind.sslcert")
            && refused.contains("replicator")
            && refused.contains("not the role's name"),
        "{refused}"
    );
    assert!(
        new.contains("member lines: no client certificate in the file, hba_clientcert = \"verify-full\" running"),
        "{new}"
    );
}

/// `[postgresql] hba_method = "cert"` with no replication or rewind password in
/// the file: tenure's member lines authenticate by the client certificate alone,
/// the roles are created without a password and the passfile holds none; the
/// cluster bootstraps (basebackup), streams, fails over and rejoins (pg_rewind or
/// a basebackup) on certificates only. The rewind role without a certificate is
/// refused, with another role's certificate refused for the name, with its own
/// (and no password) accepted.
#[test]
fn real_pg_cert_auth_without_passwords_bootstrap_failover_rejoin() {
    let certs = Certs::make();
    let mut opts = tls_options(&certs, "pgcert", "hba_method = \"cert\"");
    opts.role_passwords = false;
    let mut c = start(opts);
    let text = std::fs::read_to_string(c.config_path(0)).expect("config");
    assert!(
        !text.contains(&c.passwords.replication) && !text.contains(&c.passwords.rewind),
        "the bed wrote a role password: {text}"
    );

    let (p, others) = settled_streaming_as_replicator(&mut c, "on certificates");
    let hba = std::fs::read_to_string(c.data_dir(p).join("pg_hba.conf")).expect("pg_hba");
    for want in [
        "hostssl replication \"replicator\" 127.0.0.1/32 cert\n",
        "hostssl all \"postgres\",\"rewind_user\" 127.0.0.1/32 cert\n",
    ] {
        assert!(hba.contains(want), "{want} in {hba}");
    }
    // No password on either role, none in any node's passfile.
    let pw = sql_rows(
        &c,
        p,
        "SELECT rolname, (rolpassword IS NULL)::text FROM pg_authid \
         WHERE rolname IN ('replicator', 'rewind_user') ORDER BY 1",
    );
    assert_eq!(
        pw,
        vec![
            vec!["replicator".to_string(), "true".into()],
            vec!["rewind_user".to_string(), "true".into()],
        ]
    );
    refused_without_a_certificate(&c, &certs, p);
    let (wrong_cn, own) = (
        rewind_psql(&c, &certs, p, Some(("replicator.pem", "replicator.key"))),
        rewind_psql(&c, &certs, p, Some(("rewind.pem", "rewind.key"))),
    );
    assert!(
        !wrong_cn.0 && wrong_cn.1.contains("certificate authentication failed"),
        "rewind_user with replicator's certificate: {wrong_cn:?}"
    );
    assert!(
        own.0,
        "rewind_user with its certificate, no password: {own:?}"
    );

    // The primary's host crashes: a replica takes over, the old primary rejoins.
    let n = crash_and_rejoin(&mut c, p);
    let mine = vec![
        c.name(p).to_string(),
        "true".to_string(),
        "/CN=replicator".to_string(),
    ];
    let rows = standbys_until(&c, n, |rows| rows.contains(&mine));
    assert!(rows.contains(&mine), "{rows:?}");
    let slog = server_log(&c, n);
    let how = if c.agent_log(p).contains("pg_rewind") {
        "connection authorized: user=rewind_user"
    } else {
        "replication connection authorized: user=replicator"
    };
    assert!(
        slog.lines()
            .any(|l| l.contains(how) && l.contains("SSL enabled")),
        "{} rejoined {} without a logged TLS connection ({how})",
        c.name(p),
        c.name(n)
    );
    // The replicas wrote their passfile for the basebackup: empty.
    for &i in &others {
        let mut pf = c.data_dir(i).as_os_str().to_os_string();
        pf.push(".pgpass");
        let pf = std::fs::read_to_string(PathBuf::from(&pf))
            .unwrap_or_else(|e| panic!("{}'s passfile {pf:?}: {e}", c.name(i)));
        assert_eq!(pf, "", "{}'s passfile holds a password", c.name(i));
    }
    eprintln!(
        "{} rejoined {} on certificates only; standbys: {rows:?}",
        c.name(p),
        c.name(n)
    );
}
