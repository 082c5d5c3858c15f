//! Block devices, the boot disk and the flat storage layout (API_REFERENCE.md §5.17–§5.18;
//! seed 000 §4.3 ConfigureStorage).

use serde::Serialize;

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
    pub fstype: &'static str,
    pub label: &'static str,
    pub mount_point: &'static str,
    pub fs_uuid: String,
}

#[derive(Debug, Serialize)]
pub struct FilesystemView {
    pub fstype: &'static str,
    pub label: &'static str,
    pub uuid: String,
    pub mount_point: &'static str,
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
    pub id_path: String,
    pub size: u64,
    pub block_size: u32,
    pub tags: Vec<&'static str>,
    pub storage_pool: Option<String>,
    pub id: u64,
    pub system_id: String,
    pub used_for: String,
    pub model: String,
    pub r#type: &'static str,
    pub filesystem: Option<FilesystemView>,
    pub numa_node: u32,
    pub available_size: u64,
    pub name: String,
    pub uuid: Option<String>,
    pub serial: String,
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

/// GPT header + alignment MAAS leaves unused at the ends of a partitioned disk.
const PARTITION_OVERHEAD: u64 = 5 * 1024 * 1024;
/// The EFI system partition of the flat layout (UEFI machines).
pub const EFI_SIZE: u64 = 512 * 1024 * 1024;

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

    fn used_size(&self) -> u64 {
        if self.partitions.is_empty() {
            0
        } else {
            self.partitions.iter().map(|p| p.size).sum::<u64>() + PARTITION_OVERHEAD
        }
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
            id_path: self.id_path.clone(),
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
            model: self.model.clone(),
            r#type: "physical",
            filesystem: None,
            numa_node: 0,
            available_size: self.size.saturating_sub(used),
            name: self.name.clone(),
            uuid: None,
            serial: self.serial.clone(),
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
                    used_for: format!(
                        "{} formatted filesystem mounted at {}",
                        p.fstype, p.mount_point
                    ),
                    r#type: "partition",
                    path: format!("/dev/disk/by-dname/{}-part{}", self.name, index + 1),
                    filesystem: FilesystemView {
                        fstype: p.fstype,
                        label: p.label,
                        uuid: p.fs_uuid.clone(),
                        mount_point: p.mount_point,
                        mount_options: None,
                    },
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
