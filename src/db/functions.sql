-- The service's SQL functions: code, no data. Applied with CREATE OR REPLACE after
-- the migrations, under the migration lock, every time an instance starts
-- (`db::migrate`), so a change to a function is an edit here, never a migration
-- that restates the function (and a down.sql that restates the old one). A
-- migration still creates what holds data (tables, indexes, types such as
-- `quick_effect`), and so does a function that a stored column or an index is
-- built from (`orbit_search_tags`, migration 8, and `orbit_search_text`,
-- migrations 27, 28 and 29: the column needs it to exist, and
-- replacing it would not recompute the rows); a function whose arguments or result
-- type change needs a `DROP FUNCTION IF EXISTS` of the old signature just above
-- its new definition.
--
-- What they decide: `apply_change` is the one place a change is applied (revision,
-- change row, stored response) for both write paths, and `reserve_revisions` the
-- one way a group takes its orbit's revisions at once; `claim_key` is the one key
-- claim of both paths; `lease_verdict` and `acquire_verdict` are the one lease
-- decision (contract section 8) of both paths: `domain::fence` asks them in its
-- lock statement and only words the refusal they name, and the quick_* functions
-- ask the same functions; `member_role` and `token_use_due` are the membership
-- and the last-used rule both paths read; `lease_is_active` and `lease_end_reason`
-- how a lease reads at an instant, `handoff_is_live` and `handoff_status` how a
-- handoff does (every query, verdict and ending asks them);
-- `task_insert` and `contribution_insert` are the one insert of each for both
-- paths, `contribution_revise` the one write of a next revision, `lease_issue`,
-- `lease_end` and `checkpoint_insert` the one issue and ending of a lease and the
-- one insert of a checkpoint. The quick_*
-- functions run the successful case of the lease cycle, of task and contribution
-- creation with nothing to check, and of a revision, in groups (`perf::quick`,
-- docs/MECHANISMS.md "Quick writes") and decline
-- (`quick_declined`) everything else to the ordinary path. A decline decides
-- nothing: it only sends the write to the ordinary path, which asks the same
-- verdict. They render nothing: the response body and the change of a quick write
-- come from the service, rendered by the ordinary path's own types and functions
-- with marks where a value is not known before the statement (`domain::marks`), and
-- `quick_outcome` replaces each mark with the value of the column it names, of the
-- row the write wrote. tests/api/quick.rs holds the quick bodies to the ordinary
-- path's, byte for byte.

-- The one place a keyed write's response is stored, under the key `claim_key`
-- claimed: by `apply_change` for a write with a change, and by `Gate::finish` for a
-- keyed write without one (a webhook's creation...). A replay answers these bytes.
-- Returns whether the key's row was there. (Not void: `apply_change` calls it in an
-- assignment, which PL/pgSQL evaluates without starting an executor, where a
-- PERFORM would start one for every keyed write.)
CREATE OR REPLACE FUNCTION store_response(p_key bigint, p_status int2, p_body bytea)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE idempotency_keys SET response_status = p_status, response_body = p_body
    WHERE id = p_key;
    RETURN FOUND;
END $$;

-- The one place a change is applied: the orbit's revision advances by one (its row
-- lock orders the orbit's writers, so revisions are dense), the change row is
-- appended, and the response body gets the revision in place of the placeholder it
-- was built with (`revision::PENDING`): the one place the placeholder is filled.
-- A keyed write's response is stored so; the filled body is left in the session
-- setting `orbit.body` for the caller to send (`db::APPLY_PREPARE`, `quick_write`,
-- `quick_batch`), so the answer a client gets and the stored one are the same bytes
-- from the same code. The ordinary path calls it from the prepared `orbit_apply`.
-- A revision reserved by `reserve_revisions` for this orbit in this transaction is
-- taken instead of advancing the row: the reservation already holds the row's lock.
CREATE OR REPLACE FUNCTION apply_change(
    p_orbit bigint, p_kind text, p_entity_type text, p_entity_id bigint, p_task bigint,
    p_contributor bigint, p_summary text, p_key bigint, p_status int2, p_body bytea)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_revision bigint;
    v_body text;
    v_reserved text := current_setting('orbit.reserved', true);
    v_next bigint;
    v_last bigint;
    v_stored boolean;
BEGIN
    IF v_reserved IS NOT NULL AND v_reserved <> ''
       AND split_part(v_reserved, ':', 1)::bigint = p_orbit THEN
        v_next := split_part(v_reserved, ':', 2)::bigint;
        v_last := split_part(v_reserved, ':', 3)::bigint;
        v_reserved := set_config('orbit.reserved',
            CASE WHEN v_next < v_last
                 THEN p_orbit || ':' || (v_next + 1) || ':' || v_last ELSE '' END,
            true);
    END IF;
    -- One statement for both (one executor start, not two); with a reserved
    -- revision the row is not updated.
    WITH bumped AS (
        UPDATE orbits SET revision = revision + 1
        WHERE id = p_orbit AND v_next IS NULL RETURNING revision)
    INSERT INTO changes (orbit_id, revision, kind, entity_type, entity_id, task_id,
                         contributor_id, summary, created_at)
    SELECT p_orbit, coalesce(v_next, (SELECT revision FROM bumped)), p_kind, p_entity_type,
           p_entity_id, p_task, p_contributor, p_summary, clock_timestamp()
    RETURNING revision INTO STRICT v_revision;
    v_body := replace(convert_from(p_body, 'UTF8'),
        '"orbit_revision":-9223372036854775807', '"orbit_revision":' || v_revision);
    IF p_key IS NOT NULL THEN
        v_stored := store_response(p_key, p_status, convert_to(v_body, 'UTF8'));
    END IF;
    -- An assignment, not PERFORM: PL/pgSQL evaluates it without starting the executor.
    v_body := set_config('orbit.body', v_body, false);
    RETURN v_revision;
END $$;

-- A group that applies `p_count` changes to one orbit in a row takes their
-- revisions at once: one new version of the orbit's row instead of one a change.
-- (A hot orbit's row is updated by every write; at thousands a second its dead
-- versions outran pruning, and every lookup of the row, each foreign-key check of
-- an insert into the orbit among them, walked them: docs/PERFORMANCE.md, "The hot
-- orbit's row".) The reservation lives in the transaction-local setting
-- `orbit.reserved` (`orbit:next:last`), which `apply_change` takes from in order;
-- the caller applies exactly `p_count` changes to the orbit next, in the same
-- statement, and `revisions_spent` checks that none is left. A count under two
-- reserves nothing. Returns the last reserved revision.
CREATE OR REPLACE FUNCTION reserve_revisions(p_orbit bigint, p_count int)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_last bigint;
    v_set text;
BEGIN
    PERFORM revisions_spent();
    IF p_count < 2 THEN
        RETURN NULL;
    END IF;
    UPDATE orbits SET revision = revision + p_count WHERE id = p_orbit
    RETURNING revision INTO STRICT v_last;
    v_set := set_config('orbit.reserved',
        p_orbit || ':' || (v_last - p_count + 1) || ':' || v_last, true);
    RETURN v_last;
END $$;

-- Raises when a reservation of `reserve_revisions` is not used up: its revisions
-- would be a gap in the orbit's changes. Returns true.
CREATE OR REPLACE FUNCTION revisions_spent() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('orbit.reserved', true), '') <> '' THEN
        RAISE EXCEPTION 'reserved revisions left unapplied: %',
            current_setting('orbit.reserved');
    END IF;
    RETURN true;
END $$;

-- The one place an Idempotency-Key is claimed (`Gate::claim` calls it, and so do the
-- quick writes): inserts the key row with an empty response, or takes over a row
-- whose retention ran out. Returns the row's id, or NULL when the key is held (a
-- completed request, or one still in flight: then this waits for its row's lock,
-- up to `lock_timeout`). `created_at` and `expires_at` come from one clock reading.
CREATE OR REPLACE FUNCTION claim_key(p_contributor bigint, p_scope text, p_key text,
                          p_fingerprint text, p_retention int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_key bigint;
BEGIN
    INSERT INTO idempotency_keys AS k
        (contributor_id, operation, key, fingerprint, response_status, response_body,
         created_at, expires_at)
    SELECT p_contributor, p_scope, p_key, p_fingerprint, 0, '', c.t,
           c.t + make_interval(hours => p_retention)
    FROM (SELECT clock_timestamp() AS t) AS c
    ON CONFLICT (contributor_id, operation, key) DO UPDATE
        SET fingerprint = EXCLUDED.fingerprint, response_status = 0, response_body = '',
            created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
        WHERE k.expires_at <= clock_timestamp()
    RETURNING k.id INTO v_key;
    RETURN v_key;
END $$;

-- The lock of one membership (orbit, contributor), held to the end of the
-- transaction: shared by a write that depends on the membership (`member_role`),
-- exclusive for a change of it, a role change or a removal
-- (`store::orbits::lock_change`). So a change waits for the writes under way that
-- depend on the membership, and a write that asks after it waits for the change and
-- then reads the membership as the change left it: a removed member's write never
-- commits after its removal, and the removal ends every lease the member's committed
-- writes took. An advisory lock, not the membership row's: the lock manager queues
-- fairly (a change waiting for its exclusive lock holds back the writes that ask
-- after it, where a waiting `FOR UPDATE` lets every new `FOR SHARE` of a busy
-- member's row pass, for ever), it writes nothing (no WAL record, no dirtied page),
-- and it exists for a membership not yet added. Keys: the two-int4 form, a key space
-- of its own (the migration lock uses the bigint form); ids past 2^31 wrap, so two
-- memberships may share a key: they then queue together, never wrongly apart.
CREATE OR REPLACE FUNCTION lock_membership(p_orbit bigint, p_contributor bigint,
                                           p_exclusive boolean) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    k1 int := (p_orbit % 2147483647)::int;
    k2 int := (p_contributor % 2147483647)::int;
BEGIN
    IF p_exclusive THEN
        PERFORM pg_advisory_xact_lock(k1, k2);
    ELSE
        PERFORM pg_advisory_xact_lock_shared(k1, k2);
    END IF;
END $$;

-- A contributor's role in an orbit, NULL when they are not a member: who may write
-- in an orbit (`domain::access` words the 403; a quick write declines). The one
-- check of every write that depends on a membership, the writer's own or a named
-- recipient's: it holds the membership (`lock_membership`, shared) before it reads
-- the role, in a statement of its own, which sees a change that committed while it
-- waited. Reads do not ask it (`store::orbits::role_of`). VOLATILE, as a lock and a
-- fresh read need; PL/pgSQL, as the two verdicts below: its statements' plans are
-- kept for the session.
CREATE OR REPLACE FUNCTION member_role(p_orbit bigint, p_contributor bigint) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM lock_membership(p_orbit, p_contributor, false);
    RETURN (SELECT m.role FROM memberships m
            WHERE m.orbit_id = p_orbit AND m.contributor_id = p_contributor);
END $$;

-- A token's use is recorded at most once a minute: true when it is due (never
-- recorded, or the last record is a minute old). `domain::auth` records a due use;
-- a quick write declines while one is due, so the ordinary path records it.
CREATE OR REPLACE FUNCTION token_use_due(p_last_used timestamptz, p_now timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_last_used IS NULL OR p_now - p_last_used >= interval '60 seconds'
$$;

-- How a lease reads at `p_now`: active while it has not ended and has not run
-- out. The one statement of that rule: every query, verdict and ending in SQL asks
-- it (or `lease_end_reason`, built on it), and the service reads its answer
-- (`domain::fence`'s `OpenLease::active`, the store's `is_active`) rather than
-- comparing times itself (a unit test in `domain::fence` looks for any other
-- comparison of an expiry). One SQL expression, which the planner inlines: an index
-- whose predicate is `end_reason IS NULL` still serves it. IMMUTABLE: the clock is
-- an argument.
CREATE OR REPLACE FUNCTION lease_is_active(p_end_reason text, p_expires timestamptz,
                                           p_now timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_end_reason IS NULL AND p_expires > p_now
$$;

-- How a lease's end reads at `p_now`: its recorded reason, EXPIRED for an open lease
-- that ran out, NULL for an active one. A lease ended now ends as EXPIRED when it
-- had run out (its interval then ended at `expires_at`), with its own reason
-- otherwise (`store::tasks::end_lease`).
CREATE OR REPLACE FUNCTION lease_end_reason(p_end_reason text, p_expires timestamptz,
                                            p_now timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT COALESCE(p_end_reason,
                    CASE WHEN NOT lease_is_active(NULL, p_expires, p_now) THEN 'EXPIRED' END)
$$;

-- Whether a handoff is live at `p_now`: PENDING and not run out. A live handoff
-- fences its giver and may be accepted; a PENDING one past its expiry reads as
-- EXPIRED (`handoff_status`), and is recorded so by the next write that ends the
-- task's pending handoff (an acquire, an offer, a completion, a cancellation, a
-- member's removal). The one statement of that rule, as `lease_is_active` is of a
-- lease's.
CREATE OR REPLACE FUNCTION handoff_is_live(p_status text, p_expires timestamptz,
                                           p_now timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_status = 'PENDING' AND p_expires > p_now
$$;

-- How a handoff's status reads at `p_now`: PENDING past its expiry reads as EXPIRED.
CREATE OR REPLACE FUNCTION handoff_status(p_status text, p_expires timestamptz,
                                          p_now timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_status = 'PENDING' AND NOT handoff_is_live(p_status, p_expires, p_now)
                THEN 'EXPIRED' ELSE p_status END
$$;

-- The lease check of a lease-protected write (contract section 8): NULL when
-- `p_caller` presenting `p_version` may write to task `p_task` at `p_now`, else the
-- code of the first rule that fails, in the contract's order. The caller holds the
-- task row's lock (`fence::lock_for`, `quick_task`), and `p_now` was read after it
-- was granted. `p_path_version` is the version of the lease a path names (renew,
-- release), NULL otherwise. `p_write` names the write: 'work' (completion, renewal,
-- the fence check), 'checkpoint', or 'release_or_offer' (release and a new handoff,
-- which a pending handoff does not fence). A rule for one kind of write goes here,
-- as a WHEN on `p_write`: both write paths ask this function.
CREATE OR REPLACE FUNCTION lease_verdict(
    p_task bigint, p_caller bigint, p_version bigint, p_path_version bigint,
    p_write text, p_now timestamptz)
RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT CASE
        WHEN p_version > t.lease_version THEN 'lease_version_not_issued'
        WHEN p_path_version IS NOT NULL AND p_path_version <> p_version
            THEN 'stale_lease_version'
        WHEN t.lease_version <> p_version OR v.id IS NULL THEN 'stale_lease_version'
        WHEN v.contributor_id <> p_caller THEN 'lease_not_held'
        WHEN lease_end_reason(v.end_reason, v.expires_at, p_now) = 'EXPIRED'
            THEN 'lease_expired'
        WHEN NOT lease_is_active(v.end_reason, v.expires_at, p_now) THEN 'lease_released'
        WHEN p_write <> 'release_or_offer' AND EXISTS (
                SELECT 1 FROM handoffs h
                WHERE h.task_id = p_task AND h.from_contributor = p_caller
                  AND handoff_is_live(h.status, h.expires_at, p_now))
            THEN 'handed_off'
    END
    FROM tasks t
    LEFT JOIN leases v ON v.task_id = t.id AND v.lease_version = p_version
    WHERE t.id = p_task);
END $$;

-- Whether `p_caller` may acquire task `p_task` at `p_now` (contract section 8): NULL
-- when they may, else the refusal's code. The caller holds the task row's lock.
-- Acquiring also ends a run-out open lease and supersedes a pending handoff of
-- someone else; the ordinary path does both, a quick write declines instead.
CREATE OR REPLACE FUNCTION acquire_verdict(p_task bigint, p_caller bigint, p_now timestamptz)
RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT CASE
        WHEN t.status <> 'OPEN' THEN 'task_closed'
        WHEN EXISTS (
                SELECT 1 FROM handoffs h
                WHERE h.task_id = p_task AND h.from_contributor = p_caller
                  AND handoff_is_live(h.status, h.expires_at, p_now))
            THEN 'handed_off'
        WHEN lease_is_active(o.end_reason, o.expires_at, p_now)
             AND o.contributor_id = p_caller THEN 'lease_already_held'
        WHEN lease_is_active(o.end_reason, o.expires_at, p_now) THEN 'lease_conflict'
    END
    FROM tasks t
    LEFT JOIN leases o ON o.task_id = t.id AND o.lease_version = t.lease_version
                      AND o.end_reason IS NULL
    WHERE t.id = p_task);
END $$;

-- Timestamps as the API writes them (`model::format_ts`): RFC 3339, UTC,
-- milliseconds (truncated), `Z`. What `quick_outcome` writes for a timestamp's mark;
-- tests/api/quick.rs holds it to `format_ts` byte for byte.
CREATE OR REPLACE FUNCTION json_ts(t timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Until 2026-12-02 the quick writes rendered their bodies here; the service
-- renders them now (`domain::marks`).
DROP FUNCTION IF EXISTS json_lease_response(leases, contributors);
DROP FUNCTION IF EXISTS json_actor(contributors);

-- A quick write's effect: its change and response as the service rendered them
-- (`domain::marks::Marks::rendered`: `p_body`, and `p_outcome` with the status, the
-- change's kind, entity_type, entity_id, task_id and summary, and `fill`), each
-- mark of `fill` replaced by the value of the column it names in `p_row`, the row
-- the write wrote: a number as its digits, a timestamp as `json_ts` writes it, a
-- text as a JSON string (jsonb escapes as serde_json does), NULL as `null`. The text
-- marks come last in `fill`, so no mark is looked for inside a text filled in; a
-- text whose JSON form holds `\u0001` (U+0001, of which those marks are made, or
-- those six characters written out) declines: it could form one.
-- It knows no field of any body: `fill` says what goes where. (The
-- change's entity, task and summary are filled as one text joined by U+0001,
-- which none of them holds; one loop of plain expressions, no query per mark:
-- a quarter of the time of a loop over `jsonb_array_elements` per text.)
CREATE OR REPLACE FUNCTION quick_outcome(
    p_orbit bigint, p_caller bigint, p_key bigint, p_row jsonb, p_body text,
    p_outcome jsonb)
RETURNS quick_effect LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_fill jsonb := p_outcome -> 'fill';
    v_change text := concat_ws(chr(1), p_outcome ->> 'entity_id',
        coalesce(p_outcome ->> 'task_id', ''), p_outcome ->> 'summary');
    v_body text := p_body;
    v_mark jsonb;
    v_value jsonb;
    v_text text;
    v_parts text[];
BEGIN
    FOR i IN 0 .. jsonb_array_length(v_fill) - 1 LOOP
        v_mark := v_fill -> i;
        v_value := p_row -> (v_mark ->> 'column');
        v_text := CASE
            WHEN v_value IS NULL OR jsonb_typeof(v_value) = 'null' THEN 'null'
            WHEN v_mark ->> 'kind' = 'time'
                THEN '"' || json_ts((v_value #>> '{}')::timestamptz) || '"'
            WHEN v_mark ->> 'kind' = 'text' THEN v_value::text
            ELSE v_value #>> '{}'
        END;
        IF v_mark ->> 'kind' = 'text' AND strpos(v_text, '\u0001') > 0 THEN
            RAISE EXCEPTION 'quick_declined';
        END IF;
        v_change := replace(v_change, v_mark ->> 'mark', v_text);
        v_body := replace(v_body, v_mark ->> 'mark', v_text);
    END LOOP;
    v_parts := string_to_array(v_change, chr(1));
    RETURN ROW(NULL, p_orbit, p_outcome ->> 'kind', p_outcome ->> 'entity_type',
        v_parts[1]::bigint, nullif(nullif(v_parts[2], ''), 'null')::bigint, p_caller,
        v_parts[3],
        p_key, (p_outcome ->> 'status')::int2, v_body)::quick_effect;
END $$;

-- The caller of a quick write: the token this instance has already verified (its
-- id), still unrevoked, whose use was recorded less than a minute ago (otherwise the
-- ordinary path records it).
CREATE OR REPLACE FUNCTION quick_caller(p_token bigint) RETURNS contributors
LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors;
BEGIN
    SELECT c.* INTO v_caller
    FROM tokens k JOIN contributors c ON c.id = k.contributor_id
    WHERE k.id = p_token AND k.revoked_at IS NULL
      AND NOT token_use_due(k.last_used_at, clock_timestamp());
    IF NOT FOUND THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    RETURN v_caller;
END $$;

-- The common start of a quick write on a task, after the caller: their membership in
-- the task's orbit, the key's claim (`claim_key`; only a new key: one seen before
-- is declined), then the task row `FOR UPDATE` (`fence::lock`) and the database clock
-- read after the lock was granted.
CREATE OR REPLACE FUNCTION quick_task(
    p_caller bigint, p_task bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    OUT orbit_id bigint, OUT key_id bigint, OUT status text, OUT lease_version bigint,
    OUT now timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tasks t
                   WHERE t.id = p_task AND member_role(t.orbit_id, p_caller) IS NOT NULL) THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    key_id := claim_key(p_caller, p_scope, p_key, p_fingerprint, p_retention);
    IF key_id IS NULL THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    SELECT t.orbit_id, t.status, t.lease_version INTO STRICT orbit_id, status, lease_version
    FROM tasks t WHERE t.id = p_task FOR UPDATE;
    now := clock_timestamp();
END $$;

-- The one insert of a task (`store::tasks::insert_task` and the quick task
-- creation): an OPEN task, its times from the default of its columns.
CREATE OR REPLACE FUNCTION task_insert(
    p_orbit bigint, p_problem bigint, p_title text, p_description text, p_creator bigint)
RETURNS tasks LANGUAGE plpgsql AS $$
DECLARE
    v_task tasks;
BEGIN
    INSERT INTO tasks (orbit_id, problem_id, title, description, created_by)
    VALUES (p_orbit, p_problem, p_title, p_description, p_creator)
    RETURNING * INTO v_task;
    RETURN v_task;
END $$;

-- The one issue of a lease (`store::tasks::insert_lease`: an acquire, an accept;
-- and the quick acquire): the task's `lease_version` set to `p_version`, and the
-- lease inserted, active from `p_now` for `p_seconds`. The caller holds the task
-- row's lock and has ended the task's open lease, if any.
CREATE OR REPLACE FUNCTION lease_issue(
    p_task bigint, p_orbit bigint, p_contributor bigint, p_version bigint,
    p_now timestamptz, p_seconds bigint)
RETURNS leases LANGUAGE plpgsql AS $$
DECLARE
    v_lease leases;
BEGIN
    UPDATE tasks SET lease_version = p_version, updated_at = p_now WHERE id = p_task;
    INSERT INTO leases (task_id, orbit_id, contributor_id, lease_version, acquired_at,
                        expires_at)
    VALUES (p_task, p_orbit, p_contributor, p_version, p_now,
            p_now + make_interval(secs => p_seconds))
    RETURNING * INTO v_lease;
    RETURN v_lease;
END $$;

-- The one ending of a lease (`store::tasks::end_lease`, `end_lease_returning`,
-- `release_member_work`, and the quick release): an active lease ends at `p_now`
-- with `p_reason`; one already past its expiry is recorded as EXPIRED (its interval
-- ended at `expires_at`). A lease that has ended already is left as it is (no row). plpgsql, not sql: a sql
-- function's statement is planned again at every call (PostgreSQL 15-17), a
-- plpgsql one's plan is kept for the session; `ROWS 1` keeps a caller's join to it
-- on an index (a set-returning function is estimated at 1,000 rows).
CREATE OR REPLACE FUNCTION lease_end(p_lease bigint, p_now timestamptz, p_reason text)
RETURNS SETOF leases LANGUAGE plpgsql ROWS 1 AS $$
BEGIN
    RETURN QUERY
    UPDATE leases SET
        released_at = CASE WHEN lease_is_active(end_reason, expires_at, p_now) THEN p_now END,
        end_reason = coalesce(lease_end_reason(end_reason, expires_at, p_now), p_reason)
    WHERE id = p_lease AND end_reason IS NULL
    RETURNING *;
END $$;

-- The one superseding of a PENDING handoff (`store::handoffs::supersede_pending`, by
-- a write holding its task's lock, and a member's removal,
-- `store::tasks::release_member_work`): a live one becomes SUPERSEDED at `p_now`;
-- one already past its expiry is recorded as EXPIRED (it ended at `expires_at`). A
-- handoff no longer PENDING is left as it is (no row). plpgsql and ROWS 1, as
-- `lease_end`.
CREATE OR REPLACE FUNCTION handoff_supersede(p_handoff bigint, p_now timestamptz)
RETURNS SETOF handoffs LANGUAGE plpgsql ROWS 1 AS $$
BEGIN
    RETURN QUERY
    UPDATE handoffs SET
        status = CASE WHEN handoff_is_live(status, expires_at, p_now)
                      THEN 'SUPERSEDED' ELSE 'EXPIRED' END,
        ended_at = CASE WHEN handoff_is_live(status, expires_at, p_now)
                        THEN p_now ELSE expires_at END
    WHERE id = p_handoff AND status = 'PENDING'
    RETURNING *;
END $$;

-- The one insert of a checkpoint (`store::tasks::insert_checkpoint` and the quick
-- checkpoint): the task's next `checkpoint_sequence`, and the checkpoint with it.
-- `p_state` is the canonical form of the state, `p_hash` its SHA-256.
CREATE OR REPLACE FUNCTION checkpoint_insert(
    p_task bigint, p_orbit bigint, p_lease_version bigint, p_author bigint,
    p_summary text, p_state text, p_hash text, p_artifacts bigint[], p_now timestamptz)
RETURNS checkpoints LANGUAGE plpgsql AS $$
DECLARE
    v_sequence bigint;
    v_checkpoint checkpoints;
BEGIN
    UPDATE tasks SET checkpoint_sequence = checkpoint_sequence + 1, updated_at = p_now
    WHERE id = p_task
    RETURNING checkpoint_sequence INTO v_sequence;
    INSERT INTO checkpoints (task_id, orbit_id, lease_version, sequence, author_id, summary,
                             state, state_hash, artifact_ids, created_at)
    VALUES (p_task, p_orbit, p_lease_version, v_sequence, p_author, p_summary, p_state,
            p_hash, p_artifacts, p_now)
    RETURNING * INTO v_checkpoint;
    RETURN v_checkpoint;
END $$;

-- The one insert of a contribution (`store::contributions::insert` and the quick
-- contribution creation): the contribution at revision 1 and its first immutable
-- revision, both stamped with one reading of the clock.
CREATE OR REPLACE FUNCTION contribution_insert(
    p_orbit bigint, p_kind text, p_author bigint, p_problem bigint, p_task bigint,
    p_title text, p_body text, p_artifacts bigint[])
RETURNS contributions LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_contribution contributions;
BEGIN
    INSERT INTO contributions (orbit_id, kind, author_id, problem_id, task_id, title, body,
                               artifact_ids, created_at, updated_at)
    VALUES (p_orbit, p_kind, p_author, p_problem, p_task, p_title, p_body, p_artifacts,
            v_now, v_now)
    RETURNING * INTO v_contribution;
    INSERT INTO contribution_revisions (contribution_id, revision, title, body, artifact_ids,
                                        created_at)
    VALUES (v_contribution.id, 1, v_contribution.title, v_contribution.body,
            v_contribution.artifact_ids, v_contribution.created_at);
    RETURN v_contribution;
END $$;

-- The one write of a contribution's next revision (`store::contributions::insert_revision`
-- and the quick revision): revision `p_revision + 1` of contribution `p_id`, if
-- `p_revision` is still its current one, made current with no assessments; a NULL
-- title, body or artifacts keep the current revision's. The immutable revision row
-- is written beside it, both stamped with one reading of the clock. Returns the
-- contribution as revised, or NULL when `p_revision` is not current.
CREATE OR REPLACE FUNCTION contribution_revise(
    p_id bigint, p_revision bigint, p_title text, p_body text, p_artifacts bigint[])
RETURNS contributions LANGUAGE plpgsql AS $$
DECLARE
    v_contribution contributions;
BEGIN
    UPDATE contributions c SET revision = c.revision + 1,
        title = coalesce(p_title, c.title), body = coalesce(p_body, c.body),
        artifact_ids = coalesce(p_artifacts, c.artifact_ids), updated_at = clock_timestamp(),
        supports = 0, disputes = 0, inconclusive = 0, needs_work = 0
    WHERE c.id = p_id AND c.revision = p_revision
    RETURNING * INTO v_contribution;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO contribution_revisions (contribution_id, revision, title, body, artifact_ids,
                                        created_at)
    VALUES (v_contribution.id, v_contribution.revision, v_contribution.title,
            v_contribution.body, v_contribution.artifact_ids, v_contribution.updated_at);
    RETURN v_contribution;
END $$;

-- Each quick write takes, after its own arguments, `p_body` and `p_outcome`: its
-- response and change as the service rendered them (`quick_outcome`). The argument
-- lists of 2026-12-01 (when these functions rendered the bodies) are dropped first.
DROP FUNCTION IF EXISTS quick_batch(int2[], bigint[], bigint[], bigint[], text[], text[],
    text[], text[], text[], text[], int[]);
DROP FUNCTION IF EXISTS quick_write(int2, bigint, bigint, bigint, text, text, text, text,
    text, text, int);
DROP FUNCTION IF EXISTS quick_effect_of(int2, bigint, bigint, bigint, text, text, text,
    text, text, text, int);
DROP FUNCTION IF EXISTS quick_acquire_effect(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION IF EXISTS quick_checkpoint_effect(bigint, bigint, bigint, text, text, text,
    text, text, text, int);
DROP FUNCTION IF EXISTS quick_release_effect(bigint, bigint, bigint, text, text, text, int);

-- POST /api/v1/tasks/{task}/leases (`api::leases::acquire_lease`): a member acquires an
-- OPEN task with no open lease and no pending handoff.
CREATE OR REPLACE FUNCTION quick_acquire_effect(
    p_token bigint, p_task bigint, p_seconds bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome jsonb)
RETURNS quick_effect LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_task record;
    v_lease leases;
BEGIN
    v_task := quick_task(v_caller.id, p_task, p_scope, p_key, p_fingerprint, p_retention);
    -- The verdict, then what only the ordinary path does: end an open lease that
    -- ran out, supersede a pending handoff.
    IF acquire_verdict(p_task, v_caller.id, v_task.now) IS NOT NULL
       OR EXISTS (SELECT 1 FROM leases WHERE task_id = p_task
                  AND lease_version = v_task.lease_version AND end_reason IS NULL)
       OR EXISTS (SELECT 1 FROM handoffs WHERE task_id = p_task AND status = 'PENDING') THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    v_lease := lease_issue(p_task, v_task.orbit_id, v_caller.id, v_task.lease_version + 1,
                           v_task.now, p_seconds);
    RETURN quick_outcome(v_task.orbit_id, v_caller.id, v_task.key_id, to_jsonb(v_lease),
                         p_body, p_outcome);
END $$;

-- POST /api/v1/tasks/{task}/checkpoints (`api::checkpoints::create_checkpoint`) without
-- artifacts: the caller's active lease is the task's current one and no handoff is
-- pending. `p_state` is the canonical form of the state, `p_hash` its SHA-256.
CREATE OR REPLACE FUNCTION quick_checkpoint_effect(
    p_token bigint, p_task bigint, p_lease_version bigint, p_summary text,
    p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome jsonb)
RETURNS quick_effect LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_task record;
    v_checkpoint checkpoints;
BEGIN
    v_task := quick_task(v_caller.id, p_task, p_scope, p_key, p_fingerprint, p_retention);
    IF lease_verdict(p_task, v_caller.id, p_lease_version, NULL, 'checkpoint', v_task.now)
           IS NOT NULL THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    v_checkpoint := checkpoint_insert(p_task, v_task.orbit_id, p_lease_version, v_caller.id,
                                      p_summary, p_state, p_hash, '{}', v_task.now);
    -- The state is in the body already; the row lends the values the marks stand for.
    v_checkpoint.state := NULL;
    RETURN quick_outcome(v_task.orbit_id, v_caller.id, v_task.key_id,
                         to_jsonb(v_checkpoint), p_body, p_outcome);
END $$;

-- POST /api/v1/leases/{lease}/release (`api::leases::release_lease`): the caller releases
-- the task's current, active lease, which is theirs and the one the path names.
CREATE OR REPLACE FUNCTION quick_release_effect(
    p_token bigint, p_lease bigint, p_lease_version bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome jsonb)
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
    v_task := quick_task(v_caller.id, v_task_id, p_scope, p_key, p_fingerprint, p_retention);
    IF lease_verdict(v_task_id, v_caller.id, p_lease_version, p_lease_version,
                     'release_or_offer', v_task.now) IS NOT NULL THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    SELECT * INTO STRICT v_lease FROM lease_end(p_lease, v_task.now, 'RELEASED');
    RETURN quick_outcome(v_task.orbit_id, v_caller.id, v_task.key_id, to_jsonb(v_lease),
                         p_body, p_outcome);
END $$;

-- The common start of a quick creation in an orbit, after the caller: their
-- membership, then the key's claim (`claim_key`; only a new key: one seen before is
-- declined). Returns the claimed key's id.
CREATE OR REPLACE FUNCTION quick_orbit_key(
    p_caller bigint, p_orbit bigint,
    p_scope text, p_key text, p_fingerprint text, p_retention int)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_key bigint;
BEGIN
    IF member_role(p_orbit, p_caller) IS NULL THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    v_key := claim_key(p_caller, p_scope, p_key, p_fingerprint, p_retention);
    IF v_key IS NULL THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    RETURN v_key;
END $$;

-- POST /api/v1/orbits/{orbit}/tasks (`api::tasks::create_task`) by a member, with
-- the orbit named by its id and no problem: `p_orbit` the orbit, `p_title` and
-- `p_description` the task's.
CREATE OR REPLACE FUNCTION quick_task_create_effect(
    p_token bigint, p_orbit bigint, p_title text, p_description text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome jsonb)
RETURNS quick_effect LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_key bigint := quick_orbit_key(v_caller.id, p_orbit, p_scope, p_key, p_fingerprint,
                                    p_retention);
    v_task tasks;
BEGIN
    v_task := task_insert(p_orbit, NULL, p_title, p_description, v_caller.id);
    -- The text is in the body already; the row lends the values the marks stand for.
    v_task.search := NULL;
    RETURN quick_outcome(p_orbit, v_caller.id, v_key, to_jsonb(v_task), p_body, p_outcome);
END $$;

-- POST /api/v1/orbits/{orbit}/contributions (`api::contributions::create_contribution`)
-- by a member, with the orbit named by its id and no problem, task or artifacts.
CREATE OR REPLACE FUNCTION quick_contribution_create_effect(
    p_token bigint, p_orbit bigint, p_kind text, p_title text, p_text text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome jsonb)
RETURNS quick_effect LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_key bigint := quick_orbit_key(v_caller.id, p_orbit, p_scope, p_key, p_fingerprint,
                                    p_retention);
    v_contribution contributions;
BEGIN
    v_contribution := contribution_insert(p_orbit, p_kind, v_caller.id, NULL, NULL, p_title,
                                          p_text, '{}');
    v_contribution.title := NULL;
    v_contribution.body := NULL;
    v_contribution.search := NULL;
    RETURN quick_outcome(p_orbit, v_caller.id, v_key, to_jsonb(v_contribution), p_body,
                         p_outcome);
END $$;

-- POST /api/v1/contributions/{contribution}/revisions
-- (`api::contributions::revise_contribution`) by the author, a member, with no
-- artifacts in the request, of a contribution with no problem (whose counters the
-- ordinary path adjusts) and no artifacts: revision `p_base + 1` if `p_base` is
-- current. `p_title` and `p_body` are NULL when the request leaves them out.
CREATE OR REPLACE FUNCTION quick_revise_effect(
    p_token bigint, p_contribution bigint, p_base bigint, p_title text, p_text text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome jsonb)
RETURNS quick_effect LANGUAGE plpgsql AS $$
DECLARE
    v_caller contributors := quick_caller(p_token);
    v_orbit bigint;
    v_key bigint;
    v_contribution contributions;
BEGIN
    SELECT c.orbit_id INTO v_orbit FROM contributions c
    WHERE c.id = p_contribution AND c.author_id = v_caller.id AND c.problem_id IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    v_key := quick_orbit_key(v_caller.id, v_orbit, p_scope, p_key, p_fingerprint,
                             p_retention);
    v_contribution := contribution_revise(p_contribution, p_base, p_title, p_text, NULL);
    IF v_contribution.id IS NULL OR cardinality(v_contribution.artifact_ids) > 0 THEN
        RAISE EXCEPTION 'quick_declined';
    END IF;
    v_contribution.search := NULL;
    RETURN quick_outcome(v_orbit, v_caller.id, v_key, to_jsonb(v_contribution), p_body,
                         p_outcome);
END $$;

-- One quick write's effect, by kind (`p_call`: 1 acquire, 2 checkpoint, 3 release,
-- 4 task creation, 5 contribution creation, 6 revision; `p_target` the task, the
-- lease of a release, the orbit of a creation, or the contribution of a revision;
-- `p_number` the lease's seconds, the lease version, or the base revision; the
-- three texts a checkpoint's summary, state and hash, a task's title and
-- description, a contribution's title, body and kind, or a revision's title and
-- body and which of them the request gives: `t`, `b`, both or neither).
CREATE OR REPLACE FUNCTION quick_effect_of(
    p_call int2, p_token bigint, p_target bigint, p_number bigint,
    p_summary text, p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome text)
RETURNS quick_effect LANGUAGE plpgsql AS $$
BEGIN
    IF p_call = 1 THEN
        RETURN quick_acquire_effect(p_token, p_target, p_number,
            p_scope, p_key, p_fingerprint, p_retention, p_body, p_outcome::jsonb);
    ELSIF p_call = 2 THEN
        RETURN quick_checkpoint_effect(p_token, p_target, p_number,
            p_summary, p_state, p_hash, p_scope, p_key, p_fingerprint, p_retention,
            p_body, p_outcome::jsonb);
    ELSIF p_call = 4 THEN
        RETURN quick_task_create_effect(p_token, p_target, p_summary, p_state,
            p_scope, p_key, p_fingerprint, p_retention, p_body, p_outcome::jsonb);
    ELSIF p_call = 5 THEN
        RETURN quick_contribution_create_effect(p_token, p_target, p_hash, p_summary,
            p_state, p_scope, p_key, p_fingerprint, p_retention, p_body, p_outcome::jsonb);
    ELSIF p_call = 6 THEN
        RETURN quick_revise_effect(p_token, p_target, p_number,
            CASE WHEN strpos(p_hash, 't') > 0 THEN p_summary END,
            CASE WHEN strpos(p_hash, 'b') > 0 THEN p_state END,
            p_scope, p_key, p_fingerprint, p_retention, p_body, p_outcome::jsonb);
    ELSIF p_call = 3 THEN
        RETURN quick_release_effect(p_token, p_target, p_number,
            p_scope, p_key, p_fingerprint, p_retention, p_body, p_outcome::jsonb);
    END IF;
    RAISE EXCEPTION 'quick_declined';
END $$;

-- Applies a quick write's change (`apply_change`); its revision.
CREATE OR REPLACE FUNCTION quick_apply(e quick_effect) RETURNS bigint LANGUAGE sql AS $$
    SELECT apply_change(e.orbit, e.kind, e.entity_type, e.entity_id, e.task,
        e.contributor, e.summary, e.key_id, e.status, convert_to(e.body, 'UTF8'))
$$;

-- A write alone (a group of one). Its decline is caught in a block of its own, like
-- each write of a group: the block's subtransaction rolls back everything the write
-- did (its key claim included), the statement succeeds with no row, and the service
-- reads "no row" as declined. So an expected decline writes nothing at ERROR level
-- to the server log (issue 26, finding 11); any other error still ends the
-- statement.
CREATE OR REPLACE FUNCTION quick_write(
    p_call int2, p_token bigint, p_target bigint, p_number bigint,
    p_summary text, p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    p_body text, p_outcome text)
RETURNS TABLE (out_index int, out_orbit bigint, out_revision bigint, out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_effect quick_effect;
BEGIN
    BEGIN
        v_effect := quick_effect_of(p_call, p_token, p_target, p_number,
            p_summary, p_state, p_hash, p_scope, p_key, p_fingerprint, p_retention,
            p_body, p_outcome);
    EXCEPTION WHEN raise_exception THEN
        IF SQLERRM <> 'quick_declined' THEN
            RAISE;
        END IF;
        -- Declined: nothing of it remains; the ordinary path decides.
        RETURN;
    END;
    out_index := 1;
    out_orbit := v_effect.orbit;
    out_revision := quick_apply(v_effect);
    out_body := current_setting('orbit.body');
    RETURN NEXT;
END $$;

-- A group of quick writes, element i of every array being write i's arguments (as
-- `quick_effect_of` takes them). Returns one row per write that was done
-- (`out_index` is its i, from 1); a write with no row declined and changed nothing.
CREATE OR REPLACE FUNCTION quick_batch(
    p_call int2[], p_token bigint[], p_target bigint[], p_number bigint[],
    p_summary text[], p_state text[], p_hash text[],
    p_scope text[], p_key text[], p_fingerprint text[], p_retention int[],
    p_body text[], p_outcome text[])
RETURNS TABLE (out_index int, out_orbit bigint, out_revision bigint, out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_done quick_effect[] := '{}';
    v_effect quick_effect;
    v_orbit bigint;
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    -- A write of a group does not wait for a lock another transaction holds (its
    -- task, its key): it gives up within 20 ms and the ordinary path waits for it,
    -- after the group. Waits would add up across the group's writes, hold up the
    -- others, and could meet another writer's in a cycle. The apply phase below
    -- waits as usual: there the orbit's other writers hold its row only to their
    -- commit.
    PERFORM set_config('lock_timeout', '20ms', true);
    FOR i IN 1 .. coalesce(cardinality(p_call), 0) LOOP
        BEGIN
            v_effect := quick_effect_of(p_call[i], p_token[i], p_target[i], p_number[i],
                p_summary[i], p_state[i], p_hash[i],
                p_scope[i], p_key[i], p_fingerprint[i], p_retention[i],
                p_body[i], p_outcome[i]);
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
        IF v_effect.orbit IS DISTINCT FROM v_orbit THEN
            -- The orbit's applies follow one another: their revisions at once.
            v_orbit := v_effect.orbit;
            PERFORM reserve_revisions(v_orbit,
                (SELECT count(*)::int FROM unnest(v_done) d WHERE d.orbit = v_orbit));
        END IF;
        out_index := v_effect.idx;
        out_orbit := v_effect.orbit;
        out_revision := quick_apply(v_effect);
        out_body := current_setting('orbit.body');
        RETURN NEXT;
    END LOOP;
    PERFORM revisions_spent();
END $$;

-- A search's `q` (contract section 13) as a tsquery, in web-search syntax: plain
-- words (all must match), `"quoted phrases"`, `OR` between two terms, `-excluded`
-- terms. `OR` joins only the terms on either side of it, as a web search reads it:
-- `flaky test OR spec` is flaky AND (test OR spec). (PostgreSQL's
-- `websearch_to_tsquery` gives `|` the lowest precedence, `('flaky' & 'test') |
-- 'spec'`, so a hit need not hold the plain words: a hostile probe, 2026-12-06.)
-- So `q` is cut into terms here (a phrase, `-` and a phrase, or a run of other
-- characters; `OR` in any case) and each term alone goes through
-- `websearch_to_tsquery`, which reads a word, a phrase and a term of several words
-- (`example.com/a`, a phrase of its words) as before; terms joined by `OR` form a
-- group, and the groups are ANDed. A term with nothing searchable (a stop word,
-- punctuation) is left out, and so is the `OR` that joined it to the term before.
-- No query syntax is ever an error: where PostgreSQL's parser fails on a term
-- (more than 32 operators in a row inside a phrase: "tsquery stack too small", an
-- internal error), `q`'s plain words (`plainto_tsquery`) are the query. The query
-- is read as the searched text is (`orbit_search_text`, migrations 27, 28 and 29:
-- `<`, `/`, `@`, `.`, `:` and a `-` before a digit are separators, so no tag's
-- words are dropped, a URL, path or address is its words, and `ISO-8601` is `iso`
-- and `8601`).
CREATE OR REPLACE FUNCTION search_tsquery(p_q text) RETURNS tsquery
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_term text;
    v_negated boolean;
    v_unit tsquery;
    v_group tsquery;
    v_query tsquery;
    v_or boolean := false;
BEGIN
    FOR v_term IN SELECT m[1] FROM regexp_matches(p_q, '(-?"[^"]*"?|[^\s"]+)', 'g') AS m LOOP
        IF lower(v_term) = 'or' THEN
            -- Joins the next term to the group before it (if there is one).
            v_or := v_group IS NOT NULL;
            CONTINUE;
        END IF;
        v_negated := left(v_term, 1) = '-';
        IF v_negated THEN
            v_term := substr(v_term, 2);
        END IF;
        v_unit := websearch_to_tsquery('orbit_search', orbit_search_text(v_term));
        IF numnode(v_unit) = 0 THEN
            -- Left out, with the `OR` that joined it (`cat OR -the dog` is cat and
            -- dog); an `OR` after it still joins what follows.
            v_or := false;
            CONTINUE;
        END IF;
        IF v_negated THEN
            v_unit := !! v_unit;
        END IF;
        IF v_or THEN
            v_group := v_group || v_unit;
        ELSE
            IF v_group IS NOT NULL THEN
                v_query := CASE WHEN v_query IS NULL THEN v_group ELSE v_query && v_group END;
            END IF;
            v_group := v_unit;
        END IF;
        v_or := false;
    END LOOP;
    IF v_group IS NOT NULL THEN
        v_query := CASE WHEN v_query IS NULL THEN v_group ELSE v_query && v_group END;
    END IF;
    IF v_query IS NULL THEN
        -- The empty query, made only when needed (it raises a NOTICE).
        RETURN websearch_to_tsquery('orbit_search', '');
    END IF;
    RETURN v_query;
EXCEPTION WHEN internal_error THEN
    RETURN plainto_tsquery('orbit_search', orbit_search_text(p_q));
END $$;

-- Webhook delivery (contract section 15, `domain::webhooks::deliver`,
-- docs/MECHANISMS.md "Webhook delivery"). A claim is a lease with an expiry on the
-- subscription's row: `webhook_claim` takes up to `p_limit` active subscriptions
-- that have a change to deliver, are due and are not claimed (or whose claim ran
-- out: its instance died), each under a new `claim_seq`. Every later statement of
-- the delivering instance names (claimed_by, claim_seq): when the claim was lost
-- (it ran out and another instance took it) or the subscription was deleted, it
-- changes nothing and says so.
CREATE OR REPLACE FUNCTION webhook_claim(p_instance text, p_limit int, p_lease_ms bigint)
RETURNS TABLE (out_id bigint, out_orbit bigint, out_slug text, out_url text,
               out_kinds text[], out_secret text, out_through bigint, out_attempts int,
               out_seq bigint)
LANGUAGE plpgsql AS $$
BEGIN
    -- PL/pgSQL so that the statement's plan is kept for the session: as a SQL
    -- function it was planned at every call, about 0.5 ms, and the delivery engine
    -- claims after every burst of writes (a quarter of the lease cycle's requests
    -- at one client, with no subscription at all).
    RETURN QUERY
    WITH due AS (
        SELECT w.id FROM webhooks w JOIN orbits o ON o.id = w.orbit_id
        WHERE w.status = 'ACTIVE' AND w.next_attempt_at <= clock_timestamp()
          AND (w.claim_until IS NULL OR w.claim_until < clock_timestamp())
          AND w.delivered_through < o.revision
        ORDER BY w.next_attempt_at
        LIMIT p_limit
        FOR UPDATE OF w SKIP LOCKED)
    UPDATE webhooks w
       SET claimed_by = p_instance, claim_seq = w.claim_seq + 1,
           claim_until = clock_timestamp() + p_lease_ms * interval '1 millisecond'
      FROM due, orbits o
     WHERE w.id = due.id AND o.id = w.orbit_id
    RETURNING w.id, w.orbit_id, o.slug, w.url, w.kinds, w.secret, w.delivered_through,
              w.attempts, w.claim_seq;
END $$;

-- The outcome of one attempt under a claim. Logs it (the latest `p_kept` per
-- subscription are kept), then: delivered → `delivered_through` moves to the
-- revision, the attempts reset and the claim is renewed ('DELIVERED'); failed →
-- one more attempt counted, the claim given back and the next attempt due after
-- the backoff ('RETRY'), or at the last attempt the subscription DISABLED with its
-- reason ('DISABLED'). 'LOST' when the claim is no longer this one's (nothing
-- changed). `p_ok` NULL records nothing and only moves `delivered_through` over
-- changes the kinds filter skipped. `p_kept` is `store::webhooks::KEPT_ATTEMPTS`;
-- its default serves only an instance of the release before 2026-12-08 still
-- running beside this one in a rolling restart (it passes eleven arguments, and
-- its deliveries would otherwise fail to record and be sent again): drop the
-- default at the next change of this function's arguments.
DROP FUNCTION IF EXISTS webhook_record(bigint, text, bigint, bigint, boolean, int, text,
                                       int, bigint, int, bigint);
CREATE OR REPLACE FUNCTION webhook_record(
    p_id bigint, p_instance text, p_seq bigint, p_revision bigint, p_ok boolean,
    p_status int, p_error text, p_duration_ms int, p_retry_base_ms bigint,
    p_max_attempts int, p_lease_ms bigint, p_kept int DEFAULT 100)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_w webhooks;
    v_delay_ms double precision;
BEGIN
    SELECT * INTO v_w FROM webhooks
     WHERE id = p_id AND claimed_by = p_instance AND claim_seq = p_seq FOR UPDATE;
    IF NOT FOUND OR v_w.status <> 'ACTIVE' THEN
        RETURN 'LOST';
    END IF;
    -- Nothing to log but the claim's renewal: a change passed over, or a delivery
    -- already recorded (a record asked again after its answer was lost).
    IF p_ok IS NULL OR (p_ok AND p_revision <= v_w.delivered_through) THEN
        UPDATE webhooks SET delivered_through = greatest(delivered_through, p_revision),
               claim_until = clock_timestamp() + p_lease_ms * interval '1 millisecond'
         WHERE id = p_id;
        RETURN 'DELIVERED';
    END IF;
    -- `attempted_at` is when the attempt started: now, less the time it took.
    INSERT INTO webhook_deliveries (webhook_id, revision, attempt, status_code, error,
                                    duration_ms, attempted_at)
    VALUES (p_id, p_revision, v_w.attempts + 1, p_status, p_error, p_duration_ms,
            clock_timestamp() - p_duration_ms * interval '1 millisecond');
    -- Pruned at every attempt: a test of the global id (every 16th, as before
    -- 2026-12-08) could pass one subscription by for as long as others took the
    -- ids it tests, and its log grew without bound.
    DELETE FROM webhook_deliveries
     WHERE webhook_id = p_id AND id < (
         SELECT id FROM webhook_deliveries WHERE webhook_id = p_id
          ORDER BY id DESC OFFSET p_kept - 1 LIMIT 1);
    IF p_ok THEN
        UPDATE webhooks SET delivered_through = greatest(delivered_through, p_revision),
               attempts = 0, next_attempt_at = clock_timestamp(),
               claim_until = clock_timestamp() + p_lease_ms * interval '1 millisecond'
         WHERE id = p_id;
        RETURN 'DELIVERED';
    END IF;
    IF v_w.attempts + 1 >= p_max_attempts THEN
        UPDATE webhooks SET attempts = v_w.attempts + 1, status = 'DISABLED',
               disabled_reason = format('%s failed attempts to deliver revision %s; the last: %s',
                   v_w.attempts + 1, p_revision,
                   coalesce(p_error, format('HTTP %s', p_status))),
               claimed_by = NULL, claim_until = NULL
         WHERE id = p_id;
        RETURN 'DISABLED';
    END IF;
    -- base · 2^(attempts − 1), at most one hour.
    v_delay_ms := least(p_retry_base_ms * power(2::double precision, least(v_w.attempts, 40)),
                        3600000);
    UPDATE webhooks SET attempts = v_w.attempts + 1,
           next_attempt_at = clock_timestamp() + v_delay_ms * interval '1 millisecond',
           claimed_by = NULL, claim_until = NULL
     WHERE id = p_id;
    RETURN 'RETRY';
END $$;

-- Extends a claim by `p_lease_ms` from now, if it is still this instance's: no other
-- claim was made since (every claim takes a new `claim_seq`), and the subscription is
-- ACTIVE. The engine renews before an attempt that might not end inside the claim
-- (`deliver::run_claim`): an attempt sent past it could reach the receiver after the
-- next change, sent by whoever claimed the subscription meanwhile.
CREATE OR REPLACE FUNCTION webhook_renew(p_id bigint, p_instance text, p_seq bigint,
                                         p_lease_ms bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhooks SET claim_until = clock_timestamp() + p_lease_ms * interval '1 millisecond'
     WHERE id = p_id AND claimed_by = p_instance AND claim_seq = p_seq AND status = 'ACTIVE';
    RETURN FOUND;
END $$;

-- Gives a claim back when its instance has nothing more to send. True when a change
-- arrived meanwhile (the caller claims again: the wake-up for it may have come
-- while the claim was still held).
CREATE OR REPLACE FUNCTION webhook_release(p_id bigint, p_instance text, p_seq bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_more boolean;
BEGIN
    UPDATE webhooks w SET claimed_by = NULL, claim_until = NULL
      FROM orbits o
     WHERE w.id = p_id AND w.claimed_by = p_instance AND w.claim_seq = p_seq
       AND o.id = w.orbit_id
    RETURNING w.status = 'ACTIVE' AND w.delivered_through < o.revision INTO v_more;
    RETURN v_more;
END $$;
