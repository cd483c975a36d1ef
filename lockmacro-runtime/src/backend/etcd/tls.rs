//! TLS for `https://` members, with the `tls-rustls` feature: the roots and
//! client certificate an `EtcdConfig` holds, checked and handed to the
//! etcd client, and what a failed handshake means.

use std::path::PathBuf;

use etcd_client::{Certificate, Identity, TlsOptions};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;

use crate::LockError;
use crate::backend::pem::{
    ClientCertificate, certificates_problem, client_certificate, install_crypto_provider,
};
use crate::error::{BackendError, BackendErrorKind};

/// PEM text given as is, or the file to read it from when connecting.
/// Shown by its size or path only, never its content (it may be a key).
#[derive(Clone)]
pub(super) enum Pem {
    Given(Vec<u8>),
    File(PathBuf),
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pem::Given(pem) => write!(f, "{} bytes of PEM", pem.len()),
            Pem::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The roots to trust and the identity to present; none of either means
/// plain connections unless a URL says `https://`.
#[derive(Debug, Clone, Default)]
pub(super) struct TlsSettings {
    pub(super) root: Option<Pem>,
    /// The certificate chain, then its key.
    pub(super) client: Option<(Pem, Pem)>,
}

/// A setting that cannot be used, named by the `EtcdConfig` method that
/// gave it.
fn unusable(method: &str, what: &str, reason: impl std::fmt::Display) -> LockError {
    BackendError::new(
        BackendErrorKind::Tls,
        "etcd: connect",
        format!("the {what} given to `EtcdConfig::{method}` {reason}"),
    )
    .into()
}

impl Pem {
    /// The PEM text, read from its file if it has one; `method` is the
    /// setting's name without the `_file`/`_files` ending.
    fn load(&self, method: &str, what: &str) -> Result<Vec<u8>, LockError> {
        match self {
            Pem::Given(pem) => Ok(pem.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|err| {
                let method = match method {
                    "tls_client_certificate" => "tls_client_certificate_files".to_owned(),
                    other => format!("{other}_file"),
                };
                unusable(
                    &method,
                    &format!("{what} file"),
                    format_args!("cannot be read: `{}`: {err}", path.display()),
                )
            }),
        }
    }
}

/// Checks that `pem` holds at least one certificate and nothing unreadable.
fn check_certificates(pem: &[u8], method: &str, what: &str) -> Result<(), LockError> {
    match certificates_problem(pem) {
        Some(reason) => Err(unusable(method, what, reason)),
        None => Ok(()),
    }
}

impl TlsSettings {
    /// Whether anything was set: then members are reached over TLS.
    pub(super) fn is_set(&self) -> bool {
        self.root.is_some() || self.client.is_some()
    }

    /// The client's TLS options, every PEM read and checked. Without a root
    /// certificate, the system's roots are trusted.
    pub(super) fn options(&self) -> Result<TlsOptions, LockError> {
        install_crypto_provider();
        let mut options = TlsOptions::new();
        options = match &self.root {
            Some(root) => {
                let method = "tls_root_certificate";
                let pem = root.load(method, "root certificate")?;
                check_certificates(&pem, method, "root certificate")?;
                options.ca_certificate(Certificate::from_pem(pem))
            }
            None => options.with_native_roots(),
        };
        if let Some((certificate, key)) = &self.client {
            let method = "tls_client_certificate";
            let certificate = certificate.load(method, "client certificate")?;
            check_certificates(&certificate, method, "client certificate")?;
            let key = key.load(method, "client key")?;
            PrivateKeyDer::from_pem_slice(&key).map_err(|err| {
                unusable(
                    method,
                    "client key",
                    format_args!(
                        "is not a PEM private key (expected `-----BEGIN PRIVATE KEY-----`, or \
                         an RSA or EC key): {err}"
                    ),
                )
            })?;
            options = options.identity(Identity::from_pem(certificate, key));
        }
        Ok(options)
    }
}

/// The TLS failure somewhere behind `err`, and what to check: a handshake
/// that failed (rustls's own error, wrapped by the transport), or a member
/// that does not speak TLS.
pub(super) fn tls_failure(err: &etcd_client::Error) -> Option<(String, &'static str)> {
    // The transport's errors reach the caller inside a status or as they are.
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match err {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        other => Some(other),
    };
    while let Some(current) = cause {
        let inner = match current.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map_or(current, |inner| inner as _),
            None => current,
        };
        // The HTTP/2 layer keeps only the text of an alert it read.
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::InvalidData
            && let text = io.to_string()
            && text.contains("alert")
        {
            let hint = if text.contains("CertificateRequired") {
                CLIENT_CERTIFICATE_HINT
            } else if text.contains("Certificate") || text.contains("UnknownCA") {
                REFUSED_CLIENT_HINT
            } else {
                SERVER_CERTIFICATE_HINT
            };
            return Some((text, hint));
        }
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            let hint = match client_certificate(tls) {
                ClientCertificate::Required => CLIENT_CERTIFICATE_HINT,
                ClientCertificate::Refused => REFUSED_CLIENT_HINT,
                ClientCertificate::NotInQuestion => SERVER_CERTIFICATE_HINT,
            };
            return Some((tls.to_string(), hint));
        }
        cause = inner.source();
    }
    None
}

const CLIENT_CERTIFICATE_HINT: &str = "the member checks clients (`--client-cert-auth`): give a \
                                       client certificate with \
                                       `EtcdConfig::tls_client_certificate`";
const REFUSED_CLIENT_HINT: &str = "the member refused the client certificate: is it signed by a \
                                   CA in the member's `--trusted-ca-file`, and still valid? see \
                                   `EtcdConfig::tls_client_certificate`";
const SERVER_CERTIFICATE_HINT: &str = "is the member's client URL `https://`, and does its \
                                       certificate name this host and chain to a trusted root? \
                                       see `EtcdConfig::tls_root_certificate`";
