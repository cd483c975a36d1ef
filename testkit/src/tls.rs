//! Certificates for the TLS tests, made with the `openssl` command-line tool.
//!
//! A [`TestCa`] is a throw-away certificate authority (EC P-256, valid for two
//! days), a server certificate it signed for `127.0.0.1` and `localhost`, and
//! a client certificate for servers that check clients (mutual TLS), all in a
//! temporary directory deleted on drop. Nothing is added to any
//! trust store: a client trusts the CA only when given [`TestCa::ca_pem`].

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use tempfile::TempDir;

pub struct TestCa {
    dir: TempDir,
}

impl TestCa {
    /// Generates the CA and the server certificate; panics with openssl's
    /// output when that fails.
    #[track_caller]
    pub fn generate() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-tls-")
            .tempdir()
            .expect("cannot create a temporary directory for certificates");
        let ca = TestCa { dir };
        ca.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=lockmacro test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        // clientAuth as well: cluster nodes present it to each other on a
        // TLS cluster bus, which always checks the peer.
        ca.sign(
            "server",
            "/CN=localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
             extendedKeyUsage=serverAuth,clientAuth\n",
            "2",
        );
        ca.sign(
            "client",
            "/CN=lockmacro test client",
            "extendedKeyUsage=clientAuth\n",
            "3",
        );
        ca
    }

    /// The CA certificate, PEM: what a client must trust.
    pub fn ca_pem(&self) -> Vec<u8> {
        fs::read(self.ca_cert()).expect("cannot read ca.crt")
    }

    /// The client certificate, PEM, signed by the CA for client
    /// authentication only.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        fs::read(self.path("client.crt")).expect("cannot read client.crt")
    }

    /// The client certificate's private key, PEM (PKCS#8).
    pub fn client_key_pem(&self) -> Vec<u8> {
        fs::read(self.path("client.key")).expect("cannot read client.key")
    }

    /// The client certificate's file.
    pub fn client_cert(&self) -> PathBuf {
        self.path("client.crt")
    }

    /// The client key's file.
    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.path("ca.crt")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.path("server.crt")
    }

    pub fn server_key(&self) -> PathBuf {
        self.path("server.key")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Makes `<name>.key` and `<name>.crt`: a new EC P-256 key, and a
    /// certificate for `subject` signed by the CA with `extensions` (besides
    /// those of every leaf certificate) and serial number `serial`.
    #[track_caller]
    fn sign(&self, name: &str, subject: &str, extensions: &str, serial: &str) {
        let (key, csr, ext, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}.crt"),
        );
        self.openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            subject,
        ]);
        fs::write(
            self.path(&ext),
            format!(
                "basicConstraints=critical,CA:FALSE\n\
                 keyUsage=critical,digitalSignature\n{extensions}"
            ),
        )
        .unwrap_or_else(|error| panic!("cannot write {ext}: {error}"));
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            serial,
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ]);
    }

    #[track_caller]
    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run `openssl`: {error}; the TLS tests need the openssl \
                     command-line tool (Debian package openssl, installed by \
                     scripts/install-deps)"
                )
            });
        if !output.status.success() {
            panic!(
                "openssl {} failed ({}):\n{}{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            );
        }
    }
}
