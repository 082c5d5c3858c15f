//! Block devices and storage layouts as the API changes them (API_REFERENCE.md §5.17–§5.18;
//! MAAS api/machines.py `set_storage_layout`, api/blockdevices.py `set_boot_disk`).

use super::layouts::{LAYOUT_NAMES, layout_request};
use super::model::Caller;
use super::reply::MaasError;
use super::status::Status;
use super::transport::Params;
use super::world::{Perm, World};

impl World {
    /// `POST machines/{id}/?op=set_storage_layout` (api/machines.py): admin, Ready, a
    /// `storage_layout` among MAAS's, the layout's form, then the layout replaces the whole
    /// storage configuration.
    pub fn set_storage_layout(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        if self.machines[&id].status != Status::Ready {
            return Err(MaasError::Conflict(
                "Cannot change the storage layout on a machine that is not Ready.".to_string(),
            ));
        }
        let layout = match p.get("storage_layout") {
            None | Some("") => {
                return Err(MaasError::field(
                    "storage_layout",
                    "This field is required.",
                ));
            }
            Some(l) => l,
        };
        if !LAYOUT_NAMES.contains(&layout) {
            let names: Vec<String> = LAYOUT_NAMES.iter().map(|n| format!("'{n}'")).collect();
            return Err(MaasError::field(
                "storage_layout",
                format!(
                    "'{layout}' is not a valid storage_layout.  It should be one of: {}.",
                    names.join(", ")
                ),
            ));
        }
        let request = layout_request(p, layout).map_err(|e| e.into_maas(layout))?;
        self.apply_storage_layout(id, &request)
            .map(drop)
            .map_err(|e| e.into_maas(layout))
    }

    /// `POST nodes/{id}/blockdevices/{bd}/?op=set_boot_disk`.
    pub fn set_boot_disk(
        &mut self,
        caller: &Caller,
        system_id: &str,
        device: &str,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        let disk = self.find_disk(id, device)?;
        if self.machines[&id].status != Status::Ready {
            return Err(MaasError::Conflict(
                "Cannot set as boot disk because the machine is not Ready.".to_string(),
            ));
        }
        if !self.machines[&id].disks.iter().any(|d| d.id == disk) {
            return Err(MaasError::BadRequest(
                "Cannot set a virtual block device as the boot disk.".to_string(),
            ));
        }
        if let Some(m) = self.machines.get_mut(&id) {
            m.boot_disk_id = Some(disk);
        }
        Ok(())
    }
    /// A block device (physical, or a logical volume `<vg>-<lv>`) by id or name.
    pub fn find_disk(&self, id: u64, device: &str) -> Result<u64, MaasError> {
        let m = &self.machines[&id];
        let physical = m.disks.iter().map(|d| (d.id, d.name.clone()));
        let virtual_devices = m.volume_groups.iter().flat_map(|vg| {
            vg.logical_volumes
                .iter()
                .map(move |lv| (lv.id, format!("{}-{}", vg.name, lv.name)))
        });
        physical
            .chain(virtual_devices)
            .find(|(d, name)| d.to_string() == device || name == device)
            .map(|(d, _)| d)
            .ok_or_else(|| {
                MaasError::NotFound("No BlockDevice matches the given query.".to_string())
            })
    }
}
