-- Quick writes in groups (src/quick.rs, docs/ARCHITECTURE.md "Quick writes").
--
-- Migration 2026-11-30-000006 made the successful case of a lease acquire, a
-- checkpoint and a release one statement each. Writers of one busy orbit still
-- queued on its row: each held the lock from its revision update to the end of its
-- commit's WAL flush, then handed it to the next, about 0.7 ms a write on a small
-- machine. Here the same writes run in groups: one statement, one transaction, one
-- commit for all the writes that queued in one instance while the previous group
-- ran (`quick_batch`). Each write runs in its own subtransaction (a PL/pgSQL block
-- with an exception handler), with exactly the statements of the one-write
-- functions it replaces; a write that is not plainly the successful case raises
-- `quick_declined` as before, and only its subtransaction rolls back: nothing of it
-- remains, and the service runs it through the ordinary path after the group
-- commits. The changes of the writes that succeeded are applied last, orbit by
-- orbit in ascending id order (so groups never wait on each other's orbit rows in a
-- cycle), each orbit's in the order its writes ran: one lock per orbit, held from
-- its first revision to the group's commit.
--
-- The effect functions below are the one-write functions of migration 6 with the
-- last step (`apply_change`) left to the caller: they return the change to apply.
-- What they restate from src/fence.rs, src/store/tasks.rs and the response types is
-- named in migration 6's header, and tests/api/quick.rs holds it byte for byte.

DROP FUNCTION quick_release_lease(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION quick_checkpoint(bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION quick_acquire_lease(bigint, bigint, bigint, text, text, text, int);

-- A write's change, as `apply_change` takes it, and its place in the group.
CREATE TYPE quick_effect AS (
    idx int, orbit bigint, kind text, entity_type text, entity_id bigint, task bigint,
    contributor bigint, summary text, key_id bigint, status int2, body text);

-- POST /api/v1/tasks/{task}/leases (`api::leases::acquire`): a member acquires an
-- OPEN task with no open lease and no pending handoff.
CREATE FUNCTION quick_acquire_effect(
    p_token bigint, p_task bigint, p_seconds bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int)
RETURNS quick_effect LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_task record;
    v_lease leases;
BEGIN
    SELECT * INTO v_task
    FROM quick_task(v_caller.id, p_task, p_scope, p_key, p_fingerprint, p_retention);
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
    VALUES (p_task, v_task.orbit_id, v_caller.id, v_task.lease_version + 1, v_task.now,
            v_task.now + make_interval(secs => p_seconds))
    RETURNING * INTO v_lease;
    RETURN ROW(NULL, v_task.orbit_id, 'lease.acquired', 'lease', v_lease.id, p_task,
        v_caller.id, 'lease v' || v_lease.lease_version || ' acquired on task ' || p_task,
        v_task.key_id, 201, json_lease_response(v_lease, v_caller))::quick_effect;
END $$;

-- POST /api/v1/tasks/{task}/checkpoints (`api::checkpoints::create`) without
-- artifacts: the caller's active lease is the task's current one and no handoff is
-- pending. `p_state` is the canonical form of the state, `p_hash` its SHA-256.
CREATE FUNCTION quick_checkpoint_effect(
    p_token bigint, p_task bigint, p_lease_version bigint, p_summary text,
    p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int)
RETURNS quick_effect LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_task record;
    v_sequence bigint;
    v_checkpoint checkpoints;
BEGIN
    SELECT * INTO v_task
    FROM quick_task(v_caller.id, p_task, p_scope, p_key, p_fingerprint, p_retention);
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
    VALUES (p_task, v_task.orbit_id, p_lease_version, v_sequence, v_caller.id, p_summary,
            p_state, p_hash, '{}', v_task.now)
    RETURNING * INTO v_checkpoint;
    -- The body is `store::tasks::Checkpoint`, field for field.
    RETURN ROW(NULL, v_task.orbit_id, 'checkpoint.created', 'checkpoint', v_checkpoint.id,
        p_task, v_caller.id,
        'checkpoint ' || v_sequence || ' of task ' || p_task || ' under lease v'
            || p_lease_version,
        v_task.key_id, 201,
        '{"data":{"id":' || v_checkpoint.id || ',"task_id":' || p_task
        || ',"orbit_id":' || v_task.orbit_id || ',"lease_version":' || p_lease_version
        || ',"sequence":' || v_sequence || ',"author":' || json_actor(v_caller)
        || ',"summary":' || to_json(p_summary)::text || ',"state":' || p_state
        || ',"state_hash":' || to_json(p_hash)::text || ',"artifact_ids":[]'
        || ',"created_at":"' || json_ts(v_checkpoint.created_at)
        || '","orbit_revision":-9223372036854775807}}')::quick_effect;
END $$;

-- POST /api/v1/leases/{lease}/release (`api::leases::release`): the caller releases
-- the task's current, active lease, which is theirs and the one the path names.
CREATE FUNCTION quick_release_effect(
    p_token bigint, p_lease bigint, p_lease_version bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int)
RETURNS quick_effect LANGUAGE plpgsql AS $$
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
    RETURN ROW(NULL, v_task.orbit_id, 'lease.released', 'lease', p_lease, v_task_id,
        v_caller.id, 'lease v' || p_lease_version || ' released',
        v_task.key_id, 200, json_lease_response(v_lease, v_caller))::quick_effect;
END $$;

-- One quick write's effect, by kind (`p_call`: 1 acquire, 2 checkpoint, 3 release;
-- `p_target` the task, or the lease of a release; `p_number` the lease's seconds, or
-- the lease version).
CREATE FUNCTION quick_effect_of(
    p_call int2, p_token bigint, p_target bigint, p_number bigint,
    p_summary text, p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int)
RETURNS quick_effect LANGUAGE plpgsql AS $$
BEGIN
    IF p_call = 1 THEN
        RETURN quick_acquire_effect(p_token, p_target, p_number,
            p_scope, p_key, p_fingerprint, p_retention);
    ELSIF p_call = 2 THEN
        RETURN quick_checkpoint_effect(p_token, p_target, p_number,
            p_summary, p_state, p_hash, p_scope, p_key, p_fingerprint, p_retention);
    ELSE
        RETURN quick_release_effect(p_token, p_target, p_number,
            p_scope, p_key, p_fingerprint, p_retention);
    END IF;
END $$;

-- Applies a quick write's change (`apply_change`); its revision.
CREATE FUNCTION quick_apply(e quick_effect) RETURNS bigint LANGUAGE sql AS $$
    SELECT apply_change(e.orbit, e.kind, e.entity_type, e.entity_id, e.task,
        e.contributor, e.summary, e.key_id, e.status, convert_to(e.body, 'UTF8'))
$$;

-- One quick write alone (a group of one, the common case when an orbit's agents do
-- not overlap): its effect and its change, with no subtransaction (which would take
-- a transaction id of its own). If it declines, the statement fails and its
-- transaction rolls back, the same outcome for the one write.
CREATE FUNCTION quick_write(
    p_call int2, p_token bigint, p_target bigint, p_number bigint,
    p_summary text, p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    OUT out_index int, OUT out_orbit bigint, OUT out_revision bigint, OUT out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_effect quick_effect := quick_effect_of(p_call, p_token, p_target, p_number,
        p_summary, p_state, p_hash, p_scope, p_key, p_fingerprint, p_retention);
BEGIN
    out_index := 1;
    out_orbit := v_effect.orbit;
    out_revision := quick_apply(v_effect);
    out_body := v_effect.body;
END $$;

-- A group of quick writes, element i of every array being write i's arguments (as
-- `quick_effect_of` takes them). Returns one row per write that was done
-- (`out_index` is its i, from 1); a write with no row declined and changed nothing.
CREATE FUNCTION quick_batch(
    p_call int2[], p_token bigint[], p_target bigint[], p_number bigint[],
    p_summary text[], p_state text[], p_hash text[],
    p_scope text[], p_key text[], p_fingerprint text[], p_retention int[])
RETURNS TABLE (out_index int, out_orbit bigint, out_revision bigint, out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_done quick_effect[] := '{}';
    v_effect quick_effect;
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    -- A write of a group does not wait for a lock another transaction holds (its
    -- task, its key): it declines at once and the ordinary path waits for it, after
    -- the group. Waits would add up across the group's writes, hold up the others,
    -- and could meet another writer's in a cycle. The apply phase below waits as
    -- usual: there the orbit's other writers hold its row only to their commit.
    PERFORM set_config('lock_timeout', '20ms', true);
    FOR i IN 1 .. coalesce(cardinality(p_call), 0) LOOP
        BEGIN
            v_effect := quick_effect_of(p_call[i], p_token[i], p_target[i], p_number[i],
                p_summary[i], p_state[i], p_hash[i],
                p_scope[i], p_key[i], p_fingerprint[i], p_retention[i]);
            v_effect.idx := i;
            v_done := v_done || v_effect;
        EXCEPTION WHEN others THEN
            -- Declined, or failed (a lock held elsewhere...): this write's
            -- subtransaction rolled back; the ordinary path decides. A failure that
            -- is not a decline goes to the server's log.
            IF SQLERRM <> 'quick_declined' THEN
                RAISE LOG 'quick write % of a group failed (%): %', i, SQLSTATE, SQLERRM;
            END IF;
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_lock_timeout, true);
    FOR v_effect IN SELECT * FROM unnest(v_done) ORDER BY orbit, idx LOOP
        out_index := v_effect.idx;
        out_orbit := v_effect.orbit;
        out_revision := quick_apply(v_effect);
        out_body := v_effect.body;
        RETURN NEXT;
    END LOOP;
END $$;
