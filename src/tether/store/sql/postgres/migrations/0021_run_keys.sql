-- Per-run data keys (crypto-shredding): the key of each run that has one, sealed under
-- the key ring. A shredded run keeps only when it was shredded (tether/store/keys.py).
CREATE TABLE run_keys (
    run_id text PRIMARY KEY,
    wrapped bytea,
    created_at double precision NOT NULL,
    shredded_at double precision
);
