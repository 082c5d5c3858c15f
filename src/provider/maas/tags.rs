//! Tags (MAAS src/maasserver/api/tags.py, models/tag.py): operators and tools label machines
//! (a GPU SKU, a rack) and select them by tag.
//!
//! A tag is addressed by name (`tags/{name}/`). Creating, updating and changing its machines
//! need an admin (403 otherwise). A tag with a `definition` (an XPath over the commissioning
//! hardware details) is applied by MAAS itself; `update_nodes` adds or removes machines by hand
//! and answers `{"added": n, "removed": m}`.

use serde::{Deserialize, Serialize};

use super::client::MaasClient;
use super::de::null_default;
use super::error::MaasError;
use super::machines::Machine;
use super::transport::{Call, Params};

/// A tag (`name`, `definition`, `comment`, `kernel_opts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub definition: String,
    #[serde(default, deserialize_with = "null_default")]
    pub comment: String,
    #[serde(default, deserialize_with = "null_default")]
    pub kernel_opts: String,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

/// `POST tags/` and `PUT tags/{name}/`; omitted fields are unchanged on update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagParams {
    /// Letters, digits, `-` and `_` (`^[a-zA-Z0-9_-]+$`).
    pub name: Option<String>,
    pub comment: Option<String>,
    /// An XPath expression over the hardware details; MAAS tags matching machines itself.
    pub definition: Option<String>,
    pub kernel_opts: Option<String>,
}

impl TagParams {
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .opt_text("name", self.name.as_deref())
            .opt_text("comment", self.comment.as_deref())
            .opt_text("definition", self.definition.as_deref())
            .opt_text("kernel_opts", self.kernel_opts.as_deref());
        params
    }
}

/// What `update_nodes` changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagNodesChanged {
    pub added: u64,
    pub removed: u64,
}

impl MaasClient {
    /// `GET tags/`.
    pub async fn list_tags(&self) -> Result<Vec<Tag>, MaasError> {
        self.transport()
            .json(Call::get("list_tags", &["tags"]).expects("a list of tags"))
            .await
    }

    /// `GET tags/{name}/`. 404 `No Tag matches the given query.`
    pub async fn read_tag(&self, name: &str) -> Result<Tag, MaasError> {
        self.transport()
            .json(Call::get("read_tag", &["tags", name]).expects("a tag"))
            .await
    }

    /// `POST tags/` (admin). A taken or malformed name is a 400 with form errors.
    pub async fn create_tag(&self, params: &TagParams) -> Result<Tag, MaasError> {
        self.transport()
            .json(
                Call::post("create_tag", &["tags"])
                    .params(params.params())
                    .expects("a tag"),
            )
            .await
    }

    /// `PUT tags/{name}/` (admin): a new definition, comment or name.
    pub async fn update_tag(&self, name: &str, params: &TagParams) -> Result<Tag, MaasError> {
        self.transport()
            .json(
                Call::put("update_tag", &["tags", name])
                    .params(params.params())
                    .expects("a tag"),
            )
            .await
    }

    /// `POST tags/{name}/?op=update_nodes` (admin): tag and untag machines by system id.
    pub async fn update_tag_nodes(
        &self,
        name: &str,
        add: &[&str],
        remove: &[&str],
    ) -> Result<TagNodesChanged, MaasError> {
        let mut params = Params::new();
        params.each("add", add).each("remove", remove);
        self.transport()
            .json(
                Call::post("update_tag_nodes", &["tags", name])
                    .op("update_nodes")
                    .params(params)
                    .expects("the counts of machines added and removed"),
            )
            .await
    }

    /// `GET tags/{name}/?op=machines`: the machines with the tag.
    pub async fn tag_machines(&self, name: &str) -> Result<Vec<Machine>, MaasError> {
        self.transport()
            .json_array(
                Call::get("tag_machines", &["tags", name])
                    .op("machines")
                    .expects("a list of machines"),
            )
            .await
    }
}
