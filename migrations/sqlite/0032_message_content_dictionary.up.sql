-- Purpose: marks a database whose compressed message content may name the built-in dictionary
-- (`pattern_db_sqlite::messages`, id 1617573300): a build before 0032 cannot read such frames, and
-- refuses a database with a migration it does not know instead of failing on its rows. The
-- schema does not change.
SELECT 1;
