//! `POST /restart`'s body and conditions, `POST /reinitialize`'s flags, and the
//! routes of the four endpoints (Patroni 4.1's checks and answers).

use serde_json::{Map, Value, json};

use super::*;
use crate::api::mgmt::{Body, BodyRule, Response, WRITE_ROUTES, on_body};

fn body(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

/// The immediate answer's code and text, or the intent handed to the loop.
fn answer(r: Reply) -> Result<(Intent, Duration), (u16, String)> {
    match r {
        Reply::Now(Response {
            code,
            body: Body::Text(t),
            ..
        }) => Err((code, t)),
        Reply::Now(other) => panic!("not a text answer: {other:?}"),
        Reply::Intent { intent, wait } => Ok((intent, wait)),
    }
}

fn post(path: &str, raw: &str) -> Result<(Intent, Duration), (u16, String)> {
    let route = WRITE_ROUTES
        .iter()
        .find(|r| r.path == path && r.method == crate::api::Method::Post)
        .expect("route");
    answer(on_body(
        route,
        path,
        "",
        raw.as_bytes(),
        &ApiStatus::default(),
    ))
}

#[test]
fn the_four_endpoints_are_routed_and_take_an_optional_body() {
    for (method, path) in [
        (crate::api::Method::Post, "/restart"),
        (crate::api::Method::Delete, "/restart"),
        (crate::api::Method::Post, "/reload"),
        (crate::api::Method::Post, "/reinitialize"),
    ] {
        let r = WRITE_ROUTES
            .iter()
            .find(|r| r.path == path && r.method == method)
            .unwrap_or_else(|| panic!("{method:?} {path} has no route"));
        assert_eq!(r.body, BodyRule::Optional, "{path}");
    }
    // patronictl restart and reload send no body at all.
    let (intent, wait) = post("/restart", "").expect("an intent");
    assert_eq!(intent, Intent::Restart(RestartRequest::default()));
    assert!(wait >= Duration::from_secs(60), "{wait:?}");
    assert_eq!(post("/reload", "").expect("intent").0, Intent::Reload);
    assert_eq!(
        post("/reinitialize", "").expect("intent").0,
        Intent::Reinitialize { force: false }
    );
}

#[test]
fn restart_conditions_parse_as_patroni_reads_them() {
    let r = restart_request(&body(json!({
        "role": "replica", "postgres_version": "15.7", "timeout": "2min",
        "restart_pending": true
    })))
    .expect("valid");
    assert_eq!(r.role.as_deref(), Some("replica"));
    assert_eq!(r.postgres_version, Some(150_007));
    assert_eq!(r.timeout, Some(120));
    assert!(r.restart_pending);
    assert_eq!(r.schedule, None);
    // A timeout as a number; the answer waits for it plus the stop.
    let (intent, wait) = post("/restart", r#"{"timeout": 5}"#).expect("intent");
    let Intent::Restart(r) = intent else {
        panic!("{intent:?}")
    };
    assert_eq!(r.timeout, Some(5));
    assert_eq!(wait, Duration::from_secs(5 + 30));
    let s =
        restart_request(&body(json!({"schedule": "2030-01-01T00:00:00+01:00"}))).expect("valid");
    assert_eq!(
        s.schedule,
        Some((
            Duration::from_secs(1_893_452_400),
            "2030-01-01T00:00:00+01:00".to_string()
        ))
    );
}

#[test]
fn bad_restart_fields_get_patronis_code_and_reason() {
    let cases: &[(&str, u16, &str)] = &[
        (
            r#"{"rol": "replica"}"#,
            400,
            "Unknown filter for the scheduled restart: rol",
        ),
        (
            r#"{"role": "master"}"#,
            400,
            "PostgreSQL role should be either primary, standby_leader, or replica",
        ),
        (r#"{"role": 1}"#, 400, "PostgreSQL role should be either"),
        (
            r#"{"postgres_version": "15"}"#,
            400,
            "Invalid PostgreSQL version format: X.Y or X.Y.Z is accepted: 15",
        ),
        (
            r#"{"postgres_version": "9.6"}"#,
            400,
            "X.Y or X.Y.Z is accepted: 9.6",
        ),
        (
            r#"{"postgres_version": "fifteen"}"#,
            400,
            "Invalid PostgreSQL version: fifteen",
        ),
        (
            r#"{"timeout": 0}"#,
            400,
            "Timeout should be a positive number of seconds",
        ),
        (
            r#"{"timeout": "-3s"}"#,
            400,
            "Timeout should be a positive number",
        ),
        (
            r#"{"timeout": "soon"}"#,
            400,
            "Timeout should be a positive number",
        ),
        (
            r#"{"timeout": true}"#,
            400,
            "Timeout should be a positive number",
        ),
        // Review of bad input, 7: pg_ctl -t overflows past ~2e8 s, and the
        // request would be held as long.
        (r#"{"timeout": 1e30}"#, 400, "more than the 86400 s allowed"),
        (
            r#"{"timeout": 86401}"#,
            400,
            "Timeout 86401 s is more than the 86400 s allowed",
        ),
        (
            r#"{"schedule": "2030-01-01T00:00:00"}"#,
            400,
            "Timezone information is mandatory for the scheduled restart",
        ),
        (
            r#"{"schedule": "next monday"}"#,
            422,
            "Unable to parse scheduled timestamp",
        ),
        (
            r#"{"schedule": 1893452400}"#,
            422,
            "Unable to parse scheduled timestamp",
        ),
        (r#"{"restart_pending": "maybe"}"#, 400, "restart_pending"),
        (r#"[1]"#, 400, "must be a JSON object"),
    ];
    for (raw, code, words) in cases {
        let (c, text) = post("/restart", raw).expect_err(raw);
        assert_eq!(
            (c, true),
            (*code, text.contains(words)),
            "{raw}: {c} {text}"
        );
    }
}

#[test]
fn postgres_versions_become_server_version_num() {
    assert_eq!(postgres_version_to_int("15.2"), Ok(150_002));
    assert_eq!(postgres_version_to_int("10.23"), Ok(100_023));
    assert_eq!(postgres_version_to_int("9.6.3"), Ok(90_603));
    assert!(postgres_version_to_int("15.2.1.0").is_err());
    assert!(postgres_version_to_int("15.100").is_err());
    assert!(postgres_version_to_int("").is_err());
}

#[test]
fn restart_conditions_are_judged_against_the_facts() {
    let facts = RestartFacts {
        role: "replica",
        server_version: Some(150_004),
        pending_restart: false,
    };
    let none = RestartRequest::default();
    assert_eq!(none.mismatch(&facts), None);
    let role = RestartRequest {
        role: Some("primary".into()),
        ..RestartRequest::default()
    };
    assert_eq!(role.mismatch(&facts), Some("host role mismatch"));
    assert_eq!(
        role.mismatch(&RestartFacts {
            role: "primary",
            ..facts
        }),
        None
    );
    // Restart only a server older than the version asked for.
    let newer = |v| RestartRequest {
        postgres_version: Some(v),
        ..RestartRequest::default()
    };
    assert_eq!(newer(150_005).mismatch(&facts), None);
    assert_eq!(
        newer(150_004).mismatch(&facts),
        Some("postgres version mismatch")
    );
    assert_eq!(
        newer(150_005).mismatch(&RestartFacts {
            server_version: None,
            ..facts
        }),
        Some("postgres version mismatch")
    );
    let pending = RestartRequest {
        restart_pending: true,
        ..RestartRequest::default()
    };
    assert_eq!(
        pending.mismatch(&facts),
        Some("pending restart flag is not set")
    );
    assert_eq!(
        pending.mismatch(&RestartFacts {
            pending_restart: true,
            ..facts
        }),
        None
    );
}

#[test]
fn reinitialize_reads_force_and_from_leader() {
    let (intent, wait) =
        post("/reinitialize", r#"{"force": true, "from_leader": true}"#).expect("intent");
    assert_eq!(intent, Intent::Reinitialize { force: true });
    assert!(wait >= Duration::from_secs(30));
    // patronictl's strings are booleans too; garbage is named.
    assert_eq!(
        post("/reinitialize", r#"{"force": "false"}"#)
            .expect("intent")
            .0,
        Intent::Reinitialize { force: false }
    );
    let (code, text) = post("/reinitialize", r#"{"from_leader": "perhaps"}"#).expect_err("400");
    assert_eq!(code, 400);
    assert!(text.contains("from_leader"), "{text}");
}
