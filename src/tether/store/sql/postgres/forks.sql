-- name: add_refs
-- A fork's references: seqs from..to of run $1 are the rows of the run that holds them.
INSERT INTO run_refs (run_id, from_seq, to_seq, source_run_id)
SELECT $1, r.from_seq, r.to_seq, r.source_run_id
FROM unnest($2::bigint[], $3::bigint[], $4::text[]) AS r(from_seq, to_seq, source_run_id);

-- name: add_origin
-- Where a fork came from.
INSERT INTO run_forks (run_id, source_run_id, source_seq) VALUES ($1, $2, $3);

-- name: segments
-- The ranges a run references, in seq order.
SELECT from_seq, to_seq, source_run_id FROM run_refs WHERE run_id = $1 ORDER BY from_seq;

-- name: origins
-- Where each of these runs that is a fork came from.
SELECT run_id, source_run_id, source_seq FROM run_forks WHERE run_id = ANY($1::text[]);

-- name: forks_of
-- The runs that reference rows of a run.
SELECT DISTINCT run_id FROM run_refs WHERE source_run_id = $1 ORDER BY run_id;

-- name: refs_to
-- References to rows of these runs, locked while they are copied out.
SELECT run_id, from_seq, to_seq, source_run_id FROM run_refs
WHERE source_run_id = ANY($1::text[])
ORDER BY run_id, from_seq
LIMIT $2
FOR UPDATE;

-- name: copy_rows
-- Copy seqs $3..$4 of run $2 into the log of run $1 (a reference made a copy).
INSERT INTO run_log (run_id, seq, record)
SELECT $1, seq, record FROM run_log WHERE run_id = $2 AND seq BETWEEN $3 AND $4;

-- name: drop_ref
-- Remove a reference whose rows were all copied.
DELETE FROM run_refs WHERE run_id = $1 AND from_seq = $2;

-- name: shrink_ref
-- Start a reference later: its first rows were copied.
UPDATE run_refs SET from_seq = $3 WHERE run_id = $1 AND from_seq = $2;

-- name: rows_at
-- A run's records at some seqs, its own or referenced.
SELECT seq, record FROM run_log WHERE run_id = $1 AND seq = ANY($2::bigint[])
UNION ALL
SELECT l.seq, l.record FROM run_refs r
JOIN run_log l ON l.run_id = r.source_run_id AND l.seq BETWEEN r.from_seq AND r.to_seq
 AND l.seq = ANY($2::bigint[])
WHERE r.run_id = $1;

-- name: lock_sources
-- The runs a fork's references point to, locked FOR KEY SHARE until the fork commits: a
-- delete batch (lock_doomed, FOR UPDATE) waits for it and then sees its references.
SELECT run_id FROM runs WHERE run_id = ANY($1::text[]) ORDER BY run_id FOR KEY SHARE;

-- name: missing_row
-- The first (run, seq) of these pairs whose row is gone; a log is deleted last seqs first,
-- so a run that still has the last seq of a reference has all of it.
SELECT s.run_id FROM unnest($1::text[], $2::bigint[]) AS s(run_id, seq)
WHERE NOT EXISTS (SELECT 1 FROM run_log l WHERE l.run_id = s.run_id AND l.seq = s.seq)
LIMIT 1;

-- name: lock_doomed
-- The runs a delete batch is about to shorten, locked FOR UPDATE: it waits for forks
-- being created from them to commit, and forks wait for it (lock_sources).
SELECT run_id FROM runs WHERE run_id = ANY($1::text[]) ORDER BY run_id FOR UPDATE;

-- name: referenced
-- Whether any run references rows of these runs.
SELECT EXISTS (SELECT 1 FROM run_refs WHERE source_run_id = ANY($1::text[]));
