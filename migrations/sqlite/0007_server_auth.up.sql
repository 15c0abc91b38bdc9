-- Purpose: organization-owned agents and organization API keys for the HTTP server. An agent
-- with an organization belongs to it alone (NULL: a local agent of the CLI). A key is stored
-- only as the SHA-256 of its secret, with a short prefix for display; revoked keys stay for the
-- record. Times are Unix milliseconds.

ALTER TABLE agents ADD COLUMN organization_id TEXT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE;
CREATE INDEX agents_by_organization ON agents (organization_id, name);

CREATE TABLE api_keys (
    id               TEXT PRIMARY KEY NOT NULL,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    prefix           TEXT NOT NULL,
    key_hash         TEXT NOT NULL UNIQUE,
    created_at       BIGINT NOT NULL,
    revoked_at       BIGINT NULL
);
CREATE INDEX api_keys_by_organization ON api_keys (organization_id, created_at);
