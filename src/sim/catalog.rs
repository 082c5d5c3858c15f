//! Tags, zones and resource pools (MAAS api/tags.py, api/zones.py, api/resourcepools.py,
//! models/tag.py): what operators label and group machines with.

use serde::Serialize;

/// A tag (`name`, `definition`, `comment`, `kernel_opts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub name: String,
    pub definition: String,
    pub comment: String,
    pub kernel_opts: String,
}

#[derive(Debug, Serialize)]
pub struct TagView<'a> {
    pub name: &'a str,
    pub definition: &'a str,
    pub comment: &'a str,
    pub kernel_opts: &'a str,
    pub resource_uri: String,
}

impl Tag {
    pub fn view(&self) -> TagView<'_> {
        TagView {
            name: &self.name,
            definition: &self.definition,
            comment: &self.comment,
            kernel_opts: &self.kernel_opts,
            resource_uri: format!("/MAAS/api/2.0/tags/{}/", self.name),
        }
    }

    /// `Tag._tag_name_regex`: `^[a-zA-Z0-9_-]+$`.
    pub fn valid_name(name: &str) -> bool {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }
}

/// Zone or resource pool: `DISPLAYED_ZONE_FIELDS` / `DISPLAYED_RESOURCEPOOL_FIELDS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub id: u64,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlacementView {
    pub name: String,
    pub description: String,
    pub id: u64,
    pub resource_uri: String,
}

impl Placement {
    /// A zone renders its *name* in `resource_uri` (`/MAAS/api/2.0/zones/default/`).
    pub fn zone_view(&self) -> PlacementView {
        PlacementView {
            name: self.name.clone(),
            description: self.description.clone(),
            id: self.id,
            resource_uri: format!("/MAAS/api/2.0/zones/{}/", self.name),
        }
    }

    /// A pool renders its id at the singular route (`/MAAS/api/2.0/resourcepool/0/`).
    pub fn pool_view(&self) -> PlacementView {
        PlacementView {
            name: self.name.clone(),
            description: self.description.clone(),
            id: self.id,
            resource_uri: format!("/MAAS/api/2.0/resourcepool/{}/", self.id),
        }
    }
}
