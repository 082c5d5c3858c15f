//! Zones and resource pools (MAAS src/maasserver/api/zones.py, api/resourcepools.py): where a
//! machine sits physically and which pool of machines it belongs to.
//!
//! Both render `{id, name, description}` plus `resource_uri`; a zone is addressed by name
//! (`zones/{name}/`), a pool by id at the singular route `resourcepool/{id}/`. Creating one
//! needs an admin (403 otherwise); a taken name is a 400 with form errors. A machine joins
//! one through `update_machine`'s `zone`/`pool`.

use serde::{Deserialize, Serialize};

use super::client::MaasClient;
use super::de::null_default;
use super::error::MaasError;
use super::transport::{Call, Params};

/// A zone or resource pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub id: i64,
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

/// `POST <collection>/` with a name and an optional description (admin).
fn create(
    operation: &'static str,
    collection: &str,
    name: &str,
    description: Option<&str>,
    expects: &'static str,
) -> Call {
    let mut params = Params::new();
    params
        .text("name", name)
        .opt_text("description", description);
    Call::post(operation, &[collection])
        .params(params)
        .expects(expects)
}

impl MaasClient {
    /// `GET zones/`.
    pub async fn list_zones(&self) -> Result<Vec<Placement>, MaasError> {
        self.transport()
            .json(Call::get("list_zones", &["zones"]).expects("a list of zones"))
            .await
    }

    /// `GET zones/{name}/`.
    pub async fn read_zone(&self, name: &str) -> Result<Placement, MaasError> {
        self.transport()
            .json(Call::get("read_zone", &["zones", name]).expects("a zone"))
            .await
    }

    /// `POST zones/` (admin).
    pub async fn create_zone(
        &self,
        name: &str,
        description: Option<&str>,
    ) -> Result<Placement, MaasError> {
        self.transport()
            .json(create("create_zone", "zones", name, description, "a zone"))
            .await
    }

    /// `GET resourcepools/`.
    pub async fn list_resource_pools(&self) -> Result<Vec<Placement>, MaasError> {
        self.transport()
            .json(
                Call::get("list_resource_pools", &["resourcepools"])
                    .expects("a list of resource pools"),
            )
            .await
    }

    /// `GET resourcepool/{id}/`.
    pub async fn read_resource_pool(&self, id: i64) -> Result<Placement, MaasError> {
        let id = id.to_string();
        self.transport()
            .json(
                Call::get("read_resource_pool", &["resourcepool", &id]).expects("a resource pool"),
            )
            .await
    }

    /// `POST resourcepools/` (admin).
    pub async fn create_resource_pool(
        &self,
        name: &str,
        description: Option<&str>,
    ) -> Result<Placement, MaasError> {
        self.transport()
            .json(create(
                "create_resource_pool",
                "resourcepools",
                name,
                description,
                "a resource pool",
            ))
            .await
    }
}
