-- Purpose: undo 0006_agent_queue (drops queued triggers and scheduled wakeups).
DROP TABLE agent_queue;
