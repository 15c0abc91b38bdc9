-- Purpose: undoes 0027.
ALTER TABLE agents DROP COLUMN live_from;
