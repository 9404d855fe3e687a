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
-- overlap, and every run picked is taken).
--
-- Only the first :limit runnable runs of each (agent, key) (in (priority desc, age) order,
-- through runs_queue_idx) are ranked, so a claim costs (agent, key) pairs times that, not
-- the queue's length: a run further back in its (agent, key) is never among the first
-- :limit taken, since the ones before it in its (agent, key) come before it in every order
-- the rule uses and are admitted whenever it is. What they change is the turn of another
-- agent's run of the same key (turns are counted per key over all agents), so while a key
-- of several agents has more runnable runs in one of them, every runnable run is ranked
-- (`whole`), as PostgreSQL's claim does.
WITH pairs AS (
    -- The (agent, key) pairs with queued runs.
    SELECT DISTINCT agent, concurrency_key FROM runs
    WHERE parent_run_id IS NULL AND status = 'queued'
), mine AS NOT MATERIALIZED (
    -- The top-level runs this worker may take (its skip, its pinning), whatever their
    -- status: inlined in each reader, which adds its own.
    SELECT run_id, agent, concurrency_key, priority, created_at, status, reason,
           lease_until, wake_at FROM runs
    WHERE parent_run_id IS NULL
      AND run_id NOT IN (SELECT value FROM json_each(:skip))
      AND (:pinned = 0 OR run_id IN (SELECT value FROM json_each(:also))
           OR EXISTS (SELECT 1 FROM json_each(:serves) AS s
                      WHERE s.value ->> 0 = runs.agent
                        AND (runs.agent_version IS NULL
                             OR runs.agent_version = s.value ->> 1)))
), others AS (
    -- The runnable runs that are not queued: drained, orphaned, due.
    SELECT run_id, agent, concurrency_key, priority, created_at FROM mine
    WHERE (status = 'paused' AND reason = 'drain'
           AND (lease_until IS NULL OR lease_until < :now))
       OR (status = 'running' AND lease_until < :now)
       OR (status = 'waiting' AND wake_at <= :now)
), front AS (
    -- The first :limit + 1 queued runs of each pair (one more than is ranked: whether the
    -- pair has more), and the others.
    SELECT q.run_id, q.agent, q.concurrency_key, q.priority, q.created_at
    FROM pairs p JOIN runs q ON q.run_id IN (
        SELECT m.run_id FROM mine m
        WHERE m.status = 'queued' AND m.agent = p.agent
          AND m.concurrency_key = p.concurrency_key
        ORDER BY m.priority DESC, m.created_at, m.run_id
        LIMIT :limit + 1)
    UNION ALL
    SELECT * FROM others
), numbered AS (
    SELECT run_id, agent, concurrency_key, priority, created_at,
           row_number() OVER (PARTITION BY agent, concurrency_key
                              ORDER BY priority DESC, created_at, run_id) AS n
    FROM front
), whole AS (
    -- A key of several agents lost runs to the pruning: its turns need every run (the
    -- keys that lost runs joined to the keys of several agents, as PostgreSQL's claim).
    SELECT EXISTS (SELECT 1 FROM (SELECT DISTINCT concurrency_key FROM numbered
                                  WHERE n > :limit) AS over
                   JOIN (SELECT concurrency_key FROM numbered GROUP BY concurrency_key
                         HAVING min(agent) <> max(agent)) AS shared
                     ON shared.concurrency_key = over.concurrency_key) AS yes
), cand AS (
    -- n: the run's rank within its (agent, key), as `numbered` ranks them.
    SELECT run_id, agent, concurrency_key AS ckey, priority, created_at, n FROM numbered
    WHERE n <= :limit AND NOT (SELECT yes FROM whole)
    UNION ALL
    SELECT run_id, agent, concurrency_key, priority, created_at,
           row_number() OVER (PARTITION BY agent, concurrency_key
                              ORDER BY priority DESC, created_at, run_id)
    FROM (SELECT run_id, agent, concurrency_key, priority, created_at FROM mine
          WHERE status = 'queued'
          UNION ALL
          SELECT * FROM others) AS every
    WHERE (SELECT yes FROM whole)
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
), agent_wide AS (
    -- Whether an agent has a limit over all its keys: only then are the candidates ranked
    -- within their agent (a sort of all of them), else that rank is never compared.
    SELECT EXISTS (SELECT 1 FROM run_limits
                   WHERE concurrency_key = '' AND NOT each_key) AS yes
), ranked AS (
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
), key_ok AS (
    SELECT r.*, NULL AS agent_slot, NULL AS agent_cap FROM ranked r
    WHERE (r.key_cap IS NULL OR r.key_slot <= r.key_cap)
      AND NOT (SELECT yes FROM agent_wide)
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
      AND (SELECT yes FROM agent_wide)
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
