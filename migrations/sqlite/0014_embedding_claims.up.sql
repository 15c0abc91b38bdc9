-- Purpose: who holds an embedding job's claim (the `processes.holder` of the claiming process),
-- so a claim whose holder is gone (its liveness lock free, or its row missing) is taken at once
-- instead of after its lease, and a process that closes releases its own claims (issue 18).
ALTER TABLE embedding_jobs ADD COLUMN claimed_by TEXT;
CREATE INDEX embedding_jobs_claimed_by ON embedding_jobs (claimed_by) WHERE claimed_by IS NOT NULL;
