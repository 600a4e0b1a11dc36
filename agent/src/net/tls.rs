//! TLS on the Kafka listener (Kafka's `SSL` listener): rustls with a PEM
//! certificate chain and key, and optionally mutual TLS, requiring client
//! certificates signed by a given CA.
//!
//! The files are read again when they change (looked at every
//! [`RELOAD_EVERY`]): a renewed certificate is served to new connections
//! without a restart. A change that does not load (a file half written,
//! a key that does not match) keeps the previous configuration, and says so.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// How often the files are looked at for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// Longest a client may take over its TLS handshake.
pub const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

pub use crate::config::TlsFiles;

impl TlsFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }

    /// What the files hold now (a checksum each: a rewrite of the same
    /// size within one modification-time tick is still seen).
    fn stamp(&self) -> Stamp {
        self.paths()
            .map(|p| std::fs::read(p).ok().map(|bytes| crc32c::crc32c(&bytes)))
            .collect()
    }

    fn server_config(&self) -> anyhow::Result<ServerConfig> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .with_context(|| format!("reading {}", self.cert.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", self.cert.display()))?;
        anyhow::ensure!(
            !certs.is_empty(),
            "{} holds no certificate",
            self.cert.display()
        );
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .with_context(|| format!("reading a private key from {}", self.key.display()))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(ca)
                    .with_context(|| format!("reading {}", ca.display()))?
                {
                    roots
                        .add(cert.with_context(|| format!("reading {}", ca.display()))?)
                        .with_context(|| format!("a CA certificate in {}", ca.display()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .context("the certificate and the key do not go together")?;
        // Kafka clients speak the Kafka protocol straight over TLS: no ALPN.
        config.alpn_protocols.clear();
        Ok(config)
    }
}

/// Each file's checksum (`None`: unreadable).
type Stamp = Vec<Option<u32>>;

/// The listener's TLS configuration, kept up to date with its files.
pub struct Tls {
    files: TlsFiles,
    /// What new connections are accepted with, and the files it came from.
    acceptor: RwLock<(TlsAcceptor, Stamp)>,
}

impl Tls {
    /// Loads the files, or says in one line why they cannot be used.
    pub fn load(files: TlsFiles) -> anyhow::Result<Arc<Tls>> {
        let stamp = files.stamp();
        let config = files.server_config()?;
        Ok(Arc::new(Tls {
            acceptor: RwLock::new((TlsAcceptor::from(Arc::new(config)), stamp)),
            files,
        }))
    }

    /// What new connections are accepted with.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().expect("tls lock poisoned").0.clone()
    }

    /// Loads the files again if they changed since last loaded; whether
    /// the configuration was replaced.
    pub fn reload_if_changed(&self) -> bool {
        let stamp = self.files.stamp();
        if stamp == self.acceptor.read().expect("tls lock poisoned").1 {
            return false;
        }
        match self.files.server_config() {
            Ok(config) => {
                *self.acceptor.write().expect("tls lock poisoned") =
                    (TlsAcceptor::from(Arc::new(config)), stamp);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                true
            }
            Err(e) => {
                // Tried again at the next change of the files.
                self.acceptor.write().expect("tls lock poisoned").1 = stamp;
                tracing::warn!(error = %format!("{e:#}"), "TLS files changed but do not load; keeping the previous ones");
                false
            }
        }
    }

    /// Reloads on change, for ever.
    pub async fn watch(self: Arc<Self>) {
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        loop {
            tick.tick().await;
            // Reading small files; off the async workers all the same.
            let tls = self.clone();
            let _ = tokio::task::spawn_blocking(move || tls.reload_if_changed()).await;
        }
    }
}
