-- The search columns of migration 8 (text between `<` and `>` dropped again).
ALTER TABLE contributions DROP COLUMN search;
ALTER TABLE contributions ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, title), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, body), 'B')
) STORED;
ALTER TABLE problems DROP COLUMN search;
ALTER TABLE problems ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, title), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, statement), 'B')
) STORED;
ALTER TABLE tasks DROP COLUMN search;
ALTER TABLE tasks ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, title), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, description), 'B')
) STORED;
ALTER TABLE memory_records DROP COLUMN search;
ALTER TABLE memory_records ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, orbit_search_tags(tags)), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, content), 'B')
) STORED;
CREATE INDEX contributions_search_idx ON contributions USING gin (search)
    WITH (fastupdate = off);
CREATE INDEX problems_search_idx ON problems USING gin (search) WITH (fastupdate = off);
CREATE INDEX tasks_search_idx ON tasks USING gin (search) WITH (fastupdate = off);
CREATE INDEX memory_records_search_idx ON memory_records USING gin (search)
    WITH (fastupdate = off);
-- `orbit_search_text` stays: `search_tsquery` (src/db/functions.sql, applied at
-- every start) and the search's headlines call it.
