-- A cancel asked of a run some worker owns: the owner sees it when it renews its lease
-- and records the cancellation itself, fenced by its epoch (a claim hands the flag over too).
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
