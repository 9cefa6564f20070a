//! The `config` key checked against every member's published timing, the member
//! JSON's `timing` object, Patroni's merge patch, and the seed's round trip.

use std::path::Path;

use super::*;

/// ttl 7, loop 0.5, retry 0.25, margin 0.5, budget 0.3 (DESIGN S6's worked example).
const FILE: &str = r#"
scope = "demo"
name = "pg1"
[etcd]
endpoints = ["http://127.0.0.1:2379"]
[timing]
ttl = 7
loop_wait = 0.5
retry_timeout = 0.25
safety_margin = 0.5
demote_budget = 0.3
[postgresql]
data_dir = "/dev/shm/x/pg1"
listen = "127.0.0.1:5432"
[postgresql.authentication.superuser]
password = "su"
[postgresql.authentication.replication]
password = "rep"
[postgresql.authentication.rewind]
password = "rw"
[api]
listen = "127.0.0.1:8008"
"#;

fn base() -> Config {
    Config::parse(Path::new("t.toml"), FILE).expect("valid")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A member with a watchdog armed at `w`, the file's M, B, P.
fn member(w: Option<u32>) -> PublishedTiming {
    PublishedTiming {
        watchdogs: w.into_iter().collect(),
        arms_watchdog: false,
        safety_margin: ms(500),
        demote_budget: ms(300),
        iteration_budget: ms(250),
        iteration_budget_default: true,
        leader_ttl: None,
    }
}

fn member_json(pt: &PublishedTiming) -> String {
    json!({"conn_url": "postgres://x", "role": "replica", "timing": pt.to_json(),
           "leader_ttl": pt.leader_ttl})
    .to_string()
}

#[test]
fn published_timing_round_trips_through_the_member_json() {
    let mut pt = member(Some(3));
    pt.leader_ttl = Some(7);
    pt.iteration_budget_default = false;
    let back = PublishedTiming::from_member_json(&member_json(&pt)).expect("parses");
    assert_eq!(back, Some(pt));
    assert_eq!(
        PublishedTiming::from_member_json(r#"{"role": "replica"}"#),
        Ok(None)
    );
    let bad = r#"{"timing": {"W": ["x"], "M": 0.5, "B": 0.3, "P": 0.25}}"#;
    assert!(
        PublishedTiming::from_member_json(bad)
            .unwrap_err()
            .contains("timing.W")
    );
    let bad = r#"{"timing": {"W": [], "M": "0.5", "B": 0.3, "P": 0.25}}"#;
    assert!(
        PublishedTiming::from_member_json(bad)
            .unwrap_err()
            .contains("timing.M")
    );
}

#[test]
fn a_value_that_breaks_s6_for_any_member_is_refused_naming_it_and_the_numbers() {
    let c = base();
    let members = vec![
        ("pg1".to_string(), member_json(&member(Some(3)))),
        ("pg2".to_string(), member_json(&member(None))),
    ];
    // The seed itself passes for both.
    assert_eq!(check_members(&c, &c.dynamic_json(), &members), Ok(()));
    // ttl 6 leaves (6 - 0.5 - 0.25) / 2 = 2.625 < W = 3: pg1's armed W breaks S6(b).
    let e = check_members(&c, r#"{"ttl": 6}"#, &members).unwrap_err();
    assert!(
        e.starts_with("refused for member pg1 (W = [3] s, M = 0.5 s"),
        "{e}"
    );
    assert!(
        e.contains("S6(b) violated") && e.contains("W = 3 > (6 - 0.5 - 0.25) / 2 = 2.625"),
        "{e}"
    );
    // Without pg1 the same value passes: pg2 has no watchdog.
    assert_eq!(check_members(&c, r#"{"ttl": 6}"#, &members[1..]), Ok(()));
    // loop_wait 5 and retry_timeout 2 with ttl 7 break (a) for everyone.
    let e = check_members(&c, r#"{"loop_wait": 5, "retry_timeout": 2}"#, &members).unwrap_err();
    assert!(e.contains("S6(a) violated"), "{e}");
    // A member with a larger margin of its own is checked with it.
    let mut big_m = member(None);
    big_m.safety_margin = ms(6_000);
    let e = check_members(
        &c,
        &c.dynamic_json(),
        &[("pg3".into(), member_json(&big_m))],
    )
    .unwrap_err();
    assert!(
        e.starts_with("refused for member pg3") && e.contains("S6(c)"),
        "{e}"
    );
    // A leader is also checked with the TTL of the lease it holds.
    let mut leader = member(Some(3));
    leader.leader_ttl = Some(6);
    let e = check_members(
        &c,
        &c.dynamic_json(),
        &[("pg1".into(), member_json(&leader))],
    )
    .unwrap_err();
    assert!(e.contains("with ttl 6 s"), "{e}");
    // A member that will arm a device needs some whole-second W for the new ttl.
    let mut arms = member(None);
    arms.arms_watchdog = true;
    assert_eq!(
        check_members(&c, &c.dynamic_json(), &[("pg4".into(), member_json(&arms))]),
        Ok(())
    );
    let e = check_members(
        &c,
        r#"{"ttl": 4, "loop_wait": 1, "retry_timeout": 0.5}"#,
        &[("pg4".into(), member_json(&arms))],
    )
    .unwrap_err();
    assert!(e.contains("S6(b)+(e)") || e.contains("S6("), "{e}");
}

#[test]
fn wrong_types_and_garbage_are_refused_before_any_member_is_asked() {
    let c = base();
    for (v, want) in [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        (r#"{"ttl": "7"}"#, "ttl: expected a number"),
        (r#"{"ttl": 7.5}"#, "ttl: expected a whole number"),
        (r#"{"loop_wait": -1}"#, "loop_wait"),
        (r#"{"pause": "yes"}"#, "pause: expected true or false"),
        (r#"{"synchronous_mode": "quorum"}"#, "synchronous_mode"),
    ] {
        let e = check_members(&c, v, &[]).unwrap_err();
        assert!(e.contains(want), "{v}: {e}");
    }
    // Members whose keys do not parse are not asked (they check for themselves).
    assert_eq!(
        check_members(&c, &c.dynamic_json(), &[("pgx".into(), "garbage".into())]),
        Ok(())
    );
}

#[test]
fn merge_patch_is_rfc_7396() {
    let mut v = json!({"ttl": 7, "pause": true, "postgresql": {"parameters": {"a": 1, "b": 2}}});
    merge_patch(
        &mut v,
        &json!({"pause": null, "loop_wait": 0.5, "postgresql": {"parameters": {"a": null, "c": 3}}}),
    );
    assert_eq!(
        v,
        json!({"ttl": 7, "loop_wait": 0.5, "postgresql": {"parameters": {"b": 2, "c": 3}}})
    );
    let mut scalar = json!(3);
    merge_patch(&mut scalar, &json!({"a": 1}));
    assert_eq!(scalar, json!({"a": 1}));
}

#[test]
fn the_seed_round_trips_fractional_seconds_and_pause() {
    let mut c = base();
    c.dynamic.pause = true;
    c.timing.promote_delay = Some(ms(100));
    let seed = c.dynamic_json();
    let v: Value = serde_json::from_str(&seed).expect("json");
    // Patroni's names, whole seconds as integers, fractions as floats.
    assert_eq!(v["ttl"], json!(7));
    assert_eq!(v["loop_wait"], json!(0.5));
    assert_eq!(v["retry_timeout"], json!(0.25));
    assert_eq!(v["primary_start_timeout"], json!(30));
    assert_eq!(v["pause"], json!(true));
    let (t, d) = base().merge_dynamic(&seed).expect("parses");
    assert_eq!((t.ttl, t.loop_wait, t.retry_timeout), (7, ms(500), ms(250)));
    assert_eq!(t.promote_delay, Some(ms(100)));
    assert!(d.pause);
    // Awkward fractions survive the float on the way: 0.1, 0.3, 1.05.
    for n in [100, 300, 1_050, 333] {
        let mut c = base();
        c.timing.retry_timeout = ms(n);
        let (t, _) = base().merge_dynamic(&c.dynamic_json()).expect("parses");
        assert_eq!(t.retry_timeout, ms(n));
    }
    // Absent `pause` is not paused, whatever the file said (resume deletes it).
    let mut paused_file = base();
    paused_file.dynamic.pause = true;
    let (_, d) = paused_file.merge_dynamic(r#"{"ttl": 7}"#).expect("parses");
    assert!(!d.pause);
}

/// The config key's PostgreSQL settings (Patroni's cluster-wide ones): values as
/// PostgreSQL reads them, names lower-cased and sorted, a `null` left out whatever
/// its name; every entry tenure does not take set aside with why (the rest still
/// apply); only a section that is not an object refuses the value.
#[test]
fn pg_parameters_are_read_with_their_form_checked() {
    let pg = |v: Value| parse_pg_parameters(v.get("postgresql"));
    let ok = pg(
        json!({"ttl": 7, "postgresql": {"use_pg_rewind": true, "parameters": {
        "work_mem": "8MB", "Max_Connections": 200, "checkpoint_completion_target": 0.9,
        "hot_standby": true, "jit": false, "pg_stat_statements.track": "all",
        "old": null, "a.b.c": null, "port": 5433, "ssl_cert_file": "/x", "SSL": "on"}}}),
    )
    .expect("parses");
    assert_eq!(
        ok.set,
        [
            ("checkpoint_completion_target", "0.9"),
            ("hot_standby", "on"),
            ("jit", "off"),
            ("max_connections", "200"),
            ("pg_stat_statements.track", "all"),
            ("work_mem", "8MB"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
    let ignored: Vec<&str> = ok.ignored.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(ignored, ["SSL", "port", "ssl_cert_file"]);
    assert!(ok.ignored[1].1.contains("set by tenure itself"));
    assert!(ok.ignored[0].1.contains("[postgresql.parameters]"));
    for v in [
        json!({"ttl": 7}),
        json!({"postgresql": null}),
        json!({"postgresql": {"use_pg_rewind": true}}),
        json!({"postgresql": {"parameters": null}}),
        json!({"postgresql": {"parameters": {"old": null}}}),
    ] {
        assert_eq!(pg(v.clone()), Ok(PgParameters::default()), "{v}");
    }
    for (v, says) in [
        (json!({"postgresql": "x"}), "postgresql: expected an object"),
        (
            json!({"postgresql": {"parameters": [1]}}),
            "expected an object of settings",
        ),
    ] {
        let e = pg(v.clone()).expect_err(&v.to_string());
        assert!(e.contains(says), "{v}: {e}");
    }
    let many: serde_json::Map<String, Value> = (0..=MAX_PG_PARAMETERS)
        .map(|i| (format!("x.p{i}"), json!(1)))
        .collect();
    let e = pg(json!({"postgresql": {"parameters": many}})).unwrap_err();
    assert!(e.contains("more than the 1000"), "{e}");
    // Past the bytes of values taken in all, entries are set aside, not the key.
    let big: serde_json::Map<String, Value> = (0..5)
        .map(|i| (format!("x.p{i}"), json!("v".repeat(MAX_PG_VALUE))))
        .collect();
    let got = pg(json!({"postgresql": {"parameters": big}})).expect("parses");
    assert_eq!(got.set.len(), MAX_PG_BYTES / MAX_PG_VALUE);
    assert!(
        got.ignored[0].1.contains("bytes of values taken in all"),
        "{got:?}"
    );
    // Each bad entry is set aside, the good one beside it kept.
    for (k, v, says) in [
        ("work mem", json!("1"), "not a PostgreSQL parameter name"),
        ("a.b.c", json!("1"), "not a PostgreSQL parameter name"),
        ("1abc", json!("1"), "not a PostgreSQL parameter name"),
        ("x.1y", json!("1"), "not a PostgreSQL parameter name"),
        ("a", json!([1]), "found an array"),
        ("a", json!({"b": 1}), "found an object"),
        ("a", json!("1\nport = 2"), "line break"),
        (
            "a",
            json!("x".repeat(MAX_PG_VALUE + 1)),
            "more than the 8192",
        ),
        (
            "wal_level",
            json!("Minimal"),
            "\"Minimal\": \"minimal\" leaves nothing",
        ),
        ("hot_standby", json!("of"), "the agent's probe"),
        ("full_page_writes", json!(false), "pg_rewind"),
        ("fsync", json!("no"), "host crash"),
        ("max_wal_senders", json!(0), "nothing to stream"),
        ("max_replication_slots", json!("0"), "nothing to stream"),
        (
            "wal_receiver_status_interval",
            json!("0s"),
            "standbys' replies",
        ),
    ] {
        let v = json!({"postgresql": {"parameters": {k: v, "work_mem": "8MB"}}});
        let got = pg(v.clone()).expect("parses");
        assert_eq!(
            got.set,
            [("work_mem".to_string(), "8MB".to_string())],
            "{v}"
        );
        assert_eq!(got.ignored.len(), 1, "{v}");
        assert!(got.ignored[0].1.contains(says), "{v}: {:?}", got.ignored);
    }
    let dup = pg(json!({"postgresql": {"parameters": {"Work_Mem": "1MB", "work_mem": "2MB"}}}))
        .expect("parses");
    assert_eq!(dup.set.len(), 1);
    assert!(dup.ignored[0].1.contains("second spelling"), "{dup:?}");
    // Values tenure needs, spelled as PostgreSQL takes them, pass.
    for (k, v) in [
        ("wal_level", "logical"),
        ("wal_level", "hot_standby"),
        ("hot_standby", "1"),
        ("full_page_writes", "Yes"),
        ("max_wal_senders", "20"),
        ("wal_receiver_status_interval", "2s"),
    ] {
        let v = json!({"postgresql": {"parameters": {k: v}}});
        assert!(pg(v.clone()).expect("parses").ignored.is_empty(), "{v}");
    }
    // The key is the one source: a value without them has none, whatever came
    // before; a bad entry does not refuse the value.
    let (_, d) = base()
        .merge_dynamic(
            r#"{"ttl": 7, "postgresql": {"parameters": {"work_mem": "8MB", "port": 1}}}"#,
        )
        .expect("parses");
    assert_eq!(
        d.pg_parameters.set,
        [("work_mem".to_string(), "8MB".to_string())]
    );
    assert_eq!(d.pg_parameters.ignored.len(), 1);
    let e = base()
        .merge_dynamic(r#"{"postgresql": {"parameters": "x"}}"#)
        .unwrap_err();
    assert!(e.starts_with("config key: postgresql.parameters"), "{e}");
    // In synchronous mode a cluster-wide `synchronous_commit` that acknowledges
    // commits no standby has is set aside; outside it, it is the operator's.
    let raw = |sync: bool| {
        format!(
            r#"{{"synchronous_mode": {sync}, "postgresql": {{"parameters": {{"synchronous_commit": "local"}}}}}}"#
        )
    };
    let (_, d) = base().merge_dynamic(&raw(true)).expect("parses");
    assert!(d.pg_parameters.set.is_empty());
    assert!(
        d.pg_parameters.ignored[0].1.contains("synchronous_mode"),
        "{d:?}"
    );
    let (_, d) = base().merge_dynamic(&raw(false)).expect("parses");
    assert_eq!(d.pg_parameters.set.len(), 1);
}

/// The names PostgreSQL's configuration files take: an identifier, at most one
/// `.`-qualified part, 63 bytes.
#[test]
fn pg_param_names_are_those_a_file_takes() {
    for ok in [
        "work_mem",
        "_x",
        "pg_stat_statements.max",
        "a1.b_2",
        &"a".repeat(63),
    ] {
        assert!(pg_param_name_ok(ok), "{ok}");
    }
    for bad in [
        "",
        "a.b.c",
        "1a",
        "a.",
        ".a",
        "a.1b",
        "a b",
        "a-b",
        "a$",
        &"a".repeat(64),
    ] {
        assert!(!pg_param_name_ok(bad), "{bad}");
    }
}

/// PostgreSQL's booleans (`parse_bool`): prefixes of the words, `on`, `of`/`off`,
/// `1`/`0`, any case; `o` alone and anything else are not booleans.
#[test]
fn pg_bool_reads_as_postgresql_does() {
    for t in ["on", "ON", "t", "tr", "TRUE", "y", "yes", "1"] {
        assert_eq!(pg_bool(t), Some(true), "{t}");
    }
    for f in ["off", "of", "OFF", "f", "fal", "false", "n", "no", "0"] {
        assert_eq!(pg_bool(f), Some(false), "{f}");
    }
    for x in [
        "", "o", "onn", "offf", "truex", "2", "10", "yess", " on", "maybe",
    ] {
        assert_eq!(pg_bool(x), None, "{x:?}");
    }
}

/// Numbers as PostgreSQL reads and rounds them: a fraction or an exponent
/// rounded half to even, units converted; hexadecimal and octal not read.
#[test]
fn pg_numbers_round_as_postgresql_rounds() {
    for (v, n) in [
        ("0", 0),
        ("0.4", 0),
        ("0.5", 0),
        ("1.5", 2),
        ("1e-9", 0),
        (" 12 ", 12),
        ("1e2", 100),
    ] {
        assert_eq!(pg_count(v), Some(n), "{v}");
    }
    for v in ["", "x", "0x10", "010", "5 MB", "1kB"] {
        assert_eq!(pg_count(v), None, "{v}");
    }
    // Zero as PostgreSQL takes them: refused.
    for (k, v) in [
        ("max_wal_senders", "0.4"),
        ("max_replication_slots", "1e-9"),
        ("wal_receiver_status_interval", "400ms"),
        ("wal_receiver_status_interval", "500ms"),
        ("wal_receiver_status_interval", "0min"),
    ] {
        let got = parse_pg_parameters(Some(&json!({"parameters": {k: v}}))).expect("parses");
        assert!(
            got.set.is_empty() && got.ignored.len() == 1,
            "{k} = {v}: {got:?}"
        );
    }
    for (k, v) in [
        ("wal_receiver_status_interval", "1500ms"),
        ("max_wal_senders", "0.6"),
    ] {
        let got = parse_pg_parameters(Some(&json!({"parameters": {k: v}}))).expect("parses");
        assert!(got.ignored.is_empty(), "{k} = {v}: {got:?}");
    }
    // In synchronous mode every spelling of off is set aside.
    for v in ["off", "false", "No", "0", "LOCAL"] {
        let mut p = parse_pg_parameters(Some(&json!({"parameters": {"synchronous_commit": v}})))
            .expect("parses");
        check_sync_commit(&mut p, true);
        assert!(p.set.is_empty(), "{v}");
    }
    let mut p = parse_pg_parameters(Some(
        &json!({"parameters": {"synchronous_commit": "remote_apply"}}),
    ))
    .expect("parses");
    check_sync_commit(&mut p, true);
    assert_eq!(p.set.len(), 1);
}

/// What PostgreSQL checks only when the postmaster starts: the reserved
/// connections below `max_connections` with the node's own settings winning, and
/// room for the slots the data directory holds; only the cluster's settings are
/// refused.
#[test]
fn cross_checks_refuse_what_would_stop_a_start_here() {
    let l = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let names = |r: Vec<(String, String)>| r.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    assert!(cross_refusals(&l(&[("max_connections", "200")]), &[], 2).is_empty());
    // PostgreSQL 16's reserved_connections counts too.
    assert_eq!(
        names(cross_refusals(
            &l(&[("reserved_connections", "97")]),
            &[],
            0
        )),
        ["reserved_connections"]
    );
    assert!(cross_refusals(&l(&[("reserved_connections", "96")]), &[], 0).is_empty());
    assert_eq!(
        names(cross_refusals(&l(&[("max_connections", "3")]), &[], 0)),
        ["max_connections"]
    );
    assert_eq!(
        names(cross_refusals(
            &l(&[("superuser_reserved_connections", "100")]),
            &[],
            0
        )),
        ["superuser_reserved_connections"]
    );
    assert_eq!(
        names(cross_refusals(
            &l(&[
                ("max_connections", "3"),
                ("superuser_reserved_connections", "3")
            ]),
            &[],
            0
        )),
        ["max_connections", "superuser_reserved_connections"]
    );
    // The node's own settings win: its own max_connections makes it fit, and
    // what it sets itself is never the cluster's to refuse.
    assert!(
        cross_refusals(
            &l(&[("max_connections", "3")]),
            &l(&[("max_connections", "50")]),
            0
        )
        .is_empty()
    );
    assert_eq!(
        names(cross_refusals(
            &l(&[("superuser_reserved_connections", "10")]),
            &l(&[("max_connections", "10")]),
            0
        )),
        ["superuser_reserved_connections"]
    );
    let e = cross_refusals(&l(&[("max_replication_slots", "2")]), &[], 3);
    assert_eq!(names(e.clone()), ["max_replication_slots"]);
    assert!(e[0].1.contains("the 3 replication slots"), "{e:?}");
    assert!(cross_refusals(&l(&[("max_replication_slots", "3")]), &[], 3).is_empty());
    assert!(
        cross_refusals(
            &l(&[("max_replication_slots", "2")]),
            &l(&[("max_replication_slots", "9")]),
            3
        )
        .is_empty()
    );
    // Spellings it cannot read are left to PostgreSQL.
    assert!(cross_refusals(&l(&[("max_connections", "0x3")]), &[], 0).is_empty());
}
