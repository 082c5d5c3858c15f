//! Power: on, off and the BMC query (API_REFERENCE §5.16; seed 000 §6.2 "powered off
//! externally").

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::client::MaasClient;
use super::error::MaasError;
use super::machines::{Machine, address_text, power_parameters_call};
use super::transport::{Call, Params};
use super::types::PowerState;

/// How `power_off` stops the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StopMode {
    /// An ACPI shutdown request (IPMI `soft`).
    Soft,
    /// Cut the power (MAAS's default).
    #[default]
    Hard,
}

#[derive(Deserialize)]
struct PowerStateDocument {
    state: PowerState,
}

/// The one field of a machine's power parameters a lookup needs. Deserialising only this keeps
/// the power passwords of the answer from ever becoming values in memory.
#[derive(Deserialize)]
struct PowerAddressOnly {
    #[serde(default)]
    power_address: serde_json::Value,
}

/// MAAS waits up to 60 s for the BMC on `query_power_state`; give it that and some slack.
const POWER_QUERY_TIMEOUT: Duration = Duration::from_secs(75);

impl MaasClient {
    /// `POST machines/{id}/?op=power_on`. For an Allocated machine MAAS treats this as a
    /// deployment; the lifecycle uses [`MaasClient::deploy`] for that. 409 when the machine has
    /// no owner (`Can't start node: it hasn't been allocated.`).
    pub async fn power_on(
        &self,
        system_id: &str,
        comment: Option<&str>,
    ) -> Result<Machine, MaasError> {
        let mut params = Params::new();
        params.opt_text("comment", comment);
        self.transport()
            .json(
                Call::post("power_on", &["machines", system_id])
                    .op("power_on")
                    .params(params),
            )
            .await
    }

    /// `POST machines/{id}/?op=power_off`. `None` when MAAS answers `null` (a power type that
    /// cannot be stopped, like `manual`).
    pub async fn power_off(
        &self,
        system_id: &str,
        stop_mode: StopMode,
        comment: Option<&str>,
    ) -> Result<Option<Machine>, MaasError> {
        let mut params = Params::new();
        params.text(
            "stop_mode",
            match stop_mode {
                StopMode::Soft => "soft",
                StopMode::Hard => "hard",
            },
        );
        params.opt_text("comment", comment);
        self.transport()
            .json(
                Call::post("power_off", &["machines", system_id])
                    .op("power_off")
                    .params(params),
            )
            .await
    }

    /// `GET machines/{id}/?op=query_power_state`: asks the BMC now (MAAS waits up to 60 s).
    pub async fn query_power_state(&self, system_id: &str) -> Result<PowerState, MaasError> {
        let document: PowerStateDocument = self
            .transport()
            .json(
                Call::get("query_power_state", &["machines", system_id])
                    .op("query_power_state")
                    .at_least(POWER_QUERY_TIMEOUT),
            )
            .await?;
        Ok(document.state)
    }

    /// `GET machines/?op=power_parameters` (admin, API_REFERENCE §5.16): the BMC address of
    /// each of `system_ids` (every machine when empty) in one request, by system id (seed 000
    /// §4.16 "match by IPMI power_address"), as
    /// [`super::MachinePowerParameters::power_address`] has it. The answer carries power
    /// passwords: it is never logged, and they are stepped over, never kept.
    pub async fn power_addresses(
        &self,
        system_ids: &[String],
    ) -> Result<BTreeMap<String, Option<String>>, MaasError> {
        let all: BTreeMap<String, Option<PowerAddressOnly>> = self
            .transport()
            .json(power_parameters_call(system_ids))
            .await?;
        Ok(all
            .into_iter()
            .map(|(system_id, p)| (system_id, p.and_then(|p| address_text(p.power_address))))
            .collect())
    }
}
