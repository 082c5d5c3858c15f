//! Bearer-token auth with roles (DESIGN.md §6; docs/api.md "Authentication"): the daemon's
//! configured tokens are `admin` or `agent`; an enrolled node's agent token (docs/contracts.md
//! §5) is an agent credential too. Admin routes take admin tokens only: no or unknown token →
//! 401, an agent credential → 403.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};

use super::{ApiError, ApiState};
use crate::secrets::Secret;
use crate::store::{Actor, Role};

/// The role a configured token grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenRole {
    Admin,
    Agent,
}

/// One configured API token: a name (the audit log's actor), a role, the value.
#[derive(Debug, Clone)]
pub struct ApiToken {
    pub name: String,
    pub role: TokenRole,
    pub value: Secret,
}

/// The configured tokens, kept as SHA-256 digests so a lookup compares digests of equal
/// length (no early exit on the secret's bytes).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<([u8; 32], String, TokenRole)>,
}

fn digest(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

impl Tokens {
    pub fn new(tokens: &[ApiToken]) -> Self {
        Self {
            entries: tokens
                .iter()
                .map(|t| (digest(t.value.expose()), t.name.clone(), t.role))
                .collect(),
        }
    }

    /// The name and role of a presented token.
    pub fn lookup(&self, presented: &str) -> Option<(&str, TokenRole)> {
        let wanted = digest(presented);
        let mut found = None;
        for (hash, name, role) in &self.entries {
            // Compare every entry in full: the time taken does not say which one matched.
            let same = hash
                .iter()
                .zip(wanted.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same && found.is_none() {
                found = Some((name.as_str(), *role));
            }
        }
        found
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Who called an admin route (put in the request's extensions by [`require_admin`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
}

impl Principal {
    /// The audit log's actor: the token's name, role admin.
    pub fn actor(&self) -> Actor {
        Actor {
            name: self.name.clone(),
            role: Role::Admin,
        }
    }
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The admin routes' guard.
pub(super) async fn require_admin(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(token) = bearer(&request) else {
        return Err(ApiError::unauthorized("no bearer token"));
    };
    let found = state
        .inner
        .tokens
        .read()
        .expect("tokens lock")
        .lookup(token)
        .map(|(name, role)| (name.to_owned(), role));
    match found {
        Some((name, TokenRole::Admin)) => {
            let principal = Principal { name };
            request.extensions_mut().insert(principal);
            Ok(next.run(request).await)
        }
        Some((name, TokenRole::Agent)) => Err(ApiError::forbidden(format!(
            "token `{name}` has the agent role; admin routes need an admin token"
        ))),
        None => {
            let secret = Secret::new(token.to_owned());
            // Read only: a refused call is not the agent's contact.
            match state.inner.store.agent_identity(&secret).await? {
                Some(_) => Err(ApiError::forbidden(
                    "a node agent's token cannot call admin routes",
                )),
                None => Err(ApiError::unauthorized("unknown bearer token")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_name_and_role_and_nothing_else() {
        let tokens = Tokens::new(&[
            ApiToken {
                name: "ops".into(),
                role: TokenRole::Admin,
                value: Secret::new("a".repeat(32)),
            },
            ApiToken {
                name: "agents".into(),
                role: TokenRole::Agent,
                value: Secret::new("b".repeat(32)),
            },
        ]);
        assert_eq!(
            tokens.lookup(&"a".repeat(32)),
            Some(("ops", TokenRole::Admin))
        );
        assert_eq!(
            tokens.lookup(&"b".repeat(32)),
            Some(("agents", TokenRole::Agent))
        );
        assert_eq!(tokens.lookup(&"a".repeat(31)), None);
        assert_eq!(tokens.lookup(""), None);
    }
}
