-- Seeds the `search` scenario's data set into a migrated, otherwise empty database
-- (the data set of src/bin/orbit-bench/search.rs):
-- 100 orbits, 1,000,000 contributions, 100,000 memory records, 1,000 problems and
-- 1,000 tasks. Words: `w0`..`w4999`, skewed (w0 is the most frequent), eight per
-- body; `tenpercent` in every tenth contribution (100,000 rows); `rare<k>` in ten
-- contributions each. Deterministic (setseed). The GIN indexes are dropped for the
-- load and built again at the end, which is much faster than a million inserts
-- into them.
--
--   psql "$URL" -v ON_ERROR_STOP=1 -f src/bin/orbit-bench/search_seed.sql
--
-- src/bin/orbit-bench/search.rs runs it through diesel (lines starting with a backslash are
-- psql's own and skipped there).
\timing on
SELECT setseed(0.42);
DROP INDEX IF EXISTS contributions_search_idx, memory_records_search_idx;

INSERT INTO contributors (type, name) VALUES ('AGENT', 'search-bench');
INSERT INTO orbits (slug, name, join_policy, created_by)
SELECT 'search-' || o, 'Search bench orbit ' || o, 'OPEN', (SELECT max(id) FROM contributors)
FROM generate_series(1, 100) o;

CREATE TEMP TABLE seed_orbits AS
SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM orbits WHERE slug LIKE 'search-%';
-- Rows are inserted in `g` order (ids follow it) and spread over the orbits
-- independently of the words.

CREATE FUNCTION pg_temp.w() RETURNS text LANGUAGE sql VOLATILE AS
  $$ SELECT 'w' || floor(5000 * random() ^ 3)::int $$;

INSERT INTO contributions (orbit_id, kind, author_id, title, body, created_at, updated_at)
SELECT so.id, 'NOTE', (SELECT max(id) FROM contributors),
       'note ' || pg_temp.w() || ' ' || pg_temp.w(),
       concat_ws(' ', pg_temp.w(), pg_temp.w(), pg_temp.w(), pg_temp.w(), pg_temp.w(),
                 pg_temp.w(), pg_temp.w(), pg_temp.w(),
                 CASE WHEN g % 10 = 0 THEN 'tenpercent' END,
                 'rare' || (g % 100000)),
       now(), now()
FROM generate_series(1, 1000000) g JOIN seed_orbits so ON so.n = (hashint4(g)::bigint + 2147483648) % 100
ORDER BY g;

INSERT INTO memory_records (orbit_id, author_id, content, tags)
SELECT so.id, (SELECT max(id) FROM contributors),
       concat_ws(' ', 'memory', pg_temp.w(), pg_temp.w(), pg_temp.w(), pg_temp.w()),
       ARRAY[pg_temp.w()]
FROM generate_series(1, 100000) g JOIN seed_orbits so ON so.n = (hashint4(g)::bigint + 2147483648) % 100
ORDER BY g;

INSERT INTO problems (orbit_id, title, statement, created_by)
SELECT so.id, 'problem ' || pg_temp.w(), concat_ws(' ', pg_temp.w(), pg_temp.w()),
       (SELECT max(id) FROM contributors)
FROM generate_series(1, 1000) g JOIN seed_orbits so ON so.n = g % 100;
INSERT INTO tasks (orbit_id, title, description, created_by)
SELECT so.id, 'task ' || pg_temp.w(), concat_ws(' ', pg_temp.w(), pg_temp.w()),
       (SELECT max(id) FROM contributors)
FROM generate_series(1, 1000) g JOIN seed_orbits so ON so.n = g % 100;

CREATE INDEX contributions_search_idx ON contributions USING gin (search)
    WITH (fastupdate = off);
CREATE INDEX memory_records_search_idx ON memory_records USING gin (search)
    WITH (fastupdate = off);
-- after the load (VACUUM cannot share a multi-statement string with the rest)
VACUUM ANALYZE contributions, memory_records, problems, tasks, orbits;
