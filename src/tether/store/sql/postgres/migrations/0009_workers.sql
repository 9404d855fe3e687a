-- Deploys: the version of its agent's code a run is on (NULL: a run older than versions,
-- claimable by any worker of its agent), and the workers that advertise which versions
-- they serve with their heartbeat. A worker's row is live while beat_at + ttl is ahead of
-- the database's clock; rows long dead are deleted by the next worker's heartbeat.
ALTER TABLE runs ADD COLUMN agent_version text;

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
