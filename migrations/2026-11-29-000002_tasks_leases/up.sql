-- Tasks, fenced leases, checkpoints and handoffs.
--
-- Lock order in every transaction that writes here: the task row, then its
-- handoffs, then its leases, then the orbit row (revision) last.

CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE tasks (
    id                     BIGSERIAL PRIMARY KEY,
    orbit_id               BIGINT NOT NULL REFERENCES orbits (id),
    problem_id             BIGINT,
    title                  TEXT NOT NULL,
    description            TEXT NOT NULL DEFAULT '',
    status                 TEXT NOT NULL DEFAULT 'OPEN'
                           CHECK (status IN ('OPEN', 'COMPLETED', 'CANCELLED')),
    -- The highest lease version ever issued (0 before the first lease).
    lease_version          BIGINT NOT NULL DEFAULT 0 CHECK (lease_version >= 0),
    -- The highest checkpoint sequence issued.
    checkpoint_sequence    BIGINT NOT NULL DEFAULT 0,
    completion_summary     TEXT,
    result_contribution_id BIGINT,
    cancel_reason          TEXT,
    created_by             BIGINT NOT NULL REFERENCES contributors (id),
    created_at             TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    updated_at             TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX tasks_orbit_idx ON tasks (orbit_id, id);
CREATE INDEX tasks_problem_idx ON tasks (problem_id) WHERE problem_id IS NOT NULL;

CREATE TABLE leases (
    id             BIGSERIAL PRIMARY KEY,
    task_id        BIGINT NOT NULL REFERENCES tasks (id),
    orbit_id       BIGINT NOT NULL REFERENCES orbits (id),
    contributor_id BIGINT NOT NULL REFERENCES contributors (id),
    lease_version  BIGINT NOT NULL CHECK (lease_version >= 1),
    acquired_at    TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    renewed_at     TIMESTAMPTZ,
    released_at    TIMESTAMPTZ,
    -- NULL while the lease has not ended; EXPIRED is recorded when observed.
    end_reason     TEXT CHECK (end_reason IN
                   ('RELEASED', 'EXPIRED', 'HANDED_OFF', 'COMPLETED', 'CANCELLED', 'MEMBER_REMOVED')),
    UNIQUE (task_id, lease_version),
    CHECK (expires_at > acquired_at),
    CHECK (released_at IS NULL OR end_reason IS NOT NULL),
    -- Two leases of one task never overlap in active time, whatever the code does:
    -- a lease covers [acquired_at, released_at or expires_at).
    EXCLUDE USING gist (
        task_id WITH =,
        tstzrange(acquired_at, COALESCE(released_at, expires_at), '[)') WITH &&
    )
);
-- At most one lease per task that has not ended.
CREATE UNIQUE INDEX leases_one_open_per_task ON leases (task_id) WHERE end_reason IS NULL;
CREATE INDEX leases_contributor_open_idx ON leases (contributor_id) WHERE end_reason IS NULL;

CREATE TABLE checkpoints (
    id             BIGSERIAL PRIMARY KEY,
    task_id        BIGINT NOT NULL REFERENCES tasks (id),
    orbit_id       BIGINT NOT NULL REFERENCES orbits (id),
    lease_version  BIGINT NOT NULL,
    sequence       BIGINT NOT NULL CHECK (sequence >= 1),
    author_id      BIGINT NOT NULL REFERENCES contributors (id),
    summary        TEXT NOT NULL,
    -- RFC 8785 canonical form of the state; state_hash is its SHA-256.
    state          TEXT NOT NULL,
    state_hash     TEXT NOT NULL,
    artifact_ids   BIGINT[] NOT NULL DEFAULT '{}',
    created_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (task_id, sequence)
);

CREATE TABLE handoffs (
    id                BIGSERIAL PRIMARY KEY,
    orbit_id          BIGINT NOT NULL REFERENCES orbits (id),
    task_id           BIGINT NOT NULL REFERENCES tasks (id),
    checkpoint_id     BIGINT NOT NULL REFERENCES checkpoints (id),
    lease_version     BIGINT NOT NULL,
    -- PENDING past expires_at reads as EXPIRED everywhere.
    status            TEXT NOT NULL DEFAULT 'PENDING' CHECK (status IN
                      ('PENDING', 'ACCEPTED', 'SUPERSEDED', 'DECLINED', 'WITHDRAWN', 'EXPIRED')),
    message           TEXT NOT NULL,
    from_contributor  BIGINT NOT NULL REFERENCES contributors (id),
    to_contributor    BIGINT REFERENCES contributors (id),
    accepted_by       BIGINT REFERENCES contributors (id),
    accepted_lease_id BIGINT REFERENCES leases (id),
    decline_reason    TEXT,
    expires_at        TIMESTAMPTZ NOT NULL,
    accepted_at       TIMESTAMPTZ,
    ended_at          TIMESTAMPTZ,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
-- At most one PENDING handoff per task (an offer supersedes the older one).
CREATE UNIQUE INDEX handoffs_one_pending_per_task ON handoffs (task_id) WHERE status = 'PENDING';
CREATE INDEX handoffs_task_idx ON handoffs (task_id, id);
CREATE INDEX handoffs_to_idx ON handoffs (to_contributor, id);
CREATE INDEX handoffs_from_idx ON handoffs (from_contributor, id);
CREATE INDEX handoffs_orbit_pending_idx ON handoffs (orbit_id, id) WHERE status = 'PENDING';
