//! `import-maas` (issue 15 "adopt what already runs"; seed 000 §3.2 power credentials, §4.3
//! CreateOrFindInMaas lookup keys): the machines a live MAAS lists — Deployed ones included —
//! become a NodeGroup manifest that `plan` matches back to them by hostname, BMC and boot MAC,
//! so a fleet that already runs is adopted instead of redeployed.
//!
//! Power credentials never appear as values: a machine whose BMC login differs from the site's
//! default gets a site `power.overrides` entry naming a Vault path under the import prefix;
//! with `write_secrets`, the login MAAS holds is stored there (the only write this makes).
//! Machines without an IPv4 BMC address (manual power, Redfish by hostname) cannot be nodes and
//! are reported as skipped. The document is checked against the NodeGroup schema before it is
//! returned.

use std::collections::BTreeMap;

use serde::Serialize;

use super::schema::{self, Kind};
use super::yaml;
use crate::model::Site;
use crate::provider::maas::{
    MaasClient, MaasError, Machine, MachineFilter, MachinePowerParameters,
};
use crate::secrets::{Secret, SecretError, SecretRef, SecretStore};

/// What the NodeGroup shares, and where imported credentials go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    pub site: String,
    /// The NodeGroup's name.
    pub group: String,
    pub profile: String,
    pub sku: String,
    pub gpus: u32,
    /// Vault path prefix of per-machine BMC logins (`<prefix>/<hostname>`).
    pub credentials_prefix: String,
    /// The MAAS read, for the header comment.
    pub source: String,
}

impl ImportOptions {
    /// The options for `site`'s MAAS (read through `maas`): the group defaults to
    /// `<site>-imported`, the credentials go beside the site's default BMC login.
    pub fn for_site(
        site: &Site,
        maas: &MaasClient,
        profile: String,
        sku: String,
        gpus: u32,
        group: Option<String>,
    ) -> Self {
        ImportOptions {
            site: site.name.to_string(),
            group: group.unwrap_or_else(|| format!("{}-imported", site.name)),
            profile,
            sku,
            gpus,
            credentials_prefix: credentials_prefix(&site.power.default_credentials.path),
            source: format!("MAAS {} (site {})", maas.api_root(), site.name),
        }
    }
}

/// The site's default BMC login, which imported machines are compared with.
pub fn default_credentials(site: &Site) -> SecretRef {
    SecretRef::new(
        site.power.default_credentials.path.clone(),
        site.power.default_credentials.key.as_deref(),
    )
}

/// One machine in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportedNode {
    pub hostname: String,
    pub system_id: String,
    pub status: String,
    pub ipmi_ip: String,
    pub pxe_mac: Option<String>,
    /// The Vault path of its own BMC login, when it is not the site's default.
    pub credentials: Option<String>,
}

/// A machine left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedMachine {
    pub hostname: String,
    pub system_id: String,
    pub reason: String,
}

/// The import: the YAML to commit, and what went into it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportReport {
    pub manifest: String,
    pub nodes: Vec<ImportedNode>,
    pub skipped: Vec<SkippedMachine>,
    /// Vault paths written (`write_secrets`).
    pub secrets_written: Vec<String>,
}

/// Why an import could not be made. Nothing has been written when it fails.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("reading MAAS: {0}")]
    Maas(#[from] MaasError),
    #[error("secret store: {0}")]
    Secret(#[from] SecretError),
    #[error(
        "the generated NodeGroup is not valid: {0}; fix --site, --profile, --sku, --gpus or --group"
    )]
    Invalid(String),
}

/// `<default credentials' folder>/imported`: beside the site's other BMC logins.
pub fn credentials_prefix(default_path: &str) -> String {
    match default_path.rsplit_once('/') {
        Some((folder, _)) => format!("{folder}/imported"),
        None => format!("{default_path}/imported"),
    }
}

/// A machine as MAAS reports it, reduced to what a manifest needs.
#[derive(Debug, Clone)]
struct Found {
    hostname: String,
    system_id: String,
    status: String,
    power_address: Option<String>,
    boot_mac: Option<String>,
    login: Option<(String, Secret)>,
}

impl Found {
    fn of(machine: &Machine, power: Option<&MachinePowerParameters>) -> Found {
        let login = power.and_then(|p| {
            let user = p.others.get("power_user")?.expose().to_owned();
            Some((user, p.others.get("power_pass")?.clone()))
        });
        Found {
            hostname: machine.hostname.clone(),
            system_id: machine.system_id.clone(),
            status: machine.status_label(),
            power_address: power.and_then(|p| p.power_address.clone()),
            boot_mac: machine
                .boot_interface
                .as_ref()
                .and_then(|i| i.mac_address.clone())
                .or_else(|| machine.mac_addresses().next().map(str::to_owned)),
            login,
        }
    }
}

/// Reads every machine of the site's MAAS and its power parameters (admin), compares each
/// BMC login with the site's default, and renders the NodeGroup. With `write_secrets` the
/// differing logins are stored at their Vault paths — after the whole answer was read and the
/// document validated, so a half-read MAAS answer writes nothing.
pub async fn import(
    maas: &MaasClient,
    secrets: &dyn SecretStore,
    default_credentials: &SecretRef,
    options: &ImportOptions,
    write_secrets: bool,
) -> Result<ImportReport, ImportError> {
    let machines = maas.list_machines(&MachineFilter::all()).await?;
    let power = maas.power_parameters(&[]).await?;
    let default = secrets.power_credentials(default_credentials).await.ok();
    let found: Vec<Found> = machines
        .iter()
        .map(|m| Found::of(m, power.get(&m.system_id)))
        .collect();
    let (mut report, logins) = render(
        &found,
        default.as_ref().map(|d| (d.user.as_str(), &d.pass)),
        options,
    )?;
    if write_secrets {
        for (path, (user, pass)) in logins {
            let fields = BTreeMap::from([
                ("user".to_owned(), Secret::new(user)),
                ("pass".to_owned(), pass),
            ]);
            secrets.write(&path, &fields).await?;
            report.secrets_written.push(path);
        }
    }
    Ok(report)
}

/// BMC logins (user, password) to store, by Vault path.
type Logins = BTreeMap<String, (String, Secret)>;

/// The NodeGroup of `found`, and the logins to store by Vault path.
fn render(
    found: &[Found],
    default: Option<(&str, &Secret)>,
    options: &ImportOptions,
) -> Result<(ImportReport, Logins), ImportError> {
    let mut nodes = Vec::new();
    let mut skipped = Vec::new();
    let mut logins = BTreeMap::new();
    let mut sorted: Vec<&Found> = found.iter().collect();
    sorted.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    for machine in sorted {
        let skip = |reason: String| SkippedMachine {
            hostname: machine.hostname.clone(),
            system_id: machine.system_id.clone(),
            reason,
        };
        let Some(ipmi_ip) = machine
            .power_address
            .as_deref()
            .filter(|a| a.parse::<std::net::Ipv4Addr>().is_ok())
        else {
            skipped.push(skip(match &machine.power_address {
                Some(other) => format!("its BMC address {other:?} is not an IPv4 address"),
                None => "MAAS has no BMC address for it (manual power?)".to_owned(),
            }));
            continue;
        };
        let credentials = match (&machine.login, default) {
            (Some((user, pass)), Some((default_user, default_pass)))
                if user == default_user && pass.expose() == default_pass.expose() =>
            {
                None
            }
            (Some(login), _) => {
                let path = format!(
                    "{}/{}",
                    options.credentials_prefix.trim_end_matches('/'),
                    machine.hostname
                );
                logins.insert(path.clone(), login.clone());
                Some(path)
            }
            (None, _) => None,
        };
        nodes.push(ImportedNode {
            hostname: machine.hostname.clone(),
            system_id: machine.system_id.clone(),
            status: machine.status.clone(),
            ipmi_ip: ipmi_ip.to_owned(),
            pxe_mac: machine.boot_mac.clone(),
            credentials,
        });
    }
    let manifest = manifest(&nodes, options);
    let docs = yaml::parse(&manifest)
        .map_err(|err| ImportError::Invalid(format!("it does not parse ({})", err.message)))?;
    if let Some(doc) = docs.first() {
        let findings = schema::validate(Kind::NodeGroup, &doc.to_json());
        if let Some(first) = findings.first() {
            return Err(ImportError::Invalid(first.message.clone()));
        }
    }
    Ok((
        ImportReport {
            manifest,
            nodes,
            skipped,
            secrets_written: Vec::new(),
        },
        logins,
    ))
}

/// A YAML scalar, JSON-quoted (valid YAML) unless plainly safe.
fn scalar(text: &str) -> String {
    let plain = text
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/:-".contains(c))
        && !matches!(
            text,
            "true" | "false" | "null" | "yes" | "no" | "on" | "off"
        )
        && text.parse::<f64>().is_err();
    if plain {
        text.to_owned()
    } else {
        serde_json::to_string(text).unwrap_or_default()
    }
}

fn manifest(nodes: &[ImportedNode], options: &ImportOptions) -> String {
    let mut out = format!(
        "# Generated by `metalform import-maas` from {} ({} machine(s)).\n\
         # `metalform plan` adopts the Deployed ones as they run (no redeploy).\n",
        options.source.replace('\n', " "),
        nodes.len()
    );
    out.push_str("apiVersion: metalform/v1\nkind: NodeGroup\nmetadata:\n");
    out.push_str(&format!("  name: {}\nspec:\n", scalar(&options.group)));
    out.push_str(&format!("  site: {}\n", scalar(&options.site)));
    out.push_str(&format!("  profile: {}\n", scalar(&options.profile)));
    out.push_str(&format!("  sku: {}\n", scalar(&options.sku)));
    out.push_str(&format!("  gpus: {}\n", options.gpus));
    if nodes.is_empty() {
        out.push_str("  nodes: []\n");
    } else {
        out.push_str("  nodes:\n");
    }
    for node in nodes {
        out.push_str(&format!(
            "    - {{hostname: {}, bmc: {{ipmiIp: {}}}",
            scalar(&node.hostname),
            node.ipmi_ip
        ));
        if let Some(mac) = &node.pxe_mac {
            out.push_str(&format!(", pxeMac: {}", scalar(mac)));
        }
        out.push_str(&format!("}}  # {} {}\n", node.system_id, node.status));
    }
    let overrides: Vec<&ImportedNode> = nodes.iter().filter(|n| n.credentials.is_some()).collect();
    if !overrides.is_empty() {
        out.push_str(&format!(
            "# BMC logins other than the site's default: add to spec.power.overrides of site {}\n\
             # (the logins are in Vault at these paths, as fields `user` and `pass`):\n",
            options.site
        ));
        for node in overrides {
            out.push_str(&format!(
                "#   - {{match: {{ipmiIp: {}}}, credentials: {{vault: {}}}}}\n",
                node.ipmi_ip,
                node.credentials.as_deref().unwrap_or_default()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(hostname: &str, address: Option<&str>, user: &str, pass: &str) -> Found {
        Found {
            hostname: hostname.into(),
            system_id: format!("sid-{hostname}"),
            status: "Deployed".into(),
            power_address: address.map(String::from),
            boot_mac: Some("b0:7b:25:00:00:01".into()),
            login: Some((user.into(), Secret::new(pass))),
        }
    }

    fn options() -> ImportOptions {
        ImportOptions {
            site: "dc1".into(),
            group: "dc1-imported".into(),
            profile: "gpu-default".into(),
            sku: "mi300x.192g.8gpu".into(),
            gpus: 8,
            credentials_prefix: "kv/maas-sites/dc1/power/imported".into(),
            source: "MAAS http://10.0.0.1:5240/MAAS/ (site dc1)".into(),
        }
    }

    #[test]
    fn logins_become_vault_references_never_values() {
        let default = Secret::new("calvin");
        let machines = [
            found("gpu2", Some("10.176.16.12"), "root", "s3cret-other"),
            found("gpu1", Some("10.176.16.11"), "root", "calvin"),
            found("manual1", None, "", ""),
            found("byname", Some("bmc.example"), "root", "calvin"),
        ];
        let (report, logins) = render(&machines, Some(("root", &default)), &options()).unwrap();
        assert!(!report.manifest.contains("s3cret-other") && !report.manifest.contains("calvin"));
        assert_eq!(
            report
                .nodes
                .iter()
                .map(|n| n.hostname.as_str())
                .collect::<Vec<_>>(),
            ["gpu1", "gpu2"]
        );
        assert_eq!(report.nodes[0].credentials, None, "the site default");
        assert_eq!(
            report.nodes[1].credentials.as_deref(),
            Some("kv/maas-sites/dc1/power/imported/gpu2")
        );
        assert_eq!(
            logins.keys().collect::<Vec<_>>(),
            ["kv/maas-sites/dc1/power/imported/gpu2"]
        );
        assert!(report.manifest.contains(
            "#   - {match: {ipmiIp: 10.176.16.12}, credentials: {vault: kv/maas-sites/dc1/power/imported/gpu2}}"
        ));
        assert!(report.manifest.contains(
            "    - {hostname: gpu1, bmc: {ipmiIp: 10.176.16.11}, pxeMac: b0:7b:25:00:00:01}  # sid-gpu1 Deployed\n"
        ));
        let skipped: Vec<&str> = report.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(
            skipped,
            [
                "its BMC address \"bmc.example\" is not an IPv4 address",
                "MAAS has no BMC address for it (manual power?)"
            ]
        );
    }

    #[test]
    fn a_value_the_schema_refuses_is_an_error_naming_the_flags() {
        let mut bad = options();
        bad.gpus = 65;
        let err = render(&[], None, &bad).unwrap_err();
        assert!(
            err.to_string()
                .contains("fix --site, --profile, --sku, --gpus"),
            "{err}"
        );
    }
}
