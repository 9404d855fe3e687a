-- Fair turns (issue 16): when each concurrency key was last served (its latest run taken
-- or finished), which the ordered claim reads per key to serve the key served longest ago
-- first within a turn.
CREATE INDEX runs_served_idx ON runs (concurrency_key, updated_at)
    WHERE parent_run_id IS NULL AND status <> 'queued';
