-- Purpose: undo 0015_agents_converse (sessions go back to inbox delivery without limits; queue
-- entries forget the message they deliver; meetings forget their policy and a pending choice).
ALTER TABLE protocol_meetings DROP COLUMN chosen_speaker_id;
ALTER TABLE protocol_meetings DROP COLUMN policy;
ALTER TABLE agent_queue DROP COLUMN protocol_message_id;
ALTER TABLE protocol_sessions DROP COLUMN messages_sent;
ALTER TABLE protocol_sessions DROP COLUMN message_limit;
ALTER TABLE protocol_sessions DROP COLUMN delivery;
