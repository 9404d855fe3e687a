-- Schedules (see tether/store/schedules.py).

-- name: schedule_add
INSERT INTO schedules
    (name, cron, agent, input, timezone, catch_up, created_at, fired_through, next_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (name) DO NOTHING;

-- name: schedule_remove
DELETE FROM schedules WHERE name = $1;

-- name: schedule_list
SELECT name, cron, agent, input, timezone, catch_up, created_at, fired_through, next_at
FROM schedules ORDER BY name;

-- name: schedule_due
SELECT name, cron, agent, input, timezone, catch_up, created_at, fired_through, next_at
FROM schedules WHERE next_at <= $1 ORDER BY next_at;

-- name: schedule_advance
-- Move the cursor on, never back (another worker may have moved it further).
UPDATE schedules SET fired_through = $2, next_at = $3
WHERE name = $1 AND fired_through < $2;

-- name: schedule_next
SELECT min(next_at) FROM schedules;
