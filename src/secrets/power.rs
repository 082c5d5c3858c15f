//! Power-credential selection (seed 000 §3.2.1): an exact active override by PXE MAC, then by
//! IPMI IP, then by hostname, else the site default. Pure: the executor maps the manifest's
//! site/node onto these small types and reads the chosen reference at stage time.

use std::net::IpAddr;

use serde::Serialize;

use super::{Secret, SecretRef};

/// What an override matches on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OverrideSelector {
    PxeMac(String),
    IpmiIp(String),
    Hostname(String),
}

impl OverrideSelector {
    /// Selection priority: lower wins.
    fn rank(&self) -> u8 {
        match self {
            OverrideSelector::PxeMac(_) => 0,
            OverrideSelector::IpmiIp(_) => 1,
            OverrideSelector::Hostname(_) => 2,
        }
    }

    fn matches(&self, target: &PowerTarget<'_>) -> bool {
        match self {
            OverrideSelector::PxeMac(mac) => target
                .pxe_mac
                .is_some_and(|t| normalise_mac(t) == normalise_mac(mac)),
            OverrideSelector::IpmiIp(ip) => target.ipmi_ip.is_some_and(|t| same_ip(t, ip)),
            OverrideSelector::Hostname(host) => target.hostname.eq_ignore_ascii_case(host),
        }
    }
}

/// `aa:bb:…`, `AA-BB-…` and `aabb.ccdd.eeff` are the same MAC.
fn normalise_mac(mac: &str) -> String {
    mac.chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn same_ip(a: &str, b: &str) -> bool {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// One override row (000 §3.2.1 `maas_power_credential_overrides`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PowerOverride {
    pub selector: OverrideSelector,
    pub credentials: SecretRef,
    /// Only active overrides are considered.
    pub active: bool,
}

/// The node whose BMC we log into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerTarget<'a> {
    pub hostname: &'a str,
    pub ipmi_ip: Option<&'a str>,
    pub pxe_mac: Option<&'a str>,
}

/// Where the chosen credentials came from (for diagnostics and audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    Override(OverrideSelector),
    SiteDefault,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PowerCredentialChoice {
    pub credentials: SecretRef,
    pub source: CredentialSource,
}

/// Choose the credentials reference for a node.
pub fn resolve_power_credentials(
    site_default: &SecretRef,
    overrides: &[PowerOverride],
    target: &PowerTarget<'_>,
) -> PowerCredentialChoice {
    overrides
        .iter()
        .filter(|o| o.active && o.selector.matches(target))
        .min_by_key(|o| o.selector.rank())
        .map(|o| PowerCredentialChoice {
            credentials: o.credentials.clone(),
            source: CredentialSource::Override(o.selector.clone()),
        })
        .unwrap_or_else(|| PowerCredentialChoice {
            credentials: site_default.clone(),
            source: CredentialSource::SiteDefault,
        })
}

/// A BMC login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerCredentials {
    pub user: String,
    pub pass: Secret,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(path: &str) -> SecretRef {
        SecretRef::new(path, None)
    }

    fn o(selector: OverrideSelector, path: &str) -> PowerOverride {
        PowerOverride {
            selector,
            credentials: r(path),
            active: true,
        }
    }

    #[test]
    fn selection_order_is_mac_then_ip_then_hostname_then_default() {
        let default = r("kv/dc1/power/default");
        let overrides = vec![
            o(OverrideSelector::Hostname("C07U43".into()), "kv/by-host"),
            o(OverrideSelector::IpmiIp("10.176.16.128".into()), "kv/by-ip"),
            o(
                OverrideSelector::PxeMac("AA-BB-CC-DD-EE-FF".into()),
                "kv/by-mac",
            ),
        ];
        let mut target = PowerTarget {
            hostname: "c07u43",
            ipmi_ip: Some("10.176.16.128"),
            pxe_mac: Some("aa:bb:cc:dd:ee:ff"),
        };
        let pick = |t: &PowerTarget<'_>| {
            resolve_power_credentials(&default, &overrides, t)
                .credentials
                .path
        };
        assert_eq!(pick(&target), "kv/by-mac");
        target.pxe_mac = None;
        assert_eq!(pick(&target), "kv/by-ip");
        target.ipmi_ip = Some("10.176.16.129");
        assert_eq!(pick(&target), "kv/by-host");
        target.hostname = "c07u44";
        let choice = resolve_power_credentials(&default, &overrides, &target);
        assert_eq!(choice.credentials, default);
        assert_eq!(choice.source, CredentialSource::SiteDefault);
    }

    #[test]
    fn inactive_overrides_are_ignored() {
        let default = r("kv/default");
        let mut ov = o(OverrideSelector::Hostname("h1".into()), "kv/h1");
        ov.active = false;
        let target = PowerTarget {
            hostname: "h1",
            ipmi_ip: None,
            pxe_mac: None,
        };
        assert_eq!(
            resolve_power_credentials(&default, &[ov], &target).source,
            CredentialSource::SiteDefault
        );
    }
}
