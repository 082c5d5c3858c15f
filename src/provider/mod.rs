//! Provider clients: MAAS API 2.0, Redfish, BMC power and deployed-host access.

pub mod bmc;
pub mod host;
pub mod maas;
pub mod redfish;
