-- Purpose: undo 0012_one_agent_identity. `protocol_agents` comes back with one protocol agent per
-- agent (same id, linked to it; external ids made unique across organizations by a suffix), the
-- protocol's foreign keys point at it again, agents of the `local` organization lose their
-- organization and agents of any other keep it with the `{organization id}/` name prefix. Data
-- is kept; the identities the up migration merged stay merged.

CREATE TABLE protocol_agents (
    id               TEXT PRIMARY KEY NOT NULL,
    external_id      TEXT UNIQUE NOT NULL,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    -- The Pattern agent behind this protocol identity, if any.
    agent_id         TEXT NULL REFERENCES agents(id) ON DELETE SET NULL,
    created_at       BIGINT NOT NULL
);
INSERT INTO protocol_agents (id, external_id, organization_id, name, agent_id, created_at)
SELECT a.id,
       CASE WHEN EXISTS (SELECT 1 FROM agents b
                          WHERE b.external_id = a.external_id
                            AND (b.created_at < a.created_at
                                 OR (b.created_at = a.created_at AND b.id COLLATE "C" < a.id COLLATE "C")))
            THEN a.external_id || '-' || substr(a.id, length(a.id) - 11)
            ELSE a.external_id END,
       a.organization_id, a.name, a.id, a.created_at
FROM agents a;
CREATE INDEX protocol_agents_by_org ON protocol_agents (organization_id);

ALTER TABLE protocol_sessions
    DROP CONSTRAINT protocol_sessions_agent_a_fk,
    DROP CONSTRAINT protocol_sessions_agent_b_fk,
    DROP CONSTRAINT protocol_sessions_locked_fk,
    ADD FOREIGN KEY (agent_a_id) REFERENCES protocol_agents(id) ON DELETE CASCADE,
    ADD FOREIGN KEY (agent_b_id) REFERENCES protocol_agents(id) ON DELETE CASCADE,
    ADD FOREIGN KEY (locked_agent_id) REFERENCES protocol_agents(id) ON DELETE SET NULL;
ALTER TABLE protocol_messages
    DROP CONSTRAINT protocol_messages_sender_fk,
    DROP CONSTRAINT protocol_messages_recipient_fk,
    ADD FOREIGN KEY (sender_id) REFERENCES protocol_agents(id) ON DELETE CASCADE,
    ADD FOREIGN KEY (recipient_id) REFERENCES protocol_agents(id) ON DELETE CASCADE;
ALTER TABLE protocol_meetings
    DROP CONSTRAINT protocol_meetings_host_fk,
    DROP CONSTRAINT protocol_meetings_speaker_fk,
    ADD FOREIGN KEY (host_id) REFERENCES protocol_agents(id) ON DELETE CASCADE,
    ADD FOREIGN KEY (current_speaker_id) REFERENCES protocol_agents(id) ON DELETE SET NULL;
ALTER TABLE protocol_meeting_participants
    DROP CONSTRAINT protocol_meeting_participants_agent_fk,
    ADD FOREIGN KEY (agent_id) REFERENCES protocol_agents(id) ON DELETE CASCADE;
ALTER TABLE protocol_meeting_events
    DROP CONSTRAINT protocol_meeting_events_agent_fk,
    ADD FOREIGN KEY (agent_id) REFERENCES protocol_agents(id) ON DELETE SET NULL;
DROP INDEX protocol_meetings_by_host;
DROP INDEX protocol_messages_by_sender;

DROP INDEX agents_name_in_organization;
DROP INDEX agents_external_id_in_organization;
ALTER TABLE agents ALTER COLUMN organization_id DROP NOT NULL;
UPDATE agents a
SET name = CASE WHEN o.external_id = 'local' THEN a.name ELSE a.organization_id || '/' || a.name END,
    organization_id = CASE WHEN o.external_id = 'local' THEN NULL ELSE a.organization_id END
FROM protocol_organizations o WHERE o.id = a.organization_id;
ALTER TABLE agents DROP COLUMN external_id;
ALTER TABLE agents ADD CONSTRAINT agents_name_key UNIQUE (name);
CREATE INDEX agents_by_organization ON agents (organization_id, name);
