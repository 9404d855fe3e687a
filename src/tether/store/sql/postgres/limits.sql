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

-- name: claim_generic
-- For the rest of the claim's transaction, a prepared statement runs its generic plan:
-- claim_flow is then planned once per connection. Planned for every claim, it spent
-- 1.7-2.0 ms of a 5-8 ms claim planning. One connection claiming with its generic plan
-- took 0.70x-1.02x the time with custom plans in the seven cases measured (5,000 queued;
-- 10 to 200 keys, one or two agents, pinning or not, 0 to 100,000 finished runs, a limit
-- or none).
-- PostgreSQL keeps custom plans for it by itself: its generic plan is costed higher.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: claim_lock
-- While limits exist, claims take turns (until their transaction ends), so that each
-- counts the slots the one before it took. Key: "tether:claim". And claim_generic's
-- setting, in the same round trip.
SELECT pg_advisory_xact_lock(hashtext('tether:claim')),
       set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: claim_flow
-- The claim of queries.sql/claim in the order and within the limits of limits.py: every
-- runnable run (as claim finds them, with its skip and pinning) gets its turn within its
-- (priority, key), after as many turns as its key holds live slots, and its rank n
-- within its (agent, key); it may start while n plus its key's live slots is within the
-- key's limit, then likewise (ranked among those) for its agent's. The first $2 in
-- (priority, turn) order are taken; SKIP LOCKED passes over rows a `take` or a claim
-- without the lock holds.
--
-- Only the first $2 + $8 runnable runs of each (agent, key) (in (priority desc, age)
-- order, through runs_queue_idx) are ranked, so a claim costs (agent, key) pairs times
-- that, not the queue's length: a run further back in its (agent, key) is never among the
-- first $2 + $8 taken, since the ones before it in its (agent, key) come before it in
-- every order the rule uses and are admitted whenever it is. What they change is the
-- turn of another agent's run of the same key (turns are counted per key over all
-- agents), so while a key of several agents has more runnable runs in one of them, every
-- runnable run is ranked as before (`whole`). $8 is the margin for rows SKIP LOCKED
-- passes over (postgres_leases.py: small while claims take turns under claim_lock, where
-- only a `take` of one run locks a queued row; larger while claims run side by side).
WITH RECURSIVE pairs AS (
    -- The (agent, key) pairs with queued runs: one index probe each.
    (SELECT agent, concurrency_key FROM runs
     WHERE parent_run_id IS NULL AND status = 'queued'
     ORDER BY agent, concurrency_key LIMIT 1)
    UNION ALL
    SELECT n.agent, n.concurrency_key FROM pairs p CROSS JOIN LATERAL (
        SELECT agent, concurrency_key FROM runs
        WHERE parent_run_id IS NULL AND status = 'queued'
          AND (agent, concurrency_key) > (p.agent, p.concurrency_key)
        ORDER BY agent, concurrency_key LIMIT 1) AS n
), mine AS NOT MATERIALIZED (
    -- The top-level runs this worker may take (its skip, its pinning), whatever their
    -- status: inlined in each reader, which adds its own.
    SELECT run_id, agent, concurrency_key, priority, created_at, status, reason,
           lease_until, wake_at FROM runs
    WHERE parent_run_id IS NULL AND run_id <> ALL($4::text[])
      AND ($5::text[] IS NULL OR run_id = ANY($7::text[])
           OR EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[]) AS s(agent, version)
                      WHERE s.agent = runs.agent
                        AND (runs.agent_version IS NULL OR runs.agent_version = s.version)))
), others AS (
    -- The runnable runs that are not queued: drained, orphaned, due (about as many as
    -- runs are held; never pruned).
    SELECT run_id, agent, concurrency_key, priority, created_at FROM mine
    WHERE (status = 'paused' AND reason = 'drain'
           AND (lease_until IS NULL OR lease_until < extract(epoch FROM clock_timestamp())))
       OR (status = 'running' AND lease_until < extract(epoch FROM clock_timestamp()))
       OR (status = 'waiting' AND wake_at <= extract(epoch FROM clock_timestamp()))
), front AS (
    -- The first $2 + $8 + 1 queued runs of each pair (one more than is ranked: whether the
    -- pair has more), and the others.
    SELECT q.* FROM pairs p CROSS JOIN LATERAL (
        SELECT run_id, agent, concurrency_key, priority, created_at FROM mine
        WHERE status = 'queued' AND agent = p.agent AND concurrency_key = p.concurrency_key
        ORDER BY priority DESC, created_at, run_id COLLATE "C"
        LIMIT $2 + $8::int + 1) AS q
    UNION ALL
    SELECT * FROM others
), numbered AS (
    SELECT run_id COLLATE "C" AS run_id, agent COLLATE "C" AS agent,
           concurrency_key COLLATE "C" AS ckey, priority, created_at,
           row_number() OVER (PARTITION BY agent COLLATE "C", concurrency_key COLLATE "C"
                              ORDER BY priority DESC, created_at, run_id COLLATE "C") AS n
    FROM front
), whole AS (
    -- A key of several agents lost runs to the pruning: its turns need every run. (The
    -- keys that lost runs joined to the keys of several agents: hashed, where a probe of
    -- every candidate for each run past the bound cost ~25 ms over 200 keys.)
    SELECT EXISTS (SELECT 1 FROM (SELECT DISTINCT ckey FROM numbered
                                  WHERE n > $2 + $8::int) AS over
                   JOIN (SELECT ckey FROM numbered GROUP BY ckey
                         HAVING min(agent) <> max(agent)) AS shared
                     ON shared.ckey = over.ckey) AS yes
), cand AS (
    -- "C": ranking sorts these texts, byte order is as good an order and many times faster.
    -- n: the run's rank within its (agent, key), as `numbered` ranks them.
    SELECT run_id, agent, ckey, priority, created_at, n FROM numbered
    WHERE n <= $2 + $8::int AND NOT (SELECT yes FROM whole)
    UNION ALL
    SELECT run_id COLLATE "C", agent COLLATE "C", concurrency_key COLLATE "C", priority,
           created_at,
           row_number() OVER (PARTITION BY agent COLLATE "C", concurrency_key COLLATE "C"
                              ORDER BY priority DESC, created_at, run_id COLLATE "C")
    FROM (SELECT run_id, agent, concurrency_key, priority, created_at FROM mine
          WHERE status = 'queued'
          UNION ALL
          SELECT * FROM others) AS every
    WHERE (SELECT yes FROM whole)
), held AS (
    SELECT agent COLLATE "C" AS agent, concurrency_key COLLATE "C" AS ckey, count(*) AS n
    FROM runs
    WHERE parent_run_id IS NULL AND status = 'running'
      AND lease_until >= extract(epoch FROM clock_timestamp())
    GROUP BY agent, concurrency_key
), served AS (
    SELECT ckey, sum(n)::bigint AS n FROM held GROUP BY ckey
), agent_held AS (
    SELECT agent, sum(n)::bigint AS n FROM held GROUP BY agent
), served_at AS (
    -- When each key was last served (its latest run taken or finished, through
    -- runs_served_idx): within a turn the key served longest ago goes first, so keys
    -- alternate even one slot at a time.
    SELECT k.ckey, (SELECT max(r.updated_at) FROM runs r
                    WHERE r.parent_run_id IS NULL AND r.status <> 'queued'
                      AND r.concurrency_key = k.ckey COLLATE "default") AS at
    FROM (SELECT DISTINCT ckey FROM cand) AS k
), ranked AS NOT MATERIALIZED (
    SELECT c.*,
           row_number() OVER (PARTITION BY c.priority, c.ckey
                              ORDER BY c.created_at, c.run_id)
             + coalesce(s.n, 0) AS turn,
           c.n + coalesce(h.n, 0) AS key_slot,
           coalesce(own.max_running, each.max_running) AS key_cap, sa.at AS served_at
    FROM cand c
    LEFT JOIN served_at sa ON sa.ckey = c.ckey
    LEFT JOIN held h ON h.agent = c.agent AND h.ckey = c.ckey
    LEFT JOIN served s ON s.ckey = c.ckey
    LEFT JOIN run_limits own ON c.ckey <> '' AND own.agent = c.agent
         AND own.concurrency_key = c.ckey AND NOT own.each_key
    LEFT JOIN run_limits each ON c.ckey <> '' AND each.agent = c.agent
         AND each.concurrency_key = '' AND each.each_key
), agent_wide AS (
    -- Whether an agent has a limit over all its keys: only then are the candidates ranked
    -- within their agent (a sort of all of them, in the order below), else that rank is
    -- never compared.
    SELECT EXISTS (SELECT 1 FROM run_limits
                   WHERE concurrency_key = '' AND NOT each_key) AS yes
), key_ok AS (
    SELECT r.*, NULL::bigint AS agent_slot, NULL::integer AS agent_cap FROM ranked r
    WHERE (r.key_cap IS NULL OR r.key_slot <= r.key_cap) AND NOT (SELECT yes FROM agent_wide)
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
    WHERE (r.key_cap IS NULL OR r.key_slot <= r.key_cap) AND (SELECT yes FROM agent_wide)
), first AS (
    -- The first few in order: the rows locked below (SKIP LOCKED passes over some).
    SELECT run_id, priority, turn, served_at, created_at FROM key_ok
    WHERE agent_cap IS NULL OR agent_slot <= agent_cap
    ORDER BY priority DESC, turn, served_at NULLS FIRST, created_at, run_id
    LIMIT $2 + $8::int
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
