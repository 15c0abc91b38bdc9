-- Purpose: keeps the version sequence equal on both backends. SQLite's 0031 lets a message's
-- content be stored compressed; PostgreSQL compresses large values itself (TOAST).
SELECT 1;
