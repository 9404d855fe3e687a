CREATE INDEX runs_claim_idx ON runs (created_at)
    WHERE parent_run_id IS NULL AND status IN ('queued', 'paused', 'running');
