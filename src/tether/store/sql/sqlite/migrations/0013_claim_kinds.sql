-- The claim reads each kind of runnable run in its own order through an index keyed on its
-- status first, so that SQLite picks it without statistics: drained runs oldest first
-- (runs_drained_idx, and queued ones through runs_status_idx), orphaned ones by their lease
-- (runs_lease_idx), due parked ones by their wake-up time (runs_wake_idx, re-keyed). The
-- index it replaces held every queued, paused and running run: each claim sorted them all.
DROP INDEX runs_claim_idx;
DROP INDEX runs_wake_idx;
CREATE INDEX runs_drained_idx ON runs (status, reason, created_at)
    WHERE parent_run_id IS NULL AND status = 'paused';
CREATE INDEX runs_lease_idx ON runs (status, lease_until)
    WHERE parent_run_id IS NULL AND status = 'running';
CREATE INDEX runs_wake_idx ON runs (status, wake_at)
    WHERE parent_run_id IS NULL AND status = 'waiting';
