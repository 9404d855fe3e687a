-- Concurrency keys, priorities and limits (issue 16). A run's concurrency_key groups it
-- with the others of one tenant or user ('': none). Claims take higher priorities first
-- and, within one, serve the keys in turns. run_limits caps how many runs execute at once:
-- of an agent as a whole (concurrency_key '', each_key false), of one of its keys, or of
-- each of its keys (concurrency_key '', each_key true). A key's own row wins over each_key.
ALTER TABLE runs ADD COLUMN concurrency_key text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN priority integer NOT NULL DEFAULT 0;

-- Whether any queued run asks for the ordered claim (a probe of an index that is empty
-- while no run has a key or a priority).
CREATE INDEX runs_flow_idx ON runs (priority)
    WHERE parent_run_id IS NULL AND status = 'queued' AND (concurrency_key <> '' OR priority <> 0);

-- Slots: the live running runs of an agent, by key.
CREATE INDEX runs_held_idx ON runs (agent, concurrency_key)
    WHERE parent_run_id IS NULL AND status = 'running';

CREATE TABLE run_limits (
    agent text NOT NULL,
    concurrency_key text NOT NULL,
    each_key boolean NOT NULL,
    max_running integer NOT NULL CHECK (max_running > 0),
    PRIMARY KEY (agent, concurrency_key, each_key)
);
