//! Which MAAS machine is which node (seed 000 §4.3 CreateOrFindInMaas lookup order, §4.16
//! discovery ambiguity policy), decided once per site for every node of the manifests.
//!
//! A node's open job, when it is bound to a listed machine, names the machine. Otherwise every
//! listed machine that matches the node by hostname, by BMC (`power_address`) or by the known
//! PXE MAC is a candidate. The plan fails closed (000 §4.16 step 5): more than one candidate, or
//! one machine that is a candidate of more than one node, is an ambiguity an operator resolves.
//! Claiming a sole `New` machine that matches nothing (step 6) happens during discovery in the
//! executor, not here: at plan time nothing has been PXE-booted yet.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::{Node, NodeId};
use crate::observe::ObservedMachine;

use super::types::{Candidate, MatchKey};

/// The outcome for one node.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Match<'a> {
    /// No listed machine matches.
    None,
    One {
        machine: &'a ObservedMachine,
        keys: Vec<MatchKey>,
    },
    Ambiguous(Vec<Candidate>),
}

/// BMC addresses compare as IPs when they parse (MAAS keeps what the operator typed).
fn bmc_key(address: &str) -> String {
    let address = address.trim();
    address
        .parse::<std::net::IpAddr>()
        .map(|ip| ip.to_string())
        .unwrap_or_else(|_| address.to_ascii_lowercase())
}

/// The listed machines of one site, indexed the ways nodes are matched.
struct Index<'a> {
    machines: &'a [ObservedMachine],
    by_id: HashMap<&'a str, usize>,
    by_hostname: HashMap<String, Vec<usize>>,
    by_bmc: HashMap<String, Vec<usize>>,
    by_mac: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Index<'a> {
    fn new(machines: &'a [ObservedMachine]) -> Self {
        let mut index = Index {
            machines,
            by_id: HashMap::with_capacity(machines.len()),
            by_hostname: HashMap::with_capacity(machines.len()),
            by_bmc: HashMap::with_capacity(machines.len()),
            by_mac: HashMap::with_capacity(machines.len() * 3),
        };
        for (i, m) in machines.iter().enumerate() {
            index.by_id.insert(&m.system_id, i);
            index
                .by_hostname
                .entry(m.hostname.to_ascii_lowercase())
                .or_default()
                .push(i);
            if let Some(address) = &m.power_address {
                index.by_bmc.entry(bmc_key(address)).or_default().push(i);
            }
            for mac in &m.macs {
                index.by_mac.entry(mac).or_default().push(i);
            }
        }
        index
    }

    /// Candidate machines of one node with the keys each matched by.
    fn candidates(&self, node: &Node) -> BTreeMap<usize, Vec<MatchKey>> {
        let mut found: BTreeMap<usize, Vec<MatchKey>> = BTreeMap::new();
        let mut add = |hits: Option<&Vec<usize>>, key: MatchKey| {
            for &i in hits.into_iter().flatten() {
                found.entry(i).or_default().push(key.clone());
            }
        };
        add(
            self.by_hostname
                .get(&node.id.hostname.as_str().to_ascii_lowercase()),
            MatchKey::Hostname,
        );
        add(
            self.by_bmc.get(&bmc_key(&node.bmc.ipmi_ip.to_string())),
            MatchKey::BmcAddress,
        );
        if let Some(mac) = node.pxe_mac {
            add(self.by_mac.get(mac.to_string().as_str()), MatchKey::PxeMac);
        }
        found
    }

    fn candidate(&self, i: usize, matched_by: Vec<MatchKey>) -> Candidate {
        let m = &self.machines[i];
        Candidate {
            system_id: m.system_id.clone(),
            hostname: m.hostname.clone(),
            status: m.status.name.clone(),
            matched_by,
        }
    }
}

/// Match every node of a site. `bound` maps a node to the system id its open job is bound to.
/// Returns the match per node and the machines no node or job claims (unmanaged, 000 §6.4).
pub(super) fn match_site<'a>(
    machines: &'a [ObservedMachine],
    nodes: &[&Node],
    bound: &HashMap<&NodeId, &str>,
) -> (BTreeMap<NodeId, Match<'a>>, usize) {
    let index = Index::new(machines);
    let mut claimed: BTreeSet<usize> = BTreeSet::new();
    let mut per_node: Vec<(&Node, BTreeMap<usize, Vec<MatchKey>>)> = Vec::new();
    let mut claims: HashMap<usize, Vec<&NodeId>> = HashMap::new();
    let mut outcome = BTreeMap::new();
    for node in nodes {
        if let Some(&i) = bound.get(&node.id).and_then(|id| index.by_id.get(id)) {
            claimed.insert(i);
            claims.entry(i).or_default().push(&node.id);
            outcome.insert(
                node.id.clone(),
                Match::One {
                    machine: &machines[i],
                    keys: vec![MatchKey::Job],
                },
            );
            continue;
        }
        let candidates = index.candidates(node);
        for &i in candidates.keys() {
            claims.entry(i).or_default().push(&node.id);
        }
        per_node.push((node, candidates));
    }
    for (node, mut candidates) in per_node {
        // A machine another node also matches is not this node's to take.
        let mut shared = false;
        for (i, keys) in candidates.iter_mut() {
            for other in claims.get(i).into_iter().flatten() {
                if *other != &node.id {
                    shared = true;
                    keys.push(MatchKey::AlsoMatches {
                        node: (*other).clone(),
                    });
                }
            }
        }
        claimed.extend(candidates.keys().copied());
        let result = match candidates.len() {
            0 => Match::None,
            1 if !shared => {
                let (i, keys) = candidates.into_iter().next().expect("one candidate");
                Match::One {
                    machine: &machines[i],
                    keys,
                }
            }
            _ => Match::Ambiguous(
                candidates
                    .into_iter()
                    .map(|(i, keys)| index.candidate(i, keys))
                    .collect(),
            ),
        };
        outcome.insert(node.id.clone(), result);
    }
    let unmanaged = machines.len() - claimed.len();
    (outcome, unmanaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Bmc, Decommission, EraseMode, Lifecycle, ProfileName, Reimage, Sku};

    fn node(hostname: &str, bmc: &str, pxe_mac: Option<&str>) -> Node {
        Node {
            id: NodeId::new("dc1", hostname),
            profile: ProfileName::new("p"),
            sku: Sku::new("sku"),
            gpus: 8,
            bmc: Bmc {
                ipmi_ip: bmc.parse().unwrap(),
            },
            pxe_mac: pxe_mac.map(|m| m.parse().unwrap()),
            roce: vec![],
            lifecycle: Lifecycle::Active,
            retired_reason: None,
            reimage: Reimage { generation: 0 },
            decommission: Decommission {
                erase: EraseMode::Quick,
                erase_override: None,
                remove_from_maas: false,
            },
            protected: false,
            paused: false,
            group: None,
            provisioner: Default::default(),
            provenance: Default::default(),
        }
    }

    fn machine(
        system_id: &str,
        hostname: &str,
        bmc: Option<&str>,
        macs: &[&str],
    ) -> ObservedMachine {
        ObservedMachine {
            power_address: bmc.map(str::to_owned),
            macs: macs.iter().map(|m| (*m).to_owned()).collect(),
            ..ObservedMachine::ready(system_id, hostname)
        }
    }

    fn one<'a>(m: &'a Match<'a>) -> (&'a str, &'a [MatchKey]) {
        match m {
            Match::One { machine, keys } => (&machine.system_id, keys),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn matches_by_hostname_bmc_and_pxe_mac() {
        let machines = vec![
            machine("a", "N01", Some(" 10.0.0.1 "), &[]),
            machine("b", "enlisted-7", None, &["3c:ec:ef:00:00:02"]),
            machine("c", "spare", Some("10.0.0.9"), &[]),
        ];
        let nodes = [
            node("n01", "10.0.0.1", None),
            node("n02", "10.0.0.2", Some("3C:EC:EF:00:00:02")),
            node("n03", "10.0.0.3", None),
        ];
        let refs: Vec<&Node> = nodes.iter().collect();
        let (matches, unmanaged) = match_site(&machines, &refs, &HashMap::new());
        assert_eq!(
            one(&matches[&nodes[0].id]),
            ("a", &[MatchKey::Hostname, MatchKey::BmcAddress][..]),
            "hostnames compare case-insensitively, BMC addresses as IPs"
        );
        assert_eq!(one(&matches[&nodes[1].id]), ("b", &[MatchKey::PxeMac][..]));
        assert_eq!(matches[&nodes[2].id], Match::None);
        assert_eq!(unmanaged, 1, "spare");
    }

    #[test]
    fn an_open_job_names_its_machine_and_others_cannot_take_it() {
        let machines = vec![
            machine("a", "n01", Some("10.0.0.1"), &[]),
            machine("b", "n02", Some("10.0.0.2"), &[]),
        ];
        // n01's job is bound to b (the machine was renamed in MAAS); n02 matches b by name.
        let nodes = [node("n01", "10.0.0.1", None), node("n02", "10.0.0.2", None)];
        let refs: Vec<&Node> = nodes.iter().collect();
        let bound = HashMap::from([(&nodes[0].id, "b")]);
        let (matches, unmanaged) = match_site(&machines, &refs, &bound);
        assert_eq!(one(&matches[&nodes[0].id]), ("b", &[MatchKey::Job][..]));
        match &matches[&nodes[1].id] {
            Match::Ambiguous(candidates) => {
                assert_eq!(candidates.len(), 1);
                assert_eq!(candidates[0].system_id, "b");
                assert!(candidates[0].matched_by.contains(&MatchKey::AlsoMatches {
                    node: nodes[0].id.clone()
                }));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(unmanaged, 1, "a: its BMC is n01's, but n01's job holds b");
    }
}
