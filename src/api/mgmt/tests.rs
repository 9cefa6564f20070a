//! The write endpoints' order of checks: route, access, framing, body, handler.

use base64::Engine as _;

use super::*;
use crate::api::{Parsed, parse_request};

fn creds() -> ApiAuth {
    ApiAuth {
        username: "admin".into(),
        password: "pw".into(),
    }
}

fn auth_header() -> String {
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode("admin:pw")
    )
}

/// The head of `raw`, then [`on_head`]: `Err((code, head, body))` when answered.
fn head_of(
    raw: &str,
    auth: Option<&ApiAuth>,
) -> Result<(&'static WriteRoute, usize), (u16, String, String)> {
    let Parsed::Request {
        method, path, head, ..
    } = parse_request(raw.as_bytes())
    else {
        panic!("not a request: {raw}");
    };
    let mut out = Vec::new();
    match on_head(&method, &path, &head, auth, &mut out) {
        HeadDecision::ReadBody { route, len } => Ok((route, len)),
        HeadDecision::Answered => {
            let text = String::from_utf8(out).expect("utf8");
            let (h, b) = text.split_once("\r\n\r\n").expect("head end");
            Err((
                h[9..12].parse().expect("code"),
                h.to_string(),
                b.to_string(),
            ))
        }
    }
}

#[test]
fn unknown_paths_are_404_and_known_paths_say_which_methods_they_take() {
    let c = creds();
    let (code, _, body) = head_of("POST /nope HTTP/1.1\r\n\r\n", Some(&c)).unwrap_err();
    assert_eq!(code, 404, "{body}");
    let (code, head, _) = head_of("POST /primary HTTP/1.1\r\n\r\n", Some(&c)).unwrap_err();
    assert_eq!(code, 405);
    assert!(head.contains("Allow: GET, HEAD, OPTIONS\r\n"), "{head}");
    let (code, head, body) = head_of("DELETE /config HTTP/1.1\r\n\r\n", Some(&c)).unwrap_err();
    assert_eq!(code, 405);
    assert!(
        head.contains("Allow: GET, HEAD, OPTIONS, PATCH, PUT\r\n"),
        "{head}"
    );
    assert!(
        body.contains("method DELETE not allowed on /config"),
        "{body}"
    );
}

#[test]
fn route_comes_before_access_and_access_before_framing() {
    // No credentials configured: 403 for a routed write, whatever else is wrong.
    let (code, head, body) = head_of(
        "PATCH /config HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        None,
    )
    .unwrap_err();
    assert_eq!(code, 403);
    assert!(body.contains("[api] username and password"), "{body}");
    assert!(!head.contains("WWW-Authenticate"));
    // Credentials configured, none sent: 401 with the challenge, before the 411.
    let (code, head, body) = head_of(
        "PATCH /config HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        Some(&creds()),
    )
    .unwrap_err();
    assert_eq!(code, 401, "{body}");
    assert!(
        head.contains("WWW-Authenticate: Basic realm=\"tenure\"\r\n"),
        "{head}"
    );
    assert!(head.contains("Content-Type: text/plain"), "{head}");
    // Wrong password: 401.
    let wrong = format!(
        "PUT /config HTTP/1.1\r\nAuthorization: Basic {}\r\nContent-Length: 2\r\n\r\n",
        base64::engine::general_purpose::STANDARD.encode("admin:pW")
    );
    assert_eq!(head_of(&wrong, Some(&creds())).unwrap_err().0, 401);
    // An unknown path stays 404 without credentials: nothing is revealed by 401s.
    assert_eq!(
        head_of("POST /nope HTTP/1.1\r\n\r\n", None).unwrap_err().0,
        404
    );
}

#[test]
fn framing_chunked_and_missing_length_are_411_too_large_is_413() {
    let c = creds();
    let a = auth_header();
    let (code, _, body) = head_of(
        &format!("PATCH /config HTTP/1.1\r\n{a}Transfer-Encoding: chunked\r\n\r\n"),
        Some(&c),
    )
    .unwrap_err();
    assert_eq!(code, 411);
    assert!(body.contains("Content-Length"), "{body}");
    let (code, _, body) =
        head_of(&format!("PATCH /config HTTP/1.1\r\n{a}\r\n"), Some(&c)).unwrap_err();
    assert_eq!(code, 411);
    assert!(body.contains("PATCH /config takes a JSON body"), "{body}");
    let big = MAX_BODY + 1;
    let (code, _, body) = head_of(
        &format!("PUT /config HTTP/1.1\r\n{a}Content-Length: {big}\r\n\r\n"),
        Some(&c),
    )
    .unwrap_err();
    assert_eq!(code, 413);
    assert!(
        body.contains(&format!("larger than the {MAX_BODY} bytes")),
        "{body}"
    );
    let (route, len) = head_of(
        &format!("PUT /config HTTP/1.1\r\n{a}Content-Length: {MAX_BODY}\r\n\r\n"),
        Some(&c),
    )
    .expect("at the cap");
    assert_eq!((route.path, len), ("/config", MAX_BODY));
}

fn route(m: Method, path: &str) -> &'static WriteRoute {
    WRITE_ROUTES
        .iter()
        .find(|r| r.method == m && r.path == path)
        .expect("route")
}

fn text(r: Reply) -> (u16, String) {
    match r {
        Reply::Now(Response {
            code,
            body: Body::Text(t),
            ..
        }) => (code, t),
        other => panic!("not a text answer: {other:?}"),
    }
}

#[test]
fn bodies_must_be_json_objects_and_errors_say_where() {
    let s = ApiStatus::default();
    let r = route(Method::Patch, "/config");
    let (code, why) = text(on_body(r, "/config", "", b"{\"ttl\": 7,}", &s));
    assert_eq!(code, 400);
    assert!(
        why.contains("not valid JSON") && why.contains("line 1 column"),
        "{why}"
    );
    let (code, why) = text(on_body(r, "/config", "", b"[1]", &s));
    assert_eq!(
        (code, why.as_str()),
        (400, "the body must be a JSON object, found an array")
    );
    let (code, why) = text(on_body(r, "/config", "", b"{}", &s));
    assert_eq!(code, 400);
    assert!(why.contains("non-empty JSON object"), "{why}");
    let (code, _) = text(on_body(r, "/config", "", b"   ", &s));
    assert_eq!(code, 400);
    let (code, _) = text(on_body(r, "/config", "", b"\xff\xfe", &s));
    assert_eq!(code, 400);
}

#[test]
fn config_writes_become_intents_for_the_loop() {
    let s = ApiStatus::default();
    match on_body(
        route(Method::Patch, "/config"),
        "/config",
        "",
        b"{\"pause\": true}",
        &s,
    ) {
        Reply::Intent { intent, wait } => {
            let mut m = Map::new();
            m.insert("pause".into(), Value::Bool(true));
            assert_eq!(intent, Intent::PatchConfig(m));
            assert_eq!(wait, INTENT_WAIT);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        on_body(
            route(Method::Put, "/config"),
            "/config",
            "",
            b"{\"ttl\": 7}",
            &s
        ),
        Reply::Intent {
            intent: Intent::PutConfig(_),
            ..
        }
    ));
}

#[test]
fn field_readers_name_the_field() {
    let m: Map<String, Value> = serde_json::from_str(
        r#"{"candidate": 3, "leader": "pg1", "force": "yes", "bad": "maybe", "n": null}"#,
    )
    .expect("json");
    assert_eq!(field_str(&m, "leader"), Ok(Some("pg1")));
    assert_eq!(field_str(&m, "n"), Ok(None));
    assert_eq!(field_str(&m, "absent"), Ok(None));
    let (code, why) = text(field_str(&m, "candidate").unwrap_err());
    assert_eq!(
        (code, why.as_str()),
        (
            400,
            "field \"candidate\": expected a string, found a number"
        )
    );
    assert_eq!(field_bool(&m, "force"), Ok(Some(true)));
    let (_, why) = text(field_bool(&m, "bad").unwrap_err());
    assert!(
        why.starts_with("field \"bad\": expected true or false"),
        "{why}"
    );
    let (_, why) = text(field_bool(&m, "leader").unwrap_err());
    assert!(why.contains("\"leader\""), "{why}");
    let (code, why) = text(only_fields(&m, &["candidate", "leader"]).unwrap_err());
    assert_eq!(code, 400);
    assert!(why.starts_with("unknown field"), "{why}");
    assert!(only_fields(&m, &["candidate", "leader", "force", "bad", "n"]).is_ok());
}

#[test]
fn every_route_is_reachable_and_unique() {
    for (i, a) in WRITE_ROUTES.iter().enumerate() {
        assert!(a.method.is_write(), "{}", a.path);
        assert!(a.path.starts_with('/'));
        for b in &WRITE_ROUTES[i + 1..] {
            assert!(
                !(a.method == b.method && a.path == b.path),
                "{} twice",
                a.path
            );
        }
    }
}
