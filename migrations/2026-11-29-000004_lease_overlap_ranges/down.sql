ALTER TABLE leases DROP CONSTRAINT leases_no_overlap;
ALTER TABLE leases ADD CONSTRAINT leases_task_id_tstzrange_excl EXCLUDE USING gist (
    task_id WITH =,
    tstzrange(acquired_at, COALESCE(released_at, expires_at), '[)') WITH &&
);
