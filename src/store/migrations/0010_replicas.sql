-- Daemon replicas sharing one store (docs/ha.md). Membership, site ownership, concurrency
-- slots and event delivery are named leases in `leases`; these tables hold what they agree on.

-- Settings every replica must agree on, e.g. the enrollment URL deployed hosts carry (the load
-- balancer in front of the replicas, never one replica's address). The first replica records
-- it; a replica configured otherwise is refused at start.
CREATE TABLE fleet_settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    set_by TEXT NOT NULL,
    set_at TEXT NOT NULL
);

-- Per-sink delivery cursor of the outbox: every event with an id up to `delivered_through` has
-- been acknowledged by that sink. Advanced only by the holder of the sink's lease, fenced.
CREATE TABLE outbox_cursors (
    sink TEXT PRIMARY KEY,
    delivered_through BIGINT NOT NULL,
    updated_at TEXT NOT NULL
);
