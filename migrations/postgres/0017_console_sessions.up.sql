-- Purpose: sessions of the console's pages that work without JavaScript (decision 0022). Logging
-- in with an organization API key opens one; the browser holds its random token in an HttpOnly
-- cookie, this table only the token's SHA-256. A session acts for its key and only while the key
-- is live (it is read joined with `api_keys`), until it expires or its user logs out (the row is
-- deleted). Times are Unix milliseconds.
CREATE TABLE console_sessions (
    token_hash  TEXT PRIMARY KEY NOT NULL,
    api_key_id  TEXT NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    CHECK (expires_at > created_at)
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
