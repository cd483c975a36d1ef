//! TLS for `rediss://` URLs, with the `tls-rustls` feature: the roots and
//! client certificate of a [`RedisConfig`](super::RedisConfig), the rustls
//! crypto provider, and what a failed handshake means.

use std::sync::Arc;

use redis::{ClientTlsConfig, RedisError, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config::RedisConfig;
use crate::LockError;
use crate::error::{BackendError, BackendErrorKind};

/// PEM text of the certificates to trust; shown by its size only.
#[derive(Clone)]
pub(in crate::backend) struct RootCertificate(Vec<u8>);

impl std::fmt::Debug for RootCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RootCertificate({} bytes of PEM)", self.0.len())
    }
}

/// PEM text of the client's certificate chain and private key; never shown.
#[derive(Clone)]
pub(in crate::backend) struct ClientIdentity {
    certificate: Vec<u8>,
    key: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClientIdentity({} bytes of certificate PEM, private key hidden)",
            self.certificate.len()
        )
    }
}

/// Makes *ring* the process's rustls crypto provider, unless one is already
/// installed. rustls picks a provider by itself only when exactly one is
/// compiled in; another crate of the program may bring `aws-lc-rs` as well,
/// and TLS connections would then fail.
pub(in crate::backend) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl RedisConfig {
    /// Trusts the certificate authorities in `pem` (one or more PEM
    /// certificates, as in a `ca.crt` file) for `rediss://` connections,
    /// *instead of* the system's roots: for servers whose certificate is
    /// signed by a private CA.
    ///
    /// Without it, `rediss://` trusts the operating system's certificate
    /// store. The server's certificate must name the host of the URL (a DNS
    /// name, or the IP address as a subject alternative name). A `redis://`
    /// URL with a root certificate is refused, rather than connecting without
    /// TLS.
    ///
    /// TLS is provided by rustls with the *ring* crypto provider, installed as
    /// the process default on the first `rediss://` connection unless the
    /// program installed another one before.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{Locker, RedisBackend, RedisConfig};
    ///
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let config = RedisConfig::default().tls_root_certificate(ca);
    /// let backend = RedisBackend::connect_with("rediss://redis.internal:6380/", config).await?;
    /// let locker = Locker::new(backend);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(RootCertificate(pem.into()));
        self
    }

    /// Presents the certificate chain in `certificate_pem` (the client's
    /// certificate first) and its private key in `key_pem` (PKCS#8, PKCS#1
    /// or SEC1 PEM) to servers that check clients (mutual TLS:
    /// `tls-auth-clients yes`). Only used with `rediss://` URLs; a `redis://`
    /// URL with a client certificate is refused, rather than connecting
    /// without TLS. Both are checked when connecting, and the key is never
    /// printed.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{Locker, RedisBackend, RedisConfig};
    ///
    /// let config = RedisConfig::default()
    ///     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?)
    ///     .tls_client_certificate(
    ///         std::fs::read("/etc/locks/client.crt")?,
    ///         std::fs::read("/etc/locks/client.key")?,
    ///     );
    /// let backend = RedisBackend::connect_with("rediss://redis.internal:6380/", config).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls_client = Some(ClientIdentity {
            certificate: certificate_pem.into(),
            key: key_pem.into(),
        });
        self
    }

    /// True when the config holds TLS settings, which need `rediss://`.
    fn has_tls_settings(&self) -> bool {
        self.tls_root.is_some() || self.tls_client.is_some()
    }

    /// The certificates to trust and to present, checked: `server` names the
    /// server in the error when one cannot be used.
    pub(in crate::backend) fn tls_certificates(
        &self,
        server: &str,
    ) -> Result<Option<TlsCertificates>, LockError> {
        if !self.has_tls_settings() {
            return Ok(None);
        }
        // `what` was given to `RedisConfig::{method}` and cannot be used.
        let unusable = |method: &str, what: &str, reason: String| -> LockError {
            BackendError::new(
                BackendErrorKind::Tls,
                format!("{server}: connect"),
                format!("the {what} given to `RedisConfig::{method}` {reason}"),
            )
            .into()
        };
        let certificates = |method: &str, what: &str, pem: &[u8]| -> Result<(), LockError> {
            let mut count = 0;
            for certificate in CertificateDer::pem_slice_iter(pem) {
                certificate
                    .map_err(|err| unusable(method, what, format!("is not valid PEM: {err}")))?;
                count += 1;
            }
            if count == 0 {
                return Err(unusable(
                    method,
                    what,
                    "holds no certificate (expected `-----BEGIN CERTIFICATE-----`)".into(),
                ));
            }
            Ok(())
        };
        if let Some(RootCertificate(pem)) = &self.tls_root {
            certificates("tls_root_certificate", "root certificate", pem)?;
        }
        if let Some(identity) = &self.tls_client {
            let method = "tls_client_certificate";
            certificates(method, "client certificate", &identity.certificate)?;
            PrivateKeyDer::from_pem_slice(&identity.key).map_err(|err| {
                unusable(
                    method,
                    "client key",
                    format!(
                        "is not a PEM private key (expected `-----BEGIN PRIVATE KEY-----`, or an \
                         RSA or EC key): {err}"
                    ),
                )
            })?;
        }
        Ok(Some(TlsCertificates {
            client_tls: self.tls_client.as_ref().map(|identity| ClientTlsConfig {
                client_cert: identity.certificate.clone(),
                client_key: identity.key.clone(),
            }),
            root_cert: self
                .tls_root
                .as_ref()
                .map(|RootCertificate(pem)| pem.clone()),
        }))
    }
}

/// The TLS error behind `err`, when the TLS layer failed it (rustls reports
/// through `std::io::Error`, whose `source` skips the error it wraps), and
/// what to check.
pub(super) fn tls_failure(err: &RedisError) -> Option<(String, &'static str)> {
    use rustls::AlertDescription as Alert;
    let inner = std::error::Error::source(err)?
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()?;
    let inner: &(dyn std::error::Error + 'static) = &**inner;
    let inner = match inner.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref()?,
        None => inner,
    };
    let hint = match inner.downcast_ref::<rustls::Error>() {
        Some(rustls::Error::AlertReceived(Alert::CertificateRequired)) => {
            "the server checks clients (`tls-auth-clients`): give a client certificate with \
             `RedisConfig::tls_client_certificate`"
        }
        Some(rustls::Error::AlertReceived(
            Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired
            | Alert::CertificateRevoked,
        )) => {
            "the server refused the client certificate: is it signed by a CA in the \
             server's `tls-ca-cert-file`, and still valid? see \
             `RedisConfig::tls_client_certificate`"
        }
        Some(_) => SERVER_CERTIFICATE_HINT,
        None if inner.is::<rustls::pki_types::InvalidDnsNameError>() => SERVER_CERTIFICATE_HINT,
        None => return None,
    };
    Some((inner.to_string(), hint))
}

const SERVER_CERTIFICATE_HINT: &str = "is the port a TLS port, and does the server's \
                                       certificate name this host and chain to a trusted \
                                       root? see `RedisConfig::tls_root_certificate`";
