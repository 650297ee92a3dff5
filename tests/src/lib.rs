//! Support for Leasehold's integration tests and network simulations.
//!
//! - [`server`]: a real master on a loopback port; [`fixture`]: a master, a
//!   client, a session with its states recorded, a temporary directory.
//! - [`raw`]: a connection that speaks frames built by hand, so a test of the
//!   server cannot be hidden by the client library's logic.
//! - [`proxy`]: a loopback relay between client and master whose link can be
//!   held (traffic delayed, then delivered) or cut (traffic dropped).
//! - [`relay`]: a loopback relay that reads frames, so a test can hold back
//!   the replies it picks and deliver them after later ones.
//! - [`sim`]: the listener and connector that run the real server and client
//!   over turmoil's simulated network.
//! - [`states`]: a session's state transitions, recorded.
//! - [`certs`]: a CA and certificates it signed, made at run time for TLS
//!   tests.
//! - [`scripted`]: a master whose answers the test writes by hand.
//! - [`http`]: plain HTTP requests to the operator's port, and figures read
//!   from its metrics.
//! - [`conformance`]: the protocol conformance harness (the
//!   `leasehold-conformance` binary runs it against any server).

pub mod certs;
pub mod conformance;
pub mod fixture;
pub mod http;
pub mod proxy;
pub mod raw;
pub mod relay;
pub mod scripted;
pub mod server;
pub mod sim;
pub mod states;
