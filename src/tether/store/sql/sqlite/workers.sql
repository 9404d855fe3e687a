-- The workers table: workers advertise the agent versions they serve with their heartbeat.

-- name: beat
-- Insert or refresh a worker's row.
INSERT INTO workers (owner, host, pid, started_at, beat_at, ttl, versions, runs_held)
VALUES (:owner, :host, :pid, :started_at, :now, :ttl, :versions, :runs_held)
ON CONFLICT (owner) DO UPDATE
SET beat_at = excluded.beat_at, ttl = excluded.ttl, versions = excluded.versions,
    runs_held = excluded.runs_held;

-- name: forget_dead
-- Delete the rows of workers whose heartbeat stopped more than a TTL ago.
DELETE FROM workers WHERE beat_at + ttl < :now;

-- name: live
-- The live workers, oldest first.
SELECT owner, host, pid, started_at, beat_at, ttl, versions, runs_held
FROM workers WHERE beat_at + ttl >= :now
ORDER BY started_at, owner;

-- name: leave
-- A worker that stops deletes its row.
DELETE FROM workers WHERE owner = :owner;
