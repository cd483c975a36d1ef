//! The check every TLS setting shares: a certificate chain in PEM holds at
//! least one certificate and nothing unreadable. Each backend words the
//! error with the setting it was given to.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

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
