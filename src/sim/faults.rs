//! Fault injection (DESIGN.md §5 "faults are injectable per operation … and as scenarios";
//! docs/simulator.md "Faults" documents the grammar).
//!
//! ```text
//! spec   := item (";" item)*
//! item   := NAME [":" param ("," param)*]
//! NAME   := an action pattern (`machine.deploy`, `deploy`, `machines.read`, `*`)
//!         | a scenario name (`commissioning_fails`, `datasource_failure`, …)
//! param  := status=CODE | retry_after=SECS | latency=DUR | hang | rate=P | count=N
//!         | machines=SEL("+"SEL)* | after=DUR | answer=html|truncated|redirect|shape
//! ```
//!
//! Injected answers look like what they imitate (MAAS src/maasserver/utils/views.py,
//! middleware.py): a 409 with `Retry-After` is MAAS's serialization conflict, always
//! `Retry-After: 5` and its HTML page; a 409 without it is a state violation with the
//! handler's own text. `answer=` makes something in front of MAAS answer instead: an HTML page
//! (a proxy or login page), a body cut in the middle, a redirect, or JSON of another shape.
//! Every draw is a pure function of (seed, rule, action, machine, n-th call), so a run is
//! reproducible whatever the interleaving of concurrent clients.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

/// A fault spec that does not parse.
#[derive(Debug, Error, PartialEq)]
#[error("invalid fault spec item `{item}`: {reason}")]
pub struct FaultSpecError {
    pub item: String,
    pub reason: String,
}

/// Machine-level scenarios (what MAAS or an operator does to a machine on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scenario {
    /// Commissioning ends in Failed commissioning.
    CommissioningFails,
    /// Commissioning's tests end in Failed testing.
    TestingFails,
    /// Commissioning discovers no BOSS/M.2 boot disk (the boot disk is gone).
    NoBootDisk,
    /// The first deployment fails with cloud-init "no datasource" events.
    DatasourceFailure,
    /// Every deployment fails (generic installation failure).
    DeployFails,
    /// Disk erasing fails.
    EraseFails,
    /// Once Deployed (plus `after`), the machine is deleted from MAAS.
    MachineDeleted,
    /// Once Deployed (plus `after`), an operator releases it.
    ReleasedOob,
    /// Once Deployed (plus `after`), it is powered off.
    PoweredOff,
    /// Once Deployed (plus `after`), an operator redeploys it.
    RedeployedOob,
    /// Hardware sync stops after the first sync until the credentials are reseeded.
    HwsyncStale,
    /// Hardware sync never happens again after deployment.
    HwsyncNever,
    /// Once Deployed (plus `after`), the host's sync timer stops (someone disabled it) until
    /// its units are restarted (a reseed).
    HwsyncLost,
}

impl Scenario {
    pub const ALL: [(&'static str, Scenario); 13] = [
        ("commissioning_fails", Scenario::CommissioningFails),
        ("testing_fails", Scenario::TestingFails),
        ("no_boot_disk", Scenario::NoBootDisk),
        ("datasource_failure", Scenario::DatasourceFailure),
        ("deploy_fails", Scenario::DeployFails),
        ("erase_fails", Scenario::EraseFails),
        ("machine_deleted", Scenario::MachineDeleted),
        ("released_oob", Scenario::ReleasedOob),
        ("powered_off", Scenario::PoweredOff),
        ("redeployed_oob", Scenario::RedeployedOob),
        ("hwsync_stale", Scenario::HwsyncStale),
        ("hwsync_never", Scenario::HwsyncNever),
        ("hwsync_lost", Scenario::HwsyncLost),
    ];

    pub fn parse(name: &str) -> Option<Scenario> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, s)| *s == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// Scenarios that happen to a Deployed machine after a delay.
    pub fn is_out_of_band(self) -> bool {
        matches!(
            self,
            Scenario::MachineDeleted
                | Scenario::ReleasedOob
                | Scenario::PoweredOff
                | Scenario::RedeployedOob
                | Scenario::HwsyncLost
        )
    }
}

/// Which requests or machines a rule applies to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selector {
    /// Hostnames, system ids or BMC IPs; empty = every machine.
    pub machines: Vec<String>,
    /// Probability per request (request faults) or per machine (scenarios).
    pub rate: f64,
    /// At most this many injections (request faults) / machines (scenarios).
    pub count: Option<u64>,
}

impl Selector {
    pub fn matches_machine(&self, ids: &[&str]) -> bool {
        self.machines.is_empty() || self.machines.iter().any(|m| ids.contains(&m.as_str()))
    }
}

/// An answer that is not MAAS's (`answer=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerFault {
    /// An HTML page (with `status`, or 200), as a proxy or a login page sends.
    Html,
    /// MAAS's answer cut in half (the operation took effect).
    Truncated,
    /// `302 Found` to an https URL, as a web server in front of MAAS sends.
    Redirect,
    /// 200 with JSON of an unexpected shape.
    Shape,
}

impl AnswerFault {
    fn parse(text: &str) -> Option<AnswerFault> {
        Some(match text {
            "html" => AnswerFault::Html,
            "truncated" => AnswerFault::Truncated,
            "redirect" => AnswerFault::Redirect,
            "shape" => AnswerFault::Shape,
            _ => return None,
        })
    }
}

/// MAAS's `Retry-After` on its serialization conflict (utils/views.py RETRY_AFTER_CONFLICT).
pub const RETRY_AFTER_CONFLICT: u64 = 5;

/// One `NAME:params` item for requests.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFault {
    /// `*`, `deploy` (any handler) or `machine.deploy`.
    pub pattern: String,
    pub status: Option<u16>,
    pub retry_after: Option<u64>,
    pub latency: Option<Duration>,
    pub hang: bool,
    pub answer: Option<AnswerFault>,
    pub selector: Selector,
}

impl RequestFault {
    pub fn matches_action(&self, action: &str) -> bool {
        self.pattern == "*"
            || self.pattern == action
            || action
                .split_once('.')
                .is_some_and(|(_, op)| op == self.pattern)
    }
}

/// One scenario item.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioRule {
    pub scenario: Scenario,
    pub selector: Selector,
    /// For out-of-band scenarios: simulated delay after the machine reaches Deployed.
    pub after: Duration,
}

/// A parsed fault spec.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultSpec {
    pub requests: Vec<RequestFault>,
    pub scenarios: Vec<ScenarioRule>,
    pub text: String,
}

/// Per-rule call and injection counts (reset when the spec is replaced).
#[derive(Debug, Default)]
pub struct FaultState {
    calls: std::collections::HashMap<(usize, String, String), u64>,
    fired: BTreeMap<usize, u64>,
}

/// What a request fault draw decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Injection {
    pub latency: Option<Duration>,
    pub hang: bool,
    pub status: Option<u16>,
    pub retry_after: Option<u64>,
    pub answer: Option<AnswerFault>,
    /// The rule that fired (for the op log).
    pub rule: Option<String>,
}

/// Parses a duration: `250ms`, `5s`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.trim().parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

impl FaultSpec {
    /// Parses the grammar of the module doc. `known_action` validates action patterns so a
    /// typo is an error rather than a fault that never fires.
    pub fn parse(text: &str, known_action: &dyn Fn(&str) -> bool) -> Result<Self, FaultSpecError> {
        let mut spec = FaultSpec {
            text: text.trim().to_string(),
            ..FaultSpec::default()
        };
        for item in text.split(';').map(str::trim).filter(|i| !i.is_empty()) {
            let err = |reason: String| FaultSpecError {
                item: item.to_string(),
                reason,
            };
            let (name, params) = match item.split_once(':') {
                Some((n, p)) => (n.trim(), p.trim()),
                None => (item, ""),
            };
            let mut values: BTreeMap<&str, &str> = BTreeMap::new();
            for param in params.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (key, value) = param.split_once('=').unwrap_or((param, ""));
                let key = key.trim();
                if !matches!(
                    key,
                    "status"
                        | "retry_after"
                        | "latency"
                        | "hang"
                        | "rate"
                        | "count"
                        | "machines"
                        | "after"
                        | "answer"
                ) {
                    return Err(err(format!(
                        "unknown parameter `{key}` (expected status, retry_after, latency, hang, answer, rate, count, machines or after)"
                    )));
                }
                if values.insert(key, value.trim()).is_some() {
                    return Err(err(format!("parameter `{key}` given twice")));
                }
            }
            let rate = match values.get("rate") {
                Some(v) => match v.parse::<f64>() {
                    Ok(r) if (0.0..=1.0).contains(&r) => r,
                    _ => return Err(err(format!("rate `{v}` is not a number in 0..=1"))),
                },
                None => 1.0,
            };
            let count = match values.get("count") {
                Some(v) => Some(
                    v.parse::<u64>()
                        .map_err(|_| err(format!("count `{v}` is not a whole number")))?,
                ),
                None => None,
            };
            let machines = values
                .get("machines")
                .map(|v| {
                    v.split('+')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let selector = Selector {
                machines,
                rate,
                count,
            };
            let duration = |key: &str| -> Result<Option<Duration>, FaultSpecError> {
                match values.get(key) {
                    Some(v) => parse_duration(v).map(Some).ok_or_else(|| {
                        err(format!(
                            "{key} `{v}` is not a duration (e.g. 250ms, 5s, 2m)"
                        ))
                    }),
                    None => Ok(None),
                }
            };
            if let Some(scenario) = Scenario::parse(name) {
                for key in ["status", "retry_after", "latency", "hang", "answer"] {
                    if values.contains_key(key) {
                        return Err(err(format!(
                            "`{key}` applies to request faults, not to scenario `{name}`"
                        )));
                    }
                }
                spec.scenarios.push(ScenarioRule {
                    scenario,
                    selector,
                    after: duration("after")?.unwrap_or_default(),
                });
                continue;
            }
            if !known_action(name) {
                let scenarios: Vec<&str> = Scenario::ALL.iter().map(|(n, _)| *n).collect();
                return Err(err(format!(
                    "`{name}` is neither an API action (e.g. machine.deploy, deploy, machines.read, *) nor a scenario ({})",
                    scenarios.join(", ")
                )));
            }
            if values.contains_key("after") {
                return Err(err("`after` applies to scenarios only".to_string()));
            }
            let status = match values.get("status") {
                Some(v) => match v.parse::<u16>() {
                    Ok(s) if (400..=599).contains(&s) => Some(s),
                    _ => return Err(err(format!("status `{v}` is not an HTTP error code"))),
                },
                None => None,
            };
            let retry_after = match values.get("retry_after") {
                Some(v) => Some(
                    v.parse::<u64>()
                        .map_err(|_| err(format!("retry_after `{v}` is not whole seconds")))?,
                ),
                None => None,
            };
            if retry_after.is_some() && status.is_none() {
                return Err(err("retry_after needs a status (409 or 503)".to_string()));
            }
            if status == Some(409) && retry_after.is_some_and(|r| r != RETRY_AFTER_CONFLICT) {
                return Err(err(format!(
                    "a 409 with Retry-After is MAAS's serialization conflict, which always asks \
                     for {RETRY_AFTER_CONFLICT} seconds (retry_after={RETRY_AFTER_CONFLICT}); \
                     leave retry_after out for a state violation"
                )));
            }
            let answer = match values.get("answer") {
                None => None,
                Some(v) => Some(AnswerFault::parse(v).ok_or_else(|| {
                    err(format!(
                        "answer `{v}` is not one of html, truncated, redirect, shape"
                    ))
                })?),
            };
            if values.get("hang").is_some_and(|v| !v.is_empty()) {
                return Err(err("`hang` takes no value".to_string()));
            }
            let fault = RequestFault {
                pattern: name.to_string(),
                status,
                retry_after,
                latency: duration("latency")?,
                hang: values.contains_key("hang"),
                answer,
                selector,
            };
            if fault.status.is_none()
                && fault.latency.is_none()
                && !fault.hang
                && fault.answer.is_none()
            {
                return Err(err(
                    "a request fault needs status=CODE, latency=DUR, hang or answer=KIND"
                        .to_string(),
                ));
            }
            spec.requests.push(fault);
        }
        Ok(spec)
    }

    /// Decides what happens to a request of `action` on a machine (`ids` = its system id,
    /// hostname, BMC IP; empty for collection requests). `state` counts calls and injections.
    pub fn draw(&self, seed: u64, action: &str, ids: &[&str], state: &mut FaultState) -> Injection {
        let mut injection = Injection::default();
        let machine = ids.first().copied().unwrap_or("");
        for (index, rule) in self.requests.iter().enumerate() {
            if !rule.matches_action(action) || !rule.selector.matches_machine(ids) {
                continue;
            }
            let fired = state.fired.get(&index).copied().unwrap_or(0);
            if rule.selector.count.is_some_and(|limit| fired >= limit) {
                continue;
            }
            let nth = state
                .calls
                .entry((index, action.to_string(), machine.to_string()))
                .or_insert(0);
            let n = *nth;
            *nth += 1;
            let key = draw_key(seed, &[&index.to_string(), action, machine], n);
            if !ChaCha8Rng::seed_from_u64(key).random_bool(rule.selector.rate) {
                continue;
            }
            *state.fired.entry(index).or_insert(0) += 1;
            injection.rule = Some(rule.pattern.clone());
            if let Some(latency) = rule.latency {
                injection.latency = Some(injection.latency.unwrap_or_default() + latency);
            }
            injection.hang |= rule.hang;
            if injection.status.is_none() && rule.status.is_some() {
                injection.status = rule.status;
                injection.retry_after = rule.retry_after;
            }
            if injection.answer.is_none() {
                injection.answer = rule.answer;
            }
        }
        injection
    }

    /// The scenario rules that select this machine (drawn once per machine from the seed).
    pub fn scenarios_for(&self, seed: u64, ids: &[&str]) -> Vec<ScenarioRule> {
        self.scenarios
            .iter()
            .enumerate()
            .filter(|(index, rule)| {
                rule.selector.matches_machine(ids)
                    && ChaCha8Rng::seed_from_u64(draw_key(
                        seed,
                        &["scenario", &index.to_string(), ids.first().unwrap_or(&"")],
                        0,
                    ))
                    .random_bool(rule.selector.rate)
            })
            .map(|(_, rule)| rule.clone())
            .collect()
    }
}

/// FNV-1a over the parts: a stable hash (std's hasher may change between Rust releases).
pub fn draw_key(seed: u64, parts: &[&str], n: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for part in parts {
        feed(part.as_bytes());
        feed(&[0]);
    }
    feed(&n.to_le_bytes());
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(_: &str) -> bool {
        true
    }

    #[test]
    fn parses_request_faults_and_scenarios() {
        let spec = FaultSpec::parse(
            "machine.deploy:status=503,retry_after=10,rate=0.5; machines.read:latency=250ms; \
             release:hang,count=1; datasource_failure:machines=gpu00001+gpu00002; \
             released_oob:after=10m,rate=0.1",
            &any,
        )
        .unwrap();
        assert_eq!(spec.requests.len(), 3);
        assert_eq!(spec.requests[0].status, Some(503));
        assert_eq!(spec.requests[0].retry_after, Some(10));
        assert_eq!(spec.requests[0].selector.rate, 0.5);
        assert_eq!(spec.requests[1].latency, Some(Duration::from_millis(250)));
        assert!(spec.requests[2].hang);
        assert_eq!(spec.requests[2].selector.count, Some(1));
        assert_eq!(spec.scenarios.len(), 2);
        assert_eq!(spec.scenarios[0].scenario, Scenario::DatasourceFailure);
        assert_eq!(
            spec.scenarios[0].selector.machines,
            vec!["gpu00001", "gpu00002"]
        );
        assert_eq!(spec.scenarios[1].after, Duration::from_secs(600));
    }

    #[test]
    fn rejects_bad_items_with_the_reason() {
        let known = |a: &str| a == "machine.deploy" || a == "deploy" || a == "*";
        let cases = [
            (
                "deploy:status=200",
                "status `200` is not an HTTP error code",
            ),
            ("deploy:rate=2", "rate `2` is not a number in 0..=1"),
            (
                "deploy",
                "a request fault needs status=CODE, latency=DUR, hang or answer=KIND",
            ),
            (
                "deploy:status=409,retry_after=10",
                "serialization conflict, which always asks for 5 seconds",
            ),
            (
                "deploy:answer=xml",
                "answer `xml` is not one of html, truncated, redirect, shape",
            ),
            ("deploi:status=503", "`deploi` is neither an API action"),
            ("deploy:latency=fast", "latency `fast` is not a duration"),
            ("deploy:colour=red", "unknown parameter `colour`"),
            ("deploy:retry_after=5", "retry_after needs a status"),
            (
                "powered_off:status=503",
                "`status` applies to request faults",
            ),
        ];
        for (text, reason) in cases {
            let err = FaultSpec::parse(text, &known).unwrap_err();
            assert!(err.reason.contains(reason), "{text}: {}", err.reason);
            assert_eq!(err.item, text);
        }
    }

    #[test]
    fn draws_are_deterministic_and_follow_the_rate() {
        let spec = FaultSpec::parse("deploy:status=503,rate=0.3", &any).unwrap();
        let run = |seed: u64| -> Vec<bool> {
            let mut state = FaultState::default();
            (0..200u64)
                .map(|_| {
                    spec.draw(seed, "machine.deploy", &["abc"], &mut state)
                        .status
                        .is_some()
                })
                .collect()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let hits = run(1).iter().filter(|h| **h).count();
        assert!((30..=90).contains(&hits), "{hits} of 200 at rate 0.3");
        let none = spec.draw(1, "machine.release", &["abc"], &mut FaultState::default());
        assert_eq!(none, Injection::default());
        let once = FaultSpec::parse("deploy:hang,count=1", &any).unwrap();
        let mut state = FaultState::default();
        assert!(once.draw(1, "machine.deploy", &["a"], &mut state).hang);
        assert!(!once.draw(1, "machine.deploy", &["a"], &mut state).hang);
    }
}
