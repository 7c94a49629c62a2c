-- The transactional outbox: EnqueueTx writes a job here inside the
-- application's own transaction, so the job exists if and only if that
-- transaction commits. A relay moves committed rows into asynq through the
-- Producer and deletes each row once the Producer has answered for it: the
-- relay is the table's owner, and a row lives only between its commit and
-- its move. Rows of one key move in id order (only a key's oldest row is
-- eligible), so a replace or debounce sees its jobs in commit order.
CREATE TABLE IF NOT EXISTS onceq_outbox (
    id           bigserial   PRIMARY KEY,
    key          text        NOT NULL,
    fingerprint  text        NOT NULL,
    task_type    text        NOT NULL,
    payload      bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    queue        text        NOT NULL,
    policy       jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A throttled or failed move waits until then; attempts and last_error
    -- say why for operators.
    available_at timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text        NOT NULL DEFAULT ''
);

-- EnqueueTx reads a key's rows; the relay picks each key's oldest.
CREATE INDEX IF NOT EXISTS onceq_outbox_key_id ON onceq_outbox (key, id);
