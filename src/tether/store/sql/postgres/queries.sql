-- name: append
-- Append records in one statement, all or none. A retried identical record is skipped;
-- a different record at a taken seq sets seq to NULL, a not-null violation that aborts
-- the whole statement, so nothing of the call lands (DO NOTHING would keep the other rows).
INSERT INTO run_log (run_id, seq, record)
SELECT $1, e.seq, e.record FROM unnest($2::bigint[], $3::bytea[]) AS e(seq, record)
ON CONFLICT (run_id, seq) DO UPDATE SET seq = NULL
WHERE run_log.record IS DISTINCT FROM EXCLUDED.record;

-- name: append_fenced
-- The same, only while runs.epoch = $4. FOR SHARE makes a claim (UPDATE runs SET epoch)
-- wait for this insert to commit, or this insert wait for the claim and then see the new
-- epoch and insert nothing. FOR KEY SHARE would not conflict with that UPDATE. And only if
-- the first seq follows the log's last record (seq 0, or the seq before it is held, as its
-- own row or in a range a fork references; the caller checks that the seqs follow each
-- other): otherwise every seq is NULL, a not-null violation that aborts the statement,
-- and the caller judges (LogGap). Checked once, not per row.
INSERT INTO run_log (run_id, seq, record)
SELECT $1, CASE WHEN follows.ok THEN e.seq END, e.record
FROM unnest($2::bigint[], $3::bytea[]) AS e(seq, record),
     (SELECT 1 FROM runs WHERE run_id = $1 AND epoch = $4 FOR SHARE) AS fence,
     (SELECT (($2::bigint[])[1]::bigint = 0
        OR EXISTS (SELECT 1 FROM run_log WHERE run_id = $1 AND seq = ($2::bigint[])[1] - 1)
        OR EXISTS (SELECT 1 FROM run_refs WHERE run_id = $1
                   AND ($2::bigint[])[1] - 1 BETWEEN from_seq AND to_seq))) AS follows(ok)
ON CONFLICT (run_id, seq) DO UPDATE SET seq = NULL
WHERE run_log.record IS DISTINCT FROM EXCLUDED.record;

-- name: append_one
-- `append` for one record (most appends carry one node's record): a VALUES row instead of
-- unnest, which the server plans and runs ~20 us faster, and a plain INSERT: with one row
-- there is nothing to keep when its seq is taken, so the unique violation is the signal
-- (the caller then judges, an identical retry being a no-op), without ON CONFLICT's
-- speculative insertion (5-15 us of the server's time an append, measured).
INSERT INTO run_log (run_id, seq, record) VALUES ($1, $2, $3);

-- name: append_one_fenced
-- `append_fenced` for one record, a plain INSERT as `append_one`. A seq that does not
-- follow the log's last record (the one before it held as a row, or in a range a fork
-- references; seq 0 is written with the run's row) becomes NULL: the not-null violation is
-- the signal, as a taken seq's unique violation is, and the caller judges (LogGap). The
-- probe of the seq before is one lookup of run_log's key, next to where the row goes;
-- run_refs is probed only when it fails (a fork's first append).
INSERT INTO run_log (run_id, seq, record)
SELECT $1,
       CASE WHEN $2::bigint = 0 OR EXISTS (SELECT 1 FROM run_log WHERE run_id = $1 AND seq = $2 - 1)
            THEN $2
            WHEN EXISTS (SELECT 1 FROM run_refs WHERE run_id = $1
                         AND $2 - 1 BETWEEN from_seq AND to_seq)
            THEN $2 END,
       $3
FROM (SELECT 1 FROM runs WHERE run_id = $1 AND epoch = $4 FOR SHARE) AS fence;

-- name: append_group
-- The appends of several runs in one statement (group commit): rows $1/$2/$3 (run, seq,
-- record), the unfenced runs' rows first. The first $6 rows are inserted as they are; the
-- others belong to fenced runs, inserted only while that run's epoch is still the one
-- $4/$5 give it (FOR SHARE, as append_fenced) and while its first seq, in $7, follows the
-- log's last record (as append_fenced; a run whose does not is left out like a fenced-off
-- one, and appends alone, where it is judged). A count, not a flag a row: one array less
-- for the client to encode (its CPU a row is the throughput's cap). SKIP LOCKED: a runs
-- row that a claim or a lease renewal is updating right now is left out instead of waited
-- for (waiting on several rows at once could deadlock with a renewal of several); such a
-- run, like a fenced-off one, inserts nothing here and appends alone, where it waits for
-- the row as append_fenced does. Returns the fenced runs that passed their fence: every
-- other run's rows all landed. A plain INSERT (no ON CONFLICT, no row-wise RETURNING:
-- together they were half the server's CPU a row, and `= ANY(runs)` grew with runs x rows):
-- any taken seq, a retry's or a conflict's, aborts the whole statement and each run then
-- appends alone, so a conflict is reported to its own run only. The run ids, seqs and
-- epochs come as array literals (store/postgres_arrays.py: the client's CPU a row).
WITH fence AS (
    SELECT runs.run_id FROM runs
    JOIN unnest($4::text::text[], $5::text::bigint[], $7::text::bigint[])
      AS f(run_id, epoch, first)
      ON runs.run_id = f.run_id AND runs.epoch = f.epoch
    WHERE (f.first::bigint = 0
        OR EXISTS (SELECT 1 FROM run_log WHERE run_id = f.run_id AND seq = f.first - 1)
        OR EXISTS (SELECT 1 FROM run_refs WHERE run_id = f.run_id
                   AND f.first - 1 BETWEEN from_seq AND to_seq))
    FOR SHARE OF runs SKIP LOCKED
), ins AS (
    INSERT INTO run_log (run_id, seq, record)
    SELECT e.run_id, e.seq, e.record
    FROM unnest($1::text::text[], $2::text::bigint[], $3::bytea[])
      WITH ORDINALITY AS e(run_id, seq, record, n)
    WHERE e.n <= $6 OR e.run_id IN (SELECT run_id FROM fence)
)
SELECT run_id FROM fence;

-- name: notify_appends
-- Tell the event streams of every replica which runs grew ('run_id:last seq' each), in one
-- statement for all the appends made since the last one. Not in the append itself: a
-- notifying commit takes a database-wide lock, which serialized concurrent appends (3.5x
-- fewer appends/s with 16 writers, bench/stream_latency.py). Returns how many log
-- listeners (connections named $2) there are now, as log_listeners.
WITH sent AS (SELECT count(pg_notify('tether_log', payload)) FROM unnest($1::text[]) AS payload)
SELECT count(*) FROM pg_stat_activity, sent
WHERE application_name = $2 AND datname = current_database();

-- name: log_listeners
-- How many log listeners (connections named $1) this database has: appends are notified
-- only while there is one (store/postgres_notify.py).
SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database();

-- name: log_listener_hello
-- A log listener that now listens tells the notifiers of every process at once.
SELECT pg_notify('tether_log_hello', '');

-- name: records_at
-- The records already stored at some seqs (to tell a retry from a conflict or a fence).
SELECT seq, record FROM run_log WHERE run_id = $1 AND seq = ANY($2::bigint[]);

-- name: read
-- A run's records after a seq with their seqs, in no particular order (the caller sorts
-- them by seq): its own rows, then each range it references (store/forks.py; a run that is
-- no fork has none: one probe of run_refs' key), each piece a walk of run_log's primary
-- key. A sorted union made PostgreSQL plan a parallel sort of every row (3-7 ms of starting
-- workers for a 500-record fork, and on disk past work_mem); a sort in Python of rows that
-- come nearly in order costs ~1 ms. The walk stays a subquery (OFFSET 0): flattened into
-- the join, it was planned as a parallel nested loop once run_log held a few large runs
-- (a 500-record fork read in 5.9 ms instead of 0.47), or as a hash join over every row.
SELECT l.seq, l.record FROM (
    SELECT $1::text AS source_run_id, $2::bigint + 1 AS from_seq, 9223372036854775807 AS to_seq
    UNION ALL
    SELECT source_run_id, greatest(from_seq, $2 + 1), to_seq FROM run_refs
    WHERE run_id = $1 AND to_seq > $2
) AS p
CROSS JOIN LATERAL (
    SELECT seq, record FROM run_log
    WHERE run_id = p.source_run_id AND seq BETWEEN p.from_seq AND p.to_seq
    OFFSET 0  -- kept a subquery: see the comment above
) AS l;

-- name: read_all
-- A run's records with their seqs, in no particular order (the caller sorts them by seq),
-- in one statement whether or not it is a fork. A run that is no fork (it references no
-- rows: one probe of run_refs' key) is one scan of run_log by its key's run_id; a fork is
-- read as `read` reads it (its own rows, then each range it references, each a walk of
-- run_log's key), the other branch skipped by its one-time filter. Sorted here, the rows
-- were copied into a sort whatever the plan (a bitmap or a sequential scan whenever a
-- run's rows are a fair share of their pages, statistics or not): 5,000 records of 230
-- bytes read in 4.3 ms, and 2.7 ms sorted in Python, where they come nearly in order. A
-- walk of the key for a run that is no fork read its 5,000 records in 3.6 ms instead of
-- 2.6-3.0; a first statement for a run's own rows, then `read` for a fork, cost a fork of
-- 500 records a second round trip.
SELECT seq, record FROM run_log
WHERE run_id = $1 AND NOT EXISTS (SELECT 1 FROM run_refs WHERE run_id = $1)
UNION ALL
SELECT l.seq, l.record FROM (
    SELECT $1::text AS source_run_id, 0::bigint AS from_seq, 9223372036854775807 AS to_seq
    WHERE EXISTS (SELECT 1 FROM run_refs WHERE run_id = $1)
    UNION ALL
    SELECT source_run_id, from_seq, to_seq FROM run_refs WHERE run_id = $1
) AS p
CROSS JOIN LATERAL (
    SELECT seq, record FROM run_log
    WHERE run_id = p.source_run_id AND seq BETWEEN p.from_seq AND p.to_seq
    OFFSET 0  -- kept a subquery, as in read
) AS l;

-- name: create_run
-- Insert a run row and its record at seq 0 in one statement; returns 0 if the id is taken.
WITH run AS (
    INSERT INTO runs (run_id, agent, status, parent_run_id, reason, created_at, updated_at,
                      owner, epoch, lease_until, agent_version, concurrency_key, priority)
    VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8,
            extract(epoch FROM clock_timestamp()) + $10::double precision, $11, $12, $13)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING run_id
), first AS (
    INSERT INTO run_log (run_id, seq, record)
    SELECT run_id, 0, $9 FROM run
    ON CONFLICT (run_id, seq) DO UPDATE SET seq = NULL
    WHERE run_log.record IS DISTINCT FROM EXCLUDED.record
)
SELECT count(*) FROM run;

-- name: get_run
-- One run row.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch,
       lease_until, agent_version, concurrency_key, priority
FROM runs WHERE run_id = $1;

-- name: set_status
-- Change a run's status, reason and wake-up time (and the version it is on, if $6 is set).
UPDATE runs SET status = $2, reason = $3, updated_at = $4, wake_at = $5,
                agent_version = coalesce($6, agent_version)
WHERE run_id = $1;

-- name: list_runs
-- Runs, newest first.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch,
       lease_until, agent_version, concurrency_key, priority
FROM runs ORDER BY created_at DESC, run_id LIMIT $1 OFFSET $2;

-- name: list_runs_by_status
-- Runs with one status, newest first.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch,
       lease_until, agent_version, concurrency_key, priority
FROM runs WHERE status = $1 ORDER BY created_at DESC, run_id LIMIT $2 OFFSET $3;

-- name: list_runs_where
-- Runs matching the filters given (a NULL one matches every run), newest first; $8 true
-- keeps only running runs whose lease ran out (the database's clock), false all others.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch,
       lease_until, agent_version, concurrency_key, priority
FROM runs
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR agent = $2)
  AND ($3::text IS NULL OR starts_with(run_id, $3))
  AND ($4::text IS NULL OR parent_run_id = $4)
  AND (NOT $5::boolean OR parent_run_id IS NULL)
  AND ($8::boolean IS NULL
       OR (status = 'running'
           AND coalesce(lease_until < extract(epoch FROM clock_timestamp()), false)) = $8)
ORDER BY created_at DESC, run_id LIMIT $6 OFFSET $7;

-- name: migrations_lock
-- Serialize migrate() across processes until this transaction ends (key: "tether" in hex).
SELECT pg_advisory_xact_lock(x'746574686572'::bigint);

-- name: migrations_table
-- The record of applied migrations.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at double precision NOT NULL
);

-- name: migrations_done
-- Versions already applied.
SELECT version FROM schema_migrations;

-- name: migration_applied
-- Note one applied migration.
INSERT INTO schema_migrations (version, name, applied_at)
VALUES ($1, $2, extract(epoch FROM clock_timestamp()));

-- name: set_status_fenced
-- Change a run's status, reason and wake-up time (and version) only while its epoch is the
-- caller's ($7).
UPDATE runs SET status = $2, reason = $3, updated_at = $4, wake_at = $5,
                agent_version = coalesce($6, agent_version)
WHERE run_id = $1 AND epoch = $7;

-- name: set_status_appending
-- set_status (at epoch $7, or at any epoch when $7 is NULL) and a record at seq $8 in one
-- statement, one round trip, one commit: a run taken up again records its RunResumed with
-- its status. The UPDATE of the runs row is the fence (a take waits for it, or it finds
-- the new epoch and nothing happens), and the record is inserted only with the update. A
-- different record at the seq aborts the statement (seq NULL, as in append); an identical
-- one (a retry that had landed) is kept. Fenced, only if the record follows the log's
-- last record (as append_one_fenced). Returns the rows updated; the caller judges
-- anything but an update step by step (set_status, then append_final, in a transaction).
WITH updated AS (
    UPDATE runs SET status = $2, reason = $3, updated_at = $4, wake_at = $5,
                    agent_version = coalesce($6, agent_version)
    WHERE run_id = $1 AND ($7::bigint IS NULL OR epoch = $7 AND ($8::bigint = 0
        OR EXISTS (SELECT 1 FROM run_log WHERE run_id = $1 AND seq = $8 - 1)
        OR EXISTS (SELECT 1 FROM run_refs WHERE run_id = $1
                   AND $8 - 1 BETWEEN from_seq AND to_seq)))
    RETURNING run_id
), appended AS (
    INSERT INTO run_log (run_id, seq, record)
    SELECT $1, $8, $9 FROM updated
    ON CONFLICT (run_id, seq) DO UPDATE SET seq = NULL
    WHERE run_log.record IS DISTINCT FROM EXCLUDED.record
)  -- runs whether or not the SELECT reads it, as every data-modifying WITH does
SELECT count(*) FROM updated;

-- name: run_epoch
-- A run's current epoch (to tell a fenced-off update from an unknown run).
SELECT epoch FROM runs WHERE run_id = $1;

-- name: claim
-- Take up to $2 runnable top-level runs for owner $1 with a lease of $3 seconds, each at
-- a new epoch. SKIP LOCKED lets workers claim side by side without waiting on each other;
-- the lease is timed by the database's clock so workers with skewed clocks agree. A run
-- paused by a drain is runnable once released (lease_until cleared), not while its
-- worker still holds it between the pause record and the release (unless that worker
-- died there and its lease ran out). Parked runs whose wake-up time has come are taken
-- first, then queued, drained and orphaned runs oldest first (of the orphaned ones, those
-- whose leases ran out first are the candidates). Each kind is found through
-- its own index (runs_wake_idx, runs_fresh_idx, runs_lease_idx), with the time read once
-- (an index condition cannot call clock_timestamp()): the runs running under live leases
-- and the parked ones not yet due cost the claim nothing, however many there are.
-- Never the runs of $4: ones the claiming worker's code cannot continue. Pinning: with
-- agents $5 and their versions $6 (NULL: no pinning), only runs of those agents on that
-- version or on none (older than versions), or runs of $7 (other versions its code checked).
-- Flow control: while a concurrency limit exists, or a queued run has a key or a priority,
-- this claims nothing and returns one row (NULL, NULL, whether limits exist) instead: the
-- caller claims with claim_flow (limits.sql). The two probes cost an empty table's scan and
-- an empty partial index's.
-- {claim_size} is $2 written into the text (postgres_leases.claim_sql): each branch is then
-- costed for the rows it takes, so a prepared claim's generic plan costs what a custom one
-- does and PostgreSQL keeps it instead of planning every claim anew (planning took 0.43 ms
-- of a 0.84 ms claim). The update takes the picked runs by key (= ANY of their ids)
-- whatever the plan: joined to them, a generic plan hashed a scan of the whole runs table.
WITH flow AS (
    SELECT EXISTS (SELECT 1 FROM run_limits) AS limited,
           EXISTS (SELECT 1 FROM runs WHERE parent_run_id IS NULL AND status = 'queued'
                   AND (concurrency_key <> '' OR priority <> 0)) AS ordered
), clock AS (
    SELECT extract(epoch FROM clock_timestamp()) AS now
), due AS (
    SELECT run_id FROM runs
    WHERE parent_run_id IS NULL AND status = 'waiting'
      AND NOT (SELECT limited OR ordered FROM flow)
      AND wake_at <= (SELECT now FROM clock)
      AND run_id <> ALL($4::text[])
      AND ($5::text[] IS NULL OR run_id = ANY($7::text[])
           OR EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[]) AS s(agent, version)
                      WHERE s.agent = runs.agent
                        AND (runs.agent_version IS NULL OR runs.agent_version = s.version)))
    ORDER BY wake_at
    LIMIT {claim_size}
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT run_id, created_at FROM runs
    WHERE parent_run_id IS NULL
      AND (status = 'queued' OR (status = 'paused' AND reason = 'drain'))
      AND (status = 'queued' OR lease_until IS NULL OR lease_until < (SELECT now FROM clock))
      AND NOT (SELECT limited OR ordered FROM flow)
      AND run_id <> ALL($4::text[])
      AND ($5::text[] IS NULL OR run_id = ANY($7::text[])
           OR EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[]) AS s(agent, version)
                      WHERE s.agent = runs.agent
                        AND (runs.agent_version IS NULL OR runs.agent_version = s.version)))
    ORDER BY created_at
    LIMIT {claim_size}
    FOR UPDATE SKIP LOCKED
), orphaned AS (
    SELECT run_id, created_at FROM runs
    WHERE parent_run_id IS NULL AND status = 'running'
      AND lease_until < (SELECT now FROM clock)
      AND NOT (SELECT limited OR ordered FROM flow)
      AND run_id <> ALL($4::text[])
      AND ($5::text[] IS NULL OR run_id = ANY($7::text[])
           OR EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[]) AS s(agent, version)
                      WHERE s.agent = runs.agent
                        AND (runs.agent_version IS NULL OR runs.agent_version = s.version)))
    ORDER BY lease_until
    LIMIT {claim_size}
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT run_id FROM (
        SELECT run_id, 0 AS kind, 0::double precision AS created_at FROM due
        UNION ALL SELECT run_id, 1, created_at FROM fresh
        UNION ALL SELECT run_id, 1, created_at FROM orphaned
    ) AS p
    ORDER BY kind, created_at
    LIMIT $2
), claimed AS (
    UPDATE runs SET status = 'running', reason = NULL, owner = $1, epoch = runs.epoch + 1,
           lease_until = (SELECT now FROM clock) + $3,
           updated_at = (SELECT now FROM clock)
    WHERE runs.run_id = ANY (ARRAY(SELECT run_id FROM picked))
    RETURNING runs.run_id, runs.epoch, runs.cancel_requested
)
SELECT run_id, epoch, cancel_requested FROM claimed
UNION ALL
SELECT NULL, NULL, limited FROM flow WHERE limited OR ordered;

-- name: stranded
-- Up to $4 runnable top-level runs (as claim finds them, oldest first, never those of $3)
-- that agents $1 at versions $2 do not admit: read, not claimed, so that a worker can
-- resolve their agents or check them against its code without moving their epochs. Each
-- kind of runnable run through its own index, as in claim.
WITH clock AS (
    SELECT extract(epoch FROM clock_timestamp()) AS now
), runnable AS (
    (SELECT run_id, agent, agent_version, created_at FROM runs
     WHERE parent_run_id IS NULL
       AND (status = 'queued' OR (status = 'paused' AND reason = 'drain'))
       AND (status = 'queued' OR lease_until IS NULL OR lease_until < (SELECT now FROM clock))
       AND run_id <> ALL($3::text[])
       AND NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS s(agent, version)
                       WHERE s.agent = runs.agent
                         AND (runs.agent_version IS NULL OR runs.agent_version = s.version))
     ORDER BY created_at
     LIMIT $4)
    UNION ALL
    (SELECT run_id, agent, agent_version, created_at FROM runs
     WHERE parent_run_id IS NULL AND status = 'running'
       AND lease_until < (SELECT now FROM clock)
       AND run_id <> ALL($3::text[])
       AND NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS s(agent, version)
                       WHERE s.agent = runs.agent
                         AND (runs.agent_version IS NULL OR runs.agent_version = s.version))
     ORDER BY lease_until
     LIMIT $4)
    UNION ALL
    (SELECT run_id, agent, agent_version, created_at FROM runs
     WHERE parent_run_id IS NULL AND status = 'waiting'
       AND wake_at <= (SELECT now FROM clock)
       AND run_id <> ALL($3::text[])
       AND NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS s(agent, version)
                       WHERE s.agent = runs.agent
                         AND (runs.agent_version IS NULL OR runs.agent_version = s.version))
     ORDER BY wake_at
     LIMIT $4)
)
SELECT run_id, agent, agent_version FROM runnable
ORDER BY created_at
LIMIT $4;

-- name: renew
-- Extend the leases owner $4 still holds at the epochs it claimed them at; returns those,
-- each with whether it was asked to be cancelled (one round trip per heartbeat). A run
-- released meanwhile (owner cleared, same epoch) keeps no lease.
UPDATE runs SET lease_until = extract(epoch FROM clock_timestamp()) + $3
FROM unnest($1::text[], $2::bigint[]) AS held(run_id, epoch)
WHERE runs.run_id = held.run_id AND runs.epoch = held.epoch AND runs.owner = $4
RETURNING runs.run_id, runs.cancel_requested;

-- name: release
-- Give a run up with its new status (and wake-up time $5, when parked), only at the
-- caller's epoch. A run paused by a drain or queued is runnable again, and a parked one
-- with a deadline changes when workers must look next: wake them (NOTIFY is sent when
-- this commits).
WITH released AS (
    UPDATE runs SET status = $3, reason = $4, owner = NULL, lease_until = NULL,
                    updated_at = extract(epoch FROM clock_timestamp()), wake_at = $5
    WHERE run_id = $1 AND epoch = $2
    RETURNING status, reason, wake_at
)
SELECT count(*) AS released,
       count(pg_notify('tether_work', $1)) FILTER (
           WHERE (status = 'paused' AND reason = 'drain') OR status = 'queued'
              OR (status = 'waiting' AND wake_at IS NOT NULL))
FROM released;

-- name: release_unfenced
-- Give up a run nobody leased with its new status (wakes workers as release does).
WITH released AS (
    UPDATE runs SET status = $2, reason = $3, owner = NULL, lease_until = NULL,
                    updated_at = extract(epoch FROM clock_timestamp()), wake_at = $4
    WHERE run_id = $1
    RETURNING status, reason, wake_at
)
SELECT count(*) AS released,
       count(pg_notify('tether_work', $1)) FILTER (
           WHERE (status = 'paused' AND reason = 'drain') OR status = 'queued'
              OR (status = 'waiting' AND wake_at IS NOT NULL))
FROM released;

-- name: finish
-- A run's last record and its release (as release does; at epoch $2, or at any epoch when
-- $2 is NULL) in one statement, one round trip: the UPDATE of the runs row is the fence (a
-- claim waits for it, or it finds the new epoch and nothing happens), and the record is
-- inserted only with the release; fenced, only if it follows the log's last record (as
-- append_one_fenced). A different record at the seq aborts the statement (seq
-- NULL, as in append); an identical one (a retry that had landed) is kept. Returns
-- (released, inserted, notified); the caller takes the step-by-step path (append_final,
-- then release, in a transaction) to judge anything but a release that inserted.
WITH released AS (
    UPDATE runs SET status = $3, reason = $4, owner = NULL, lease_until = NULL,
                    updated_at = extract(epoch FROM clock_timestamp()), wake_at = $5
    WHERE run_id = $1 AND ($2::bigint IS NULL OR epoch = $2 AND ($6::bigint = 0
        OR EXISTS (SELECT 1 FROM run_log WHERE run_id = $1 AND seq = $6 - 1)
        OR EXISTS (SELECT 1 FROM run_refs WHERE run_id = $1
                   AND $6 - 1 BETWEEN from_seq AND to_seq)))
    RETURNING status, reason, wake_at
), final AS (
    INSERT INTO run_log (run_id, seq, record)
    SELECT $1, $6, $7 FROM released
    ON CONFLICT (run_id, seq) DO UPDATE SET seq = NULL
    WHERE run_log.record IS DISTINCT FROM EXCLUDED.record
    RETURNING seq
)
SELECT count(*) AS released, (SELECT count(*) FROM final) AS inserted,
       count(pg_notify('tether_work', $1)) FILTER (
           WHERE (status = 'paused' AND reason = 'drain') OR status = 'queued'
              OR (status = 'waiting' AND wake_at IS NOT NULL))
FROM released;

-- name: finish_group
-- The finishes of several runs in one statement (group commit, store/postgres_finishes.py):
-- for each row of $1..$7 (run, epoch or NULL, status, reason, wake_at, seq, record) what
-- `finish` does (a fenced run's record only if it follows its log), one commit for them
-- all. SKIP LOCKED, as in append_group: a runs row that
-- a claim or a renewal is updating now is left out, not waited for; such a run, like a
-- fenced-off one, is not released here and finishes alone, where `finish` judges it. A
-- plain INSERT: any taken seq (a retry, a conflict) aborts the whole statement and each
-- run then finishes alone. Returns each released run (its record inserted) and whether
-- it woke the workers (as `finish` does).
WITH f AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[],
                         $5::double precision[], $6::bigint[], $7::bytea[])
      AS f(run_id, epoch, status, reason, wake_at, seq, record)
), locked AS (
    SELECT runs.run_id FROM runs
    JOIN f ON runs.run_id = f.run_id
     AND (f.epoch IS NULL OR runs.epoch = f.epoch AND (f.seq::bigint = 0
        OR EXISTS (SELECT 1 FROM run_log WHERE run_id = f.run_id AND seq = f.seq - 1)
        OR EXISTS (SELECT 1 FROM run_refs WHERE run_id = f.run_id
                   AND f.seq - 1 BETWEEN from_seq AND to_seq)))
    FOR UPDATE OF runs SKIP LOCKED
), released AS (
    UPDATE runs SET status = f.status, reason = f.reason, owner = NULL, lease_until = NULL,
                    updated_at = extract(epoch FROM clock_timestamp()), wake_at = f.wake_at
    FROM f
    WHERE runs.run_id = f.run_id AND runs.run_id IN (SELECT run_id FROM locked)
    RETURNING runs.run_id, runs.status, runs.reason, runs.wake_at
), final AS (
    INSERT INTO run_log (run_id, seq, record)
    SELECT f.run_id, f.seq, f.record FROM f JOIN released USING (run_id)
)
SELECT r.run_id,
       (SELECT count(pg_notify('tether_work', w.run_id)) FROM (SELECT r.run_id) AS w(run_id)
        WHERE (r.status = 'paused' AND r.reason = 'drain') OR r.status = 'queued'
           OR (r.status = 'waiting' AND r.wake_at IS NOT NULL)) AS notified
FROM released AS r;

-- name: append_final
-- A run's last record, in the transaction that releases it. A taken seq is skipped (DO
-- NOTHING keeps the transaction usable); the caller then judges what the seq holds.
INSERT INTO run_log (run_id, seq, record) VALUES ($1, $2, $3)
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: append_final_fenced
-- The same, only while runs.epoch = $4 (FOR SHARE, as in append_fenced) and only if the
-- record follows the log's last record (as append_one_fenced; skipped otherwise, judged).
INSERT INTO run_log (run_id, seq, record)
SELECT $1, $2, $3 FROM (SELECT 1 FROM runs WHERE run_id = $1 AND epoch = $4 FOR SHARE) AS fence
WHERE ($2::bigint = 0
        OR EXISTS (SELECT 1 FROM run_log WHERE run_id = $1 AND seq = $2 - 1)
        OR EXISTS (SELECT 1 FROM run_refs WHERE run_id = $1
                   AND $2 - 1 BETWEEN from_seq AND to_seq))
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: last_seq
-- The log's last seq: its own rows' and the ranges it references (-1: none). Read only
-- to judge a refused append.
SELECT greatest(coalesce((SELECT max(seq) FROM run_log WHERE run_id = $1), -1),
                coalesce((SELECT max(to_seq) FROM run_refs WHERE run_id = $1), -1));

-- name: adopt_child
-- Take a sub-agent run at a new epoch for owner $2, only while its parent $3 is at epoch
-- $4 (FOR SHARE, as in append_fenced: a claim of the parent waits for this or fences it).
UPDATE runs SET epoch = runs.epoch + 1, owner = $2,
       updated_at = extract(epoch FROM clock_timestamp())
FROM (SELECT 1 FROM runs WHERE run_id = $3 AND epoch = $4 FOR SHARE) AS fence
WHERE runs.run_id = $1
RETURNING runs.epoch;

-- name: notify
-- Wake the workers that LISTEN for work.
SELECT pg_notify('tether_work', '');

-- name: take
-- Claim one named top-level run for owner $2 with a lease of $3 seconds at a new epoch,
-- only while nobody holds a live lease on it (queued, paused for any reason, parked, or running
-- with an expired lease). The row lock orders it with a worker's claim of the same run:
-- one of the two wins, the other finds it leased.
UPDATE runs SET status = 'running', reason = NULL, owner = $2, epoch = runs.epoch + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + $3,
       updated_at = extract(epoch FROM clock_timestamp())
WHERE run_id = $1 AND parent_run_id IS NULL
  AND (status IN ('queued', 'paused', 'waiting')
       OR (status = 'running' AND lease_until < extract(epoch FROM clock_timestamp())))
  AND (lease_until IS NULL OR lease_until < extract(epoch FROM clock_timestamp()))
RETURNING epoch, cancel_requested;

-- name: take_force
-- Take one named unfinished top-level run for owner $2 at a new epoch whoever holds it (a
-- takeover): the new epoch fences the old owner's appends and renewals.
UPDATE runs SET status = 'running', reason = NULL, owner = $2, epoch = runs.epoch + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + $3,
       updated_at = extract(epoch FROM clock_timestamp())
WHERE run_id = $1 AND parent_run_id IS NULL
  AND status IN ('queued', 'paused', 'waiting', 'running')
RETURNING epoch, cancel_requested;

-- name: reopen
-- Take failed top-level run $1 for owner $2 with a lease of $3 seconds at a new epoch, to
-- retry it.
UPDATE runs SET status = 'running', reason = NULL, owner = $2, epoch = runs.epoch + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + $3,
       updated_at = extract(epoch FROM clock_timestamp()), wake_at = NULL
WHERE run_id = $1 AND parent_run_id IS NULL AND status = 'failed' AND NOT cancel_requested
RETURNING epoch, cancel_requested;

-- name: clock
-- The database's clock, which times leases.
SELECT extract(epoch FROM clock_timestamp())::double precision;

-- name: request_cancel
-- Ask for a run to be cancelled, unless it has finished (a finished run keeps its mark of
-- being deleted, `seal`); returns its status then.
UPDATE runs SET cancel_requested = cancel_requested OR (status NOT IN ('succeeded', 'failed', 'cancelled'))
WHERE run_id = $1
RETURNING status;

-- name: next_wake
-- Seconds until the earliest wake-up time of a parked top-level run, by the database's
-- clock (negative when due; NULL if no parked run has one).
SELECT min(wake_at) - extract(epoch FROM clock_timestamp()) FROM runs
WHERE parent_run_id IS NULL AND status = 'waiting';

-- name: expired
-- Top-level runs finished with one of the statuses before a time, oldest first, after a
-- (updated_at, run_id) cursor, optionally of one agent.
SELECT run_id, agent, status, parent_run_id, reason, created_at, updated_at, owner, epoch,
       lease_until
FROM runs
WHERE parent_run_id IS NULL
  AND status IN ('succeeded', 'failed', 'cancelled')
  AND status = ANY($1::text[])
  AND updated_at < $2
  AND ($3::text IS NULL OR agent = $3)
  AND (updated_at, run_id) > ($4, $5)
ORDER BY updated_at, run_id
LIMIT $6;

-- name: families
-- Runs and every run below them (children, theirs), parents first.
WITH RECURSIVE fam(run_id, depth) AS (
    SELECT run_id, 0 FROM runs WHERE run_id = ANY($1::text[])
    UNION ALL
    SELECT runs.run_id, fam.depth + 1 FROM runs JOIN fam ON runs.parent_run_id = fam.run_id
)
SELECT r.run_id, r.agent, r.status, r.parent_run_id, r.reason, r.created_at, r.updated_at,
       r.owner, r.epoch, r.lease_until
FROM fam JOIN runs r ON r.run_id = fam.run_id ORDER BY fam.depth, r.run_id;

-- name: log_size
-- How many log rows, and how many record bytes, the runs have.
SELECT count(*), coalesce(sum(octet_length(record)), 0)::bigint FROM run_log
WHERE run_id = ANY($1::text[]);

-- name: delete_log
-- Delete up to N log rows of finished runs, each run's last seqs first (so a pass cut short
-- leaves each log a prefix); one short transaction, so no lock on run_log is held for
-- long. Each run's rows are found through the primary key backwards and deleted by ctid:
-- no scan of run_log, however large it is.
WITH doomed AS (
    SELECT l.ctid AS tid FROM unnest($1::text[]) AS ids(run_id)
    JOIN runs r ON r.run_id = ids.run_id AND r.status IN ('succeeded', 'failed', 'cancelled')
    CROSS JOIN LATERAL (
        SELECT ctid FROM run_log WHERE run_log.run_id = ids.run_id ORDER BY seq DESC LIMIT $2
    ) AS l
    LIMIT $2
), gone AS (
    DELETE FROM run_log WHERE ctid = ANY(ARRAY(SELECT tid FROM doomed))
    RETURNING octet_length(record) AS size
)
SELECT count(*), coalesce(sum(size), 0)::bigint FROM gone;

-- name: seal
-- Mark the finished runs among the given ones as being deleted (cancel_requested, which
-- means nothing else on a finished run): `reopen` refuses a marked run.
UPDATE runs SET cancel_requested = true
WHERE run_id = ANY($1::text[]) AND status IN ('succeeded', 'failed', 'cancelled')
RETURNING run_id;

-- name: unseal
-- Take that mark off again (a delete that did not go ahead).
UPDATE runs SET cancel_requested = false
WHERE run_id = ANY($1::text[]) AND status IN ('succeeded', 'failed', 'cancelled');

-- name: delete_runs
-- Delete the rows of the finished runs among the given ones, with their references and
-- lineage as forks (forks.sql: whoever referenced them had their rows copied first).
WITH gone AS (
    DELETE FROM runs
    WHERE run_id = ANY($1::text[]) AND status IN ('succeeded', 'failed', 'cancelled')
    RETURNING run_id
), refs AS (
    DELETE FROM run_refs WHERE run_id IN (SELECT run_id FROM gone)
), origins AS (
    DELETE FROM run_forks WHERE run_id IN (SELECT run_id FROM gone)
)
SELECT count(*) FROM gone;

-- name: try_lock
-- Take a session-level advisory lock named by text, without waiting; true if taken.
SELECT pg_try_advisory_lock(hashtext('tether:' || $1));

-- name: unlock
-- Release that lock.
SELECT pg_advisory_unlock(hashtext('tether:' || $1));

-- name: count_by_status
-- How many runs have each status (for the runs gauge).
SELECT status, count(*) FROM runs GROUP BY status;
