-- Purpose: undo 0018_retention_policies (forgets every stored retention policy and any archive
-- export in flight; archive files already written stay where they are).
DROP TABLE retention_exports;
DROP TABLE retention_policies;
