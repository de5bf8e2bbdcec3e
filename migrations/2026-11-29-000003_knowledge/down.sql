DROP INDEX leases_active_orbit_idx;
DROP TRIGGER tasks_counted_on_delete ON tasks;
DROP TRIGGER tasks_counted_on_update ON tasks;
DROP TRIGGER tasks_counted_on_insert ON tasks;
DROP FUNCTION tasks_counted_on_change();
DROP FUNCTION tasks_counted_on_insert();
DROP FUNCTION problem_task_counts_add(BIGINT, TEXT, BIGINT);
ALTER TABLE tasks
    DROP CONSTRAINT tasks_result_contribution_fk,
    DROP CONSTRAINT tasks_problem_fk;
DROP TABLE memory_records;
DROP TABLE artifacts;
DROP TABLE assessments;
DROP TABLE contribution_revisions;
DROP TABLE contributions;
DROP FUNCTION knowledge_immutable();
DROP TABLE problem_counters;
DROP TABLE problems;
