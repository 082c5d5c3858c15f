//! A site (seed 000 §3.1, §3.2, §3.2.1, §3.6): one MAAS region controller with its connectivity,
//! secret references, power credentials, network wiring, deploy identity and reconcile policy.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::keyword::keyword_enum;
use super::{Hostname, MacAddr, ProfileName, Provenance, SecretRef, SiteName};

keyword_enum!(
    /// `spec.status` (seed 000 §3.5): a disabled site accepts no new onboarding; work in flight
    /// continues.
    SiteStatus {
        Active => "active",
        Disabled => "disabled",
    }
);

keyword_enum!(
    /// `spec.power.type`: how MAAS (or metalform directly) drives the BMCs of the site.
    PowerType {
        Ipmi => "ipmi",
        Redfish => "redfish",
    }
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Site {
    pub name: SiteName,
    /// The region code the site maps to (`region_code`).
    pub region: String,
    pub status: SiteStatus,
    pub maas: MaasEndpoint,
    pub power: Power,
    pub network: SiteNetwork,
    pub deploy: DeployIdentity,
    /// The profile nodes of this site get when they name none (seed 000 §3.7 default_profile_id).
    pub default_profile: Option<ProfileName>,
    pub reconcile: ReconcilePolicy,
    /// When the site's nodes may be disrupted (redeploy, release, erase, power off); empty:
    /// any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintenance_windows: Vec<super::MaintenanceWindow>,
    #[serde(skip)]
    pub provenance: Provenance,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaasEndpoint {
    /// The MAAS base URL, e.g. `https://10.176.46.1:5443/MAAS` (`api_base_url`).
    #[serde(serialize_with = "serialize_url", deserialize_with = "deserialize_url")]
    pub url: url::Url,
    /// `{token: consumer_key:token_key:token_secret}` in Vault.
    pub api_key: SecretRef,
    /// The operator accepted plain http to a MAAS that is not on this host
    /// (`maas.allowInsecureHttp`); written only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_http: bool,
}

/// Every JSON a site appears in (plans, the API, snapshots) shows the URL through the one
/// redaction path; validation refuses credentials in it, so this masks nothing in practice.
fn serialize_url<S: serde::Serializer>(url: &url::Url, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&crate::sanitize::redact::url(url.as_str()))
}

fn deserialize_url<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<url::Url, D::Error> {
    let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
    url::Url::parse(&text).map_err(serde::de::Error::custom)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Power {
    #[serde(rename = "type")]
    pub kind: PowerType,
    /// `{user, pass}` in Vault, used unless an override matches.
    pub default_credentials: SecretRef,
    /// Exceptions (old BMC firmware, break-glass credentials, staged rotation), in file order.
    pub overrides: Vec<PowerOverride>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PowerOverride {
    #[serde(rename = "match")]
    pub selector: PowerSelector,
    pub credentials: SecretRef,
}

/// What a power-credential override matches, exactly one of the three (seed 000 §3.2.1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PowerSelector {
    PxeMac(MacAddr),
    IpmiIp(Ipv4Addr),
    Hostname(Hostname),
}

impl PowerSelector {
    /// The manifest key of the selector (`pxeMac`, `ipmiIp`, `hostname`).
    pub fn key(&self) -> &'static str {
        match self {
            PowerSelector::PxeMac(_) => "pxeMac",
            PowerSelector::IpmiIp(_) => "ipmiIp",
            PowerSelector::Hostname(_) => "hostname",
        }
    }

    /// The matched value as text.
    pub fn value(&self) -> String {
        match self {
            PowerSelector::PxeMac(mac) => mac.to_string(),
            PowerSelector::IpmiIp(ip) => ip.to_string(),
            PowerSelector::Hostname(host) => host.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteNetwork {
    /// PXE interface on the MAAS server side (`pxe_iface`, e.g. `ens19`).
    pub pxe_iface: String,
    /// VLAN of the PXE network, 1–4094.
    pub pxe_vlan_vid: u16,
    /// PXE interface on the node side (`node_pxe_iface`, e.g. `eno8303`).
    pub node_pxe_iface: String,
    pub upstream_dns: Vec<Ipv4Addr>,
}

/// The one standard deploy identity of a site (seed 000 §3.6: site-scoped, not profile-scoped).
/// How it is set up on a node (password, sudo, SSH) is the profile's `deployUser` policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployIdentity {
    pub user: String,
    /// A password shared by the site's nodes: used only by profiles with `password: site`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretRef>,
    /// Where per-node passwords are kept (`password: perNode`): `<path>/<hostname>`, field
    /// `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_passwords: Option<SecretRef>,
    /// Public keys that may log in as the deploy user (metalform's own `--ssh-identity` among
    /// them, for the hardware-sync credentials push).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_keys: Vec<String>,
    /// Interface whose address is used to SSH to a deployed node (hardware-sync seed).
    pub ssh_iface: String,
}

/// How the reconciler treats nodes that leave git (DESIGN.md §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcilePolicy {
    /// When false (the default), a node removed from the manifests is left alone; when true it
    /// is decommissioned with the release policy recorded for it.
    pub prune: bool,
    /// The largest share of the site's nodes one pass may prune, in percent (at least one
    /// node); a pass that would prune more prunes none.
    #[serde(
        default = "default_max_prune_percent",
        skip_serializing_if = "is_default_max_prune_percent"
    )]
    pub max_prune_percent: u8,
}

/// Pruning more than a tenth of a site at once looks like a bad read, not a decision.
pub const DEFAULT_MAX_PRUNE_PERCENT: u8 = 10;

fn default_max_prune_percent() -> u8 {
    DEFAULT_MAX_PRUNE_PERCENT
}

fn is_default_max_prune_percent(percent: &u8) -> bool {
    *percent == DEFAULT_MAX_PRUNE_PERCENT
}

impl ReconcilePolicy {
    /// How many of `nodes` one pass may prune: the share, rounded down, but at least one.
    pub fn prune_allowance(&self, nodes: usize) -> usize {
        (nodes * usize::from(self.max_prune_percent) / 100).max(1)
    }
}

impl Site {
    /// The power credentials for a node, in the selection order of seed 000 §3.2.1: an exact
    /// override by PXE MAC, then by IPMI address, then by hostname, else the site default.
    pub fn power_credentials_for(
        &self,
        hostname: &Hostname,
        ipmi_ip: Ipv4Addr,
        pxe_mac: Option<MacAddr>,
    ) -> &SecretRef {
        let find = |wanted: &PowerSelector| {
            self.power
                .overrides
                .iter()
                .find(|o| &o.selector == wanted)
                .map(|o| &o.credentials)
        };
        pxe_mac
            .and_then(|mac| find(&PowerSelector::PxeMac(mac)))
            .or_else(|| find(&PowerSelector::IpmiIp(ipmi_ip)))
            .or_else(|| find(&PowerSelector::Hostname(hostname.clone())))
            .unwrap_or(&self.power.default_credentials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site_with_overrides() -> Site {
        let path = |p: &str| serde_json::json!({"path": p});
        serde_json::from_value(serde_json::json!({
            "name": "dc1", "region": "us-east-1", "status": "active",
            "maas": {"url": "http://10.0.0.1:5240/MAAS", "apiKey": path("kv/dc1/maas")},
            "power": {
                "type": "ipmi",
                "defaultCredentials": path("kv/dc1/power/default"),
                "overrides": [
                    {"match": {"hostname": "c07u43"}, "credentials": path("kv/by-host")},
                    {"match": {"ipmiIp": "10.176.16.128"}, "credentials": path("kv/by-ip")},
                    {"match": {"pxeMac": "aa:bb:cc:dd:ee:ff"}, "credentials": path("kv/by-mac")}
                ]
            },
            "network": {"pxeIface": "ens19", "pxeVlanVid": 46, "nodePxeIface": "eno8303",
                        "upstreamDns": []},
            "deploy": {"user": "hpcadmin", "password": path("kv/dc1/deploy"),
                       "sshIface": "eno8303"},
            "defaultProfile": "dc1-gpu",
            "reconcile": {"prune": false}
        }))
        .expect("a valid site")
    }

    #[test]
    fn power_credentials_are_chosen_by_mac_then_ipmi_address_then_hostname_then_default() {
        let site = site_with_overrides();
        let host = Hostname::new("c07u43");
        let other = Hostname::new("c07u44");
        let ip: Ipv4Addr = "10.176.16.128".parse().unwrap();
        let other_ip: Ipv4Addr = "10.176.16.129".parse().unwrap();
        let mac: MacAddr = "AA:BB:CC:DD:EE:FF".parse().unwrap();
        let pick = |h: &Hostname, ip, mac| site.power_credentials_for(h, ip, mac).path.clone();
        assert_eq!(pick(&host, ip, Some(mac)), "kv/by-mac");
        assert_eq!(pick(&host, ip, None), "kv/by-ip");
        assert_eq!(pick(&host, other_ip, None), "kv/by-host");
        assert_eq!(pick(&other, other_ip, None), "kv/dc1/power/default");
    }
}
