//! Vendor capability profiles (seed 003 "Compatibility and Vendor Quirks"): where a BMC keeps
//! its virtual media (under the Manager or under the ComputerSystem), which values and extra
//! properties its one-time boot override takes, whether its PATCHes need `If-Match`, and how
//! long it stays unreliable after a host reset.
//!
//! A profile only orders and parameterises what the client does; the client still follows
//! the links the BMC returns, so a firmware that moved its virtual media (iDRAC 6.x moved it
//! from the Manager to the System) works with either profile. The vendor comes from the
//! server's record when the operator set it, else from the service root (`Vendor`, `Oem`) or
//! the system's `Manufacturer`.

use std::time::Duration;

use serde_json::Value as Json;

/// The BMC families with a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Vendor {
    /// Dell iDRAC 8/9.
    Dell,
    /// HPE iLO 5/6.
    Hpe,
    /// Lenovo XClarity Controller.
    Lenovo,
    /// Supermicro X11–X13 BMCs.
    Supermicro,
    /// Any other DMTF Redfish service.
    Generic,
}

impl Vendor {
    pub const ALL: [Vendor; 5] = [
        Vendor::Dell,
        Vendor::Hpe,
        Vendor::Lenovo,
        Vendor::Supermicro,
        Vendor::Generic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Dell => "dell",
            Vendor::Hpe => "hpe",
            Vendor::Lenovo => "lenovo",
            Vendor::Supermicro => "supermicro",
            Vendor::Generic => "generic",
        }
    }

    /// The operator's spelling (`servers.vendor`): a name or a common alias.
    pub fn parse(text: &str) -> Option<Vendor> {
        match text.trim().to_ascii_lowercase().as_str() {
            "dell" | "idrac" | "dell inc." => Some(Vendor::Dell),
            "hpe" | "hp" | "ilo" => Some(Vendor::Hpe),
            "lenovo" | "xcc" => Some(Vendor::Lenovo),
            "supermicro" | "smc" => Some(Vendor::Supermicro),
            "generic" | "dmtf" => Some(Vendor::Generic),
            _ => None,
        }
    }

    /// Recognises the vendor from the service root and the system resource.
    pub fn detect(root: &Json, system: &Json) -> Vendor {
        let mut names: Vec<String> = Vec::new();
        if let Some(v) = root["Vendor"].as_str() {
            names.push(v.to_owned());
        }
        if let Some(oem) = root["Oem"].as_object() {
            names.extend(oem.keys().cloned());
        }
        if let Some(m) = system["Manufacturer"].as_str() {
            names.push(m.to_owned());
        }
        names
            .iter()
            .find_map(|name| {
                let lower = name.to_ascii_lowercase();
                if lower.starts_with("dell") {
                    Some(Vendor::Dell)
                } else if lower == "hpe" || lower == "hp" || lower.starts_with("hewlett") {
                    Some(Vendor::Hpe)
                } else if lower.starts_with("lenovo") {
                    Some(Vendor::Lenovo)
                } else if lower.starts_with("supermicro") {
                    Some(Vendor::Supermicro)
                } else {
                    None
                }
            })
            .unwrap_or(Vendor::Generic)
    }

    pub fn profile(self) -> &'static VendorProfile {
        PROFILES
            .iter()
            .find(|p| p.vendor == self)
            .expect("every vendor has a profile")
    }
}

impl std::fmt::Display for Vendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a BMC keeps its virtual media collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaLocation {
    /// `Managers/{id}/VirtualMedia` (Redfish before 2021.1; iLO, XCC, Supermicro, older iDRAC).
    Managers,
    /// `Systems/{id}/VirtualMedia` (Redfish 2021.1 and later; iDRAC 6.x, sushy-tools).
    Systems,
}

/// When PATCH requests carry `If-Match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMatch {
    /// Only after the BMC answered 428 Precondition Required (or 412) without one.
    WhenAsked,
    /// Always, with the ETag of the read before the write.
    Always,
}

/// The one-time boot override as this BMC spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootOverride {
    /// `BootSourceOverrideTarget` value that boots the virtual CD.
    pub cd_target: &'static str,
    /// `BootSourceOverrideEnabled` value of a one-time override.
    pub once: &'static str,
    /// `BootSourceOverrideMode` to send with the target (some BMCs reset the mode to Legacy
    /// when it is left out).
    pub mode: Option<&'static str>,
}

/// What the client adapts per vendor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendorProfile {
    pub vendor: Vendor,
    /// Where to look for virtual media first; the other place is the fallback.
    pub media_location: MediaLocation,
    pub boot: BootOverride,
    pub if_match: IfMatch,
    /// After a host reset, how long the BMC's API is left alone (its virtual-media and
    /// boot-override services restart with the host on several BMCs).
    pub settle_after_reset: Duration,
}

const DMTF_BOOT: BootOverride = BootOverride {
    cd_target: "Cd",
    once: "Once",
    mode: None,
};

static PROFILES: [VendorProfile; 5] = [
    VendorProfile {
        vendor: Vendor::Dell,
        // iDRAC 9 firmware 6.x serves Systems/System.Embedded.1/VirtualMedia; older firmware
        // Managers/iDRAC.Embedded.1/VirtualMedia. Links decide; this only orders the search.
        media_location: MediaLocation::Systems,
        boot: DMTF_BOOT,
        if_match: IfMatch::WhenAsked,
        settle_after_reset: Duration::from_secs(15),
    },
    VendorProfile {
        vendor: Vendor::Hpe,
        media_location: MediaLocation::Managers,
        boot: DMTF_BOOT,
        if_match: IfMatch::WhenAsked,
        settle_after_reset: Duration::from_secs(10),
    },
    VendorProfile {
        vendor: Vendor::Lenovo,
        media_location: MediaLocation::Managers,
        boot: DMTF_BOOT,
        // XCC refuses PATCHes of the system without If-Match (428).
        if_match: IfMatch::Always,
        settle_after_reset: Duration::from_secs(20),
    },
    VendorProfile {
        vendor: Vendor::Supermicro,
        media_location: MediaLocation::Managers,
        // Supermicro exposes virtual media to the host as a USB CD drive and needs the mode
        // spelled out with the target.
        boot: BootOverride {
            cd_target: "UsbCd",
            once: "Once",
            mode: Some("UEFI"),
        },
        if_match: IfMatch::WhenAsked,
        settle_after_reset: Duration::from_secs(30),
    },
    VendorProfile {
        vendor: Vendor::Generic,
        media_location: MediaLocation::Systems,
        boot: DMTF_BOOT,
        if_match: IfMatch::WhenAsked,
        settle_after_reset: Duration::ZERO,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vendors_are_recognised_from_the_root_or_the_system() {
        let none = json!({});
        assert_eq!(
            Vendor::detect(&json!({"Vendor": "Dell"}), &none),
            Vendor::Dell
        );
        assert_eq!(
            Vendor::detect(&json!({"Oem": {"Hpe": {}}}), &none),
            Vendor::Hpe
        );
        assert_eq!(
            Vendor::detect(&json!({"Oem": {"Hp": {}}}), &none),
            Vendor::Hpe
        );
        assert_eq!(
            Vendor::detect(&none, &json!({"Manufacturer": "Lenovo"})),
            Vendor::Lenovo
        );
        assert_eq!(
            Vendor::detect(&json!({"Vendor": "Supermicro"}), &none),
            Vendor::Supermicro
        );
        assert_eq!(
            Vendor::detect(
                &json!({"Vendor": "Contoso"}),
                &json!({"Manufacturer": "Sushy Emulator"})
            ),
            Vendor::Generic
        );
        for vendor in Vendor::ALL {
            assert_eq!(Vendor::parse(vendor.as_str()), Some(vendor));
            assert_eq!(vendor.profile().vendor, vendor);
        }
        assert_eq!(Vendor::parse("iDRAC"), Some(Vendor::Dell));
        assert_eq!(Vendor::parse("acme"), None);
        assert_eq!(Vendor::Supermicro.profile().boot.cd_target, "UsbCd");
    }
}
