-- name: append
-- Append one record; a retried append of the same (run_id, seq) does nothing.
INSERT INTO run_log (run_id, seq, record) VALUES (?, ?, ?)
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: append_fenced
-- Append one record only while the run's epoch is the caller's.
INSERT INTO run_log (run_id, seq, record)
SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = ? AND epoch = ?)
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: record_at
-- The record already stored at a seq (to tell a retry from a conflict).
SELECT record FROM run_log WHERE run_id = ? AND seq = ?;

-- name: read
-- A run's records after a seq, in order.
SELECT seq, record FROM run_log WHERE run_id = ? AND seq > ? ORDER BY seq;

-- name: read_all
-- A run's record bytes in order (rehydration).
SELECT record FROM run_log WHERE run_id = ? ORDER BY seq;

-- name: run_epoch
-- The run's current epoch.
SELECT epoch FROM runs WHERE run_id = ?;

-- name: create_run
-- Insert a run row.
INSERT INTO runs (run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_run
-- One run row.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until
FROM runs WHERE run_id = ?;

-- name: set_status
-- Change a run's status and reason.
UPDATE runs SET status = ?, reason = ?, updated_at = ? WHERE run_id = ?;

-- name: list_runs
-- Runs, newest first.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until
FROM runs ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?;

-- name: list_runs_by_status
-- Runs with one status, newest first.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until
FROM runs WHERE status = ? ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?;
