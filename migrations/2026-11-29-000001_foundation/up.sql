-- Identity, orbits, membership and the per-orbit revision log.

CREATE TABLE contributors (
    id          BIGSERIAL PRIMARY KEY,
    type        TEXT NOT NULL CHECK (type IN ('AGENT', 'HUMAN', 'ORGANIZATION', 'SYSTEM')),
    name        TEXT NOT NULL,
    model_claim TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- A token is stored only as an argon2id hash of its secret; `lookup` is the public
-- part of the token that finds the row without hashing.
CREATE TABLE tokens (
    id             BIGSERIAL PRIMARY KEY,
    contributor_id BIGINT NOT NULL REFERENCES contributors (id),
    kind           TEXT NOT NULL CHECK (kind IN ('CONTRIBUTOR', 'AGENT')),
    lookup         TEXT NOT NULL UNIQUE,
    secret_hash    TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    last_used_at   TIMESTAMPTZ,
    revoked_at     TIMESTAMPTZ
);
CREATE INDEX tokens_contributor_idx ON tokens (contributor_id, id);

CREATE TABLE orbits (
    id          BIGSERIAL PRIMARY KEY,
    slug        TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    join_policy TEXT NOT NULL CHECK (join_policy IN ('OPEN', 'INVITE')),
    -- Highest revision issued; bumped by exactly one per successful write (src/revision.rs).
    revision    BIGINT NOT NULL DEFAULT 0 CHECK (revision >= 0),
    created_by  BIGINT NOT NULL REFERENCES contributors (id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE memberships (
    orbit_id       BIGINT NOT NULL REFERENCES orbits (id),
    contributor_id BIGINT NOT NULL REFERENCES contributors (id),
    role           TEXT NOT NULL CHECK (role IN ('OWNER', 'MAINTAINER', 'CONTRIBUTOR')),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (orbit_id, contributor_id)
);
CREATE INDEX memberships_contributor_idx ON memberships (contributor_id, orbit_id);

-- One row per revision: (orbit_id, revision) is the primary key, so a duplicate
-- revision cannot be stored, and the counter in `orbits` makes them dense.
CREATE TABLE changes (
    orbit_id       BIGINT NOT NULL REFERENCES orbits (id),
    revision       BIGINT NOT NULL CHECK (revision >= 1),
    kind           TEXT NOT NULL,
    entity_type    TEXT NOT NULL,
    entity_id      BIGINT NOT NULL,
    task_id        BIGINT,
    contributor_id BIGINT NOT NULL REFERENCES contributors (id),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    summary        TEXT NOT NULL,
    PRIMARY KEY (orbit_id, revision)
);

-- Idempotency: one row per (contributor, operation, key). The row and the stored
-- response are written in the same transaction as the effect (src/idempotency.rs).
CREATE TABLE idempotency_keys (
    id              BIGSERIAL PRIMARY KEY,
    contributor_id  BIGINT NOT NULL REFERENCES contributors (id),
    operation       TEXT NOT NULL,
    key             TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    response_status SMALLINT NOT NULL,
    response_body   BYTEA NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    expires_at      TIMESTAMPTZ NOT NULL,
    UNIQUE (contributor_id, operation, key)
);
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);
