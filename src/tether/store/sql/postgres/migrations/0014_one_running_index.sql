-- One index of the top-level runs running, where there were two with the same predicate:
-- runs_lease_idx found orphaned runs by their lease for the claim, runs_held_idx counted
-- the live slots of each agent and key for flow control. While statistics said no run was
-- running (taken before a burst of claims), both estimated one row, and the planner could
-- walk runs_held_idx for the claim's orphaned branch: every claim then stepped over every
-- run in flight and sorted what it found. The slots are now counted from runs_lease_idx,
-- which carries their agent and key; and every change of a run's row updates one index
-- less.
DROP INDEX runs_held_idx;
DROP INDEX runs_lease_idx;
CREATE INDEX runs_lease_idx ON runs (status, lease_until) INCLUDE (agent, concurrency_key)
    WHERE parent_run_id IS NULL AND status = 'running';
