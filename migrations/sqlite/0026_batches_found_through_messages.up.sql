-- Purpose: no index on `batches` keyed by agent (issue 17's 100-writer goal; decision 0025,
-- "Stop 35"). A group commit of acknowledgements for many agents wrote one leaf page of
-- `batches_by_agent` per agent, besides the one of `messages_by_position`: about 100 of the
-- 250 pages a group of 100 dirtied. A batch's id is the position of its first message (every
-- writer since migration 0001 makes it so), so an agent's batches in id order are the
-- positions of `messages_by_position` that are a batch's id: the readers walk that index and
-- look each position up in `batches`' primary key. Open batches, which recovery and the run
-- claims look up by agent, get a partial index in id order (new batches append to it; a
-- closed one leaves it). Continuation batches point at their parent: the retention pass and
-- the foreign key's `ON DELETE SET NULL` find them by a partial index of their own.
DROP INDEX IF EXISTS batches_by_agent;
DROP INDEX IF EXISTS batches_open_by_lease;
CREATE INDEX batches_open ON batches (id, agent_id) WHERE state = 'open';
CREATE INDEX batches_by_parent ON batches (parent_batch) WHERE parent_batch IS NOT NULL;
