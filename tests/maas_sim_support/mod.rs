//! Shared helpers of the client-against-simulator suites (tests/maas_sim_*.rs): metalform's
//! MAAS client pointed at an embedded simulator, both on the simulator's manual clock (so OAuth
//! timestamps and MAAS's background work agree), with a sleeper that records the client's
//! back-off instead of waiting it out.
//!
//! Each suite declares `mod sim_support; mod maas_sim_support;` so the raw-HTTP simulator
//! helpers (control API, counters, op log) are available next to the client.
#![allow(dead_code)]

use metalform::lifecycle::MaasStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use metalform::clock::Clock;
use metalform::provider::maas::{
    Jitter, MaasClient, MaasClientOptions, MaasMetrics, Machine, RetryPolicy, Sleeper,
};
use metalform::secrets::Secret;
use metalform::sim::SimConfig;
use metalform::sim::config::UserSpec;

use crate::sim_support::{Sim, fleet};

/// A non-admin MAAS user every suite's simulator knows (permission answers).
pub const USER: &str = "alice";
pub const USER_KEY: &str = "aliceconsumer:alicetoken:alicesecret";

/// The back-off the client asked for, in order; returns at once so retry tests take no time.
#[derive(Debug, Default, Clone)]
pub struct RecordingSleeper {
    waits: Arc<Mutex<Vec<Duration>>>,
}

impl RecordingSleeper {
    pub fn waits(&self) -> Vec<Duration> {
        self.waits.lock().unwrap().clone()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.waits.lock().unwrap().push(duration);
        Box::pin(async {})
    }
}

/// Always the same sample (0.5): back-off values are exact.
#[derive(Debug)]
pub struct FixedJitter;

impl Jitter for FixedJitter {
    fn sample(&self) -> f64 {
        0.5
    }
}

/// A client of the simulator with its own counters and sleeper.
pub struct Client {
    pub maas: MaasClient,
    pub sleeper: RecordingSleeper,
}

impl std::ops::Deref for Client {
    type Target = MaasClient;
    fn deref(&self) -> &MaasClient {
        &self.maas
    }
}

impl Client {
    pub fn metrics(&self) -> &MaasMetrics {
        self.maas.metrics()
    }
}

/// The options every suite uses: the simulator's clock, fixed jitter, recorded sleeps, a
/// short timeout (the simulator answers in milliseconds; hangs must end quickly).
pub fn options(sim: &Sim, sleeper: &RecordingSleeper) -> MaasClientOptions {
    MaasClientOptions {
        timeout: Duration::from_secs(3),
        clock: Arc::new(sim.clock.clone()) as Arc<dyn Clock>,
        jitter: Arc::new(FixedJitter),
        sleeper: Arc::new(sleeper.clone()),
        retry: RetryPolicy::default(),
        ..MaasClientOptions::default()
    }
}

/// The admin's client, as metalform is configured with the simulator's URL and key.
pub fn admin(sim: &Sim) -> Client {
    client_with_key(sim, &sim.key)
}

/// The non-admin user's client.
pub fn user(sim: &Sim) -> Client {
    client_with_key(sim, USER_KEY)
}

pub fn client_with_key(sim: &Sim, key: &str) -> Client {
    let sleeper = RecordingSleeper::default();
    let maas = MaasClient::new(
        &sim.handle.maas_url,
        Secret::new(key),
        options(sim, &sleeper),
    )
    .expect("client");
    Client { maas, sleeper }
}

/// The simulator's (manual) clock: "now" for hardware-sync health.
pub fn now(sim: &Sim) -> chrono::DateTime<chrono::Utc> {
    sim.clock.now()
}

/// `n` Ready GPU machines (no jitter on MAAS's durations) plus the non-admin user.
pub fn site(n: usize) -> SimConfig {
    let mut config = fleet(n);
    config.users.push(UserSpec {
        username: USER.to_string(),
        api_key: USER_KEY.to_string(),
    });
    config
}

/// Moves the simulator's clock in `step`-second steps until the machine reaches `wanted`
/// (reading it through the client), at most `limit` seconds. Returns the machine.
pub async fn wait_for(
    sim: &Sim,
    client: &MaasClient,
    system_id: &str,
    wanted: MaasStatus,
    step: i64,
    limit: i64,
) -> Machine {
    let mut waited = 0;
    loop {
        let machine = client.read_machine(system_id).await.expect("read_machine");
        if machine.status == wanted {
            return machine;
        }
        assert!(
            waited < limit,
            "{system_id} still {} after {waited} s, expected {wanted}",
            machine.status_label()
        );
        sim.advance(step);
        waited += step;
    }
}

/// The system id of the n-th machine (MAAS's id order).
pub async fn nth(client: &MaasClient, n: usize) -> String {
    let machines = client
        .list_machines(&metalform::provider::maas::MachineFilter::all())
        .await
        .expect("list_machines");
    machines[n].system_id.clone()
}
