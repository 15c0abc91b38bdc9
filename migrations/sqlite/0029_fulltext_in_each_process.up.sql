-- Purpose: keeps the version sequence equal on both backends. PostgreSQL's 0029 moves its full
-- text into a tantivy index in each process, as SQLite's always was.
SELECT 1;
