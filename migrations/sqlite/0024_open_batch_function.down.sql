-- Purpose: undoes 0024 (nothing on SQLite).
SELECT 1;
