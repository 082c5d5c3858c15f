//! Block devices, partitions, LVM volume groups and their MAAS renderings (API_REFERENCE.md
//! §5.17–§5.18; MAAS api/blockdevices.py, api/partitions.py, utils/storage.py `used_for`).
//!
//! Physical disks come from the hardware; a storage layout puts partitions on them and, for
//! LVM, a volume group whose logical volumes are virtual block devices (`<vg>-<lv>`).

use serde::Serialize;

/// A filesystem on a partition or a logical volume.
#[derive(Debug, Clone, PartialEq)]
pub struct Filesystem {
    pub fstype: &'static str,
    pub label: Option<&'static str>,
    pub mount_point: Option<&'static str>,
    pub uuid: String,
}

impl Filesystem {
    /// `utils/storage.py used_for` of what carries this filesystem.
    fn used_for(&self, volume_group: Option<&str>) -> String {
        match (self.mount_point, self.fstype, volume_group) {
            (Some(mount), fstype, _) => format!("{fstype} formatted filesystem mounted at {mount}"),
            (None, "lvm-pv", Some(vg)) => format!("LVM volume for {vg}"),
            (None, fstype, _) => format!("Unmounted {fstype} formatted filesystem"),
        }
    }

    fn view(&self) -> FilesystemView {
        FilesystemView {
            fstype: self.fstype,
            label: self.label,
            uuid: self.uuid.clone(),
            mount_point: self.mount_point,
            mount_options: None,
        }
    }
}

/// A physical disk with the partitions a layout put on it.
#[derive(Debug, Clone)]
pub struct BlockDevice {
    pub id: u64,
    pub name: String,
    pub model: String,
    pub serial: String,
    pub size: u64,
    pub id_path: String,
    pub partitions: Vec<Partition>,
}

/// A partition with its filesystem.
#[derive(Debug, Clone)]
pub struct Partition {
    pub id: u64,
    pub uuid: String,
    pub size: u64,
    pub bootable: bool,
    pub filesystem: Filesystem,
    /// The volume group this partition is a physical volume of.
    pub volume_group: Option<String>,
}

/// An LVM volume group over partitions, with its logical volumes.
#[derive(Debug, Clone)]
pub struct VolumeGroup {
    pub id: u64,
    pub name: String,
    pub uuid: String,
    pub size: u64,
    pub logical_volumes: Vec<LogicalVolume>,
}

/// A logical volume: a virtual block device named `<vg>-<lv>`.
#[derive(Debug, Clone)]
pub struct LogicalVolume {
    /// Its block device id.
    pub id: u64,
    pub name: String,
    pub uuid: String,
    pub size: u64,
    pub filesystem: Option<Filesystem>,
}

#[derive(Debug, Serialize)]
pub struct FilesystemView {
    pub fstype: &'static str,
    pub label: Option<&'static str>,
    pub uuid: String,
    pub mount_point: Option<&'static str>,
    pub mount_options: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PartitionView {
    pub uuid: String,
    pub size: u64,
    pub bootable: bool,
    pub tags: Vec<String>,
    pub system_id: String,
    pub device_id: u64,
    pub used_for: String,
    pub r#type: &'static str,
    pub path: String,
    pub filesystem: FilesystemView,
    pub id: u64,
    pub resource_uri: String,
}

/// `DISPLAYED_BLOCKDEVICE_FIELDS` + resource_uri.
#[derive(Debug, Serialize)]
pub struct BlockDeviceView {
    pub id_path: Option<String>,
    pub size: u64,
    pub block_size: u32,
    pub tags: Vec<&'static str>,
    pub storage_pool: Option<String>,
    pub id: u64,
    pub system_id: String,
    pub used_for: String,
    pub model: Option<String>,
    pub r#type: &'static str,
    pub filesystem: Option<FilesystemView>,
    pub numa_node: Option<u32>,
    pub available_size: u64,
    pub name: String,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    pub partitions: Vec<PartitionView>,
    pub path: String,
    pub used_size: u64,
    pub partition_table_type: Option<&'static str>,
    /// Present on physical-device renderings (`physicalblockdevice_set`, `boot_disk`, the
    /// block-devices endpoints), absent from the generic `blockdevice_set` (yorc capture).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firmware_version: Option<String>,
    pub resource_uri: String,
}

/// A volume group as a machine object lists it (`volume_groups`, api/machines.py).
#[derive(Debug, Serialize)]
pub struct VolumeGroupRef {
    pub system_id: String,
    pub id: u64,
    pub __incomplete__: bool,
}

/// GPT header + alignment MAAS leaves unused at the ends of a partitioned disk.
const PARTITION_OVERHEAD: u64 = 5 * 1024 * 1024;
/// The EFI system partition of every layout on UEFI machines (`EFI_PARTITION_SIZE`).
pub const EFI_SIZE: u64 = 512 * 1024 * 1024;
/// `MIN_BOOT_PARTITION_SIZE`: a disk smaller than this is never the boot disk.
pub const MIN_BOOT_SIZE: u64 = 512 * 1024 * 1024;
/// `MIN_ROOT_PARTITION_SIZE`.
pub const MIN_ROOT_SIZE: u64 = 3 * 1024 * 1024 * 1024;

impl BlockDevice {
    /// A disk whose model/name/id_path marks it as a BOSS/M.2 boot device (seed 000 §4.3).
    pub fn looks_like_boot_device(&self) -> bool {
        let text = format!("{} {} {}", self.model, self.name, self.id_path).to_ascii_lowercase();
        text.contains("boss") || text.contains("boot optimized") || text.contains("m.2")
    }

    fn tags(&self) -> Vec<&'static str> {
        if self.name.starts_with("nvme") {
            vec!["ssd", "nvme"]
        } else {
            vec!["ssd"]
        }
    }

    pub fn used_size(&self) -> u64 {
        if self.partitions.is_empty() {
            0
        } else {
            self.partitions.iter().map(|p| p.size).sum::<u64>() + PARTITION_OVERHEAD
        }
    }

    /// Room left for partitions.
    pub fn free_size(&self) -> u64 {
        self.size.saturating_sub(if self.partitions.is_empty() {
            PARTITION_OVERHEAD
        } else {
            self.used_size()
        })
    }

    /// The generic rendering of `blockdevice_set` (no firmware_version).
    pub fn generic_view(&self, system_id: &str) -> BlockDeviceView {
        BlockDeviceView {
            firmware_version: None,
            ..self.view(system_id)
        }
    }

    pub fn view(&self, system_id: &str) -> BlockDeviceView {
        let used = self.used_size();
        BlockDeviceView {
            id_path: Some(self.id_path.clone()),
            size: self.size,
            block_size: 512,
            tags: self.tags(),
            storage_pool: None,
            id: self.id,
            system_id: system_id.to_string(),
            used_for: match self.partitions.len() {
                0 => "Unused".to_string(),
                1 => "GPT partitioned with 1 partition".to_string(),
                n => format!("GPT partitioned with {n} partitions"),
            },
            model: Some(self.model.clone()),
            r#type: "physical",
            filesystem: None,
            numa_node: Some(0),
            available_size: self.size.saturating_sub(used),
            name: self.name.clone(),
            uuid: None,
            serial: Some(self.serial.clone()),
            partitions: self
                .partitions
                .iter()
                .enumerate()
                .map(|(index, p)| PartitionView {
                    uuid: p.uuid.clone(),
                    size: p.size,
                    bootable: p.bootable,
                    tags: Vec::new(),
                    system_id: system_id.to_string(),
                    device_id: self.id,
                    used_for: p.filesystem.used_for(p.volume_group.as_deref()),
                    r#type: "partition",
                    path: format!("/dev/disk/by-dname/{}-part{}", self.name, index + 1),
                    filesystem: p.filesystem.view(),
                    id: p.id,
                    // Singular `partition` and no trailing slash, as MAAS renders it.
                    resource_uri: format!(
                        "/MAAS/api/2.0/nodes/{system_id}/blockdevices/{}/partition/{}",
                        self.id, p.id
                    ),
                })
                .collect(),
            path: format!("/dev/disk/by-dname/{}", self.name),
            used_size: used,
            partition_table_type: (!self.partitions.is_empty()).then_some("GPT"),
            firmware_version: Some("2.1.0".to_string()),
            resource_uri: format!("/MAAS/api/2.0/nodes/{system_id}/blockdevices/{}/", self.id),
        }
    }
}

impl VolumeGroup {
    /// Its logical volumes as virtual block devices.
    pub fn device_views(&self, system_id: &str) -> Vec<BlockDeviceView> {
        self.logical_volumes
            .iter()
            .map(|lv| {
                let name = format!("{}-{}", self.name, lv.name);
                BlockDeviceView {
                    id_path: None,
                    size: lv.size,
                    block_size: 4096,
                    tags: Vec::new(),
                    storage_pool: None,
                    id: lv.id,
                    system_id: system_id.to_string(),
                    used_for: lv
                        .filesystem
                        .as_ref()
                        .map_or_else(|| "Unused".to_string(), |fs| fs.used_for(None)),
                    model: None,
                    r#type: "virtual",
                    filesystem: lv.filesystem.as_ref().map(Filesystem::view),
                    numa_node: None,
                    available_size: if lv.filesystem.is_some() { 0 } else { lv.size },
                    name: name.clone(),
                    uuid: Some(lv.uuid.clone()),
                    serial: None,
                    partitions: Vec::new(),
                    path: format!("/dev/disk/by-dname/{name}"),
                    used_size: if lv.filesystem.is_some() { lv.size } else { 0 },
                    partition_table_type: None,
                    firmware_version: None,
                    resource_uri: format!(
                        "/MAAS/api/2.0/nodes/{system_id}/blockdevices/{}/",
                        lv.id
                    ),
                }
            })
            .collect()
    }
}
