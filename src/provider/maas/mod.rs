//! MAAS API 2.0 client (../shared/maas/API_REFERENCE.md, seed 000 §4.3, §6.3–6.4, §9.1):
//! OAuth 1.0 PLAINTEXT, typed requests and responses, typed errors, retries, request counting.
//!
//! The client agrees with real MAAS 3.x, not with metalform's simulator: paths end in `/`, the
//! `op` goes in the query string, parameters are form-encoded (repeated for lists), booleans
//! are sent as `true`/`false`, and MAAS's string errors are classified here, once, into
//! [`MaasError`]. One file per concept:
//!
//! | file | what |
//! |---|---|
//! | `auth` | API key parsing and the OAuth PLAINTEXT `Authorization` header |
//! | `client` | [`MaasClient`], its options and URL handling |
//! | `transport` | one call: request building, the retry loop, response classification |
//! | `skim` | stepping over the JSON members of an answer that nothing reads |
//! | `stream` | decoding a JSON array answer element by element while it arrives |
//! | `retry` | the retry policy (pure), injectable jitter and sleep |
//! | `error` | [`MaasError`] and its classification |
//! | `metrics` | requests counted by operation and status |
//! | `de` | serde helpers that make responses tolerant of MAAS version differences |
//! | `types` | shared value types: machine status, power state, node type, zone/pool/domain references |
//! | `vlans` | fabrics and VLANs |
//! | `subnets` | subnets (on a VLAN) |
//! | `interfaces` | interfaces and their subnet links |
//! | `storage` | block devices and the boot disk |
//! | `machines` | machines and nodes: list, read, create, update, delete, lifecycle operations, workload annotations |
//! | `layouts` | applying a storage layout and recognising the one a machine has |
//! | `power` | power on/off, power state, BMC addresses |
//! | `tags` | tags and their machines |
//! | `placement` | zones and resource pools |
//! | `events` | the events query |
//! | `hwsync` | the machine token and hardware-sync health |
//! | `version` | version and whoami |
//!
//! Files only use the ones listed above them (`client`, `transport`, `error` and `de` sit
//! below all resources).

mod auth;
mod client;
mod de;
mod error;
mod events;
mod hwsync;
mod interfaces;
mod layouts;
mod machines;
mod metrics;
mod placement;
mod polls;
mod power;
mod retry;
mod skim;
mod storage;
mod stream;
mod subnets;
mod tags;
mod transport;
mod types;
mod version;
mod vlans;

pub use auth::ApiKey;
pub use client::{MAAS_CA_FILE_ENV, MaasClient, MaasClientOptions};
pub use error::{FormErrors, MaasError, TransientCause};
pub use events::{Event, EventLevel, EventsPage, EventsQuery};
pub use hwsync::{HardwareSync, MachineToken, SyncHealth};
pub use interfaces::{Interface, InterfaceParams, Link, LinkMode, LinkRequest, LinkSubnetParams};
pub use layouts::{AppliedLayout, StorageLayout, StorageLayoutParams};
pub use machines::{
    CommissionParams, CreateMachineParams, DeployParams, EraseMode, InterfaceMac, IpmiPower,
    Machine, MachineFilter, MachinePowerParameters, MachineStanding, MachineSummary, Node,
    PowerParameters, ReleaseParams, UpdateMachineParams,
};
pub use metrics::{MaasMetrics, RequestStatus};
pub use placement::Placement;
pub use polls::{CACHED_IN_A_ROW, MachinePolls};
pub use power::StopMode;
pub use retry::{Jitter, RetryPolicy, SeededJitter, Sleeper, TokioSleeper};
pub use storage::{BlockDevice, Filesystem, Partition};
pub use subnets::{CreateSubnetParams, Subnet, SubnetRef};
pub use tags::{Tag, TagNodesChanged, TagParams};
pub use types::{DomainRef, MachineStatus, NamedRef, NodeType, PowerState};
pub use version::{Version, Whoami};
pub use vlans::{Fabric, UpdateFabricParams, UpdateVlanParams, Vlan};
