-- metalform state store, version 3: the reimage generation last applied to each node (seed 000
-- §5.3; docs/decommission.md). A Node manifest's `reimage.generation` is a one-shot trigger: the
-- planner plans a reimage when it is above the generation recorded here. Onboarding records the
-- generation it deploys, a completed reimage the one it was started for. Rows written before
-- this version have none (NULL): the planner does not guess one for them.
ALTER TABLE nodes ADD COLUMN reimage_generation BIGINT;
