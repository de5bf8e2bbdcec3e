-- Room on every page of `tasks` for the lease cycle's updates (issue 25). A task's
-- acquire and checkpoint update its row (`lease_version`, `checkpoint_sequence`,
-- `updated_at`, none of them indexed). On a full page the new version goes to
-- another page, and such an update adds an entry to every index of the table,
-- the search GIN index (`fastupdate = off`) included, where every task's words
-- meet; with free room on the page it is a HOT update and touches no index. New
-- pages keep a fifth free; pages written before keep their layout until rewritten.
ALTER TABLE tasks SET (fillfactor = 80);
