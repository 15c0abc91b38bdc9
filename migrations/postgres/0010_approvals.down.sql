-- Purpose: undo 0010_approvals (forgets every approval request; runs waiting for one see it as
-- missing and deny).
DROP INDEX approvals_pending_by_batch;
DROP INDEX approvals_by_organization;
DROP TABLE approvals;
