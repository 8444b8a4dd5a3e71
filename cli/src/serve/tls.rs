//! TLS on both ports (`--tls-cert`, `--tls-key`, `--tls-client-ca`): rustls on ring, one
//! acceptor a port (ALPN `h2` on gRPC's, `http/1.1` on HTTP's). The handshake runs in the
//! connection's own task within the idle time, so one that never completes holds its slot no
//! longer than a half-sent request head does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pjrt_actors::Result;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::common::usage;

/// The PEM files TLS is served with.
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Client certificates signed by these authorities are required (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// The files the flags name: a certificate and key together or neither; a client CA only
    /// with them.
    pub fn from_flags(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<TlsFiles>> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                cert: cert.into(),
                key: key.into(),
                client_ca: client_ca.map(Into::into),
            })),
            (None, None) if client_ca.is_none() => Ok(None),
            (None, None) => Err(usage(
                "--tls-client-ca needs --tls-cert and --tls-key".into(),
            )),
            _ => Err(usage("--tls-cert and --tls-key go together".into())),
        }
    }

    /// The HTTP port's acceptor and the gRPC port's.
    pub fn acceptors(&self) -> Result<(TlsAcceptor, TlsAcceptor)> {
        let bad = |flag: &str, path: &Path, why: String| {
            usage(format!("{flag} {}: {why}", path.display()))
        };
        let certs = (CertificateDer::pem_file_iter(&self.cert))
            .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| bad("--tls-cert", &self.cert, e.to_string()))?;
        if certs.is_empty() {
            return Err(bad(
                "--tls-cert",
                &self.cert,
                "it holds no certificate".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| bad("--tls-key", &self.key, e.to_string()))?;
        // ring's provider: rustls marks it deprecated because ring has no post-quantum key
        // exchange (aws-lc-rs does, at the cost of a C and cmake build on every machine). Its
        // classical suites are rustls' safe defaults; the trade is said in docs/security.md.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| usage(format!("TLS: {e}")))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = RootCertStore::empty();
                let cas = (CertificateDer::pem_file_iter(path))
                    .and_then(|c| c.collect::<std::result::Result<Vec<_>, _>>())
                    .map_err(|e| bad("--tls-client-ca", path, e.to_string()))?;
                for ca in cas {
                    (roots.add(ca)).map_err(|e| bad("--tls-client-ca", path, e.to_string()))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| bad("--tls-client-ca", path, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(certs, key)
            .map_err(|e| bad("--tls-key", &self.key, e.to_string()))?;
        let with_alpn = |protocol: &[u8]| {
            let mut c = config.clone();
            c.alpn_protocols = vec![protocol.to_vec()];
            TlsAcceptor::from(Arc::new(c))
        };
        Ok((with_alpn(b"http/1.1"), with_alpn(b"h2")))
    }
}
