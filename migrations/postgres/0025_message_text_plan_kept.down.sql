-- Purpose: undoes 0025: `pattern_message_text` back to the SQL function of 0023 (same result).
CREATE OR REPLACE FUNCTION pattern_message_text(content JSON) RETURNS TEXT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT coalesce(string_agg(
        CASE WHEN e.value->>'type' = 'text' THEN e.value->>'text' ELSE e.value->>'content' END,
        E'\n' ORDER BY e.ord), '')
    FROM jsonb_array_elements(
        regexp_replace(content::text, '(?<!\\)((?:\\\\)*)\\u0000', '\1\\u0020', 'g')::jsonb
    ) WITH ORDINALITY AS e(value, ord)
    WHERE e.value->>'type' IN ('text', 'tool_result')
$fn$;
