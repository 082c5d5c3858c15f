//! Storage layouts: applying one and reading which one a machine has (API_REFERENCE §5.17;
//! MAAS src/maasserver/storage_layouts.py, api/machines.py `set_storage_layout`; seed 000 §4.3
//! ConfigureStorage).
//!
//! MAAS applies its default layout (config `default_storage_layout`, `flat`) on the boot disk
//! at the end of every commissioning, so a Ready machine is never bare: a layout "already in
//! place" must be recognised by what it is, not by a root filesystem being somewhere.
//! `set_storage_layout` needs a Ready machine, clears the whole storage configuration and
//! builds the named layout on the boot disk (`root_device`, a block device *id*, moves the
//! root elsewhere). [`AppliedLayout::of`] reads a machine the way MAAS's
//! `get_applied_storage_layout_for_node` does, so the answer of the call can be checked.

use super::client::MaasClient;
use super::error::MaasError;
use super::machines::Machine;
use super::storage::{BlockDevice, Partition};
use super::transport::{Call, Params};

/// `storage_layout` of `set_storage_layout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageLayout {
    /// One root partition (plus the EFI partition on UEFI) on the boot disk.
    Flat,
    /// The root partition is an LVM physical volume of `vgroot`, root on its LV `lvroot`.
    Lvm,
    Bcache,
    Blank,
    Other(String),
}

impl StorageLayout {
    pub fn as_param(&self) -> &str {
        match self {
            StorageLayout::Flat => "flat",
            StorageLayout::Lvm => "lvm",
            StorageLayout::Bcache => "bcache",
            StorageLayout::Blank => "blank",
            StorageLayout::Other(other) => other,
        }
    }
}

/// `POST machines/{id}/?op=set_storage_layout` (admin, machine Ready).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageLayoutParams {
    pub layout: StorageLayout,
    /// The block device id to put the root filesystem on (default: the boot disk).
    pub root_device: Option<i64>,
    /// Bytes or with a suffix (`512M`), MAAS's syntax.
    pub boot_size: Option<String>,
    /// Bytes, with a suffix, or a percentage (`80%`).
    pub root_size: Option<String>,
    /// LVM only: the volume group (MAAS's default `vgroot`).
    pub vg_name: Option<String>,
    /// LVM only: the logical volume (MAAS's default `lvroot`).
    pub lv_name: Option<String>,
    /// LVM only: the logical volume's size (default: the whole group).
    pub lv_size: Option<String>,
}

impl StorageLayoutParams {
    /// `layout` on `root_device` if given, MAAS's defaults otherwise.
    pub fn new(layout: StorageLayout, root_device: Option<i64>) -> Self {
        Self {
            layout,
            root_device,
            boot_size: None,
            root_size: None,
            vg_name: None,
            lv_name: None,
            lv_size: None,
        }
    }

    /// A flat layout, on `root_device` if given.
    pub fn flat(root_device: Option<i64>) -> Self {
        Self::new(StorageLayout::Flat, root_device)
    }

    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .text("storage_layout", self.layout.as_param())
            .opt_number("root_device", self.root_device)
            .opt_text("boot_size", self.boot_size.as_deref())
            .opt_text("root_size", self.root_size.as_deref())
            .opt_text("vg_name", self.vg_name.as_deref())
            .opt_text("lv_name", self.lv_name.as_deref())
            .opt_text("lv_size", self.lv_size.as_deref());
        params
    }
}

/// Which layout a machine's storage is, and on which physical disk its root lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppliedLayout {
    /// An ext4 `root` partition mounted at `/` on `disk`.
    Flat { disk: i64 },
    /// An LVM physical-volume partition on `disk` of volume group `vg`, whose logical volume
    /// holds `/`.
    Lvm { disk: i64, vg: String },
    /// No partition holds the root filesystem (`blank`, or a custom layout).
    Unknown,
}

const EFI_PARTITION_SIZE: u64 = 512 * 1024 * 1024;

impl AppliedLayout {
    /// MAAS's detection (`FlatStorageLayout.is_layout`, `LVMStorageLayout.is_layout`): per
    /// physical disk, skip the EFI partition and a `/boot` partition; the next partition
    /// decides.
    pub fn of(machine: &Machine) -> AppliedLayout {
        let physical: &[BlockDevice] = if machine.physicalblockdevice_set.is_empty() {
            &machine.blockdevice_set
        } else {
            &machine.physicalblockdevice_set
        };
        for disk in physical.iter().filter(|d| d.device_type != "virtual") {
            let mut partitions: Vec<&Partition> = disk.partitions.iter().collect();
            partitions.sort_by_key(|p| p.path.clone());
            for (index, partition) in partitions.iter().enumerate() {
                let Some(fs) = &partition.filesystem else {
                    break;
                };
                let mount = fs.mount_point.as_deref();
                let label = fs.label.as_deref();
                let efi = index == 0
                    && partition.bootable
                    && partition.size == EFI_PARTITION_SIZE
                    && fs.fstype == "fat32"
                    && mount == Some("/boot/efi");
                let boot = partition.bootable
                    && fs.fstype == "ext4"
                    && label == Some("boot")
                    && mount == Some("/boot");
                if efi || boot {
                    continue;
                }
                if fs.fstype == "ext4" && label == Some("root") && mount == Some("/") {
                    return AppliedLayout::Flat { disk: disk.id };
                }
                if fs.fstype == "lvm-pv"
                    && let Some(vg) = partition.used_for.strip_prefix("LVM volume for ")
                    && lv_root(machine, vg)
                {
                    return AppliedLayout::Lvm {
                        disk: disk.id,
                        vg: vg.to_owned(),
                    };
                }
                break;
            }
        }
        AppliedLayout::Unknown
    }

    /// The layout's name as MAAS spells it (`flat`, `lvm`, `unknown`).
    pub fn name(&self) -> &'static str {
        match self {
            AppliedLayout::Flat { .. } => "flat",
            AppliedLayout::Lvm { .. } => "lvm",
            AppliedLayout::Unknown => "unknown",
        }
    }

    /// The physical disk holding the root (the PV for LVM).
    pub fn disk(&self) -> Option<i64> {
        match self {
            AppliedLayout::Flat { disk } | AppliedLayout::Lvm { disk, .. } => Some(*disk),
            AppliedLayout::Unknown => None,
        }
    }

    /// Whether this is `layout` with its root on `disk`.
    pub fn is(&self, layout: &StorageLayout, disk: i64) -> bool {
        self.name() == layout.as_param() && self.disk() == Some(disk)
    }
}

/// A logical volume of `vg` (a virtual block device `<vg>-<lv>`) mounted at `/`.
fn lv_root(machine: &Machine, vg: &str) -> bool {
    let prefix = format!("{vg}-");
    machine.blockdevice_set.iter().any(|device| {
        device.device_type == "virtual"
            && device.name.starts_with(&prefix)
            && device
                .filesystem
                .as_ref()
                .is_some_and(|fs| fs.mount_point.as_deref() == Some("/"))
    })
}

impl MaasClient {
    /// `POST machines/{id}/?op=set_storage_layout` (admin, machine Ready): MAAS clears the
    /// machine's storage configuration and builds `layout`. Returns the machine as MAAS
    /// answers it; check it with [`AppliedLayout::of`].
    pub async fn set_storage_layout(
        &self,
        system_id: &str,
        params: &StorageLayoutParams,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::post("set_storage_layout", &["machines", system_id])
                    .op("set_storage_layout")
                    .params(params.params())
                    .expects("a machine object"),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(devices: serde_json::Value) -> Machine {
        serde_json::from_value(serde_json::json!({
            "system_id": "x7k3pa", "hostname": "gpu1", "status": 4,
            "blockdevice_set": devices.clone(), "physicalblockdevice_set": devices
                .as_array().unwrap().iter().filter(|d| d["type"] == "physical").cloned().collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn partition(
        path: &str,
        size: u64,
        bootable: bool,
        fs: serde_json::Value,
        used_for: &str,
    ) -> serde_json::Value {
        serde_json::json!({"id": 1, "path": path, "size": size, "bootable": bootable, "filesystem": fs, "used_for": used_for})
    }

    fn efi() -> serde_json::Value {
        partition(
            "/dev/disk/by-dname/sda-part1",
            EFI_PARTITION_SIZE,
            true,
            serde_json::json!({"fstype": "fat32", "label": "efi", "mount_point": "/boot/efi"}),
            "fat32 formatted filesystem mounted at /boot/efi",
        )
    }

    #[test]
    fn flat_and_lvm_layouts_are_recognised_as_maas_does() {
        let flat = machine(serde_json::json!([
            {"id": 7, "name": "nvme0n1", "type": "physical", "partitions": []},
            {"id": 3, "name": "sda", "type": "physical", "partitions": [efi(), partition(
                "/dev/disk/by-dname/sda-part2", 10, false,
                serde_json::json!({"fstype": "ext4", "label": "root", "mount_point": "/"}),
                "ext4 formatted filesystem mounted at /")]}
        ]));
        assert_eq!(AppliedLayout::of(&flat), AppliedLayout::Flat { disk: 3 });
        assert!(AppliedLayout::of(&flat).is(&StorageLayout::Flat, 3));
        assert!(!AppliedLayout::of(&flat).is(&StorageLayout::Lvm, 3));

        let lvm = machine(serde_json::json!([
            {"id": 3, "name": "sda", "type": "physical", "partitions": [efi(), partition(
                "/dev/disk/by-dname/sda-part2", 10, false,
                serde_json::json!({"fstype": "lvm-pv", "label": null, "mount_point": null}),
                "LVM volume for vgroot")]},
            {"id": 9, "name": "vgroot-lvroot", "type": "virtual", "partitions": [],
             "filesystem": {"fstype": "ext4", "label": "root", "mount_point": "/"}}
        ]));
        assert_eq!(
            AppliedLayout::of(&lvm),
            AppliedLayout::Lvm {
                disk: 3,
                vg: "vgroot".into()
            }
        );
        let blank = machine(
            serde_json::json!([{"id": 3, "name": "sda", "type": "physical", "partitions": []}]),
        );
        assert_eq!(AppliedLayout::of(&blank), AppliedLayout::Unknown);
    }
}
