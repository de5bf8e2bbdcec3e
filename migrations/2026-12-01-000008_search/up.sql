-- Full-text search (contract section 13, docs/DECISIONS.md "Search").
--
-- Each searched kind carries a stored generated `search` tsvector, so PostgreSQL
-- computes it inside the very statement that writes the row: every write path
-- (the API, the quick-write functions, a bulk load) indexes in the write's own
-- transaction, and a revised contribution's vector is its current text only (the
-- immutable `contribution_revisions` are not searched). An UPDATE that does not
-- set the source columns (the lease cycle's updates of `tasks`) does not
-- recompute it.
--
-- `orbit_search` is English for ASCII words (snowball stemming, English stop
-- words: `running` finds `run`) and `simple` for words with any other letter
-- (lowercased, never stemmed: `Straße`, `東京タワー` match exactly). Titles (and
-- memory tags) weigh A, bodies B.

CREATE TEXT SEARCH CONFIGURATION orbit_search (COPY = english);
ALTER TEXT SEARCH CONFIGURATION orbit_search
    ALTER MAPPING FOR word, hword, hword_part WITH simple;

-- array_to_string is STABLE in general (element output functions may depend on
-- settings); for text[] it is not, and a generated column needs IMMUTABLE.
CREATE FUNCTION orbit_search_tags(tags text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT array_to_string(tags, ' ') $$;

ALTER TABLE contributions ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, title), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, body), 'B')
) STORED;
ALTER TABLE problems ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, title), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, statement), 'B')
) STORED;
ALTER TABLE tasks ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, title), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, description), 'B')
) STORED;
ALTER TABLE memory_records ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('orbit_search'::regconfig, orbit_search_tags(tags)), 'A')
    || setweight(to_tsvector('orbit_search'::regconfig, content), 'B')
) STORED;

-- fastupdate off: a write puts its lexemes straight into the index, so a search
-- never scans a pending list that grows with the write rate (its latency stays
-- that of the posting lists it reads).
CREATE INDEX contributions_search_idx ON contributions USING gin (search)
    WITH (fastupdate = off);
CREATE INDEX problems_search_idx ON problems USING gin (search) WITH (fastupdate = off);
CREATE INDEX tasks_search_idx ON tasks USING gin (search) WITH (fastupdate = off);
CREATE INDEX memory_records_search_idx ON memory_records USING gin (search)
    WITH (fastupdate = off);
