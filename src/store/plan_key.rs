//! The plan-signing key (issue 16; docs/security.md "Plan files"): 32 random bytes, made the
//! first time a plan file is written and kept in the store, so only plans written against this
//! store verify when they are applied to it.

use rand::Rng as _;

use super::db::params;
use super::{Store, StoreError, format_time};
use crate::secrets::Secret;

impl Store {
    /// The key plan files are signed with, made on first use. Two processes asking at once get
    /// the same key (the second insert does nothing). Not counted as a store change: signing a
    /// plan does not make it stale.
    pub async fn plan_signing_key(&self) -> Result<Secret, StoreError> {
        let mut tx = self.pool.read().await?;
        let existing = tx
            .fetch_optional("SELECT key_hex FROM plan_signing_key WHERE id = 1", &[])
            .await?;
        drop(tx);
        if let Some(row) = existing {
            return Ok(Secret::new(row.text("key_hex")?));
        }
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let mut tx = self.pool.write().await?;
        tx.execute(
            "INSERT INTO plan_signing_key (id, key_hex, created_at) VALUES (1, $1, $2)
             ON CONFLICT (id) DO NOTHING",
            &params![hex::encode(raw), format_time(self.now())],
        )
        .await?;
        let row = tx
            .fetch_one("SELECT key_hex FROM plan_signing_key WHERE id = 1", &[])
            .await?;
        tx.commit().await?;
        Ok(Secret::new(row.text("key_hex")?))
    }
}
