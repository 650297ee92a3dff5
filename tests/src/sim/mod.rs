//! Deterministic network-partition simulations of Leasehold.
//!
//! A run puts the real master and client library on turmoil's simulated
//! network, in virtual time: a master host (durable state on a simulated
//! [disk](disk) that keeps only what was synced when the host crashes), a
//! storage host that fences writes by sequencer, contending clients, two
//! key/value writers and a watcher. A [scenario](scenario) schedules faults
//! from the run's seed; everything that happens goes to a
//! [trace](trace), and the [checks](check) judge the trace. One seed fixes
//! the whole run: the same seed gives the same trace, byte for byte.
//!
//! `leasehold-sim` runs scenarios, sweeps seeds and draws
//! [timelines](timeline).

pub mod admin;
pub mod app;
pub mod cell;
pub mod check;
pub mod disk;
mod net;
pub mod record;
pub mod rng;
pub mod scenario;
mod servers;
pub mod short_leases;
mod steps;
pub mod storage;
pub mod timeline;
pub mod trace;
pub mod world;

pub use net::{SimCellConnector, SimConnector, SimDialer, SimListener, PORT};
pub use record::{Run, Settings};
pub use scenario::{find, Scenario, SCENARIOS};
pub use world::run;
