// Package pgledger makes jobs that write to Postgres run exactly once in
// effect, whatever Redis remembers.
//
// A transactional handler (TxHandler) gets a pgx.Tx. The Ledger begins the
// transaction, takes the job's ledger row under a row lock (an upsert on
// the job key), returns the stored result if the row is done, otherwise runs
// the handler, marks the row done with its result and commits: the effect
// and its record commit together or not at all. A crash before the commit
// leaves neither; after it, every later delivery finds the done row, even if
// Redis lost the idempotency record, the queue, or both. A handler error
// rolls both back, then a separate statement records the failed attempt.
//
// The Redis claim of the dedup middleware still runs first: it keeps a
// second concurrent delivery from queueing on the row lock, and keeps the
// Redis record and result for fast duplicates. The ledger is the source of
// truth for these handlers.
//
// Cost: each transactional job holds one pool connection for its whole run
// and adds BEGIN, the upsert, the done update and COMMIT (four round trips,
// one fsync at commit) to the Redis path. Size the pool at least at the
// worker's concurrency.
//
// Rows are kept until Prune removes done rows older than a retention the
// application chooses: the table belongs to the application's database.
// cmd/worker prunes at start and hourly (ONCEQ_POSTGRES_RETENTION).
//
// # The outbox
//
// EnqueueTx writes a job into the onceq_outbox table inside the
// application's own transaction (the order row and its payment job commit
// together, or neither does) and answers what that transaction can know:
// accepted into the outbox, or a duplicate or conflict of a job the outbox
// or the ledger holds. A Relay moves committed rows into asynq through the
// Producer, woken by NOTIFY at each commit and polling as the fallback; the
// relay owns the table and deletes each row once the Producer answered for
// it. Relays run side by side (FOR UPDATE SKIP LOCKED, a key's oldest row
// first, so a key's jobs keep their commit order); a relay killed between
// its enqueues and its delete leaves rows whose next move is a Duplicate,
// because the key is the task id. Until it moves, a job's status is
// StatusOutbox (through StatusStore).
package pgledger
