-- The claim finds each kind of runnable run through its own index, with the time as an
-- index condition: queued and drained runs oldest first (runs_fresh_idx), orphaned ones
-- by their lease (runs_lease_idx), due parked ones by their wake-up time (runs_wake_idx,
-- keyed on status too, so that no planner estimate makes another index look cheaper).
-- The index it replaces also held every run running under a live lease, so each claim
-- stepped over all of them first: a fleet with thousands of runs in flight paid for them
-- all on every claim.
DROP INDEX runs_claim_idx;
DROP INDEX runs_wake_idx;
CREATE INDEX runs_fresh_idx ON runs (created_at)
    WHERE parent_run_id IS NULL AND (status = 'queued' OR (status = 'paused' AND reason = 'drain'));
CREATE INDEX runs_lease_idx ON runs (status, lease_until)
    WHERE parent_run_id IS NULL AND status = 'running';
CREATE INDEX runs_wake_idx ON runs (status, wake_at)
    WHERE parent_run_id IS NULL AND status = 'waiting';
