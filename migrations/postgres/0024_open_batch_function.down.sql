-- Purpose: undoes 0024: the one-call batch opening goes; the writer's transactional path remains.
DROP FUNCTION pattern_open_batch(BIGINT, UUID, TEXT, BIGINT, TEXT, TIMESTAMPTZ, TIMESTAMPTZ,
                                 UUID, TEXT, TEXT, BIGINT, BIGINT, BOOLEAN, TEXT);
