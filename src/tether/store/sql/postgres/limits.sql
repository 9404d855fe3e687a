-- Concurrency limits (see tether/store/limits.py for the rule the claim enforces).

-- name: limit_set
-- Store a limit, replacing the one of its scope; wake the workers (a raised limit frees
-- waiting runs).
WITH stored AS (
    INSERT INTO run_limits (agent, concurrency_key, each_key, max_running)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (agent, concurrency_key, each_key) DO UPDATE
    SET max_running = excluded.max_running
    RETURNING 1
)
SELECT count(*), count(pg_notify('tether_work', '')) FROM stored;

-- name: limit_set_default
-- Store a limit given in code unless its scope has one.
INSERT INTO run_limits (agent, concurrency_key, each_key, max_running)
VALUES ($1, $2, $3, $4)
ON CONFLICT (agent, concurrency_key, each_key) DO NOTHING;

-- name: limit_remove
-- Lift a limit and wake the workers: the runs that waited for it are claimable at once.
WITH gone AS (
    DELETE FROM run_limits WHERE agent = $1 AND concurrency_key = $2 AND each_key = $3
    RETURNING 1
)
SELECT count(*), count(pg_notify('tether_work', '')) FROM gone;

-- name: limit_list
SELECT agent, concurrency_key, each_key, max_running FROM run_limits
ORDER BY agent, each_key, concurrency_key;

-- name: limit_held
-- The live slots of an agent by key: its top-level runs running under a live lease.
SELECT concurrency_key, count(*)::int FROM runs
WHERE parent_run_id IS NULL AND status = 'running' AND agent = $1
  AND lease_until >= extract(epoch FROM clock_timestamp())
GROUP BY concurrency_key;

-- name: claim_lock
-- While limits exist, claims take turns (until their transaction ends), so that each
-- counts the slots the one before it took. Key: "tether:claim".
SELECT pg_advisory_xact_lock(hashtext('tether:claim'));

-- name: claim_flow
-- The claim of queries.sql/claim in the order and within the limits of limits.py: every
-- runnable run (as claim finds them, with its skip and pinning) gets its turn within its
-- (priority, key), after as many turns as its key holds live slots, and its rank n
-- within its (agent, key); it may start while n plus its key's live slots is within the
-- key's limit, then likewise (ranked among those) for its agent's. The first $2 in
-- (priority, turn) order are taken; SKIP LOCKED passes over rows a `take` or a claim
-- without the lock holds.
WITH cand AS (
    -- "C": ranking sorts these texts, byte order is as good an order and many times faster.
    SELECT run_id COLLATE "C" AS run_id, agent COLLATE "C" AS agent,
           concurrency_key COLLATE "C" AS ckey, priority, created_at FROM runs
    WHERE parent_run_id IS NULL
      AND (status = 'queued'
           OR (status = 'paused' AND reason = 'drain'
               AND (lease_until IS NULL OR lease_until < extract(epoch FROM clock_timestamp())))
           OR (status = 'running' AND lease_until < extract(epoch FROM clock_timestamp()))
           OR (status = 'waiting' AND wake_at <= extract(epoch FROM clock_timestamp())))
      AND run_id <> ALL($4::text[])
      AND ($5::text[] IS NULL OR run_id = ANY($7::text[])
           OR EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[]) AS s(agent, version)
                      WHERE s.agent = runs.agent
                        AND (runs.agent_version IS NULL OR runs.agent_version = s.version)))
), held AS (
    SELECT agent COLLATE "C" AS agent, concurrency_key COLLATE "C" AS ckey, count(*) AS n
    FROM runs
    WHERE parent_run_id IS NULL AND status = 'running'
      AND lease_until >= extract(epoch FROM clock_timestamp())
    GROUP BY agent, concurrency_key
), served AS (
    SELECT ckey, sum(n) AS n FROM held GROUP BY ckey
), agent_held AS (
    SELECT agent, sum(n) AS n FROM held GROUP BY agent
), served_at AS (
    -- When each key was last served (its latest run taken or finished, through
    -- runs_served_idx): within a turn the key served longest ago goes first, so keys
    -- alternate even one slot at a time.
    SELECT k.ckey, (SELECT max(r.updated_at) FROM runs r
                    WHERE r.parent_run_id IS NULL AND r.status <> 'queued'
                      AND r.concurrency_key = k.ckey COLLATE "default") AS at
    FROM (SELECT DISTINCT ckey FROM cand) AS k
), ranked AS (
    SELECT c.*,
           row_number() OVER (PARTITION BY c.priority, c.ckey
                              ORDER BY c.created_at, c.run_id)
             + coalesce(s.n, 0) AS turn,
           row_number() OVER (PARTITION BY c.agent, c.ckey
                              ORDER BY c.priority DESC, c.created_at, c.run_id)
             + coalesce(h.n, 0) AS key_slot,
           coalesce(own.max_running, each.max_running) AS key_cap, sa.at AS served_at
    FROM cand c
    LEFT JOIN served_at sa ON sa.ckey = c.ckey
    LEFT JOIN held h ON h.agent = c.agent AND h.ckey = c.ckey
    LEFT JOIN served s ON s.ckey = c.ckey
    LEFT JOIN run_limits own ON c.ckey <> '' AND own.agent = c.agent
         AND own.concurrency_key = c.ckey AND NOT own.each_key
    LEFT JOIN run_limits each ON c.ckey <> '' AND each.agent = c.agent
         AND each.concurrency_key = '' AND each.each_key
), key_ok AS (
    SELECT r.*,
           row_number() OVER (PARTITION BY r.agent
                              ORDER BY r.priority DESC, r.turn, r.served_at NULLS FIRST,
                                       r.created_at, r.run_id)
             + coalesce(a.n, 0) AS agent_slot,
           whole.max_running AS agent_cap
    FROM ranked r
    LEFT JOIN agent_held a ON a.agent = r.agent
    LEFT JOIN run_limits whole ON whole.agent = r.agent
         AND whole.concurrency_key = '' AND NOT whole.each_key
    WHERE r.key_cap IS NULL OR r.key_slot <= r.key_cap
), first AS (
    -- The first few in order: the rows locked below (SKIP LOCKED passes over some).
    SELECT run_id, priority, turn, served_at, created_at FROM key_ok
    WHERE agent_cap IS NULL OR agent_slot <= agent_cap
    ORDER BY priority DESC, turn, served_at NULLS FIRST, created_at, run_id
    LIMIT $2 + 32
), picked AS (
    SELECT runs.run_id, k.priority, k.turn, k.served_at, k.created_at FROM runs
    JOIN first k ON k.run_id = runs.run_id
    WHERE runs.parent_run_id IS NULL
      AND (runs.status = 'queued'
           OR (runs.status = 'paused' AND runs.reason = 'drain'
               AND (runs.lease_until IS NULL
                    OR runs.lease_until < extract(epoch FROM clock_timestamp())))
           OR (runs.status = 'running'
               AND runs.lease_until < extract(epoch FROM clock_timestamp()))
           OR (runs.status = 'waiting'
               AND runs.wake_at <= extract(epoch FROM clock_timestamp())))
    ORDER BY k.priority DESC, k.turn, k.served_at NULLS FIRST, k.created_at, k.run_id
    LIMIT $2
    FOR UPDATE OF runs SKIP LOCKED
), claimed AS (
    UPDATE runs SET status = 'running', reason = NULL, owner = $1, epoch = runs.epoch + 1,
           lease_until = extract(epoch FROM clock_timestamp()) + $3,
           updated_at = extract(epoch FROM clock_timestamp())
    FROM picked WHERE runs.run_id = picked.run_id
    RETURNING runs.run_id, runs.epoch, runs.cancel_requested,
              picked.priority, picked.turn, picked.served_at, picked.created_at
)
SELECT run_id, epoch, cancel_requested FROM claimed
ORDER BY priority DESC, turn, served_at NULLS FIRST, created_at, run_id;
