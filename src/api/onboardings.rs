//! Onboardings (seed 000 §4.2 read model, §4.9 recovery semantics, §4.12 audit, §4.15): the job
//! routes of the kind (`jobs`: list, one job with its events, every recovery action), and the
//! create routes, refused as owned by git — a node onboards when its manifest is committed.

use axum::extract::State;
use axum::http::Method;
use serde_json::Value;

use super::{Access, ApiError, ApiState, MaybeJsonBody, RouteTable};
use crate::lifecycle::JobKind;

pub(super) fn routes(table: &mut RouteTable) {
    super::jobs::routes(table, JobKind::Onboarding);
    let base = super::jobs::base(JobKind::Onboarding);
    table.add(Method::POST, &base, Access::Admin, create);
    table.add(
        Method::POST,
        &format!("{base}/batch"),
        Access::Admin,
        create,
    );
}

async fn create(
    State(state): State<ApiState>,
    MaybeJsonBody(_): MaybeJsonBody<Value>,
) -> Result<(), ApiError> {
    let _ = state.fleet()?;
    Err(ApiError::owned_by_git(
        "onboardings start from the fleet's manifests: add the node (kind: Node, or an entry of a NodeGroup) under nodes/ and commit",
        "nodes/",
    ))
}
