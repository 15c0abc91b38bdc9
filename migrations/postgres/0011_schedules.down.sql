-- Purpose: undo 0011_schedules (schedules become plain queue entries: a cron schedule stops
-- recurring after its next delivery; names and retry marks are forgotten).
DROP INDEX agent_queue_by_batch;
DROP INDEX agent_queue_schedules;
ALTER TABLE agent_queue DROP COLUMN retry_of;
ALTER TABLE agent_queue DROP COLUMN name;
ALTER TABLE agent_queue DROP COLUMN time_zone;
ALTER TABLE agent_queue DROP COLUMN cron;
ALTER TABLE agent_queue DROP COLUMN schedule;
