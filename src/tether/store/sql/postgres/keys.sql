-- Per-run data keys (see tether/store/keys.py).

-- name: put
INSERT INTO run_keys (run_id, wrapped, created_at)
VALUES ($1, $2, extract(epoch FROM clock_timestamp()))
ON CONFLICT (run_id) DO NOTHING;

-- name: get
SELECT run_id, wrapped, shredded_at FROM run_keys WHERE run_id = ANY($1::text[]);

-- name: shred
UPDATE run_keys SET wrapped = NULL, shredded_at = extract(epoch FROM clock_timestamp())
WHERE run_id = ANY($1::text[]) AND wrapped IS NOT NULL;

-- name: kept
SELECT run_id, wrapped, shredded_at FROM run_keys WHERE wrapped IS NOT NULL ORDER BY run_id;

-- name: rewrap
UPDATE run_keys SET wrapped = $3 WHERE run_id = $1 AND wrapped = $2;
