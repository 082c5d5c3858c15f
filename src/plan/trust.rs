//! Whether a plan file may be run (issue 16 point 1; docs/security.md "Plan files"). A plan
//! file is input: anyone who can write it could flip an item's `destructive` flag, point a
//! target at another MAAS or another secret, or add items for nodes the manifests pause or do
//! not have — and re-hash it so its id matches. So `apply PLANFILE`:
//!
//! 1. verifies the file's HMAC-SHA256 signature under the state store's key ([`verify`]); a
//!    re-hashed file, or one written against another store, fails here;
//! 2. checks it is fresh (`super::check_fresh`: fleet revision, observed snapshot, store serial,
//!    parent plan);
//! 3. plans again from the fleet and the observation made now and requires the same plan
//!    ([`differences`] says what differs); the plan made now is what runs, so where to
//!    connect, which secret to read and what is destructive never come from the file.
//!
//! Pure: the key is passed in; the store keeps it.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::fresh::short_id;
use super::types::{Plan, PlanItem};
use crate::secrets::Secret;

/// How a signature is written in a plan file.
pub const SIGNATURE_PREFIX: &str = "hmac-sha256:";

/// HMAC-SHA256 (RFC 2104): `H((K ^ opad) || H((K ^ ipad) || m))`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn signature_of(plan_id: &str, key: &Secret) -> String {
    format!(
        "{SIGNATURE_PREFIX}{}",
        hex::encode(hmac_sha256(key.expose().as_bytes(), plan_id.as_bytes()))
    )
}

/// Sign `plan` (its id, which is the hash of its content) with the store's key.
pub fn sign(plan: &mut Plan, key: &Secret) {
    plan.signature = Some(signature_of(&plan.id, key));
}

/// Why a plan file is not run. Nothing has been changed when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UntrustedPlan {
    #[error(
        "the plan {} is not signed: only a plan file written by `metalform plan --out` against this state store is applied",
        short_id(plan_id)
    )]
    Unsigned { plan_id: String },
    #[error(
        "the plan {}'s signature does not verify with this state store's key: the file was changed after `metalform plan` wrote it, or it was written against another state store",
        short_id(plan_id)
    )]
    BadSignature { plan_id: String },
    #[error(
        "the plan {} is not what planning gives now from the same fleet, MAAS and store: {}",
        short_id(plan_id),
        differences.join("; ")
    )]
    Differs {
        plan_id: String,
        differences: Vec<String>,
    },
}

impl UntrustedPlan {
    /// What to do.
    pub fn hint(&self) -> &'static str {
        match self {
            UntrustedPlan::Unsigned { .. } | UntrustedPlan::BadSignature { .. } => {
                "make the plan again with `metalform plan --out PLANFILE` using the same --state, review it, and apply that file"
            }
            UntrustedPlan::Differs { .. } => {
                "plan files are not edited: make a new plan (`metalform plan --out PLANFILE`), review it, and apply that file"
            }
        }
    }
}

/// Check the plan's signature (its id is checked against its content when the file is read).
pub fn verify(plan: &Plan, key: &Secret) -> Result<(), UntrustedPlan> {
    let Some(signature) = &plan.signature else {
        return Err(UntrustedPlan::Unsigned {
            plan_id: plan.id.clone(),
        });
    };
    let expected = signature_of(&plan.id, key);
    // Compare in full: the time taken does not say how much of a guess was right.
    let same = signature.len() == expected.len()
        && signature
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        Ok(())
    } else {
        Err(UntrustedPlan::BadSignature {
            plan_id: plan.id.clone(),
        })
    }
}

/// The most differences a refusal lists.
const SHOWN: usize = 8;

/// The two plans decide the same and differ only in the user-data they show: a preview, which
/// a plan made with the agent install known (the daemon, `plan --agent-…`) has and one made
/// without it lacks; the executor renders its own payload when it deploys.
fn same_but_user_data(file: &Plan, now: &Plan) -> bool {
    let strip = |plan: &Plan| {
        let mut plan = plan.clone();
        for item in &mut plan.items {
            item.user_data = None;
        }
        plan.id = super::document::content_id(&plan);
        plan.signature = None;
        plan
    };
    strip(file) == strip(now)
}

/// What differs between a plan from a file and the plan made now from the same world, in
/// words; empty when they are the same plan.
pub fn differences(file: &Plan, now: &Plan) -> Vec<String> {
    if file.id == now.id || same_but_user_data(file, now) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let planned: BTreeMap<String, &PlanItem> =
        now.items.iter().map(|i| (i.node.to_string(), i)).collect();
    let written: BTreeMap<String, &PlanItem> =
        file.items.iter().map(|i| (i.node.to_string(), i)).collect();
    for (node, item) in &written {
        match planned.get(node) {
            None => out.push(format!(
                "{node}: the file has an item ({}), planning now has none (not in the manifests of a planned site)",
                item.action.name()
            )),
            Some(now_item) => out.extend(item_differences(node, item, now_item)),
        }
    }
    for (node, item) in &planned {
        if !written.contains_key(node) {
            out.push(format!(
                "{node}: planning now has an item ({}), the file has none",
                item.action.name()
            ));
        }
    }
    if file.sites != now.sites {
        out.push("the sites' summaries differ".into());
    }
    if out.is_empty() {
        // Same items, different document: a summary or header field was changed.
        out.push("the plan's header or summary differs".into());
    }
    if out.len() > SHOWN {
        let more = out.len() - SHOWN;
        out.truncate(SHOWN);
        out.push(format!("and {more} more"));
    }
    out
}

fn item_differences(node: &str, file: &PlanItem, now: &PlanItem) -> Vec<String> {
    let mut out = Vec::new();
    if file.action != now.action {
        out.push(format!(
            "{node}: the file says {}, planning now says {} ({})",
            file.action.name(),
            now.action.name(),
            now.reason
        ));
    }
    if file.destructive != now.destructive {
        out.push(format!(
            "{node}: the file marks it {}destructive, planning now {}",
            if file.destructive { "" } else { "not " },
            if now.destructive {
                "does (it destroys something)"
            } else {
                "does not"
            }
        ));
    }
    match (&file.target, &now.target) {
        (Some(f), Some(n)) => {
            if f.site.maas.url != n.site.maas.url {
                out.push(format!(
                    "{node}: the file sends it to MAAS at {}, the fleet says {}",
                    crate::sanitize::redact::url(f.site.maas.url.as_str()),
                    crate::sanitize::redact::url(n.site.maas.url.as_str())
                ));
            }
            if f.site.maas.api_key != n.site.maas.api_key {
                out.push(format!(
                    "{node}: the file reads the MAAS key from {}, the fleet from {}",
                    f.site.maas.api_key, n.site.maas.api_key
                ));
            }
            if f.power_credentials != n.power_credentials {
                out.push(format!(
                    "{node}: the file reads the BMC login from {}, the fleet from {}",
                    f.power_credentials, n.power_credentials
                ));
            }
            if (&f.site.deploy.password, &f.site.deploy.node_passwords)
                != (&n.site.deploy.password, &n.site.deploy.node_passwords)
            {
                out.push(format!(
                    "{node}: the file reads the deploy password from elsewhere than the fleet"
                ));
            }
            if f.node != n.node {
                out.push(format!("{node}: the node's manifest fields differ"));
            }
            if f.profile != n.profile || f.site != n.site {
                out.push(format!("{node}: its site or profile settings differ"));
            }
            if (&f.system_id, &f.node_id, &f.job_id) != (&n.system_id, &n.node_id, &n.job_id) {
                out.push(format!("{node}: the machine, inventory row or job differs"));
            }
        }
        (Some(_), None) => out.push(format!(
            "{node}: the file carries a target, planning now has nothing to run"
        )),
        (None, Some(_)) => out.push(format!("{node}: the file carries no target")),
        (None, None) => {}
    }
    if out.is_empty() && file != now {
        out.push(format!("{node}: the item's reason or notes differ"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1 and 2.
        assert_eq!(
            hex::encode(hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block is hashed first.
        assert_eq!(
            hex::encode(hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
