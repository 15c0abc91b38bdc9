-- pattern: foreign-keys-off
-- Purpose: bytes per message (issue 17's storage goals, decision 0025 "Stop 39"). Every
-- message row and every entry of `messages_by_position` carried its agent's UUID as 36
-- characters of text; they now carry a small integer, the agent's `num` (a new key of
-- `agents`, assigned when the agent is created and never reused: AUTOINCREMENT). A message's
-- own id is stored as the UUID's 16 bytes, not its 36 characters (in the row and in the id's
-- index; `pattern_db_sqlite::messages::ID_TEXT` reads it back as text). A message's
-- `role` and `batch_type` are stored as codes (0-3, in the order of their CHECK lists below;
-- `pattern_db_sqlite::messages` reads and writes them). A message of one text block whose text
-- does not start with `[` stores that text instead of its JSON (27 bytes of envelope); any
-- other content stays JSON, an array, which starts with `[` (so a reader tells them apart).
-- About 190 bytes per message fewer at 387-byte messages (nine rows to a 4 KiB page instead of
-- seven, an entry of `messages_by_position` of 20 bytes instead of 55, of the id's index about
-- 32 instead of 52). Readers find an agent's messages with its number; a message's agent id is
-- its batch's.
--
-- SQLite cannot change a column or a foreign key in place: `agents` and `messages` are rebuilt.
-- The migrator runs this file with foreign keys off, inside one transaction that also records
-- the migration, and checks `foreign_key_check` before it commits (see `pattern_db::migrate`).
-- Every table that references `agents(id)` keeps doing so: `id` stays unique.

CREATE TABLE agents_new (
    id               TEXT NOT NULL UNIQUE,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    external_id      TEXT NOT NULL,
    metadata         TEXT NOT NULL DEFAULT 'null',
    -- Bumped by every write of the agent's history (in the same transaction): readers keep
    -- caches valid with one lookup by id.
    revision         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    live_from        INTEGER NOT NULL DEFAULT 0,
    -- The agent's number: what its messages carry instead of its id.
    num              INTEGER PRIMARY KEY AUTOINCREMENT
);
INSERT INTO agents_new (id, organization_id, name, external_id, metadata, revision, created_at,
                        live_from)
    SELECT id, organization_id, name, external_id, metadata, revision, created_at, live_from
    FROM agents ORDER BY created_at, id;
DROP TABLE agents;
ALTER TABLE agents_new RENAME TO agents;
CREATE UNIQUE INDEX agents_name_in_organization ON agents (organization_id, name);
CREATE UNIQUE INDEX agents_external_id_in_organization ON agents (organization_id, external_id);

-- Each pair of hex digits and its byte, to turn a UUID's text into its 16 bytes: SQLite before
-- 3.41 (the `sqlite3` shell `cargo xtask sqlx prepare` may bootstrap with) has no `unhex`. `||`
-- joins the bytes as text of those bytes; `CAST(... AS BLOB)` keeps them.
CREATE TEMP TABLE hex_byte (pair TEXT PRIMARY KEY, byte BLOB NOT NULL) WITHOUT ROWID;
INSERT INTO hex_byte (pair, byte) VALUES
    ('00', X'00'), ('01', X'01'), ('02', X'02'), ('03', X'03'), ('04', X'04'), ('05', X'05'),
    ('06', X'06'), ('07', X'07'), ('08', X'08'), ('09', X'09'), ('0a', X'0A'), ('0b', X'0B'),
    ('0c', X'0C'), ('0d', X'0D'), ('0e', X'0E'), ('0f', X'0F'), ('10', X'10'), ('11', X'11'),
    ('12', X'12'), ('13', X'13'), ('14', X'14'), ('15', X'15'), ('16', X'16'), ('17', X'17'),
    ('18', X'18'), ('19', X'19'), ('1a', X'1A'), ('1b', X'1B'), ('1c', X'1C'), ('1d', X'1D'),
    ('1e', X'1E'), ('1f', X'1F'), ('20', X'20'), ('21', X'21'), ('22', X'22'), ('23', X'23'),
    ('24', X'24'), ('25', X'25'), ('26', X'26'), ('27', X'27'), ('28', X'28'), ('29', X'29'),
    ('2a', X'2A'), ('2b', X'2B'), ('2c', X'2C'), ('2d', X'2D'), ('2e', X'2E'), ('2f', X'2F'),
    ('30', X'30'), ('31', X'31'), ('32', X'32'), ('33', X'33'), ('34', X'34'), ('35', X'35'),
    ('36', X'36'), ('37', X'37'), ('38', X'38'), ('39', X'39'), ('3a', X'3A'), ('3b', X'3B'),
    ('3c', X'3C'), ('3d', X'3D'), ('3e', X'3E'), ('3f', X'3F'), ('40', X'40'), ('41', X'41'),
    ('42', X'42'), ('43', X'43'), ('44', X'44'), ('45', X'45'), ('46', X'46'), ('47', X'47'),
    ('48', X'48'), ('49', X'49'), ('4a', X'4A'), ('4b', X'4B'), ('4c', X'4C'), ('4d', X'4D'),
    ('4e', X'4E'), ('4f', X'4F'), ('50', X'50'), ('51', X'51'), ('52', X'52'), ('53', X'53'),
    ('54', X'54'), ('55', X'55'), ('56', X'56'), ('57', X'57'), ('58', X'58'), ('59', X'59'),
    ('5a', X'5A'), ('5b', X'5B'), ('5c', X'5C'), ('5d', X'5D'), ('5e', X'5E'), ('5f', X'5F'),
    ('60', X'60'), ('61', X'61'), ('62', X'62'), ('63', X'63'), ('64', X'64'), ('65', X'65'),
    ('66', X'66'), ('67', X'67'), ('68', X'68'), ('69', X'69'), ('6a', X'6A'), ('6b', X'6B'),
    ('6c', X'6C'), ('6d', X'6D'), ('6e', X'6E'), ('6f', X'6F'), ('70', X'70'), ('71', X'71'),
    ('72', X'72'), ('73', X'73'), ('74', X'74'), ('75', X'75'), ('76', X'76'), ('77', X'77'),
    ('78', X'78'), ('79', X'79'), ('7a', X'7A'), ('7b', X'7B'), ('7c', X'7C'), ('7d', X'7D'),
    ('7e', X'7E'), ('7f', X'7F'), ('80', X'80'), ('81', X'81'), ('82', X'82'), ('83', X'83'),
    ('84', X'84'), ('85', X'85'), ('86', X'86'), ('87', X'87'), ('88', X'88'), ('89', X'89'),
    ('8a', X'8A'), ('8b', X'8B'), ('8c', X'8C'), ('8d', X'8D'), ('8e', X'8E'), ('8f', X'8F'),
    ('90', X'90'), ('91', X'91'), ('92', X'92'), ('93', X'93'), ('94', X'94'), ('95', X'95'),
    ('96', X'96'), ('97', X'97'), ('98', X'98'), ('99', X'99'), ('9a', X'9A'), ('9b', X'9B'),
    ('9c', X'9C'), ('9d', X'9D'), ('9e', X'9E'), ('9f', X'9F'), ('a0', X'A0'), ('a1', X'A1'),
    ('a2', X'A2'), ('a3', X'A3'), ('a4', X'A4'), ('a5', X'A5'), ('a6', X'A6'), ('a7', X'A7'),
    ('a8', X'A8'), ('a9', X'A9'), ('aa', X'AA'), ('ab', X'AB'), ('ac', X'AC'), ('ad', X'AD'),
    ('ae', X'AE'), ('af', X'AF'), ('b0', X'B0'), ('b1', X'B1'), ('b2', X'B2'), ('b3', X'B3'),
    ('b4', X'B4'), ('b5', X'B5'), ('b6', X'B6'), ('b7', X'B7'), ('b8', X'B8'), ('b9', X'B9'),
    ('ba', X'BA'), ('bb', X'BB'), ('bc', X'BC'), ('bd', X'BD'), ('be', X'BE'), ('bf', X'BF'),
    ('c0', X'C0'), ('c1', X'C1'), ('c2', X'C2'), ('c3', X'C3'), ('c4', X'C4'), ('c5', X'C5'),
    ('c6', X'C6'), ('c7', X'C7'), ('c8', X'C8'), ('c9', X'C9'), ('ca', X'CA'), ('cb', X'CB'),
    ('cc', X'CC'), ('cd', X'CD'), ('ce', X'CE'), ('cf', X'CF'), ('d0', X'D0'), ('d1', X'D1'),
    ('d2', X'D2'), ('d3', X'D3'), ('d4', X'D4'), ('d5', X'D5'), ('d6', X'D6'), ('d7', X'D7'),
    ('d8', X'D8'), ('d9', X'D9'), ('da', X'DA'), ('db', X'DB'), ('dc', X'DC'), ('dd', X'DD'),
    ('de', X'DE'), ('df', X'DF'), ('e0', X'E0'), ('e1', X'E1'), ('e2', X'E2'), ('e3', X'E3'),
    ('e4', X'E4'), ('e5', X'E5'), ('e6', X'E6'), ('e7', X'E7'), ('e8', X'E8'), ('e9', X'E9'),
    ('ea', X'EA'), ('eb', X'EB'), ('ec', X'EC'), ('ed', X'ED'), ('ee', X'EE'), ('ef', X'EF'),
    ('f0', X'F0'), ('f1', X'F1'), ('f2', X'F2'), ('f3', X'F3'), ('f4', X'F4'), ('f5', X'F5'),
    ('f6', X'F6'), ('f7', X'F7'), ('f8', X'F8'), ('f9', X'F9'), ('fa', X'FA'), ('fb', X'FB'),
    ('fc', X'FC'), ('fd', X'FD'), ('fe', X'FE'), ('ff', X'FF');

CREATE TABLE messages_new (
    -- The UUID's 16 bytes (they sort as its text does).
    id              BLOB PRIMARY KEY NOT NULL CHECK (typeof(id) = 'blob' AND length(id) = 16),
    agent           INTEGER NOT NULL REFERENCES agents(num) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    batch_id        INTEGER NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    sequence_num    INTEGER NOT NULL CHECK (sequence_num >= 0),
    -- 0 user_request, 1 agent_to_agent, 2 system_trigger, 3 continuation
    batch_type      INTEGER NOT NULL CHECK (batch_type BETWEEN 0 AND 3),
    -- 0 system, 1 user, 2 assistant, 3 tool
    role            INTEGER NOT NULL CHECK (role BETWEEN 0 AND 3),
    content         TEXT NOT NULL,
    token_estimate  INTEGER NOT NULL,
    archived        INTEGER NOT NULL DEFAULT 0,
    deleted         INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL
);
INSERT INTO messages_new (id, agent, position, batch_id, sequence_num, batch_type, role, content,
                          token_estimate, archived, deleted, created_at)
    SELECT CAST((SELECT byte FROM hex_byte WHERE pair = substr(m.h, 1, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 3, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 5, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 7, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 9, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 11, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 13, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 15, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 17, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 19, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 21, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 23, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 25, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 27, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 29, 2))
                || (SELECT byte FROM hex_byte WHERE pair = substr(m.h, 31, 2)) AS BLOB),
           a.num, m.position, m.batch_id, m.sequence_num,
           CASE m.batch_type WHEN 'user_request' THEN 0 WHEN 'agent_to_agent' THEN 1
                             WHEN 'system_trigger' THEN 2 WHEN 'continuation' THEN 3 END,
           CASE m.role WHEN 'system' THEN 0 WHEN 'user' THEN 1 WHEN 'assistant' THEN 2
                       WHEN 'tool' THEN 3 END,
           CASE WHEN json_valid(m.content) AND json_type(m.content) = 'array'
                     AND json_array_length(m.content) = 1
                     AND json_type(m.content, '$[0]') = 'object'
                     AND json_extract(m.content, '$[0].type') = 'text'
                     AND json_type(m.content, '$[0].text') = 'text'
                     AND (SELECT COUNT(*) FROM json_each(m.content, '$[0]')) = 2
                     AND substr(json_extract(m.content, '$[0].text'), 1, 1) <> '['
                THEN json_extract(m.content, '$[0].text') ELSE m.content END,
           m.token_estimate, m.archived, m.deleted, m.created_at
    FROM (SELECT *, rowid AS r, replace(lower(id), '-', '') AS h FROM messages) m
    JOIN agents a ON a.id = m.agent_id
    ORDER BY m.r;
DROP TABLE hex_byte;
DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;
CREATE UNIQUE INDEX messages_by_position ON messages (agent, position);
CREATE UNIQUE INDEX messages_by_batch ON messages (batch_id, sequence_num);
