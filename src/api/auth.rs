//! HTTP basic authentication of the API's write endpoints and client certificates
//! (Patroni's `check_access`, without the allowlist): when `[api] verify_client`
//! asks for a certificate, a request without a verified one is refused first (403
//! "client certificate required"), then HTTP basic is checked: certificate AND
//! credentials, as Patroni does, never one instead of the other. `[api]
//! read_auth` puts reads behind the same checks ([`read_needs_access`]).
//!
//! Owns: deciding from the `Authorization` header, the client certificate and the
//! configured credentials whether a request may proceed, and the refusal's status
//! and words.
//! Must never: let a write through while no credentials are configured (that is a
//! 403 saying how to enable them), compare secrets in time that depends on where
//! they differ, log or echo a password, or panic on any header.

use base64::Engine as _;

use crate::config::{ApiAuth, ReadAuth};

/// The realm of the `WWW-Authenticate` challenge on a 401.
pub const REALM: &str = "tenure";

/// Why a write was refused: the status (403 or 401) and the message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

impl Refusal {
    /// The extra header lines of the answer: a 401 carries the challenge.
    pub fn extra_headers(&self) -> String {
        if self.code == 401 {
            format!("WWW-Authenticate: Basic realm=\"{REALM}\"\r\n")
        } else {
            String::new()
        }
    }
}

/// Whether a write may proceed. `creds`: `[api] username`/`password`, `None` when
/// not configured (every write is then refused with 403, Patroni's behaviour for a
/// client it does not allow). `authorization`: the header's value as sent.
pub fn check(authorization: Option<&str>, creds: Option<&ApiAuth>) -> Result<(), Refusal> {
    let Some(creds) = creds else {
        return Err(Refusal {
            code: 403,
            message: "write endpoints are disabled: no credentials are configured. Set \
                      [api] username and password in the agent's configuration file (both), \
                      restart or reload it (SIGHUP), and send them with HTTP basic \
                      authentication (patronictl: ctl.authentication or restapi.authentication)"
                .into(),
        });
    };
    let unauthenticated = |message: &str| Refusal {
        code: 401,
        message: message.into(),
    };
    let Some(value) = authorization else {
        return Err(unauthenticated("no auth header received"));
    };
    // RFC 7617: the scheme is case-insensitive; one or more spaces follow it.
    let value = value.trim();
    let Some((scheme, token)) = value.split_once(' ') else {
        return Err(unauthenticated("not authenticated"));
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(unauthenticated("not authenticated"));
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(token.trim()) else {
        return Err(unauthenticated("not authenticated"));
    };
    let mut expected = Vec::with_capacity(creds.username.len() + 1 + creds.password.len());
    expected.extend_from_slice(creds.username.as_bytes());
    expected.push(b':');
    expected.extend_from_slice(creds.password.as_bytes());
    if ct_eq(&decoded, &expected) {
        Ok(())
    } else {
        Err(unauthenticated("not authenticated"))
    }
}

/// What the TLS layer knows about the client's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCert {
    /// None was asked for (plain HTTP, or `verify_client = "none"`).
    NotAsked,
    /// One was asked for and none came (`verify_client = "optional"`).
    Missing,
    /// One came and chains to `[api] cafile`.
    Verified,
}

/// Patroni's first check: a certificate was asked for and none verified: 403.
pub fn check_cert(cert: ClientCert) -> Result<(), Refusal> {
    match cert {
        ClientCert::Missing => Err(Refusal {
            code: 403,
            message: "client certificate required".into(),
        }),
        ClientCert::NotAsked | ClientCert::Verified => Ok(()),
    }
}

/// Whether a read of `path` needs the write endpoints' access under `mode`. The
/// health checks are every path of [`super::endpoint`] but `/patroni`.
pub fn read_needs_access(mode: ReadAuth, path: &str) -> bool {
    match mode {
        ReadAuth::None => false,
        ReadAuth::All => true,
        ReadAuth::ExceptHealth => !matches!(
            super::endpoint(path),
            Some(ep) if ep != super::Endpoint::Status
        ),
    }
}

/// Equality in time that depends only on `expected`'s length, never on where (or
/// whether) `given` differs (Patroni uses `hmac.compare_digest`).
fn ct_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = given.len() ^ expected.len();
    for (i, &e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!e);
        diff |= usize::from(g ^ e);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> ApiAuth {
        ApiAuth {
            username: "admin".into(),
            password: "s3cret:with colon".into(),
        }
    }

    fn basic(user_pass: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
    }

    #[test]
    fn no_credentials_configured_is_403_saying_how_to_enable_them() {
        let r = check(Some(&basic("admin:x")), None).unwrap_err();
        assert_eq!(r.code, 403);
        assert!(
            r.message.contains("[api] username and password"),
            "{}",
            r.message
        );
        assert_eq!(r.extra_headers(), "");
        assert_eq!(check(None, None).unwrap_err().code, 403);
    }

    #[test]
    fn the_right_credentials_pass_and_everything_else_is_401_with_the_challenge() {
        let c = creds();
        assert_eq!(
            check(Some(&basic("admin:s3cret:with colon")), Some(&c)),
            Ok(())
        );
        // The scheme is case-insensitive.
        let lower = basic("admin:s3cret:with colon").replacen("Basic", "basic", 1);
        assert_eq!(check(Some(&lower), Some(&c)), Ok(()));
        for bad in [
            None,
            Some(basic("admin:s3cret")),
            Some(basic("admin:s3cret:with colon ")),
            Some(basic("Admin:s3cret:with colon")),
            Some(basic("")),
            Some("Bearer abc".to_string()),
            Some("Basic".to_string()),
            Some("Basic !!!not-base64!!!".to_string()),
            Some(String::new()),
        ] {
            let r = check(bad.as_deref(), Some(&c)).unwrap_err();
            assert_eq!(r.code, 401, "{bad:?}");
            assert_eq!(
                r.extra_headers(),
                "WWW-Authenticate: Basic realm=\"tenure\"\r\n"
            );
            assert!(!r.message.contains("s3cret"));
        }
    }

    #[test]
    fn a_missing_client_certificate_is_403_before_credentials() {
        let r = check_cert(ClientCert::Missing).unwrap_err();
        assert_eq!(
            (r.code, r.message.as_str()),
            (403, "client certificate required")
        );
        assert_eq!(check_cert(ClientCert::Verified), Ok(()));
        assert_eq!(check_cert(ClientCert::NotAsked), Ok(()));
    }

    #[test]
    fn read_auth_keeps_health_checks_open_only_where_asked() {
        let health = [
            "/",
            "/primary",
            "/read-write",
            "/replica",
            "/health",
            "/liveness",
            "/readiness",
            "/leader",
            "/read-only",
            "/sync",
            "/async",
        ];
        let others = [
            "/patroni", "/cluster", "/history", "/config", "/metrics", "/nope",
        ];
        for p in health.iter().chain(others.iter()) {
            assert!(!read_needs_access(ReadAuth::None, p), "{p}");
            assert!(read_needs_access(ReadAuth::All, p), "{p}");
        }
        for p in health {
            assert!(!read_needs_access(ReadAuth::ExceptHealth, p), "{p}");
        }
        for p in others {
            assert!(read_needs_access(ReadAuth::ExceptHealth, p), "{p}");
        }
    }

    #[test]
    fn ct_eq_is_plain_equality() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abd", b"abc"));
        assert!(!ct_eq(b"ab", b"abc"));
        assert!(!ct_eq(b"abcd", b"abc"));
        assert!(ct_eq(b"", b""));
        // A prefix padded with what `!e` would give must still differ by length.
        assert!(!ct_eq(&[], &[0xff]));
    }
}
