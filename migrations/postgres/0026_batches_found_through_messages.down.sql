-- Purpose: undoes 0026.
DROP INDEX IF EXISTS batches_by_parent;
