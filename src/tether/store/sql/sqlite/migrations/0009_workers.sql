-- Deploys: the version of its agent's code a run is on (NULL: a run older than versions,
-- claimable by any worker of its agent), and the workers that advertise which versions
-- they serve with their heartbeat (live while beat_at + ttl is ahead of now).
ALTER TABLE runs ADD COLUMN agent_version TEXT;

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
