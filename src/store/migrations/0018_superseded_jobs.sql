-- metalform state store, version 18: the current-jobs read (an observation, the daemon's
-- reconcile) asked, for every job ever recorded, whether a newer one of the same node name or
-- node exists. Each job now carries the answer: `superseded` is true for a finished job that a
-- newer job of its node name replaced and that is not its node's newest job on a MAAS machine.
-- The store marks it again on every write that can change it (a job created, ending, or
-- given its node or its machine), and marks every row once after this migration.
-- The partial indexes hold only the current jobs, by site.
ALTER TABLE onboardings ADD COLUMN superseded BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE decommissions ADD COLUMN superseded BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE provisioning_jobs ADD COLUMN superseded BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX onboardings_current ON onboardings (site) WHERE NOT superseded;
CREATE INDEX decommissions_current ON decommissions (site) WHERE NOT superseded;
CREATE INDEX provisioning_jobs_current ON provisioning_jobs (site) WHERE NOT superseded;
