CREATE TABLE run_log (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- cancel_requested, wake_at and agent_version are written where ALTER TABLE ADD COLUMN
-- (0003, 0004, 0009) puts them: SQLite keeps the table's text, and the schema test
-- compares it with the migrated one.
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    status TEXT NOT NULL,
    parent_run_id TEXT,
    reason TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    owner TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    lease_until REAL
, cancel_requested INTEGER NOT NULL DEFAULT 0, wake_at REAL, agent_version TEXT, concurrency_key TEXT NOT NULL DEFAULT '', priority INTEGER NOT NULL DEFAULT 0);

CREATE INDEX runs_status_idx ON runs (status, created_at);

-- Claiming (see migrations/0013_claim_kinds.sql): each kind of runnable run in its order.
CREATE INDEX runs_drained_idx ON runs (status, reason, created_at)
    WHERE parent_run_id IS NULL AND status = 'paused';

CREATE INDEX runs_lease_idx ON runs (status, lease_until)
    WHERE parent_run_id IS NULL AND status = 'running';

CREATE INDEX runs_wake_idx ON runs (status, wake_at)
    WHERE parent_run_id IS NULL AND status = 'waiting';

CREATE INDEX runs_parent_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE INDEX runs_finished_idx ON runs (updated_at, run_id)
    WHERE parent_run_id IS NULL AND status IN ('succeeded', 'failed', 'cancelled');

-- run_forks: where a fork came from (its source and the seq it was forked at), kept for
-- lineage even after the source is deleted.
CREATE TABLE run_forks (
    run_id TEXT PRIMARY KEY,
    source_run_id TEXT NOT NULL,
    source_seq INTEGER NOT NULL
);

-- run_refs: the seqs from_seq..to_seq of run_id are the rows of source_run_id at those
-- seqs (the run that holds them, never a fork that references them in turn). A run's own
-- rows and its ranges never overlap.
CREATE TABLE run_refs (
    run_id TEXT NOT NULL,
    from_seq INTEGER NOT NULL,
    to_seq INTEGER NOT NULL,
    source_run_id TEXT NOT NULL,
    PRIMARY KEY (run_id, from_seq)
);

-- Deleting a run finds the forks that reference it (to copy what they reference first).
CREATE INDEX run_refs_source_idx ON run_refs (source_run_id);

CREATE TABLE workers (
    owner TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at REAL NOT NULL,
    beat_at REAL NOT NULL,
    ttl REAL NOT NULL,
    versions TEXT NOT NULL,
    runs_held INTEGER NOT NULL DEFAULT 0
);

-- Shared model rate limits: one row per model (or API key) that every worker takes from.
-- requests / tokens are allowed per per_s seconds (NULL: not limited), requests_at and
-- tokens_at are when the next call may start by each meter, blocked_until is how long a
-- provider's 429 holds every call back. Times are float seconds since the epoch.
CREATE TABLE model_rates (
    rate_key TEXT PRIMARY KEY,
    requests REAL,
    tokens REAL,
    per_s REAL NOT NULL DEFAULT 60,
    requests_at REAL NOT NULL DEFAULT 0,
    tokens_at REAL NOT NULL DEFAULT 0,
    blocked_until REAL NOT NULL DEFAULT 0
);

-- Schedules: recurring runs. input is JSON, fired_through is how far fire times were
-- handled, next_at the first fire time after it (what workers look for).
CREATE TABLE schedules (
    name TEXT PRIMARY KEY,
    cron TEXT NOT NULL,
    agent TEXT NOT NULL,
    input TEXT NOT NULL,
    timezone TEXT NOT NULL,
    catch_up TEXT NOT NULL,
    created_at REAL NOT NULL,
    fired_through REAL NOT NULL,
    next_at REAL NOT NULL
);

CREATE INDEX schedules_next_idx ON schedules (next_at);

-- Concurrency keys, priorities and limits (see migrations/0010_flow.sql).
-- Whether any queued run asks for the ordered claim (a probe of an index that is empty
-- while no run has a key or a priority).
CREATE INDEX runs_flow_idx ON runs (priority)
    WHERE parent_run_id IS NULL AND status = 'queued' AND (concurrency_key <> '' OR priority <> 0);
-- The ordered claim ranks only the first few queued runs of each (agent, key): this index
-- finds the pairs and each pair's first runs in claim order (migrations/0015_flow_queue.sql).
CREATE INDEX runs_queue_idx ON runs (agent, concurrency_key, priority DESC, created_at,
                                     run_id)
    WHERE parent_run_id IS NULL AND status = 'queued';

-- Slots: the live running runs of an agent, by key.
CREATE INDEX runs_held_idx ON runs (agent, concurrency_key)
    WHERE parent_run_id IS NULL AND status = 'running';

CREATE TABLE run_limits (
    agent TEXT NOT NULL,
    concurrency_key TEXT NOT NULL,
    each_key INTEGER NOT NULL,
    max_running INTEGER NOT NULL CHECK (max_running > 0),
    PRIMARY KEY (agent, concurrency_key, each_key)
);

-- Fair turns: when each concurrency key was last served (see migrations/0011_served.sql).
CREATE INDEX runs_served_idx ON runs (concurrency_key, updated_at)
    WHERE parent_run_id IS NULL AND status <> 'queued';

-- Per-run data keys (crypto-shredding): the key of each run that has one, sealed under
-- the key ring. A shredded run keeps only when it was shredded (tether/store/keys.py).
CREATE TABLE run_keys (
    run_id TEXT PRIMARY KEY,
    wrapped BLOB,
    created_at REAL NOT NULL,
    shredded_at REAL
);
