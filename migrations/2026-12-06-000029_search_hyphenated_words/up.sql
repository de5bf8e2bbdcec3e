-- A hyphenated word is searched by its parts (docs/DECISIONS.md "Search").
-- PostgreSQL's parser reads `rate-limit` as the compound `rate-limit` and then as
-- its parts `rate` and `limit`, and `orbit_search` indexed all three; a query term
-- `rate-limit` became the phrase `'rate-limit' <-> 'rate' <-> 'limit'`, which only
-- a text holding the compound matches, so `rate-limit` missed "rate limit" and
-- "rate/limit" while `rate/limit` found all three (a hostile probe, 2026-12-06).
-- Without a mapping for the compound token types, a hyphenated word is its parts,
-- adjacent, in the text and in a query alike: `rate-limit` is the phrase `'rate'
-- <-> 'limit'`, as `rate/limit` and `"rate limit"` are.
--
-- A hyphen before a digit is no compound to the parser: `utf-8`, `ISO-8601`,
-- `x86-64` and `covid-19` were a word and a negative number (`'utf' <-> '-8'`), so
-- `8601` or `iso 8601` did not find `ISO-8601`. `orbit_search_text` now also turns
-- a `-` between a letter or digit and a digit into U+E007, a separator like
-- migration 28's (given back as `-` in snippets: `store::search::SEPARATORS`; an
-- original U+E007 becomes U+FFFD). A `-` that starts a number (`-12`, ` -3.5`)
-- keeps its sign.
--
-- The stored `search` columns are made again with the new configuration (each
-- table is rewritten once, its GIN index built again), as migration 28 did.

ALTER TEXT SEARCH CONFIGURATION orbit_search
    DROP MAPPING FOR asciihword, hword, numhword;

CREATE OR REPLACE FUNCTION orbit_search_text(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT CASE WHEN strpos(t, '-') = 0
        THEN translate(t, E'</@.:\uE002\uE003\uE004\uE005\uE006\uE007',
                       E'\uE002\uE003\uE004\uE005\uE006\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD')
        ELSE regexp_replace(
            translate(t, E'</@.:\uE002\uE003\uE004\uE005\uE006\uE007',
                      E'\uE002\uE003\uE004\uE005\uE006\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD'),
            '(?<=[[:alnum:]])-(?=[[:digit:]])', E'\uE007', 'g')
        END $$;

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
