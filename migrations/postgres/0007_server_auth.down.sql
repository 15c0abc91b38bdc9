-- Purpose: undo 0007_server_auth (drops every API key; agents lose their organization).
DROP TABLE api_keys;
DROP INDEX agents_by_organization;
ALTER TABLE agents DROP COLUMN organization_id;
