//! Storage layouts (API_REFERENCE.md §5.17; MAAS src/maasserver/storage_layouts.py,
//! fields_storage.py, models/node.py `set_default_storage_layout`).
//!
//! A layout always starts from a clean slate (`_clear_full_storage_configuration`) and builds
//! on the boot disk (`Node.get_boot_disk`): a GPT table with the 512 MiB EFI partition, an
//! optional `/boot`, then the root — an ext4 partition (`flat`) or an LVM physical volume of
//! `vgroot` carrying the logical volume `lvroot` (`lvm`) — on `root_device` or the boot disk.
//! Commissioning applies the default layout (`flat`) the same way.

use std::collections::BTreeMap;

use super::reply::MaasError;
use super::storage::{
    EFI_SIZE, Filesystem, LogicalVolume, MIN_BOOT_SIZE, MIN_ROOT_SIZE, Partition, VolumeGroup,
};
use super::transport::Params;
use super::world::World;

/// The layouts MAAS knows (`STORAGE_LAYOUT_CHOICES`), in a fixed order for messages.
pub const LAYOUT_NAMES: [&str; 7] = ["bcache", "blank", "custom", "flat", "lvm", "vmfs6", "vmfs7"];

/// MAAS's default for `default_storage_layout`.
pub const DEFAULT_LAYOUT: &str = "flat";

/// A size of a layout form: bytes (SI suffixes) or a percentage.
#[derive(Debug, Clone, PartialEq)]
pub enum LayoutSize {
    Bytes(u64),
    Percent(String),
}

impl LayoutSize {
    /// `calculate_size_from_percentage(total, …)`, or the bytes.
    pub fn of(&self, total: u64) -> u64 {
        match self {
            LayoutSize::Bytes(bytes) => *bytes,
            LayoutSize::Percent(text) => {
                let percent: f64 = text.trim_end_matches('%').parse().unwrap_or(0.0);
                (total as f64 * percent / 100.0).ceil() as u64
            }
        }
    }
}

/// `BytesOrPercentageField`: `\d+(\.\d*)?%` or `-?[0-9]+[KMGTPE]?` (SI multiples).
fn parse_size(text: &str) -> Option<LayoutSize> {
    if let Some(number) = text.strip_suffix('%') {
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        return (!whole.is_empty() && digits(whole) && digits(frac))
            .then(|| LayoutSize::Percent(text.to_string()));
    }
    let (number, multiplier) = match text.chars().last()? {
        c if c.is_ascii_digit() => (text, 1u64),
        c => {
            let power = match c.to_ascii_uppercase() {
                'K' => 1,
                'M' => 2,
                'G' => 3,
                'T' => 4,
                'P' => 5,
                'E' => 6,
                _ => return None,
            };
            (&text[..text.len() - 1], 1000u64.pow(power))
        }
    };
    let value: i64 = number.parse().ok()?;
    u64::try_from(value)
        .ok()?
        .checked_mul(multiplier)
        .map(LayoutSize::Bytes)
}

/// What a layout request asks, parsed and checked like MAAS's layout forms.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutRequest {
    pub layout: String,
    /// `root_device` as sent: one of the physical block device ids.
    pub root_device: Option<String>,
    /// Percentages are of the boot disk without its EFI partition.
    pub boot_size: Option<LayoutSize>,
    pub root_size: Option<LayoutSize>,
    pub vg_name: String,
    pub lv_name: String,
    pub lv_size: Option<LayoutSize>,
}

impl LayoutRequest {
    /// MAAS's defaults for `layout`.
    pub fn named(layout: &str) -> LayoutRequest {
        LayoutRequest {
            layout: layout.to_string(),
            root_device: None,
            boot_size: None,
            root_size: None,
            vg_name: "vgroot".to_string(),
            lv_name: "lvroot".to_string(),
            lv_size: None,
        }
    }
}

/// The outcome of a layout that could not be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum LayoutError {
    /// `StorageLayoutMissingBootDiskError`.
    MissingBootDisk,
    /// Form errors (`StorageLayoutFieldsError`, a 400 JSON document).
    Fields(BTreeMap<String, Vec<String>>),
    /// `StorageLayoutError`: `Failed to configure storage layout '<name>': …`.
    Failed(String),
}

impl LayoutError {
    fn field(name: &str, message: impl Into<String>) -> LayoutError {
        LayoutError::Fields(BTreeMap::from([(name.to_string(), vec![message.into()])]))
    }

    /// The API answer (api/machines.py `set_storage_layout`).
    pub fn into_maas(self, layout: &str) -> MaasError {
        match self {
            LayoutError::MissingBootDisk => MaasError::BadRequest(
                "Machine is missing a boot disk; no storage layout can be applied.".to_string(),
            ),
            LayoutError::Fields(errors) => MaasError::Form(errors),
            LayoutError::Failed(why) => MaasError::BadRequest(format!(
                "Failed to configure storage layout '{layout}': {why}"
            )),
        }
    }
}

/// Parses the layout form of a `set_storage_layout` request (everything but the choice of
/// layout, checked by the caller).
pub(super) fn layout_request(p: &Params, layout: &str) -> Result<LayoutRequest, LayoutError> {
    let mut request = LayoutRequest::named(layout);
    let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut size = |field: &str| -> Option<LayoutSize> {
        let text = p.get(field).map(str::trim).filter(|t| !t.is_empty())?;
        let parsed = parse_size(text);
        if parsed.is_none() {
            errors
                .entry(field.to_string())
                .or_default()
                .push("Enter a valid value.".to_string());
        }
        parsed
    };
    let boot = size("boot_size");
    let root = size("root_size");
    let lv = size("lv_size");
    request.root_device = p
        .get("root_device")
        .filter(|v| !v.is_empty())
        .map(String::from);
    if let Some(vg) = p.get("vg_name").filter(|v| !v.is_empty()) {
        request.vg_name = vg.to_string();
    }
    if let Some(name) = p.get("lv_name").filter(|v| !v.is_empty()) {
        request.lv_name = name.to_string();
    }
    if !errors.is_empty() {
        return Err(LayoutError::Fields(errors));
    }
    request.boot_size = boot;
    request.root_size = root;
    request.lv_size = lv;
    Ok(request)
}

impl World {
    /// Builds `request` on the machine, replacing its whole storage configuration. Returns the
    /// layout used.
    pub(super) fn apply_storage_layout(
        &mut self,
        id: u64,
        request: &LayoutRequest,
    ) -> Result<&'static str, LayoutError> {
        let Some(m) = self.machines.get(&id) else {
            return Err(LayoutError::MissingBootDisk);
        };
        if m.disks.is_empty() {
            return Err(LayoutError::MissingBootDisk);
        }
        let Some(boot) = m.boot_disk().map(|d| (d.id, d.size)) else {
            return Err(LayoutError::MissingBootDisk);
        };
        let (boot_id, boot_disk_size) = boot;
        let choices: Vec<u64> = {
            let mut ids: Vec<u64> = m.disks.iter().map(|d| d.id).collect();
            ids.sort_unstable();
            ids
        };
        let root_device = request.root_device.as_ref().map(|text| {
            text.parse::<u64>()
                .ok()
                .filter(|r| choices.contains(r))
                .ok_or(text)
        });
        if let Some(Err(root)) = root_device {
            let list: Vec<String> = choices.iter().map(|c| format!("'{c}'")).collect();
            return Err(LayoutError::field(
                "root_device",
                format!(
                    "'{root}' is not a valid root_device.  It should be one of: {}.",
                    list.join(", ")
                ),
            ));
        }
        // clean_boot_size / clean_root_size: percentages of the boot disk without the EFI
        // partition, bounded by what the other partitions need.
        let usable = boot_disk_size.saturating_sub(EFI_SIZE);
        let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut bounded = |field: &str, size: Option<u64>, min: u64, max: u64| {
            let size = size?;
            if size < min {
                errors
                    .entry(field.to_string())
                    .or_default()
                    .push(format!("Size is too small. Minimum size is {min}."));
            } else if size > max {
                errors
                    .entry(field.to_string())
                    .or_default()
                    .push(format!("Size is too large. Maximum size is {max}."));
            }
            Some(size)
        };
        let boot_size = bounded(
            "boot_size",
            request.boot_size.as_ref().map(|s| s.of(usable)),
            MIN_BOOT_SIZE,
            usable.saturating_sub(MIN_ROOT_SIZE),
        )
        .unwrap_or(0);
        let root_size = bounded(
            "root_size",
            request.root_size.as_ref().map(|s| s.of(usable)),
            MIN_ROOT_SIZE,
            usable.saturating_sub(MIN_BOOT_SIZE),
        );
        if !errors.is_empty() {
            return Err(LayoutError::Fields(errors));
        }
        if let Some(root_size) = root_size
            && EFI_SIZE + boot_size + root_size > boot_disk_size
        {
            return Err(LayoutError::field(
                "__all__",
                "Size of the boot partition and root partition are larger than the available \
                 space on the boot disk.",
            ));
        }
        let layout: &'static str = match request.layout.as_str() {
            "flat" => "flat",
            "lvm" => "lvm",
            "blank" => "blank",
            other => {
                return Err(LayoutError::Failed(format!(
                    "the simulator builds the flat, lvm and blank layouts, not '{other}'."
                )));
            }
        };
        // The LVM form's own check of lv_size against the root partition.
        let root_space = root_size.unwrap_or(usable.saturating_sub(boot_size));
        let lv_size = match (&request.lv_size, layout) {
            (Some(size), "lvm") => {
                let lv = size.of(root_space);
                if lv < MIN_ROOT_SIZE {
                    return Err(LayoutError::field(
                        "lv_size",
                        format!("Size is too small. Minimum size is {MIN_ROOT_SIZE}."),
                    ));
                }
                if lv > root_space {
                    return Err(LayoutError::field(
                        "lv_size",
                        format!("Size is too large. Maximum size is {root_space}."),
                    ));
                }
                Some(lv)
            }
            _ => None,
        };
        let root_id = root_device.and_then(Result::ok).unwrap_or(boot_id);
        let uuids: Vec<String> = (0..8).map(|_| self.uuid()).collect();
        let ids: Vec<u64> = (0..5).map(|_| self.id()).collect();
        let Some(m) = self.machines.get_mut(&id) else {
            return Err(LayoutError::MissingBootDisk);
        };
        // _clear_full_storage_configuration.
        for disk in &mut m.disks {
            disk.partitions.clear();
        }
        m.volume_groups.clear();
        if layout == "blank" {
            return Ok(layout);
        }
        let efi = Partition {
            id: ids[0],
            uuid: uuids[0].clone(),
            size: EFI_SIZE,
            bootable: true,
            filesystem: Filesystem {
                fstype: "fat32",
                label: Some("efi"),
                mount_point: Some("/boot/efi"),
                uuid: uuids[1].clone(),
            },
            volume_group: None,
        };
        let mut boot_parts = vec![efi];
        if boot_size > 0 {
            boot_parts.push(Partition {
                id: ids[1],
                uuid: uuids[2].clone(),
                size: boot_size,
                bootable: true,
                filesystem: Filesystem {
                    fstype: "ext4",
                    label: Some("boot"),
                    mount_point: Some("/boot"),
                    uuid: uuids[3].clone(),
                },
                volume_group: None,
            });
        }
        for disk in &mut m.disks {
            if disk.id == boot_id {
                disk.partitions = std::mem::take(&mut boot_parts);
            }
        }
        let Some(root_disk) = m.disks.iter_mut().find(|d| d.id == root_id) else {
            return Err(LayoutError::MissingBootDisk);
        };
        let size = root_size.unwrap_or_else(|| root_disk.free_size());
        if size == 0 || size > root_disk.free_size() {
            return Err(LayoutError::Failed(format!(
                "{} has no room for a root partition of {size} bytes.",
                root_disk.name
            )));
        }
        let (filesystem, volume_group) = if layout == "flat" {
            (
                Filesystem {
                    fstype: "ext4",
                    label: Some("root"),
                    mount_point: Some("/"),
                    uuid: uuids[5].clone(),
                },
                None,
            )
        } else {
            (
                Filesystem {
                    fstype: "lvm-pv",
                    label: None,
                    mount_point: None,
                    uuid: uuids[5].clone(),
                },
                Some(request.vg_name.clone()),
            )
        };
        root_disk.partitions.push(Partition {
            id: ids[2],
            uuid: uuids[4].clone(),
            size,
            bootable: false,
            filesystem,
            volume_group,
        });
        if layout == "lvm" {
            // LVM keeps 4 MiB of metadata per physical volume.
            let vg_size = size.saturating_sub(4 * 1024 * 1024);
            m.volume_groups.push(VolumeGroup {
                id: ids[3],
                name: request.vg_name.clone(),
                uuid: uuids[6].clone(),
                size: vg_size,
                logical_volumes: vec![LogicalVolume {
                    id: ids[4],
                    name: request.lv_name.clone(),
                    uuid: uuids[7].clone(),
                    size: lv_size.unwrap_or(vg_size),
                    filesystem: Some(Filesystem {
                        fstype: "ext4",
                        label: Some("root"),
                        mount_point: Some("/"),
                        uuid: uuids[4].clone() + "-fs",
                    }),
                }],
            });
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_maas_reads_them() {
        assert_eq!(parse_size("512M"), Some(LayoutSize::Bytes(512_000_000)));
        assert_eq!(parse_size("3g"), Some(LayoutSize::Bytes(3_000_000_000)));
        assert_eq!(parse_size("1024"), Some(LayoutSize::Bytes(1024)));
        assert_eq!(parse_size("50%"), Some(LayoutSize::Percent("50%".into())));
        assert_eq!(
            parse_size("12.5%"),
            Some(LayoutSize::Percent("12.5%".into()))
        );
        assert_eq!(parse_size("1GB"), None, "no unit after the suffix");
        assert_eq!(parse_size("x"), None);
        assert_eq!(LayoutSize::Percent("50%".into()).of(101), 51, "rounded up");
    }
}
