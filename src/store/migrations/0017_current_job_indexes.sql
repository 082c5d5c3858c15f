-- metalform state store, version 17: the current-jobs read (an observation, the daemon's
-- reconcile) asks, for every job, whether a newer job of the same node name or the same node
-- exists. These indexes answer both from the index alone: newer means a later request time,
-- or the same time and a smaller id. Decommissions had no (site, hostname) index at all, so
-- that read was quadratic in the decommissions ever recorded (3,000 took ~0.9 s).
DROP INDEX onboardings_site_host;
CREATE INDEX onboardings_site_host ON onboardings (site, hostname, requested_at, id);
DROP INDEX onboardings_node;
CREATE INDEX onboardings_node ON onboardings (node_id, maas_system_id, requested_at, id);
CREATE INDEX decommissions_site_host ON decommissions (site, hostname, requested_at, id);
DROP INDEX decommissions_node;
CREATE INDEX decommissions_node ON decommissions (node_id, maas_system_id, requested_at, id);
DROP INDEX provisioning_jobs_site_host;
CREATE INDEX provisioning_jobs_site_host ON provisioning_jobs (site, hostname, created_at, id);
CREATE INDEX provisioning_jobs_node ON provisioning_jobs (node_id, maas_system_id, created_at, id);
