//! TLS material for the REST API (issue 12): the server's certificate, key and
//! client-certificate verification, and `tenure ctl`'s client side. rustls with
//! the ring provider, the same crate and provider etcd-client's `tls` feature
//! already builds (no second crypto library in the binary).
//!
//! Owns: reading PEM files into rustls configurations, and every error that names
//! a file and what is wrong with it (unreadable, no PEM block of the kind wanted,
//! a key that does not match its certificate). Must never: read a clock (expiry is
//! checked by `config`, which passes the instant in), log or print key material,
//! or panic on a bad file. A leaf module: it imports nothing of ours.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// `[api] verify_client`, with Patroni's names and meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerifyClient {
    /// No client certificate is asked for.
    #[default]
    None,
    /// One is asked for; a client without one completes the handshake, but the
    /// endpoints that need access answer 403 "client certificate required"
    /// (Patroni's `check_access`). One that does not verify fails the handshake.
    Optional,
    /// The handshake fails without a certificate that chains to `cafile`.
    Required,
}

impl VerifyClient {
    pub fn parse(s: &str) -> Option<VerifyClient> {
        match s {
            "none" => Some(VerifyClient::None),
            "optional" => Some(VerifyClient::Optional),
            "required" => Some(VerifyClient::Required),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VerifyClient::None => "none",
            VerifyClient::Optional => "optional",
            VerifyClient::Required => "required",
        }
    }
}

/// The one provider: ring, as etcd-client's `tls` feature builds it.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every `CERTIFICATE` block of `path`; `what` names the key in errors.
pub fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = crate::config::read_bytes(path, crate::config::SMALL_FILE_MAX)
        .map_err(|e| format!("{what} {}: cannot read: {e}", path.display()))?;
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&text).collect();
    let certs = certs.map_err(|e| format!("{what} {}: not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {}: no PEM CERTIFICATE block in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key of `path` (PKCS#8, PKCS#1 or SEC1).
fn read_key(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    let text = crate::config::read_bytes(path, crate::config::SMALL_FILE_MAX)
        .map_err(|e| format!("{what} {}: cannot read: {e}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("{what} {}: no PEM PRIVATE KEY block in it", path.display())
        }
        e => format!(
            "{what} {}: not a valid PEM private key: {e}",
            path.display()
        ),
    })
}

fn roots(path: &Path, what: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for c in read_certs(path, what)? {
        roots.add(c).map_err(|e| {
            format!(
                "{what} {}: not a usable CA certificate: {e}",
                path.display()
            )
        })?;
    }
    Ok(roots)
}

/// The API server's configuration: `cert` (chain, end-entity first) and `key`
/// (may be the same file), and, unless `verify` is `None`, client certificates
/// checked against the CA bundle `ca`. Errors name the key and the file.
pub fn server_config(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
    verify: VerifyClient,
) -> Result<Arc<ServerConfig>, String> {
    let chain = read_certs(cert, "[api] certfile")?;
    let k = read_key(key, "[api] keyfile")?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match (verify, ca) {
        (VerifyClient::None, _) => builder.with_no_client_auth(),
        (_, None) => {
            return Err(format!(
                "[api] verify_client = \"{}\" needs [api] cafile (the CA client \
                 certificates must chain to)",
                verify.as_str()
            ));
        }
        (v, Some(ca)) => {
            let b = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(ca, "[api] cafile")?),
                provider(),
            );
            let b = if v == VerifyClient::Optional {
                b.allow_unauthenticated()
            } else {
                b
            };
            builder.with_client_cert_verifier(
                b.build()
                    .map_err(|e| format!("[api] cafile {}: {e}", ca.display()))?,
            )
        }
    };
    let mut config = builder.with_single_cert(chain, k).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "[api] keyfile {} does not match the certificate in [api] certfile {}",
            key.display(),
            cert.display()
        ),
        e => format!(
            "[api] certfile {} / keyfile {}: {e}",
            cert.display(),
            key.display()
        ),
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// `tenure ctl`'s client configuration: the servers' certificates checked against
/// `cacert` (or accepted unchecked when `insecure`, patronictl's `ctl.insecure`),
/// and a client certificate and key when the API asks for one.
pub fn client_config(
    cacert: Option<&Path>,
    cert: Option<(&Path, &Path)>,
    insecure: bool,
) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider())))
    } else {
        let ca = cacert.ok_or_else(|| {
            "an https:// API needs [ctl] cacert (or [api] cafile) to check the server's \
             certificate, or [ctl] insecure = true"
                .to_string()
        })?;
        builder.with_root_certificates(roots(ca, "[ctl] cacert")?)
    };
    let config = match cert {
        None => builder.with_no_client_auth(),
        Some((c, k)) => builder
            .with_client_auth_cert(
                read_certs(c, "[ctl] certfile")?,
                read_key(k, "[ctl] keyfile")?,
            )
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => format!(
                    "[ctl] keyfile {} does not match the certificate in [ctl] certfile {}",
                    k.display(),
                    c.display()
                ),
                e => format!(
                    "[ctl] certfile {} / keyfile {}: {e}",
                    c.display(),
                    k.display()
                ),
            })?,
    };
    Ok(Arc::new(config))
}

/// `[ctl] insecure = true`: any server certificate is accepted (the handshake's
/// signatures are still checked, so the session is still encrypted to whoever
/// holds that key). For a test bed or a first setup, never for production.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Whether the first bytes a client sent on the TLS port are a plain HTTP request
/// rather than a TLS record (a handshake record starts with 0x16): answered with a
/// plain-text 400 instead of a TLS alert the client cannot read.
pub fn looks_like_plain_http(first: &[u8]) -> bool {
    first.first().is_some_and(|b| b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_client_names_round_trip() {
        for v in [
            VerifyClient::None,
            VerifyClient::Optional,
            VerifyClient::Required,
        ] {
            assert_eq!(VerifyClient::parse(v.as_str()), Some(v));
        }
        assert_eq!(VerifyClient::parse("yes"), None);
    }

    #[test]
    fn plain_http_is_told_from_a_tls_record() {
        assert!(looks_like_plain_http(b"GET / HTTP/1.1"));
        assert!(looks_like_plain_http(b"P"));
        assert!(!looks_like_plain_http(&[0x16, 0x03, 0x01]));
        assert!(!looks_like_plain_http(b""));
    }

    #[test]
    fn missing_and_garbage_files_are_named() {
        let dir = std::env::temp_dir().join(format!("tenure-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not pem at all\n").unwrap();
        let missing = dir.join("missing.pem");
        let e = server_config(&missing, &missing, None, VerifyClient::None).unwrap_err();
        assert!(
            e.contains("[api] certfile") && e.contains("missing.pem") && e.contains("cannot read"),
            "{e}"
        );
        let e = server_config(&junk, &junk, None, VerifyClient::None).unwrap_err();
        assert!(
            e.contains("junk.pem") && e.contains("no PEM CERTIFICATE"),
            "{e}"
        );
        let e = client_config(None, None, false).unwrap_err();
        assert!(e.contains("[ctl] cacert"), "{e}");
        assert!(client_config(None, None, true).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
