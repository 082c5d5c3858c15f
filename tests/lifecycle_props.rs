//! Property tests of the pure lifecycle machines (issue 4): random operation sequences never get
//! an illegal transition accepted, every state is reachable from the initial one, a retired
//! node never reaches AVAILABLE, and terminal states stay terminal. The oracles below are
//! written from the seeds' own tables, independently of the implementation's tables.

use std::collections::{BTreeSet, VecDeque};

use metalform::lifecycle::{
    IronicEvent, IronicNode, JobState, NodeState, Owner, ProvisionState, RecoveryAction,
    TransitionContext, Verb, all_events, check_transition,
};
use proptest::prelude::*;

/// Seed 001 §3.2, verbatim.
const SEED_001_TRANSITIONS: &str = "
bootstrap_issued -> enrolling
enrolling -> active
enrolling -> quarantined
active -> offline
offline -> active
active -> quarantined
offline -> quarantined
quarantined -> active
quarantined -> draining
active -> draining
offline -> draining
draining -> retired
draining -> offline
retired -> active
retired -> removing
removing -> retired
removing -> deleted
";

fn seed_transitions() -> BTreeSet<(NodeState, NodeState)> {
    SEED_001_TRANSITIONS
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (from, to) = l.split_once(" -> ").unwrap();
            (from.trim().parse().unwrap(), to.trim().parse().unwrap())
        })
        .collect()
}

/// Seed 002's verb table (initial state -> first state), plus, marked, the -FAIL recoveries
/// that Ironic has and the seed leaves open.
const SEED_002_VERBS: &[(&str, &str, &str)] = &[
    ("manage", "ENROLL", "VERIFYING"),
    ("clean", "MANAGEABLE", "CLEANING"),
    ("inspect", "MANAGEABLE", "INSPECTING"),
    ("provide", "MANAGEABLE", "CLEANING"),
    ("manage", "AVAILABLE", "MANAGEABLE"),
    ("active", "AVAILABLE", "DEPLOYING"),
    ("rebuild", "ACTIVE", "DEPLOYING"),
    ("rescue", "ACTIVE", "RESCUING"),
    ("unrescue", "RESCUE", "UNRESCUING"),
    ("deleted", "ACTIVE", "DELETING"),
    ("deleted", "RESCUE", "DELETING"),
    ("deleted", "DEPLOYWAIT", "DELETING"),
    ("abort", "CLEANWAIT", "CLEANFAIL"),
    // Ironic's recoveries out of the fail states.
    ("manage", "CLEANFAIL", "MANAGEABLE"),
    ("manage", "INSPECTFAIL", "MANAGEABLE"),
    ("inspect", "INSPECTFAIL", "INSPECTING"),
    ("active", "DEPLOYFAIL", "DEPLOYING"),
    ("rebuild", "DEPLOYFAIL", "DEPLOYING"),
    ("rebuild", "ERROR", "DEPLOYING"),
    ("deleted", "DEPLOYFAIL", "DELETING"),
    ("deleted", "ERROR", "DELETING"),
    ("deleted", "RESCUEFAIL", "DELETING"),
    ("deleted", "UNRESCUEFAIL", "DELETING"),
    ("rescue", "RESCUEFAIL", "RESCUING"),
    ("rescue", "UNRESCUEFAIL", "RESCUING"),
    ("unrescue", "RESCUEFAIL", "UNRESCUING"),
    ("unrescue", "UNRESCUEFAIL", "UNRESCUING"),
];

fn verb_allowed(verb: Verb, from: ProvisionState) -> Option<ProvisionState> {
    SEED_002_VERBS
        .iter()
        .find(|(v, f, _)| *v == verb.as_str() && *f == from.as_str())
        .map(|(_, _, to)| to.parse().unwrap())
}

fn node_state() -> impl Strategy<Value = NodeState> {
    proptest::sample::select(NodeState::ALL.to_vec())
}

fn owner() -> impl Strategy<Value = Owner> {
    proptest::sample::select(Owner::ALL.to_vec())
}

fn context() -> impl Strategy<Value = TransitionContext> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(owning_operation, identity_retained, protected)| TransitionContext {
            owning_operation,
            identity_retained,
            protected,
        },
    )
}

fn ironic_event() -> impl Strategy<Value = IronicEvent> {
    proptest::sample::select(all_events())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Walk random requests from a random initial state: only seed transitions are accepted,
    /// only with the guardrails met, and `deleted` is never left.
    #[test]
    fn coarse_node_walks_accept_only_seed_transitions(
        start in proptest::sample::select(NodeState::INITIAL.to_vec()),
        steps in proptest::collection::vec((node_state(), owner(), context()), 1..60),
    ) {
        let legal = seed_transitions();
        let mut state = start;
        for (to, by, ctx) in steps {
            let result = check_transition(state, to, by, &ctx);
            if result.is_ok() {
                prop_assert!(legal.contains(&(state, to)), "accepted {state} -> {to}");
                prop_assert!(state != NodeState::Deleted);
                if to == NodeState::Draining || to == NodeState::Removing {
                    prop_assert!(ctx.owning_operation && !ctx.protected);
                }
                if state == NodeState::Retired && to == NodeState::Active {
                    prop_assert!(ctx.identity_retained);
                }
                state = to;
            } else if legal.contains(&(state, to)) {
                // A seed transition was refused: the requester is not its owner or a guardrail
                // does not hold.
                let owner_ok = metalform::lifecycle::owners(state, to).unwrap().contains(&by);
                let guard_failed = ((to == NodeState::Draining || to == NodeState::Removing)
                    && (!ctx.owning_operation || ctx.protected))
                    || (state == NodeState::Retired && to == NodeState::Active && !ctx.identity_retained);
                prop_assert!(!owner_ok || guard_failed, "refused {state} -> {to} by {by}");
            }
        }
    }

    /// Random events on the Ironic machine: verbs are accepted only from the table, a retired
    /// node is never AVAILABLE, a protected node is never rebuilt or torn down, and stable
    /// states change only on verbs.
    #[test]
    fn ironic_walks_keep_the_invariants(events in proptest::collection::vec(ironic_event(), 1..120)) {
        let mut node = IronicNode::new();
        for event in events {
            let before = node.clone();
            match node.apply(&event) {
                Ok(next) => {
                    if let IronicEvent::Verb(verb) = &event {
                        let expected = verb_allowed(*verb, before.state);
                        prop_assert_eq!(Some(next.state), expected, "{} in {}", verb, before.state);
                        prop_assert!(!(before.protected && matches!(verb, Verb::Rebuild | Verb::Delete)));
                        prop_assert!(!(before.retired && matches!(verb, Verb::Provide | Verb::Deploy)));
                    } else if matches!(event, IronicEvent::Wait | IronicEvent::Done | IronicEvent::Fail) {
                        prop_assert!(!before.state.is_stable(), "{:?} moved stable {}", event, before.state);
                    } else {
                        prop_assert_eq!(next.state, before.state, "a flag change moved the state");
                    }
                    node = next;
                }
                Err(_) => {
                    // Refusals change nothing (apply returns a new node only on success).
                    prop_assert_eq!(&node, &before);
                    if let IronicEvent::Verb(verb) = &event {
                        let in_table = verb_allowed(*verb, before.state).is_some();
                        let blocked = (before.protected && matches!(verb, Verb::Rebuild | Verb::Delete))
                            || (before.retired && matches!(verb, Verb::Provide | Verb::Deploy));
                        prop_assert!(!in_table || blocked, "refused a legal {} in {}", verb, before.state);
                    }
                }
            }
            prop_assert!(!(node.retired && node.state == ProvisionState::Available));
            prop_assert!(node.state.is_stable() == node.target.is_none() || node.state.phase() == metalform::lifecycle::Phase::Fail);
        }
    }

    /// Random job-state moves and recovery actions: terminal states stay terminal, an action is
    /// accepted only on the states it applies to.
    #[test]
    fn job_walks_keep_terminal_states_terminal(
        steps in proptest::collection::vec(
            prop_oneof![
                proptest::sample::select(JobState::ALL.to_vec()).prop_map(Ok),
                proptest::sample::select(RecoveryAction::ALL.to_vec()).prop_map(Err),
            ],
            1..80,
        ),
    ) {
        let mut state = JobState::Pending;
        for step in steps {
            let next = match step {
                Ok(to) => state.check_move(to).ok().map(|()| to),
                Err(action) => {
                    let target = action.target(state).ok();
                    if target.is_some() {
                        prop_assert!(action.applies_to().contains(&state));
                    }
                    target
                }
            };
            if let Some(next) = next {
                prop_assert!(!state.is_terminal(), "left terminal {state} for {next}");
                state = next;
            }
        }
    }
}

fn reachable<T: Ord + Clone>(start: T, successors: impl Fn(&T) -> Vec<T>) -> BTreeSet<T> {
    let mut seen = BTreeSet::from([start.clone()]);
    let mut queue = VecDeque::from([start]);
    while let Some(item) = queue.pop_front() {
        for next in successors(&item) {
            if seen.insert(next.clone()) {
                queue.push_back(next);
            }
        }
    }
    seen
}

#[test]
fn every_coarse_state_is_reachable_from_bootstrap() {
    let permissive = TransitionContext {
        owning_operation: true,
        ..TransitionContext::default()
    };
    let seen = reachable(NodeState::BootstrapIssued, |from| {
        NodeState::ALL
            .iter()
            .copied()
            .filter(|to| {
                Owner::ALL
                    .iter()
                    .any(|by| check_transition(*from, *to, *by, &permissive).is_ok())
            })
            .collect()
    });
    assert_eq!(seen.len(), NodeState::ALL.len(), "{seen:?}");
}

#[test]
fn every_provision_state_is_reachable_from_enroll() {
    // Depth-first over whole nodes (state + flags), collecting the states seen.
    let mut states = BTreeSet::new();
    let mut frontier = vec![IronicNode::new()];
    let mut visited = BTreeSet::new();
    while let Some(node) = frontier.pop() {
        let key = format!("{node:?}");
        if !visited.insert(key) {
            continue;
        }
        states.insert(node.state);
        for event in all_events() {
            if let Ok(next) = node.apply(&event) {
                frontier.push(next);
            }
        }
    }
    let all: BTreeSet<ProvisionState> = ProvisionState::ALL.iter().copied().collect();
    assert_eq!(states, all);
}

#[test]
fn every_job_state_is_reachable_from_pending() {
    let seen = reachable(JobState::Pending, |s| s.successors().to_vec());
    assert_eq!(seen.len(), JobState::ALL.len());
}
