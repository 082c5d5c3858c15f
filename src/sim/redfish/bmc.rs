//! One simulated BMC: a ComputerSystem with power and a one-time boot override, its Manager,
//! virtual media slots, and the host's boot sequence. The resource layout follows the vendor
//! flavour (the same facts as the client's profiles in provider/redfish/profile.rs): where
//! the virtual media collection lives, slot names and media types, the boot target that
//! means "virtual CD", whether PATCHes need `If-Match`, and how long the BMC answers 503
//! after the host powered on.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value as Json, json};

use crate::provider::redfish::profile::Vendor;

/// The host's power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    On,
    Off,
}

impl Power {
    pub fn as_str(self) -> &'static str {
        match self {
            Power::On => "On",
            Power::Off => "Off",
        }
    }
}

/// A virtual media slot.
#[derive(Debug, Clone)]
pub struct Slot {
    pub id: String,
    pub name: &'static str,
    pub media_types: &'static [&'static str],
    pub image: Option<String>,
    pub inserted: bool,
    pub write_protected: bool,
    /// The image as downloaded at insert time (as sushy-tools and most BMCs fetch it).
    pub bytes: Option<std::sync::Arc<Vec<u8>>>,
}

impl Slot {
    fn new(id: &str, name: &'static str, media_types: &'static [&'static str]) -> Self {
        Self {
            id: id.to_owned(),
            name,
            media_types,
            image: None,
            inserted: false,
            write_protected: false,
            bytes: None,
        }
    }

    pub fn takes_cd(&self) -> bool {
        self.media_types.iter().any(|t| *t == "CD" || *t == "DVD")
    }
}

/// What the vendor flavour decides.
#[derive(Debug, Clone)]
pub struct Flavour {
    pub vendor: Vendor,
    pub system_id: String,
    pub manager_id: String,
    /// Virtual media under the System (true) or the Manager (false).
    pub media_under_system: bool,
    /// The manager also links the collection (sushy-tools does, pointing at the System's).
    pub manager_links_media: bool,
    pub boot_targets: &'static [&'static str],
    pub cd_target: &'static str,
    pub requires_if_match: bool,
    /// After the host powered on, the BMC answers 503 for this long (unscaled).
    pub settle_after_power_on: Duration,
    pub manufacturer: &'static str,
    pub root_vendor: Option<&'static str>,
    slots: Vec<Slot>,
}

const CD_DVD: &[&str] = &["CD", "DVD"];
const CD_DVD_USB: &[&str] = &["CD", "DVD", "USBStick"];
const FLOPPY_USB: &[&str] = &["Floppy", "USBStick"];
const USB: &[&str] = &["USBStick"];
const DMTF_TARGETS: &[&str] = &["None", "Pxe", "Cd", "Hdd", "BiosSetup", "UefiHttp"];

impl Flavour {
    /// The layout of `vendor`; `uuid` names generic systems the way sushy-tools does.
    pub fn of(vendor: Vendor, uuid: &str) -> Self {
        match vendor {
            Vendor::Dell => Flavour {
                vendor,
                system_id: "System.Embedded.1".into(),
                manager_id: "iDRAC.Embedded.1".into(),
                media_under_system: true,
                manager_links_media: false,
                boot_targets: DMTF_TARGETS,
                cd_target: "Cd",
                requires_if_match: false,
                settle_after_power_on: Duration::from_secs(10),
                manufacturer: "Dell Inc.",
                root_vendor: Some("Dell"),
                slots: vec![
                    Slot::new("1", "Virtual Optical Drive 1", CD_DVD_USB),
                    Slot::new("2", "Virtual Optical Drive 2", CD_DVD_USB),
                ],
            },
            Vendor::Hpe => Flavour {
                vendor,
                system_id: "1".into(),
                manager_id: "1".into(),
                media_under_system: false,
                manager_links_media: true,
                boot_targets: DMTF_TARGETS,
                cd_target: "Cd",
                requires_if_match: false,
                settle_after_power_on: Duration::from_secs(5),
                manufacturer: "HPE",
                root_vendor: Some("HPE"),
                slots: vec![
                    Slot::new("1", "Virtual Removable Media", FLOPPY_USB),
                    Slot::new("2", "Virtual CD/DVD", CD_DVD),
                ],
            },
            Vendor::Lenovo => Flavour {
                vendor,
                system_id: "1".into(),
                manager_id: "1".into(),
                media_under_system: false,
                manager_links_media: true,
                boot_targets: DMTF_TARGETS,
                cd_target: "Cd",
                requires_if_match: true,
                settle_after_power_on: Duration::from_secs(15),
                manufacturer: "Lenovo",
                root_vendor: Some("Lenovo"),
                slots: vec![
                    Slot::new("EXT1", "Remote Mount 1", CD_DVD_USB),
                    Slot::new("EXT2", "Remote Mount 2", CD_DVD_USB),
                ],
            },
            Vendor::Supermicro => Flavour {
                vendor,
                system_id: "1".into(),
                manager_id: "1".into(),
                media_under_system: false,
                manager_links_media: true,
                boot_targets: &["None", "Pxe", "Hdd", "UsbCd", "BiosSetup"],
                cd_target: "UsbCd",
                requires_if_match: false,
                settle_after_power_on: Duration::from_secs(20),
                manufacturer: "Supermicro",
                root_vendor: Some("Supermicro"),
                slots: vec![
                    Slot::new("CD1", "Virtual CD 1", CD_DVD),
                    Slot::new("USB1", "Virtual USB 1", USB),
                ],
            },
            // sushy-tools' layout: system and manager named by UUID, virtual media under the
            // system (linked from the manager too), a CD and a removable slot.
            Vendor::Generic => Flavour {
                vendor,
                system_id: uuid.to_owned(),
                manager_id: uuid.to_owned(),
                media_under_system: true,
                manager_links_media: true,
                boot_targets: &["Pxe", "Cd", "Hdd"],
                cd_target: "Cd",
                requires_if_match: false,
                settle_after_power_on: Duration::ZERO,
                manufacturer: "metalform simulator",
                root_vendor: None,
                slots: vec![
                    Slot::new("Cd", "Virtual CD", CD_DVD),
                    Slot::new("Floppy", "Virtual Removable Media", FLOPPY_USB),
                ],
            },
        }
    }

    pub fn system_path(&self) -> String {
        format!("/redfish/v1/Systems/{}", self.system_id)
    }

    pub fn manager_path(&self) -> String {
        format!("/redfish/v1/Managers/{}", self.manager_id)
    }

    pub fn media_path(&self) -> String {
        if self.media_under_system {
            format!("{}/VirtualMedia", self.system_path())
        } else {
            format!("{}/VirtualMedia", self.manager_path())
        }
    }
}

/// A power change in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingPower {
    pub to: Power,
    pub at: DateTime<Utc>,
    /// Off then on (a restart): `to` is Off first, then the host comes back.
    pub restart: bool,
}

/// The host's software, as far as the BMC can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostOs {
    /// Powered off.
    None,
    /// Booting the maintenance OS from CD1; it reports at `at`.
    Maintenance { at: DateTime<Utc> },
    /// The maintenance OS has reported (or stays silent): `outcome` for the log.
    MaintenanceDone { outcome: String },
    /// Booted from disk (the final OS).
    Disk,
}

/// One simulated BMC.
#[derive(Debug, Clone)]
pub struct Bmc {
    pub serial: String,
    pub uuid: String,
    pub flavour: Flavour,
    pub power: Power,
    pub pending: Option<PendingPower>,
    pub boot_target: String,
    pub boot_enabled: String,
    pub boot_mode: String,
    pub slots: Vec<Slot>,
    /// Bumped on every change of the system resource (its ETag).
    pub generation: u64,
    /// The BMC answers 503 until then (after the host powered on).
    pub settling_until: Option<DateTime<Utc>>,
    pub host: HostOs,
    /// Host boots so far (power-on or restart completions).
    pub boots: u32,
}

impl Bmc {
    pub fn new(serial: &str, uuid: &str, vendor: Vendor, power: Power) -> Self {
        let flavour = Flavour::of(vendor, uuid);
        Self {
            serial: serial.to_owned(),
            uuid: uuid.to_owned(),
            slots: flavour.slots.clone(),
            flavour,
            power,
            pending: None,
            boot_target: "None".into(),
            boot_enabled: "Disabled".into(),
            boot_mode: "UEFI".into(),
            generation: 1,
            settling_until: None,
            host: if power == Power::On {
                HostOs::Disk
            } else {
                HostOs::None
            },
            boots: 0,
        }
    }

    pub fn etag(&self) -> String {
        format!("W/\"{}\"", self.generation)
    }

    pub fn slot_etag(&self, slot: &Slot) -> String {
        format!(
            "W/\"{}-{}\"",
            slot.id,
            u8::from(slot.inserted) as u64 + slot.image.as_deref().map_or(0, |i| i.len() as u64)
        )
    }

    /// The slot at `id`, if any.
    pub fn slot_mut(&mut self, id: &str) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.id == id)
    }

    pub fn root(&self) -> Json {
        let mut root = json!({
            "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
            "@odata.id": "/redfish/v1/",
            "Id": "RootService",
            "Name": "Root Service",
            "RedfishVersion": "1.15.0",
            "UUID": self.uuid,
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
            "Managers": {"@odata.id": "/redfish/v1/Managers"},
        });
        if let Some(vendor) = self.flavour.root_vendor {
            root["Vendor"] = json!(vendor);
            root["Oem"] = json!({ vendor: {} });
        }
        root
    }

    pub fn systems(&self) -> Json {
        collection(
            "/redfish/v1/Systems",
            "#ComputerSystemCollection.ComputerSystemCollection",
            "Computer System Collection",
            &[self.flavour.system_path()],
        )
    }

    pub fn managers(&self) -> Json {
        collection(
            "/redfish/v1/Managers",
            "#ManagerCollection.ManagerCollection",
            "Manager Collection",
            &[self.flavour.manager_path()],
        )
    }

    pub fn power_state(&self) -> &'static str {
        match (self.power, self.pending) {
            (Power::Off, Some(PendingPower { to: Power::On, .. })) => "PoweringOn",
            (Power::On, Some(PendingPower { to: Power::Off, .. })) => "PoweringOff",
            (power, _) => power.as_str(),
        }
    }

    pub fn system(&self) -> Json {
        let path = self.flavour.system_path();
        let mut system = json!({
            "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
            "@odata.id": path,
            "@odata.etag": self.etag(),
            "Id": self.flavour.system_id,
            "Name": "System",
            "UUID": self.uuid,
            "SerialNumber": self.serial,
            "Manufacturer": self.flavour.manufacturer,
            "PowerState": self.power_state(),
            "Boot": {
                "BootSourceOverrideEnabled": self.boot_enabled,
                "BootSourceOverrideTarget": self.boot_target,
                "BootSourceOverrideTarget@Redfish.AllowableValues": self.flavour.boot_targets,
                "BootSourceOverrideMode": self.boot_mode,
            },
            "Links": {"ManagedBy": [{"@odata.id": self.flavour.manager_path()}]},
            "Actions": {
                "#ComputerSystem.Reset": {
                    "target": format!("{path}/Actions/ComputerSystem.Reset"),
                    "ResetType@Redfish.AllowableValues": [
                        "On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart"
                    ],
                }
            },
        });
        if self.flavour.media_under_system {
            system["VirtualMedia"] = json!({"@odata.id": self.flavour.media_path()});
        }
        system
    }

    pub fn manager(&self) -> Json {
        let mut manager = json!({
            "@odata.type": "#Manager.v1_10_0.Manager",
            "@odata.id": self.flavour.manager_path(),
            "Id": self.flavour.manager_id,
            "Name": "Manager",
            "ManagerType": "BMC",
            "Links": {"ManagerForServers": [{"@odata.id": self.flavour.system_path()}]},
        });
        if !self.flavour.media_under_system || self.flavour.manager_links_media {
            manager["VirtualMedia"] = json!({"@odata.id": self.flavour.media_path()});
        }
        manager
    }

    pub fn media_collection(&self) -> Json {
        let base = self.flavour.media_path();
        let members: Vec<String> = self
            .slots
            .iter()
            .map(|s| format!("{base}/{}", s.id))
            .collect();
        collection(
            &base,
            "#VirtualMediaCollection.VirtualMediaCollection",
            "Virtual Media Services",
            &members,
        )
    }

    pub fn media(&self, slot: &Slot) -> Json {
        let path = format!("{}/{}", self.flavour.media_path(), slot.id);
        json!({
            "@odata.type": "#VirtualMedia.v1_4_0.VirtualMedia",
            "@odata.id": path,
            "@odata.etag": self.slot_etag(slot),
            "Id": slot.id,
            "Name": slot.name,
            "MediaTypes": slot.media_types,
            "Image": slot.image.clone().unwrap_or_default(),
            "ImageName": slot.image.as_deref().map(image_name).unwrap_or_default(),
            "ConnectedVia": if slot.inserted { "URI" } else { "NotConnected" },
            "Inserted": slot.inserted,
            "WriteProtected": slot.write_protected,
            "TransferProtocolType": if slot.inserted { json!("HTTP") } else { Json::Null },
            "Actions": {
                "#VirtualMedia.InsertMedia": {"target": format!("{path}/Actions/VirtualMedia.InsertMedia")},
                "#VirtualMedia.EjectMedia": {"target": format!("{path}/Actions/VirtualMedia.EjectMedia")},
            },
        })
    }
}

/// The file name of an image URL (what BMCs show as `ImageName`).
pub fn image_name(url: &str) -> String {
    url.split(['?', '#'])
        .next()
        .and_then(|u| u.rsplit('/').next())
        .unwrap_or_default()
        .to_owned()
}

fn collection(path: &str, odata_type: &str, name: &str, members: &[String]) -> Json {
    json!({
        "@odata.type": odata_type,
        "@odata.id": path,
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members.iter().map(|m| json!({"@odata.id": m})).collect::<Vec<_>>(),
    })
}

/// A Redfish error body (DSP0266 §9.5.2.1).
pub fn error_body(message_id: &str, message: &str) -> Json {
    json!({
        "error": {
            "code": format!("Base.1.8.{message_id}"),
            "message": message,
            "@Message.ExtendedInfo": [{
                "MessageId": format!("Base.1.8.{message_id}"),
                "Message": message,
                "Severity": "Warning",
            }],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavours_place_virtual_media_where_their_vendor_does() {
        let dell = Bmc::new("S1", "u", Vendor::Dell, Power::Off);
        assert_eq!(
            dell.flavour.media_path(),
            "/redfish/v1/Systems/System.Embedded.1/VirtualMedia"
        );
        assert!(dell.manager().get("VirtualMedia").is_none());
        let hpe = Bmc::new("S2", "u", Vendor::Hpe, Power::Off);
        assert_eq!(
            hpe.flavour.media_path(),
            "/redfish/v1/Managers/1/VirtualMedia"
        );
        assert!(hpe.system().get("VirtualMedia").is_none());
        let generic = Bmc::new("S3", "abc", Vendor::Generic, Power::On);
        assert_eq!(
            generic.flavour.media_path(),
            "/redfish/v1/Systems/abc/VirtualMedia"
        );
        assert_eq!(
            generic.manager()["VirtualMedia"]["@odata.id"],
            "/redfish/v1/Systems/abc/VirtualMedia"
        );
        assert_eq!(generic.system()["PowerState"], "On");
        assert_eq!(
            image_name("http://h/media/tasks/j/task.iso?expires=1"),
            "task.iso"
        );
    }
}
