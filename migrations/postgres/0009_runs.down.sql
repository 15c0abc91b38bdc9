-- Purpose: undo 0009_runs (forgets claims, processes, turns and their events; open batches stay
-- open and are recovered by their batch leases as before).
ALTER TABLE agent_queue DROP COLUMN turn_id;
DROP TABLE turn_events;
DROP TABLE turns;
DROP INDEX batches_one_run;
ALTER TABLE batches DROP COLUMN claim_token;
DROP TABLE agent_runs;
DROP TABLE processes;
