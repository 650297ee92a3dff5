//! Peer links with mutual TLS (`CELL-11`). When a cell's members speak
//! TLS, each dials its peers with its own certificate, trusting the cell's
//! CA (the client CA) alone, and goes on only if the member that answers
//! presents the certificate of the member it dialed; a member serves a
//! peer only if the peer's certificate names the member it says it is.
//! A member's certificate names it by its subject's common name,
//! `leasehold-member-<id>`. The cell's secret is then not needed, though
//! still checked when given.

use std::sync::Arc;

use rustls_pki_types::ServerName;

use super::network::{DialFuture, Dialer, PeerStream};
use super::NodeId;
use crate::cert_name;
use crate::tls::ServerTls;

/// The common name that says a certificate is member `id`'s.
pub fn member_name(id: NodeId) -> String {
    format!("{MEMBER_PREFIX}{id}")
}

/// What every member's common name starts with.
pub const MEMBER_PREFIX: &str = "leasehold-member-";

/// Dials peers through `inner`, then speaks TLS over what it dialed.
pub struct TlsDialer {
    inner: Arc<dyn Dialer>,
    tls: ServerTls,
}

impl TlsDialer {
    pub fn new(inner: Arc<dyn Dialer>, tls: ServerTls) -> TlsDialer {
        TlsDialer { inner, tls }
    }
}

/// The dialer a member of `config` uses for its peers: `inner` itself
/// without TLS, TLS over it with (`CELL-11`).
pub fn peer_dialer(config: &crate::Config, inner: Arc<dyn Dialer>) -> Arc<dyn Dialer> {
    match &config.tls {
        Some(tls) => Arc::new(TlsDialer::new(inner, tls.clone())),
        None => inner,
    }
}

fn refused(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)
}

impl Dialer for TlsDialer {
    fn dial(&self, addr: &str, to: NodeId) -> DialFuture {
        let addr = addr.to_string();
        let dialing = self.inner.dial(&addr, to);
        let connector = self.tls.peer_connector();
        Box::pin(async move {
            let Some(connector) = connector else {
                return Err(refused(
                    "a member speaking TLS needs the cell's CA (the client CA) to verify its peers"
                        .into(),
                ));
            };
            let host = addr
                .rsplit_once(':')
                .map_or(addr.as_str(), |(host, _)| host)
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = ServerName::try_from(host.to_string()).map_err(|e| {
                refused(format!("{host} is not a name a certificate can carry: {e}"))
            })?;
            let stream = dialing.await?;
            let tls = connector.connect(name, stream).await?;
            // Only member `to`'s certificate makes the answerer `to`: a
            // client's, or another member's at `to`'s address, would be
            // sent the log.
            let named = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| cert_name::common_name(cert.as_ref()));
            let wanted = member_name(to);
            match named {
                Some(name) if name == wanted => Ok(Box::new(tls) as Box<dyn PeerStream>),
                other => Err(refused(format!(
                    "the member at {addr} presented a certificate named {}, not {wanted}",
                    other.map_or_else(
                        || "nothing".into(),
                        |n| leasehold_protocol::excerpt(&n, crate::config::SHOWN_CHARS)
                    )
                ))),
            }
        })
    }
}
