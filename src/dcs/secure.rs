//! etcd over TLS and etcd authentication (issue 12).
//!
//! Owns: turning `[etcd]` TLS settings into the client's TLS options (files read
//! afresh at every connect, so a renewed certificate or a SIGHUP is picked up by
//! the next connection) and the explicit authentication step. Must never:
//! authenticate inside a renewal (DESIGN S1/S6 d: an etcd `Authenticate` is a Raft
//! write plus a bcrypt, with no bound we control), print a password, or resolve a
//! name in this process (the TLS server name only names what the certificate
//! must carry; the connection goes to an IP address, DESIGN §5: names are
//! resolved by a child process, crate::resolve).
//!
//! Token handling. etcd-client 0.21 authenticates once inside `Client::connect`
//! when `ConnectOptions::with_user` is set, and re-authenticates inside any call
//! that fails with "invalid auth token" only when `with_auto_token_refresh(true)`
//! is set (off by default). We set neither: the client is built without a user,
//! so connecting sends nothing, and [`Etcd::authenticate`] sets the credentials
//! with `Client::update_user`, bounded by its own deadline. With no automatic
//! refresh, a call whose token etcd forgot (a member restart, a password change,
//! 300 s of silence with `simple` tokens) fails as any failed call does; the
//! caller counts that renewal as failed and authenticates again in its own step.

use std::path::Path;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use tokio::runtime::Runtime;

use super::{DcsError, Etcd, bounded};
use crate::clock;
use crate::config::{EtcdAuth, EtcdConfig, EtcdTls, check_tls_files};
use crate::core::time::Instant;

/// What a connection needs besides its endpoints: TLS and credentials.
#[derive(Clone, Debug, Default)]
pub struct Security {
    pub tls: Option<EtcdTls>,
    pub auth: Option<EtcdAuth>,
}

impl Security {
    pub fn of(cfg: &EtcdConfig) -> Security {
        Security {
            tls: cfg.tls.clone(),
            auth: cfg.auth.clone(),
        }
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, DcsError> {
    crate::config::read_bytes(path, crate::config::SMALL_FILE_MAX).map_err(|e| {
        DcsError(format!(
            "etcd TLS: {what} {}: cannot read: {e}",
            path.display()
        ))
    })
}

/// `opts` with the TLS settings of `tls`: the files are checked (readable, PEM,
/// the client certificate in its validity period) and read now.
pub(super) fn with_tls(opts: ConnectOptions, tls: &EtcdTls) -> Result<ConnectOptions, DcsError> {
    let now = crate::clock::realtime().as_secs() as i64;
    check_tls_files(tls, now).map_err(|e| DcsError(format!("etcd TLS: {e}")))?;
    let mut t =
        TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.cacert, "cacert")?));
    if let Some((cert, key)) = &tls.cert {
        t = t.identity(Identity::from_pem(read(cert, "cert")?, read(key, "key")?));
    }
    if let Some(name) = &tls.server_name {
        t = t.domain_name(name.clone());
    }
    Ok(opts.with_tls(t))
}

/// True when an etcd error says the request's token is no longer known.
pub fn is_invalid_auth_token(msg: &str) -> bool {
    msg.contains("invalid auth token")
}

/// True when an error is about who we are rather than whether etcd answered: a
/// certificate, the TLS handshake, a password or a role. These are logged at
/// error level (an operator must act), the others at debug (etcd being down is an
/// observation).
pub fn is_security_error(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    [
        "etcd tls",
        "certificate",
        "unknownissuer",
        "tls handshake",
        "handshake",
        "permission denied",
        "authentication failed",
        "invalid auth token",
        "user name is empty",
        "invalid peer",
        "expired",
    ]
    .iter()
    .any(|k| m.contains(k))
}

impl Etcd {
    /// Whether the client holds a token it may use (always true without
    /// `[etcd] username`).
    pub fn authenticated(&self) -> bool {
        self.user.is_none() || self.authed
    }

    /// Forget the token (a call failed with "invalid auth token"): the next
    /// [`Etcd::authenticate`] gets a new one.
    pub fn auth_lost(&mut self) {
        self.authed = false;
    }

    /// Authenticate with `[etcd] username`/password, bounded by `deadline`: its own
    /// step, never inside a renewal. Does nothing without credentials or when the
    /// token is still good.
    pub fn authenticate(&mut self, rt: &Runtime, deadline: Instant) -> Result<(), DcsError> {
        if self.authenticated() {
            return Ok(());
        }
        let Some(user) = self.user.clone() else {
            return Ok(());
        };
        let name = user.username.clone();
        let client = &mut self.client;
        bounded(
            rt,
            deadline,
            &format!("etcd authentication as {name}"),
            client.update_user(Some((user.username, user.password))),
        )?;
        self.authed = true;
        Ok(())
    }

    /// Connect with `sec` and authenticate at once (for one-shot users: `ctl`,
    /// `confirm-epoch`, start-up checks, which renew nothing), within `deadline`.
    /// Under TLS without `tls_server_name` a client checks one name, so with more
    /// than one endpoint each is tried on its own, in order, each within its share
    /// of the time left, until one answers (its `Status`): a member down, first in
    /// the list or the SRV answer, does not fail the command (review of the SRV
    /// change, finding 5).
    pub fn connect_authenticated(
        rt: &Runtime,
        endpoints: &[String],
        prefix: &str,
        sec: &Security,
        deadline: Instant,
    ) -> Result<Etcd, DcsError> {
        let one_name = sec.tls.as_ref().is_some_and(|t| t.server_name.is_none());
        if !one_name || endpoints.len() <= 1 {
            return Etcd::connect_authenticated_to(rt, endpoints, prefix, sec, deadline);
        }
        let mut failed = Vec::new();
        for (k, e) in endpoints.iter().enumerate() {
            let now = clock::now();
            let share = now.until(deadline) / u32::try_from(endpoints.len() - k).unwrap_or(1);
            let d = now.add(share);
            // Proven by a read the role may make (second review, M1: etcd may refuse
            // `Status` to a user without the root role).
            let tried = Etcd::connect_authenticated_to(rt, std::slice::from_ref(e), prefix, sec, d)
                .and_then(|mut etcd| etcd.read_raw(rt, "leader", d).map(|_| etcd));
            match tried {
                Ok(etcd) => return Ok(etcd),
                Err(why) => failed.push(format!("{e}: {}", why.0)),
            }
        }
        Err(DcsError(failed.join("; ")))
    }

    /// [`Etcd::connect_authenticated`] with one client over `endpoints`.
    fn connect_authenticated_to(
        rt: &Runtime,
        endpoints: &[String],
        prefix: &str,
        sec: &Security,
        deadline: Instant,
    ) -> Result<Etcd, DcsError> {
        // Names are resolved first, in a child process within the deadline
        // (crate::resolve); the client gets addresses, TLS the name.
        let (urls, name) = crate::resolve::targets_now(
            endpoints,
            sec.tls.is_some(),
            sec.tls.as_ref().and_then(|t| t.server_name.as_deref()),
            // One-shot commands (ctl, confirm-epoch) wait the default
            // `resolve_timeout` at most, within their own deadline.
            crate::config::DEFAULT_RESOLVE_TIMEOUT,
            deadline,
        )
        .map_err(DcsError)?;
        let mut sec = sec.clone();
        if let (Some(n), Some(tls)) = (name, sec.tls.as_mut()) {
            tls.server_name = Some(n);
        }
        let mut e = Etcd::connect_with(rt, &urls, prefix, &sec, deadline)?;
        e.authenticate(rt, deadline)?;
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_errors_are_told_apart() {
        assert!(is_security_error(
            "read cluster: status: Unavailable, message: \"error trying to connect: invalid \
             peer certificate: UnknownIssuer\""
        ));
        assert!(is_security_error("read: etcdserver: permission denied"));
        assert!(is_security_error(
            "etcd TLS: etcd cert /x: expired (3 s ago)"
        ));
        assert!(!is_security_error("read cluster: no answer within 0.300 s"));
        assert!(!is_security_error("etcdserver: no leader"));
        assert!(is_invalid_auth_token("etcdserver: invalid auth token"));
    }
}
