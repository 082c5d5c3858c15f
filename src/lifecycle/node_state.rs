//! Coarse node lifecycle (seed 001 §3): the nine states of §3.1, exactly the transitions of
//! §3.2, the owners of §3.3 and its guardrails.
//!
//! The coarse state is operator-facing and stable; workflow progress lives in job state
//! (`job.rs`) and what MAAS reports lives in the observed state (`maas_status.rs`).

named_enum! {
    "node state",
    /// `nodes.status` (001 §3.1).
    pub enum NodeState {
        /// Manual bootstrap bundle/token issued; node not yet enrolled.
        BootstrapIssued = "bootstrap_issued",
        /// Onboarding in progress; not schedulable.
        Enrolling = "enrolling",
        /// Healthy and schedulable.
        Active = "active",
        /// Expected to exist but not polling/responding.
        Offline = "offline",
        /// Blocked from scheduling (drift, cleanup failure, investigation).
        Quarantined = "quarantined",
        /// Retire/decommission drain in progress (owned by a lifecycle operation).
        Draining = "draining",
        /// Removed from scheduling, not being deleted.
        Retired = "retired",
        /// Remove/uninstall in progress (owned by a lifecycle operation).
        Removing = "removing",
        /// Terminal: outside active inventory.
        Deleted = "deleted",
    }
}

named_enum! {
    "transition owner",
    /// Who may move a node between coarse states (001 §3.3), collapsed to the actors metalform
    /// has: the onboarding and decommission executors, the reconciler (heartbeat, drift,
    /// cleanup validation) and an operator (CLI/API/manifest change).
    pub enum Owner {
        OnboardingWorkflow = "onboarding_workflow",
        DecommissionWorkflow = "decommission_workflow",
        Reconciler = "reconciler",
        Operator = "operator",
    }
}

impl NodeState {
    /// States a node record may be created in: manual bootstrap, or MAAS onboarding (000 §4.3
    /// creates the record in `enrolling`).
    pub const INITIAL: &'static [NodeState] = &[NodeState::BootstrapIssued, NodeState::Enrolling];

    /// `deleted` is the only terminal state: nothing leaves it (001 §3.3 guardrails).
    pub fn is_terminal(self) -> bool {
        self == NodeState::Deleted
    }

    /// `draining` and `removing` are not self-sufficient: a lifecycle operation must own them.
    pub fn needs_owning_operation(self) -> bool {
        matches!(self, NodeState::Draining | NodeState::Removing)
    }

    /// The inventory view (001 §9.1) shows coarse states only; this is whether the node is in
    /// active inventory at all.
    pub fn in_inventory(self) -> bool {
        self != NodeState::Deleted
    }

    /// The states reachable in one legal step.
    pub fn successors(self) -> impl Iterator<Item = NodeState> {
        TRANSITIONS
            .iter()
            .filter(move |(from, _, _)| *from == self)
            .map(|(_, to, _)| *to)
    }
}

use NodeState as S;
use Owner as O;

/// 001 §3.2, one row per legal transition, with the owners of §3.3.
const TRANSITIONS: &[(NodeState, NodeState, &[Owner])] = &[
    (
        S::BootstrapIssued,
        S::Enrolling,
        &[O::Operator, O::OnboardingWorkflow],
    ),
    (S::Enrolling, S::Active, &[O::OnboardingWorkflow]),
    (
        S::Enrolling,
        S::Quarantined,
        &[O::OnboardingWorkflow, O::Operator],
    ),
    (S::Active, S::Offline, &[O::Reconciler]),
    (S::Offline, S::Active, &[O::Reconciler]),
    // "reconciler or cleanup validation": the decommission workflow's ValidateCleanNode.
    (
        S::Active,
        S::Quarantined,
        &[O::Reconciler, O::DecommissionWorkflow],
    ),
    (
        S::Offline,
        S::Quarantined,
        &[O::Reconciler, O::DecommissionWorkflow],
    ),
    (S::Quarantined, S::Active, &[O::Operator, O::Reconciler]),
    // "admin lifecycle action that starts a resumable drain operation": the operator asks, the
    // decommission workflow it starts performs the write.
    (
        S::Quarantined,
        S::Draining,
        &[O::Operator, O::DecommissionWorkflow],
    ),
    (
        S::Active,
        S::Draining,
        &[O::Operator, O::DecommissionWorkflow],
    ),
    (
        S::Offline,
        S::Draining,
        &[O::Operator, O::DecommissionWorkflow],
    ),
    (S::Draining, S::Retired, &[O::DecommissionWorkflow]),
    (
        S::Draining,
        S::Offline,
        &[O::DecommissionWorkflow, O::Operator],
    ),
    (S::Retired, S::Active, &[O::Operator]),
    (S::Retired, S::Removing, &[O::DecommissionWorkflow]),
    (S::Removing, S::Retired, &[O::DecommissionWorkflow]),
    (S::Removing, S::Deleted, &[O::DecommissionWorkflow]),
];

/// Facts about the node that the guardrails of 001 §3.3 need; the store fills them in inside
/// the transaction that performs the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionContext {
    /// A non-terminal lifecycle operation (decommission job) owns the node after the write.
    pub owning_operation: bool,
    /// The node's identity is retained for reuse: no full decommission is under way for it.
    pub identity_retained: bool,
    /// The node is protected (seed 004 / Ironic `protected`): no drain or removal.
    pub protected: bool,
}

impl Default for TransitionContext {
    fn default() -> Self {
        Self {
            owning_operation: false,
            identity_retained: true,
            protected: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error(
        "node is {from} and nothing leaves {from}: the identity is gone; re-onboarding creates a new node"
    )]
    Terminal { from: NodeState },
    #[error("illegal node transition {from} -> {to} (legal from {from}: {legal})")]
    Illegal {
        from: NodeState,
        to: NodeState,
        legal: String,
    },
    #[error("{by} may not move a node {from} -> {to} (owner: {owners})")]
    NotOwner {
        from: NodeState,
        to: NodeState,
        by: Owner,
        owners: String,
    },
    #[error("{to} needs an owning lifecycle operation (a decommission job) for the node")]
    NoOwningOperation { to: NodeState },
    #[error(
        "retired -> active is only for retained identity, but a full decommission is under way"
    )]
    IdentityNotRetained,
    #[error("node is protected: unset `protected` before moving it to {to}")]
    Protected { to: NodeState },
    #[error(
        "a node cannot be created in state {state} (new nodes start as bootstrap_issued or enrolling)"
    )]
    NotInitial { state: NodeState },
}

/// Check one coarse transition requested by `by`. Self-transitions are not transitions and are
/// refused here; the store treats "already in the target state" as an idempotent no-op before
/// asking (001 §8, 000 §4.8: adopt an already advanced coarse state).
pub fn check_transition(
    from: NodeState,
    to: NodeState,
    by: Owner,
    ctx: &TransitionContext,
) -> Result<(), TransitionError> {
    if from.is_terminal() {
        return Err(TransitionError::Terminal { from });
    }
    let Some((_, _, owners)) = TRANSITIONS.iter().find(|(f, t, _)| *f == from && *t == to) else {
        let legal: Vec<&str> = from.successors().map(NodeState::as_str).collect();
        return Err(TransitionError::Illegal {
            from,
            to,
            legal: legal.join(", "),
        });
    };
    if !owners.contains(&by) {
        let owners: Vec<&str> = owners.iter().map(|o| o.as_str()).collect();
        return Err(TransitionError::NotOwner {
            from,
            to,
            by,
            owners: owners.join(" or "),
        });
    }
    if to.needs_owning_operation() {
        if ctx.protected {
            return Err(TransitionError::Protected { to });
        }
        if !ctx.owning_operation {
            return Err(TransitionError::NoOwningOperation { to });
        }
    }
    if from == NodeState::Retired && to == NodeState::Active && !ctx.identity_retained {
        return Err(TransitionError::IdentityNotRetained);
    }
    Ok(())
}

/// A node record may only start in one of [`NodeState::INITIAL`].
pub fn check_initial(state: NodeState) -> Result<(), TransitionError> {
    if NodeState::INITIAL.contains(&state) {
        Ok(())
    } else {
        Err(TransitionError::NotInitial { state })
    }
}

/// The owners of a legal transition (for audit and documentation), `None` if illegal.
pub fn owners(from: NodeState, to: NodeState) -> Option<&'static [Owner]> {
    TRANSITIONS
        .iter()
        .find(|(f, t, _)| *f == from && *t == to)
        .map(|(_, _, o)| *o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned() -> TransitionContext {
        TransitionContext {
            owning_operation: true,
            ..TransitionContext::default()
        }
    }

    #[test]
    fn seventeen_transitions_as_in_the_seed() {
        assert_eq!(TRANSITIONS.len(), 17);
        assert!(NodeState::Deleted.successors().next().is_none());
    }

    #[test]
    fn guardrails() {
        let ctx = TransitionContext::default();
        assert_eq!(
            check_transition(S::Active, S::Draining, O::Operator, &ctx),
            Err(TransitionError::NoOwningOperation { to: S::Draining })
        );
        assert!(check_transition(S::Active, S::Draining, O::Operator, &owned()).is_ok());
        let protected = TransitionContext {
            protected: true,
            ..owned()
        };
        assert_eq!(
            check_transition(S::Active, S::Draining, O::Operator, &protected),
            Err(TransitionError::Protected { to: S::Draining })
        );
        let removal = TransitionContext {
            identity_retained: false,
            ..ctx
        };
        assert_eq!(
            check_transition(S::Retired, S::Active, O::Operator, &removal),
            Err(TransitionError::IdentityNotRetained)
        );
        assert!(matches!(
            check_transition(S::Active, S::Offline, O::Operator, &ctx),
            Err(TransitionError::NotOwner { .. })
        ));
        assert_eq!(
            check_transition(S::Deleted, S::Active, O::Operator, &ctx)
                .unwrap_err()
                .to_string(),
            "node is deleted and nothing leaves deleted: the identity is gone; re-onboarding creates a new node"
        );
        assert_eq!(
            check_transition(S::Enrolling, S::Retired, O::Operator, &ctx)
                .unwrap_err()
                .to_string(),
            "illegal node transition enrolling -> retired (legal from enrolling: active, quarantined)"
        );
        assert_eq!(
            owners(S::Removing, S::Deleted),
            Some(&[O::DecommissionWorkflow][..])
        );
        assert!(check_initial(S::Active).is_err());
        assert!(check_initial(S::Enrolling).is_ok());
    }
}

named_enum! {
    "provider",
    /// Which provisioner drives a node: MAAS (seed 000) or Redfish virtual media (seed 003).
    pub enum Provider {
        Maas = "maas",
        Redfish = "redfish",
    }
}
