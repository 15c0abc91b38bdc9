-- Purpose: agents that converse through the protocol (decision 0020).
-- Sessions: `delivery` says who reads a participant's messages: `inbox` (an outside client reads
-- the inbox, as before) or `agents` (each message becomes the recipient's trigger in its durable
-- queue, and a sync session's reply is the recipient's final answer). `message_limit` ends the
-- session after that many messages (NULL: no limit); `messages_sent` counts them.
-- Queue: `protocol_message_id` is the session message an entry delivers; it is marked read in
-- the transaction that completes the batch the entry began (no FK: retention may archive the
-- message first, and then there is nothing left to mark).
-- Meetings: `policy` is how the turn moves (`round_robin`, `selector`: the turn goes back to the
-- host after every other speaker and the host names the next, `broadcast`: round-robin where the
-- host decides); `chosen_speaker_id` is the host's choice, used by the next hand-over.
ALTER TABLE protocol_sessions ADD COLUMN delivery TEXT NOT NULL DEFAULT 'inbox'
    CHECK (delivery IN ('inbox', 'agents'));
ALTER TABLE protocol_sessions ADD COLUMN message_limit BIGINT
    CHECK (message_limit IS NULL OR message_limit > 0);
ALTER TABLE protocol_sessions ADD COLUMN messages_sent BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agent_queue ADD COLUMN protocol_message_id TEXT;
ALTER TABLE protocol_meetings ADD COLUMN policy TEXT NOT NULL DEFAULT 'round_robin'
    CHECK (policy IN ('round_robin', 'selector', 'broadcast'));
ALTER TABLE protocol_meetings ADD COLUMN chosen_speaker_id TEXT;
