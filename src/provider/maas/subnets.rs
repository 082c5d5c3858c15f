//! Subnets (API_REFERENCE §5.20; seed 000 §4.3 ApplyRoCEPhase2: "create /31 subnet if
//! missing").

use serde::{Deserialize, Serialize};

use super::client::MaasClient;
use super::de::{empty_as_none, null_default};
use super::error::MaasError;
use super::transport::{Call, Params};
use super::vlans::Vlan;

/// A MAAS subnet (also embedded in interface links).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subnet {
    pub id: i64,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
    pub cidr: String,
    #[serde(default)]
    pub vlan: Option<Vlan>,
    /// The space name, or `"undefined"`.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub space: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub gateway_ip: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub dns_servers: Vec<String>,
    /// 0 disabled, 1 enabled, 2 RFC 2317.
    #[serde(default)]
    pub rdns_mode: i64,
    #[serde(default)]
    pub active_discovery: Option<bool>,
    #[serde(default)]
    pub allow_dns: Option<bool>,
    #[serde(default)]
    pub allow_proxy: Option<bool>,
    #[serde(default)]
    pub managed: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub disabled_boot_architectures: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

/// How a request names a subnet: by id, or by CIDR (MAAS's `cidr:` specifier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubnetRef {
    Id(i64),
    Cidr(String),
}

impl SubnetRef {
    pub(crate) fn to_param(&self) -> String {
        match self {
            SubnetRef::Id(id) => id.to_string(),
            SubnetRef::Cidr(cidr) => format!("cidr:{cidr}"),
        }
    }
}

/// `POST subnets/` (admin).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateSubnetParams {
    pub cidr: String,
    /// Defaults to the CIDR.
    pub name: Option<String>,
    pub description: Option<String>,
    /// The VLAN's database id (not its VID).
    pub vlan: Option<i64>,
    /// With `vid`, selects the VLAN when `vlan` is not given.
    pub fabric: Option<i64>,
    pub vid: Option<u16>,
    pub gateway_ip: Option<String>,
    /// Sent comma-separated.
    pub dns_servers: Vec<String>,
    pub managed: Option<bool>,
    pub allow_dns: Option<bool>,
    pub allow_proxy: Option<bool>,
    pub active_discovery: Option<bool>,
    pub rdns_mode: Option<u8>,
}

impl CreateSubnetParams {
    pub fn new(cidr: impl Into<String>) -> Self {
        Self {
            cidr: cidr.into(),
            ..Self::default()
        }
    }

    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .text("cidr", &self.cidr)
            .opt_text("name", self.name.as_deref())
            .opt_text("description", self.description.as_deref())
            .opt_number("vlan", self.vlan)
            .opt_number("fabric", self.fabric)
            .opt_number("vid", self.vid)
            .opt_text("gateway_ip", self.gateway_ip.as_deref())
            .comma_list("dns_servers", &self.dns_servers)
            .opt_flag("managed", self.managed)
            .opt_flag("allow_dns", self.allow_dns)
            .opt_flag("allow_proxy", self.allow_proxy)
            .opt_flag("active_discovery", self.active_discovery)
            .opt_number("rdns_mode", self.rdns_mode);
        params
    }
}

impl MaasClient {
    /// `GET subnets/`: every subnet.
    pub async fn list_subnets(&self) -> Result<Vec<Subnet>, MaasError> {
        self.transport()
            .json(Call::get("list_subnets", &["subnets"]))
            .await
    }

    /// `GET subnets/{id}/`.
    pub async fn read_subnet(&self, id: i64) -> Result<Subnet, MaasError> {
        let id = id.to_string();
        self.transport()
            .json(Call::get("read_subnet", &["subnets", &id]))
            .await
    }

    /// The subnet of `cidr`, if MAAS has one: `GET subnets/cidr:{cidr}/` (a subnet
    /// specifier, API_REFERENCE §5.20), `None` on its 404. MAAS routes a specifier's prefix
    /// length only when it has two or three digits (`/\d\d\d?`), so a shorter one (`/8`) is
    /// looked for in `GET subnets/`.
    pub async fn find_subnet_by_cidr(&self, cidr: &str) -> Result<Option<Subnet>, MaasError> {
        let (network, prefix) = cidr.split_once('/').unwrap_or((cidr, ""));
        if !(2..=3).contains(&prefix.len()) || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            let subnets = self.list_subnets().await?;
            return Ok(subnets.into_iter().find(|s| s.cidr == cidr));
        }
        let specifier = format!("cidr:{network}");
        match self
            .transport()
            .json(Call::get("read_subnet", &["subnets", &specifier, prefix]))
            .await
        {
            Ok(subnet) => Ok(Some(subnet)),
            Err(MaasError::NotFound { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// `POST subnets/` (admin). A duplicate CIDR is a 400 with form errors.
    pub async fn create_subnet(&self, params: &CreateSubnetParams) -> Result<Subnet, MaasError> {
        self.transport()
            .json(Call::post("create_subnet", &["subnets"]).params(params.params()))
            .await
    }
}
