//! Plan files are input (issue 16 point 1, docs/security.md "Plan files"). Each test forges a
//! plan file the way an attacker with write access to it would — edit, then re-hash so its id
//! matches — and applies it with the real binary against simulated MAAS. Two layers are
//! checked: the signature refuses the re-hashed file; and a forgery signed with the store's own
//! key (as if the key had leaked) is refused too, because apply plans again and runs only what
//! planning now gives. Every refusal names what is wrong and changes nothing.

use crate::onboard_support;

use std::path::Path;

use metalform::model::NodeId;
use metalform::model::SecretRef;
use metalform::plan::{self, Action, Plan};
use metalform::secrets::Secret;
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Write `plan` to `path` the way a forger would: content edited, id re-hashed to match.
fn rehash_and_save(mut plan: Plan, path: &Path) {
    plan.summary = metalform::plan::Summary::of(&plan.items);
    plan.id = plan::content_id(&plan);
    plan::save(&plan, path).unwrap();
}

/// The same, signed with the store's own key: only the re-plan can catch it.
async fn rehash_sign_and_save(bed: &Bed, mut plan: Plan, path: &Path) {
    plan.summary = metalform::plan::Summary::of(&plan.items);
    plan.id = plan::content_id(&plan);
    plan::sign(&mut plan, &bed.store.plan_signing_key().await.unwrap());
    plan::save(&plan, path).unwrap();
}

/// A forgery signed with the store's key, written to `name` and applied: refused with
/// `expected`, nothing changed.
async fn signed_forgery_refused(bed: &Bed, forged: Plan, name: &str, expected: &str) -> String {
    let attack = bed.dir.path().join(name);
    rehash_sign_and_save(bed, forged, &attack).await;
    refused(bed, &attack, expected).await
}

/// Apply `file` (with --allow-destructive, so only the forgery checks stand in the way): it
/// is refused with an error containing `expected`, and nothing changed.
async fn refused(bed: &Bed, file: &Path, expected: &str) -> String {
    let serial = bed.store.serial().await.unwrap();
    let out = bed
        .cli(
            &["apply", file.to_str().unwrap(), "--allow-destructive"],
            free_port(),
        )
        .output()
        .unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains(expected),
        "expected `{expected}` in:\n{shown}"
    );
    assert!(bed.jobs().await.is_empty(), "a refused plan created jobs");
    assert_eq!(bed.store.serial().await.unwrap(), serial);
    assert_eq!(bed.maas_writes("dc1"), Vec::<String>::new());
    stderr
}

fn item_mut<'p>(plan: &'p mut Plan, host: &str) -> &'p mut metalform::plan::PlanItem {
    plan.items
        .iter_mut()
        .find(|i| i.node.hostname.as_str() == host)
        .unwrap_or_else(|| panic!("no item for {host}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehashed_plan_with_the_destructive_flag_cleared_is_refused() {
    let mut site = SiteSetup::generated("dc1", 8, 2, 0);
    // Someone else holds gpu00001's machine (allocated, not deployed: a deployed one would be
    // adopted): onboarding it destroys what they run there.
    site.config.machines[0].initial = metalform::sim::InitialState::Allocated;
    let bed = Bed::start(Setup::one_site(site)).await;
    let file = bed.plan_to("plan.json");
    let mut forged = plan::load(&file).unwrap();
    assert!(item_mut(&mut forged, "gpu00001").destructive);
    item_mut(&mut forged, "gpu00001").destructive = false;

    let attack = bed.dir.path().join("attack.json");
    rehash_and_save(forged.clone(), &attack);
    // Re-hashed: the id matches, the signature does not.
    let out = bed
        .cli(&["apply", attack.to_str().unwrap()], free_port())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "signature does not verify with this state store's key: the file was changed after `metalform plan` wrote it"
        ),
        "{}",
        text(&out)
    );
    assert!(bed.jobs().await.is_empty());

    // Signed with a leaked key: planning now says it destroys something.
    rehash_sign_and_save(&bed, forged, &attack).await;
    let out = bed
        .cli(&["apply", attack.to_str().unwrap()], free_port())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "dc1/gpu00001: the file marks it not destructive, planning now does (it destroys something)"
        ),
        "{}",
        text(&out)
    );
    assert!(bed.jobs().await.is_empty());
    assert_eq!(bed.maas_writes("dc1"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehashed_plan_pointing_at_another_maas_is_refused_and_never_contacts_it() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 9, 2, 0))).await;
    // The attacker's "MAAS": it counts connections.
    let evil = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    evil.set_nonblocking(true).unwrap();
    let evil_url: url::Url = format!("http://{}/MAAS", evil.local_addr().unwrap())
        .parse()
        .unwrap();
    let file = bed.plan_to("plan.json");
    let mut forged = plan::load(&file).unwrap();
    for item in &mut forged.items {
        if let Some(target) = &mut item.target {
            target.site.maas.url = evil_url.clone();
        }
    }
    let attack = bed.dir.path().join("attack.json");
    rehash_and_save(forged.clone(), &attack);
    refused(&bed, &attack, "signature does not verify").await;
    rehash_sign_and_save(&bed, forged, &attack).await;
    let stderr = refused(
        &bed,
        &attack,
        &format!(
            "dc1/gpu00001: the file sends it to MAAS at {evil_url}, the fleet says {}",
            bed.sim("dc1").maas_url.trim_end_matches('/')
        ),
    )
    .await;
    assert!(
        stderr.contains("hint: plan files are not edited"),
        "{stderr}"
    );
    assert!(
        evil.accept().is_err(),
        "apply connected to the MAAS the plan file named"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_items_for_a_paused_node_and_a_node_not_in_the_manifests_are_refused() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 10, 3, 0))).await;
    let first = plan::load(&bed.plan_to("first.json")).unwrap();
    let paused = first.items[1].node.hostname.to_string();
    bed.edit_fleet(
        "nodes/dc1.yaml",
        &format!("{{hostname: {paused}, "),
        &format!("{{hostname: {paused}, paused: true, "),
    );
    let file = bed.plan_to("plan.json");
    let honest = plan::load(&file).unwrap();
    let template = honest
        .items
        .iter()
        .find(|i| i.action == Action::Onboard)
        .unwrap()
        .clone();
    assert!(matches!(
        honest
            .items
            .iter()
            .find(|i| i.node.hostname.as_str() == paused)
            .unwrap()
            .action,
        Action::Blocked { .. }
    ));

    // The paused node, turned into an onboarding.
    let mut forged = honest.clone();
    let item = item_mut(&mut forged, &paused);
    let mut target = template.target.clone().unwrap();
    target.node.id = NodeId::new("dc1", &paused);
    item.action = Action::Onboard;
    item.reason = "forged".into();
    item.target = Some(target);
    signed_forgery_refused(
        &bed,
        forged,
        "paused.json",
        &format!("dc1/{paused}: the file says onboard, planning now says blocked"),
    )
    .await;

    // A node no manifest has.
    let mut forged = honest.clone();
    let mut ghost = template.clone();
    ghost.node = NodeId::new("dc1", "ghost01");
    ghost.target.as_mut().unwrap().node.id = NodeId::new("dc1", "ghost01");
    forged.items.push(ghost);
    signed_forgery_refused(
        &bed,
        forged,
        "ghost.json",
        "dc1/ghost01: the file has an item (onboard), planning now has none",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_power_credentials_reading_another_secret_are_refused() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 11, 1, 0))).await;
    let file = bed.plan_to("plan.json");
    let mut forged = plan::load(&file).unwrap();
    // Send the MAAS API key to the BMC as its password.
    for item in &mut forged.items {
        if let Some(target) = &mut item.target {
            target.power_credentials = SecretRef::new("kv/dc1/api-token", None);
        }
    }
    signed_forgery_refused(
        &bed,
        forged,
        "attack.json",
        "the file reads the BMC login from kv/dc1/api-token, the fleet from kv/dc1/power/default",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_plans_and_plans_signed_by_another_store_are_refused() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 12, 1, 0))).await;
    let file = bed.plan_to("plan.json");
    let mut honest = plan::load(&file).unwrap();
    assert!(
        honest
            .signature
            .as_deref()
            .is_some_and(|s| s.starts_with(plan::SIGNATURE_PREFIX))
    );

    honest.signature = None;
    let unsigned = bed.dir.path().join("unsigned.json");
    plan::save(&honest, &unsigned).unwrap();
    let stderr = refused(&bed, &unsigned, "is not signed: only a plan file written by `metalform plan --out` against this state store is applied").await;
    assert!(stderr.contains("using the same --state"), "{stderr}");

    plan::sign(
        &mut honest,
        &Secret::new("another-store-key-0123456789abcdef"),
    );
    let foreign = bed.dir.path().join("foreign.json");
    plan::save(&honest, &foreign).unwrap();
    refused(
        &bed,
        &foreign,
        "or it was written against another state store",
    )
    .await;

    // The honest file is applied.
    let out = bed
        .cli(&["apply", file.to_str().unwrap()], free_port())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is signed by this store and fresh"),
        "{}",
        text(&out)
    );
}
