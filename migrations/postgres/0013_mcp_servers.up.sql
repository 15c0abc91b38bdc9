-- Purpose: MCP servers configured per agent (decision 0015). One row per agent and server name;
-- `config` is the server's JSON (`{"command", "args", "env"}` for a child process over stdio, or
-- `{"url"}` for streamable HTTP), checked by pattern_core::mcp before it is stored. A server's
-- tools reach the model as `NAME__TOOL`. Times are Unix milliseconds.

CREATE TABLE mcp_servers (
    agent_id   TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    config     TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (agent_id, name)
);
