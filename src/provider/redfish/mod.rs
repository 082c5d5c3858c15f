//! Redfish client and virtual-media provisioning (seed 003).

pub mod client;
pub mod error;
pub mod iso;
pub mod media;
pub mod profile;
pub mod recipe;
pub mod settings;
