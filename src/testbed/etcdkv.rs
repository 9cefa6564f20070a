//! Reading, writing and deleting etcd keys through etcd's JSON gateway (`/v3/kv/*`)
//! over a plain `TcpStream`, for the test bed's assertions.
//!
//! Owns: the gateway's request/response format (base64 keys and values, int64 as
//! strings). Must never: be used by the agent (it is a test aid: no lease, no txn,
//! no watch), or block past the timeout it was given.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One key as the gateway returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: String,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// Read `key` (or every key starting with `key` when `prefix`), linearizably,
/// from the first endpoint that answers within what remains of `timeout`.
pub fn range(
    endpoints: &[String],
    key: &str,
    prefix: bool,
    timeout: Duration,
) -> Result<Vec<Kv>, String> {
    let mut body = serde_json::json!({ "key": b64_encode(key.as_bytes()) });
    if prefix {
        body["range_end"] = serde_json::Value::String(b64_encode(&prefix_end(key.as_bytes())));
    }
    let v = post_any(endpoints, "/v3/kv/range", &body.to_string(), timeout)?;
    let Some(kvs) = v.get("kvs") else {
        // The gateway omits empty fields: no `kvs` means no key.
        return Ok(Vec::new());
    };
    let kvs = kvs
        .as_array()
        .ok_or_else(|| format!("etcd range {key}: `kvs` is not a list: {v}"))?;
    kvs.iter().map(parse_kv).collect()
}

/// Put `key` = `value` without a lease (an operator's `etcdctl put`).
pub fn put(endpoints: &[String], key: &str, value: &str, timeout: Duration) -> Result<(), String> {
    let body = serde_json::json!({
        "key": b64_encode(key.as_bytes()),
        "value": b64_encode(value.as_bytes()),
    });
    post_any(endpoints, "/v3/kv/put", &body.to_string(), timeout).map(|_| ())
}

/// Delete `key` (an operator's `etcdctl del`); returns how many keys went.
pub fn delete(endpoints: &[String], key: &str, timeout: Duration) -> Result<i64, String> {
    let body = serde_json::json!({ "key": b64_encode(key.as_bytes()) });
    let v = post_any(endpoints, "/v3/kv/deleterange", &body.to_string(), timeout)?;
    Ok(v.get("deleted").map(json_i64).unwrap_or(0))
}

fn parse_kv(v: &serde_json::Value) -> Result<Kv, String> {
    let field = |name: &str| -> Result<String, String> {
        match v.get(name).and_then(|x| x.as_str()) {
            None => Ok(String::new()),
            Some(s) => {
                let bytes = b64_decode(s).map_err(|e| format!("etcd kv field {name}: {e}"))?;
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        }
    };
    let int = |name: &str| v.get(name).map(json_i64).unwrap_or(0);
    Ok(Kv {
        key: field("key")?,
        value: field("value")?,
        create_revision: int("create_revision"),
        mod_revision: int("mod_revision"),
        version: int("version"),
        lease: int("lease"),
    })
}

/// The gateway renders int64 as JSON strings; accept numbers too.
fn json_i64(v: &serde_json::Value) -> i64 {
    match v {
        serde_json::Value::String(s) => s.parse().unwrap_or(0),
        serde_json::Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The `range_end` that selects every key with prefix `p`: `p` with its last
/// byte below 0xff incremented (etcd's `GetPrefixRangeEnd`).
fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff (or empty): "\0" means "to the end of the keyspace".
    vec![0]
}

/// Longest a single attempt may take: a request that reached a member during an
/// etcd election can sit there until etcd's own request timeout (seconds), so
/// move on to the next member instead.
const ATTEMPT: Duration = Duration::from_secs(1);

/// POST `body` to the endpoints round-robin, each attempt at most `ATTEMPT`,
/// until one answers 200 or `timeout` passes. (A retried put writes the same
/// value again; a retried delete may report 0 keys deleted.)
/// The etcd auth token the bed's reads and writes send (`Authorization:`), once a
/// test enabled etcd authentication (issue 12); `None`: no header.
static TOKEN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Authenticate as `user` through the gateway and send the token with every
/// later request of this process (`None` user: stop sending one).
pub fn use_auth(
    endpoints: &[String],
    user: Option<(&str, &str)>,
    timeout: Duration,
) -> Result<(), String> {
    // `Authenticate` must go without the old token: etcd refuses a stale one.
    *TOKEN.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let token = match user {
        None => None,
        Some((name, password)) => {
            let body = serde_json::json!({ "name": name, "password": password });
            let v = post_any(
                endpoints,
                "/v3/auth/authenticate",
                &body.to_string(),
                timeout,
            )?;
            Some(
                v.get("token")
                    .and_then(|t| t.as_str())
                    .ok_or_else(|| format!("etcd authenticate: no token in {v}"))?
                    .to_string(),
            )
        }
    };
    *TOKEN.lock().unwrap_or_else(|e| e.into_inner()) = token;
    Ok(())
}

fn post_any(
    endpoints: &[String],
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    if endpoints.is_empty() {
        return Err("no etcd endpoints".into());
    }
    let deadline = Instant::now() + timeout;
    let mut errors = Vec::new();
    for ep in endpoints.iter().cycle() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let addr = endpoint_addr(ep)?;
        match post(addr, path, body, left.min(ATTEMPT)) {
            Ok((200, text)) => {
                return serde_json::from_str(&text)
                    .map_err(|e| format!("etcd {ep}{path}: bad JSON ({e}): {text}"));
            }
            Ok((status, text)) => {
                errors.push(format!("{ep}{path}: HTTP {status}: {}", text.trim()))
            }
            Err(e) => errors.push(format!("{ep}{path}: {e}")),
        }
        // Do not spin on a refused connection.
        std::thread::sleep(
            Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now())),
        );
    }
    let from = errors.len().saturating_sub(endpoints.len());
    Err(format!(
        "no etcd endpoint answered within {timeout:?} ({} attempts; last: {})",
        errors.len(),
        errors[from..].join("; ")
    ))
}

/// `http://127.0.0.1:2379` -> a socket address (IP addresses only, no resolution).
pub fn endpoint_addr(ep: &str) -> Result<SocketAddr, String> {
    let rest = ep
        .strip_prefix("http://")
        .ok_or_else(|| format!("etcd endpoint {ep:?}: only http:// URLs are supported"))?;
    let hostport = rest.trim_end_matches('/');
    hostport
        .parse()
        .map_err(|e| format!("etcd endpoint {ep:?}: not IP:port ({e})"))
}

/// One HTTP/1.0 POST (HTTP/1.0 so the answer is never chunked), every step
/// bounded by `timeout` overall.
fn post(
    addr: SocketAddr,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let deadline = Instant::now() + timeout;
    let left = || {
        let d = deadline.saturating_duration_since(Instant::now());
        if d.is_zero() {
            Err("timed out".to_string())
        } else {
            Ok(d)
        }
    };
    let mut s = TcpStream::connect_timeout(&addr, left()?).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    let auth = TOKEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|t| format!("Authorization: {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("receive: {e}")),
        }
        if buf.len() > 16 << 20 {
            return Err("answer larger than 16 MiB".into());
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let status = http_status(&text).ok_or_else(|| format!("not an HTTP answer: {text:.200}"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_string()))
}

/// The status code of an HTTP answer's first line (`HTTP/1.1 200 OK` -> 200).
pub fn http_status(answer: &str) -> Option<u16> {
    let line = answer.lines().next()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what the gateway speaks for bytes fields).
pub fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decode standard base64 (padding optional); names the offending character.
pub fn b64_decode(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for (i, c) in s.bytes().enumerate() {
        if c == b'=' {
            break;
        }
        let v = B64
            .iter()
            .position(|&x| x == c)
            .ok_or_else(|| format!("invalid base64 character {:?} at {i}", char::from(c)))?;
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for s in [
            "",
            "f",
            "fo",
            "foo",
            "foob",
            "fooba",
            "foobar",
            "/service/demo/leader",
        ] {
            let e = b64_encode(s.as_bytes());
            assert_eq!(b64_decode(&e).unwrap(), s.as_bytes(), "{s}");
        }
        assert_eq!(b64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(b64_encode(b"fo"), "Zm8=");
        assert!(b64_decode("Zm9v!").is_err());
    }

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }

    #[test]
    fn parses_gateway_kv_with_string_ints() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"key":"L3NlcnZpY2UvZGVtby9sZWFkZXI=","create_revision":"42","mod_revision":"43","version":"2","value":"cGcx","lease":"7587"}"#,
        )
        .unwrap();
        let kv = parse_kv(&v).unwrap();
        assert_eq!(kv.key, "/service/demo/leader");
        assert_eq!(kv.value, "pg1");
        assert_eq!(
            (kv.create_revision, kv.mod_revision, kv.version, kv.lease),
            (42, 43, 2, 7587)
        );
    }

    #[test]
    fn status_line_and_endpoints() {
        assert_eq!(
            http_status("HTTP/1.1 503 Service Unavailable\r\n\r\n"),
            Some(503)
        );
        assert_eq!(http_status("HTTP/1.0 200 OK\r\n"), Some(200));
        assert_eq!(http_status("garbage"), None);
        assert_eq!(endpoint_addr("http://127.0.0.1:2379").unwrap().port(), 2379);
        assert!(endpoint_addr("https://127.0.0.1:2379").is_err());
        assert!(endpoint_addr("http://localhost:2379").is_err());
    }
}
