-- Purpose: undo 0005: drop the message archive, the meeting triggers and index of
-- protocol_messages, and the meeting tables (events, participants, meetings). Meeting messages are
-- deleted first: their meetings go, and an orphaned meeting id would make re-applying 0005 fail.
DROP TABLE IF EXISTS protocol_messages_archive;
DELETE FROM protocol_messages WHERE meeting_id IS NOT NULL;
DROP INDEX IF EXISTS protocol_messages_by_created;
DROP INDEX IF EXISTS protocol_messages_by_meeting;
DROP TRIGGER IF EXISTS protocol_messages_meeting_fk_insert;
DROP TRIGGER IF EXISTS protocol_messages_meeting_fk_update;
DROP TRIGGER IF EXISTS protocol_messages_meeting_fk_delete;
DROP TABLE IF EXISTS protocol_meeting_events;
DROP TABLE IF EXISTS protocol_meeting_participants;
DROP TABLE IF EXISTS protocol_meetings;
