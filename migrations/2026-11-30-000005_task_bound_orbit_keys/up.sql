-- Leases, checkpoints and handoffs belong to a task and carry its orbit. Their
-- `orbit_id` used to reference `orbits (id)` directly, so every insert's foreign-key
-- check took a KEY SHARE lock on the orbit row, the very row whose revision counter
-- every write of that orbit updates. In a busy orbit the two lock modes, held by
-- different transactions at once, turn the row's xmax into a MultiXact: every later
-- read and update of the orbit row must then look up the MultiXact's members to
-- decide visibility, which made a hot orbit's writes about a third slower.
--
-- Referencing the task by `(id, orbit_id)` instead states a stronger rule (the row's
-- orbit is its task's orbit, not merely some orbit) and takes its KEY SHARE lock on
-- the task row, which the write has already locked FOR UPDATE (the fence), so the
-- check adds no lock and no MultiXact. One composite key replaces two checks.
ALTER TABLE tasks ADD CONSTRAINT tasks_id_orbit_key UNIQUE (id, orbit_id);

ALTER TABLE leases DROP CONSTRAINT leases_orbit_id_fkey;
ALTER TABLE leases DROP CONSTRAINT leases_task_id_fkey;
ALTER TABLE leases ADD CONSTRAINT leases_task_orbit_fkey
    FOREIGN KEY (task_id, orbit_id) REFERENCES tasks (id, orbit_id);

ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_orbit_id_fkey;
ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_task_id_fkey;
ALTER TABLE checkpoints ADD CONSTRAINT checkpoints_task_orbit_fkey
    FOREIGN KEY (task_id, orbit_id) REFERENCES tasks (id, orbit_id);

ALTER TABLE handoffs DROP CONSTRAINT handoffs_orbit_id_fkey;
ALTER TABLE handoffs DROP CONSTRAINT handoffs_task_id_fkey;
ALTER TABLE handoffs ADD CONSTRAINT handoffs_task_orbit_fkey
    FOREIGN KEY (task_id, orbit_id) REFERENCES tasks (id, orbit_id);
