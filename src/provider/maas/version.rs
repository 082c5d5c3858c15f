//! Version and whoami (API_REFERENCE §2.5, §5.1, §5.3; seed 000 §4.3 LoadSiteConfig "validate
//! MAAS reachable").
//!
//! `version/` is anonymous but this client signs it anyway (MAAS accepts signed anonymous
//! requests); `users/?op=whoami` is the cheapest call that proves the API key works.

use serde::{Deserialize, Serialize};

use super::client::MaasClient;
use super::de::null_default;
use super::error::MaasError;
use super::transport::Call;

/// `GET version/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// `3.6.1`, `3.5.0~beta1`, `2.5.0 from source`, or `None` when MAAS does not know.
    pub version: String,
    /// Always `""` in 3.x (2.x sent `git+<sha>`).
    #[serde(default, deserialize_with = "null_default")]
    pub subversion: String,
    #[serde(default, deserialize_with = "null_default")]
    pub capabilities: Vec<String>,
}

impl Version {
    /// `(major, minor)` from the leading digits of `version`.
    pub fn major_minor(&self) -> Option<(u32, u32)> {
        let mut parts = self.version.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    }

    /// Hardware sync exists from MAAS 3.2 (`None`: the version is not known).
    pub fn supports_hardware_sync(&self) -> Option<bool> {
        self.major_minor().map(|version| version >= (3, 2))
    }

    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// `GET users/?op=whoami`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whoami {
    pub username: String,
    #[serde(default, deserialize_with = "null_default")]
    pub email: String,
    #[serde(default)]
    pub is_superuser: bool,
    #[serde(default)]
    pub is_local: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

impl MaasClient {
    /// `GET version/`.
    pub async fn version(&self) -> Result<Version, MaasError> {
        self.transport()
            .json(Call::get("version", &["version"]))
            .await
    }

    /// `GET users/?op=whoami`: who the API key belongs to (admin rights are needed for most
    /// lifecycle operations).
    pub async fn whoami(&self) -> Result<Whoami, MaasError> {
        self.transport()
            .json(Call::get("whoami", &["users"]).op("whoami"))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(text: &str) -> Version {
        Version {
            version: text.to_owned(),
            subversion: String::new(),
            capabilities: vec!["authenticate-api".into()],
        }
    }

    #[test]
    fn major_minor_from_maas_version_strings() {
        assert_eq!(version("3.6.1").major_minor(), Some((3, 6)));
        assert_eq!(version("3.5.0~beta1").major_minor(), Some((3, 5)));
        assert_eq!(version("2.5.0 from source").major_minor(), Some((2, 5)));
        assert_eq!(version("None").major_minor(), None);
        assert_eq!(version("3.2.0").supports_hardware_sync(), Some(true));
        assert_eq!(version("3.1.9").supports_hardware_sync(), Some(false));
        assert!(version("3.6.1").has_capability("authenticate-api"));
    }
}
