-- Purpose: undo 0014_embedding_claims (claims then hold until their lease passes, as before).
DROP INDEX embedding_jobs_claimed_by;
ALTER TABLE embedding_jobs DROP COLUMN claimed_by;
