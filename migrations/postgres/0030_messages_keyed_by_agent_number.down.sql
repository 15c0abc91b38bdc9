-- Purpose: keeps the version sequence equal on both backends. SQLite's 0030 gives agents a
-- number that its messages carry instead of the agent's id; PostgreSQL's messages carry the
-- agent's `uuid` (16 bytes), which needs no such step.
SELECT 1;
