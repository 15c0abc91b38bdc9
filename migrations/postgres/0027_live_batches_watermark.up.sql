-- Purpose: where an agent's live (unarchived) batches begin. Every context build that fills its
-- window reads the live batches below the window (`live_batches_before`), oldest first, and
-- archiving reads the live batches below a position: both walked the agent's whole archived
-- history first. `live_from` is a position below which every batch of the agent is archived:
-- the readers start there. Archiving is the only change of `archived` (never back) and it
-- moves the mark past the batches it archived, in the same transaction; a new batch's id is
-- above every position, so never below the mark.
ALTER TABLE agents ADD COLUMN live_from BIGINT NOT NULL DEFAULT 0;
UPDATE agents a SET live_from = m.live
FROM (
    SELECT agent_id, COALESCE(MIN(id) FILTER (WHERE NOT archived), MAX(id) + 1) AS live
    FROM batches GROUP BY agent_id
) AS m
WHERE m.agent_id = a.id;
