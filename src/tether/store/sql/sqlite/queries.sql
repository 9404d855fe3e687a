-- name: append
-- Append one record; a retried append of the same (run_id, seq) does nothing.
INSERT INTO run_log (run_id, seq, record) VALUES (?, ?, ?)
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: append_fenced
-- Append one record only while the run's epoch is the caller's (?4), and only if it follows
-- the log's last record: seq 0, or the seq before it is held, as its own row or, for a
-- fork, in a range it references (a log never gets a hole: docs/failure-model.md). The
-- rows of one append are inserted in order, so each follows the one before it.
INSERT INTO run_log (run_id, seq, record)
SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = ?1 AND epoch = ?4)
  AND (?2 = 0
       OR EXISTS (SELECT 1 FROM run_log WHERE run_id = ?1 AND seq = ?2 - 1)
       OR EXISTS (SELECT 1 FROM run_refs WHERE run_id = ?1 AND from_seq <= ?2 - 1
                  AND to_seq >= ?2 - 1))
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: last_seq
-- The log's last seq: its own rows' and the ranges it references (-1: none). Read only
-- to judge a refused append.
SELECT max(coalesce((SELECT max(seq) FROM run_log WHERE run_id = ?1), -1),
           coalesce((SELECT max(to_seq) FROM run_refs WHERE run_id = ?1), -1));

-- name: clock
-- The database's clock (SQLite's 'now', the host's), in seconds since the epoch: leases are
-- set and judged by it (store/sqlite/dbtime.py).
SELECT (julianday('now') - 2440587.5) * 86400.0;

-- name: record_at
-- The record already stored at a seq (to tell a retry from a conflict).
SELECT record FROM run_log WHERE run_id = ? AND seq = ?;

-- name: read
-- A run's records after a seq, in order: its own rows and, for a fork, the rows its ranges
-- reference (store/forks.py).
SELECT seq, record FROM run_log WHERE run_id = ?1 AND seq > ?2
UNION ALL
SELECT l.seq, l.record FROM run_refs r
JOIN run_log l ON l.run_id = r.source_run_id AND l.seq BETWEEN max(r.from_seq, ?2 + 1) AND r.to_seq
WHERE r.run_id = ?1 AND r.to_seq > ?2
ORDER BY 1;

-- name: read_all_own
-- A run's record bytes in order when it is no fork (it references no rows): one walk of
-- run_log's primary key, in seq order. Nothing for a fork (and for an unknown run): the
-- caller then reads with read_all. With the referenced rows merged in, SQLite sorts every
-- row in a temporary b-tree instead (5,000 rows of a model turn's size: 8-10 ms against
-- ~4 ms in a fresh process).
SELECT record FROM run_log
WHERE run_id = ?1 AND NOT EXISTS (SELECT 1 FROM run_refs WHERE run_id = ?1)
ORDER BY seq;

-- name: read_all
-- A run's record bytes in order (rehydration), with what a fork references, as `read`.
SELECT record FROM (
    SELECT seq, record FROM run_log WHERE run_id = ?1
    UNION ALL
    SELECT l.seq, l.record FROM run_refs r
    JOIN run_log l ON l.run_id = r.source_run_id AND l.seq BETWEEN r.from_seq AND r.to_seq
    WHERE r.run_id = ?1
) ORDER BY seq;

-- name: run_epoch
-- The run's current epoch.
SELECT epoch FROM runs WHERE run_id = ?;

-- name: create_run
-- Insert a run row.
INSERT INTO runs (run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch,
                  lease_until, agent_version, concurrency_key, priority)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_run
-- One run row.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until,
       agent_version, concurrency_key, priority
FROM runs WHERE run_id = ?;

-- name: set_status
-- Change a run's status, reason and wake-up time (and the version it is on, if given).
UPDATE runs SET status = ?, reason = ?, updated_at = ?, wake_at = ?,
                agent_version = coalesce(?, agent_version)
WHERE run_id = ?;

-- name: list_runs
-- Runs, newest first.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until,
       agent_version, concurrency_key, priority
FROM runs ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?;

-- name: list_runs_by_status
-- Runs with one status, newest first.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until,
       agent_version, concurrency_key, priority
FROM runs WHERE status = ? ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?;

-- name: list_runs_where
-- Runs matching the filters given (a NULL one matches every run), newest first; :orphaned
-- 1 keeps only running runs whose lease ran out by :now, 0 all others.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until,
       agent_version, concurrency_key, priority
FROM runs
WHERE (:status IS NULL OR status = :status)
  AND (:agent IS NULL OR agent = :agent)
  AND (:prefix IS NULL OR substr(run_id, 1, length(:prefix)) = :prefix)
  AND (:parent IS NULL OR parent_run_id = :parent)
  AND (:top = 0 OR parent_run_id IS NULL)
  AND (:orphaned IS NULL
       OR (status = 'running' AND coalesce(lease_until < :now, 0)) = :orphaned)
ORDER BY created_at DESC, run_id LIMIT :limit OFFSET :offset;

-- name: set_status_fenced
-- Change a run's status, reason and wake-up time (and version) only while its epoch is the
-- caller's.
UPDATE runs SET status = ?, reason = ?, updated_at = ?, wake_at = ?,
                agent_version = coalesce(?, agent_version)
WHERE run_id = ? AND epoch = ?;

-- name: claim
-- Take up to N runnable top-level runs at a new epoch with a lease (one process owns the
-- file, so its clock is the only clock): parked runs whose wake-up time has come, then
-- queued, drained and orphaned ones, oldest first (of the orphaned ones, those whose
-- leases ran out first are the candidates). Each kind is read in its own order through
-- an index keyed on its status first (runs_status_idx, runs_drained_idx, runs_lease_idx,
-- runs_wake_idx), so that SQLite picks it without statistics: the runs running under live
-- leases and the queue's other runs cost a claim nothing. Never those of :skip (a JSON
-- array of run ids the claiming worker's code cannot continue). Pinning: unless :pinned is
-- 0, only runs of the agents of :serves (a JSON array of [agent, version]) on that version
-- or on none, or runs of :also (a JSON array of run ids its code checked).
UPDATE runs SET status = 'running', reason = NULL, owner = :owner, epoch = epoch + 1,
       lease_until = :now + :ttl, updated_at = :now
WHERE run_id IN (
    SELECT run_id FROM (
        SELECT run_id FROM runs
        WHERE parent_run_id IS NULL AND status = 'waiting' AND wake_at <= :now
          AND run_id NOT IN (SELECT value FROM json_each(:skip))
          AND (:pinned = 0 OR run_id IN (SELECT value FROM json_each(:also))
               OR EXISTS (SELECT 1 FROM json_each(:serves) AS s
                          WHERE s.value ->> 0 = runs.agent
                            AND (runs.agent_version IS NULL
                                 OR runs.agent_version = s.value ->> 1)))
        ORDER BY wake_at
        LIMIT :limit
    )
    UNION ALL
    SELECT run_id FROM (
        SELECT * FROM (
            SELECT run_id, created_at FROM runs
            WHERE parent_run_id IS NULL AND status = 'queued'
              AND run_id NOT IN (SELECT value FROM json_each(:skip))
              AND (:pinned = 0 OR run_id IN (SELECT value FROM json_each(:also))
                   OR EXISTS (SELECT 1 FROM json_each(:serves) AS s
                              WHERE s.value ->> 0 = runs.agent
                                AND (runs.agent_version IS NULL
                                     OR runs.agent_version = s.value ->> 1)))
            ORDER BY created_at
            LIMIT :limit
        )
        UNION ALL
        SELECT * FROM (
            SELECT run_id, created_at FROM runs
            WHERE parent_run_id IS NULL AND status = 'paused' AND reason = 'drain'
              AND (lease_until IS NULL OR lease_until < :now)
              AND run_id NOT IN (SELECT value FROM json_each(:skip))
              AND (:pinned = 0 OR run_id IN (SELECT value FROM json_each(:also))
                   OR EXISTS (SELECT 1 FROM json_each(:serves) AS s
                              WHERE s.value ->> 0 = runs.agent
                                AND (runs.agent_version IS NULL
                                     OR runs.agent_version = s.value ->> 1)))
            ORDER BY created_at
            LIMIT :limit
        )
        UNION ALL
        SELECT * FROM (
            SELECT run_id, created_at FROM runs
            WHERE parent_run_id IS NULL AND status = 'running' AND lease_until < :now
              AND run_id NOT IN (SELECT value FROM json_each(:skip))
              AND (:pinned = 0 OR run_id IN (SELECT value FROM json_each(:also))
                   OR EXISTS (SELECT 1 FROM json_each(:serves) AS s
                              WHERE s.value ->> 0 = runs.agent
                                AND (runs.agent_version IS NULL
                                     OR runs.agent_version = s.value ->> 1)))
            ORDER BY lease_until
            LIMIT :limit
        )
        ORDER BY created_at
        LIMIT :limit
    )
    LIMIT :limit
)
RETURNING run_id, epoch, cancel_requested;

-- name: stranded
-- Up to :limit runnable top-level runs (oldest first, never those of :skip) that the
-- [agent, version] pairs of :serves do not admit: read, not claimed. Each kind of runnable
-- run through its own index, as in claim.
SELECT run_id, agent, agent_version FROM (
    SELECT * FROM (
        SELECT run_id, agent, agent_version, created_at FROM runs
        WHERE parent_run_id IS NULL AND status = 'queued'
          AND run_id NOT IN (SELECT value FROM json_each(:skip))
          AND NOT EXISTS (SELECT 1 FROM json_each(:serves) AS s
                          WHERE s.value ->> 0 = runs.agent
                            AND (runs.agent_version IS NULL
                                 OR runs.agent_version = s.value ->> 1))
        ORDER BY created_at
        LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT run_id, agent, agent_version, created_at FROM runs
        WHERE parent_run_id IS NULL AND status = 'paused' AND reason = 'drain'
          AND (lease_until IS NULL OR lease_until < :now)
          AND run_id NOT IN (SELECT value FROM json_each(:skip))
          AND NOT EXISTS (SELECT 1 FROM json_each(:serves) AS s
                          WHERE s.value ->> 0 = runs.agent
                            AND (runs.agent_version IS NULL
                                 OR runs.agent_version = s.value ->> 1))
        ORDER BY created_at
        LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT run_id, agent, agent_version, created_at FROM runs
        WHERE parent_run_id IS NULL AND status = 'running' AND lease_until < :now
          AND run_id NOT IN (SELECT value FROM json_each(:skip))
          AND NOT EXISTS (SELECT 1 FROM json_each(:serves) AS s
                          WHERE s.value ->> 0 = runs.agent
                            AND (runs.agent_version IS NULL
                                 OR runs.agent_version = s.value ->> 1))
        ORDER BY lease_until
        LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT run_id, agent, agent_version, created_at FROM runs
        WHERE parent_run_id IS NULL AND status = 'waiting' AND wake_at <= :now
          AND run_id NOT IN (SELECT value FROM json_each(:skip))
          AND NOT EXISTS (SELECT 1 FROM json_each(:serves) AS s
                          WHERE s.value ->> 0 = runs.agent
                            AND (runs.agent_version IS NULL
                                 OR runs.agent_version = s.value ->> 1))
        ORDER BY wake_at
        LIMIT :limit
    )
)
ORDER BY created_at
LIMIT :limit;

-- name: renew
-- Extend one lease while the caller holds the run at its epoch; whether it was asked to be
-- cancelled (no row: the lease was lost, or the run released meanwhile).
UPDATE runs SET lease_until = ? WHERE run_id = ? AND epoch = ? AND owner = ?
RETURNING cancel_requested;

-- name: release
-- Give a run up with its new status (and wake-up time, when parked), only at the caller's
-- epoch.
UPDATE runs SET status = ?, reason = ?, owner = NULL, lease_until = NULL, updated_at = ?,
       wake_at = ?
WHERE run_id = ? AND epoch = ?;

-- name: release_unfenced
-- Give up a run nobody leased with its new status (and wake-up time, when parked).
UPDATE runs SET status = ?, reason = ?, owner = NULL, lease_until = NULL, updated_at = ?,
       wake_at = ?
WHERE run_id = ?;

-- name: adopt_child
-- Take a sub-agent run at a new epoch, only while its parent is at the caller's epoch.
UPDATE runs SET epoch = epoch + 1, owner = :owner, updated_at = :now
WHERE run_id = :run_id
  AND EXISTS (SELECT 1 FROM runs WHERE run_id = :parent AND epoch = :parent_epoch)
RETURNING epoch;

-- name: take
-- Claim one named top-level run at a new epoch with a lease, only while nobody holds a
-- live lease on it (queued, paused for any reason, parked, or running with an expired lease).
UPDATE runs SET status = 'running', reason = NULL, owner = :owner, epoch = epoch + 1,
       lease_until = :now + :ttl, updated_at = :now
WHERE run_id = :run_id AND parent_run_id IS NULL
  AND (status IN ('queued', 'paused', 'waiting')
       OR (status = 'running' AND lease_until < :now))
  AND (lease_until IS NULL OR lease_until < :now)
RETURNING epoch, cancel_requested;

-- name: take_force
-- Take one named unfinished top-level run at a new epoch whoever holds it (a takeover).
UPDATE runs SET status = 'running', reason = NULL, owner = :owner, epoch = epoch + 1,
       lease_until = :now + :ttl, updated_at = :now
WHERE run_id = :run_id AND parent_run_id IS NULL
  AND status IN ('queued', 'paused', 'waiting', 'running')
RETURNING epoch, cancel_requested;

-- name: reopen
-- Take a failed top-level run at a new epoch with a lease, to retry it.
UPDATE runs SET status = 'running', reason = NULL, owner = :owner, epoch = epoch + 1,
       lease_until = :now + :ttl, updated_at = :now, wake_at = NULL
WHERE run_id = :run_id AND parent_run_id IS NULL AND status = 'failed'
  AND NOT cancel_requested
RETURNING epoch, cancel_requested;

-- name: request_cancel
-- Ask for a run to be cancelled, unless it has finished (a finished run keeps its mark of
-- being deleted, `seal`); returns its status then.
UPDATE runs SET cancel_requested = cancel_requested OR (status NOT IN ('succeeded', 'failed', 'cancelled'))
WHERE run_id = ?
RETURNING status;

-- name: next_wake
-- The earliest wake-up time of a parked top-level run (NULL if none has one).
SELECT min(wake_at) FROM runs WHERE parent_run_id IS NULL AND status = 'waiting';

-- name: expired
-- Top-level runs finished with one of the statuses (a JSON array) before a time, oldest
-- first, after a (updated_at, run_id) cursor, optionally of one agent.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch, lease_until
FROM runs
WHERE parent_run_id IS NULL
  AND status IN ('succeeded', 'failed', 'cancelled')
  AND status IN (SELECT value FROM json_each(:statuses))
  AND updated_at < :before
  AND (:agent IS NULL OR agent = :agent)
  AND (updated_at, run_id) > (:after_t, :after_id)
ORDER BY updated_at, run_id
LIMIT :limit;

-- name: families
-- Runs (a JSON array) and every run below them (children, theirs), parents first.
WITH RECURSIVE fam(run_id, depth) AS (
    SELECT run_id, 0 FROM runs WHERE run_id IN (SELECT value FROM json_each(?))
    UNION ALL
    SELECT runs.run_id, fam.depth + 1 FROM runs JOIN fam ON runs.parent_run_id = fam.run_id
)
SELECT r.run_id, r.agent, r.status, r.parent_run_id, r.reason, r.created_at, r.updated_at,
       r.owner, r.epoch, r.lease_until
FROM fam JOIN runs r ON r.run_id = fam.run_id ORDER BY fam.depth, r.run_id;

-- name: log_size
-- How many log rows, and how many record bytes, the runs (a JSON array) have.
SELECT count(*), coalesce(sum(length(record)), 0) FROM run_log
WHERE run_id IN (SELECT value FROM json_each(?));

-- name: delete_log
-- Delete up to N log rows of finished runs (a JSON array), last seqs first, so a pass cut
-- short leaves each log a prefix; returns each deleted record's size. Driven by the ids
-- (primary keys), never by a scan of every finished run.
DELETE FROM run_log WHERE (run_id, seq) IN (
    SELECT l.run_id, l.seq FROM json_each(?) AS ids
    JOIN runs r ON r.run_id = ids.value AND r.status IN ('succeeded', 'failed', 'cancelled')
    JOIN run_log l ON l.run_id = ids.value
    ORDER BY l.run_id, l.seq DESC
    LIMIT ?
)
RETURNING length(record);

-- name: seal
-- Mark the finished runs among the given ones (a JSON array) as being deleted
-- (cancel_requested, which means nothing else on a finished run): `reopen` refuses them.
UPDATE runs SET cancel_requested = 1
WHERE run_id IN (SELECT value FROM json_each(?))
  AND status IN ('succeeded', 'failed', 'cancelled')
RETURNING run_id;

-- name: unseal
-- Take that mark off again (a delete that did not go ahead).
UPDATE runs SET cancel_requested = 0
WHERE run_id IN (SELECT value FROM json_each(?))
  AND status IN ('succeeded', 'failed', 'cancelled');

-- name: delete_runs
-- Delete the rows of the finished runs among the given ones (a JSON array); the caller
-- then deletes their references and lineage as forks (delete_fork_rows).
DELETE FROM runs
WHERE run_id IN (SELECT value FROM json_each(?))
  AND status IN ('succeeded', 'failed', 'cancelled')
RETURNING run_id;

-- name: delete_refs
-- Delete the references of a deleted run (whoever referenced it had its rows copied).
DELETE FROM run_refs WHERE run_id = ?;

-- name: delete_origin
-- Delete the lineage of a deleted run.
DELETE FROM run_forks WHERE run_id = ?;

-- name: count_by_status
-- How many runs have each status (for the runs gauge).
SELECT status, count(*) FROM runs GROUP BY status;
