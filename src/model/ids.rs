//! Typed names of fleet entities (DESIGN.md §2): a site, a profile, a node group, a hostname,
//! and the node id that pairs a site with a hostname (hostnames are unique per site, seed 000
//! §3.3: "site-scoped and host-keyed by site_id + hostname").

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self::new(value)
            }
        }
    };
}

name_type!(
    /// `metadata.name` of a Site document (e.g. `dc1`).
    SiteName
);
name_type!(
    /// `metadata.name` of a Profile document; profile names are unique across the fleet.
    ProfileName
);
name_type!(
    /// `metadata.name` of a NodeGroup document.
    GroupName
);
name_type!(
    /// A node's hostname (an RFC 1123 label such as `c07u43`).
    Hostname
);
name_type!(
    /// A hardware SKU id such as `mi300x.192g.8gpu` (seed 000 §4.1 `sku_id`).
    Sku
);

/// A node's identity in the fleet: its site and its hostname. Displayed and serialised as
/// `site/hostname`; ordered by site, then hostname.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId {
    pub site: SiteName,
    pub hostname: Hostname,
}

impl NodeId {
    pub fn new(site: impl Into<String>, hostname: impl Into<String>) -> Self {
        Self {
            site: SiteName::new(site),
            hostname: Hostname::new(hostname),
        }
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.site, self.hostname)
    }
}

impl Serialize for NodeId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Read back from `site/hostname` (site names never contain `/`).
impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        match text.split_once('/') {
            Some((site, hostname)) if !site.is_empty() && !hostname.is_empty() => {
                Ok(NodeId::new(site, hostname))
            }
            _ => Err(serde::de::Error::custom(format!(
                "`{text}` is not a node id: expected site/hostname"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_order_by_site_then_hostname() {
        let mut ids = [
            NodeId::new("dc2", "a01"),
            NodeId::new("dc1", "b01"),
            NodeId::new("dc1", "a02"),
        ];
        ids.sort();
        let shown: Vec<String> = ids.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["dc1/a02", "dc1/b01", "dc2/a01"]);
        assert_eq!(
            serde_json::to_string(&ids[0]).unwrap(),
            "\"dc1/a02\"".to_string()
        );
        let back: NodeId = serde_json::from_str("\"dc1/a02\"").unwrap();
        assert_eq!(back, ids[0]);
        assert!(serde_json::from_str::<NodeId>("\"dc1\"").is_err());
        assert!(serde_json::from_str::<NodeId>("\"/a02\"").is_err());
    }
}
