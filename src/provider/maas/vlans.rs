//! Fabrics and VLANs (MAAS src/maasserver/api/fabrics.py, api/vlans.py, forms/vlan.py; seed
//! 000 §4.3 ApplyRoCEPhase2: a RoCE port sits on the fabric commissioning gave it).
//!
//! Commissioning puts every NIC it finds unlinked on a new fabric with its own untagged VLAN
//! (metadataserver/builtin_scripts/network.py `guess_vlan_for_interface`), so a RoCE port is
//! usually alone on `fabric-N`. A subnet belongs to one VLAN and `link_subnet` only offers the
//! subnets of the interface's VLAN: whoever links the port must know its VLAN, which is why
//! these types sit below subnets and interfaces.
//!
//! Routes: `fabrics/`, `fabrics/{id}/`, `fabrics/{id}/vlans/`, `fabrics/{id}/vlans/{vid}/`.
//! A VLAN is addressed by its fabric and VID; its database `id` (what subnets and interface
//! updates take as `vlan`) is another number.

use serde::{Deserialize, Serialize};

use super::client::MaasClient;
use super::de::{empty_as_none, null_default};
use super::error::MaasError;
use super::transport::{Call, Params};

/// A VLAN as MAAS renders it (alone, in a fabric, in interfaces and subnets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vlan {
    /// The database id (`vlan=` of subnets and interface updates), not the VID.
    pub id: i64,
    /// `untagged` for VID 0, else the VID or the operator's name.
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default)]
    pub vid: i64,
    /// The fabric's name (`fabric-3`).
    #[serde(default, deserialize_with = "null_default")]
    pub fabric: String,
    #[serde(default)]
    pub fabric_id: Option<i64>,
    #[serde(default)]
    pub mtu: i64,
    #[serde(default)]
    pub dhcp_on: bool,
    #[serde(default)]
    pub external_dhcp: Option<String>,
    /// The system id of the rack controller serving it.
    #[serde(default)]
    pub primary_rack: Option<String>,
    #[serde(default)]
    pub secondary_rack: Option<String>,
    #[serde(default)]
    pub relay_vlan: Option<Box<Vlan>>,
    /// The space name, or `undefined`.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub space: Option<String>,
}

/// A fabric with its VLANs (`DISPLAYED_FABRIC_FIELDS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fabric {
    pub id: i64,
    pub name: String,
    #[serde(default)]
    pub class_type: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub vlans: Vec<Vlan>,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

impl Fabric {
    /// The untagged VLAN (VID 0) every fabric has.
    pub fn default_vlan(&self) -> Option<&Vlan> {
        self.vlans.iter().find(|v| v.vid == 0)
    }
}

/// `PUT fabrics/{id}/`: omitted fields are unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateFabricParams {
    pub name: Option<String>,
    pub description: Option<String>,
    pub class_type: Option<String>,
}

/// `PUT fabrics/{id}/vlans/{vid}/` (admin): omitted fields are unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateVlanParams {
    pub name: Option<String>,
    pub description: Option<String>,
    /// At least 552 (`forms/vlan.py`).
    pub mtu: Option<u32>,
    /// MAAS refuses it without a primary rack and a dynamic range.
    pub dhcp_on: Option<bool>,
    /// A space name (an empty string clears it).
    pub space: Option<String>,
}

impl MaasClient {
    /// `GET fabrics/`: every fabric with its VLANs.
    pub async fn list_fabrics(&self) -> Result<Vec<Fabric>, MaasError> {
        self.transport()
            .json(Call::get("list_fabrics", &["fabrics"]).expects("a list of fabrics"))
            .await
    }

    /// `GET fabrics/{id}/`. 404 `No Fabric matches the given query.`
    pub async fn read_fabric(&self, fabric_id: i64) -> Result<Fabric, MaasError> {
        let id = fabric_id.to_string();
        self.transport()
            .json(Call::get("read_fabric", &["fabrics", &id]).expects("a fabric"))
            .await
    }

    /// `PUT fabrics/{id}/` (admin).
    pub async fn update_fabric(
        &self,
        fabric_id: i64,
        params: &UpdateFabricParams,
    ) -> Result<Fabric, MaasError> {
        let id = fabric_id.to_string();
        let mut form = Params::new();
        form.opt_text("name", params.name.as_deref())
            .opt_text("description", params.description.as_deref())
            .opt_text("class_type", params.class_type.as_deref());
        self.transport()
            .json(
                Call::put("update_fabric", &["fabrics", &id])
                    .params(form)
                    .expects("a fabric"),
            )
            .await
    }

    /// `GET fabrics/{id}/vlans/`.
    pub async fn list_vlans(&self, fabric_id: i64) -> Result<Vec<Vlan>, MaasError> {
        let id = fabric_id.to_string();
        self.transport()
            .json(Call::get("list_vlans", &["fabrics", &id, "vlans"]).expects("a list of VLANs"))
            .await
    }

    /// `GET fabrics/{id}/vlans/{vid}/`.
    pub async fn read_vlan(&self, fabric_id: i64, vid: u16) -> Result<Vlan, MaasError> {
        let (id, vid) = (fabric_id.to_string(), vid.to_string());
        self.transport()
            .json(Call::get("read_vlan", &["fabrics", &id, "vlans", &vid]).expects("a VLAN"))
            .await
    }

    /// `PUT fabrics/{id}/vlans/{vid}/` (admin).
    pub async fn update_vlan(
        &self,
        fabric_id: i64,
        vid: u16,
        params: &UpdateVlanParams,
    ) -> Result<Vlan, MaasError> {
        let (id, vid) = (fabric_id.to_string(), vid.to_string());
        let mut form = Params::new();
        form.opt_text("name", params.name.as_deref())
            .opt_text("description", params.description.as_deref())
            .opt_number("mtu", params.mtu)
            .opt_flag("dhcp_on", params.dhcp_on)
            .opt_text("space", params.space.as_deref());
        self.transport()
            .json(
                Call::put("update_vlan", &["fabrics", &id, "vlans", &vid])
                    .params(form)
                    .expects("a VLAN"),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fabric_names_its_untagged_vlan() {
        let fabric: Fabric = serde_json::from_value(serde_json::json!({
            "id": 3, "name": "fabric-3", "class_type": null,
            "vlans": [
                {"id": 5009, "name": "42", "vid": 42, "fabric": "fabric-3", "fabric_id": 3, "mtu": 9000},
                {"id": 5008, "name": "untagged", "vid": 0, "fabric": "fabric-3", "fabric_id": 3, "mtu": 1500}
            ],
            "resource_uri": "/MAAS/api/2.0/fabrics/3/"
        }))
        .unwrap();
        assert_eq!(fabric.default_vlan().map(|v| v.id), Some(5008));
    }
}
