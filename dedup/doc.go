// Package dedup is onceq's idempotency engine: keys and fingerprints, the
// Redis-backed record that lets a job run once in effect, time windows for
// producers, and the asynq middleware that puts handlers inside it.
//
// # Keys
//
// A Key is a namespace (by default the task type) and an id: an explicit
// business key, else the payload's "dedup_key" or "id", else the SHA-256 of
// its canonical JSON (see Canonical) in hex. Every Redis key of one Key shares
// the Cluster hash tag {namespace/id}. The fingerprint is the same SHA-256 as
// base64url (Hash); ParseFingerprint also reads the hex that older producers
// sent. A producer that uses the key as the asynq task id may leave the key
// header out: TaskKey reads it from the task id.
//
// # The record
//
//	absent --Claim--> running(owner, token, lease) --Complete--> done(result)
//	                          |                   \--Release---> failed(cause)
//	                          \-- lease expires: the next Claim takes over
//
// Claim is one Lua call that answers Acquired (with a fencing token),
// Duplicate (done, with the stored result), InProgress (a live lease, with its
// end) or Mismatch (the key was claimed with another payload fingerprint).
// Extend, Complete and Release succeed only for the current token; a worker
// whose lease was taken over gets ErrLeaseLost and writes nothing. Tokens grow
// with Redis's clock, so even a token from an expired record never matches.
//
// TTLs: a running record lives lease + FailedTTL, a done record DoneTTL (24 h
// by default), a failed record FailedTTL (1 h). A failed record is visible to
// Status but never blocks a Claim. Windows (Reserve) live exactly their window.
// Nothing grows forever.
//
// # The guarantee and its limits
//
// asynq delivers at least once. The record turns that into "the handler's
// effect happens once" provided: the handler is done when Complete succeeds;
// a crash after the side effect but before Complete lets the next delivery run
// the handler again once the lease ends, so handlers pass the key (from
// KeyFromContext) downstream as an idempotency key or Message-ID, where the
// downstream deduplicates. Redis is the source of truth: on a failover that
// loses acknowledged writes (asynchronous replication), a claim or completion
// can be lost and a job can run twice; run Redis with AOF and noeviction.
package dedup
