-- Per-run data keys (crypto-shredding): the key of each run that has one, sealed under
-- the key ring. A shredded run keeps only when it was shredded (tether/store/keys.py).
CREATE TABLE run_keys (
    run_id TEXT PRIMARY KEY,
    wrapped BLOB,
    created_at REAL NOT NULL,
    shredded_at REAL
);
