//! A BMC login read from the secret store (seed 000 §3.2.1). Which reference a node uses is
//! chosen from the manifests by `model::Site::power_credentials_for`; the value is read at
//! stage time so a rotation needs no restart.

use super::Secret;

/// A BMC login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerCredentials {
    pub user: String,
    pub pass: Secret,
}
