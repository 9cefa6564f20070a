//! Unit tests for config parsing, S6 and the budget table.

use super::*;

const GOOD: &str = r#"
scope = "demo"
name = "pg1"

[etcd]
endpoints = ["http://127.0.0.1:2379", "http://[::1]:2380"]

[timing]
ttl = 30
loop_wait = 2
retry_timeout = 1
safety_margin = 2
demote_budget = 1

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

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("t.toml"), text)
}

fn err(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn timing(ttl: u32, lw: f64, r: f64, m: f64, b: f64) -> TimingConfig {
    let d = Duration::from_secs_f64;
    TimingConfig {
        ttl,
        loop_wait: d(lw),
        retry_timeout: d(r),
        safety_margin: d(m),
        demote_budget: d(b),
        promote_delay: None,
        iteration_budget: d(lw - r),
    }
}

#[test]
fn good_file_and_defaults() {
    let c = parse(GOOD).expect("valid");
    assert_eq!(c.scope, "demo");
    assert_eq!(c.name, "pg1");
    assert_eq!(c.namespace, "/service");
    assert_eq!(c.etcd.endpoints.len(), 2);
    assert_eq!(c.timing.ttl, 30);
    assert_eq!(c.timing.iteration_budget, Duration::from_secs(1));
    assert_eq!(c.timing.promote_delay, None);
    assert_eq!(c.dynamic.maximum_lag_on_failover, 1_048_576);
    assert_eq!(c.dynamic.primary_start_timeout, Duration::from_secs(30));
    assert!(!c.nofailover);
    let pg = &c.postgresql;
    assert_eq!(pg.bin_dir, PathBuf::from("/usr/lib/postgresql/15/bin"));
    assert_eq!(pg.connect_address, "127.0.0.1:5432");
    assert_eq!(pg.socket_dir, PathBuf::from("/dev/shm/x/pg1-socket"));
    assert_eq!(pg.user, None);
    assert_eq!(pg.superuser, "postgres");
    assert_eq!(pg.replication_user, "replicator");
    assert_eq!(pg.rewind_user, "rewind_user");
    assert_eq!(pg.superuser_password, "su");
    assert!(pg.parameters.is_empty());
    assert!(!pg.move_aside_unusable);
    assert_eq!(c.api.connect_url, "http://127.0.0.1:8008");
    assert_eq!(c.watchdog.mode, WatchdogMode::Automatic);
    assert_eq!(c.watchdog.device, PathBuf::from("/dev/watchdog"));
    assert_eq!(c.watchdog.sysfs_dir, PathBuf::from("/sys/class/watchdog"));
    assert_eq!(c.log, crate::logging::LogConfig::default());
    assert_eq!(c.hooks, crate::hooks::HooksConfig::default());
}

#[test]
fn watchdog_sysfs_dir_for_a_device_outside_dev() {
    let text = GOOD.replace(
        "[api]",
        "[watchdog]\ndevice = \"/dev/shm/t/watchdog\"\nsysfs_dir = \"/dev/shm/t/sysfs\"\n[api]",
    );
    let c = parse(&text).expect("valid");
    assert_eq!(c.watchdog.sysfs_dir, PathBuf::from("/dev/shm/t/sysfs"));
    assert_eq!(c.watchdog.device, PathBuf::from("/dev/shm/t/watchdog"));
}

#[test]
fn parameters_and_optional_keys() {
    let text = format!(
        "{GOOD}\n[postgresql.parameters]\nmax_connections = 100\nwal_log_hints = true\n\
         shared_buffers = \"128MB\"\ncheckpoint_completion_target = 0.9\n\
         [watchdog]\nmode = \"off\"\n[log]\nsyslog_socket = \"/dev/shm/log\"\n[tags]\nnofailover = true\n"
    );
    let c = parse(&text).expect("valid");
    assert_eq!(
        c.postgresql.parameters,
        vec![
            (
                "checkpoint_completion_target".to_string(),
                "0.9".to_string()
            ),
            ("max_connections".to_string(), "100".to_string()),
            ("shared_buffers".to_string(), "128MB".to_string()),
            ("wal_log_hints".to_string(), "on".to_string()),
        ]
    );
    assert_eq!(c.watchdog.mode, WatchdogMode::Off);
    assert_eq!(c.log.syslog_socket, Some(PathBuf::from("/dev/shm/log")));
    assert!(c.nofailover);
}

#[test]
fn float_seconds_are_exact() {
    let text = GOOD
        .replace("ttl = 30", "ttl = 7")
        .replace("loop_wait = 2", "loop_wait = 0.5")
        .replace("retry_timeout = 1", "retry_timeout = 0.25")
        .replace("safety_margin = 2", "safety_margin = 0.5")
        .replace("demote_budget = 1", "demote_budget = 0.3");
    let c = parse(&text).expect("valid");
    assert_eq!(c.timing.demote_budget, Duration::from_millis(300));
    assert_eq!(c.timing.iteration_budget, Duration::from_millis(250));
}

#[test]
fn missing_keys_are_named() {
    let e = err(&GOOD.replace("scope = \"demo\"", ""));
    assert!(e.contains("t.toml: scope: missing"), "{e}");
    let e = err(&GOOD.replace("loop_wait = 2\n", ""));
    assert!(e.contains("timing.loop_wait: missing"), "{e}");
    let e = err(&GOOD.replace("password = \"rep\"", ""));
    assert!(
        e.contains("postgresql.authentication.replication.password: missing"),
        "{e}"
    );
    // A whole missing table reports its first required key.
    let e = err(&GOOD.replace("[api]\nlisten = \"127.0.0.1:8008\"", ""));
    assert!(e.contains("api.listen: missing"), "{e}");
    let e = err(&GOOD.replace("endpoints = ", "#"));
    assert!(e.contains("etcd.endpoints: missing"), "{e}");
}

#[test]
fn wrong_types_are_named() {
    let e = err(&GOOD.replace("loop_wait = 2", "loop_wait = \"2\""));
    assert!(
        e.contains("timing.loop_wait: expected a number of seconds, found a string"),
        "{e}"
    );
    let e = err(&GOOD.replace("ttl = 30", "ttl = 30.5"));
    assert!(
        e.contains("timing.ttl: expected a whole number of seconds, found a float"),
        "{e}"
    );
    let e = err(&GOOD.replace("name = \"pg1\"", "name = 1"));
    assert!(
        e.contains("name: expected a string, found an integer"),
        "{e}"
    );
    let e = err(&format!("{GOOD}\n[tags]\nnofailover = \"yes\"\n"));
    assert!(e.contains("tags.nofailover: expected true or false"), "{e}");
    let e = err(&format!("{GOOD}\n[tags]\nnosync = 1\n"));
    assert!(e.contains("tags.nosync: expected true or false"), "{e}");
    let c = parse(&format!("{GOOD}\n[tags]\nnosync = true\n")).expect("nosync");
    assert!(c.nosync && c.custom_tags.is_empty());
    let e = err(&format!("{GOOD}\n[tags]\nclonefrom = \"yes\"\n"));
    assert!(e.contains("tags.clonefrom: expected true or false"), "{e}");
    let c = parse(&format!("{GOOD}\n[tags]\nclonefrom = true\n")).expect("clonefrom");
    assert!(c.clonefrom && !c.nosync && c.custom_tags.is_empty());
    let e = err(&GOOD.replace("[timing]", "timing = 3\n[xtiming]"));
    assert!(e.contains("unknown key") || e.contains("timing"), "{e}");
}

#[test]
fn bad_values_are_named() {
    let e = err(&GOOD.replace("loop_wait = 2", "loop_wait = 0"));
    assert!(e.contains("timing.loop_wait: must be > 0"), "{e}");
    let e = err(&GOOD.replace("retry_timeout = 1", "retry_timeout = -1"));
    assert!(e.contains("timing.retry_timeout: must be > 0"), "{e}");
    let e = err(&GOOD.replace("ttl = 30", "ttl = 0"));
    assert!(e.contains("timing.ttl: must be > 0"), "{e}");
    let e = err(&GOOD.replace("\"pg1\"", "\"pg 1\""));
    assert!(e.contains("name: must match"), "{e}");
    // Names are endpoints too (issue 12); a bad one says what is wrong with it.
    let e = err(&GOOD.replace("http://127.0.0.1:2379", "http://localhost:99999"));
    assert!(
        e.contains("etcd.endpoints[0]") && e.contains("port \"99999\" is not a number"),
        "{e}"
    );
    let e = err(&GOOD.replace("http://127.0.0.1:2379", "http://::1:2379"));
    assert!(
        e.contains("etcd.endpoints[0]") && e.contains("must be in brackets"),
        "{e}"
    );
    let e = err(&GOOD.replace("http://127.0.0.1:2379", "127.0.0.1:2379"));
    assert!(
        e.contains("etcd.endpoints[0]") && e.contains("http://"),
        "{e}"
    );
    let e = err(&GOOD.replace("listen = \"127.0.0.1:5432\"", "listen = \"db:5432\""));
    assert!(e.contains("postgresql.listen: expected \"ip:port\""), "{e}");
    let e = err(&GOOD.replace("/dev/shm/x/pg1", "data"));
    assert!(
        e.contains("postgresql.data_dir: must be an absolute path"),
        "{e}"
    );
    let e = err(&format!("{GOOD}\n[watchdog]\nmode = \"sometimes\"\n"));
    assert!(e.contains("watchdog.mode: expected \"off\""), "{e}");
    let e = err(&GOOD.replace("endpoints = [", "endpoints = [1, "));
    assert!(e.contains("etcd.endpoints[0]: expected a string"), "{e}");
    let e = err(&format!(
        "{GOOD}\n[postgresql.parameters]\n\"bad name\" = 1\n"
    ));
    assert!(e.contains("postgresql.parameters.bad name"), "{e}");
    let e = err(&format!("{GOOD}\n[postgresql.parameters]\nx = \"a\\nb\"\n"));
    assert!(e.contains("newline"), "{e}");
    // What PostgreSQL's files cannot hold (a.b.c is a syntax error there), and
    // one spelling of each name: the agent would refuse them at its start.
    for k in ["\"a.b.c\"", "Work_Mem", "\"1x\"", "\"x.1\""] {
        let e = err(&format!("{GOOD}\n[postgresql.parameters]\n{k} = \"1\"\n"));
        assert!(
            e.contains("not a PostgreSQL parameter name a configuration file can hold"),
            "{k}: {e}"
        );
    }
    assert!(
        parse(&format!(
            "{GOOD}\n[postgresql.parameters]\n\"auto_explain.log_min_duration\" = \"1s\"\n"
        ))
        .is_ok()
    );
    // What tenure.conf owns is refused where check-config sees it, not only when
    // the agent starts: the port, the standby settings, recovery targets.
    for k in ["port", "recovery_target_action", "promote_trigger_file"] {
        let e = err(&format!("{GOOD}\n[postgresql.parameters]\n{k} = \"x\"\n"));
        assert!(
            e.contains(&format!("postgresql.parameters.{k}: set by tenure itself")),
            "{e}"
        );
    }
}

#[test]
fn unknown_keys_are_refused() {
    let e = err(&GOOD.replace("ttl = 30", "ttl = 30\nloop_wiat = 3"));
    assert!(e.contains("timing.loop_wiat: unknown key"), "{e}");
    let e = err(&format!("extra = 1\n{GOOD}"));
    assert!(e.contains("t.toml: extra: unknown key"), "{e}");
    let e = err(&format!("{GOOD}\n[postgres]\nx = 1\n"));
    assert!(e.contains("postgres: unknown key"), "{e}");
    let e = err(&GOOD.replace("password = \"su\"", "password = \"su\"\npasswd = \"x\""));
    assert!(
        e.contains("postgresql.authentication.superuser.passwd: unknown key"),
        "{e}"
    );
}

#[test]
fn syntax_errors_name_the_file() {
    let e = err("scope = ");
    assert!(e.starts_with("t.toml: not valid TOML"), "{e}");
}

#[test]
fn unreadable_file() {
    let e = Config::load(Path::new("/nonexistent/tenure.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(
        e.to_string()
            .starts_with("/nonexistent/tenure.toml: cannot read")
    );
}

#[test]
fn s6a_refused_with_numbers() {
    let text = GOOD
        .replace("ttl = 30", "ttl = 10")
        .replace("loop_wait = 2", "loop_wait = 5")
        .replace("retry_timeout = 1", "retry_timeout = 3");
    let e = parse(&text).unwrap_err();
    let ConfigError::Timing { error, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(error.rule, TimingRule::A);
    assert_eq!(
        e.to_string(),
        "t.toml: S6(a) violated: loop_wait + 2 × retry_timeout <= ttl, but 5 + 2 × 3 = 11 > 10"
    );
}

#[test]
fn s6_each_rule() {
    // (a)
    let e = validate_timing(&timing(10, 5.0, 3.0, 1.0, 1.0), 10, None).unwrap_err();
    assert_eq!(e.rule, TimingRule::A);
    // (b) left: W must exceed L_w + R + B = 4.
    let t = timing(30, 2.0, 1.0, 2.0, 1.0);
    let e = validate_timing(&t, 30, Some(4)).unwrap_err();
    assert_eq!(e.rule, TimingRule::B);
    assert!(e.to_string().contains("2 + 1 + 1 = 4 >= W = 4"), "{e}");
    assert!(validate_timing(&t, 30, Some(5)).is_ok());
    // (b) right: W <= (30 - 2 - 1) / 2 = 13.5.
    assert!(validate_timing(&t, 30, Some(13)).is_ok());
    let e = validate_timing(&t, 30, Some(14)).unwrap_err();
    assert_eq!(e.rule, TimingRule::B);
    assert!(
        e.to_string().contains("W = 14 > (30 - 2 - 1) / 2 = 13.5"),
        "{e}"
    );
    // The granted ttl counts, not the configured one (32: (f) needs 32 - 28 - 1 + 1
    // = 4 >= floor(2 + 1) + 1).
    assert!(validate_timing(&t, 32, Some(14)).is_ok());
    // (f) ttl - 2W - R + B >= floor(L_w + R) + 1 s: B 0.5 leaves 3.5 < 4 at W 13
    // ((b) and (e) hold), B 1 leaves 4.
    let e = validate_timing(&timing(30, 2.0, 1.0, 2.0, 0.5), 30, Some(13)).unwrap_err();
    assert_eq!(e.rule, TimingRule::F);
    assert!(
        e.to_string().contains("30 - 2 × 13 - 1 + 0.5 = 3.5 < 4"),
        "{e}"
    );
    assert_eq!(
        watchdog_range(&timing(30, 2.0, 1.0, 2.0, 0.5), 30),
        Some((4, 12))
    );
    // (c) without a watchdog: L_w + R + B < ttl - M.
    let t = timing(8, 2.0, 1.0, 2.0, 3.0);
    let e = validate_timing(&t, 8, None).unwrap_err();
    assert_eq!(e.rule, TimingRule::C);
    assert!(e.to_string().contains("2 + 1 + 3 = 6 >= 8 - 2 = 6"), "{e}");
    // ... and below the unwatched deadline ttl - (L_w + R + 1 s), which a replica's
    // on-time judgement needs (core::lease, `unwatched_deadline`).
    let e = validate_timing(&timing(9, 2.0, 1.0, 2.0, 3.0), 9, None).unwrap_err();
    assert_eq!(e.rule, TimingRule::C);
    assert!(
        e.to_string()
            .contains("2 + 1 + 3 = 6 >= 9 - (2 + 1 + 1 s) = 5"),
        "{e}"
    );
    assert!(validate_timing(&timing(11, 2.0, 1.0, 2.0, 3.0), 11, None).is_ok());
    // (d) R + P <= L_w.
    let mut t = timing(30, 2.0, 1.0, 2.0, 1.0);
    t.iteration_budget = Duration::from_millis(1500);
    let e = validate_timing(&t, 30, None).unwrap_err();
    assert_eq!(e.rule, TimingRule::D);
    assert!(e.to_string().contains("1 + 1.5 = 2.5 > 2"), "{e}");
    // P = 0 (loop_wait == retry_timeout by default).
    let e = validate_timing(&timing(30, 2.0, 2.0, 2.0, 1.0), 30, None).unwrap_err();
    assert_eq!(e.rule, TimingRule::D);
    // (e) W > L_w + R + 1 - M: B small and M small so (b) passes but (e) fails.
    let t = timing(30, 2.0, 0.5, 0.5, 0.1);
    let e = validate_timing(&t, 30, Some(3)).unwrap_err();
    assert_eq!(e.rule, TimingRule::E);
    assert!(
        e.to_string().contains("W = 3 <= 2 + 0.5 + 1 - 0.5 = 3"),
        "{e}"
    );
    assert!(validate_timing(&t, 30, Some(4)).is_ok());
    // Positive durations.
    let mut t = timing(30, 2.0, 1.0, 2.0, 1.0);
    t.safety_margin = Duration::ZERO;
    assert_eq!(
        validate_timing(&t, 30, None).unwrap_err().rule,
        TimingRule::Positive
    );
    let mut t = timing(30, 2.0, 1.0, 2.0, 1.0);
    t.promote_delay = Some(Duration::ZERO);
    assert_eq!(
        validate_timing(&t, 30, None).unwrap_err().rule,
        TimingRule::Positive
    );
    assert_eq!(
        validate_timing(&timing(30, 2.0, 1.0, 2.0, 1.0), 0, None)
            .unwrap_err()
            .rule,
        TimingRule::Positive
    );
}

/// Fresh-eyes review of seed 253898, R1: the ttl has an upper bound (`MAX_TTL`, the
/// one every member applies to the TTLs others publish), in the file, the `config`
/// key and the granted TTL alike.
#[test]
fn ttl_above_the_maximum_is_refused() {
    let t = timing(MAX_TTL, 2.0, 1.0, 2.0, 1.0);
    assert!(validate_timing(&t, MAX_TTL, None).is_ok());
    let e = validate_timing(&t, MAX_TTL + 1, None).unwrap_err();
    assert_eq!(e.rule, TimingRule::Positive);
    assert!(
        e.to_string().contains("ttl must be <= 3600 s, found 3601"),
        "{e}"
    );
}

#[test]
fn patroni_defaults_fail() {
    // ttl 30, loop_wait 10, retry_timeout 10, safety_margin 5: fail (b) and (d).
    let mut t = timing(30, 10.0, 10.0, 5.0, 1.0);
    t.iteration_budget = Duration::from_secs(1);
    assert_eq!(
        validate_timing(&t, 30, Some(10)).unwrap_err().rule,
        TimingRule::D
    );
    assert_eq!(watchdog_range(&t, 30), None);
}

#[test]
fn worked_example_1() {
    let t = timing(30, 2.0, 1.0, 2.0, 1.0);
    assert!(validate_timing(&t, 30, None).is_ok());
    assert_eq!(watchdog_range(&t, 30), Some((5, 13)));
    let b = budget(&t, 30, Some(13));
    assert_eq!(b.w_above_b, Duration::from_secs(4));
    assert_eq!(b.w_at_most, Duration::from_millis(13_500));
    assert_eq!(b.outage_tolerated, 9_000_000_000);
    assert_eq!(b.iteration_budget, Duration::from_secs(1));
    assert_eq!(b.pet_window, Some(Duration::from_secs(2)));
    assert_eq!(b.fence_deadline, Duration::from_secs(13));
    assert_eq!(b.fence_start, Duration::from_secs(12));
    assert_eq!(b.failover_worst, Duration::from_millis(38_500));
    assert_eq!(b.early_expiry_delay, Duration::from_secs(29));
    let s = b.to_string();
    assert!(s.contains("4 < W <= 13 "), "{s}");
    assert!(s.contains("5..=13"), "{s}");
    assert!(s.contains("T  9 s"), "{s}");
    assert!(s.contains("nothing after F"), "{s}");
}

#[test]
fn worked_example_2() {
    let t = timing(7, 0.5, 0.25, 0.5, 0.3);
    assert!(validate_timing(&t, 7, None).is_ok());
    assert!(validate_timing(&t, 7, Some(3)).is_ok());
    assert_eq!(
        validate_timing(&t, 7, Some(4)).unwrap_err().rule,
        TimingRule::B
    );
    // (e): W > 0.5 + 0.25 + 1 - 0.5 = 1.25, so W = 1 fails (b) first.
    assert_eq!(
        validate_timing(&t, 7, Some(1)).unwrap_err().rule,
        TimingRule::B
    );
    assert_eq!(watchdog_range(&t, 7), Some((2, 3)));
    let b = budget(&t, 7, Some(3));
    assert_eq!(b.outage_tolerated, 1_950_000_000);
    assert_eq!(b.iteration_budget, Duration::from_millis(250));
    let s = b.to_string();
    assert!(s.contains("1.05 < W <= 3 "), "{s}");
    assert!(s.contains("T  1.95 s"), "{s}");
    // Without a watchdog: F = ttl - (L_w + R + 1 s) = 7 - 1.75 (below H = 6.5), T =
    // F - B - L_w - R = 5.25 - 0.3 - 0.5 - 0.25.
    let b = budget(&t, 7, None);
    assert_eq!(b.outage_tolerated, 4_200_000_000);
    assert_eq!(b.fence_deadline, Duration::from_millis(5250));
    assert_eq!(b.early_expiry_delay, Duration::from_millis(7250));
    let s = b.to_string();
    assert!(s.contains("FROZEN agent"), "{s}");
}

#[test]
fn required_watchdog_needs_a_range() {
    // ttl 10, M 2, R 1: W <= 3.5; L_w + R + B = 2 + 1 + 1 = 4: empty.
    let text = GOOD
        .replace("ttl = 30", "ttl = 10")
        .replace("[api]", "[watchdog]\nmode = \"required\"\n[api]");
    let e = parse(&text).unwrap_err();
    let ConfigError::Timing { error, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(error.rule, TimingRule::WatchdogRange);
    assert!(e.to_string().contains("(10 - 2 - 1) / 2 = 3.5"), "{e}");
    // Automatic mode: accepted (it can run without one, S6(c)).
    let text = GOOD.replace("ttl = 30", "ttl = 10");
    assert!(parse(&text).is_ok());
}

#[test]
fn dynamic_roundtrip_and_merge() {
    let c = parse(GOOD).expect("valid");
    let j = c.dynamic_json();
    let v: serde_json::Value = serde_json::from_str(&j).expect("json");
    assert_eq!(v["ttl"], 30);
    assert_eq!(v["loop_wait"], 2);
    assert_eq!(v["retry_timeout"], 1);
    assert_eq!(v["maximum_lag_on_failover"], 1_048_576);
    assert_eq!(v["primary_start_timeout"], 30);
    assert!(v["promote_delay"].is_null());
    let (t, d) = c.apply_dynamic(&j).expect("own json applies");
    assert_eq!(t.ttl, 30);
    assert_eq!(d.maximum_lag_on_failover, 1_048_576);

    // Patroni-style key with extra keys: ignored; new values merged.
    let (t, d) = c
        .apply_dynamic(
            r#"{"ttl": 20, "loop_wait": 3, "retry_timeout": 1, "maximum_lag_on_failover": 5,
                "postgresql": {"parameters": {}}, "synchronous_mode": false, "promote_delay": 4.5}"#,
        )
        .expect("valid");
    assert_eq!(t.ttl, 20);
    assert_eq!(t.loop_wait, Duration::from_secs(3));
    // Default iteration_budget follows loop_wait - retry_timeout.
    assert_eq!(t.iteration_budget, Duration::from_secs(2));
    assert_eq!(t.promote_delay, Some(Duration::from_millis(4500)));
    assert_eq!(t.safety_margin, Duration::from_secs(2));
    assert_eq!(d.maximum_lag_on_failover, 5);
    assert_eq!(d.sync_mode(), crate::core::model::SyncMode::Off);
    assert_eq!(v["synchronous_mode"], false);
    assert_eq!(v["synchronous_mode_strict"], false);

    // Synchronous mode through the key; absent keeps ours; a string is refused.
    let (_, d) = c
        .apply_dynamic(r#"{"synchronous_mode": true}"#)
        .expect("valid");
    assert_eq!(d.sync_mode(), crate::core::model::SyncMode::On);
    let (_, d) = c
        .apply_dynamic(r#"{"synchronous_mode": true, "synchronous_mode_strict": true}"#)
        .expect("valid");
    assert_eq!(d.sync_mode(), crate::core::model::SyncMode::Strict);
    let e = c
        .apply_dynamic(r#"{"synchronous_mode": "quorum"}"#)
        .unwrap_err();
    assert!(
        e.contains("synchronous_mode") && e.contains("quorum"),
        "{e}"
    );

    // Garbage and S6 violations: Err naming what is wrong.
    assert!(
        c.apply_dynamic("not json")
            .unwrap_err()
            .contains("not JSON")
    );
    assert!(
        c.apply_dynamic("[1]")
            .unwrap_err()
            .contains("not a JSON object")
    );
    let e = c.apply_dynamic(r#"{"loop_wait": "x"}"#).unwrap_err();
    assert!(
        e.contains("loop_wait: expected a number, found a string"),
        "{e}"
    );
    let e = c.apply_dynamic(r#"{"ttl": 7.5}"#).unwrap_err();
    assert!(e.contains("ttl"), "{e}");
    let e = c.apply_dynamic(r#"{"loop_wait": -1}"#).unwrap_err();
    assert!(e.contains("loop_wait: must be > 0"), "{e}");
    let e = c
        .apply_dynamic(r#"{"ttl": 10, "loop_wait": 5, "retry_timeout": 3}"#)
        .unwrap_err();
    assert!(
        e.contains("S6(a)") && e.contains("5 + 2 × 3 = 11 > 10"),
        "{e}"
    );
    // Patroni's defaults: refused (S6(d) with this node's P... here P follows, so (a)).
    assert!(
        c.apply_dynamic(r#"{"ttl": 30, "loop_wait": 10, "retry_timeout": 10}"#)
            .is_err()
    );
    // With this node's W: 13 fits ttl 30 but not ttl 20 ((20 - 2 - 1) / 2 = 8.5).
    assert!(c.apply_dynamic_for(&j, Some(13)).is_ok());
    let e = c.apply_dynamic_for(r#"{"ttl": 20}"#, Some(13)).unwrap_err();
    assert!(e.contains("S6(b)"), "{e}");
    // promote_delay null clears it.
    let (t, _) = c
        .apply_dynamic(r#"{"promote_delay": null}"#)
        .expect("valid");
    assert_eq!(t.promote_delay, None);
}

#[test]
fn core_timing_maps_fields() {
    let c = parse(GOOD).expect("valid");
    let ct = Config::core_timing(&c.timing, &c.dynamic);
    assert_eq!(ct.ttl, 30);
    assert_eq!(ct.loop_wait, Duration::from_secs(2));
    assert_eq!(ct.demote_budget, Duration::from_secs(1));
    assert_eq!(ct.maximum_lag_on_failover, 1_048_576);
    assert_eq!(ct.primary_start_timeout, Duration::from_secs(30));
}

#[test]
fn example_file_is_accepted() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/tenure.example.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.timing.ttl, 30);
    assert_eq!(c.watchdog.mode, WatchdogMode::Automatic);
    assert_eq!(watchdog_range(&c.timing, 30), Some((5, 13)));
}

#[test]
fn agent_section_defaults_values_and_errors() {
    let c = parse(GOOD).expect("valid");
    assert!(!c.agent.lock_memory);
    assert_eq!(c.agent.realtime_priority, None);
    let c = parse(&format!(
        "{GOOD}\n[agent]\nlock_memory = true\nrealtime_priority = 10\n"
    ))
    .expect("valid");
    assert!(c.agent.lock_memory);
    assert_eq!(c.agent.realtime_priority, Some(10));
    let e = err(&format!("{GOOD}\n[agent]\nrealtime_priority = 100\n"));
    assert!(
        e.contains("agent.realtime_priority") && e.contains("1..=99"),
        "{e}"
    );
    let e = err(&format!("{GOOD}\n[agent]\nlock_memory = \"yes\"\n"));
    assert!(e.contains("agent.lock_memory"), "{e}");
    let e = err(&format!("{GOOD}\n[agent]\nlock_mem = true\n"));
    assert!(e.contains("agent.lock_mem") && e.contains("unknown"), "{e}");
}

#[test]
fn sslmode_default_values_and_errors() {
    let c = parse(GOOD).expect("valid");
    assert_eq!(c.postgresql.replication_ssl, PgSsl::default());
    assert_eq!(c.postgresql.rewind_ssl.sslmode, "prefer");
    let with = |m: &str| {
        GOOD.replace(
            "[postgresql]\n",
            &format!("[postgresql]\nsslmode = \"{m}\"\n"),
        )
    };
    let c = parse(&with("verify-full")).expect("valid");
    assert_eq!(c.postgresql.replication_ssl.sslmode, "verify-full");
    assert_eq!(c.postgresql.rewind_ssl.sslmode, "verify-full");
    let e = err(&with("sometimes"));
    assert!(
        e.contains("postgresql.sslmode") && e.contains("sometimes"),
        "{e}"
    );
}

/// Issue 12: libpq's TLS keys per role, as Patroni's `authentication.<role>`
/// spells them; the server side as `[postgresql.parameters] ssl = on`.
#[test]
fn pg_tls_keys_per_role_and_server_side() {
    let repl = |extra: &str| {
        GOOD.replace(
            "[postgresql.authentication.replication]\n",
            &format!("[postgresql.authentication.replication]\n{extra}"),
        )
    };
    let c = parse(&repl(
        "sslmode = \"verify-full\"\nsslrootcert = \"/c/root.crt\"\nsslcert = \"/c/r.crt\"\n\
         sslkey = \"/c/r.key\"\nsslcrl = \"/c/x.crl\"\nsslcrldir = \"/c/crl\"\n",
    ))
    .expect("valid");
    let r = &c.postgresql.replication_ssl;
    assert_eq!(r.sslmode, "verify-full");
    assert_eq!(r.sslrootcert.as_deref(), Some(Path::new("/c/root.crt")));
    assert_eq!(r.sslkey.as_deref(), Some(Path::new("/c/r.key")));
    assert_eq!(r.sslcrldir.as_deref(), Some(Path::new("/c/crl")));
    // The rewind role keeps its own (here: the default).
    assert_eq!(c.postgresql.rewind_ssl, PgSsl::default());

    let e = err(&repl("sslcert = \"/c/r.crt\"\n"));
    assert!(
        e.contains("replication.sslkey") && e.contains("together"),
        "{e}"
    );
    let e = err(&repl("sslrootcert = \"root.crt\"\n"));
    assert!(
        e.contains("replication.sslrootcert") && e.contains("absolute"),
        "{e}"
    );
    let e = err(&repl(
        "sslmode = \"disable\"\nsslrootcert = \"/c/root.crt\"\n",
    ));
    assert!(e.contains("sslrootcert") && e.contains("disable"), "{e}");
    let e = err(&GOOD.replace(
        "[postgresql.authentication.superuser]\n",
        "[postgresql.authentication.superuser]\nsslmode = \"require\"\n",
    ));
    assert!(
        e.contains("superuser.sslmode") && e.contains("unknown"),
        "{e}"
    );

    let server = |extra: &str| format!("{GOOD}\n[postgresql.parameters]\n{extra}");
    let files = "ssl_cert_file = \"/c/s.crt\"\nssl_key_file = \"/c/s.key\"\n";
    let c = parse(&server(&format!("ssl = true\n{files}"))).expect("valid");
    assert!(server_ssl_on(&c.postgresql.parameters));
    assert!(!server_ssl_on(
        &parse(GOOD).expect("valid").postgresql.parameters
    ));
    let e = err(&server("ssl = \"on\"\n"));
    assert!(
        e.contains("parameters.ssl_cert_file") && e.contains("missing"),
        "{e}"
    );
    let e = err(&server(
        "ssl = \"on\"\nssl_cert_file = \"server.crt\"\nssl_key_file = \"/k\"\n",
    ));
    assert!(e.contains("ssl_cert_file") && e.contains("absolute"), "{e}");
    let e = err(&server("ssl = \"sometimes\"\n"));
    assert!(
        e.contains("parameters.ssl") && e.contains("on or off"),
        "{e}"
    );
    // hostssl lines refuse a connection without TLS: refused here, not at a failover.
    let e = err(&repl("sslmode = \"disable\"\n").replace(
        "[api]",
        &format!("[postgresql.parameters]\nssl = \"on\"\n{files}\n[api]"),
    ));
    assert!(
        e.contains("replication.sslmode") && e.contains("hostssl"),
        "{e}"
    );
}

/// `[postgresql] hba_clientcert`: its values, and what it needs to work at a
/// failover, each refused with the key that is wrong (config/pgssl.rs).
#[test]
fn hba_clientcert_and_what_it_needs() {
    let with = |opt: &str, params: &str, repl: &str, rewind: &str| {
        GOOD.replace(
            "listen = \"127.0.0.1:5432\"\n",
            &format!("listen = \"127.0.0.1:5432\"\n{opt}"),
        )
        .replace(
            "[postgresql.authentication.replication]\n",
            &format!("[postgresql.authentication.replication]\n{repl}"),
        )
        .replace(
            "[postgresql.authentication.rewind]\n",
            &format!("[postgresql.authentication.rewind]\n{rewind}"),
        )
        .replace(
            "[api]",
            &format!("[postgresql.parameters]\n{params}\n[api]"),
        )
    };
    let server = "ssl = \"on\"\nssl_cert_file = \"/c/s.crt\"\nssl_key_file = \"/c/s.key\"\n\
                  ssl_ca_file = \"/c/ca.crt\"\n";
    let cert = |n: &str| format!("sslcert = \"/c/{n}.crt\"\nsslkey = \"/c/{n}.key\"\n");
    let (r, w) = (cert("r"), cert("w"));
    assert_eq!(
        parse(&with("", server, "", ""))
            .expect("valid")
            .postgresql
            .hba_clientcert,
        None
    );
    for v in ["verify-ca", "verify-full"] {
        let c = parse(&with(
            &format!("hba_clientcert = \"{v}\"\n"),
            server,
            &r,
            &w,
        ))
        .expect(v);
        assert_eq!(c.postgresql.hba_clientcert.as_deref(), Some(v));
    }
    let opt = "hba_clientcert = \"verify-full\"\n";
    let e = err(&with("hba_clientcert = \"yes\"\n", server, &r, &w));
    assert!(
        e.contains("postgresql.hba_clientcert") && e.contains("verify-ca or verify-full"),
        "{e}"
    );
    let e = err(&with(opt, "ssl = \"off\"\n", &r, &w));
    assert!(
        e.contains("postgresql.hba_clientcert") && e.contains("ssl = on"),
        "{e}"
    );
    let e = err(&with(
        opt,
        &server.replace("ssl_ca_file = \"/c/ca.crt\"\n", ""),
        &r,
        &w,
    ));
    assert!(
        e.contains("postgresql.hba_clientcert") && e.contains("ssl_ca_file"),
        "{e}"
    );
    let e = err(&with(opt, server, &r, ""));
    assert!(
        e.contains("authentication.rewind.sslcert") && e.contains("missing"),
        "{e}"
    );
    let e = err(&with(opt, server, "", &w));
    assert!(
        e.contains("authentication.replication.sslcert") && e.contains("refused"),
        "{e}"
    );
    // PostgreSQL cuts role names to 63 bytes (the certificate's name would be
    // compared with a role that is not the one named).
    let long = "r".repeat(64);
    let e = err(&with("", server, &format!("username = \"{long}\"\n"), ""));
    assert!(
        e.contains("authentication.replication.username") && e.contains("64 bytes"),
        "{e}"
    );
    let c = parse(&with(
        "",
        server,
        &format!("username = \"{}\"\n", &long[..63]),
        "",
    ))
    .expect("63 bytes");
    assert_eq!(c.postgresql.replication_user.len(), 63);

    // `hba_method = "cert"`: the certificate alone. The connecting roles need no
    // password then; everything the certificate needs is required as above, and
    // hba_clientcert beside it is refused (cert verifies in full).
    let cert_only = "hba_method = \"cert\"\n";
    let no_pw = |t: String| {
        t.replace("password = \"rep\"\n", "")
            .replace("password = \"rw\"\n", "")
    };
    let c = parse(&no_pw(with(cert_only, server, &r, &w))).expect("cert, no passwords");
    assert!(c.postgresql.hba_cert && c.postgresql.client_certs_required());
    assert!(c.postgresql.client_cn_is_role());
    assert_eq!(c.postgresql.hba_clientcert, None);
    assert_eq!(
        (
            c.postgresql.replication_password.as_str(),
            c.postgresql.rewind_password.as_str()
        ),
        ("", "")
    );
    assert_eq!(
        c.postgresql.client_cert_rule().as_deref(),
        Some("hba_method = \"cert\"")
    );
    let c = parse(&with(cert_only, server, &r, &w)).expect("cert, passwords kept");
    assert_eq!(c.postgresql.replication_password, "rep");
    for (m, cert) in [("", false), ("hba_method = \"scram-sha-256\"\n", false)] {
        let c = parse(&with(m, server, &r, &w)).expect(m);
        assert_eq!(c.postgresql.hba_cert, cert);
        assert!(!c.postgresql.client_certs_required());
    }
    // Without cert the passwords stay required; the superuser's always does.
    let e = err(&no_pw(with("", server, &r, &w)));
    assert!(
        e.contains("authentication.replication.password: missing"),
        "{e}"
    );
    // An empty inline password is refused under either method (review M1: under
    // scram it created the replication role without one); "none" is the key left
    // out.
    for m in ["", cert_only] {
        let e = err(&with(m, server, &r, &w).replace("password = \"rep\"", "password = \"\""));
        assert!(
            e.contains("authentication.replication.password: must be non-empty")
                && e.contains("leave the key out"),
            "{m}: {e}"
        );
    }
    let e = err(&with(cert_only, server, &r, &w).replace("password = \"su\"\n", ""));
    assert!(
        e.contains("authentication.superuser.password: missing"),
        "{e}"
    );
    let e = err(&with("hba_method = \"md5\"\n", server, &r, &w));
    assert!(
        e.contains("postgresql.hba_method") && e.contains("scram-sha-256 or cert"),
        "{e}"
    );
    let e = err(&with(&format!("{cert_only}{opt}"), server, &r, &w));
    assert!(
        e.contains("postgresql.hba_clientcert") && e.contains("hba_method = \"cert\""),
        "{e}"
    );
    let e = err(&no_pw(with(cert_only, "ssl = \"off\"\n", &r, &w)));
    assert!(
        e.contains("postgresql.hba_method") && e.contains("ssl = on"),
        "{e}"
    );
    let e = err(&no_pw(with(
        cert_only,
        &server.replace("ssl_ca_file = \"/c/ca.crt\"\n", ""),
        &r,
        &w,
    )));
    assert!(
        e.contains("postgresql.hba_method") && e.contains("ssl_ca_file"),
        "{e}"
    );
    let e = err(&no_pw(with(cert_only, server, &r, "")));
    assert!(
        e.contains("authentication.rewind.sslcert") && e.contains("hba_method = \"cert\""),
        "{e}"
    );
}

/// DESIGN §2 "The guardian": `[watchdog] guardian` and `guardian_kill_budget`.
#[test]
fn guardian_settings_and_defaults() {
    let c = parse(GOOD).expect("valid");
    assert_eq!(c.watchdog.guardian, GuardianMode::Auto);
    assert_eq!(c.watchdog.guardian_kill_budget, Duration::from_millis(500));
    for (v, want) in [
        ("auto", GuardianMode::Auto),
        ("allow", GuardianMode::Allow),
        ("off", GuardianMode::Off),
    ] {
        let c = parse(&format!("{GOOD}\n[watchdog]\nguardian = \"{v}\"\n")).expect(v);
        assert_eq!(c.watchdog.guardian, want);
    }
    let e = err(&format!("{GOOD}\n[watchdog]\nguardian = \"maybe\"\n"));
    assert!(
        e.contains("watchdog.guardian: expected \"auto\", \"allow\" or \"off\""),
        "{e}"
    );
    let c = parse(&format!(
        "{GOOD}\n[watchdog]\nguardian_kill_budget = 0.25\n"
    ))
    .expect("0.25");
    assert_eq!(c.watchdog.guardian_kill_budget, Duration::from_millis(250));
    // The default never exceeds demote_budget (worked example two: B = 0.3).
    let c = parse(&GOOD.replace("demote_budget = 1", "demote_budget = 0.3")).expect("B 0.3");
    assert_eq!(c.watchdog.guardian_kill_budget, Duration::from_millis(300));
}

#[test]
fn guardian_kill_budget_is_refused_outside_0_to_b() {
    for bad in ["0", "-1", "0.0"] {
        let e = err(&format!(
            "{GOOD}\n[watchdog]\nguardian_kill_budget = {bad}\n"
        ));
        assert!(
            e.contains("watchdog.guardian_kill_budget: must be > 0"),
            "{bad}: {e}"
        );
    }
    let e = err(&format!("{GOOD}\n[watchdog]\nguardian_kill_budget = 1.5\n"));
    assert!(
        e.contains(
            "watchdog.guardian_kill_budget: must be <= timing.demote_budget (1 s), found 1.5 s"
        ),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[watchdog]\nguardian_kill_budget = \"fast\"\n"
    ));
    assert!(e.contains("watchdog.guardian_kill_budget"), "{e}");
}

#[test]
fn guardian_applies_only_without_device_and_systemd() {
    let mut w = parse(GOOD).expect("valid").watchdog;
    use GuardianMode::{Allow, Auto};
    use WatchdogMode::{Automatic, Required};
    for (mode, g, want) in [
        (Automatic, Auto, true),
        (Automatic, Allow, true),
        (Automatic, GuardianMode::Off, false),
        (Required, Auto, false),
        (Required, Allow, true),
        (Required, GuardianMode::Off, false),
        (WatchdogMode::Off, Auto, false),
        (WatchdogMode::Off, Allow, false),
    ] {
        w.mode = mode.clone();
        w.guardian = g;
        assert_eq!(w.guardian_applies(false, false), want, "{mode:?} {g:?}");
        assert!(!w.guardian_applies(true, false), "a device is in use");
        assert!(!w.guardian_applies(false, true), "WATCHDOG_USEC is set");
    }
}

#[test]
fn primary_min_remaining_defaults_and_bounds() {
    // Default: loop_wait + retry_timeout.
    let c = parse(GOOD).expect("valid");
    assert_eq!(c.api.primary_min_remaining, Duration::from_secs(3));
    let set = |v: &str, extra: &str| {
        GOOD.replace(
            "[api]\nlisten = \"127.0.0.1:8008\"",
            &format!("{extra}[api]\nlisten = \"127.0.0.1:8008\"\nprimary_min_remaining = {v}"),
        )
    };
    let c = parse(&set("2.5", "")).expect("valid");
    assert_eq!(c.api.primary_min_remaining, Duration::from_millis(2500));
    // With a watchdog (automatic: W = 13 asked for), a healthy leader can be down to
    // W - loop_wait - retry_timeout = 10 s from F just before a renewal.
    let e = err(&set("10", ""));
    assert!(
        e.contains(
            "api.primary_min_remaining: must be < W 13 - loop_wait - retry_timeout = 10.000 s"
        ),
        "{e}"
    );
    parse(&set("9.9", "")).expect("below the bound");
    // Without one the span is ttl - (loop_wait + retry_timeout + 1 s) = 26 (the
    // fence deadline without a watchdog, below ttl - safety_margin = 28).
    let off = "[watchdog]\nmode = \"off\"\n";
    parse(&set("22.9", off)).expect("below the bound");
    let e = err(&set("23", off));
    assert!(
        e.contains("ttl - (loop_wait + retry_timeout + 1 s) = 30 - 4.000"),
        "{e}"
    );
    let e = err(&set("\"3s\"", ""));
    assert!(
        e.contains("api.primary_min_remaining: expected a number of seconds"),
        "{e}"
    );
    // The default is capped at half the least time a healthy leader has: ttl 9,
    // loop_wait 3, retry 0.25, margin 1.5, no watchdog → F at ttl - (3.25 + 1) =
    // 4.75 (below ttl - M), (4.75 - 3.25) / 2.
    let tight = GOOD
        .replace("ttl = 30", "ttl = 9")
        .replace("loop_wait = 2", "loop_wait = 3")
        .replace("retry_timeout = 1", "retry_timeout = 0.25")
        .replace("safety_margin = 2", "safety_margin = 1.5")
        .replace("[api]", "[watchdog]\nmode = \"off\"\n[api]");
    let c = parse(&tight).expect("valid");
    assert_eq!(c.api.primary_min_remaining, Duration::from_millis(750));
}

#[test]
fn tags_booleans_and_custom_strings() {
    let c = parse(&format!(
        "{GOOD}\n[tags]\nnofailover = true\nnoloadbalance = true\ndc = \"east\"\nrack = \"r1\"\n"
    ))
    .expect("valid");
    assert!(c.nofailover && c.noloadbalance);
    assert_eq!(
        c.custom_tags,
        vec![("dc".into(), "east".into()), ("rack".into(), "r1".into())]
    );
    let c = parse(GOOD).expect("valid");
    assert!(!c.noloadbalance && c.custom_tags.is_empty());
    // A misspelt boolean tag is refused, not published as a tag nobody reads.
    let e = err(&format!("{GOOD}\n[tags]\nnofailovr = true\n"));
    assert!(
        e.contains("tags.nofailovr: expected a string (tenure's boolean tags"),
        "{e}"
    );
    let e = err(&format!("{GOOD}\n[tags]\nrack = 3\n"));
    assert!(e.contains("tags.rack: expected a string"), "{e}");
    let e = err(&format!("{GOOD}\n[tags]\n\"a b\" = \"x\"\n"));
    assert!(e.contains("tag name must match"), "{e}");
}

#[test]
fn api_credentials_are_both_or_neither_and_never_printed() {
    assert!(parse(GOOD).expect("valid").api.auth.is_none());
    let with = |extra: &str| {
        GOOD.replace(
            "listen = \"127.0.0.1:8008\"",
            &format!("listen = \"127.0.0.1:8008\"\n{extra}"),
        )
    };
    let c = parse(&with("username = \"admin\"\npassword = \"pw:x y\"")).expect("valid");
    let auth = c.api.auth.expect("credentials");
    assert_eq!(
        (auth.username.as_str(), auth.password.as_str()),
        ("admin", "pw:x y")
    );
    assert!(!format!("{auth:?}").contains("pw:x y"));
    let e = err(&with("username = \"admin\""));
    assert!(
        e.contains("api.password: missing") && e.contains("both or neither"),
        "{e}"
    );
    let e = err(&with("password = \"pw\""));
    assert!(e.contains("api.username: missing"), "{e}");
    let e = err(&with("username = \"a:b\"\npassword = \"pw\""));
    assert!(e.contains("api.username") && e.contains("colon"), "{e}");
    let e = err(&with("username = \"a\"\npassword = \"\""));
    assert!(e.contains("api.password: must be non-empty"), "{e}");
    let e = err(&with("username = \"a\"\npassword = \"x\\ny\""));
    assert!(
        e.contains("api.password: must not contain a line break"),
        "{e}"
    );
}

#[test]
fn log_section_values_and_errors() {
    let c = parse(&format!(
        "{GOOD}\n[log]\nsyslog_udp = \"127.0.0.1:5514\"\nsyslog_facility = \"local2\"\n"
    ))
    .expect("udp and facility");
    assert_eq!(c.log.syslog_udp, Some("127.0.0.1:5514".parse().unwrap()));
    assert_eq!(c.log.facility, "local2");
    assert!(c.log.syslog);
    let c = parse(&format!("{GOOD}\n[log]\nsyslog = false\n")).expect("off");
    assert!(!c.log.syslog);
    // A host name would need a resolver (it blocks): refused.
    let e = err(&format!("{GOOD}\n[log]\nsyslog_udp = \"loghost:514\"\n"));
    assert!(
        e.contains("log.syslog_udp: expected an IP address and port"),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[log]\nsyslog_udp = \"127.0.0.1:514\"\nsyslog_socket = \"/dev/log\"\n"
    ));
    assert!(e.contains("not both"), "{e}");
    let e = err(&format!("{GOOD}\n[log]\nsyslog_facility = \"local9\"\n"));
    assert!(e.contains("log.syslog_facility: unknown facility"), "{e}");
    let e = err(&format!("{GOOD}\n[log]\nsyslog_tcp = \"127.0.0.1:514\"\n"));
    assert!(e.contains("log.syslog_tcp: unknown key"), "{e}");
}

#[test]
fn hooks_section_values_and_errors() {
    let c = parse(&format!(
        "{GOOD}\n[hooks]\non_role_change = \"/usr/local/bin/vip --dev eth0\"\ntimeout = 2.5\n"
    ))
    .expect("hooks");
    assert_eq!(
        c.hooks.on_role_change,
        Some(vec![
            "/usr/local/bin/vip".to_string(),
            "--dev".into(),
            "eth0".into()
        ])
    );
    assert_eq!(c.hooks.on_start, None);
    assert_eq!(c.hooks.timeout, Duration::from_millis(2500));
    let e = err(&format!("{GOOD}\n[hooks]\non_start = \"vip.sh\"\n"));
    assert!(e.contains("hooks.on_start: the program"), "{e}");
    assert!(e.contains("absolute path"), "{e}");
    let e = err(&format!("{GOOD}\n[hooks]\non_stop = \"\"\n"));
    assert!(e.contains("hooks.on_stop: must not be empty"), "{e}");
    let e = err(&format!("{GOOD}\n[hooks]\ntimeout = 0\n"));
    assert!(e.contains("hooks.timeout"), "{e}");
    let e = err(&format!("{GOOD}\n[hooks]\ntimeout = 601\n"));
    assert!(e.contains("hooks.timeout: at most 600 s"), "{e}");
    let e = err(&format!("{GOOD}\n[hooks]\non_promote = \"/bin/true\"\n"));
    assert!(e.contains("hooks.on_promote: unknown key"), "{e}");
}

#[test]
fn endpoint_names_and_resolve_timeout() {
    let c = parse(&GOOD.replace(
        "http://127.0.0.1:2379",
        "http://etcd1.example:2379\", \"http://[::1]:2379",
    ))
    .expect("names and IPv6 literals are endpoints");
    assert_eq!(
        c.etcd.endpoints[..2],
        ["http://etcd1.example:2379", "http://[::1]:2379"]
    );
    assert_eq!(
        c.etcd.resolve_timeout,
        crate::config::DEFAULT_RESOLVE_TIMEOUT
    );
    let c =
        parse(&GOOD.replace("[etcd]", "[etcd]\nresolve_timeout = 0.5")).expect("resolve_timeout");
    assert_eq!(c.etcd.resolve_timeout, Duration::from_millis(500));
    let e = err(&GOOD.replace("[etcd]", "[etcd]\nresolve_timeout = 0"));
    assert!(e.contains("etcd.resolve_timeout: must be > 0"), "{e}");
}

/// `[etcd] resolve_interval`: five minutes unless set, 0 turns the timer off,
/// and a value shorter than `resolve_timeout`, negative or not a number is
/// refused by name.
#[test]
fn resolve_interval() {
    let with = |v: &str| GOOD.replace("[etcd]", &format!("[etcd]\n{v}"));
    let c = parse(GOOD).expect("default");
    assert_eq!(c.etcd.resolve_interval, Some(Duration::from_secs(300)));
    let c = parse(&with("resolve_interval = 30")).expect("30 s");
    assert_eq!(c.etcd.resolve_interval, Some(Duration::from_secs(30)));
    for off in ["resolve_interval = 0", "resolve_interval = 0.0"] {
        let c = parse(&with(off)).expect(off);
        assert_eq!(c.etcd.resolve_interval, None, "{off}");
    }
    // A resolve_timeout past the default stretches the default, not an error.
    let c = parse(&with("resolve_timeout = 400")).expect("long timeout");
    assert_eq!(c.etcd.resolve_interval, Some(Duration::from_secs(400)));
    let e = err(&with("resolve_timeout = 5\nresolve_interval = 2"));
    assert!(
        e.contains("etcd.resolve_interval: 2 s is shorter than resolve_timeout = 5 s"),
        "{e}"
    );
    let e = err(&with("resolve_interval = -1"));
    assert!(e.contains("etcd.resolve_interval: must be > 0"), "{e}");
    let e = err(&with("resolve_interval = \"5m\""));
    assert!(e.contains("etcd.resolve_interval"), "{e}");
}

/// `[etcd] srv`: etcd's own record names (with TLS, the `-ssl` ones and
/// https:// URLs), a suffix for several clusters under one domain, and each
/// wrong combination named.
#[test]
fn etcd_srv_discovery() {
    let srv = |etcd: &str| {
        GOOD.replace(
            "endpoints = [\"http://127.0.0.1:2379\", \"http://[::1]:2380\"]",
            etcd,
        )
    };
    let c = parse(&srv("srv = \"Srv.Example.\"")).expect("srv alone");
    assert!(c.etcd.endpoints.is_empty());
    let s = c.etcd.srv.expect("srv");
    assert_eq!(s.service(), "_etcd-client._tcp.srv.example");
    let t = crate::resolve::SrvTarget {
        host: "etcd1.srv.example".into(),
        port: 2379,
        addrs: Vec::new(),
    };
    assert_eq!(s.endpoint(&t), "http://etcd1.srv.example:2379");
    let c = parse(&srv(
        "srv = \"srv.example\"\nsrv_suffix = \"pg-a\"\ncacert = \"/ca.pem\"",
    ))
    .expect("srv with TLS and a suffix");
    let s = c.etcd.srv.expect("srv");
    assert_eq!(s.service(), "_etcd-client-ssl-pg-a._tcp.srv.example");
    assert_eq!(s.endpoint(&t), "https://etcd1.srv.example:2379");
    assert!(c.etcd.tls.is_some(), "TLS with srv and cacert");

    let e = err(&GOOD.replace("[etcd]", "[etcd]\nsrv = \"srv.example\""));
    assert!(
        e.contains("etcd.srv: set either endpoints or srv, not both"),
        "{e}"
    );
    let e = err(&srv(""));
    assert!(
        e.contains("etcd.endpoints: missing") && e.contains("srv"),
        "{e}"
    );
    let e = err(&srv("srv = \"bad domain\""));
    assert!(
        e.contains("etcd.srv: \"bad domain\" is not a DNS domain"),
        "{e}"
    );
    let e = err(&srv("srv = \"\""));
    assert!(e.contains("etcd.srv: must not be empty"), "{e}");
    let e = err(&srv("srv = \"srv.example\"\nsrv_suffix = \"a.b\""));
    assert!(
        e.contains("etcd.srv_suffix: \"a.b\" must be letters"),
        "{e}"
    );
    let e = err(&GOOD.replace("[etcd]", "[etcd]\nsrv_suffix = \"x\""));
    assert!(e.contains("etcd.srv_suffix: needs srv"), "{e}");
    // Without TLS the TLS keys stay refused, as with http:// endpoints.
    let e = err(&srv("srv = \"srv.example\"\ncert = \"/c.pem\""));
    assert!(e.contains("etcd.cert"), "{e}");
}

#[test]
fn synchronous_node_count_from_the_file_and_the_config_key() {
    let with = |v: &str| format!("{GOOD}\n[dynamic]\nsynchronous_node_count = {v}\n");
    let c = parse(GOOD).expect("good");
    assert_eq!(c.dynamic.synchronous_node_count, 1, "default");
    assert_eq!(
        parse(&with("3")).expect("3").dynamic.synchronous_node_count,
        3
    );
    for (v, says) in [
        ("0", "from 1 to 100, found 0"),
        ("101", "from 1 to 100, found 101"),
        ("-2", "found -2"),
        ("1.5", "a whole number of standbys"),
        ("\"2\"", "a whole number of standbys"),
    ] {
        let e = err(&with(v));
        assert!(
            e.contains("dynamic.synchronous_node_count") && e.contains(says),
            "{v}: {e}"
        );
    }
    // Seeded into the key, and merged back from it; absent keeps ours.
    let v: serde_json::Value = serde_json::from_str(&c.dynamic_json()).expect("json");
    assert_eq!(v["synchronous_node_count"], 1);
    let (_, d) = c
        .apply_dynamic(r#"{"synchronous_mode": true, "synchronous_node_count": 2}"#)
        .expect("valid");
    assert_eq!(d.synchronous_node_count, 2);
    assert_eq!(Config::core_timing(&c.timing, &d).synchronous_node_count, 2);
    let (_, d) = c.apply_dynamic(r#"{"ttl": 30}"#).expect("valid");
    assert_eq!(d.synchronous_node_count, 1);
    for bad in [r#"0"#, r#"2.5"#, r#""2""#, r#"1e9"#, r#"-1"#] {
        let e = c
            .apply_dynamic(&format!(r#"{{"synchronous_node_count": {bad}}}"#))
            .unwrap_err();
        assert!(e.contains("synchronous_node_count"), "{bad}: {e}");
    }
}

#[test]
fn member_slots_ttl_from_the_file_and_the_config_key_in_patroni_s_forms() {
    let with = |v: &str| format!("{GOOD}\n[dynamic]\nmember_slots_ttl = {v}\n");
    let c = parse(GOOD).expect("good");
    assert_eq!(
        c.dynamic.member_slots_ttl,
        Duration::from_secs(1800),
        "default"
    );
    for (v, secs) in [
        ("0", 0.0),
        ("600", 600.0),
        ("\"30min\"", 1800.0),
        ("\"2h\"", 7200.0),
        ("\"90 s\"", 90.0),
        ("\"1d\"", 86_400.0),
        ("\"1500ms\"", 1.5),
        ("\"45\"", 45.0),
    ] {
        let got = parse(&with(v)).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(got.dynamic.member_slots_ttl.as_secs_f64(), secs, "{v}");
    }
    for (v, says) in [
        ("-1", "0 or more seconds"),
        ("\"10 weeks\"", "unknown time unit \"weeks\""),
        ("\"min\"", "a time such as"),
        ("true", "found a boolean"),
        ("\"31d\"", "at most 2592000 seconds"),
    ] {
        let e = err(&with(v));
        assert!(
            e.contains("dynamic.member_slots_ttl") && e.contains(says),
            "{v}: {e}"
        );
    }
    // Seeded into the key as seconds (Patroni reads a number of seconds), merged
    // back in either form; absent or null in the key is the default, whatever
    // the file says (the key is the one source once it exists).
    let v: serde_json::Value = serde_json::from_str(&c.dynamic_json()).expect("json");
    assert_eq!(v["member_slots_ttl"], 1800);
    let (_, d) = c
        .apply_dynamic(r#"{"member_slots_ttl": "10min"}"#)
        .expect("valid");
    assert_eq!(d.member_slots_ttl, Duration::from_secs(600));
    let (_, d) = c
        .apply_dynamic(r#"{"member_slots_ttl": 0}"#)
        .expect("valid");
    assert_eq!(d.member_slots_ttl, Duration::ZERO);
    let ten = parse(&with("600")).expect("600");
    for absent in [r#"{"ttl": 30}"#, r#"{"member_slots_ttl": null}"#] {
        let (_, d) = ten.apply_dynamic(absent).expect("valid");
        assert_eq!(d.member_slots_ttl, Duration::from_secs(1800), "{absent}");
    }
    for bad in [r#""soon""#, r#"-5"#, r#"[1]"#] {
        let e = c
            .apply_dynamic(&format!(r#"{{"member_slots_ttl": {bad}}}"#))
            .unwrap_err();
        assert!(e.contains("config key: member_slots_ttl"), "{bad}: {e}");
    }
}

#[test]
fn maximum_lag_on_syncnode_from_the_file_and_the_config_key() {
    let with = |v: &str| format!("{GOOD}\n[dynamic]\nmaximum_lag_on_syncnode = {v}\n");
    let c = parse(GOOD).expect("good");
    assert_eq!(c.dynamic.maximum_lag_on_syncnode, None, "default: off");
    assert_eq!(
        parse(&with("1048576"))
            .expect("1 MiB")
            .dynamic
            .maximum_lag_on_syncnode,
        Some(1_048_576)
    );
    for off in ["-1", "0"] {
        assert_eq!(
            parse(&with(off))
                .expect(off)
                .dynamic
                .maximum_lag_on_syncnode,
            None,
            "{off}: off, as in Patroni"
        );
    }
    for (v, says) in [
        ("1.5", "whole number"),
        ("\"1MB\"", "found the string \"1MB\""),
        ("nan", "non-finite"),
        ("inf", "non-finite"),
        ("1e19", "too large"),
    ] {
        let e = err(&with(v));
        assert!(
            e.contains("dynamic.maximum_lag_on_syncnode") && e.contains(says),
            "{v}: {e}"
        );
    }
    // Seeded as Patroni writes its default, merged back; absent in the key: off.
    let v: serde_json::Value = serde_json::from_str(&c.dynamic_json()).expect("json");
    assert_eq!(v["maximum_lag_on_syncnode"], -1);
    let one = parse(&with("1000")).expect("1000");
    let (_, d) = one
        .apply_dynamic(r#"{"maximum_lag_on_syncnode": 5000}"#)
        .expect("valid");
    assert_eq!(d.maximum_lag_on_syncnode, Some(5000));
    let (_, d2) = one
        .apply_dynamic(r#"{"maximum_lag_on_syncnode": "2048"}"#)
        .expect("a number as a string, as Patroni reads it");
    assert_eq!(d2.maximum_lag_on_syncnode, Some(2048));
    assert_eq!(
        Config::core_timing(&one.timing, &d).maximum_lag_on_syncnode,
        Some(5000)
    );
    let (_, d) = one.apply_dynamic(r#"{"ttl": 30}"#).expect("valid");
    assert_eq!(d.maximum_lag_on_syncnode, None);
    let e = one
        .apply_dynamic(r#"{"maximum_lag_on_syncnode": "lots"}"#)
        .unwrap_err();
    assert!(e.contains("config key: maximum_lag_on_syncnode"), "{e}");
}

#[test]
fn permanent_and_ignored_slots_from_the_file_and_the_config_key() {
    let c = parse(&format!(
        "{GOOD}\n[dynamic.slots.barman]\ntype = \"physical\"\n[dynamic.slots.wal_2]\n\
         [[dynamic.ignore_slots]]\nname = \"keepme\"\n[[dynamic.ignore_slots]]\nplugin = \"pgoutput\"\n"
    ))
    .expect("slots");
    assert_eq!(c.dynamic.slots, vec!["barman", "wal_2"]);
    assert_eq!(c.dynamic.ignore_slots.len(), 2);
    assert!(c.dynamic.ignore_slots[0].matches_physical("keepme"));
    assert!(!c.dynamic.ignore_slots[0].matches_physical("other"));
    // A logical-only entry never matches a physical slot.
    assert!(!c.dynamic.ignore_slots[1].matches_physical("keepme"));
    // Seeded into the key in Patroni's form, and read back the same.
    let j = c.dynamic_json();
    let v: serde_json::Value = serde_json::from_str(&j).expect("json");
    assert_eq!(v["slots"]["barman"]["type"], "physical");
    assert_eq!(v["ignore_slots"][0]["name"], "keepme");
    let (_, d) = c.apply_dynamic(&j).expect("own json");
    assert_eq!(d.slots, c.dynamic.slots);
    assert_eq!(d.ignore_slots, c.dynamic.ignore_slots);
    // The key is the one source once it exists (Patroni's rule): absent or null
    // means none, whatever the file says, so every leader keeps the same slots.
    let (_, d) = c.apply_dynamic(r#"{"ttl": 30}"#).expect("valid");
    assert!(d.slots.is_empty() && d.ignore_slots.is_empty());
    let (_, d) = c
        .apply_dynamic(r#"{"slots": null, "ignore_slots": null}"#)
        .expect("valid");
    assert!(d.slots.is_empty() && d.ignore_slots.is_empty());
    // Patroni's forms: `0`, `""`, `null` or `{}` for a physical slot; its other
    // fields (Patroni 4's `cluster_type`) are left to it; a logical slot is not
    // tenure's to manage and is returned apart, not refused with the whole key.
    let (_, d) = c
        .apply_dynamic(
            r#"{"slots": {"a": 0, "b": "", "c": null, "d": {}, "e": {"type": "physical",
                "cluster_type": "any"}, "l": {"type": "logical", "database": "db",
                "plugin": "pgoutput"}}}"#,
        )
        .expect("Patroni's key");
    assert_eq!(d.slots, vec!["a", "b", "c", "d", "e"]);
    assert_eq!(d.logical_slots, vec!["l"]);
    for (bad, says) in [
        (r#"{"slots": ["barman"]}"#, "slots: expected an object"),
        (
            r#"{"slots": {"Bad-Name": {}}}"#,
            "not a replication slot name",
        ),
        (r#"{"slots": {"b": {"type": "physcal"}}}"#, "slots.b.type"),
        (r#"{"slots": {"b": 3}}"#, "slots.b: expected an object"),
        (
            r#"{"ignore_slots": {"name": "x"}}"#,
            "ignore_slots: expected a list",
        ),
        (r#"{"ignore_slots": [{}]}"#, "would match every slot"),
        (r#"{"ignore_slots": [{"nam": "x"}]}"#, "unknown field"),
        (r#"{"ignore_slots": [{"name": 3}]}"#, "ignore_slots[0].name"),
        (
            r#"{"ignore_slots": [{"type": "both"}]}"#,
            "ignore_slots[0].type",
        ),
    ] {
        let e = c.apply_dynamic(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let e = err(&format!("{GOOD}\n[dynamic.slots.x]\ntype = \"logical\"\n"));
    assert!(e.contains("dynamic") && e.contains("logical"), "{e}");
    let e = err(&format!("{GOOD}\n[dynamic]\nslots = 3\n"));
    assert!(e.contains("slots: expected an object"), "{e}");
}

/// Review of bad input, findings 1 and 6: a control character in any string
/// (it would break tenure.conf or the passfile), and a `connect_address` or
/// `[api] connect_url` the other members or `tenure ctl` would refuse or read
/// as another host, are refused by name.
#[test]
fn control_characters_and_addresses_peers_cannot_use_are_refused() {
    let e = err(&GOOD.replace(
        "listen = \"127.0.0.1:5432\"",
        "listen = \"127.0.0.1:5432\"\nconnect_address = \"a\\nb:5432\"",
    ));
    assert!(
        e.contains("postgresql.connect_address: must not contain a line break"),
        "{e}"
    );
    // A tab in a password is a password's business (review of this fix, L6).
    let c = parse(&GOOD.replace("password = \"rep\"", "password = \"re\\tp\""))
        .expect("a tab in a password");
    assert_eq!(c.postgresql.replication_password, "re\tp");
    let e = err(&GOOD.replace(
        "password = \"rep\"",
        "password = \"rep\"\nusername = \"repl\\nicator\"",
    ));
    assert!(e.contains("username: must not contain a line break"), "{e}");
    let e = err(&GOOD.replace(
        "listen = \"127.0.0.1:5432\"",
        "listen = \"127.0.0.1:5432\"\nsocket_dir = \"/run/a\\rb\"",
    ));
    assert!(
        e.contains("socket_dir: must not contain a line break"),
        "{e}"
    );
    for bad in [
        "bad host:5432",
        "h'x:5432",
        "a@b:5432",
        "h:0",
        "::1:5432",
        "a/b:5432",
        "h\\t:5432",
        "h",
    ] {
        let e = err(&GOOD.replace(
            "listen = \"127.0.0.1:5432\"",
            &format!("listen = \"127.0.0.1:5432\"\nconnect_address = \"{bad}\""),
        ));
        assert!(
            e.contains("postgresql.connect_address: expected"),
            "{bad}: {e}"
        );
    }
    for good in [
        "db1.example:5432",
        "[fd00::1]:5433",
        "10.0.0.1:5432",
        "db1:05432",
    ] {
        let c = parse(&GOOD.replace(
            "listen = \"127.0.0.1:5432\"",
            &format!("listen = \"127.0.0.1:5432\"\nconnect_address = \"{good}\""),
        ))
        .unwrap_or_else(|e| panic!("{good}: {e}"));
        assert_eq!(c.postgresql.connect_address, good);
    }
    for bad in ["http://", "http://h:notaport", "http://[::1"] {
        let e = err(&GOOD.replace(
            "listen = \"127.0.0.1:8008\"",
            &format!("listen = \"127.0.0.1:8008\"\nconnect_url = \"{bad}\""),
        ));
        assert!(e.contains("api.connect_url"), "{bad}: {e}");
    }
}

/// Review of bad input, finding 2: a `slots` map or `ignore_slots` list past
/// what any cluster keeps is refused (the upkeep would take seconds a round).
#[test]
fn slot_maps_are_bounded() {
    let many: serde_json::Map<String, serde_json::Value> = (0..1001)
        .map(|i| (format!("s{i}"), serde_json::json!({"type": "physical"})))
        .collect();
    let e = parse_slots(&serde_json::Value::Object(many)).unwrap_err();
    assert!(e.contains("1001 slots, more than the 1000"), "{e}");
    let list: Vec<serde_json::Value> = (0..1001)
        .map(|i| serde_json::json!({"name": format!("s{i}")}))
        .collect();
    let e = parse_ignore_slots(&serde_json::Value::Array(list)).unwrap_err();
    assert!(e.contains("1001 entries"), "{e}");
}

/// Review of bad input: a configuration (or secret, or certificate) path that
/// is a device or a FIFO is refused at once, not read until memory runs out or
/// a writer comes: a reload reads them on the loop.
#[test]
fn files_are_read_only_as_bounded_regular_files() {
    let e = read_text(Path::new("/dev/zero"), CONFIG_FILE_MAX).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let dir = crate::testbed::scratch_dir("cfg-fifo").unwrap();
    let fifo = dir.join("tenure.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = Config::load(&fifo).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let big = dir.join("big.toml");
    std::fs::write(&big, vec![b'#'; (CONFIG_FILE_MAX + 1) as usize]).unwrap();
    let e = Config::load(&big).unwrap_err().to_string();
    assert!(e.contains("more than the"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[bootstrap] initdb`: Patroni's two forms give the same arguments, in order;
/// without it, tenure's defaults.
#[test]
fn bootstrap_initdb_options_in_either_form() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        c.postgresql.bootstrap.initdb_args,
        ["--data-checksums", "--encoding=UTF8"]
    );
    let list = format!(
        "{GOOD}\n[bootstrap]\ninitdb = [\"data-checksums\", {{ encoding = \"UTF8\" }}, \
         {{ locale = \"C.UTF-8\" }}, {{ wal-segsize = 32 }}, \"allow-group-access\"]\n"
    );
    assert_eq!(
        parse(&list).unwrap().postgresql.bootstrap.initdb_args,
        [
            "--data-checksums",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--wal-segsize=32",
            "--allow-group-access"
        ]
    );
    let table = format!(
        "{GOOD}\n[bootstrap.initdb]\ndata-checksums = true\nlocale-provider = \"icu\"\n\
         icu-locale = \"und-u-ks-level2\"\nlc-messages = \"C\"\n"
    );
    let args = parse(&table).unwrap().postgresql.bootstrap.initdb_args;
    for a in [
        "--data-checksums",
        "--locale-provider=icu",
        "--icu-locale=und-u-ks-level2",
        "--lc-messages=C",
        "--encoding=UTF8",
    ] {
        assert!(args.iter().any(|x| x == a), "{a} in {args:?}");
    }
    assert_eq!(args.len(), 5);
    // Without an encoding, and with the C locale (initdb runs with LC_ALL=C),
    // UTF8 is added: initdb would make SQL_ASCII. A named locale decides its own.
    let args = |list: &str| {
        parse(&format!("{GOOD}\n[bootstrap]\ninitdb = {list}\n"))
            .unwrap()
            .postgresql
            .bootstrap
            .initdb_args
    };
    assert_eq!(args("[]"), ["--encoding=UTF8"]);
    assert_eq!(
        args(r#"["data-checksums"]"#),
        ["--data-checksums", "--encoding=UTF8"]
    );
    assert_eq!(args(r#"["no-locale"]"#), ["--no-locale", "--encoding=UTF8"]);
    assert_eq!(
        args(r#"[{ locale = "POSIX" }]"#),
        ["--locale=POSIX", "--encoding=UTF8"]
    );
    assert_eq!(args(r#"[{ locale = "C.UTF-8" }]"#), ["--locale=C.UTF-8"]);
    assert_eq!(
        args(r#"[{ locale = "C" }, { lc-ctype = "C.UTF-8" }]"#),
        ["--locale=C", "--lc-ctype=C.UTF-8"]
    );
    assert_eq!(args(r#"[{ encoding = "LATIN1" }]"#), ["--encoding=LATIN1"]);
    // PostgreSQL's other spellings of a name, and pairs initdb accepts (checked
    // against PostgreSQL 15's initdb: SQL_ASCII goes with any locale).
    assert_eq!(
        args(r#"[{ encoding = "utf-8" }, { locale = "C.UTF-8" }]"#),
        ["--encoding=utf-8", "--locale=C.UTF-8"]
    );
    assert_eq!(
        args(r#"[{ encoding = "Unicode" }]"#),
        ["--encoding=Unicode"]
    );
    assert_eq!(
        args(r#"[{ encoding = "SQL_ASCII" }, { lc-ctype = "C.UTF-8" }]"#),
        ["--encoding=SQL_ASCII", "--lc-ctype=C.UTF-8"]
    );
    assert_eq!(
        args(r#"[{ encoding = "iso-8859-15" }, { lc-messages = "C.UTF-8" }]"#),
        ["--encoding=iso-8859-15", "--lc-messages=C.UTF-8"]
    );
    // initdb checks the collation's locale too: UTF8 only where it fits both.
    assert_eq!(
        args(r#"[{ lc-ctype = "C" }, { lc-collate = "C.UTF-8" }]"#),
        ["--lc-ctype=C", "--lc-collate=C.UTF-8", "--encoding=UTF8"]
    );
}

/// Every refusal names the entry and says why: tenure's own options, unsafe
/// ones, unknown ones, bad values, a locale this host does not have.
#[test]
fn bootstrap_initdb_refusals_name_what_is_wrong() {
    let with = |list: &str| err(&format!("{GOOD}\n[bootstrap]\ninitdb = {list}\n"));
    let cases: &[(&str, &[&str])] = &[
        (
            r#"[{ pgdata = "/x" }]"#,
            &["bootstrap.initdb", "pgdata", "data_dir"],
        ),
        (r#"[{ username = "x" }]"#, &["username", "superuser"]),
        (r#"["pwprompt"]"#, &["pwprompt", "password"]),
        (r#"[{ auth-local = "peer" }]"#, &["auth-local", "pg_hba"]),
        (r#"[{ waldir = "/wal" }]"#, &["waldir", "not supported"]),
        (r#"["no-sync"]"#, &["no-sync", "crash"]),
        (r#"["nosync"]"#, &["nosync", "crash"]),
        (r#"["no-clean"]"#, &["no-clean", "empty"]),
        (
            r#"["--data-checksums"]"#,
            &["leading dashes", "\"data-checksums\""],
        ),
        (
            r#"["checksums"]"#,
            &["unknown initdb option \"checksums\"", "data-checksums"],
        ),
        (r#"[{ data-checksums = "yes" }]"#, &["takes no value"]),
        (r#"["locale"]"#, &["locale needs a value"]),
        (
            r#"[{ encoding = "UTF8", locale = "C" }]"#,
            &["entry 1", "one option, found 2"],
        ),
        (r#"[3]"#, &["entry 1", "found an integer"]),
        (
            r#"[{ wal-segsize = 3 }]"#,
            &["wal-segsize = 3", "power of two"],
        ),
        (r#"[{ wal-segsize = 2048 }]"#, &["wal-segsize = 2048"]),
        (
            r#"[{ locale-provider = "glibc" }]"#,
            &["expected libc or icu"],
        ),
        (
            r#"[{ icu-locale = "en" }]"#,
            &["icu-locale needs", "locale-provider"],
        ),
        (r#"[{ locale-provider = "icu" }]"#, &["needs icu-locale"]),
        (
            r#"[{ locale = "xx_NOWHERE.UTF-8" }]"#,
            &["no such locale on this host", "locale -a"],
        ),
        (
            r#"[{ lc-collate = "xx_NOWHERE" }]"#,
            &["lc-collate", "no such locale"],
        ),
        (r#"[{ encoding = "UTF 8" }]"#, &["no spaces"]),
        // Refused by initdb too (PostgreSQL 15's: "not a valid server encoding
        // name", "encoding mismatch"): here `check-config` says it.
        (
            r#"[{ encoding = "UTF16" }]"#,
            &["encoding = \"UTF16\"", "no such encoding"],
        ),
        (
            r#"[{ encoding = "win932" }]"#,
            &["encoding = \"win932\"", "SJIS", "clients only"],
        ),
        (
            r#"[{ encoding = "LATIN1" }, { locale = "C.UTF-8" }]"#,
            &[
                "encoding LATIN1 does not match locale = \"C.UTF-8\"",
                "UTF-8",
                "name encoding UTF8",
            ],
        ),
        (
            r#"[{ lc-collate = "C.UTF-8" }, { encoding = "WIN1252" }]"#,
            &["WIN1252", "lc-collate = \"C.UTF-8\""],
        ),
        (
            r#"[{ lc-ctype = "C.UTF-8" }, { encoding = "EUC_JP" }]"#,
            &[
                "EUC_JP does not match lc-ctype = \"C.UTF-8\"",
                "name encoding UTF8",
            ],
        ),
        (
            r#"["no-locale", { locale = "C" }]"#,
            &["no-locale", "not together"],
        ),
        (r#"["data-checksums", "data-checksums"]"#, &["given twice"]),
        (
            r#""data-checksums""#,
            &["expected a list of initdb options"],
        ),
        (r#"[{ data-checksums = false }]"#, &["leave a flag out"]),
    ];
    for (list, want) in cases {
        let e = with(list);
        for w in *want {
            assert!(e.contains(w), "{list}: {w:?} not in: {e}");
        }
    }
    let e = err(&format!("{GOOD}\n[bootstrap]\ninitdb_options = []\n"));
    assert!(
        e.contains("bootstrap.initdb_options") && e.contains("unknown key"),
        "{e}"
    );
}

/// `post_bootstrap` (or Patroni's older `post_init`): an absolute program and
/// fixed words, with a deadline of its own.
#[test]
fn bootstrap_post_bootstrap_command_and_timeout() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.postgresql.bootstrap.post_bootstrap, None);
    let with = |lines: &str| format!("{GOOD}\n[bootstrap]\n{lines}\n");
    let c = parse(&with(
        "post_bootstrap = \"/usr/local/bin/setup --db app\"\npost_bootstrap_timeout = 90",
    ))
    .unwrap();
    assert_eq!(
        c.postgresql.bootstrap.post_bootstrap.as_deref(),
        Some(
            &[
                "/usr/local/bin/setup".to_string(),
                "--db".into(),
                "app".into()
            ][..]
        )
    );
    assert_eq!(
        c.postgresql.bootstrap.post_bootstrap_timeout,
        Duration::from_secs(90)
    );
    let c = parse(&with("post_init = \"/bin/true\"")).unwrap();
    assert_eq!(
        c.postgresql.bootstrap.post_bootstrap.as_deref(),
        Some(&["/bin/true".to_string()][..])
    );
    assert_eq!(
        c.postgresql.bootstrap.post_bootstrap_timeout,
        Duration::from_secs(600)
    );
    for (lines, want) in [
        (
            "post_bootstrap = \"setup.sh\"",
            &["bootstrap.post_bootstrap", "absolute"][..],
        ),
        ("post_init = \"\"", &["bootstrap.post_init", "empty"]),
        (
            "post_bootstrap = \"/a\"\npost_init = \"/b\"",
            &["post_init", "older name"],
        ),
        (
            "post_bootstrap_timeout = 5",
            &["no effect without post_bootstrap"],
        ),
        (
            "post_bootstrap = \"/a\"\npost_bootstrap_timeout = -1",
            &["post_bootstrap_timeout", "> 0"],
        ),
    ] {
        let e = err(&with(lines));
        for w in want {
            assert!(e.contains(w), "{lines}: {w:?} not in: {e}");
        }
    }
}
