-- Purpose: one agent identity. `protocol_agents` goes: the protocol's participants are the rows
-- of `agents`. Every agent belongs to exactly one organization (local agents of the CLI to the
-- organization with external id `local`, created here when missing), with a name and an
-- external id unique within it; organization scoping is the `organization_id` column, never a
-- name prefix (the `{organization id}/` prefix of server-made agents is removed). A protocol
-- agent linked to a Pattern agent of its organization (or of none) becomes that agent; any other
-- protocol agent becomes an agent of its own (same id). Names or external ids that would clash
-- inside an organization get `-` and the last 12 characters of the agent's id appended. The
-- protocol's foreign keys move from `protocol_agents` to `agents`, with the same actions.

INSERT INTO protocol_organizations (id, external_id, name, created_at)
SELECT '00000000-0000-7000-8000-000000000001', 'local', 'local',
       (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT
WHERE NOT EXISTS (SELECT 1 FROM protocol_organizations WHERE external_id = 'local');

-- Every future agent row, before uniqueness is settled.
CREATE TEMP TABLE identity_staging (
    id               TEXT PRIMARY KEY NOT NULL,
    organization_id  TEXT NOT NULL,
    name             TEXT NOT NULL,
    external_id      TEXT NULL,
    metadata         TEXT NOT NULL,
    revision         BIGINT NOT NULL,
    created_at       BIGINT NOT NULL
) ON COMMIT DROP;

-- Existing agents: their organization, else the organization of the first protocol agent linked
-- to them, else `local`; the server's `{organization id}/` name prefix removed.
INSERT INTO identity_staging (id, organization_id, name, external_id, metadata, revision, created_at)
SELECT a.id,
       COALESCE(a.organization_id,
                (SELECT p.organization_id FROM protocol_agents p WHERE p.agent_id = a.id
                  ORDER BY p.created_at, p.id COLLATE "C" LIMIT 1),
                (SELECT o.id FROM protocol_organizations o WHERE o.external_id = 'local')),
       CASE WHEN a.organization_id IS NOT NULL
                 AND substr(a.name, 1, length(a.organization_id) + 1) = a.organization_id || '/'
                 AND length(a.name) > length(a.organization_id) + 1
            THEN substr(a.name, length(a.organization_id) + 2)
            ELSE a.name END,
       NULL, a.metadata, a.revision, a.created_at
FROM agents a;

-- Each protocol agent's agent: the linked agent when it is in the same organization and this is
-- the first protocol agent linked to it there; the protocol agent's own id otherwise.
CREATE TEMP TABLE identity_map (
    protocol_id  TEXT PRIMARY KEY NOT NULL,
    agent_id     TEXT NOT NULL,
    -- 1 when the protocol agent becomes its linked agent, 0 when it stands alone.
    merged       INTEGER NOT NULL
) ON COMMIT DROP;
INSERT INTO identity_map (protocol_id, agent_id, merged)
SELECT p.id, CASE WHEN p.agent_id IS NOT NULL
                 AND EXISTS (SELECT 1 FROM identity_staging s
                              WHERE s.id = p.agent_id AND s.organization_id = p.organization_id)
                 AND NOT EXISTS (SELECT 1 FROM protocol_agents q
                                  WHERE q.agent_id = p.agent_id
                                    AND q.organization_id = p.organization_id
                                    AND (q.created_at < p.created_at
                                         OR (q.created_at = p.created_at AND q.id COLLATE "C" < p.id COLLATE "C")))
            THEN p.agent_id ELSE p.id END,
       CASE WHEN p.agent_id IS NOT NULL
                 AND EXISTS (SELECT 1 FROM identity_staging s
                              WHERE s.id = p.agent_id AND s.organization_id = p.organization_id)
                 AND NOT EXISTS (SELECT 1 FROM protocol_agents q
                                  WHERE q.agent_id = p.agent_id
                                    AND q.organization_id = p.organization_id
                                    AND (q.created_at < p.created_at
                                         OR (q.created_at = p.created_at AND q.id COLLATE "C" < p.id COLLATE "C")))
            THEN 1 ELSE 0 END
FROM protocol_agents p;

-- A merged agent takes its protocol agent's external id.
UPDATE identity_staging
SET external_id = (SELECT p.external_id FROM protocol_agents p
                    JOIN identity_map m ON m.protocol_id = p.id
                   WHERE m.agent_id = identity_staging.id AND m.merged = 1)
WHERE id IN (SELECT m.agent_id FROM identity_map m WHERE m.merged = 1);

-- Protocol agents that stand alone become agents.
INSERT INTO identity_staging (id, organization_id, name, external_id, metadata, revision, created_at)
SELECT p.id, p.organization_id, p.name, p.external_id, 'null', 0, p.created_at
FROM protocol_agents p JOIN identity_map m ON m.protocol_id = p.id
WHERE m.merged = 0;

UPDATE identity_staging SET external_id = name WHERE external_id IS NULL;

-- Uniqueness inside an organization: later clashing rows get a suffix from their id.
UPDATE identity_staging SET name = name || '-' || substr(id, length(id) - 11)
WHERE id IN (SELECT id FROM (
    SELECT id, ROW_NUMBER() OVER (PARTITION BY organization_id, name ORDER BY created_at, id COLLATE "C") AS rn
    FROM identity_staging) ranked WHERE rn > 1);
UPDATE identity_staging SET external_id = external_id || '-' || substr(id, length(id) - 11)
WHERE id IN (SELECT id FROM (
    SELECT id, ROW_NUMBER() OVER (PARTITION BY organization_id, external_id ORDER BY created_at, id COLLATE "C") AS rn
    FROM identity_staging) ranked WHERE rn > 1);

ALTER TABLE agents DROP CONSTRAINT agents_name_key;
ALTER TABLE agents ADD COLUMN external_id TEXT NULL;

-- Every foreign key that points at protocol_agents goes; the same keys come back on agents.
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT conrelid::regclass::text AS tbl, conname FROM pg_constraint
             WHERE contype = 'f' AND confrelid = 'protocol_agents'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
    END LOOP;
END $$;

UPDATE agents a
SET organization_id = s.organization_id, name = s.name, external_id = s.external_id
FROM identity_staging s WHERE s.id = a.id;
INSERT INTO agents (id, name, metadata, revision, created_at, organization_id, external_id)
SELECT s.id, s.name, s.metadata, s.revision, s.created_at, s.organization_id, s.external_id
FROM identity_staging s WHERE NOT EXISTS (SELECT 1 FROM agents a WHERE a.id = s.id);
ALTER TABLE agents ALTER COLUMN organization_id SET NOT NULL;
ALTER TABLE agents ALTER COLUMN external_id SET NOT NULL;
DROP INDEX agents_by_organization;
CREATE UNIQUE INDEX agents_name_in_organization ON agents (organization_id, name);
CREATE UNIQUE INDEX agents_external_id_in_organization ON agents (organization_id, external_id);

UPDATE protocol_sessions s
SET agent_a_id = LEAST(ma.agent_id COLLATE "C", mb.agent_id COLLATE "C"),
    agent_b_id = GREATEST(ma.agent_id COLLATE "C", mb.agent_id COLLATE "C"),
    locked_agent_id = (SELECT m.agent_id FROM identity_map m WHERE m.protocol_id = s.locked_agent_id)
FROM identity_map ma, identity_map mb
WHERE ma.protocol_id = s.agent_a_id AND mb.protocol_id = s.agent_b_id;
UPDATE protocol_messages g SET sender_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = g.sender_id AND m.agent_id <> m.protocol_id;
UPDATE protocol_messages g SET recipient_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = g.recipient_id AND m.agent_id <> m.protocol_id;
UPDATE protocol_meetings t SET host_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = t.host_id AND m.agent_id <> m.protocol_id;
UPDATE protocol_meetings t SET current_speaker_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = t.current_speaker_id AND m.agent_id <> m.protocol_id;
UPDATE protocol_meeting_participants p SET agent_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = p.agent_id AND m.agent_id <> m.protocol_id;
UPDATE protocol_meeting_events e SET agent_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = e.agent_id AND m.agent_id <> m.protocol_id;
UPDATE protocol_messages_archive g SET sender_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = g.sender_id AND m.agent_id <> m.protocol_id;
UPDATE protocol_messages_archive g SET recipient_id = m.agent_id
FROM identity_map m WHERE m.protocol_id = g.recipient_id AND m.agent_id <> m.protocol_id;

ALTER TABLE protocol_sessions
    ADD CONSTRAINT protocol_sessions_agent_a_fk FOREIGN KEY (agent_a_id) REFERENCES agents(id) ON DELETE CASCADE,
    ADD CONSTRAINT protocol_sessions_agent_b_fk FOREIGN KEY (agent_b_id) REFERENCES agents(id) ON DELETE CASCADE,
    ADD CONSTRAINT protocol_sessions_locked_fk FOREIGN KEY (locked_agent_id) REFERENCES agents(id) ON DELETE SET NULL;
ALTER TABLE protocol_messages
    ADD CONSTRAINT protocol_messages_sender_fk FOREIGN KEY (sender_id) REFERENCES agents(id) ON DELETE CASCADE,
    ADD CONSTRAINT protocol_messages_recipient_fk FOREIGN KEY (recipient_id) REFERENCES agents(id) ON DELETE CASCADE;
ALTER TABLE protocol_meetings
    ADD CONSTRAINT protocol_meetings_host_fk FOREIGN KEY (host_id) REFERENCES agents(id) ON DELETE CASCADE,
    ADD CONSTRAINT protocol_meetings_speaker_fk FOREIGN KEY (current_speaker_id) REFERENCES agents(id) ON DELETE SET NULL;
ALTER TABLE protocol_meeting_participants
    ADD CONSTRAINT protocol_meeting_participants_agent_fk FOREIGN KEY (agent_id) REFERENCES agents(id) ON DELETE CASCADE;
ALTER TABLE protocol_meeting_events
    ADD CONSTRAINT protocol_meeting_events_agent_fk FOREIGN KEY (agent_id) REFERENCES agents(id) ON DELETE SET NULL;
CREATE INDEX protocol_meetings_by_host ON protocol_meetings (host_id);
CREATE INDEX protocol_messages_by_sender ON protocol_messages (sender_id);

DROP TABLE protocol_agents;
