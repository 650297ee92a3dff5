//! TLS to the master (SPEC `TLS-2`): the CA that signed the master's
//! certificate, the name the certificate must carry, and for mutual TLS
//! this client's certificate and key. Handshake failures become messages
//! that say what to change.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig as RustlsConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How a client speaks TLS to the master.
///
/// ```no_run
/// use leasehold::{ClientConfig, TlsOptions};
///
/// let config = ClientConfig {
///     tls: Some(
///         TlsOptions::new("/etc/leasehold/ca.pem")
///             .client_certificate("/etc/leasehold/me.pem", "/etc/leasehold/me.key"),
///     ),
///     ..ClientConfig::default()
/// };
/// # async fn connect(config: ClientConfig) -> Result<(), leasehold::ClientError> {
/// let client = leasehold::Client::connect_with("lock.example:7171", config).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// The CA (PEM, one or more certificates) that signed the master's
    /// certificate.
    pub ca: PathBuf,
    /// This client's certificate chain and key (PEM), for a master that
    /// asks for one (mutual TLS).
    pub client_certificate: Option<(PathBuf, PathBuf)>,
    /// The name the master's certificate must carry; `None` takes the host
    /// of the address connected to (an IP address or a DNS name).
    pub server_name: Option<String>,
}

impl TlsOptions {
    /// TLS to a master whose certificate `ca` signed.
    pub fn new(ca: impl Into<PathBuf>) -> Self {
        TlsOptions {
            ca: ca.into(),
            client_certificate: None,
            server_name: None,
        }
    }

    /// Presents `cert` (PEM chain) with its `key` (PEM) to the master.
    pub fn client_certificate(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_certificate = Some((cert.into(), key.into()));
        self
    }

    /// Checks the master's certificate against `name` rather than the
    /// address's host.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }
}

/// TLS settings read and checked, ready for connections.
#[derive(Clone)]
pub(crate) struct ClientTls {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Reads the files `options` names; the message says which one is
    /// wrong and how.
    pub(crate) fn load(options: &TlsOptions) -> Result<ClientTls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in certificates(&options.ca, "CA file")? {
            roots
                .add(cert)
                .map_err(|e| format!("the CA file {}: {e}", options.ca.display()))?;
        }
        let builder = RustlsConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match &options.client_certificate {
            None => builder.with_no_client_auth(),
            Some((cert, key_path)) => {
                let chain = certificates(cert, "certificate file")?;
                let key = PrivateKeyDer::from_pem_file(key_path)
                    .map_err(|e| format!("cannot read the key file {}: {e}", key_path.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| match e {
                        rustls::Error::InconsistentKeys(_) => format!(
                            "the key file {} is not the key of the certificate file {}",
                            key_path.display(),
                            cert.display()
                        ),
                        other => format!("the client certificate and key: {other}"),
                    })?
            }
        };
        let server_name = match &options.server_name {
            None => None,
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|_| format!("{name:?} is not a DNS name or an IP address"))?,
            ),
        };
        Ok(ClientTls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }

    /// Speaks TLS on `stream`, connected to `addr`.
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
        addr: &str,
    ) -> io::Result<TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => ServerName::try_from(host(addr).to_string()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{addr}: its host is no name to check a certificate against; give one (--tls-server-name)"),
                )
            })?,
        };
        self.connector
            .connect(name.clone(), stream)
            .await
            .map_err(|e| explained(e, &name))
    }
}

/// The host of `host:port` or `[v6]:port`.
fn host(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let unreadable =
        |e: &dyn std::fmt::Display| format!("cannot read the {what} {}: {e}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(&e))?;
    if certs.is_empty() {
        return Err(format!(
            "the {what} {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// A failed handshake, in words that say what to change; `lasting` when
/// trying again cannot help (a certificate, not the network, is wrong).
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
pub(crate) struct TlsFailure {
    pub(crate) why: String,
    pub(crate) lasting: bool,
}

/// A failed handshake, said so that the reader knows what to change.
fn explained(error: io::Error, name: &ServerName<'_>) -> io::Error {
    let kind = error.kind();
    let tls = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    let (why, lasting) = match tls {
        Some(rustls::Error::InvalidMessage(_)) => (
            "the server does not speak TLS on this port (started without --tls-cert?)".to_string(),
            false,
        ),
        Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)) => (
            "the server's certificate is not signed by the CA given (--tls-ca)".to_string(),
            true,
        ),
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        )) => (
            format!(
                "the server's certificate does not name {} (--tls-server-name names another)",
                name.to_str()
            ),
            true,
        ),
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. },
        )) => ("the server's certificate has expired".to_string(), true),
        // TLS 1.2 refuses a client's certificate within the handshake.
        Some(rustls::Error::AlertReceived(alert)) => (alert_meaning(*alert), true),
        Some(other) => (format!("TLS handshake failed: {other}"), false),
        None if matches!(
            kind,
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        ) =>
        {
            (
                "the server closed the connection during the TLS handshake: it does not speak \
                 TLS on this port, or it refused this client"
                    .to_string(),
                false,
            )
        }
        None => (format!("TLS handshake failed: {error}"), false),
    };
    io::Error::new(kind, TlsFailure { why, lasting })
}

/// What a TLS alert from the server says of this client.
fn alert_meaning(alert: rustls::AlertDescription) -> String {
    match alert {
        rustls::AlertDescription::CertificateRequired => {
            "the server asks for a client certificate (--tls-cert and --tls-key)".to_string()
        }
        rustls::AlertDescription::UnknownCA
        | rustls::AlertDescription::BadCertificate
        | rustls::AlertDescription::DecryptError => "the server refused this client's \
            certificate: it is not signed by the CA the server trusts"
            .to_string(),
        rustls::AlertDescription::CertificateExpired => {
            "the server refused this client's certificate: it has expired".to_string()
        }
        rustls::AlertDescription::UnsupportedCertificate
        | rustls::AlertDescription::CertificateUnknown => "the server refused this client's \
            certificate: it is not one for a client (it needs extendedKeyUsage clientAuth)"
            .to_string(),
        other => format!("the server ended the TLS session: {other:?}"),
    }
}

/// What a failure to read from a TLS connection means, if it is one: a
/// master that asks for a client certificate refuses one it did not sign
/// (or none) after TLS 1.3's handshake is done on the client's side, so
/// the refusal arrives with the first read.
pub(crate) fn refusal(error: &io::Error) -> Option<String> {
    match error.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(alert) => Some(alert_meaning(*alert)),
        other => Some(format!("TLS: {other}")),
    }
}

/// The failure a connect error carries, if it is a TLS handshake's that
/// trying again cannot mend.
pub(crate) fn lasting_failure(error: &io::Error) -> Option<String> {
    let failure = error.get_ref()?.downcast_ref::<TlsFailure>()?;
    failure.lasting.then(|| failure.why.clone())
}

#[cfg(test)]
mod tests {
    use super::host;

    #[test]
    fn the_host_of_an_address_is_what_a_certificate_must_name() {
        assert_eq!(host("127.0.0.1:7171"), "127.0.0.1");
        assert_eq!(host("lock.example:7171"), "lock.example");
        assert_eq!(host("[::1]:7171"), "::1");
    }
}
