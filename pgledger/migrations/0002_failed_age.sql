-- Prune also walks failed rows by age: a failed row never blocks a run, so
-- one the application has not retried within the retention can go.
CREATE INDEX IF NOT EXISTS onceq_ledger_failed_updated_at ON onceq_ledger (updated_at) WHERE state = 'failed';
