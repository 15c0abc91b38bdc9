-- Purpose: meetings of the agent-to-agent protocol: meetings (host, status, current speaker,
-- optional turn duration and the deadline of the current turn), their participants (status and
-- join order for round-robin turns), a per-meeting event log with a dense, monotonic sequence,
-- the meeting FK of `protocol_messages`, and the archive that retention moves old messages to.
-- Ids are TEXT UUIDs, JSON is TEXT, times and durations are Unix milliseconds (BIGINT).

CREATE TABLE protocol_meetings (
    id                  TEXT PRIMARY KEY NOT NULL,
    host_id             TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    status              TEXT NOT NULL CHECK (status IN ('created', 'ready', 'active', 'ended')),
    current_speaker_id  TEXT NULL REFERENCES protocol_agents(id) ON DELETE SET NULL,
    turn_duration_ms    BIGINT NULL CHECK (turn_duration_ms IS NULL OR turn_duration_ms > 0),
    turn_started_at     BIGINT NULL,
    -- turn_started_at + turn_duration_ms while a timed turn runs: what the sweeper looks for.
    turn_deadline       BIGINT NULL,
    -- The sequence of the newest event and the newest join order handed out.
    last_event_seq      BIGINT NOT NULL CHECK (last_event_seq >= 0),
    last_join_order     BIGINT NOT NULL CHECK (last_join_order >= 0),
    created_at          BIGINT NOT NULL,
    started_at          BIGINT NULL,
    ended_at            BIGINT NULL,
    -- Only an active meeting has a speaker and a running turn; an ended one says when it ended.
    CHECK (status = 'active' OR (current_speaker_id IS NULL AND turn_deadline IS NULL)),
    CHECK ((status = 'ended') = (ended_at IS NOT NULL)),
    CHECK (turn_deadline IS NULL OR turn_duration_ms IS NOT NULL)
);
CREATE INDEX protocol_meetings_by_status ON protocol_meetings (status, ended_at);
CREATE INDEX protocol_meetings_deadline ON protocol_meetings (turn_deadline)
    WHERE turn_deadline IS NOT NULL;

-- invited: asked, not joined; attending: joined before the start; waiting: joined, meeting
-- active, not speaking; speaking: the current speaker; left: gone (may join again, at the end of
-- the order). join_order is set by every join, unique within the meeting.
CREATE TABLE protocol_meeting_participants (
    meeting_id  TEXT NOT NULL REFERENCES protocol_meetings(id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    status      TEXT NOT NULL
        CHECK (status IN ('invited', 'attending', 'waiting', 'speaking', 'left')),
    join_order  BIGINT NULL CHECK (join_order IS NULL OR join_order > 0),
    invited_at  BIGINT NULL,
    joined_at   BIGINT NULL,
    left_at     BIGINT NULL,
    PRIMARY KEY (meeting_id, agent_id),
    CHECK (status = 'invited' OR (join_order IS NOT NULL AND joined_at IS NOT NULL)),
    CHECK ((status = 'left') = (left_at IS NOT NULL))
);
CREATE UNIQUE INDEX protocol_meeting_participants_order
    ON protocol_meeting_participants (meeting_id, join_order);
-- At most one speaker per meeting.
CREATE UNIQUE INDEX protocol_meeting_participants_one_speaker
    ON protocol_meeting_participants (meeting_id) WHERE status = 'speaking';
CREATE INDEX protocol_meeting_participants_by_agent ON protocol_meeting_participants (agent_id);

-- Every state change of a meeting, numbered 1, 2, 3 ... per meeting with no gaps: a follower
-- reads "after seq N" and never misses or repeats an event.
CREATE TABLE protocol_meeting_events (
    meeting_id  TEXT NOT NULL REFERENCES protocol_meetings(id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL CHECK (seq > 0),
    event_type  TEXT NOT NULL CHECK (event_type IN ('meeting_created', 'agent_invited',
        'agent_joined', 'meeting_ready', 'meeting_started', 'agent_spoke', 'turn_passed',
        'agent_left', 'agent_timed_out', 'meeting_ended')),
    agent_id    TEXT NULL REFERENCES protocol_agents(id) ON DELETE SET NULL,
    data        TEXT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (meeting_id, seq)
);

ALTER TABLE protocol_messages ADD CONSTRAINT protocol_messages_meeting_fk
    FOREIGN KEY (meeting_id) REFERENCES protocol_meetings(id) ON DELETE CASCADE;
CREATE INDEX protocol_messages_by_meeting ON protocol_messages (meeting_id, seq)
    WHERE meeting_id IS NOT NULL;
CREATE INDEX protocol_messages_by_created ON protocol_messages (created_at);

-- Messages moved out by retention: the same columns, no foreign keys (their session or meeting
-- may be deleted), and when they were archived.
CREATE TABLE protocol_messages_archive (
    id            TEXT PRIMARY KEY NOT NULL,
    sender_id     TEXT NOT NULL,
    recipient_id  TEXT NULL,
    session_id    TEXT NULL,
    meeting_id    TEXT NULL,
    message_type  TEXT NOT NULL,
    content       TEXT NOT NULL,
    metadata      TEXT NULL,
    read_at       BIGINT NULL,
    seq           BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    archived_at   BIGINT NOT NULL
);
CREATE INDEX protocol_messages_archive_by_created ON protocol_messages_archive (created_at);
