-- The compound token types mapped again as migration 8 left them (`english`'s
-- stemmer for an ASCII compound, `simple` for the others), migration 28's
-- `orbit_search_text`, and the search columns made again with them.

ALTER TEXT SEARCH CONFIGURATION orbit_search
    ADD MAPPING FOR asciihword WITH english_stem;
ALTER TEXT SEARCH CONFIGURATION orbit_search
    ADD MAPPING FOR hword, numhword WITH simple;

CREATE OR REPLACE FUNCTION orbit_search_text(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT translate(t, E'</@.:\uE002\uE003\uE004\uE005\uE006',
                             E'\uE002\uE003\uE004\uE005\uE006\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD') $$;

ALTER TABLE contributions DROP COLUMN search;
ALTER TABLE contributions ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, orbit_search_text(title)), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, orbit_search_text(body)), 'B')
) STORED;
ALTER TABLE problems DROP COLUMN search;
ALTER TABLE problems ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, orbit_search_text(title)), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, orbit_search_text(statement)), 'B')
) STORED;
ALTER TABLE tasks DROP COLUMN search;
ALTER TABLE tasks ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, orbit_search_text(title)), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, orbit_search_text(description)), 'B')
) STORED;
ALTER TABLE memory_records DROP COLUMN search;
ALTER TABLE memory_records ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig,
                          orbit_search_text(orbit_search_tags(tags))), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, orbit_search_text(content)), 'B')
) STORED;

CREATE INDEX contributions_search_idx ON contributions USING gin (search)
    WITH (fastupdate = off);
CREATE INDEX problems_search_idx ON problems USING gin (search) WITH (fastupdate = off);
CREATE INDEX tasks_search_idx ON tasks USING gin (search) WITH (fastupdate = off);
CREATE INDEX memory_records_search_idx ON memory_records USING gin (search)
    WITH (fastupdate = off);
