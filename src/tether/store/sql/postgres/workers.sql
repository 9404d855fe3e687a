-- The workers table: workers advertise the agent versions they serve with their heartbeat.

-- name: beat
-- Insert or refresh a worker's row at the database's clock.
INSERT INTO workers (owner, host, pid, started_at, beat_at, ttl, versions, runs_held)
VALUES ($1, $2, $3, $4, extract(epoch FROM clock_timestamp()), $5, $6::jsonb, $7)
ON CONFLICT (owner) DO UPDATE
SET beat_at = EXCLUDED.beat_at, ttl = EXCLUDED.ttl, versions = EXCLUDED.versions,
    runs_held = EXCLUDED.runs_held;

-- name: forget_dead
-- Delete the rows of workers whose heartbeat stopped more than a TTL ago.
DELETE FROM workers WHERE beat_at + ttl < extract(epoch FROM clock_timestamp());

-- name: live
-- The live workers, oldest first.
SELECT owner, host, pid, started_at, beat_at, ttl, versions::text, runs_held
FROM workers WHERE beat_at + ttl >= extract(epoch FROM clock_timestamp())
ORDER BY started_at, owner;

-- name: leave
-- A worker that stops deletes its row.
DELETE FROM workers WHERE owner = $1;
