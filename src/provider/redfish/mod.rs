//! Redfish client and virtual-media provisioning (seed 003).

pub mod iso;
pub mod media;
pub mod recipe;
