-- Purpose: keeps the version sequence equal on both backends. PostgreSQL's 0025 makes its
-- message-text function plpgsql (its plan kept per connection); SQLite's full text is tantivy's.
SELECT 1;
