-- Purpose: keeps the version sequence equal on both backends. SQLite's 0028 logs new messages
-- as spans; PostgreSQL logs no text changes (its full text is in the tables).
SELECT 1;
