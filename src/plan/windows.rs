//! Maintenance windows in the plan (issue 18): a disruptive item — a reimage, decommission,
//! retirement or prune, onboarding (or reactivating) a machine that runs a workload — waits
//! until one of its node's windows is open; onboarding new machines waits only for windows that
//! say `onboarding: inWindow`. Continuing work already started (resume, rerun, adopt, an open
//! decommission) never waits: stopping half way would leave the node worse off.
//!
//! Pure: the clock is the planner's value (`PlanOptions::now`, else the snapshot's time).

use crate::model::{MaintenanceWindow, WindowOnboarding, WindowState, until, window_state};

use super::planner::{Clock, Decision};
use super::types::{Action, BlockCause};

/// Which windows an action waits for.
enum Waits {
    /// Every window: the action disrupts the node.
    Any,
    /// Only windows that hold onboarding too.
    Onboarding,
    Never,
}

fn waits(decision: &Decision) -> Waits {
    match &decision.action {
        Action::Reimage { .. } | Action::Decommission | Action::Retire | Action::Prune => {
            Waits::Any
        }
        Action::Onboard | Action::Reactivate | Action::Provision { .. } if decision.destructive => {
            Waits::Any
        }
        Action::Onboard | Action::Reactivate | Action::Provision { .. } => Waits::Onboarding,
        Action::Resume { .. }
        | Action::Rerun { .. }
        | Action::Adopt { .. }
        | Action::ResumeDecommission { .. }
        | Action::Noop
        | Action::Blocked { .. } => Waits::Never,
    }
}

/// Hold `decision` for `windows` at `clock`, or let it through (noting an override).
pub(super) fn gate(windows: &[MaintenanceWindow], decision: Decision, clock: &Clock) -> Decision {
    let relevant: Vec<&MaintenanceWindow> = match waits(&decision) {
        Waits::Never => return decision,
        Waits::Any => windows.iter().collect(),
        Waits::Onboarding => windows
            .iter()
            .filter(|w| w.onboarding == WindowOnboarding::InWindow)
            .collect(),
    };
    let WindowState::Closed { window, opens } = window_state(relevant, clock.now) else {
        return decision;
    };
    let when = match opens {
        Some(at) => format!("opens in {}", until(clock.now, at)),
        None => "does not open again".to_owned(),
    };
    let would = decision.action.name().to_owned();
    if clock.ignore_windows {
        return Decision {
            reason: format!(
                "{} (maintenance window {window} is closed, {when}: overridden with --ignore-windows)",
                decision.reason
            ),
            window_ignored: Some(window),
            ..decision
        };
    }
    Decision {
        node_id: decision.node_id,
        ..Decision::blocked(
            BlockCause::MaintenanceWindow {
                window: window.clone(),
                opens_at: opens,
                would: would.clone(),
            },
            format!(
                "waits for window {window} ({when}); would {would}: {}",
                decision.reason
            ),
        )
    }
}
