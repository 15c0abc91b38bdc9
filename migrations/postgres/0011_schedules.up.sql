-- Purpose: schedules (decision 0012). A schedule is an entry of the agent's queue
-- (0006_agent_queue) whose `schedule` says how it was made: `at` (one-off, `deliver_at` is the
-- time) or `cron` (recurring: `cron` and `time_zone`; `deliver_at` is the next fire time, moved
-- on from the expression in the transaction that delivers it). `name` is the user's optional
-- label. `retry_of`: the abandoned batch this entry runs again (a wakeup whose run's process
-- died is queued again once; an entry with `retry_of` is never retried itself).
ALTER TABLE agent_queue ADD COLUMN schedule TEXT CHECK (schedule IS NULL OR schedule IN ('at', 'cron'));
ALTER TABLE agent_queue ADD COLUMN cron TEXT;
ALTER TABLE agent_queue ADD COLUMN time_zone TEXT;
ALTER TABLE agent_queue ADD COLUMN name TEXT;
ALTER TABLE agent_queue ADD COLUMN retry_of BIGINT;
-- An agent's live schedules (listing, the per-agent cap).
CREATE INDEX agent_queue_schedules ON agent_queue (agent_id, id) WHERE schedule IS NOT NULL AND delivered_at IS NULL;
-- The entry whose delivery began a batch (recovery's retry of a crashed wakeup).
CREATE INDEX agent_queue_by_batch ON agent_queue (delivered_batch) WHERE delivered_batch IS NOT NULL;
