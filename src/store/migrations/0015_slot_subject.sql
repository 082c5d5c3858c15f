-- metalform state store, version 15: the node a concurrency slot was last taken for
-- (docs/ha.md "Limits across replicas"). A replica that dies mid-deploy leaves its slots to
-- expire while MAAS goes on deploying its machines; a slot whose node still has a running job
-- is kept for that node (whichever replica resumes it) instead of going to the next node, so
-- maxParallel still counts the machines in a MAAS operation. NULL: taken before this version.
ALTER TABLE leases ADD COLUMN subject TEXT;
