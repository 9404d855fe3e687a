-- The ordered claim (issue 16) ranks only the first few queued runs of each (agent, key):
-- this index finds the pairs (a probe each) and each pair's first runs in claim order.
CREATE INDEX runs_queue_idx ON runs (agent, concurrency_key, priority DESC, created_at,
                                     run_id COLLATE "C")
    WHERE parent_run_id IS NULL AND status = 'queued';
