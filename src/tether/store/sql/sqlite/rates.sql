-- Shared model rate limits (see tether/store/rates.py for the rule); :now is the caller's
-- clock, and a take runs in one write transaction.

-- name: rate_set
INSERT INTO model_rates (rate_key, requests, tokens, per_s)
VALUES (:key, :requests, :tokens, :per)
ON CONFLICT (rate_key) DO UPDATE
SET requests = excluded.requests, tokens = excluded.tokens, per_s = excluded.per_s,
    requests_at = 0, tokens_at = 0;

-- name: rate_set_default
INSERT INTO model_rates (rate_key, requests, tokens, per_s)
VALUES (:key, :requests, :tokens, :per)
ON CONFLICT (rate_key) DO UPDATE
SET requests = excluded.requests, tokens = excluded.tokens, per_s = excluded.per_s
WHERE model_rates.requests IS NULL AND model_rates.tokens IS NULL;

-- name: rate_remove
DELETE FROM model_rates WHERE rate_key = ?;

-- name: rate_list
SELECT rate_key, requests, tokens, per_s, requests_at, tokens_at, blocked_until
FROM model_rates ORDER BY rate_key;

-- name: rate_take
-- Start a call of :tokens if both meters and any 429 block are due.
UPDATE model_rates SET
    requests_at = CASE WHEN requests IS NULL THEN requests_at ELSE :now + per_s / requests END,
    tokens_at = CASE WHEN tokens IS NULL THEN tokens_at ELSE :now + :tokens * per_s / tokens END
WHERE rate_key = :key AND max(requests_at, tokens_at, blocked_until) <= :now
RETURNING 1;

-- name: rate_wait
-- Not taken: how long until the key's meters are due (no row: not limited).
SELECT max(requests_at, tokens_at, blocked_until) - :now FROM model_rates
WHERE rate_key = :key
  AND (requests IS NOT NULL OR tokens IS NOT NULL OR blocked_until > :now);

-- name: rate_settle
UPDATE model_rates SET tokens_at = tokens_at + :tokens * per_s / tokens
WHERE rate_key = :key AND tokens IS NOT NULL;

-- name: rate_block
INSERT INTO model_rates (rate_key, blocked_until) VALUES (:key, :until)
ON CONFLICT (rate_key) DO UPDATE
SET blocked_until = max(model_rates.blocked_until, excluded.blocked_until);
