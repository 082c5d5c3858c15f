-- metalform state store, version 14: the agent tasks a poll could claim, found by status. The
-- agent channel asks every poll step which nodes have a queued task or one whose lease expired
-- (docs/agent-protocol.md); through this index the read costs the open tasks, not every task
-- ever run nor every agent polling.
CREATE INDEX agent_tasks_status ON agent_tasks (status, lease_expires_at);
