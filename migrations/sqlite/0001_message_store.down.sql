-- Purpose: undo 0001: drop the message store schema (destroys all stored history).
DROP TABLE IF EXISTS machine_leases;
DROP TABLE IF EXISTS activity_events;
DROP TABLE IF EXISTS summaries;
DROP TABLE IF EXISTS tool_calls;
DROP TABLE IF EXISTS messages;
DROP TABLE IF EXISTS batches;
DROP TABLE IF EXISTS agents;
