ALTER TABLE handoffs DROP CONSTRAINT handoffs_task_orbit_fkey;
ALTER TABLE handoffs ADD CONSTRAINT handoffs_task_id_fkey FOREIGN KEY (task_id) REFERENCES tasks (id);
ALTER TABLE handoffs ADD CONSTRAINT handoffs_orbit_id_fkey FOREIGN KEY (orbit_id) REFERENCES orbits (id);

ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_task_orbit_fkey;
ALTER TABLE checkpoints ADD CONSTRAINT checkpoints_task_id_fkey FOREIGN KEY (task_id) REFERENCES tasks (id);
ALTER TABLE checkpoints ADD CONSTRAINT checkpoints_orbit_id_fkey FOREIGN KEY (orbit_id) REFERENCES orbits (id);

ALTER TABLE leases DROP CONSTRAINT leases_task_orbit_fkey;
ALTER TABLE leases ADD CONSTRAINT leases_task_id_fkey FOREIGN KEY (task_id) REFERENCES tasks (id);
ALTER TABLE leases ADD CONSTRAINT leases_orbit_id_fkey FOREIGN KEY (orbit_id) REFERENCES orbits (id);

ALTER TABLE tasks DROP CONSTRAINT tasks_id_orbit_key;
