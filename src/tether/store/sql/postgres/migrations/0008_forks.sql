-- Forks: a fork's log references its source's records instead of copying them.
-- run_forks: where a fork came from (its source and the seq it was forked at), kept for
-- lineage even after the source is deleted.
CREATE TABLE run_forks (
    run_id text PRIMARY KEY,
    source_run_id text NOT NULL,
    source_seq bigint NOT NULL
);

-- run_refs: the seqs from_seq..to_seq of run_id are the rows of source_run_id at those
-- seqs (the run that holds them, never a fork that references them in turn). A run's own
-- rows and its ranges never overlap.
CREATE TABLE run_refs (
    run_id text NOT NULL,
    from_seq bigint NOT NULL,
    to_seq bigint NOT NULL,
    source_run_id text NOT NULL,
    PRIMARY KEY (run_id, from_seq)
);

-- Deleting a run finds the forks that reference it (to copy what they reference first).
CREATE INDEX run_refs_source_idx ON run_refs (source_run_id);
