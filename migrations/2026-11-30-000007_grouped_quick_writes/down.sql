-- Restores the one-write functions of migration 2026-11-30-000006 (a service built
-- before this migration calls them), as that migration defined them.
DROP FUNCTION quick_batch(int2[], bigint[], bigint[], bigint[], text[], text[], text[],
                          text[], text[], text[], int[]);
DROP FUNCTION quick_write(int2, bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION quick_apply(quick_effect);
DROP FUNCTION quick_effect_of(int2, bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION quick_release_effect(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION quick_checkpoint_effect(bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION quick_acquire_effect(bigint, bigint, bigint, text, text, text, int);
DROP TYPE quick_effect;

-- POST /api/v1/tasks/{task}/leases (`api::leases::acquire`): a member acquires an
-- OPEN task with no open lease and no pending handoff.
CREATE FUNCTION quick_acquire_lease(
    p_token bigint, p_task bigint, p_seconds bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    OUT out_orbit bigint, OUT out_revision bigint, OUT out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_task record;
    v_lease leases;
BEGIN
    SELECT * INTO v_task
    FROM quick_task(v_caller.id, p_task, p_scope, p_key, p_fingerprint, p_retention);
    out_orbit := v_task.orbit_id;
    IF v_task.status <> 'OPEN'
       OR EXISTS (SELECT 1 FROM leases WHERE task_id = p_task
                  AND lease_version = v_task.lease_version AND end_reason IS NULL)
       OR EXISTS (SELECT 1 FROM handoffs WHERE task_id = p_task AND status = 'PENDING') THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    UPDATE tasks SET lease_version = v_task.lease_version + 1, updated_at = v_task.now
    WHERE id = p_task;
    INSERT INTO leases (task_id, orbit_id, contributor_id, lease_version, acquired_at,
                        expires_at)
    VALUES (p_task, out_orbit, v_caller.id, v_task.lease_version + 1, v_task.now,
            v_task.now + make_interval(secs => p_seconds))
    RETURNING * INTO v_lease;
    out_body := json_lease_response(v_lease, v_caller);
    out_revision := apply_change(out_orbit, 'lease.acquired', 'lease', v_lease.id, p_task,
        v_caller.id, 'lease v' || v_lease.lease_version || ' acquired on task ' || p_task,
        v_task.key_id, 201::int2, convert_to(out_body, 'UTF8'));
END $$;

-- POST /api/v1/tasks/{task}/checkpoints (`api::checkpoints::create`) without
-- artifacts: the caller's active lease is the task's current one and no handoff is
-- pending. `p_state` is the canonical form of the state, `p_hash` its SHA-256.
CREATE FUNCTION quick_checkpoint(
    p_token bigint, p_task bigint, p_lease_version bigint, p_summary text,
    p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    OUT out_orbit bigint, OUT out_revision bigint, OUT out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_task record;
    v_sequence bigint;
    v_checkpoint checkpoints;
BEGIN
    SELECT * INTO v_task
    FROM quick_task(v_caller.id, p_task, p_scope, p_key, p_fingerprint, p_retention);
    out_orbit := v_task.orbit_id;
    IF v_task.lease_version <> p_lease_version
       OR NOT EXISTS (SELECT 1 FROM leases WHERE task_id = p_task
                      AND lease_version = p_lease_version AND contributor_id = v_caller.id
                      AND end_reason IS NULL AND expires_at > v_task.now)
       OR EXISTS (SELECT 1 FROM handoffs WHERE task_id = p_task AND status = 'PENDING') THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    UPDATE tasks SET checkpoint_sequence = checkpoint_sequence + 1, updated_at = v_task.now
    WHERE id = p_task
    RETURNING checkpoint_sequence INTO v_sequence;
    INSERT INTO checkpoints (task_id, orbit_id, lease_version, sequence, author_id, summary,
                             state, state_hash, artifact_ids, created_at)
    VALUES (p_task, out_orbit, p_lease_version, v_sequence, v_caller.id, p_summary, p_state,
            p_hash, '{}', v_task.now)
    RETURNING * INTO v_checkpoint;
    -- `store::tasks::Checkpoint`, field for field.
    out_body := '{"data":{"id":' || v_checkpoint.id || ',"task_id":' || p_task
        || ',"orbit_id":' || out_orbit || ',"lease_version":' || p_lease_version
        || ',"sequence":' || v_sequence || ',"author":' || json_actor(v_caller)
        || ',"summary":' || to_json(p_summary)::text || ',"state":' || p_state
        || ',"state_hash":' || to_json(p_hash)::text || ',"artifact_ids":[]'
        || ',"created_at":"' || json_ts(v_checkpoint.created_at)
        || '","orbit_revision":-9223372036854775807}}';
    out_revision := apply_change(out_orbit, 'checkpoint.created', 'checkpoint',
        v_checkpoint.id, p_task, v_caller.id,
        'checkpoint ' || v_sequence || ' of task ' || p_task || ' under lease v'
            || p_lease_version,
        v_task.key_id, 201::int2, convert_to(out_body, 'UTF8'));
END $$;

-- POST /api/v1/leases/{lease}/release (`api::leases::release`): the caller releases
-- the task's current, active lease, which is theirs and the one the path names.
CREATE FUNCTION quick_release_lease(
    p_token bigint, p_lease bigint, p_lease_version bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    OUT out_orbit bigint, OUT out_revision bigint, OUT out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_task_id bigint;
    v_task record;
    v_lease leases;
BEGIN
    SELECT l.task_id INTO v_task_id FROM leases l
    WHERE l.id = p_lease AND l.lease_version = p_lease_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    SELECT * INTO v_task
    FROM quick_task(v_caller.id, v_task_id, p_scope, p_key, p_fingerprint, p_retention);
    out_orbit := v_task.orbit_id;
    IF v_task.lease_version <> p_lease_version THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    UPDATE leases SET released_at = v_task.now, end_reason = 'RELEASED'
    WHERE id = p_lease AND contributor_id = v_caller.id AND end_reason IS NULL
      AND expires_at > v_task.now
    RETURNING * INTO v_lease;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    out_body := json_lease_response(v_lease, v_caller);
    out_revision := apply_change(out_orbit, 'lease.released', 'lease', p_lease, v_task_id,
        v_caller.id, 'lease v' || p_lease_version || ' released',
        v_task.key_id, 200::int2, convert_to(out_body, 'UTF8'));
END $$;
