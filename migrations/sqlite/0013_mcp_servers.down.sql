-- Purpose: undo 0013_mcp_servers (forgets every agent's stored MCP servers; servers in
-- config.toml are unaffected).
DROP TABLE mcp_servers;
