//! Embedded MAAS simulator (DESIGN.md §5): a real HTTP server speaking MAAS API 2.0 as
//! ../shared/maas/API_REFERENCE.md describes MAAS 3.6, plus simulated node agents and the
//! control API of docs/contracts.md §3.
//!
//! Embed it with [`start`] (or [`start_with_clock`]): it returns a [`SimHandle`] with the MAAS
//! URL, the API key and in-process access to the simulated region ([`SimHandle::with_world`]:
//! counters, op log, out-of-band changes, faults, BMC power). docs/simulator.md is the user
//! guide.

mod agent;
mod api;
pub mod auth;
mod catalog;
pub mod config;
mod control;
pub mod describe;
pub mod events;
pub mod export;
pub mod faults;
pub mod host;
mod injected;
mod layouts;
mod lifecycle;
pub mod listing;
pub mod machine;
mod model;
pub mod network;
mod ops;
mod ops_catalog;
mod ops_network;
mod ops_storage;
pub mod redfish;
pub mod reply;
mod server;
mod shared;
pub mod status;
pub mod storage;
pub mod transport;
pub mod world;

use std::net::SocketAddr;
use std::sync::Arc;

pub use config::{
    AgentBehaviour, DiskSpec, FleetOptions, InitialState, MachineSpec, NicSpec, SimConfig,
    TaskFault, TaskFaultMode, Timings,
};
pub use model::{AgentRecord, AgentTaskRecord, Caller, Counters, OpRecord};
pub use server::{SimError, SimHandle};
pub use world::World;

use crate::clock::{Clock, SystemClock};

/// Starts a simulator on 127.0.0.1 with a free port and the system clock.
pub async fn start(config: SimConfig) -> Result<SimHandle, SimError> {
    start_with_clock(
        config,
        Arc::new(SystemClock),
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
}

/// Starts a simulator on `listen` with an injected clock (e.g. `TokioClock` under paused time).
pub async fn start_with_clock(
    config: SimConfig,
    clock: Arc<dyn Clock>,
    listen: SocketAddr,
) -> Result<SimHandle, SimError> {
    server::start(config, clock, listen).await
}
