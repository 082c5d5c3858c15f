-- metalform state store, version 16: at most one open onboarding per node name (docs/ha.md
-- "Creations"). A first onboarding has no node row to hold while it is created, so on
-- PostgreSQL two replicas could each read "none open" and insert one; the index makes the
-- second insert wait for the first and fail. Open: every state but the three terminal ones
-- (`JobState::is_terminal`). The migration runner refuses a store that already has two.
CREATE UNIQUE INDEX onboardings_one_open ON onboardings (site, hostname)
    WHERE status NOT IN ('completed', 'cancelled', 'reconciled');
