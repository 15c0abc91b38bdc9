-- Purpose: undo 0017_console_sessions (the console's pages without JavaScript have no sessions).
DROP INDEX console_sessions_by_expiry;
DROP TABLE console_sessions;
