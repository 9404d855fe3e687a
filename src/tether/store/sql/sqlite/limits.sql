-- Concurrency limits (see tether/store/limits.py for the rule the claim enforces).

-- name: limit_set
-- Store a limit, replacing the one of its scope.
INSERT INTO run_limits (agent, concurrency_key, each_key, max_running)
VALUES (:agent, :key, :each, :n)
ON CONFLICT (agent, concurrency_key, each_key) DO UPDATE SET max_running = excluded.max_running;

-- name: limit_set_default
-- Store a limit given in code unless its scope has one.
INSERT INTO run_limits (agent, concurrency_key, each_key, max_running)
VALUES (:agent, :key, :each, :n)
ON CONFLICT (agent, concurrency_key, each_key) DO NOTHING;

-- name: limit_remove
DELETE FROM run_limits WHERE agent = :agent AND concurrency_key = :key AND each_key = :each;

-- name: limit_list
SELECT agent, concurrency_key, each_key, max_running FROM run_limits
ORDER BY agent, each_key, concurrency_key;

-- name: limit_held
-- The live slots of an agent by key: its top-level runs running under a live lease.
SELECT concurrency_key, count(*) FROM runs
WHERE parent_run_id IS NULL AND status = 'running' AND agent = :agent AND lease_until >= :now
GROUP BY concurrency_key;

-- name: claim_mode
-- Whether the claim must follow limits.py's order: a limit exists, or a queued run has a
-- key or a priority (an empty partial index's probe while none has).
SELECT EXISTS (SELECT 1 FROM run_limits)
    OR EXISTS (SELECT 1 FROM runs WHERE parent_run_id IS NULL AND status = 'queued'
               AND (concurrency_key <> '' OR priority <> 0));

-- name: claim_flow
-- The claim of queries.sql/claim in the order and within the limits of limits.py: every
-- runnable run gets its turn within its (priority, key), after as many turns as its key
-- holds live slots, and its rank n within its (agent, key); it may start while n plus
-- its key's live slots is within the key's limit, then likewise (ranked among those) for
-- its agent's. The first :limit in (priority, turn) order are picked (claim_picked then
-- takes them in the same transaction, which holds the file's write lock: claims never
-- overlap).
WITH cand AS (
    SELECT run_id, agent, concurrency_key AS ckey, priority, created_at FROM runs
    WHERE parent_run_id IS NULL
      AND (status = 'queued'
           OR (status = 'paused' AND reason = 'drain'
               AND (lease_until IS NULL OR lease_until < :now))
           OR (status = 'running' AND lease_until < :now)
           OR (status = 'waiting' AND wake_at <= :now))
      AND run_id NOT IN (SELECT value FROM json_each(:skip))
      AND (:pinned = 0 OR run_id IN (SELECT value FROM json_each(:also))
           OR EXISTS (SELECT 1 FROM json_each(:serves) AS s
                      WHERE s.value ->> 0 = runs.agent
                        AND (runs.agent_version IS NULL
                             OR runs.agent_version = s.value ->> 1)))
), held AS (
    SELECT agent, concurrency_key AS ckey, count(*) AS n FROM runs
    WHERE parent_run_id IS NULL AND status = 'running' AND lease_until >= :now
    GROUP BY agent, concurrency_key
), served AS (
    SELECT ckey, sum(n) AS n FROM held GROUP BY ckey
), agent_held AS (
    SELECT agent, sum(n) AS n FROM held GROUP BY agent
), served_at AS (
    -- When each key was last served (its latest run taken or finished, through
    -- runs_served_idx): within a turn the key served longest ago goes first.
    SELECT k.ckey, (SELECT max(r.updated_at) FROM runs r
                    WHERE r.parent_run_id IS NULL AND r.status <> 'queued'
                      AND r.concurrency_key = k.ckey) AS at
    FROM (SELECT DISTINCT ckey FROM cand) AS k
), limits AS (
    -- Which ranks the claim compares, so that only those are made (each a sort of every
    -- candidate): a run's slot within its key while a key has a limit, its slot within its
    -- agent while an agent has a limit over all its keys.
    SELECT EXISTS (SELECT 1 FROM run_limits WHERE concurrency_key <> '' OR each_key)
             AS keyed,
           EXISTS (SELECT 1 FROM run_limits WHERE concurrency_key = '' AND NOT each_key)
             AS agent_wide
), capped AS (
    SELECT c.*, coalesce(own.max_running, each.max_running) AS key_cap, sa.at AS served_at,
           coalesce(s.n, 0) AS served_n, coalesce(h.n, 0) AS held_n
    FROM cand c
    LEFT JOIN served_at sa ON sa.ckey = c.ckey
    LEFT JOIN held h ON h.agent = c.agent AND h.ckey = c.ckey
    LEFT JOIN served s ON s.ckey = c.ckey
    LEFT JOIN run_limits own ON c.ckey <> '' AND own.agent = c.agent
         AND own.concurrency_key = c.ckey AND NOT own.each_key
    LEFT JOIN run_limits each ON c.ckey <> '' AND each.agent = c.agent
         AND each.concurrency_key = '' AND each.each_key
), ranked AS (
    SELECT c.*,
           row_number() OVER (PARTITION BY c.priority, c.ckey
                              ORDER BY c.created_at, c.run_id)
             + c.served_n AS turn,
           NULL AS key_slot
    FROM capped c
    WHERE NOT (SELECT keyed FROM limits)
    UNION ALL
    SELECT c.*,
           row_number() OVER (PARTITION BY c.priority, c.ckey
                              ORDER BY c.created_at, c.run_id)
             + c.served_n AS turn,
           row_number() OVER (PARTITION BY c.agent, c.ckey
                              ORDER BY c.priority DESC, c.created_at, c.run_id)
             + c.held_n AS key_slot
    FROM capped c
    WHERE (SELECT keyed FROM limits)
), key_ok AS (
    SELECT r.*, NULL AS agent_slot, NULL AS agent_cap FROM ranked r
    WHERE (r.key_cap IS NULL OR r.key_slot <= r.key_cap)
      AND NOT (SELECT agent_wide FROM limits)
    UNION ALL
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
    WHERE (r.key_cap IS NULL OR r.key_slot <= r.key_cap)
      AND (SELECT agent_wide FROM limits)
)
SELECT run_id FROM key_ok
WHERE agent_cap IS NULL OR agent_slot <= agent_cap
ORDER BY priority DESC, turn, served_at NULLS FIRST, created_at, run_id
LIMIT :limit;

-- name: claim_picked
-- Claim the runs claim_flow picked (a JSON array), as claim does.
UPDATE runs SET status = 'running', reason = NULL, owner = :owner, epoch = epoch + 1,
       lease_until = :now + :ttl, updated_at = :now
WHERE run_id IN (SELECT value FROM json_each(:ids))
RETURNING run_id, epoch, cancel_requested;
