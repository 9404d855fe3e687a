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
