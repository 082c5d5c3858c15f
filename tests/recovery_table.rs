//! docs/recovery.md against the state machines (issue 18 "a way out of every failure state"):
//! every way out the page documents is a move the lifecycle machines accept for the actor it
//! names, and from every reachable state the documented ways out reach `active` or `deleted`
//! (nodes), a terminal state (jobs), or ACTIVE again (the provision view, flags included).
//! The page is the oracle: a row that stops being true, or a state left without a row, fails.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::str::FromStr;

use metalform::lifecycle::{
    IronicEvent, IronicNode, JobState, NodeState, Owner, ProvisionState, RecoveryAction,
    TransitionContext, Verb, all_events, check_transition,
};

const PAGE: &str = include_str!("../docs/recovery.md");

/// The rows of the table under `## <heading>`: each cell with its backticks removed, and the
/// backticked words of the last cell.
fn table(heading: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let start = PAGE
        .find(&format!("## {heading}"))
        .unwrap_or_else(|| panic!("docs/recovery.md has no section `{heading}`"));
    let rows: Vec<_> = PAGE[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let plain = cells
                .iter()
                .map(|c| c.trim_matches('`').to_owned())
                .collect();
            let last = cells.last().unwrap();
            let quoted = last
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (plain, quoted)
        })
        .collect();
    assert!(!rows.is_empty(), "section `{heading}` has no table rows");
    rows
}

fn parse<T: FromStr>(text: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    text.parse()
        .unwrap_or_else(|e| panic!("docs/recovery.md: `{text}`: {e:?}"))
}

/// From each of `starts`, following `edges` reaches one of `goals`; returns the states that
/// do not.
fn stuck<T: Ord + Clone + std::fmt::Debug>(
    starts: &BTreeSet<T>,
    edges: &BTreeMap<T, Vec<T>>,
    goal: impl Fn(&T) -> bool,
) -> Vec<T> {
    starts
        .iter()
        .filter(|start| {
            let mut seen = BTreeSet::from([(*start).clone()]);
            let mut queue = VecDeque::from([(*start).clone()]);
            while let Some(state) = queue.pop_front() {
                if goal(&state) {
                    return false;
                }
                for next in edges.get(&state).into_iter().flatten() {
                    if seen.insert(next.clone()) {
                        queue.push_back(next.clone());
                    }
                }
            }
            true
        })
        .cloned()
        .collect()
}

#[test]
fn every_node_state_row_is_legal_and_every_reachable_state_reaches_active_or_deleted() {
    // The job a manifest change or command starts owns the node for the moves that need it;
    // protection is removed first (the page says so).
    let ctx = TransitionContext {
        owning_operation: true,
        identity_retained: true,
        protected: false,
    };
    let mut edges: BTreeMap<NodeState, Vec<NodeState>> = BTreeMap::new();
    for (cells, _) in table("Node states") {
        let (from, to, by): (NodeState, NodeState, Owner) =
            (parse(&cells[0]), parse(&cells[1]), parse(&cells[2]));
        if let Err(e) = check_transition(from, to, by, &ctx) {
            panic!("docs/recovery.md row {from} -> {to} by {by} is not legal: {e}");
        }
        edges.entry(from).or_default().push(to);
    }
    // Every state reachable from the initial ones by any legal move of any actor.
    let mut reachable: BTreeSet<NodeState> = NodeState::INITIAL.iter().copied().collect();
    let mut queue: VecDeque<NodeState> = reachable.iter().copied().collect();
    while let Some(from) = queue.pop_front() {
        for to in NodeState::ALL {
            let legal = Owner::ALL
                .iter()
                .any(|by| check_transition(from, *to, *by, &ctx).is_ok());
            if legal && reachable.insert(*to) {
                queue.push_back(*to);
            }
        }
    }
    assert_eq!(reachable.len(), NodeState::ALL.len());
    let left = stuck(&reachable, &edges, |s| {
        matches!(s, NodeState::Active | NodeState::Deleted)
    });
    assert!(
        left.is_empty(),
        "no documented way from {left:?} to active or deleted"
    );
    // Each state but the goals has its own row (offline must not rely on active's rows).
    for state in NodeState::ALL {
        if !matches!(state, NodeState::Active | NodeState::Deleted) {
            assert!(edges.contains_key(state), "no row leaves {state}");
        }
    }
}

#[test]
fn every_job_state_row_is_legal_and_every_job_state_reaches_a_terminal_one() {
    let mut edges: BTreeMap<JobState, Vec<JobState>> = BTreeMap::new();
    for (cells, _) in table("Job states") {
        let (from, to): (JobState, JobState) = (parse(&cells[0]), parse(&cells[1]));
        if cells[2] == "run" {
            assert!(
                from.successors().contains(&to),
                "docs/recovery.md: the executor does not move a job {from} -> {to}"
            );
        } else {
            let action: RecoveryAction = parse(&cells[2]);
            assert_eq!(
                action.target(from),
                Ok(to),
                "docs/recovery.md: {action} on a {from} job"
            );
        }
        edges.entry(from).or_default().push(to);
    }
    let all: BTreeSet<JobState> = JobState::ALL.iter().copied().collect();
    let left = stuck(&all, &edges, |s| s.is_terminal());
    assert!(left.is_empty(), "no documented way out of {left:?}");
    // Every recovery action for a frozen job is documented.
    let documented: BTreeSet<String> = table("Job states")
        .into_iter()
        .filter(|(c, _)| c[0] == "failed_manual_intervention")
        .map(|(c, _)| c[2].clone())
        .collect();
    for action in RecoveryAction::ALL {
        let applies = action
            .applies_to()
            .contains(&JobState::FailedManualIntervention);
        let leaves = action.target(JobState::FailedManualIntervention)
            != Ok(JobState::FailedManualIntervention);
        if applies && leaves && *action != RecoveryAction::Resume {
            assert!(
                documented.contains(action.as_str()),
                "{action} is not documented for failed_manual_intervention"
            );
        }
    }
}

#[test]
fn every_provision_failure_row_names_verbs_that_leave_it() {
    for (cells, quoted) in table("Provision states") {
        let state: ProvisionState = parse(&cells[0]);
        let verbs: Vec<Verb> = quoted.iter().filter_map(|w| w.parse().ok()).collect();
        assert!(!verbs.is_empty(), "row {state} names no verb");
        let node = IronicNode {
            state,
            ..IronicNode::new()
        };
        for verb in verbs {
            let next = node
                .apply(&IronicEvent::Verb(verb))
                .unwrap_or_else(|e| panic!("docs/recovery.md: `{verb}` from {state}: {e}"));
            assert_ne!(next.state, state, "`{verb}` does not leave {state}");
        }
    }
}

/// The property of issue 18 over the provision view with its flags: from every node state
/// reachable from ENROLL (retired, protected, failed, waiting...), some sequence of verbs,
/// process outcomes and flag changes reaches ACTIVE.
#[test]
fn from_every_reachable_provision_node_some_sequence_reaches_active() {
    let events = all_events();
    let key = |n: &IronicNode| format!("{n:?}");
    let mut nodes: BTreeMap<String, IronicNode> = BTreeMap::new();
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let start = IronicNode::new();
    nodes.insert(key(&start), start.clone());
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        let from = key(&node);
        for event in &events {
            if let Ok(next) = node.apply(event) {
                let to = key(&next);
                edges.entry(from.clone()).or_default().push(to.clone());
                if let std::collections::btree_map::Entry::Vacant(slot) = nodes.entry(to) {
                    slot.insert(next.clone());
                    queue.push_back(next);
                }
            }
        }
    }
    let states: BTreeSet<ProvisionState> = nodes.values().map(|n| n.state).collect();
    assert_eq!(states.len(), ProvisionState::ALL.len());
    let starts: BTreeSet<String> = nodes.keys().cloned().collect();
    let left = stuck(&starts, &edges, |k| {
        nodes[k].state == ProvisionState::Active
    });
    assert!(left.is_empty(), "dead ends: {left:?}");
}
