//! `metalform sim --from EXPORT.json`: a replica of a real site from a MAAS machines export
//! (the JSON of `GET machines/`, shape of the fixtures), so a plan can be rehearsed against it.

use serde_json::Value;

use super::config::{DiskSpec, InitialState, MachineSpec, NicSpec, SimConfig};
use super::status::Status;

/// Why an export cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("expected a JSON array of machine objects (the output of GET /MAAS/api/2.0/machines/)")]
    Shape,
    #[error("machine #{index}: {reason}")]
    Machine { index: usize, reason: String },
}

/// What loading did, for the operator.
#[derive(Debug, Default)]
pub struct ExportSummary {
    pub machines: usize,
    /// Statuses the simulator starts differently (e.g. Deploying → Deployed).
    pub approximations: Vec<String>,
}

fn initial_for(status: Status) -> (InitialState, bool) {
    match status {
        Status::New | Status::Commissioning => (InitialState::New, status != Status::New),
        Status::Ready | Status::Testing => (InitialState::Ready, status != Status::Ready),
        Status::Allocated | Status::Reserved => {
            (InitialState::Allocated, status != Status::Allocated)
        }
        Status::Deployed | Status::Deploying => {
            (InitialState::Deployed, status != Status::Deployed)
        }
        Status::FailedCommissioning => (InitialState::FailedCommissioning, false),
        Status::Broken => (InitialState::Broken, false),
        _ => (InitialState::Broken, true),
    }
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Adds the export's machines to `config` (their system ids, hostnames, NICs, disks, states).
pub fn load_export(config: &mut SimConfig, json: &str) -> Result<ExportSummary, ExportError> {
    let value: Value = serde_json::from_str(json)?;
    let machines = match value {
        Value::Array(list) => list,
        object @ Value::Object(_) if object.get("system_id").is_some() => vec![object],
        _ => return Err(ExportError::Shape),
    };
    let mut summary = ExportSummary::default();
    let mut pxe_set = false;
    for (index, m) in machines.iter().enumerate() {
        let bad = |reason: &str| ExportError::Machine {
            index,
            reason: reason.to_string(),
        };
        let system_id = text(m, "system_id").ok_or_else(|| bad("no system_id"))?;
        let hostname = text(m, "hostname").ok_or_else(|| bad("no hostname"))?;
        let code = m
            .get("status")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("no numeric status"))?;
        let status =
            Status::from_code(code).ok_or_else(|| bad(&format!("unknown status {code}")))?;
        let (initial, approximated) = initial_for(status);
        if approximated {
            summary.approximations.push(format!(
                "{hostname} ({system_id}): {} starts as {initial:?}",
                status.name()
            ));
        }
        let interfaces: Vec<NicSpec> = m
            .get("interface_set")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter(|i| text(i, "type") == Some("physical"))
                    .filter_map(|i| {
                        Some(NicSpec {
                            name: text(i, "name")?.to_string(),
                            mac: text(i, "mac_address")?.to_ascii_lowercase(),
                            speed_mbps: i
                                .get("interface_speed")
                                .and_then(Value::as_u64)
                                .unwrap_or(1000),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        if interfaces.is_empty() {
            return Err(bad("no physical interface with a MAC address"));
        }
        if !pxe_set
            && let Some(subnet) = m
                .get("boot_interface")
                .and_then(|b| b.get("links"))
                .and_then(Value::as_array)
                .and_then(|links| links.iter().find_map(|l| l.get("subnet")))
            && let Some(cidr) = text(subnet, "cidr")
        {
            config.pxe_cidr = cidr.to_string();
            if let Some(gw) = text(subnet, "gateway_ip") {
                config.pxe_gateway = gw.to_string();
            }
            pxe_set = true;
        }
        let disks: Vec<DiskSpec> = m
            .get("physicalblockdevice_set")
            .or(m.get("blockdevice_set"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|d| {
                        Some(DiskSpec {
                            name: text(d, "name")?.to_string(),
                            model: text(d, "model").unwrap_or("").to_string(),
                            serial: text(d, "serial").unwrap_or("").to_string(),
                            size_bytes: d.get("size").and_then(Value::as_u64)?,
                            id_path: text(d, "id_path").unwrap_or("").to_string(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let info = m.get("hardware_info");
        let defaults = MachineSpec::default();
        config.machines.push(MachineSpec {
            bmc_ip: None,
            hostname: Some(hostname.to_string()),
            system_id: Some(system_id.to_string()),
            interfaces,
            disks,
            initial,
            cpu_count: m
                .get("cpu_count")
                .and_then(Value::as_u64)
                .map_or(defaults.cpu_count, |c| c as u32),
            memory_mib: m
                .get("memory")
                .and_then(Value::as_u64)
                .unwrap_or(defaults.memory_mib),
            architecture: text(m, "architecture")
                .unwrap_or("amd64/generic")
                .to_string(),
            hardware_vendor: info
                .and_then(|i| text(i, "system_vendor"))
                .unwrap_or("Unknown")
                .to_string(),
            hardware_product: info
                .and_then(|i| text(i, "system_product"))
                .unwrap_or("Unknown")
                .to_string(),
            ..defaults
        });
        summary.machines += 1;
    }
    Ok(summary)
}
