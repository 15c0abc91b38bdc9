-- Purpose: keeps the version sequence equal on both backends. SQLite's 0032 lets compressed
-- message content name the built-in dictionary; PostgreSQL stores text (TOAST compresses it).
SELECT 1;
