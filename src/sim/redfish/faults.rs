//! Injectable faults of a simulated BMC (seed 003 "Testing Strategy": "Mock Redfish server
//! with programmable behavior (success, timeouts, 5xx)").
//!
//! Grammar (`metalform sim --redfish-faults`, or [`FaultRule::parse`]): rules separated by
//! `;`, each `OP:EFFECT[,count=N]` where OP is one of `root`, `system`, `patch_system`,
//! `reset`, `media`, `insert`, `eject`, `manager`, `any`, and EFFECT is `status=CODE` (with
//! an optional `retry_after=SECONDS`), `latency=DURATION` or `hang`. `count` limits how many
//! requests the rule hits (default: all).

use std::time::Duration;

/// The operation a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Root,
    /// GETs of the system, systems collection.
    System,
    PatchSystem,
    Reset,
    /// GETs of the virtual media collection and slots.
    Media,
    Insert,
    Eject,
    /// GETs of managers.
    Manager,
    Any,
}

impl Op {
    fn parse(text: &str) -> Option<Op> {
        Some(match text {
            "root" => Op::Root,
            "system" => Op::System,
            "patch_system" => Op::PatchSystem,
            "reset" => Op::Reset,
            "media" => Op::Media,
            "insert" => Op::Insert,
            "eject" => Op::Eject,
            "manager" => Op::Manager,
            "any" => Op::Any,
            _ => return None,
        })
    }

    fn matches(self, op: Op) -> bool {
        self == Op::Any || self == op
    }
}

/// What a rule does to a request it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Status {
        code: u16,
        retry_after: Option<u64>,
    },
    /// Answer normally after this delay.
    Latency(Duration),
    /// Never answer (the client's timeout fires).
    Hang,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    pub op: Op,
    pub effect: Effect,
    /// Requests left to hit; `None` = all.
    pub remaining: Option<u32>,
}

/// What the simulated maintenance OS does once it booted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MaintenanceBehaviour {
    /// Reads the task ISO and reports success (or the step that failed reading it).
    #[default]
    Succeed,
    /// Reports a failure of this step (e.g. `bootloader-linux.service`).
    Fail(String),
    /// Never reports (a hung installer: the controller's stuck timeout fires).
    Silent,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fault `{rule}`: {reason}")]
pub struct FaultError {
    pub rule: String,
    pub reason: String,
}

impl FaultRule {
    /// Parses rules separated by `;` (empty text: none).
    pub fn parse(text: &str) -> Result<Vec<FaultRule>, FaultError> {
        text.split(';')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(Self::parse_one)
            .collect()
    }

    fn parse_one(rule: &str) -> Result<FaultRule, FaultError> {
        let error = |reason: &str| FaultError {
            rule: rule.to_owned(),
            reason: reason.to_owned(),
        };
        let (op, rest) = rule
            .split_once(':')
            .ok_or_else(|| error("expected OP:EFFECT, e.g. insert:status=503,count=2"))?;
        let op = Op::parse(op.trim()).ok_or_else(|| {
            error("unknown operation: use root, system, patch_system, reset, media, insert, eject, manager or any")
        })?;
        let mut effect = None;
        let mut retry_after = None;
        let mut remaining = None;
        for part in rest.split(',').map(str::trim) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            match key {
                "status" => {
                    let code: u16 = value
                        .parse()
                        .ok()
                        .filter(|c| (400..600).contains(c))
                        .ok_or_else(|| error("status must be an HTTP error code, 400–599"))?;
                    effect = Some(Effect::Status {
                        code,
                        retry_after: None,
                    });
                }
                "retry_after" => {
                    retry_after = Some(
                        value
                            .parse()
                            .map_err(|_| error("retry_after takes seconds"))?,
                    );
                }
                "latency" => {
                    let delay =
                        crate::model::duration::parse(value).map_err(|e| error(&e.to_string()))?;
                    effect = Some(Effect::Latency(delay));
                }
                "hang" => effect = Some(Effect::Hang),
                "count" => {
                    remaining = Some(value.parse().map_err(|_| error("count takes a number"))?);
                }
                _ => {
                    return Err(error(
                        "unknown setting: use status, retry_after, latency, hang or count",
                    ));
                }
            }
        }
        let mut effect =
            effect.ok_or_else(|| error("no effect: add status=CODE, latency=DURATION or hang"))?;
        if let Effect::Status { retry_after: r, .. } = &mut effect {
            *r = retry_after;
        }
        Ok(FaultRule {
            op,
            effect,
            remaining,
        })
    }
}

/// The first rule that hits `op`, counting it down.
pub fn take(rules: &mut Vec<FaultRule>, op: Op) -> Option<Effect> {
    let index = rules.iter().position(|r| r.op.matches(op))?;
    let rule = &mut rules[index];
    let effect = rule.effect;
    if let Some(left) = &mut rule.remaining {
        *left -= 1;
        if *left == 0 {
            rules.remove(index);
        }
    }
    Some(effect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_count_down() {
        let mut rules = FaultRule::parse(
            "insert:status=503,retry_after=1,count=2; system:latency=250ms; reset:hang",
        )
        .unwrap();
        assert_eq!(rules.len(), 3);
        let hit = Effect::Status {
            code: 503,
            retry_after: Some(1),
        };
        assert_eq!(take(&mut rules, Op::Insert), Some(hit));
        assert_eq!(take(&mut rules, Op::Insert), Some(hit));
        assert_eq!(take(&mut rules, Op::Insert), None);
        assert_eq!(
            take(&mut rules, Op::System),
            Some(Effect::Latency(Duration::from_millis(250)))
        );
        assert_eq!(
            take(&mut rules, Op::System),
            Some(Effect::Latency(Duration::from_millis(250)))
        );
        assert_eq!(take(&mut rules, Op::Reset), Some(Effect::Hang));
        assert_eq!(
            FaultRule::parse("insert:status=200")
                .unwrap_err()
                .to_string(),
            "fault `insert:status=200`: status must be an HTTP error code, 400–599"
        );
        assert!(FaultRule::parse("mount:hang").is_err());
        assert!(FaultRule::parse("insert").is_err());
        assert!(FaultRule::parse("insert:count=1").is_err());
        assert_eq!(FaultRule::parse(" ").unwrap(), []);
    }
}
