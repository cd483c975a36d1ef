//! What the Redis and etcd TLS settings share: the crypto provider, the
//! check that a certificate chain in PEM holds at least one certificate and
//! nothing unreadable, and what a server's alert says of the client's
//! certificate. Each backend
//! words the error with the setting it was given to.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// Makes *ring* the process's rustls crypto provider, unless one is already
/// installed. rustls picks a provider by itself only when exactly one is
/// compiled in; another crate of the program may bring `aws-lc-rs` as well,
/// and TLS connections would then fail.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why `pem` cannot be used as certificates, or `None` when it can.
pub(crate) fn certificates_problem(pem: &[u8]) -> Option<String> {
    let mut count = 0;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        if let Err(err) = certificate {
            return Some(format!("is not valid PEM: {err}"));
        }
        count += 1;
    }
    (count == 0).then(|| "holds no certificate (expected `-----BEGIN CERTIFICATE-----`)".to_owned())
}

/// What a TLS error says of the client's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientCertificate {
    /// The server checks clients, and none was given.
    Required,
    /// The server refused the one given: unknown CA, expired, revoked...
    Refused,
    /// Nothing: the error is about the server's side.
    NotInQuestion,
}

/// What `err`, a failed handshake, says of the client's certificate.
pub(crate) fn client_certificate(err: &rustls::Error) -> ClientCertificate {
    use rustls::AlertDescription as Alert;
    match err {
        rustls::Error::AlertReceived(Alert::CertificateRequired) => ClientCertificate::Required,
        rustls::Error::AlertReceived(
            Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired
            | Alert::CertificateRevoked,
        ) => ClientCertificate::Refused,
        _ => ClientCertificate::NotInQuestion,
    }
}
