-- Seeds the `orbit-page` scenario's orbit (src/bin/orbit-bench/orbit_page.rs) into a
-- migrated database: one orbit `page-bench` with 20 members, 1,000 tasks (600 open,
-- 100 leased under active leases that outlast the run, 200 completed, 100
-- cancelled), 20 problems, 200 contributions (with their revision rows) and 10,000
-- changes, its revision 10,000. Deterministic; independent of the other seeds.
--
--   psql "$URL" -v ON_ERROR_STOP=1 -f src/bin/orbit-bench/orbit_page_seed.sql
INSERT INTO contributors (type, name, model_claim)
SELECT 'AGENT', 'page-agent-' || g, 'bench-model-' || (g % 3) FROM generate_series(1, 20) g;

CREATE TEMP TABLE page_agents AS
SELECT id, row_number() OVER (ORDER BY id) AS n FROM contributors WHERE name LIKE 'page-agent-%';

INSERT INTO orbits (slug, name, description, join_policy, created_by, revision)
SELECT 'page-bench', 'Orbit page bench',
       'An orbit with a thousand tasks and ten thousand changes, for the orbit page.',
       'OPEN', id, 10000
FROM page_agents WHERE n = 1;

CREATE TEMP TABLE page_orbit AS SELECT id FROM orbits WHERE slug = 'page-bench';

INSERT INTO memberships (orbit_id, contributor_id, role)
SELECT (SELECT id FROM page_orbit), a.id, CASE WHEN a.n = 1 THEN 'OWNER' ELSE 'CONTRIBUTOR' END
FROM page_agents a;

INSERT INTO problems (orbit_id, title, statement, created_by)
SELECT (SELECT id FROM page_orbit), 'Bench problem ' || g, 'What problem ' || g || ' is about.',
       (SELECT id FROM page_agents WHERE n = 1 + g % 20)
FROM generate_series(1, 20) g;
INSERT INTO problem_counters (problem_id)
SELECT id FROM problems WHERE orbit_id = (SELECT id FROM page_orbit);

-- Task g: g % 10 in 0..5 open, 6..7 completed, 8 cancelled, 9 open and leased.
INSERT INTO tasks (orbit_id, title, description, status, lease_version, created_by,
                   created_at, updated_at)
SELECT (SELECT id FROM page_orbit), 'Bench task ' || g || ': make step ' || g || ' work',
       'Description of task ' || g || '.',
       CASE WHEN g % 10 IN (6, 7) THEN 'COMPLETED' WHEN g % 10 = 8 THEN 'CANCELLED' ELSE 'OPEN' END,
       CASE WHEN g % 10 = 9 THEN 1 ELSE 0 END,
       (SELECT id FROM page_agents WHERE n = 1 + g % 20),
       now() - make_interval(mins => 1000 - g), now() - make_interval(mins => 1000 - g)
FROM generate_series(1, 1000) g ORDER BY g;

CREATE TEMP TABLE page_tasks AS
SELECT id, row_number() OVER (ORDER BY id) AS g FROM tasks
WHERE orbit_id = (SELECT id FROM page_orbit);

INSERT INTO leases (task_id, orbit_id, contributor_id, lease_version, acquired_at, expires_at)
SELECT t.id, (SELECT id FROM page_orbit), (SELECT id FROM page_agents WHERE n = 1 + t.g % 20),
       1, now() - interval '1 minute', now() + interval '1 day'
FROM page_tasks t WHERE t.g % 10 = 9;

INSERT INTO contributions (orbit_id, kind, author_id, title, body, created_at, updated_at)
SELECT (SELECT id FROM page_orbit), (ARRAY['ATTEMPT', 'OBSERVATION', 'CLAIM', 'QUESTION', 'NOTE'])[1 + g % 5],
       (SELECT id FROM page_agents WHERE n = 1 + g % 20),
       'Bench contribution ' || g, 'What contribution ' || g || ' found.', now(), now()
FROM generate_series(1, 200) g ORDER BY g;
INSERT INTO contribution_revisions (contribution_id, revision, title, body, created_at)
SELECT id, 1, title, body, created_at FROM contributions
WHERE orbit_id = (SELECT id FROM page_orbit);

INSERT INTO changes (orbit_id, revision, kind, entity_type, entity_id, task_id, contributor_id,
                     created_at, summary)
SELECT (SELECT id FROM page_orbit), r,
       (ARRAY['task.created', 'lease.acquired', 'checkpoint.created', 'lease.released'])[1 + r % 4],
       CASE WHEN r % 4 = 0 THEN 'task' WHEN r % 4 = 2 THEN 'checkpoint' ELSE 'lease' END,
       r, (SELECT id FROM page_tasks WHERE g = 1 + r % 1000),
       (SELECT id FROM page_agents WHERE n = 1 + r % 20),
       now() - make_interval(secs => 10000 - r), 'change ' || r
FROM generate_series(1, 10000) r;

ANALYZE tasks;
ANALYZE leases;
ANALYZE changes;
ANALYZE contributions;
ANALYZE memberships;
