-- metalform state store, version 9: what a node's way out of every state needs (seed 004
-- retirement; seed 001 §3.2 retired -> active; seed 000 §4.9 rerun; DESIGN.md §4 pruning).

-- The release policy the manifests last gave the node (JSON: profile, erase, fallbackNoErase,
-- removeFromMaas, protected). Pruning a node that left the manifests decommissions it with this
-- policy: never a weaker erase than the one its profile asked for. NULL for rows nobody has
-- recorded one for yet; such a node is not pruned.
ALTER TABLE nodes ADD COLUMN release_policy TEXT;

-- Whether a job's success ends `reconciled` (it was finished by adopting observed state) or
-- `completed`. `adopted` keeps meaning "this job owns the deployment it adopted"; a rerun or a
-- restart-clean of an adopted job runs the workflow again, and its success is a normal one.
ALTER TABLE onboardings ADD COLUMN ends_reconciled BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE onboardings SET ends_reconciled = adopted;
ALTER TABLE decommissions ADD COLUMN ends_reconciled BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE decommissions SET ends_reconciled = adopted;

-- Seed 004's retired flag and reason for nodes retired before metalform set them: a node in
-- `retired` or `removing` was taken out of service for good by its retirement or removal.
UPDATE nodes SET retired = TRUE,
    retired_reason = COALESCE(retired_reason, 'retired before metalform recorded the reason')
    WHERE status IN ('retired', 'removing') AND retired = FALSE;
