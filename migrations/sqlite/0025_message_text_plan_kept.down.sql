-- Purpose: undoes 0025 (nothing on SQLite).
SELECT 1;
