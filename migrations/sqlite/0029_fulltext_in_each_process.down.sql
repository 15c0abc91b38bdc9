-- Purpose: keeps the version sequence equal on both backends (see the up migration).
SELECT 1;
