//! Records the simulator keeps and hands out, shared by the region, the API dispatch and the
//! simulated agents: who is calling, what took effect (counters, the operation log) and what the
//! agents did (docs/contracts.md §3).

use serde::Serialize;

/// Per-machine counters of API requests that took effect (docs/contracts.md §3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub deploy: u64,
    pub release: u64,
    pub commission: u64,
    pub erase: u64,
    pub power_on: u64,
    pub power_off: u64,
    pub abort: u64,
    pub create: u64,
    pub delete: u64,
}

/// Which counter an effective request bumps.
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    Deploy,
    Release,
    Commission,
    Erase,
    PowerOn,
    PowerOff,
    Abort,
    Create,
    Delete,
}

/// One entry of the operation log.
#[derive(Debug, Clone, Serialize)]
pub struct OpRecord {
    pub seq: u64,
    pub at: String,
    pub method: String,
    pub path: String,
    pub op: Option<String>,
    /// `<handler>.<action>` (the fault-spec name), e.g. `machine.deploy`.
    pub action: Option<String>,
    pub system_id: Option<String>,
    pub status: u16,
    /// The fault rule that fired, if any.
    pub fault: Option<String>,
}

/// One call a simulated agent made (or gave up on).
#[derive(Debug, Clone, Serialize)]
pub struct AgentRecord {
    pub system_id: String,
    pub hostname: String,
    pub attempt: u32,
    pub at: String,
    /// HTTP status, or null on a connection error.
    pub status: Option<u16>,
    pub outcome: String,
    /// After a successful enrollment: where the agent's task loop polls (issue 6).
    pub tasks_url: Option<String>,
}

/// A caller of the MAAS API.
#[derive(Debug, Clone, PartialEq)]
pub enum Caller {
    Anonymous,
    User {
        name: String,
        admin: bool,
    },
    /// A machine's own metadata token (`maas-init-node`): refused on the regular API.
    Node {
        system_id: String,
    },
}

impl Caller {
    pub fn name(&self) -> &str {
        match self {
            Caller::User { name, .. } => name,
            Caller::Anonymous => "anonymous",
            Caller::Node { .. } => "maas-init-node",
        }
    }

    pub fn is_admin(&self) -> bool {
        matches!(self, Caller::User { admin: true, .. })
    }
}

/// One task a simulated agent took (`GET /sim/v1/agents/tasks`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentTaskRecord {
    pub system_id: String,
    pub hostname: String,
    pub task_id: String,
    #[serde(rename = "type")]
    pub task_type: String,
    pub params: serde_json::Value,
    /// `succeeded`, `failed`, `hung` (never reported), `abandoned` (the host went away).
    pub outcome: String,
    /// The HTTP status of the result report, when one was sent.
    pub report_status: Option<u16>,
    pub at: String,
}
