//! The cases, one module per SPEC.md section that has observable rules,
//! each listing its own; [`all`] puts them in SPEC order. A case lives in
//! the section of the first rule it names; the Leases and Errors sections
//! have none of their own, as every case naming their rules names another
//! section's first. Timing cases use short leases the harness asks for
//! itself, with tolerances stated where they are used.

use super::Case;

mod access;
mod cache;
mod checks;
mod connections;
mod events;
mod failover;
mod handshake;
mod keepalive;
mod locks;
mod namespace;
mod operating;
mod ownership;
mod sessions;
mod storage;
mod wire;

/// Every case, section by section in SPEC order: wire format, handshake,
/// connections, sessions, ownership, access control, operating, KeepAlive, namespace, locks, health
/// checks, storage, epochs and failover, events, cache.
pub(super) fn all() -> Vec<Case> {
    [
        wire::cases(),
        handshake::cases(),
        connections::cases(),
        sessions::cases(),
        ownership::cases(),
        access::cases(),
        operating::cases(),
        keepalive::cases(),
        namespace::cases(),
        locks::cases(),
        checks::cases(),
        storage::cases(),
        failover::cases(),
        events::cases(),
        cache::cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}
