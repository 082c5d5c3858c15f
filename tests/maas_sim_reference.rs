//! Where metalform's MAAS client and the simulator disagreed, decided by
//! ../shared/maas/API_REFERENCE.md (and the real fixtures); each test pins the side that was
//! fixed. docs/simulator.md and docs/maas-client.md describe the resulting behaviour.

mod maas_sim_support;
mod sim_support;

use maas_sim_support::*;
use metalform::provider::maas::*;
use sim_support::Sim;

/// §2.3: PLAINTEXT compares the unescaped header value with
/// `escape(consumer_secret) + "&" + escape(token_secret)` — the client (like oauthlib, which
/// python-libmaas uses) percent-encodes the secret inside the signature and the header value
/// again. A secret with reserved characters must therefore still authenticate.
#[tokio::test]
async fn a_token_secret_with_reserved_characters_authenticates() {
    let mut config = site(1);
    config.api_key = "ck-metal:tk-metal:s3cr+t/k=y~ok".to_string();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    assert_eq!(maas.whoami().await.unwrap().username, "admin");
    assert_eq!(
        maas.list_machines(&MachineFilter::all())
            .await
            .unwrap()
            .len(),
        1
    );
}
