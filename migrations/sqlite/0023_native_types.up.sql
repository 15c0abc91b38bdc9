-- Purpose: keeps the version sequence equal on both backends. PostgreSQL's 0023 gives its
-- columns native types (UUID, TIMESTAMPTZ, JSON/JSONB); SQLite's file format does not change.
SELECT 1;
