-- Text between `<` and `>` is searched (docs/DECISIONS.md "Search"). PostgreSQL's
-- text search parser reads `<...>` as an HTML tag and drops it, so `a<b and c>d`,
-- `Result<Vec<u8>>` and `<stdio.h>` lost their words to search and their text to
-- the snippet (a hostile probe, 2026-12-05). Every searched text, and every query,
-- is now read through `orbit_search_text`, which turns `<` into U+E002, a
-- character the parser takes for a separator (and an original U+E002 into U+FFFD,
-- so a snippet can turn every U+E002 back into `<`: `store::search::LT`).
--
-- The stored `search` columns are made again from it (each table is rewritten
-- once, its GIN index built again): the columns of migration 8 otherwise.

CREATE FUNCTION orbit_search_text(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT translate(t, E'<\uE002', E'\uE002\uFFFD') $$;

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
