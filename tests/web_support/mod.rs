//! A running daemon with two converged nodes of site `dc1` and one hostile inventory row (its
//! site and hostname are HTML), for the status-page suites.
#![allow(dead_code)]

use std::time::Duration;

use crate::daemon_support::{DaemonBed, one_site};
use crate::onboard_support::hostname_of;
use metalform::daemon::{DaemonOptions, RunningDaemon, start};
use metalform::lifecycle::{NodeState, Provider};
use metalform::store::{Actor, NewNode};

/// The hostile row: a site and a hostname that are markup.
pub const HOSTILE_SITE: &str = "lab&co";
pub const HOSTILE_HOST: &str = "<script>alert(\"pwned\")</script>";

pub struct Pages {
    pub bed: DaemonBed,
    pub daemon: RunningDaemon,
    pub base: String,
    /// The converged nodes of `dc1`.
    pub hosts: Vec<String>,
}

impl Pages {
    pub async fn start() -> Pages {
        let setup = one_site(71, vec![0, 1]);
        let config = setup.sites[0].config.clone();
        let bed = DaemonBed::start(setup, "").await;
        let daemon = start(bed.config(), DaemonOptions::default()).await.unwrap();
        let base = format!("http://{}", daemon.local_addr());
        let hosts: Vec<String> = (0..2).map(|i| hostname_of(&config, i)).collect();
        bed.converged_hosts("dc1", &hosts, Duration::from_secs(90))
            .await;
        bed.bed
            .store
            .create_node(
                &NewNode {
                    site: HOSTILE_SITE.into(),
                    hostname: HOSTILE_HOST.into(),
                    provider: Provider::Maas,
                    status: NodeState::Enrolling,
                    sku: None,
                    gpus: None,
                    ipmi_ip: None,
                },
                &Actor::admin("test"),
            )
            .await
            .unwrap();
        Pages {
            bed,
            daemon,
            base,
            hosts,
        }
    }

    /// `/ui/nodes/{site}/{hostname}` with both parts percent-encoded.
    pub fn node_path(site: &str, hostname: &str) -> String {
        // A path segment: form encoding, with its `+` for space spelled `%20`.
        let enc = |s: &str| {
            url::form_urlencoded::byte_serialize(s.as_bytes())
                .collect::<String>()
                .replace('+', "%20")
        };
        format!("/ui/nodes/{}/{}", enc(site), enc(hostname))
    }
}
