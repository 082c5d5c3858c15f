-- metalform state store, version 11: failed_retryable work backs off (docs/recovery.md "Retry
-- backoff"). Per job: how many `failed_retryable` outcomes in a row it has had, when the
-- reconciler may try it again, and the node spec (a hash of the node's resolved manifests) the
-- last failure happened under. The count and the wait are reset by a success and by a change
-- of that spec; an operator's retry does not wait. Rows written before this version have no
-- wait: the reconciler retries them as it did.
ALTER TABLE onboardings ADD COLUMN retry_failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE onboardings ADD COLUMN next_try_at TEXT;
ALTER TABLE onboardings ADD COLUMN retry_spec TEXT;
ALTER TABLE decommissions ADD COLUMN retry_failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE decommissions ADD COLUMN next_try_at TEXT;
ALTER TABLE decommissions ADD COLUMN retry_spec TEXT;
ALTER TABLE provisioning_jobs ADD COLUMN retry_failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE provisioning_jobs ADD COLUMN next_try_at TEXT;
ALTER TABLE provisioning_jobs ADD COLUMN retry_spec TEXT;
