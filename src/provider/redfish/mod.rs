//! Redfish provisioning (seed 003 "Provisioner Controller Service"): the building blocks the
//! job engine's Redfish job kind drives. docs/redfish.md is the user guide.
//!
//! | file | what |
//! |---|---|
//! | `recipe` | the recipe schema (schema/recipe.schema.json and the previous version), every error with its JSON path |
//! | `iso` | the deterministic per-job task ISO, built with xorriso or `iso9660` |
//! | `iso9660` | a small deterministic ISO 9660 + Joliet writer (no external program) |
//! | `media` | serving task ISOs to BMCs: signed expiring URLs, Range requests, garbage collection |
//! | `client` | the Redfish client: discovery, virtual media, one-time boot, reset |
//! | `profile` | vendor capability profiles (Dell, HPE, Lenovo, Supermicro, generic DMTF) |
//! | `error` | transient vs terminal Redfish failures |
//! | `settings` | `REDFISH_TIMEOUT`, `REDFISH_RETRIES` and the other client settings |

pub mod client;
pub mod error;
pub mod iso;
pub mod iso9660;
pub mod media;
pub mod profile;
pub mod recipe;
pub mod settings;
