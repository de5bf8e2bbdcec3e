-- Knowledge: problems, revisioned contributions, exact-revision assessments,
-- artifacts and memory records, plus the per-problem counters that keep
-- `GET /api/v1/problems/{id}/overview` bounded in cost.
--
-- Lock order in every transaction that writes here: the task row or the
-- contribution row, then the problem's counters row, then the orbit row (revision)
-- last. Task writes reach contributions and problems only through foreign-key
-- checks (KEY SHARE), which the NO KEY UPDATE locks taken here never block.

CREATE TABLE problems (
    id          BIGSERIAL PRIMARY KEY,
    orbit_id    BIGINT NOT NULL REFERENCES orbits (id),
    title       TEXT NOT NULL,
    statement   TEXT NOT NULL DEFAULT '',
    status      TEXT NOT NULL DEFAULT 'OPEN' CHECK (status IN ('OPEN', 'RESOLVED')),
    created_by  BIGINT NOT NULL REFERENCES contributors (id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX problems_orbit_idx ON problems (orbit_id, id);

-- One row per problem, created with it and updated in the same transaction as every
-- write that changes what the overview counts: contributions by kind (kind and
-- problem never change after creation), verdicts over current revisions (an
-- assessment of the current revision adds one; a new revision takes its old
-- revision's verdicts out), and tasks by status (maintained by the triggers on
-- `tasks` below, whoever writes the task). Which OPEN tasks are LEASED depends on
-- the clock, so that split is made at read time from the orbit's active leases.
CREATE TABLE problem_counters (
    problem_id   BIGINT PRIMARY KEY REFERENCES problems (id),
    tasks_open      BIGINT NOT NULL DEFAULT 0 CHECK (tasks_open >= 0),
    tasks_completed BIGINT NOT NULL DEFAULT 0 CHECK (tasks_completed >= 0),
    tasks_cancelled BIGINT NOT NULL DEFAULT 0 CHECK (tasks_cancelled >= 0),
    attempt      BIGINT NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    observation  BIGINT NOT NULL DEFAULT 0 CHECK (observation >= 0),
    claim        BIGINT NOT NULL DEFAULT 0 CHECK (claim >= 0),
    question     BIGINT NOT NULL DEFAULT 0 CHECK (question >= 0),
    note         BIGINT NOT NULL DEFAULT 0 CHECK (note >= 0),
    supports     BIGINT NOT NULL DEFAULT 0 CHECK (supports >= 0),
    disputes     BIGINT NOT NULL DEFAULT 0 CHECK (disputes >= 0),
    inconclusive BIGINT NOT NULL DEFAULT 0 CHECK (inconclusive >= 0),
    needs_work   BIGINT NOT NULL DEFAULT 0 CHECK (needs_work >= 0)
);

-- The contribution at its current revision. Every revision, the current one
-- included, is also in `contribution_revisions`; the content is copied here so that
-- reading and listing contributions never joins. The verdict columns count the
-- assessments of the current revision only.
CREATE TABLE contributions (
    id           BIGSERIAL PRIMARY KEY,
    orbit_id     BIGINT NOT NULL REFERENCES orbits (id),
    kind         TEXT NOT NULL
                 CHECK (kind IN ('ATTEMPT', 'OBSERVATION', 'CLAIM', 'QUESTION', 'NOTE')),
    author_id    BIGINT NOT NULL REFERENCES contributors (id),
    problem_id   BIGINT REFERENCES problems (id),
    task_id      BIGINT REFERENCES tasks (id),
    revision     BIGINT NOT NULL DEFAULT 1 CHECK (revision >= 1),
    title        TEXT NOT NULL,
    body         TEXT NOT NULL,
    artifact_ids BIGINT[] NOT NULL DEFAULT '{}',
    supports     BIGINT NOT NULL DEFAULT 0 CHECK (supports >= 0),
    disputes     BIGINT NOT NULL DEFAULT 0 CHECK (disputes >= 0),
    inconclusive BIGINT NOT NULL DEFAULT 0 CHECK (inconclusive >= 0),
    needs_work   BIGINT NOT NULL DEFAULT 0 CHECK (needs_work >= 0),
    created_at   TIMESTAMPTZ NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX contributions_orbit_idx ON contributions (orbit_id, id);
CREATE INDEX contributions_orbit_kind_idx ON contributions (orbit_id, kind, id);
-- Also serves the overview's five latest contributions (scanned backwards).
CREATE INDEX contributions_problem_idx ON contributions (problem_id, id)
    WHERE problem_id IS NOT NULL;
CREATE INDEX contributions_task_idx ON contributions (task_id, id) WHERE task_id IS NOT NULL;

-- Every revision ever written, immutable (see the trigger below).
CREATE TABLE contribution_revisions (
    contribution_id BIGINT NOT NULL REFERENCES contributions (id),
    revision        BIGINT NOT NULL CHECK (revision >= 1),
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    artifact_ids    BIGINT[] NOT NULL DEFAULT '{}',
    created_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (contribution_id, revision)
);

-- An assessment belongs to one exact revision forever; it is never edited.
CREATE TABLE assessments (
    id                        BIGSERIAL PRIMARY KEY,
    contribution_id           BIGINT NOT NULL,
    contribution_revision     BIGINT NOT NULL,
    orbit_id                  BIGINT NOT NULL REFERENCES orbits (id),
    verdict                   TEXT NOT NULL
                              CHECK (verdict IN ('SUPPORTS', 'DISPUTES', 'INCONCLUSIVE', 'NEEDS_WORK')),
    rationale                 TEXT NOT NULL,
    evidence_contribution_ids BIGINT[] NOT NULL DEFAULT '{}',
    assessor_id               BIGINT NOT NULL REFERENCES contributors (id),
    created_at                TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    FOREIGN KEY (contribution_id, contribution_revision)
        REFERENCES contribution_revisions (contribution_id, revision)
);
CREATE INDEX assessments_contribution_idx
    ON assessments (contribution_id, contribution_revision, id);
CREATE INDEX assessments_contribution_id_idx ON assessments (contribution_id, id);

CREATE FUNCTION knowledge_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER contribution_revisions_immutable
    BEFORE UPDATE OR DELETE ON contribution_revisions
    FOR EACH ROW EXECUTE FUNCTION knowledge_immutable();
CREATE TRIGGER assessments_immutable
    BEFORE UPDATE OR DELETE ON assessments
    FOR EACH ROW EXECUTE FUNCTION knowledge_immutable();

CREATE TABLE artifacts (
    id          BIGSERIAL PRIMARY KEY,
    orbit_id    BIGINT NOT NULL REFERENCES orbits (id),
    name        TEXT NOT NULL,
    media_type  TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL CHECK (size_bytes >= 0),
    -- Lowercase hex SHA-256 of `content`; the content route's ETag.
    sha256      TEXT NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    content     BYTEA NOT NULL,
    created_by  BIGINT NOT NULL REFERENCES contributors (id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    CHECK (octet_length(content) = size_bytes)
);
CREATE INDEX artifacts_orbit_idx ON artifacts (orbit_id, id);

CREATE TABLE memory_records (
    id         BIGSERIAL PRIMARY KEY,
    orbit_id   BIGINT NOT NULL REFERENCES orbits (id),
    author_id  BIGINT NOT NULL REFERENCES contributors (id),
    content    TEXT NOT NULL,
    tags       TEXT[] NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX memory_records_orbit_idx ON memory_records (orbit_id, id);
CREATE INDEX memory_records_tags_idx ON memory_records USING gin (tags);

-- Task references, now that their targets exist.
ALTER TABLE tasks
    ADD CONSTRAINT tasks_problem_fk FOREIGN KEY (problem_id) REFERENCES problems (id),
    ADD CONSTRAINT tasks_result_contribution_fk
        FOREIGN KEY (result_contribution_id) REFERENCES contributions (id);

-- Tasks by status per problem, kept by the database itself so that every writer of
-- `tasks` (the API, a bulk load) keeps the counts exact. Inserts are counted per
-- statement; updates only fire when the status or the problem changes (never on
-- lease or checkpoint bookkeeping). The counters row is locked after the task row,
-- in the task write's own transaction.
CREATE FUNCTION problem_task_counts_add(pid BIGINT, st TEXT, n BIGINT) RETURNS void
LANGUAGE sql AS $$
    UPDATE problem_counters SET
        tasks_open      = tasks_open      + CASE WHEN st = 'OPEN'      THEN n ELSE 0 END,
        tasks_completed = tasks_completed + CASE WHEN st = 'COMPLETED' THEN n ELSE 0 END,
        tasks_cancelled = tasks_cancelled + CASE WHEN st = 'CANCELLED' THEN n ELSE 0 END
    WHERE problem_id = pid;
$$;

CREATE FUNCTION tasks_counted_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM problem_task_counts_add(problem_id, status, count(*))
    FROM added WHERE problem_id IS NOT NULL
    GROUP BY problem_id, status ORDER BY problem_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER tasks_counted_on_insert
    AFTER INSERT ON tasks REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION tasks_counted_on_insert();

CREATE FUNCTION tasks_counted_on_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.problem_id IS NOT NULL THEN
        PERFORM problem_task_counts_add(OLD.problem_id, OLD.status, -1);
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.problem_id IS NOT NULL THEN
        PERFORM problem_task_counts_add(NEW.problem_id, NEW.status, 1);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER tasks_counted_on_update
    AFTER UPDATE OF status, problem_id ON tasks FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          OR OLD.problem_id IS DISTINCT FROM NEW.problem_id)
    EXECUTE FUNCTION tasks_counted_on_change();
CREATE TRIGGER tasks_counted_on_delete
    AFTER DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION tasks_counted_on_change();

-- The overview's LEASED count: the orbit's active leases (not ended, not run out),
-- found by range on `expires_at`, so leases that ended or ran out long ago cost
-- nothing.
CREATE INDEX leases_active_orbit_idx ON leases (orbit_id, expires_at) WHERE end_reason IS NULL;
