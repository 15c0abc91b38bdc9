-- Purpose: keeps the version sequence equal on both backends. PostgreSQL's 0020 adds RUM
-- indexes for ranked full-text search; SQLite's full-text index is tantivy (BM25, ranked by the
-- index already), so nothing changes here.
SELECT 1;
