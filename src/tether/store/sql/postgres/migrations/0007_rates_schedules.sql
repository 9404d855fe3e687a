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
