-- Retention: a run's children are found by their parent, and expired runs by when they
-- finished (a finished run's row is last updated when it finished).
CREATE INDEX runs_parent_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_finished_idx ON runs (updated_at, run_id)
    WHERE parent_run_id IS NULL AND status IN ('succeeded', 'failed', 'cancelled');
