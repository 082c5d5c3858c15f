//! Provider clients: MAAS API 2.0 and Redfish.

pub mod maas;
pub mod redfish;
