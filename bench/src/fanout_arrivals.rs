//! What the `fanout` scenario hands each system's subscribers and what it
//! takes back: the shape, and when each subscriber saw the write. Kept
//! apart from the scenario, which calls the peers' adapters, so that the
//! adapters need nothing of it in return.

use std::time::Duration;

use crate::procstat::{Meter, Span};

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub subscribers: usize,
    pub connections: usize,
}

/// When each subscriber saw the write, measured from just before it was
/// sent, and the CPU the server and this process spent until the last did.
pub struct Arrivals {
    pub times: Vec<Duration>,
    pub server: Option<Span>,
    pub client: Option<Span>,
}

/// Meters the server and this process from just before the write.
pub struct Meters(Meter, Meter);

impl Meters {
    pub fn start(server: &[u32]) -> Meters {
        Meters(Meter::start(server), Meter::start(&[std::process::id()]))
    }

    pub fn finish(self, times: Vec<Duration>) -> Arrivals {
        Arrivals {
            times,
            server: self.0.span(),
            client: self.1.span(),
        }
    }
}
