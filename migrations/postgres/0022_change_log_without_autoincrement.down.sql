-- Purpose: nothing to revert (see the up migration).
SELECT 1;
