-- metalform state store, version 8: the Redfish provisioner (seed 003 "Persistence Model":
-- servers, jobs, job_events; "Leasing"; "Concurrency Controls"). Portable SQL for SQLite and
-- PostgreSQL, as version 1.
--
-- The seed's `jobs` and `job_events` are `provisioning_jobs` and `provisioning_job_events`
-- here (onboardings and decommissions are jobs too). They keep the seed's columns and
-- meanings, and add the job engine's journal columns (as `onboardings` has them) with the
-- engine's own state in `job_state`: `status` stays the seed's.

-- serial -> BMC (seed 003 `servers`), written from the manifests' Redfish nodes. The BMC login
-- is never stored: `bmc_username` and `bmc_password` hold secret-store references
-- (`vault:<path>#user`, `vault:<path>#pass`), which the CHECKs enforce.
CREATE TABLE servers (
    serial TEXT PRIMARY KEY,
    bmc_address TEXT NOT NULL,
    bmc_username TEXT NOT NULL CHECK (bmc_username LIKE 'vault:%'),
    bmc_password TEXT NOT NULL CHECK (bmc_password LIKE 'vault:%'),
    vendor TEXT,
    last_seen TEXT,
    site TEXT NOT NULL,
    hostname TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX servers_node ON servers (site, hostname);

CREATE TABLE provisioning_jobs (
    -- seed 003 `jobs`
    id TEXT PRIMARY KEY,
    server_serial TEXT NOT NULL REFERENCES servers (serial) ON DELETE RESTRICT,
    status TEXT NOT NULL CHECK (status IN ('queued', 'provisioning', 'succeeded', 'failed', 'complete')),
    failed_step TEXT,
    recipe_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    picked_at TEXT,
    worker_id TEXT,
    lease_expires_at TEXT,
    task_iso_path TEXT,
    maintenance_iso_url TEXT NOT NULL,
    -- metalform: the lease's fencing generation (grows on every take), the request's
    -- idempotency key, the manifest's reimage generation the job provisions (NULL: requested
    -- through the API), when the maintenance OS reported
    lease_fencing BIGINT NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    generation BIGINT,
    webhook_at TEXT,
    -- the job engine's journal (as onboardings)
    node_id TEXT,
    site TEXT NOT NULL,
    hostname TEXT NOT NULL,
    maas_system_id TEXT,
    requested_by TEXT,
    current_stage TEXT NOT NULL,
    current_attempt BIGINT NOT NULL DEFAULT 0,
    job_state TEXT NOT NULL,
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
    started_at TEXT,
    completed_at TEXT
);
CREATE INDEX provisioning_jobs_status ON provisioning_jobs (status);
CREATE INDEX provisioning_jobs_server ON provisioning_jobs (server_serial);
CREATE INDEX provisioning_jobs_site_host ON provisioning_jobs (site, hostname);
-- "Per-server limit: disallow >1 active job on the same server_serial", held by the database.
CREATE UNIQUE INDEX provisioning_jobs_one_active ON provisioning_jobs (server_serial)
    WHERE status IN ('queued', 'provisioning', 'succeeded', 'failed');

-- seed 003 `job_events`, with the engine's stage-attempt columns (attempt, status, details).
CREATE TABLE provisioning_job_events (
    id {{id}},
    job_id TEXT NOT NULL REFERENCES provisioning_jobs (id) ON DELETE CASCADE,
    time TEXT NOT NULL,
    level TEXT NOT NULL CHECK (level IN ('info', 'warn', 'error')),
    message TEXT NOT NULL,
    step TEXT,
    attempt BIGINT NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    details TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX provisioning_job_events_job_time ON provisioning_job_events (job_id, time);
