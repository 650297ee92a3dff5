//! Who is at the other end of a connection: its address, the name in the
//! client certificate TLS verified, and the credential it authenticated
//! with since (`ID-1`). The connection makes one when it opens; every
//! [`Call`](crate::call::Call) it sends carries it, and the master
//! resolves the principal from it afresh for each request, so a revoked
//! token stops counting at once (`TOK-3`).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

/// A credential a connection proved with `Authenticate` (`ID-2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    /// The bearer token of this id, as long as it is not revoked.
    Token(u64),
    /// The master's operator token.
    Operator,
}

/// One connection's identity.
#[derive(Debug)]
pub(crate) struct Caller {
    pub(crate) peer: IpAddr,
    /// The name in the client certificate TLS verified (`ID-1`).
    pub(crate) certified: Option<Box<str>>,
    /// Set by the master alone, as it answers `Authenticate`; the
    /// connection only carries it. Read for every request, so one atomic
    /// word: [`NO_CREDENTIAL`], [`OPERATOR`] or a token's id.
    credential: AtomicU64,
}

const NO_CREDENTIAL: u64 = 0;
const OPERATOR: u64 = u64::MAX;

impl Caller {
    pub(crate) fn new(peer: IpAddr, certified: Option<String>) -> Caller {
        Caller {
            peer,
            certified: certified.map(String::into_boxed_str),
            credential: AtomicU64::new(NO_CREDENTIAL),
        }
    }

    pub(crate) fn credential(&self) -> Option<Credential> {
        match self.credential.load(Ordering::Acquire) {
            NO_CREDENTIAL => None,
            OPERATOR => Some(Credential::Operator),
            id => Some(Credential::Token(id)),
        }
    }

    /// Token ids start at 1 and never reach `u64::MAX` (`TOK-1`).
    pub(crate) fn set_credential(&self, credential: Option<Credential>) {
        let word = match credential {
            None => NO_CREDENTIAL,
            Some(Credential::Operator) => OPERATOR,
            Some(Credential::Token(id)) => id,
        };
        self.credential.store(word, Ordering::Release);
    }
}
