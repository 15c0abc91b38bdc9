-- Purpose: the searchable text of a stored message (`pattern_message_text`, behind the generated
-- column `messages.search_tsv`) is computed by a plpgsql function with the same body. A SQL
-- function that cannot be inlined is parsed and planned again by every statement that calls it;
-- plpgsql keeps its plan for the connection. Every acknowledgement inserts one message in a
-- statement of its own, and that planning was about a third of the insert (decision 0025, "Stop
-- 31"). Same result for every input, so the stored column stays as it is.
CREATE OR REPLACE FUNCTION pattern_message_text(content JSON) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
    RETURN (
        SELECT coalesce(string_agg(
            CASE WHEN e.value->>'type' = 'text' THEN e.value->>'text' ELSE e.value->>'content' END,
            E'\n' ORDER BY e.ord), '')
        FROM jsonb_array_elements(
            regexp_replace(content::text, '(?<!\\)((?:\\\\)*)\\u0000', '\1\\u0020', 'g')::jsonb
        ) WITH ORDINALITY AS e(value, ord)
        WHERE e.value->>'type' IN ('text', 'tool_result')
    );
END
$fn$;
