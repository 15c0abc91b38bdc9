-- Purpose: keeps the version sequence equal on both backends. SQLite's 0022 drops AUTOINCREMENT
-- from the search change log; PostgreSQL's `seq` is a sequence that never hands a number out
-- twice, so nothing changes here.
SELECT 1;
