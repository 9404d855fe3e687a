-- The whole current schema; a test checks it equals applying every migration in order.

-- The log is keyed by (run_id, seq) only, so it can later be partitioned by run_id.
CREATE TABLE run_log (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Times are float seconds since the epoch, as RunInfo carries them.
CREATE TABLE runs (
    run_id text PRIMARY KEY,
    agent text NOT NULL,
    status text NOT NULL,
    parent_run_id text,
    reason text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    owner text,
    epoch bigint NOT NULL DEFAULT 0,
    lease_until double precision,
    cancel_requested boolean NOT NULL DEFAULT false,
    wake_at double precision,
    agent_version text,
    concurrency_key text NOT NULL DEFAULT '',
    priority integer NOT NULL DEFAULT 0
);

CREATE INDEX runs_status_idx ON runs (status, created_at);

-- Claiming: queued and drained top-level runs oldest first, orphaned ones by their lease
-- (see migrations/0013_claim_kinds.sql): the runs running under live leases are in neither.
CREATE INDEX runs_fresh_idx ON runs (created_at)
    WHERE parent_run_id IS NULL AND (status = 'queued' OR (status = 'paused' AND reason = 'drain'));
-- The running ones also count the live slots of each agent and key, by their lease (the
-- only index of running runs: see migrations/0014_one_running_index.sql).
CREATE INDEX runs_lease_idx ON runs (status, lease_until) INCLUDE (agent, concurrency_key)
    WHERE parent_run_id IS NULL AND status = 'running';

-- Waking parked runs: due deadlines first (keyed on status too: see 0013_claim_kinds.sql).
CREATE INDEX runs_wake_idx ON runs (status, wake_at)
    WHERE parent_run_id IS NULL AND status = 'waiting';

-- Retention: children by their parent, expired runs by when they finished.
CREATE INDEX runs_parent_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_finished_idx ON runs (updated_at, run_id)
    WHERE parent_run_id IS NULL AND status IN ('succeeded', 'failed', 'cancelled');

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

-- Workers advertise the agent versions they serve with their heartbeat.
CREATE TABLE workers (
    owner text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at double precision NOT NULL,
    beat_at double precision NOT NULL,
    ttl double precision NOT NULL,
    versions jsonb NOT NULL,
    runs_held integer NOT NULL DEFAULT 0
);

-- Shared model rate limits: one row per model (or API key) that every worker takes from.
-- requests / tokens are allowed per per_s seconds (NULL: not limited), requests_at and
-- tokens_at are when the next call may start by each meter, blocked_until is how long a
-- provider's 429 holds every call back. Times are float seconds since the epoch.
CREATE TABLE model_rates (
    rate_key text PRIMARY KEY,
    requests double precision,
    tokens double precision,
    per_s double precision NOT NULL DEFAULT 60,
    requests_at double precision NOT NULL DEFAULT 0,
    tokens_at double precision NOT NULL DEFAULT 0,
    blocked_until double precision NOT NULL DEFAULT 0
);

-- Schedules: recurring runs. input is JSON, fired_through is how far fire times were
-- handled, next_at the first fire time after it (what workers look for).
CREATE TABLE schedules (
    name text PRIMARY KEY,
    cron text NOT NULL,
    agent text NOT NULL,
    input text NOT NULL,
    timezone text NOT NULL,
    catch_up text NOT NULL,
    created_at double precision NOT NULL,
    fired_through double precision NOT NULL,
    next_at double precision NOT NULL
);

CREATE INDEX schedules_next_idx ON schedules (next_at);

-- Concurrency keys, priorities and limits (see migrations/0010_flow.sql).
-- Whether any queued run asks for the ordered claim (a probe of an index that is empty
-- while no run has a key or a priority).
CREATE INDEX runs_flow_idx ON runs (priority)
    WHERE parent_run_id IS NULL AND status = 'queued' AND (concurrency_key <> '' OR priority <> 0);

CREATE TABLE run_limits (
    agent text NOT NULL,
    concurrency_key text NOT NULL,
    each_key boolean NOT NULL,
    max_running integer NOT NULL CHECK (max_running > 0),
    PRIMARY KEY (agent, concurrency_key, each_key)
);

-- Fair turns: when each concurrency key was last served (see migrations/0011_served.sql).
CREATE INDEX runs_served_idx ON runs (concurrency_key, updated_at)
    WHERE parent_run_id IS NULL AND status <> 'queued';

-- The ordered claim's queue: each (agent, key)'s first queued runs in claim order (see
-- migrations/0012_flow_queue.sql).
CREATE INDEX runs_queue_idx ON runs (agent, concurrency_key, priority DESC, created_at,
                                     run_id COLLATE "C")
    WHERE parent_run_id IS NULL AND status = 'queued';

-- Per-run data keys (crypto-shredding): the key of each run that has one, sealed under
-- the key ring. A shredded run keeps only when it was shredded (tether/store/keys.py).
CREATE TABLE run_keys (
    run_id text PRIMARY KEY,
    wrapped bytea,
    created_at double precision NOT NULL,
    shredded_at double precision
);
