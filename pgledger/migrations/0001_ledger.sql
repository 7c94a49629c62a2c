-- The ledger of transactional jobs: one row per idempotency key, written in
-- the same transaction as the handler's effects. Only committed states are
-- ever visible to others: done (the effect committed) and failed (the last
-- attempt rolled back; the next one may run). running exists only inside the
-- transaction that holds the row lock.
CREATE TABLE IF NOT EXISTS onceq_ledger (
    key          text        PRIMARY KEY,
    state        text        NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    fingerprint  text        NOT NULL DEFAULT '',
    attempts     integer     NOT NULL DEFAULT 0,
    result       bytea,
    error        text        NOT NULL DEFAULT '',
    first_seen   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);

-- Prune walks done rows by age.
CREATE INDEX IF NOT EXISTS onceq_ledger_completed_at ON onceq_ledger (completed_at) WHERE state = 'done';
