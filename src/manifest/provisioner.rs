//! A node's `provisioner` (seed 003; issue 14 "a Node chooses its provisioner explicitly"):
//! MAAS with its own power driver for the BMC, or metalform's Redfish provisioner with a
//! recipe. Which fields go with which type, and the combinations metalform cannot honour, are
//! refused here with the field that says so — never a silent fallback to IPMI.
//!
//! Refused:
//! - fields of the other type (`powerDriver` on a Redfish node; `serial`, `recipe`, … on a
//!   MAAS node);
//! - a Redfish node without `serial` or `recipe`, or with a recipe its schema refuses (each
//!   error at its field inside `recipe`);
//! - a Redfish node with MAAS-only fields (`pxeMac`, `roce`), or a lifecycle other than
//!   active (retiring or decommissioning runs through MAAS);
//! - a MAAS node powered through Redfish without `pxeMac`: without its MAC, metalform finds a
//!   new machine by PXE-booting it over IPMI, which a Redfish-only BMC does not speak.

use std::net::Ipv4Addr;

use super::document::ProvisionerSpec;
use super::tree::PathSegment;
use crate::model::{Lifecycle, PowerType, Provisioner, RedfishProvisioner, SecretRef};
use crate::provider::redfish::profile::Vendor;
use crate::provider::redfish::recipe;

/// One reason a node's provisioner is refused: the path below the node's fields, a stable
/// code, what is wrong and what to do.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Problem {
    pub path: Vec<PathSegment>,
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

/// What the node says besides its provisioner.
pub(super) struct NodeSide<'a> {
    pub spec: Option<&'a ProvisionerSpec>,
    /// The site's `power.type`, when the site is known.
    pub site_power: Option<PowerType>,
    pub ipmi_ip: Option<Ipv4Addr>,
    pub pxe_mac: bool,
    pub roce: bool,
    pub lifecycle: Lifecycle,
}

fn at(rest: &[&'static str]) -> Vec<PathSegment> {
    let mut path = vec![PathSegment::from("provisioner")];
    path.extend(rest.iter().map(|k| PathSegment::from(*k)));
    path
}

fn problem(path: Vec<PathSegment>, code: &'static str, message: String, hint: &str) -> Problem {
    Problem {
        path,
        code,
        message,
        hint: (!hint.is_empty()).then(|| hint.to_owned()),
    }
}

/// The node's provisioner, or every reason it is refused.
pub(super) fn resolve(node: &NodeSide<'_>) -> Result<Provisioner, Vec<Problem>> {
    let Some(spec) = node.spec else {
        return maas(node, None);
    };
    match spec.kind.as_deref().unwrap_or("maas") {
        "redfish" => redfish(node, spec),
        _ => {
            let mut problems = Vec::new();
            let foreign = [
                ("serial", spec.serial.is_some()),
                ("redfishUrl", spec.redfish_url.is_some()),
                ("vendor", spec.vendor.is_some()),
                ("credentials", spec.credentials.is_some()),
                ("maintenanceIsoUrl", spec.maintenance_iso_url.is_some()),
                ("recipe", spec.recipe.is_some()),
            ];
            for (field, set) in foreign {
                if set {
                    problems.push(problem(
                        at(&[field]),
                        "provisioner-field",
                        format!("`{field}` belongs to the Redfish provisioner, but this node's provisioner is MAAS"),
                        "set `type: redfish` to install the node over Redfish virtual media, or remove the field",
                    ));
                }
            }
            match maas(node, spec.power_driver) {
                Ok(provisioner) if problems.is_empty() => Ok(provisioner),
                Ok(_) => Err(problems),
                Err(more) => {
                    problems.extend(more);
                    Err(problems)
                }
            }
        }
    }
}

fn maas(node: &NodeSide<'_>, driver: Option<PowerType>) -> Result<Provisioner, Vec<Problem>> {
    let effective = driver.or(node.site_power).unwrap_or(PowerType::Ipmi);
    if effective == PowerType::Redfish && !node.pxe_mac && node.lifecycle == Lifecycle::Active {
        let path = if driver.is_some() {
            at(&["powerDriver"])
        } else {
            vec![PathSegment::from("bmc")]
        };
        let why = if driver.is_some() {
            "the node's provisioner.powerDriver is redfish"
        } else {
            "the site's power.type is redfish"
        };
        return Err(vec![problem(
            path,
            "redfish-needs-pxe-mac",
            format!(
                "{why}, but the node has no pxeMac: metalform would have to find the machine by PXE-booting it over IPMI, which a Redfish BMC does not answer"
            ),
            "add pxeMac (MAAS creates the machine from it and powers it through Redfish), or set provisioner.powerDriver: ipmi",
        )]);
    }
    Ok(Provisioner::Maas {
        power_driver: driver,
    })
}

fn redfish(node: &NodeSide<'_>, spec: &ProvisionerSpec) -> Result<Provisioner, Vec<Problem>> {
    let mut problems = Vec::new();
    if spec.power_driver.is_some() {
        problems.push(problem(
            at(&["powerDriver"]),
            "provisioner-field",
            "`powerDriver` is MAAS's, but this node is installed by the Redfish provisioner, not MAAS".into(),
            "remove powerDriver, or set `type: maas`",
        ));
    }
    for (field, set, what) in [
        ("pxeMac", node.pxe_mac, "MAAS discovery"),
        ("roce", node.roce, "MAAS interface configuration"),
    ] {
        if set {
            problems.push(problem(
                vec![PathSegment::from(field)],
                "redfish-maas-field",
                format!(
                    "`{field}` is used by {what}, but this node is installed by the Redfish provisioner and is not in MAAS"
                ),
                "remove it, or install the node through MAAS (`provisioner.type: maas`)",
            ));
        }
    }
    if node.lifecycle != Lifecycle::Active {
        problems.push(problem(
            vec![PathSegment::from("lifecycle")],
            "redfish-lifecycle",
            format!(
                "lifecycle {} releases the node through MAAS, but this node is installed by the Redfish provisioner",
                node.lifecycle
            ),
            "remove the node from the manifests to stop provisioning it; metalform cannot retire or decommission Redfish nodes yet",
        ));
    }
    let serial = spec.serial.clone().filter(|s| !s.trim().is_empty());
    if serial.is_none() {
        problems.push(problem(
            at(&[]),
            "redfish-needs-serial",
            "a Redfish node needs `serial`: the server's serial number, as its BMC reports it"
                .into(),
            "add provisioner.serial (the system's SerialNumber, e.g. from the BMC's web UI)",
        ));
    }
    if let Some(vendor) = &spec.vendor
        && Vendor::parse(vendor).is_none()
    {
        problems.push(problem(
            at(&["vendor"]),
            "invalid-vendor",
            format!("unknown vendor `{vendor}`"),
            "dell, hpe, lenovo, supermicro or generic; leave it out to detect it",
        ));
    }
    let redfish_url = match (&spec.redfish_url, node.ipmi_ip) {
        (Some(url), _) => {
            let text = if url.contains("://") {
                url.clone()
            } else {
                format!("https://{url}")
            };
            match url::Url::parse(&text) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Some(url.clone()),
                _ => {
                    problems.push(problem(
                        at(&["redfishUrl"]),
                        "invalid-url",
                        format!("`{url}` is not a Redfish address"),
                        "a host, host:port or http(s) URL, e.g. https://10.176.16.131",
                    ));
                    None
                }
            }
        }
        (None, Some(ip)) => Some(format!("https://{ip}")),
        (None, None) => None,
    };
    if let Some(url) = &spec.maintenance_iso_url
        && !url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
    {
        problems.push(problem(
            at(&["maintenanceIsoUrl"]),
            "invalid-url",
            format!("`{url}` is not an http(s) URL a BMC can fetch"),
            "",
        ));
    }
    let recipe = match &spec.recipe {
        None => {
            problems.push(problem(
                at(&[]),
                "redfish-needs-recipe",
                "a Redfish node needs `recipe`: what the maintenance OS installs".into(),
                "add provisioner.recipe with at least task_target and target_disk (see schema/recipe.schema.json)",
            ));
            None
        }
        Some(recipe) => match recipe::validate(recipe) {
            Ok(_) => Some(recipe.clone()),
            Err(errors) => {
                for error in errors {
                    let mut path = at(&["recipe"]);
                    path.extend(json_path(&error.path));
                    problems.push(Problem {
                        path,
                        code: "invalid-recipe",
                        message: format!("recipe {}: {}", error.path, error.message),
                        hint: Some("see schema/recipe.schema.json".into()),
                    });
                }
                None
            }
        },
    };
    match (serial, redfish_url, recipe) {
        (Some(serial), Some(redfish_url), Some(recipe)) if problems.is_empty() => {
            Ok(Provisioner::Redfish(Box::new(RedfishProvisioner {
                serial,
                redfish_url,
                vendor: spec.vendor.clone(),
                credentials: spec
                    .credentials
                    .as_ref()
                    .map(|c| SecretRef::new(c.vault.clone(), c.key.as_deref())),
                maintenance_iso_url: spec.maintenance_iso_url.clone(),
                recipe,
            })))
        }
        _ => Err(problems),
    }
}

/// `$.partition_layout[1].size` → `partition_layout`, 1, `size`; `$['$schema']` → `$schema`.
fn json_path(path: &str) -> Vec<PathSegment> {
    let mut segments = Vec::new();
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("['") {
            let (key, tail) = after.split_once("']").unwrap_or((after, ""));
            segments.push(PathSegment::from(key.to_owned()));
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('[') {
            let (index, tail) = after.split_once(']').unwrap_or((after, ""));
            if let Ok(index) = index.parse::<usize>() {
                segments.push(PathSegment::from(index));
            }
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            segments.push(PathSegment::from(after[..end].to_owned()));
            rest = &after[end..];
        } else {
            break;
        }
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn side(spec: Option<&ProvisionerSpec>) -> NodeSide<'_> {
        NodeSide {
            spec,
            site_power: Some(PowerType::Ipmi),
            ipmi_ip: Some(Ipv4Addr::new(10, 0, 0, 5)),
            pxe_mac: false,
            roce: false,
            lifecycle: Lifecycle::Active,
        }
    }

    fn spec(value: serde_json::Value) -> ProvisionerSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn json_paths_become_field_paths() {
        assert_eq!(
            json_path("$.partition_layout[1].size"),
            vec![
                PathSegment::from("partition_layout"),
                PathSegment::from(1),
                PathSegment::from("size")
            ]
        );
        assert_eq!(
            json_path("$['$schema']"),
            vec![PathSegment::from("$schema")]
        );
        assert!(json_path("$").is_empty());
    }

    #[test]
    fn a_redfish_node_gets_its_defaults_and_its_recipe_checked() {
        let ok = spec(json!({"type": "redfish", "serial": "XF-1",
            "recipe": {"task_target": "install-linux.target", "target_disk": "/dev/sda"}}));
        let Ok(Provisioner::Redfish(r)) = resolve(&side(Some(&ok))) else {
            panic!("accepted");
        };
        assert_eq!(r.redfish_url, "https://10.0.0.5");
        let bad = spec(
            json!({"type": "redfish", "serial": "XF-1", "powerDriver": "ipmi",
            "recipe": {"task_target": "install-linux.target", "target_disk": "sda",
                       "partition_layout": [{"size": "512M", "type_guid": "ef00", "format": "vfat"},
                                            {"size": "lots", "type_guid": "8300", "format": "ext4"}]}}),
        );
        let problems = resolve(&side(Some(&bad))).unwrap_err();
        let codes: Vec<(&str, String)> = problems
            .iter()
            .map(|p| (p.code, super::super::tree::display_path(&p.path)))
            .collect();
        assert_eq!(
            codes,
            [
                ("provisioner-field", "provisioner.powerDriver".to_owned()),
                (
                    "invalid-recipe",
                    "provisioner.recipe.partition_layout[1].size".to_owned()
                ),
                (
                    "invalid-recipe",
                    "provisioner.recipe.target_disk".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn maas_through_redfish_needs_the_mac() {
        let mut node = side(None);
        node.site_power = Some(PowerType::Redfish);
        let problems = resolve(&node).unwrap_err();
        assert_eq!(problems[0].code, "redfish-needs-pxe-mac");
        node.pxe_mac = true;
        assert_eq!(
            resolve(&node).unwrap(),
            Provisioner::Maas { power_driver: None }
        );
        let explicit = spec(json!({"powerDriver": "ipmi"}));
        node.pxe_mac = false;
        node.spec = Some(&explicit);
        assert_eq!(
            resolve(&node).unwrap(),
            Provisioner::Maas {
                power_driver: Some(PowerType::Ipmi)
            }
        );
    }
}
