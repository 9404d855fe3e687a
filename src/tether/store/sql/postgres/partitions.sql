-- name: log_partitions
-- How run_log is partitioned now: the hash modulus of its partitions (0: a plain table).
SELECT coalesce(max(substring(pg_get_expr(c.relpartbound, c.oid) from 'modulus (\d+)')::int), 0)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'run_log'::regclass;

-- name: lock_log
-- Nobody appends or reads while the log moves (appends wait, then go to the new table).
LOCK TABLE run_log IN ACCESS EXCLUSIVE MODE;

-- name: create_partitioned
-- The new log, hash-partitioned by run_id: every query of run_log filters on run_id, so
-- each touches one partition.
CREATE TABLE run_log_next (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
) PARTITION BY HASH (run_id);

-- name: create_plain
-- The new log as one plain table (partitions 1 undoes a partitioning).
CREATE TABLE run_log_next (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- name: copy_rows
-- Every record, as it is.
INSERT INTO run_log_next (run_id, seq, record) SELECT run_id, seq, record FROM run_log;

-- name: swap
-- The new log takes the old one's name; the old one (and its partitions) goes.
DROP TABLE run_log;
ALTER TABLE run_log_next RENAME TO run_log;
ALTER INDEX run_log_next_pkey RENAME TO run_log_pkey;
