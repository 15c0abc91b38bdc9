-- Purpose: undoes nothing (see the up migration).
SELECT 1;
