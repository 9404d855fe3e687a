-- The ordered claim ranks only the first few queued runs of each (agent, key): this index
-- finds the pairs and each pair's first runs in claim order (as PostgreSQL's 0012).
CREATE INDEX runs_queue_idx ON runs (agent, concurrency_key, priority DESC, created_at,
                                     run_id)
    WHERE parent_run_id IS NULL AND status = 'queued';
