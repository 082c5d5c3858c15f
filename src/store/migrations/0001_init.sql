-- metalform state store, version 1 (DESIGN.md §6; seeds 000 §4.2, §4.5, §4.12, §5.7, §6.5, §8.0;
-- 001; 003 "Workers and Concurrency"). Portable SQL for SQLite and PostgreSQL: timestamps are
-- fixed-width RFC 3339 UTC text, ids are uuid text, JSON is text, {{id}} is the backend's
-- auto-increment primary key.

-- A counter bumped by every write to inventory or job state; plan files record it.
CREATE TABLE store_serial (
    id BIGINT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO store_serial (id, value) VALUES (1, 0);

-- Coarse node inventory (001 §3). `generation` is bumped by every write to the row and fences
-- writers that read an older version.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    site TEXT NOT NULL,
    hostname TEXT NOT NULL,
    status TEXT NOT NULL,
    provider TEXT NOT NULL,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    retired_reason TEXT,
    protected BOOLEAN NOT NULL DEFAULT FALSE,
    protected_reason TEXT,
    paused BOOLEAN NOT NULL DEFAULT FALSE,
    generation BIGINT NOT NULL,
    sku TEXT,
    gpus BIGINT,
    ipmi_ip TEXT,
    host TEXT,
    last_agent_contact_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- One live node per (site, hostname); a deleted identity frees the name for re-onboarding.
CREATE UNIQUE INDEX nodes_live_hostname ON nodes (site, hostname) WHERE status <> 'deleted';
CREATE INDEX nodes_site_status ON nodes (site, status);

-- The current MAAS binding and last reconciliation of a node (000 §6.5).
CREATE TABLE node_maas_state (
    node_id TEXT PRIMARY KEY REFERENCES nodes (id),
    site TEXT NOT NULL,
    maas_system_id TEXT NOT NULL,
    last_maas_status TEXT,
    last_maas_power_state TEXT,
    last_maas_ips TEXT NOT NULL DEFAULT '[]',
    last_reconciled_at TEXT,
    drift_detected BOOLEAN NOT NULL DEFAULT FALSE,
    drift_details TEXT NOT NULL DEFAULT '{}',
    drift_resolved_at TEXT,
    updated_at TEXT NOT NULL
);

-- Durable per-node stage journals (000 §4.2.1, §4.5, §4.12; §5.7). Both tables share the
-- job columns; each adds its own request fields.
CREATE TABLE onboardings (
    id TEXT PRIMARY KEY,
    node_id TEXT REFERENCES nodes (id),
    site TEXT NOT NULL,
    hostname TEXT NOT NULL,
    maas_system_id TEXT,
    requested_by TEXT,
    current_stage TEXT NOT NULL,
    current_attempt BIGINT NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    adopted BOOLEAN NOT NULL DEFAULT FALSE,
    failure_class TEXT,
    error_code TEXT,
    error_message TEXT,
    error_details TEXT NOT NULL DEFAULT '{}',
    recommended_action TEXT,
    last_maas_status TEXT,
    last_maas_power_state TEXT,
    last_maas_ips TEXT NOT NULL DEFAULT '[]',
    stage_details TEXT NOT NULL DEFAULT '{}',
    plan_id TEXT,
    requested_at TEXT NOT NULL,
    started_at TEXT,
    completed_at TEXT,
    updated_at TEXT NOT NULL,
    batch_id TEXT,
    ipmi_ip TEXT,
    pxe_mac TEXT
);
CREATE INDEX onboardings_node ON onboardings (node_id);
CREATE INDEX onboardings_site_host ON onboardings (site, hostname);
CREATE INDEX onboardings_status ON onboardings (status);

CREATE TABLE onboarding_events (
    id {{id}},
    job_id TEXT NOT NULL REFERENCES onboardings (id),
    stage TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    status TEXT NOT NULL,
    message TEXT,
    details TEXT NOT NULL DEFAULT '{}',
    occurred_at TEXT NOT NULL
);
CREATE INDEX onboarding_events_job ON onboarding_events (job_id, id);

CREATE TABLE decommissions (
    id TEXT PRIMARY KEY,
    node_id TEXT REFERENCES nodes (id),
    site TEXT NOT NULL,
    hostname TEXT NOT NULL,
    maas_system_id TEXT,
    requested_by TEXT,
    current_stage TEXT NOT NULL,
    current_attempt BIGINT NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    adopted BOOLEAN NOT NULL DEFAULT FALSE,
    failure_class TEXT,
    error_code TEXT,
    error_message TEXT,
    error_details TEXT NOT NULL DEFAULT '{}',
    recommended_action TEXT,
    last_maas_status TEXT,
    last_maas_power_state TEXT,
    last_maas_ips TEXT NOT NULL DEFAULT '[]',
    stage_details TEXT NOT NULL DEFAULT '{}',
    plan_id TEXT,
    requested_at TEXT NOT NULL,
    started_at TEXT,
    completed_at TEXT,
    updated_at TEXT NOT NULL,
    mode TEXT NOT NULL,
    erase TEXT,
    storage_cleanup TEXT,
    reason TEXT
);
CREATE INDEX decommissions_node ON decommissions (node_id);
CREATE INDEX decommissions_status ON decommissions (status);

CREATE TABLE decommission_events (
    id {{id}},
    job_id TEXT NOT NULL REFERENCES decommissions (id),
    stage TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    status TEXT NOT NULL,
    message TEXT,
    details TEXT NOT NULL DEFAULT '{}',
    occurred_at TEXT NOT NULL
);
CREATE INDEX decommission_events_job ON decommission_events (job_id, id);

-- Every operator action and lifecycle write worth auditing (000 §4.12).
CREATE TABLE audit_log (
    id {{id}},
    at TEXT NOT NULL,
    actor TEXT NOT NULL,
    role TEXT NOT NULL,
    reason TEXT,
    action TEXT NOT NULL,
    subject_kind TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    prior_state TEXT,
    expected_target TEXT,
    correlation_ids TEXT NOT NULL DEFAULT '{}',
    details TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_subject ON audit_log (subject_kind, subject_id, id);

-- Named leases with fencing generations (003 "Leasing"; DESIGN.md §4). `holder` is NULL once
-- released; `fencing` only ever grows.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT,
    expires_at TEXT NOT NULL,
    fencing BIGINT NOT NULL,
    acquired_at TEXT NOT NULL,
    renewed_at TEXT NOT NULL
);

-- Typed node-agent tasks with dispatch leases (001 §8; 000 §5.6).
CREATE TABLE agent_tasks (
    id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    task_type TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    owner_job TEXT,
    status TEXT NOT NULL,
    lease_holder TEXT,
    lease_expires_at TEXT,
    dispatch_count BIGINT NOT NULL DEFAULT 0,
    result_message TEXT,
    result_details TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    completed_at TEXT
);
CREATE INDEX agent_tasks_node_status ON agent_tasks (node_id, status, created_at);

-- Enrollment tokens: SHA-256 of the token only, TTL, single use (docs/contracts.md §5).
CREATE TABLE enrollment_tokens (
    token_hash TEXT PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    onboarding_id TEXT,
    expires_at TEXT NOT NULL,
    used_at TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX enrollment_tokens_node ON enrollment_tokens (node_id);

-- Plans and their applies (DESIGN.md §4).
CREATE TABLE plans (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    fleet_revision TEXT,
    snapshot_fingerprint TEXT NOT NULL,
    store_serial BIGINT NOT NULL,
    parent_id TEXT,
    summary TEXT NOT NULL DEFAULT '{}',
    body TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE applies (
    id TEXT PRIMARY KEY,
    plan_id TEXT NOT NULL REFERENCES plans (id),
    actor TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    details TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX applies_plan ON applies (plan_id);

-- Domain events (000 §8.0) written in the same transaction as the change they announce, and
-- delivered at least once from here.
CREATE TABLE outbox (
    id {{id}},
    event_type TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at TEXT NOT NULL,
    delivered_at TEXT,
    attempts BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX outbox_pending ON outbox (delivered_at, id);
