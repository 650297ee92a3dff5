//! TLS on the client port (SPEC `TLS-1`..): the master's certificate and
//! key, and with a client CA, mutual TLS. The files are read again on
//! [`ServerTls::reload`] (the `serve` binary calls it on SIGHUP); a
//! connection takes the configuration in force when it arrives, so a
//! reload drops nobody, and a bad new file leaves the old configuration
//! in force.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Where the master's TLS files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM, the master's own certificate first.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With it, clients must present a certificate this CA (PEM, one or
    /// more certificates) signed: mutual TLS.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS files could not be used. The message names the file and what
/// is wrong with it, never its contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the {what} {path}: {reason}")]
    Unreadable {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("the {what} {path} holds no PEM {expected}")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("the TLS files do not make a configuration: {0}")]
    Rejected(String),
}

/// The master's TLS configuration, reloadable; cloning shares it.
///
/// ```no_run
/// use leasehold_server::{ServerTls, TlsFiles};
///
/// let tls = ServerTls::load(TlsFiles {
///     cert: "/etc/leasehold/master.pem".into(),
///     key: "/etc/leasehold/master.key".into(),
///     client_ca: None,
/// })?;
/// // After the files were replaced:
/// tls.reload()?;
/// # Ok::<(), leasehold_server::TlsError>(())
/// ```
#[derive(Clone)]
pub struct ServerTls {
    files: Arc<TlsFiles>,
    current: Arc<RwLock<Configured>>,
}

/// What the files make: the server's side, and with a client CA the side
/// a cell's member dials its peers with (`CELL-11`).
struct Configured {
    server: Arc<ServerConfig>,
    /// The HTTP port's (`OPS-2`): the same certificate, HTTP/1.1 by ALPN,
    /// and a client certificate asked for but not required, since probes
    /// and tokens need none.
    http: Arc<ServerConfig>,
    peer: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads `files` into a configuration.
    pub fn load(files: TlsFiles) -> Result<ServerTls, TlsError> {
        let config = configure(&files)?;
        Ok(ServerTls {
            files: Arc::new(files),
            current: Arc::new(RwLock::new(config)),
        })
    }

    /// Reads the files again; connections from now on use what they say.
    /// On an error the configuration in force stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = configure(&self.files)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The files this configuration is read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// An acceptor with the configuration in force now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        let config = self.current.read().unwrap_or_else(|e| e.into_inner());
        TlsAcceptor::from(config.server.clone())
    }

    /// An acceptor for the HTTP port with the configuration in force now
    /// (`OPS-2`).
    pub(crate) fn http_acceptor(&self) -> TlsAcceptor {
        let config = self.current.read().unwrap_or_else(|e| e.into_inner());
        TlsAcceptor::from(config.http.clone())
    }

    /// A connector for dialing a cell's peers with the configuration in
    /// force now: this member's certificate as its client certificate, the
    /// client CA as the only roots. `None` without a client CA.
    pub(crate) fn peer_connector(&self) -> Option<TlsConnector> {
        let config = self.current.read().unwrap_or_else(|e| e.into_inner());
        config.peer.clone().map(TlsConnector::from)
    }
}

fn configure(files: &TlsFiles) -> Result<Configured, TlsError> {
    let server = configure_server(files, ClientCertificate::Required)?;
    let http = configure_server(files, ClientCertificate::Optional)?;
    let peer = match &files.client_ca {
        None => None,
        Some(ca) => Some(configure_peer(files, ca)?),
    };
    Ok(Configured { server, http, peer })
}

/// Whether a client of a port with a client CA must present a certificate
/// it signed, or may present none (a certificate it presents is verified
/// all the same).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientCertificate {
    Required,
    /// And the port speaks HTTP/1.1 (ALPN `http/1.1`).
    Optional,
}

/// The client side of a member's peer links: it trusts the cell's CA
/// alone and presents the member's own certificate.
fn configure_peer(files: &TlsFiles, ca: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = roots(ca)?;
    let certs = certificates(&files.cert, "certificate file")?;
    let key = private_key(&files.key)?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rejected(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| TlsError::Rejected(e.to_string()))?;
    Ok(Arc::new(config))
}

fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(ca, "client CA file")? {
        roots
            .add(cert)
            .map_err(|e| TlsError::Rejected(format!("{}: {e}", ca.display())))?;
    }
    Ok(roots)
}

fn configure_server(
    files: &TlsFiles,
    client: ClientCertificate,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certificates(&files.cert, "certificate file")?;
    let key = private_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rejected(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = roots(ca)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match client {
                ClientCertificate::Required => verifier,
                ClientCertificate::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Rejected(format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::Rejected(format!(
            "the key file {} is not the key of the certificate file {}",
            files.key.display(),
            files.cert.display()
        )),
        other => TlsError::Rejected(other.to_string()),
    })?;
    if client == ClientCertificate::Optional {
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
    }
    Ok(Arc::new(config))
}

/// The PEM certificates in `path`; `what` names the file in errors.
pub(crate) fn certificates(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unreadable = |reason: String| TlsError::Unreadable {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_path_buf(),
            expected: "certificate",
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            what: "key file",
            path: path.to_path_buf(),
            expected: "private key",
        },
        other => TlsError::Unreadable {
            what: "key file",
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}
