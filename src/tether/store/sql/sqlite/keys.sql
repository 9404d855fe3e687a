-- Per-run data keys (see tether/store/keys.py). :ids is a JSON array of run ids.

-- name: put
INSERT INTO run_keys (run_id, wrapped, created_at) VALUES (:run_id, :wrapped, :now)
ON CONFLICT (run_id) DO NOTHING;

-- name: get
SELECT run_id, wrapped, shredded_at FROM run_keys
WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: shred
UPDATE run_keys SET wrapped = NULL, shredded_at = :now
WHERE run_id IN (SELECT value FROM json_each(:ids)) AND wrapped IS NOT NULL;

-- name: kept
SELECT run_id, wrapped, shredded_at FROM run_keys WHERE wrapped IS NOT NULL ORDER BY run_id;

-- name: rewrap
UPDATE run_keys SET wrapped = :new WHERE run_id = :run_id AND wrapped = :old;
