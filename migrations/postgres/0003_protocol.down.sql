-- Purpose: undo 0003: drop the agent-to-agent protocol tables (messages, sessions, agents, organizations).
DROP TABLE IF EXISTS protocol_messages;
DROP TABLE IF EXISTS protocol_sessions;
DROP TABLE IF EXISTS protocol_agents;
DROP TABLE IF EXISTS protocol_organizations;
