//! The converged scenario (docs/simulator.md): a simulated MAAS whose machines are already
//! Deployed as a fleet's nodes (their hostnames and BMC addresses), and the store rows that
//! say the same — each node active, bound to its machine, its agent heard from — so that a
//! converged fleet can be measured without onboarding it first.

use crate::store::ConvergedNode;

use super::config::{FleetOptions, InitialState, SimConfig};
use super::server::SimHandle;

/// A node of the fleet to stand a machine in for: its hostname and BMC address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetMachine {
    pub hostname: String,
    pub bmc_ip: String,
}

/// A generated region (`seed`) with one Deployed machine per node, named as the node.
pub fn converged_config(seed: u64, nodes: &[FleetMachine]) -> SimConfig {
    let mut config = SimConfig::generated(
        seed,
        &FleetOptions {
            machines: nodes.len(),
            initial: InitialState::Deployed,
            no_boss_every: 0,
            unknown: 0,
        },
    );
    for (machine, node) in config.machines.iter_mut().zip(nodes) {
        machine.hostname = Some(node.hostname.clone());
        machine.bmc_ip = Some(node.bmc_ip.clone());
    }
    config
}

/// The store rows matching a started converged region: one converged node of `site` per
/// machine, bound to it as MAAS shows it now (for `Store::seed_converged`; the sku and GPU
/// count are the fleet's to fill in).
pub fn converged_nodes(region: &SimHandle, site: &str) -> Vec<ConvergedNode> {
    region.with_world(|world| {
        world
            .machines
            .values()
            .map(|machine| {
                let mut ips = machine.ip_addresses();
                ips.sort();
                ConvergedNode {
                    site: site.to_owned(),
                    hostname: machine.hostname.clone(),
                    sku: None,
                    gpus: None,
                    ipmi_ip: machine.bmc_ip().map(str::to_owned),
                    system_id: machine.system_id.clone(),
                    maas_status: machine.status.name().to_owned(),
                    power_state: machine.power_state.as_str().to_owned(),
                    host: ips.first().cloned(),
                    ips,
                }
            })
            .collect()
    })
}
