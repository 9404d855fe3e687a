-- Shared model rate limits (see tether/store/rates.py for the rule).

-- name: rate_set
-- Store a limit; its meters start afresh (a 429's block stays).
INSERT INTO model_rates (rate_key, requests, tokens, per_s)
VALUES ($1, $2, $3, $4)
ON CONFLICT (rate_key) DO UPDATE
SET requests = excluded.requests, tokens = excluded.tokens, per_s = excluded.per_s,
    requests_at = 0, tokens_at = 0;

-- name: rate_set_default
-- Store a limit given in code unless the key has one (a 429-only row takes it).
INSERT INTO model_rates (rate_key, requests, tokens, per_s)
VALUES ($1, $2, $3, $4)
ON CONFLICT (rate_key) DO UPDATE
SET requests = excluded.requests, tokens = excluded.tokens, per_s = excluded.per_s
WHERE model_rates.requests IS NULL AND model_rates.tokens IS NULL;

-- name: rate_remove
DELETE FROM model_rates WHERE rate_key = $1;

-- name: rate_list
SELECT rate_key, requests, tokens, per_s, requests_at, tokens_at, blocked_until
FROM model_rates ORDER BY rate_key;

-- name: rate_take
-- One statement: start a call of $2 tokens if both meters and any 429 block are due (the
-- UPDATE re-checks the row it locked, so concurrent takers never both pass), else say how
-- long to wait. No row: the key is not limited.
WITH taken AS (
    UPDATE model_rates SET
        requests_at = CASE WHEN requests IS NULL THEN requests_at
            ELSE extract(epoch FROM clock_timestamp()) + per_s / requests END,
        tokens_at = CASE WHEN tokens IS NULL THEN tokens_at
            ELSE extract(epoch FROM clock_timestamp()) + $2 * per_s / tokens END
    WHERE rate_key = $1
      AND GREATEST(requests_at, tokens_at, blocked_until) <= extract(epoch FROM clock_timestamp())
    RETURNING true AS granted, 0.0::double precision AS wait
)
SELECT granted, wait FROM taken
UNION ALL
SELECT false, GREATEST(requests_at, tokens_at, blocked_until) - extract(epoch FROM clock_timestamp())
FROM model_rates
WHERE rate_key = $1 AND NOT EXISTS (SELECT 1 FROM taken)
  AND (requests IS NOT NULL OR tokens IS NOT NULL
       OR blocked_until > extract(epoch FROM clock_timestamp()));

-- name: rate_settle
-- Correct the token meter by actual minus estimated tokens.
UPDATE model_rates SET tokens_at = tokens_at + $2 * per_s / tokens
WHERE rate_key = $1 AND tokens IS NOT NULL;

-- name: rate_block
-- A provider's 429: hold every worker's calls on the key back until then.
INSERT INTO model_rates (rate_key, blocked_until)
VALUES ($1, extract(epoch FROM clock_timestamp()) + $2)
ON CONFLICT (rate_key) DO UPDATE
SET blocked_until = GREATEST(model_rates.blocked_until, excluded.blocked_until);
