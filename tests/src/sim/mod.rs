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
//!
//! # Layout
//! - `world.rs`: one run: its hosts, and the driver that applies the
//!   scenario's faults of clients and links as the run goes; `servers.rs`:
//!   the faults only the servers have, behind one trait, for a single
//!   master and for a cell; `steps.rs`: each fault as it is applied and
//!   repaired, and the queue of them.
//! - `scenario.rs`: the catalogue, each scenario's plan and the checks it
//!   expects to see something; `record.rs`: a run's settings, clocks and
//!   result; `rng.rs`: the seed's generators.
//! - `app.rs`: the contenders, writers and watcher, on the real client
//!   library; `admin.rs`: the operator, changing a cell's members as the
//!   CLI does; `storage.rs`: the storage host that fences writes by sequencer.
//! - `disk.rs`: the single master's simulated disk; `short_leases.rs`: a
//!   master broken on purpose (recovered leases cut short); `cell.rs`: a cell's members
//!   on simulated volumes, and the sampler of their replicas; `net.rs`:
//!   turmoil's network for the server and the client.
//! - `trace.rs`: what happened, in virtual time; `check/`: the invariants,
//!   judged from the trace alone; `timeline.rs`: the trace drawn.

pub mod admin;
pub mod app;
pub mod cell;
pub mod check;
pub mod disk;
mod net;
pub mod record;
pub mod rng;
pub mod rules;
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
