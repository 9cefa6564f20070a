//! `[api]` TLS and read access, and `[ctl]` (issue 12): the REST API over TLS
//! with Patroni's `certfile`/`keyfile`/`cafile`/`verify_client`, which reads need
//! credentials (`read_auth`), and how `tenure ctl` checks an https:// API
//! (patronictl's `ctl` section: `cacert`, `certfile`, `keyfile`, `insecure`).
//!
//! Owns: the keys' names, defaults and the rules between them. Must never: read
//! the certificate files here (`Config::load` checks them, [`check_api_tls_files`],
//! so `parse` stays pure), or accept a combination that leaves an endpoint less
//! protected than the operator wrote (a `verify_client` without a CA, a
//! `read_auth` without credentials: refused, not ignored).

use std::path::PathBuf;

use super::{ConfigError, Sect};
pub use crate::tls::VerifyClient;

/// `[api] certfile` and friends: the API serves https:// only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiTls {
    /// PEM certificate chain, the server's own certificate first.
    pub certfile: PathBuf,
    /// PEM private key (default: `certfile`, a key in the same file).
    pub keyfile: PathBuf,
    /// PEM CA bundle client certificates must chain to.
    pub cafile: Option<PathBuf>,
    pub verify_client: VerifyClient,
}

/// `[api] read_auth`: which read endpoints (GET, HEAD, OPTIONS) need the same
/// access as the write endpoints (a client certificate when `verify_client` asks
/// for one, then HTTP basic). Patroni never authenticates reads: `none` is the
/// default, so load balancers keep checking without credentials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadAuth {
    /// Every read is open.
    #[default]
    None,
    /// The health checks (`/`, `/primary`, `/replica`, `/health`, `/liveness`,
    /// `/readiness`, `/leader`, `/read-write`, ... every path of `api::endpoint`
    /// but `/patroni`) stay open for load balancers; `/patroni`, `/cluster`,
    /// `/history`, `/config` and `/metrics` need access.
    ExceptHealth,
    /// Every read needs access, health checks included (the load balancer then
    /// sends credentials, e.g. HAProxy's `http-check send hdr Authorization`).
    All,
}

/// `[ctl]`: how `tenure ctl` talks to an https:// API. Empty keys fall back to
/// the node's own `[api]` files, as patronictl falls back to `restapi`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtlConfig {
    /// CA bundle the members' API certificates must chain to (default:
    /// `[api] cafile`).
    pub cacert: Option<PathBuf>,
    /// Client certificate and key for APIs with `verify_client` (default: `[api]
    /// certfile`/`keyfile` when the node's own API verifies clients).
    pub cert: Option<(PathBuf, PathBuf)>,
    /// Accept any server certificate (a test bed, a first setup).
    pub insecure: bool,
}

/// The `[api]` keys of this module.
pub(super) const API_KEYS: &[&str] = &[
    "certfile",
    "keyfile",
    "cafile",
    "verify_client",
    "read_auth",
];

/// `[api]` TLS and `read_auth`. `has_credentials`: `username`/`password` are set.
pub(super) fn parse_api(
    api: &Sect<'_>,
    has_credentials: bool,
) -> Result<(Option<ApiTls>, ReadAuth), ConfigError> {
    let certfile = api.path("certfile")?;
    let keyfile = api.path("keyfile")?;
    let cafile = api.path("cafile")?;
    let verify = match api.string("verify_client")?.as_deref() {
        None => None,
        Some(s) => Some(VerifyClient::parse(s).ok_or_else(|| {
            api.err(
                "verify_client",
                format!("expected \"none\", \"optional\" or \"required\", found \"{s}\""),
            )
        })?),
    };
    let read_auth = match api.string("read_auth")?.as_deref() {
        None | Some("none") => ReadAuth::None,
        Some("except_health") => ReadAuth::ExceptHealth,
        Some("all") => ReadAuth::All,
        Some(s) => {
            return Err(api.err(
                "read_auth",
                format!("expected \"none\", \"except_health\" or \"all\", found \"{s}\""),
            ));
        }
    };
    if read_auth != ReadAuth::None && !has_credentials {
        return Err(api.err(
            "read_auth",
            "needs [api] username and password (the reads it protects are checked with \
             them): set both, or read_auth = \"none\"",
        ));
    }
    let tls = match certfile {
        None => {
            for (k, set) in [
                ("keyfile", keyfile.is_some()),
                ("cafile", cafile.is_some()),
                ("verify_client", verify.is_some()),
            ] {
                if set {
                    return Err(api.err(k, "needs [api] certfile (the API's TLS certificate)"));
                }
            }
            None
        }
        Some(certfile) => {
            let verify_client = verify.unwrap_or_default();
            if verify_client != VerifyClient::None && cafile.is_none() {
                return Err(api.err(
                    "verify_client",
                    format!(
                        "\"{}\" needs [api] cafile (the CA client certificates must chain to)",
                        verify_client.as_str()
                    ),
                ));
            }
            Some(ApiTls {
                keyfile: keyfile.unwrap_or_else(|| certfile.clone()),
                certfile,
                cafile,
                verify_client,
            })
        }
    };
    Ok((tls, read_auth))
}

/// `connect_url` against the scheme the API serves: a member whose published URL
/// says http:// while it serves https:// (or the reverse) cannot be reached by
/// ctl or by a peer.
pub(super) fn check_connect_url(
    api: &Sect<'_>,
    url: &str,
    tls: Option<&ApiTls>,
) -> Result<(), ConfigError> {
    // What `tenure ctl` and the peers parse it with (review of bad input, 6).
    crate::ctl::http::parse_api_url(url).map_err(|e| api.err("connect_url", e))?;
    match (tls.is_some(), url.starts_with("https://")) {
        (true, false) => Err(api.err(
            "connect_url",
            format!("must be https:// when [api] certfile is set, found \"{url}\""),
        )),
        (false, true) => Err(api.err(
            "connect_url",
            format!("is https:// but the API serves plain HTTP (no [api] certfile): \"{url}\""),
        )),
        _ => Ok(()),
    }
}

/// `[ctl]`, with the fallbacks to the node's `[api]` files.
pub(super) fn parse_ctl(ctl: &Sect<'_>, api: Option<&ApiTls>) -> Result<CtlConfig, ConfigError> {
    ctl.only(&["cacert", "certfile", "keyfile", "insecure"])?;
    let cacert = ctl
        .path("cacert")?
        .or_else(|| api.and_then(|t| t.cafile.clone()));
    let certfile = ctl.path("certfile")?;
    let keyfile = ctl.path("keyfile")?;
    let cert = match (certfile, keyfile) {
        (Some(c), k) => Some((c.clone(), k.unwrap_or(c))),
        (None, Some(_)) => {
            return Err(ctl.err("keyfile", "needs [ctl] certfile"));
        }
        // The node's own certificate, when its API verifies clients (patronictl
        // falls back to restapi's files the same way).
        (None, None) => api
            .filter(|t| t.verify_client != VerifyClient::None)
            .map(|t| (t.certfile.clone(), t.keyfile.clone())),
    };
    Ok(CtlConfig {
        cacert,
        cert,
        insecure: ctl.boolean("insecure")?.unwrap_or(false),
    })
}

/// The API's certificate files, at start-up and on every reload: readable, PEM,
/// the key matching the certificate, the certificate valid at `now_unix` (seconds
/// since the epoch), the CA bundle usable. The error names the key and the file.
/// `Ok`: the (leaf) certificate's `notAfter`, Unix seconds (`crate::certs`).
pub fn check_api_tls_files(tls: &ApiTls, now_unix: i64) -> Result<i64, String> {
    crate::tls::server_config(
        &tls.certfile,
        &tls.keyfile,
        tls.cafile.as_deref(),
        tls.verify_client,
    )?;
    let chain = crate::tls::read_certs(&tls.certfile, "[api] certfile")?;
    let first = chain.first().map(|c| c.as_ref()).unwrap_or(&[]);
    super::secrets::check_validity(first, now_unix)
        .map_err(|e| format!("[api] certfile {}: {e}", tls.certfile.display()))
}
