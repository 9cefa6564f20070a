//! The loop's side of etcd TLS and authentication (issue 12): the authentication
//! step, certificate and permission errors at error level, and a reconnect when
//! SIGHUP brings new `[etcd]` settings.
//!
//! Owns: when the agent authenticates. Must never: authenticate on the renewal
//! path (an etcd `Authenticate` is a Raft write and a bcrypt; DESIGN S1, S6 d: the
//! renewal's deadline is for the keepalive and the read alone), or log a secret.

use log::{debug, error, info};

use super::Agent;
use crate::config::EtcdConfig;
use crate::core::time::Instant;
use crate::dcs::{is_invalid_auth_token, is_security_error};

impl Agent {
    /// Authenticate the client if it has credentials and no token, bounded by
    /// `deadline`. Runs after the renewal (and after a failed read): the renewal
    /// never waits for it. A failure is logged; the next iteration tries again.
    pub(super) fn authenticate_step(&mut self, deadline: Instant) {
        if self.cfg.etcd.auth.is_none() {
            return;
        }
        let Some((etcd, rt)) = self.connect(deadline) else {
            return;
        };
        if etcd.authenticated() {
            return;
        }
        match etcd.authenticate(rt, deadline) {
            Ok(()) => debug!("etcd: authenticated"),
            Err(e) => {
                let msg = e.to_string();
                self.etcd_failed(&msg);
                self.switch_endpoint();
            }
        }
    }

    /// A failed etcd call or connect: an "invalid auth token" drops the token (a
    /// new one is fetched by `authenticate_step`, never by the call) and has the
    /// member key written again once it is in place; a certificate, TLS or
    /// permission problem is logged at error level once per distinct text (an
    /// operator must act; etcd being down stays at debug).
    pub(super) fn etcd_failed(&mut self, msg: &str) {
        // A refused answer fails its call: the count is brought up to date at
        // every failed call.
        self.status.metrics.etcd_foreign_answers = self.etcd_cluster.refused();
        if is_invalid_auth_token(msg) {
            if let Some(etcd) = self.etcd.as_mut() {
                etcd.auth_lost();
            }
            // etcd forgot the token (a restart, `auth disable`/`enable`, its TTL):
            // the first write with the new one is the member key, so a credential
            // that may no longer write shows now, not when a vacancy needs this
            // node's fresh position (DESIGN §3a). One write per lost token.
            self.member_written = None;
        }
        if is_security_error(msg) {
            if self.security_error.as_deref() != Some(msg) {
                error!("etcd: {msg}");
                self.security_error = Some(msg.to_string());
            }
        } else {
            debug!("{msg}");
        }
    }

    /// A failed write of this node's own keys: a refused token is handled as for
    /// any call (`etcd_failed`: dropped, a new one in the next authentication
    /// step). Other causes stay at debug: the reads report them, once per distinct
    /// text, and a permission error logged for the write too would alternate with
    /// the read's and be logged every iteration.
    pub(super) fn write_failed(&mut self, msg: &str) {
        if is_invalid_auth_token(msg) {
            self.etcd_failed(msg);
        } else {
            debug!("{msg}");
        }
    }

    /// SIGHUP: new TLS files or credentials take effect through a new connection
    /// (the files are read at every connect). Endpoints stay as started.
    pub(super) fn etcd_reloaded(&mut self, new: EtcdConfig) {
        // The resolver's timings apply from the next lookup (review of
        // resolve_interval, L5: a reload ignored them without a word).
        self.cfg.etcd.resolve_timeout = new.resolve_timeout;
        self.cfg.etcd.resolve_interval = new.resolve_interval;
        if new.tls.is_some() || new.auth.is_some() || self.cfg.etcd.tls.is_some() {
            info!("SIGHUP: reconnecting to etcd to re-read its certificates and credentials");
            self.cfg.etcd.tls = new.tls;
            self.cfg.etcd.auth = new.auth;
            self.etcd = None;
            // A member the SRV records no longer list is not reconnected to.
            if self.endpoint_unlisted.take().is_some() {
                self.endpoint = 0;
                self.status.metrics.etcd_endpoint_unlisted = None;
                self.status.metrics.etcd_endpoint = 0;
            }
            self.security_error = None;
            // The token now, in the signal's step: not on the next renewal's path.
            self.authenticate_step(self.deadline(self.core.timing().retry_timeout));
        }
    }
}
