-- Webhooks (contract section 15, docs/DECISIONS.md "Webhooks (issue 22)").
--
-- A subscription's delivery progress lives on its own row: `delivered_through` (the
-- last revision handled: delivered, or skipped by the kinds filter), the failed
-- `attempts` at the next change and when the next attempt is due. The claim
-- (`claimed_by`, `claim_seq`, `claim_until`) is a lease with an expiry: one instance
-- at a time delivers a subscription, and holds no database connection while its
-- request is out. A killed instance's claim runs out and another instance resumes
-- after `delivered_through`, so a change is only ever re-sent, never lost.

CREATE TABLE webhooks (
    id BIGSERIAL PRIMARY KEY,
    contributor_id BIGINT NOT NULL REFERENCES contributors (id),
    orbit_id BIGINT NOT NULL REFERENCES orbits (id),
    url TEXT NOT NULL,
    -- NULL: every kind.
    kinds TEXT[],
    description TEXT NOT NULL DEFAULT '',
    secret TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'DISABLED')),
    disabled_reason TEXT,
    delivered_through BIGINT NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_by TEXT,
    claim_seq BIGINT NOT NULL DEFAULT 0,
    claim_until TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX webhooks_contributor ON webhooks (contributor_id, id);
-- The claim pass: active subscriptions by due time.
CREATE INDEX webhooks_due ON webhooks (next_attempt_at) WHERE status = 'ACTIVE';

-- The delivery log: every attempt, the latest 100 per subscription kept.
CREATE TABLE webhook_deliveries (
    id BIGSERIAL PRIMARY KEY,
    webhook_id BIGINT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    attempt INT NOT NULL,
    status_code INT,
    error TEXT,
    duration_ms INT NOT NULL,
    attempted_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX webhook_deliveries_latest ON webhook_deliveries (webhook_id, id);
