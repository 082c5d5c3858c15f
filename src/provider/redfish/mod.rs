//! Redfish client and virtual-media provisioning (seed 003).

pub mod recipe;
