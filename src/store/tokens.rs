//! Enrollment tokens (docs/contracts.md §5; seed 000 §4.3, §4.6): stored as SHA-256 only, with
//! a TTL, used once. A refresh extends the expiry of the same token, because a deployed host
//! cannot learn a new value without a redeploy.

use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};
use rand::Rng as _;
use rand::RngExt as _;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::db::{Tx, params};
use super::leases::{Fence, check_fence};
use super::nodes::read_node;
use super::{Store, StoreError, format_time, parse_time, parse_uuid};
use crate::secrets::Secret;

/// Why a token was not accepted. Never carries the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("invalid enrollment token: unknown")]
    Unknown,
    #[error("invalid enrollment token: expired at {expired_at}")]
    Expired { expired_at: String },
    #[error("invalid enrollment token: already used")]
    AlreadyUsed,
}

/// What a consumed token was for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenClaim {
    pub node_id: Uuid,
    pub onboarding_id: Option<String>,
}

/// A new 256-bit random token, URL-safe base64 (enrollment and agent tokens).
pub(crate) fn random_token() -> Secret {
    let mut raw = [0u8; 32];
    rand::rng().fill_bytes(&mut raw);
    Secret::new(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
}

/// A new random password (24 characters of letters and digits, ~142 bits) for a node's deploy
/// user: typed at a console when needed, so no punctuation a keyboard layout could garble.
pub fn random_password() -> Secret {
    const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::rng();
    let text: String = (0..24)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect();
    Secret::new(text)
}

/// SHA-256 hex of a token: the only form the store keeps.
pub fn token_hash(token: &Secret) -> String {
    hex::encode(Sha256::digest(token.expose().as_bytes()))
}

/// Use the token of `hash` at `at` if it is unused and unexpired (single use, 000 §4.6): the
/// rows changed (0 or 1).
pub(crate) async fn mark_used(tx: &mut Tx, hash: &str, at: &str) -> Result<u64, StoreError> {
    tx.execute(
        "UPDATE enrollment_tokens SET used_at = $1
         WHERE token_hash = $2 AND used_at IS NULL AND expires_at > $1",
        &params![at, hash],
    )
    .await
}

/// A new token of `node`, valid for `ttl` from `now`: the plain token (returned once, only its
/// hash stored) and its expiry.
async fn insert_token(
    tx: &mut Tx,
    node: Uuid,
    onboarding_id: Option<&str>,
    now: DateTime<Utc>,
    ttl: Duration,
) -> Result<(Secret, DateTime<Utc>), StoreError> {
    let token = random_token();
    let expires_at = now + ttl;
    tx.execute(
        "INSERT INTO enrollment_tokens (token_hash, node_id, onboarding_id, expires_at, created_at)
         VALUES ($1, $2, $3, $4, $5)",
        &params![
            token_hash(&token),
            node.to_string(),
            onboarding_id,
            format_time(expires_at),
            format_time(now),
        ],
    )
    .await?;
    Ok((token, expires_at))
}

/// Expire a node's unused tokens that are still valid at `now`: how many.
async fn expire_unused(tx: &mut Tx, node: Uuid, now: DateTime<Utc>) -> Result<u64, StoreError> {
    tx.execute(
        "UPDATE enrollment_tokens SET expires_at = $1
         WHERE node_id = $2 AND used_at IS NULL AND expires_at > $1",
        &params![format_time(now), node.to_string()],
    )
    .await
}

impl Store {
    /// Issue a new single-use token for a node, valid for `ttl`, beside its other tokens. The
    /// plain token is returned once and never stored.
    pub async fn issue_enrollment_token(
        &self,
        node: Uuid,
        onboarding_id: Option<&str>,
        ttl: Duration,
    ) -> Result<(Secret, DateTime<Utc>), StoreError> {
        let mut tx = self.pool.write().await?;
        read_node(&mut tx, node).await?;
        let issued = insert_token(&mut tx, node, onboarding_id, self.now(), ttl).await?;
        tx.commit().await?;
        Ok(issued)
    }

    /// Issue a node's token in place of every unused one (a render, an adopted host's
    /// enrollment), under the node lease: the payloads that carried the old ones were never
    /// delivered. Fenced, so an executor paused past its lease while another took the node
    /// over cannot expire the token the other one has deployed. Returns the new token, its
    /// expiry and how many tokens were expired.
    pub async fn replace_enrollment_token(
        &self,
        node: Uuid,
        onboarding_id: Option<&str>,
        ttl: Duration,
        fence: &Fence,
    ) -> Result<(Secret, DateTime<Utc>, u64), StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        check_fence(&mut tx, fence).await?;
        read_node(&mut tx, node).await?;
        let expired = expire_unused(&mut tx, node, now).await?;
        let (token, expires_at) = insert_token(&mut tx, node, onboarding_id, now, ttl).await?;
        tx.commit().await?;
        Ok((token, expires_at, expired))
    }

    /// Use a token: succeeds once, before expiry.
    pub async fn consume_enrollment_token(&self, token: &Secret) -> Result<TokenClaim, StoreError> {
        let hash = token_hash(token);
        let now = format_time(self.now());
        let mut tx = self.pool.write().await?;
        let used = mark_used(&mut tx, &hash, &now).await?;
        let row = tx
            .fetch_optional(
                "SELECT node_id, onboarding_id, expires_at, used_at FROM enrollment_tokens
                 WHERE token_hash = $1",
                &params![hash],
            )
            .await?;
        let Some(row) = row else {
            return Err(TokenError::Unknown.into());
        };
        if used == 0 {
            return Err(if row.opt_text("used_at")?.is_some() {
                TokenError::AlreadyUsed
            } else {
                TokenError::Expired {
                    expired_at: row.text("expires_at")?,
                }
            }
            .into());
        }
        let claim = TokenClaim {
            node_id: parse_uuid(&row.text("node_id")?)?,
            onboarding_id: row.opt_text("onboarding_id")?,
        };
        tx.commit().await?;
        Ok(claim)
    }

    /// Expire every unused token of a node under its lease (a cancel, a decommission): the
    /// payloads that carried them must not enroll anything. Fenced like
    /// [`Store::replace_enrollment_token`]. Returns how many tokens were expired.
    pub async fn expire_enrollment_tokens(
        &self,
        node: Uuid,
        fence: &Fence,
    ) -> Result<u64, StoreError> {
        let mut tx = self.pool.write().await?;
        check_fence(&mut tx, fence).await?;
        let n = expire_unused(&mut tx, node, self.now()).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// Extend the expiry of a node's unused tokens to now + `ttl` (the "refresh" of 000 §4.6
    /// WaitForAgentEnrollment). Every unused token, not only the newest: the token writes are
    /// fenced, but a MAAS call is not, so an executor paused past its lease can still deploy
    /// its payload once it resumes, after the executor that took the node over has replaced
    /// that payload's token; the refresh must bring the deployed one back. Returns how many
    /// tokens were extended.
    pub async fn extend_enrollment_tokens(
        &self,
        node: Uuid,
        ttl: Duration,
    ) -> Result<u64, StoreError> {
        let mut tx = self.pool.write().await?;
        let n = tx
            .execute(
                "UPDATE enrollment_tokens SET expires_at = $1 WHERE node_id = $2 AND used_at IS NULL",
                &params![format_time(self.now() + ttl), node.to_string()],
            )
            .await?;
        tx.commit().await?;
        Ok(n)
    }

    /// The expiry of a node's newest unused token, if any (diagnostics: token status).
    pub async fn enrollment_token_expiry(
        &self,
        node: Uuid,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_optional(
            "SELECT expires_at FROM enrollment_tokens WHERE node_id = $1 AND used_at IS NULL
             ORDER BY expires_at DESC LIMIT 1",
            &params![node.to_string()],
        )
        .await?
        .map(|row| parse_time(&row.text("expires_at")?))
        .transpose()
    }
}
