-- A parked run (status 'waiting') is woken at wake_at (seconds since the epoch, the
-- earliest deadline of its waits, or NULL: only an event wakes it). Claims find due ones
-- through their own index, so many waiting runs never slow the claim of queued ones.
ALTER TABLE runs ADD COLUMN wake_at double precision;
CREATE INDEX runs_wake_idx ON runs (wake_at)
    WHERE parent_run_id IS NULL AND status = 'waiting';
