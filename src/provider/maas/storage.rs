//! Block devices and the boot disk (API_REFERENCE §5.18; seed 000 §4.3 ConfigureStorage: find
//! the BOSS/M.2 disk and set it as boot disk). The layout on top is `layouts`.
//!
//! Block devices live under `nodes/{id}/blockdevices/`. `set_boot_disk` answers the text `OK`,
//! not JSON.

use serde::{Deserialize, Serialize};

use super::client::MaasClient;
use super::de::{empty_as_none, null_default};
use super::error::MaasError;
use super::transport::Call;

/// A filesystem on a block device or partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filesystem {
    #[serde(default, deserialize_with = "null_default")]
    pub fstype: String,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub label: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub uuid: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub mount_point: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub mount_options: Option<String>,
}

/// A partition of a block device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub id: i64,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub uuid: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub path: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub bootable: bool,
    #[serde(default)]
    pub filesystem: Option<Filesystem>,
    #[serde(default, deserialize_with = "null_default")]
    pub used_for: String,
    #[serde(default, deserialize_with = "null_default")]
    pub tags: Vec<String>,
    #[serde(default)]
    pub device_id: Option<i64>,
}

/// A machine's block device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDevice {
    pub id: i64,
    pub name: String,
    /// `physical` or `virtual`.
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub device_type: String,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub system_id: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub model: String,
    #[serde(default, deserialize_with = "null_default")]
    pub serial: String,
    /// `/dev/disk/by-id/…` (what BOSS/M.2 detection looks at along with model and name).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub id_path: Option<String>,
    /// `/dev/disk/by-dname/<name>`.
    #[serde(default, deserialize_with = "null_default")]
    pub path: String,
    /// Bytes.
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub block_size: u64,
    #[serde(default)]
    pub available_size: u64,
    #[serde(default)]
    pub used_size: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub used_for: String,
    #[serde(default, deserialize_with = "null_default")]
    pub tags: Vec<String>,
    #[serde(default)]
    pub filesystem: Option<Filesystem>,
    /// `GPT`, `MBR` or none.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub partition_table_type: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub partitions: Vec<Partition>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub uuid: Option<String>,
    #[serde(default)]
    pub firmware_version: Option<String>,
    #[serde(default)]
    pub storage_pool: Option<String>,
    #[serde(default)]
    pub numa_node: Option<i64>,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

impl MaasClient {
    /// `GET nodes/{id}/blockdevices/`.
    pub async fn list_block_devices(&self, system_id: &str) -> Result<Vec<BlockDevice>, MaasError> {
        self.transport()
            .json(
                Call::get("list_block_devices", &["nodes", system_id, "blockdevices"])
                    .expects("a list of block devices"),
            )
            .await
    }

    /// `GET nodes/{id}/blockdevices/{device}/`.
    pub async fn read_block_device(
        &self,
        system_id: &str,
        device_id: i64,
    ) -> Result<BlockDevice, MaasError> {
        let device_id = device_id.to_string();
        self.transport()
            .json(
                Call::get(
                    "read_block_device",
                    &["nodes", system_id, "blockdevices", &device_id],
                )
                .expects("a block device"),
            )
            .await
    }

    /// `POST nodes/{id}/blockdevices/{device}/?op=set_boot_disk` (admin, machine Ready).
    pub async fn set_boot_disk(&self, system_id: &str, device_id: i64) -> Result<(), MaasError> {
        let device_id = device_id.to_string();
        self.transport()
            .unit(
                Call::post(
                    "set_boot_disk",
                    &["nodes", system_id, "blockdevices", &device_id],
                )
                .op("set_boot_disk"),
            )
            .await
    }
}
