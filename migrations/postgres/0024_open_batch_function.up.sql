-- Purpose: one round trip for a lone acknowledgement on PostgreSQL. `pattern_open_batch` opens a
-- batch and stores its trigger (and the trigger's embedding job, when one is given) in one call:
-- the agent's row lock, then the newest position and (when asked) the run holder read after it,
-- then the writes, or nothing at all. The writer runs it autocommitted for a lone acknowledgement
-- without a claim, and inside its transaction otherwise.
--
-- Each statement of a VOLATILE plpgsql function takes a fresh snapshot under READ COMMITTED, so
-- the reads after the lock see everything committed before the lock was granted (a single SQL
-- statement that waited for the lock would read from its older snapshot; decision 0025).
-- It writes nothing unless it inserts: when the agent is unknown, a run holds the agent, or a
-- message at or above `p_id` exists, it returns what it found and the caller falls back to its
-- transactional path, which judges the holder and moves its id generator past the position.
-- The unique index `batches_one_run` still refuses a second open run batch (the caller maps it).
CREATE FUNCTION pattern_open_batch(
    p_id BIGINT,
    p_agent UUID,
    p_batch_type TEXT,
    p_parent_batch BIGINT,
    p_run_owner TEXT,
    p_lease_expires_at TIMESTAMPTZ,
    p_now TIMESTAMPTZ,
    p_message_id UUID,
    p_role TEXT,
    p_content TEXT,
    p_token_estimate BIGINT,
    p_claim_token BIGINT,
    p_check_holder BOOLEAN,
    p_job_hash TEXT,
    OUT agent_found BOOLEAN,
    OUT inserted BOOLEAN,
    OUT max_position BIGINT,
    OUT run_holder TEXT
) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    inserted := FALSE;
    PERFORM 1 FROM agents WHERE id = p_agent FOR NO KEY UPDATE;
    agent_found := FOUND;
    IF NOT agent_found THEN
        RETURN;
    END IF;
    SELECT m.position INTO max_position
        FROM messages m WHERE m.agent_id = p_agent ORDER BY m.position DESC LIMIT 1;
    IF p_check_holder THEN
        SELECT r.holder INTO run_holder
            FROM agent_runs r WHERE r.agent_id = p_agent AND r.holder IS NOT NULL;
    END IF;
    IF run_holder IS NOT NULL OR max_position >= p_id THEN
        RETURN;
    END IF;
    UPDATE agents SET revision = revision + 1 WHERE id = p_agent;
    INSERT INTO batches (id, agent_id, batch_type, state, parent_batch, run_owner,
                         lease_expires_at, next_sequence, continuations, archived, started_at,
                         completed_at, retried_at, claim_token)
        VALUES (p_id, p_agent, p_batch_type, 'open', p_parent_batch, p_run_owner,
                p_lease_expires_at, 1, 0, FALSE, p_now, NULL, NULL, p_claim_token);
    INSERT INTO messages (id, agent_id, position, batch_id, sequence_num, batch_type, role,
                          content, token_estimate, archived, deleted, created_at)
        VALUES (p_message_id, p_agent, p_id, p_id, 0, p_batch_type, p_role, p_content::json,
                p_token_estimate, FALSE, FALSE, p_now);
    IF p_job_hash IS NOT NULL THEN
        INSERT INTO embedding_jobs (content_type, content_id, agent_id, text_hash,
                                    next_attempt_at, created_at)
            VALUES ('message', p_message_id, p_agent, p_job_hash, p_now, p_now)
            ON CONFLICT (content_type, content_id) DO UPDATE SET
                text_hash = excluded.text_hash, agent_id = excluded.agent_id, attempts = 0,
                next_attempt_at = excluded.next_attempt_at, claimed_until = NULL,
                claimed_by = NULL, last_error = NULL;
    END IF;
    inserted := TRUE;
END
$$;
