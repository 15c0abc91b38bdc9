-- Purpose: keeps the version sequence equal on both backends. PostgreSQL's 0024 adds a function
-- that opens a batch in one autocommitted call; SQLite's writer needs none (one writer, one
-- connection-local round trip per statement).
SELECT 1;
