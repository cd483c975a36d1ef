//! TLS for `rediss://` URLs, with the `tls-rustls` feature: the roots and
//! client certificate a `RedisConfig` holds, the rustls
//! crypto provider, and what a failed handshake means.

use std::sync::Arc;

use redis::{ClientTlsConfig, RedisError, TlsCertificates};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;

use crate::LockError;
use crate::backend::pem::{ClientCertificate, certificates_problem, client_certificate};
use crate::error::{BackendError, BackendErrorKind};

/// PEM text of the certificates to trust; shown by its size only.
#[derive(Clone)]
pub(in crate::backend) struct RootCertificate(Vec<u8>);

impl RootCertificate {
    pub(super) fn new(pem: Vec<u8>) -> Self {
        RootCertificate(pem)
    }
}

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

impl ClientIdentity {
    pub(super) fn new(certificate: Vec<u8>, key: Vec<u8>) -> Self {
        ClientIdentity { certificate, key }
    }
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

/// The certificates to trust and to present, checked: `server` names the
/// server in the error when one cannot be used. `None` without either: the
/// connection needs no settings of its own.
pub(super) fn certificates(
    root: Option<&RootCertificate>,
    client: Option<&ClientIdentity>,
    server: &str,
) -> Result<Option<TlsCertificates>, LockError> {
    if root.is_none() && client.is_none() {
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
        certificates_problem(pem).map_or(Ok(()), |reason| Err(unusable(method, what, reason)))
    };
    if let Some(RootCertificate(pem)) = root {
        certificates("tls_root_certificate", "root certificate", pem)?;
    }
    if let Some(identity) = client {
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
        client_tls: client.map(|identity| ClientTlsConfig {
            client_cert: identity.certificate.clone(),
            client_key: identity.key.clone(),
        }),
        root_cert: root.map(|RootCertificate(pem)| pem.clone()),
    }))
}

/// The TLS error behind `err`, when the TLS layer failed it (rustls reports
/// through `std::io::Error`, whose `source` skips the error it wraps), and
/// what to check.
pub(super) fn tls_failure(err: &RedisError) -> Option<(String, &'static str)> {
    let inner = std::error::Error::source(err)?
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()?;
    let inner: &(dyn std::error::Error + 'static) = &**inner;
    let inner = match inner.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref()?,
        None => inner,
    };
    let hint = match inner
        .downcast_ref::<rustls::Error>()
        .map(client_certificate)
    {
        Some(ClientCertificate::Required) => {
            "the server checks clients (`tls-auth-clients`): give a client certificate with \
             `RedisConfig::tls_client_certificate`"
        }
        Some(ClientCertificate::Refused) => {
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
