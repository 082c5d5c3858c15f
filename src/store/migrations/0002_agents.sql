-- metalform state store, version 2: node-agent enrollment (docs/contracts.md §5; seed 000 §4.3
-- WaitForAgentEnrollment, §4.6; seed 001 §3.3). The enrollment is recorded on the node for the
-- onboarding stage to read; it does not make the node active (the stage does, after its health
-- checks). Agent tokens are stored as SHA-256 only, like enrollment tokens.

-- One row per accepted enrollment: which token, which machine said it was, when, and the state
-- of the onboarding at that moment (a late enrollment after a timeout is kept for adoption).
CREATE TABLE agent_enrollments (
    id {{id}},
    node_id TEXT NOT NULL REFERENCES nodes (id),
    token_hash TEXT NOT NULL REFERENCES enrollment_tokens (token_hash),
    onboarding_id TEXT,
    onboarding_state TEXT,
    hostname TEXT NOT NULL,
    system_id TEXT NOT NULL,
    agent_version TEXT NOT NULL,
    remote_addr TEXT,
    layers TEXT NOT NULL DEFAULT '{}',
    enrolled_at TEXT NOT NULL
);
CREATE INDEX agent_enrollments_node ON agent_enrollments (node_id, id);
CREATE INDEX agent_enrollments_token ON agent_enrollments (token_hash);

-- Agent credentials issued at enrollment: SHA-256 of the bearer token, never the token. A new
-- enrollment of the node revokes the older ones.
CREATE TABLE agent_credentials (
    token_hash TEXT PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    enrollment_id BIGINT NOT NULL REFERENCES agent_enrollments (id),
    created_at TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at TEXT
);
CREATE INDEX agent_credentials_node ON agent_credentials (node_id);
