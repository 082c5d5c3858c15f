//! Pure state machines (seeds 001, 002, 004; seed 000 §4.7–§4.10, §4.14): node states, job
//! states, stage catalogs, failure classes and recovery actions, MAAS status mapping, Ironic
//! provision states and verbs, retirement and protection rules, the Redfish provisioning job
//! (seed 003).
//!
//! Nothing here does I/O, reads the clock or draws randomness: the store calls these functions
//! inside its transactions to refuse writes that break the rules, and the executor, planner and
//! CLI use them to decide and explain.

#[macro_use]
mod names;
mod failure;
mod ironic;
mod job;
mod maas_status;
mod node_state;
mod provision;
mod provisioning;
mod stages;

pub use failure::{
    FailureClass, FailureHandling, PolicyTimeout, Recommendation, RecoveryAction, RecoveryError,
    RetryPolicy, TimeoutOutcome, recommend,
};
pub use ironic::{
    IronicError, IronicEvent, IronicNode, Phase, ProviderView, ProvisionState, Verb, all_events,
};
pub use job::{
    DecommissionMode, JobKind, JobState, JobStateError, check_job_node_state, job_node_states,
};
pub use maas_status::{MaasExpectation, MaasStatus, SimpleStatus};
pub use names::UnknownName;
pub use node_state::{
    NodeState, Owner, Provider, TransitionContext, TransitionError, check_initial,
    check_transition, owners,
};
pub use provision::{
    JobActivity, MaasOperation, NodeFacts, ProvisionView, VerbRefusal, ViewSource, plan_verb,
    provision_view,
};
pub use provisioning::{ProvisioningStage, ProvisioningStatus, WebhookReport, status_for};
pub use stages::{Cleanup, DecommissionStage, OnboardingStage, Reentry, StageName};
