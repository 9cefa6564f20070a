//! Pure tests of `tenure ctl`: the command line, the HTTP client's encoding and
//! parsing (and one exchange with a local listener), the tables and JSON, the
//! `--set` patch and its S6 check.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::CtlError;
use super::args::{self, Command, FlushTarget, RoleFilter};
use super::http::{self, Credentials};
use super::render::{self, Snapshot};
use super::verbs;
use crate::core::model::{
    ClusterView, FailoverRequest, HistoryEntry, Initialize, LeaderKey, Member, MemberInfo, SyncKey,
};

fn parse(a: &[&str]) -> Result<args::Invocation, String> {
    args::parse(a.iter().map(|s| s.to_string()))
}

fn usage(a: &[&str]) -> String {
    match parse(a) {
        Err(e) => e,
        Ok(i) => panic!("{a:?} parsed: {i:?}"),
    }
}

#[test]
fn options_before_or_after_the_command() {
    let a = parse(&["-c", "f.toml", "--json", "list"]).expect("parses");
    let b = parse(&["list", "--json", "--config", "f.toml"]).expect("parses");
    assert_eq!(a, b);
    assert_eq!(a.command, Command::List);
    assert!(a.json);
    assert_eq!(a.config, Path::new("f.toml"));
    assert_eq!(a.timeout, args::DEFAULT_WAIT);
    let d = parse(&["topology"]).expect("parses");
    assert_eq!(d.config, Path::new(args::DEFAULT_CONFIG));
    assert!(!d.json);
}

#[test]
fn every_command_parses() {
    let cmd = |a: &[&str]| parse(a).expect("parses").command;
    assert_eq!(cmd(&["history"]), Command::History);
    assert_eq!(cmd(&["show-config"]), Command::ShowConfig);
    assert_eq!(cmd(&["version"]), Command::Version);
    assert_eq!(cmd(&["--help"]), Command::Help);
    assert_eq!(cmd(&["help"]), Command::Help);
    assert_eq!(
        cmd(&[
            "switchover",
            "--leader",
            "pg1",
            "--candidate",
            "pg2",
            "--scheduled",
            "2026-12-01T10:30:00+01:00",
            "--force"
        ]),
        Command::Switchover {
            leader: Some("pg1".into()),
            candidate: Some("pg2".into()),
            scheduled: Some("2026-12-01T10:30:00+01:00".into()),
        }
    );
    // Patroni's older spellings of --leader, and `--scheduled now`.
    assert_eq!(
        cmd(&["switchover", "--master", "pg1", "--scheduled", "now"]),
        Command::Switchover {
            leader: Some("pg1".into()),
            candidate: None,
            scheduled: None,
        }
    );
    assert_eq!(
        cmd(&["failover", "--candidate", "pg3"]),
        Command::Failover {
            candidate: "pg3".into(),
            leader: None
        }
    );
    assert_eq!(cmd(&["pause", "--wait"]), Command::Pause { wait: true });
    assert_eq!(cmd(&["resume"]), Command::Resume { wait: false });
    assert_eq!(
        cmd(&[
            "restart",
            "pg1",
            "pg2",
            "--pending",
            "--role",
            "replica",
            "--pg-version",
            "15.4"
        ]),
        Command::Restart {
            members: vec!["pg1".into(), "pg2".into()],
            pending: true,
            role: Some(RoleFilter::Replica),
            pg_version: Some("15.4".into()),
            scheduled: None,
        }
    );
    assert_eq!(
        cmd(&["restart", "pg2", "--scheduled", "2026-12-01T03:00:00Z"]),
        Command::Restart {
            members: vec!["pg2".into()],
            pending: false,
            role: None,
            pg_version: None,
            scheduled: Some("2026-12-01T03:00:00Z".into()),
        }
    );
    assert_eq!(
        cmd(&["flush", "restart"]),
        Command::Flush {
            target: FlushTarget::Restart,
            members: vec![],
        }
    );
    assert_eq!(
        cmd(&["flush", "restart", "pg1", "pg3"]),
        Command::Flush {
            target: FlushTarget::Restart,
            members: vec!["pg1".into(), "pg3".into()],
        }
    );
    assert_eq!(
        cmd(&["--json", "flush", "switchover"]),
        Command::Flush {
            target: FlushTarget::Switchover,
            members: vec![],
        }
    );
    assert_eq!(cmd(&["reload"]), Command::Reload { members: vec![] });
    assert_eq!(
        cmd(&["reinit", "pg2", "--wait", "--force"]),
        Command::Reinit {
            members: vec!["pg2".into()],
            wait: true
        }
    );
    assert_eq!(
        cmd(&[
            "edit-config",
            "--set",
            "ttl=10",
            "-s",
            "slots.barman.type=physical"
        ]),
        Command::EditConfig {
            set: vec![
                ("ttl".into(), "10".into()),
                ("slots.barman.type".into(), "physical".into())
            ],
            apply: None,
            replace: None,
        }
    );
    assert_eq!(
        cmd(&["dsn"]),
        Command::Dsn {
            member: None,
            role: None
        }
    );
    assert_eq!(
        cmd(&["dsn", "-r", "replica"]),
        Command::Dsn {
            member: None,
            role: Some(RoleFilter::Replica)
        }
    );
    assert_eq!(
        cmd(&["dsn", "pg2"]),
        Command::Dsn {
            member: Some("pg2".into()),
            role: None
        }
    );
    // `--watch` (patronictl's `-w`, `-W` every 2 s) for list and topology.
    assert_eq!(parse(&["list"]).expect("parses").watch, None);
    assert_eq!(
        parse(&["list", "--watch", "0.5"]).expect("parses").watch,
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        parse(&["topology", "-W"]).expect("parses").watch,
        Some(Duration::from_secs(2))
    );
    let t = parse(&["pause", "--wait", "--timeout", "2.5"]).expect("parses");
    assert_eq!(t.timeout, Duration::from_millis(2500));
}

#[test]
fn usage_errors_name_the_argument() {
    assert!(usage(&[]).contains("no command"));
    assert!(usage(&["frob"]).contains("\"frob\""));
    assert!(usage(&["list", "--force"]).contains("--force does not apply to list"));
    assert!(usage(&["list", "extra"]).contains("\"extra\""));
    assert!(usage(&["list", "--bogus"]).contains("--bogus"));
    assert!(usage(&["failover"]).contains("--candidate"));
    assert!(usage(&["failover", "--candidate"]).contains("needs a value"));
    assert!(usage(&["reinit"]).contains("MEMBER"));
    assert!(usage(&["edit-config", "--set", "ttl"]).contains("\"ttl\""));
    assert!(usage(&["edit-config", "--set", "a..b=1"]).contains("empty part"));
    assert!(usage(&["list", "--watch", "0"]).contains("--watch \"0\""));
    assert!(usage(&["dsn", "pg1", "pg2"]).contains("\"pg2\""));
    assert!(usage(&["dsn", "pg1", "--role", "replica"]).contains("not both"));
    assert!(usage(&["dsn", "--force"]).contains("--force does not apply to dsn"));
    assert!(usage(&["list", "-w", "soon"]).contains("\"soon\""));
    assert!(usage(&["history", "-W"]).contains("--watch does not apply to history"));
    // Of the config key's `postgresql` section only `parameters` is read: the
    // rest is refused, not stored to do nothing; `null` removes what another
    // writer left. `--pg NAME=VALUE` is `--set postgresql.parameters.name=VALUE`,
    // the name lower-cased (a dot in it kept), the value trimmed and a string
    // (`true`, `5000` too), `null` a removal.
    let e = usage(&["edit-config", "--set", "postgresql.use_pg_rewind=true"]);
    assert!(e.contains("reads only postgresql.parameters"), "{e}");
    assert!(usage(&["edit-config", "-s", "postgresql={}"]).contains("reads only"));
    assert_eq!(
        parse(&[
            "edit-config",
            "-p",
            "WORK_MEM= 8MB ",
            "--pg",
            "pg_stat_statements.max=5000",
            "--pg",
            "jit=true",
            "--set",
            "postgresql.parameters.old=null",
            "--pg",
            "Bad.Na.me=null"
        ])
        .expect("parses")
        .command,
        Command::EditConfig {
            set: vec![
                ("postgresql.parameters.work_mem".into(), "\"8MB\"".into()),
                (
                    "postgresql.parameters.pg_stat_statements.max".into(),
                    "\"5000\"".into()
                ),
                ("postgresql.parameters.jit".into(), "\"true\"".into()),
                ("postgresql.parameters.old".into(), "null".into()),
                ("postgresql.parameters.bad.na.me".into(), "null".into()),
            ],
            apply: None,
            replace: None,
        }
    );
    assert!(usage(&["edit-config", "--pg", "work_mem"]).contains("NAME=VALUE"));
    for bad in ["a.b.c=1", "1x=2", "work mem=3"] {
        let e = usage(&["edit-config", "--pg", bad]);
        assert!(
            e.starts_with("--pg ") && e.contains("not a PostgreSQL parameter name"),
            "{e}"
        );
    }
    assert!(usage(&["list", "--pg", "a=1"]).contains("--pg does not apply to list"));
    assert_eq!(
        parse(&["edit-config", "--set", "postgresql=null"])
            .expect("parses")
            .command,
        Command::EditConfig {
            set: vec![("postgresql".into(), "null".into())],
            apply: None,
            replace: None,
        }
    );
    // No change given: the editor. `--replace` is the whole value, alone.
    assert_eq!(
        parse(&["edit-config"]).expect("parses").command,
        Command::EditConfig {
            set: vec![],
            apply: None,
            replace: None
        }
    );
    assert_eq!(
        parse(&["edit-config", "--apply", "-", "-s", "ttl=9"])
            .expect("parses")
            .command,
        Command::EditConfig {
            set: vec![("ttl".into(), "9".into())],
            apply: Some("-".into()),
            replace: None
        }
    );
    for bad in [
        &["edit-config", "--replace", "f", "--set", "ttl=9"][..],
        &["edit-config", "--replace", "f", "--apply", "g"],
        &["edit-config", "--replace", "f", "--pg", "a=1"],
    ] {
        assert!(
            usage(bad).contains("--replace takes the whole value"),
            "{bad:?}"
        );
    }
    assert!(usage(&["list", "--apply", "f"]).contains("--apply does not apply to list"));
    assert!(usage(&["switchover", "--scheduled", "tomorrow"]).contains("\"tomorrow\""));
    assert!(usage(&["restart", "--role", "boss"]).contains("\"boss\""));
    assert!(usage(&["restart", "--pg-version", "15.x"]).contains("\"15.x\""));
    // What the members would refuse is refused here (review of bad input, 8).
    assert!(usage(&["restart", "--pg-version", "15"]).contains("X.Y or X.Y.Z"));
    assert!(usage(&["restart", "--pg-version", "9.6"]).contains("X.Y or X.Y.Z"));
    // A key of 20,000 parts overflowed the patch's recursion (review of bad
    // input, 5).
    let deep = format!("{}a=1", "a.".repeat(20_000));
    assert!(usage(&["edit-config", "--set", &deep]).contains("more than the 16"));
    assert!(usage(&["pause", "--timeout", "-1"]).contains("\"-1\""));
    assert!(usage(&["pause", "--candidate", "x"]).contains("--candidate does not apply"));
    assert!(usage(&["reload", "--wait"]).contains("--wait does not apply"));
    assert!(usage(&["restart", "--scheduled", "10:30"]).contains("\"10:30\""));
    assert!(usage(&["flush"]).contains("restart or switchover"));
    assert!(usage(&["flush", "everything"]).contains("\"everything\""));
    assert!(usage(&["flush", "switchover", "pg1"]).contains("\"pg1\""));
    assert_eq!(
        parse(&["flush", "switchover", "--force"])
            .expect("parses")
            .command,
        Command::Flush {
            target: FlushTarget::Switchover,
            members: vec![],
        },
        "patronictl's scripts pass --force"
    );
    assert!(
        usage(&["flush", "restart", "--scheduled", "now"]).contains("--scheduled does not apply")
    );
}

#[test]
fn scheduled_times_need_an_offset() {
    for ok in [
        "2026-12-01T10:30+01:00",
        "2026-12-01T10:30:00Z",
        "2026-12-01T10:30:00.25-05:30",
        "2026-12-01 10:30:00z",
        // ISO 8601 forms Python's isoformat() and patronictl produce.
        "2026-12-01T10:30:00+0100",
    ] {
        assert!(args::check_timestamp(ok).is_ok(), "{ok}");
    }
    for bad in [
        "2026-12-01T10:30:00",
        "2026-13-01T10:30Z",
        "2026-12-01T24:00Z",
        "2026-12-01",
        "2026-12-01T10:30:00.Z",
        "",
        "ä",
    ] {
        assert!(args::check_timestamp(bad).is_err(), "{bad}");
    }
}

#[test]
fn base64_and_urls() {
    assert_eq!(http::base64(b""), "");
    assert_eq!(http::base64(b"a"), "YQ==");
    assert_eq!(http::base64(b"ab"), "YWI=");
    assert_eq!(http::base64(b"abc"), "YWJj");
    assert_eq!(http::base64(b"user:pass"), "dXNlcjpwYXNz");
    assert_eq!(
        http::parse_api_url("http://127.0.0.1:8008/patroni"),
        Ok(("127.0.0.1".into(), 8008))
    );
    assert_eq!(
        http::parse_api_url("http://[::1]:8008"),
        Ok(("::1".into(), 8008))
    );
    assert_eq!(http::parse_api_url("http://db1"), Ok(("db1".into(), 80)));
    // Issue 12: https:// is spoken (443 by default).
    assert_eq!(
        http::parse_api_url("https://10.0.0.1:8008/patroni"),
        Ok(("10.0.0.1".into(), 8008))
    );
    assert_eq!(http::parse_api_url("https://db1"), Ok(("db1".into(), 443)));
    assert!(http::is_https("https://db1") && !http::is_https("http://db1"));
    assert!(http::parse_api_url("ftp://x").is_err());
    assert!(http::parse_api_url("http://h:port").is_err());
    assert!(http::parse_api_url("http://").is_err());
    // Review of bad input, 9: a bracketed IPv6 address without a port.
    assert_eq!(
        http::parse_api_url("http://[::1]/patroni"),
        Ok(("::1".into(), 80))
    );
    assert_eq!(
        http::parse_api_url("https://[fd00::1]"),
        Ok(("fd00::1".into(), 443))
    );
    for bad in [
        "http://[::1",
        "http://[::1]x",
        "http://h:0",
        "http://a b:80",
        "http://h\n:80",
    ] {
        assert!(http::parse_api_url(bad).is_err(), "{bad}");
    }
    assert!(
        http::parse_api_url("http://h:notaport")
            .unwrap_err()
            .contains("not a number in 1..65535")
    );
}

#[test]
fn requests_carry_auth_and_length() {
    let c = Credentials {
        username: "admin".into(),
        password: "s3cret".into(),
    };
    let r = String::from_utf8(http::encode_request(
        "PATCH",
        "10.0.0.1",
        8008,
        "/config",
        Some("{\"pause\":true}"),
        Some(&c),
    ))
    .expect("utf8");
    assert!(r.starts_with("PATCH /config HTTP/1.1\r\n"));
    assert!(r.contains("\r\nAuthorization: Basic YWRtaW46czNjcmV0\r\n"));
    assert!(r.contains("\r\nContent-Length: 14\r\n"));
    assert!(r.ends_with("\r\n\r\n{\"pause\":true}"));
    assert!(!format!("{c:?}").contains("s3cret"));
    let g = String::from_utf8(http::encode_request("GET", "h", 1, "/patroni", None, None))
        .expect("utf8");
    assert!(!g.contains("Authorization"));
    assert!(!g.contains("Content-Length"));
    let p = String::from_utf8(http::encode_request("POST", "h", 1, "/reload", None, None))
        .expect("utf8");
    assert!(p.contains("Content-Length: 0\r\n"));
}

#[test]
fn responses_parse_by_length_or_eof() {
    let full = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(
        http::parse_response(full, false),
        Ok(Some(http::Response {
            status: 200,
            body: "{}".into()
        }))
    );
    assert_eq!(
        http::parse_response(&full[..full.len() - 1], false),
        Ok(None)
    );
    assert_eq!(http::parse_response(b"HTTP/1.1 503 No", false), Ok(None));
    let no_len = b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy";
    assert_eq!(http::parse_response(no_len, false), Ok(None));
    assert_eq!(
        http::parse_response(no_len, true).map(|r| r.map(|r| (r.status, r.body))),
        Ok(Some((503, "busy".into())))
    );
    assert!(http::parse_response(b"SSH-2.0-OpenSSH\r\n\r\n", true).is_err());
    assert!(
        http::parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            true
        )
        .is_err()
    );
}

/// A one-shot server on 127.0.0.1 answering `answer` after reading the request;
/// returns the port and a handle yielding the request it saw.
fn one_shot(answer: &'static [u8]) -> (u16, std::thread::JoinHandle<String>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("\r\n\r\n{}") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        if !answer.is_empty() {
            s.write_all(answer).ok();
        } else {
            // Say nothing until the client gives up.
            std::thread::sleep(Duration::from_millis(1500));
        }
        String::from_utf8_lossy(&got).into_owned()
    });
    (port, h)
}

#[test]
fn a_request_to_a_local_server() {
    let (port, h) = one_shot(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
    let c = Credentials {
        username: "u".into(),
        password: "p".into(),
    };
    let r = http::request(
        &format!("http://127.0.0.1:{port}/patroni"),
        "POST",
        "/restart",
        Some("{}"),
        Some(&c),
        Duration::from_secs(5),
    )
    .expect("answer");
    assert_eq!(r.status, 401);
    let seen = h.join().expect("server");
    assert!(seen.starts_with("POST /restart HTTP/1.1\r\n"), "{seen}");
    assert!(seen.contains("Authorization: Basic dTpw\r\n"), "{seen}");

    // A server that never answers: an error naming the URL, not a hang.
    let (port, h) = one_shot(b"");
    let e = http::request(
        &format!("http://127.0.0.1:{port}"),
        "POST",
        "/reload",
        Some("{}"),
        None,
        Duration::from_millis(300),
    )
    .expect_err("no answer");
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(
        e.contains("no complete answer") || e.contains("in time"),
        "{e}"
    );
    h.join().expect("server");
}

fn member(name: &str, role: &str, xlog: u64, epoch: i64) -> Member {
    Member {
        name: name.into(),
        mod_revision: 10,
        lease: 1,
        info: MemberInfo {
            conn_url: format!("postgres://10.0.0.{}:5432/postgres", name.len()),
            api_url: format!("http://10.0.0.{}:8008/patroni", name.len()),
            state: "running".into(),
            role: role.into(),
            version: "0.1.0".into(),
            xlog_location: xlog,
            timeline: 2,
            epoch: Some(epoch),
            ..MemberInfo::default()
        },
    }
}

const MB: u64 = 1024 * 1024;

/// pg1 leads (100 MiB), pg2 is the sync standby 3 MiB behind the `status` optime,
/// pg3 published no position and wants a restart; paused.
fn snapshot() -> Snapshot {
    let mut pg3 = member("pg3", "replica", 0, 41);
    pg3.info.conn_url = "postgres://10.0.0.3:5433/postgres".into();
    let mut raw = std::collections::BTreeMap::new();
    let mut pr = Map::new();
    pr.insert("pending_restart".into(), json!(true));
    raw.insert("pg3".to_string(), pr);
    let mut sr = Map::new();
    sr.insert(
        "scheduled_restart".into(),
        json!({"schedule": "2026-12-02T03:00:00+01:00", "role": "replica"}),
    );
    raw.insert("pg2".to_string(), sr);
    Snapshot {
        scope: "demo".into(),
        view: ClusterView {
            revision: 99,
            leader: Some(LeaderKey {
                name: "pg1".into(),
                epoch: 41,
                mod_revision: 41,
                lease: 7,
            }),
            members: vec![
                member("pg2", "replica", 97 * MB + 100, 41),
                member("pg1", "primary", 100 * MB, 41),
                pg3,
            ],
            initialize: Some(Initialize::Done { sysid: 7301 }),
            config: Some(r#"{"ttl": 7, "pause": true}"#.into()),
            sync: Some(Ok(SyncKey {
                leader: "pg1".into(),
                sync_standbys: vec!["pg2".into()],
            })),
            status_optime: Some(100 * MB + 100),
            ..ClusterView::default()
        },
        raw_members: raw,
        leader_lease_ttl: Some(6),
    }
}

/// Finding L1: `tenure list` names a member whose key lacks
/// `"acquire_record": true` under the table (failed before: nothing said).
#[test]
fn list_names_a_member_running_an_older_agent() {
    let t = render::list_table(&snapshot(), false);
    assert!(!t.contains("older than the acquisition record"), "{t}");
    let mut s = snapshot();
    s.view.members[2].info.lacks_acquire_record = true;
    let t = render::list_table(&s, false);
    assert!(
        t.contains(" pg3: runs an agent older than the acquisition record"),
        "{t}"
    );
}

#[test]
fn list_rows_mark_the_leader_and_measure_lag_from_the_keys() {
    let s = snapshot();
    let rows = render::rows(&s);
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["pg1", "pg2", "pg3"]);
    assert!(rows[0].is_leader && !rows[1].is_leader && !rows[2].is_leader);
    assert_eq!(rows[0].role, "Leader");
    assert_eq!(rows[1].role, "Sync Standby");
    assert_eq!(rows[2].role, "Replica");
    assert_eq!(rows[0].lag, render::Lag::Leader);
    // Measured against the larger of `status` optime and the leader's position.
    assert_eq!(rows[1].lag, render::Lag::Bytes(3 * MB));
    assert_eq!(rows[2].lag, render::Lag::Unknown);
    assert_eq!(rows[0].lease_left, Some(6));
    assert_eq!(rows[1].lease_left, None);
    assert!(rows[2].pending_restart && !rows[1].pending_restart);
    assert!(s.paused());
}

#[test]
fn list_table_for_people() {
    let t = render::list_table(&snapshot(), false);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("+ Cluster: demo (7301) "), "{t}");
    assert!(
        lines[1].contains("| Member ")
            && lines[1].contains("| Lag in MB |")
            && lines[1].contains("| Lease left |")
            && lines[1].contains("| Pending restart |")
            && lines[1].contains("| Scheduled restart "),
        "{t}"
    );
    let row = |name: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .map(|l| {
                l.split('|')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    // A port other than 5432 shows every host with its port.
    assert_eq!(
        row("pg1"),
        [
            "pg1",
            "10.0.0.3:5432",
            "Leader",
            "running",
            "2",
            "41",
            "6 s"
        ]
    );
    assert_eq!(
        row("pg2"),
        [
            "pg2",
            "10.0.0.3:5432",
            "Sync Standby",
            "running",
            "2",
            "3",
            "41",
            "2026-12-02T03:00:00+01:00"
        ]
    );
    assert_eq!(
        row("pg3"),
        [
            "pg3",
            "10.0.0.3:5433",
            "Replica",
            "running",
            "2",
            "unknown",
            "41",
            "*"
        ]
    );
    assert!(t.contains(" Maintenance mode: on\n"), "{t}");
    assert!(!t.contains("Switchover scheduled"), "{t}");
    // Every line of the frame has the same width.
    let w = lines[1].chars().count();
    for l in &lines[..lines.len() - 1] {
        assert_eq!(l.chars().count(), w, "{t}");
    }
}

#[test]
fn topology_puts_the_replicas_under_the_leader() {
    let s = snapshot();
    let t = render::list_table(&s, true);
    let names: Vec<String> = t
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Member"))
        .map(|l| l.split('|').nth(1).unwrap_or("").trim().to_string())
        .collect();
    assert_eq!(names, ["pg1", "+ pg2", "+ pg3"]);
    let j = render::topology_json(&s);
    assert_eq!(j["topology"][0]["name"], "pg1");
    let reps: Vec<&str> = j["topology"][0]["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(reps, ["pg2", "pg3"]);
    // Without a leader every member is a root.
    let mut s = s;
    s.view.leader = None;
    let j = render::topology_json(&s);
    assert_eq!(j["topology"].as_array().map(Vec::len), Some(3));
    assert!(render::list_table(&s, false).contains("No leader"));
}

#[test]
fn list_json_for_scripts() {
    let j = render::list_json(&snapshot());
    assert_eq!(j["scope"], "demo");
    assert_eq!(j["leader"], "pg1");
    assert_eq!(j["epoch"], 41);
    assert_eq!(j["lease_ttl_left"], 6);
    assert_eq!(j["paused"], true);
    assert_eq!(j["system_identifier"], "7301");
    let m = j["members"].as_array().expect("members");
    assert_eq!(m.len(), 3);
    assert_eq!(m[0]["name"], "pg1");
    assert_eq!(m[0]["leader"], true);
    assert_eq!(m[0]["lag_bytes"], 0);
    assert_eq!(m[1]["lag_bytes"], 3 * MB);
    assert_eq!(m[1]["lag_mb"], 3);
    assert_eq!(m[1]["role"], "Sync Standby");
    assert_eq!(m[2]["lag_bytes"], Value::Null);
    assert_eq!(m[2]["pending_restart"], true);
    assert_eq!(m[2]["port"], 5433);
    assert_eq!(m[1]["scheduled_restart"], "2026-12-02T03:00:00+01:00");
    assert_eq!(m[0]["scheduled_restart"], Value::Null);
    assert_eq!(j["scheduled_switchover"], Value::Null);
}

/// A switchover the `failover` key schedules is shown under the table and in the
/// JSON; a value that does not parse is not shown as a schedule; a scheduled
/// restart that is not a string is not shown.
#[test]
fn list_shows_what_is_scheduled() {
    let mut s = snapshot();
    s.view.failover = Some(FailoverRequest {
        leader: Some("pg1".into()),
        member: Some("pg2".into()),
        scheduled_at: None,
        scheduled_text: Some("2026-12-02T03:00:00+01:00".into()),
        mod_revision: 90,
        parse_error: None,
    });
    let t = render::list_table(&s, false);
    assert!(
        t.contains(" Switchover scheduled at: 2026-12-02T03:00:00+01:00 (from pg1, to pg2)\n"),
        "{t}"
    );
    let j = render::list_json(&s);
    assert_eq!(
        j["scheduled_switchover"],
        json!({"at": "2026-12-02T03:00:00+01:00", "from": "pg1", "to": "pg2"})
    );
    if let Some(f) = s.view.failover.as_mut() {
        f.member = None;
        f.leader = None;
    }
    let t = render::list_table(&s, false);
    assert!(
        t.contains("(from the leader, to the best candidate)"),
        "{t}"
    );
    if let Some(f) = s.view.failover.as_mut() {
        f.parse_error = Some("scheduled_at \"x\" is not an RFC 3339 time".into());
    }
    assert!(!render::list_table(&s, false).contains("Switchover scheduled"));
    assert_eq!(render::list_json(&s)["scheduled_switchover"], Value::Null);
    let mut s = snapshot();
    let garbage: Map<String, Value> =
        serde_json::from_value(json!({"scheduled_restart": {"schedule": 17}})).expect("map");
    s.raw_members.insert("pg2".into(), garbage);
    let rows = render::rows(&s);
    assert_eq!(rows[1].scheduled_restart, None);
    assert!(!render::list_table(&s, false).contains("Scheduled restart"));
    // Control characters from other writers are escaped, never printed.
    let mut s = snapshot();
    let odd: Map<String, Value> =
        serde_json::from_value(json!({"scheduled_restart": {"schedule": "2026\n\u{1b}[31mX"}}))
            .expect("map");
    s.raw_members.insert("pg2".into(), odd);
    s.view.members[0].info.state = "run\nning".into();
    let t = render::list_table(&s, false);
    assert!(!t.contains('\u{1b}'), "{t:?}");
    assert!(
        t.contains("2026\\n\\u{1b}[31mX") && t.contains("run\\nning"),
        "{t}"
    );
    let w = t.lines().nth(1).unwrap().chars().count();
    for l in t
        .lines()
        .take_while(|l| l.starts_with('+') || l.starts_with('|'))
    {
        assert_eq!(l.chars().count(), w, "the frame holds: {t}");
    }
}

#[test]
fn a_leader_without_a_member_key_and_garbled_members_still_show() {
    let mut s = snapshot();
    s.view.members.retain(|m| m.name != "pg1");
    s.view.members[0].info.parse_error = Some("timeline: expected a u32".into());
    let rows = render::rows(&s);
    let pg1 = rows.iter().find(|r| r.name == "pg1").expect("pg1 row");
    assert!(pg1.is_leader);
    assert_eq!(pg1.state, "no member key");
    let t = render::list_table(&s, false);
    assert!(t.contains(" pg2: timeline: expected a u32"), "{t}");
}

#[test]
fn history_table_and_json() {
    let h = vec![
        HistoryEntry {
            timeline: 1,
            lsn: 0x3000060,
            reason: "no recovery target specified".into(),
            timestamp: "2026-12-01T10:00:00Z".into(),
            new_leader: "pg2".into(),
        },
        HistoryEntry {
            timeline: 2,
            lsn: (1 << 32) + 0x28,
            reason: "switchover".into(),
            timestamp: "2026-12-01T11:00:00Z".into(),
            new_leader: "pg1".into(),
        },
    ];
    let t = render::history_table(&h);
    assert!(t.contains("| TL | LSN "), "{t}");
    assert!(
        t.contains("|  1 | 0/3000060 | no recovery target specified |"),
        "{t}"
    );
    assert!(t.contains("|  2 | 1/28 "), "{t}");
    let j = render::history_json(&h);
    assert_eq!(j[1]["lsn"], (1u64 << 32) + 0x28);
    assert_eq!(j[1]["lsn_text"], "1/28");
    assert_eq!(j[0]["new_leader"], "pg2");
}

#[test]
fn versions_read_as_people_write_them() {
    assert_eq!(render::pg_version_text(150004), "15.4");
    assert_eq!(render::pg_version_text(90624), "9.6.24");
}

#[test]
fn set_builds_a_patch_and_null_removes() {
    let p = verbs::patch_of(&[
        ("ttl".into(), "10".into()),
        ("pause".into(), "true".into()),
        ("postgresql.parameters.work_mem".into(), "8MB".into()),
        ("postgresql.parameters.max_connections".into(), "200".into()),
        ("promote_delay".into(), "null".into()),
    ]);
    assert_eq!(
        Value::Object(p.clone()),
        json!({
            "ttl": 10, "pause": true, "promote_delay": null,
            "postgresql": {"parameters": {"work_mem": "8MB", "max_connections": 200}}
        })
    );
    // The patch between two values turns the one into the other; a removed key
    // is `null`, an unchanged one absent; the leaves name what changes.
    let obj = |v: Value| match v {
        Value::Object(o) => o,
        _ => unreachable!(),
    };
    let old = obj(json!({"ttl": 7, "pause": true, "promote_delay": null,
        "slots": {"a": {"type": "physical"}, "b": {"type": "physical"}},
        "postgresql": {"parameters": {"work_mem": "8MB", "jit": "off"}}}));
    let new = obj(
        json!({"ttl": 9, "promote_delay": null, "ignore_slots": [{"name": "x"}],
        "slots": {"a": {"type": "physical"}},
        "postgresql": {"parameters": {"work_mem": "16MB", "jit": "off"}}}),
    );
    let d = verbs::diff_patch(&old, &new);
    assert_eq!(
        Value::Object(d.clone()),
        json!({"ttl": 9, "pause": null, "ignore_slots": [{"name": "x"}],
            "slots": {"b": null}, "postgresql": {"parameters": {"work_mem": "16MB"}}})
    );
    let mut round = old.clone();
    verbs::apply_patch(&mut round, &d);
    assert_eq!(round, new);
    assert!(verbs::diff_patch(&new, &new).is_empty());
    let mut leaves: Vec<String> = verbs::patch_leaves(&d)
        .iter()
        .map(|p| p.join("."))
        .collect();
    leaves.sort();
    assert_eq!(
        leaves,
        [
            "ignore_slots",
            "pause",
            "postgresql.parameters.work_mem",
            "slots.b",
            "ttl"
        ]
    );
    // Patches combined keep their removals (review of session 24, H2: `--set
    // x=null` reached no member); a removal takes every spelling the key holds.
    let mut a = obj(json!({"ttl": 9, "postgresql": {"parameters": {"jit": "on"}}}));
    verbs::combine_patches(
        &mut a,
        &verbs::patch_of(&[
            ("promote_delay".into(), "null".into()),
            ("postgresql.parameters.work_mem".into(), "null".into()),
        ]),
    );
    assert_eq!(
        Value::Object(a.clone()),
        json!({"ttl": 9, "promote_delay": null,
            "postgresql": {"parameters": {"jit": "on", "work_mem": null}}})
    );
    let held = obj(
        json!({"postgresql": {"parameters": {"Work_Mem": "1MB", "WORK_MEM": "2MB", "jit": "on"}}}),
    );
    verbs::remove_every_spelling(&mut a, &held);
    assert_eq!(
        a["postgresql"]["parameters"],
        json!({"jit": "on", "work_mem": null, "Work_Mem": null, "WORK_MEM": null})
    );
    // A setting's own dot stays in its name.
    assert_eq!(
        Value::Object(verbs::patch_of(&[(
            "postgresql.parameters.pg_stat_statements.track".into(),
            "all".into()
        )])),
        json!({"postgresql": {"parameters": {"pg_stat_statements.track": "all"}}})
    );
    let mut cfg = match json!({
        "ttl": 7, "loop_wait": 1, "promote_delay": 3,
        "postgresql": {"parameters": {"work_mem": "4MB", "shared_buffers": "1GB"}}
    }) {
        Value::Object(o) => o,
        _ => unreachable!(),
    };
    verbs::apply_patch(&mut cfg, &p);
    assert_eq!(
        Value::Object(cfg),
        json!({
            "ttl": 10, "loop_wait": 1, "pause": true,
            "postgresql": {"parameters": {
                "work_mem": "8MB", "shared_buffers": "1GB", "max_connections": 200}}
        })
    );
}

fn example_config() -> crate::config::Config {
    let text = include_str!("../../packaging/tenure.example.toml");
    crate::config::Config::parse(Path::new("example.toml"), text).expect("the example parses")
}

#[test]
fn edit_config_is_checked_against_s6_for_every_member() {
    let cfg = example_config();
    let members = vec![("pg1".to_string(), Some(13)), ("pg2".to_string(), None)];
    // The example's own dynamic values pass.
    assert_eq!(
        verbs::check_timing(&cfg, &cfg.dynamic_json(), &members),
        Ok(())
    );
    // loop_wait + 2 x retry_timeout > ttl: S6(a), named with the numbers.
    let e = verbs::check_timing(&cfg, r#"{"ttl": 3}"#, &members).expect_err("S6(a)");
    assert!(e.starts_with("for pg1 (its watchdog W = 13 s)"), "{e}");
    assert!(e.contains("loop_wait + 2 × retry_timeout <= ttl"), "{e}");
    // A ttl too short for the W pg1 armed (2W + R + M > ttl), fine without one.
    let e = verbs::check_timing(&cfg, r#"{"ttl": 20}"#, &members).expect_err("W");
    assert!(e.starts_with("for pg1"), "{e}");
    assert_eq!(
        verbs::check_timing(&cfg, r#"{"ttl": 20}"#, &members[1..]),
        Ok(())
    );
    // A bad value is refused too.
    assert!(verbs::check_timing(&cfg, r#"{"ttl": "ten"}"#, &[]).is_err());
}

#[test]
fn server_texts_and_exit_codes() {
    assert_eq!(
        verbs::server_says(r#"{"error": "candidate lags"}"#),
        "candidate lags"
    );
    assert_eq!(verbs::server_says("plain words\n"), "plain words");
    assert_eq!(verbs::server_says(""), "(empty body)");
    let codes: Vec<u8> = [
        CtlError::Failed(String::new()),
        CtlError::Usage(String::new()),
        CtlError::Config(String::new()),
        CtlError::Timing(String::new()),
        CtlError::Aborted(String::new()),
        CtlError::Auth(String::new()),
    ]
    .iter()
    .map(CtlError::exit_code)
    .collect();
    assert_eq!(codes, [1, 2, 3, 4, 5, 6]);
}

#[test]
fn auth_answers_name_the_fix() {
    let ctx = super::Ctx {
        cfg: example_config(),
        creds: None,
        tls: Err("no TLS".into()),
        inv: parse(&["-c", "/etc/tenure/node.toml", "list"]).expect("parses"),
        dcs: None,
    };
    let (port, h) = one_shot(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
    let e = verbs::api(
        &ctx,
        "pg1",
        &format!("http://127.0.0.1:{port}/patroni"),
        "POST",
        "/restart",
        Some(&json!({})),
        Duration::from_secs(5),
    )
    .expect_err("401");
    h.join().expect("server");
    assert_eq!(e.exit_code(), 6);
    let t = e.to_string();
    assert!(
        t.contains("credentials rejected: set [api] username/password in /etc/tenure/node.toml")
            && t.contains("none are set"),
        "{t}"
    );
    let (port, h) = one_shot(
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 54\r\n\r\n{\"error\": \"set [api] username and password to enable\"}",
    );
    let e = verbs::api(
        &ctx,
        "pg2",
        &format!("http://127.0.0.1:{port}"),
        "POST",
        "/reload",
        Some(&json!({})),
        Duration::from_secs(5),
    )
    .expect_err("403");
    h.join().expect("server");
    assert_eq!(e.exit_code(), 6);
    assert!(
        e.to_string()
            .contains("forbidden: set [api] username and password to enable"),
        "{e}"
    );
    // Any other status is the verb's to judge.
    let (port, h) = one_shot(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}");
    let r = verbs::api(
        &ctx,
        "pg3",
        &format!("http://127.0.0.1:{port}"),
        "POST",
        "/restart",
        Some(&json!({})),
        Duration::from_secs(5),
    )
    .expect("503 is an answer");
    h.join().expect("server");
    assert_eq!(r.status, 503);
    // A member without an API address.
    let e = verbs::api(
        &ctx,
        "pg4",
        "",
        "GET",
        "/patroni",
        None,
        Duration::from_secs(1),
    )
    .expect_err("no url");
    assert!(e.to_string().contains("pg4 publishes no api_url"));
}

/// The fallback after a crashed leader (`ctl::fallback`): the candidate's "status
/// unknown" means written, outcome pending; any other answer stands.
#[test]
fn a_candidate_still_waiting_is_not_a_refusal() {
    use super::fallback::pending;
    use super::http::Response;
    let r = |status: u16, body: &str| Response {
        status,
        body: body.into(),
    };
    assert!(pending(&r(503, "Failover status unknown")));
    assert!(!pending(&r(
        503,
        "Failover failed (the request was refused or called off: the leader's log says why)"
    )));
    assert!(!pending(&r(412, "candidate does not exists")));
    assert!(!pending(&r(
        503,
        "failed to write failover key into DCS (etcd unreachable)"
    )));
}

/// `restart` of several members asks the leader last, the replicas in name order.
#[test]
fn restart_asks_the_leader_last() {
    let m = |n: &str| (n.to_string(), format!("http://{n}:8008"));
    let mut v = vec![m("pg1"), m("pg2"), m("pg3")];
    verbs::leader_last(&mut v, Some("pg1"));
    let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["pg2", "pg3", "pg1"]);
    verbs::leader_last(&mut v, None);
    let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["pg2", "pg3", "pg1"], "no leader: as they were");
}
