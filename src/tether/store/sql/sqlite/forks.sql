-- name: add_ref
-- One reference of a fork: seqs from..to of the run are the rows of the run that holds them.
INSERT INTO run_refs (run_id, from_seq, to_seq, source_run_id) VALUES (?, ?, ?, ?);

-- name: add_origin
-- Where a fork came from.
INSERT INTO run_forks (run_id, source_run_id, source_seq) VALUES (?, ?, ?);

-- name: segments
-- The ranges a run references, in seq order.
SELECT from_seq, to_seq, source_run_id FROM run_refs WHERE run_id = ? ORDER BY from_seq;

-- name: origins
-- Where each of these runs (a JSON array) that is a fork came from.
SELECT run_id, source_run_id, source_seq FROM run_forks
WHERE run_id IN (SELECT value FROM json_each(?));

-- name: own_rows
-- A run's own rows, in seq order (for a fork: its seq 0 and what it appended since).
SELECT seq, record FROM run_log WHERE run_id = ? ORDER BY seq;

-- name: range_records
-- The records at seqs ?2..?3 of run ?1 in seq order (a reference's rows): a walk of the
-- primary key, where a merge with the fork's own rows made SQLite sort them all.
SELECT record FROM run_log WHERE run_id = ?1 AND seq BETWEEN ?2 AND ?3 ORDER BY seq;

-- name: forks_of
-- The runs that reference rows of a run.
SELECT DISTINCT run_id FROM run_refs WHERE source_run_id = ? ORDER BY run_id;

-- name: refs_to
-- References to rows of these runs (a JSON array), to copy out (the caller's transaction
-- holds the file's write lock).
SELECT run_id, from_seq, to_seq, source_run_id FROM run_refs
WHERE source_run_id IN (SELECT value FROM json_each(?))
ORDER BY run_id, from_seq
LIMIT ?;

-- name: copy_rows
-- Copy seqs ?3..?4 of run ?2 into the log of run ?1 (a reference made a copy).
INSERT INTO run_log (run_id, seq, record)
SELECT ?1, seq, record FROM run_log WHERE run_id = ?2 AND seq BETWEEN ?3 AND ?4;

-- name: drop_ref
-- Remove a reference whose rows were all copied.
DELETE FROM run_refs WHERE run_id = ? AND from_seq = ?;

-- name: shrink_ref
-- Start a reference later: its first rows were copied.
UPDATE run_refs SET from_seq = ?3 WHERE run_id = ?1 AND from_seq = ?2;

-- name: rows_at
-- A run's records at some seqs (a JSON array), its own or referenced.
SELECT seq, record FROM run_log WHERE run_id = ?1 AND seq IN (SELECT value FROM json_each(?2))
UNION ALL
SELECT l.seq, l.record FROM run_refs r
JOIN run_log l ON l.run_id = r.source_run_id AND l.seq BETWEEN r.from_seq AND r.to_seq
 AND l.seq IN (SELECT value FROM json_each(?2))
WHERE r.run_id = ?1;

-- name: source_state
-- 0: run ?1 has its row at seq ?2 (a log is deleted last seqs first, so a run that has the
-- last seq of a reference has all of it); 1: it has not (its log is being deleted); 2: the
-- run is gone.
SELECT CASE
    WHEN EXISTS (SELECT 1 FROM run_log WHERE run_id = ?1 AND seq = ?2) THEN 0
    WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = ?1) THEN 1
    ELSE 2
END;

-- name: referenced
-- Whether any run references rows of these runs (a JSON array).
SELECT EXISTS (
    SELECT 1 FROM run_refs WHERE source_run_id IN (SELECT value FROM json_each(?))
);
