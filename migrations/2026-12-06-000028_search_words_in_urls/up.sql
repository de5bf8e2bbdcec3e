-- Words inside URLs, paths, host names and e-mail addresses are searched
-- (docs/DECISIONS.md "Search"). PostgreSQL's text search parser reads
-- `https://example.com/a?x=1`, `/usr/lib/libfoo.so`, `example.com` and
-- `bot@example.com` each as one token (url, file, host, email), so `libfoo`,
-- `example` or `bot` found nothing, nor did a URL typed as stored unless quoted
-- (a hostile probe, 2026-12-06). `orbit_search_text` now also turns `/`, `@`, `.`
-- and `:` into characters the parser separates words at (U+E003..U+E006, beside
-- migration 27's U+E002 for `<`; an original U+E002..U+E006 becomes U+FFFD), so
-- such a text is read as its words; a snippet turns each back
-- (`store::search::SEPARATORS`). Every searched text and every query is read
-- through it, so `example.com/a` finds what it names.
--
-- The stored `search` columns are made again from it (each table is rewritten
-- once, its GIN index built again), as migration 27 did.

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
