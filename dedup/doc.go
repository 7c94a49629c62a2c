// Package dedup runs asynq tasks once in effect. Network failures, client
// retries and worker crashes deliver the same job twice; onceq refuses the
// repeat at the producer and, at the worker, runs each handler inside an
// idempotency record in Redis, so the effect happens once.
//
// Declare a task type once with Define; a Catalog of them is the one rule
// every way in agrees on (library code, a CLI, batch files, an HTTP API).
// A Producer enqueues its Jobs and answers with an Outcome: Enqueued,
// Duplicate (with the stored result once done), Conflict (the key was used
// for other content) or Throttled (a time window or rate rule, with
// RetryAfter). NewServer wires an asynq server whose handlers run inside the
// Middleware; Handle binds a typed func to a type and records its result,
// which duplicates get back. Producer.Status and Wait say whether a job ran.
// On Redis Cluster a job goes to its key's home queue (ClusterQueues), in
// the slot of its record, so one task type loads every master and each
// script that moves a task reads its record in the same step.
// The package oncetest holds an in-memory Store and helpers for testing
// handlers without Redis; pgledger commits a handler's Postgres effects with
// its record in one transaction.
//
// # Keys
//
// A Key is a namespace (the task type) and an id: the Spec's business id
// (ID), else the payload's "dedup_key" or "id", else the SHA-256 of its
// canonical JSON in hex. Canonical JSON orders object members, normalises
// numbers and drops the fields tagged `dedup:"volatile"`, so key order and
// whitespace never change the hash. Every Redis key of one Key shares the
// Cluster hash tag of its home, one of 16 slots chosen from the Key alone. The fingerprint is the same SHA-256 as
// base64url; it is stored with the record, so a key reused with other
// content is a Conflict. A producer that uses the key as the asynq task id
// leaves the key header out: the worker reads the key from the task id.
//
// # The record
//
//	absent --Claim--> running(owner, token, lease) --Complete--> done(result)
//	                          |                   \--Release---> failed(cause)
//	                          \-- lease expires: the next Claim takes over
//
// The record is one Redis string (layout in record.go). A first Claim is a
// single SET NX PX GET: it writes the running record, or returns the one that
// is there; a done one already answers Duplicate (with the stored result) or
// Conflict (done with another payload fingerprint). Only a running or failed
// record needs a Lua call (claim.lua), which answers Acquired or InProgress
// (a live lease, with its end).
//
// A fingerprint is checked against a done record only. A failed record, or
// a running one whose lease expired, is taken over by a claim with another
// fingerprint, which is stored: after a job failed for good, the producer's
// next incarnation of the key (the task header onceq-inc), perhaps with a corrected
// payload, runs. A live lease with another fingerprint answers InProgress,
// never Conflict: two jobs of one key never run at once, and the newer waits
// instead of being archived. Extend, Complete and Release are
// compare-and-set scripts: they write only while the record still starts
// with the hold's state, token and owner; a worker whose lease was taken
// over gets ErrLeaseLost and writes nothing.
//
// # The life of a key
//
// The producer (Producer, through the guard around asynq's enqueue
// script), the worker (this record), the HTTP API and status follow one table:
//
//	state of the key          repeat, same content        other content          free again
//	absent                    enqueued                    enqueued               -
//	pending / scheduled       duplicate (debounce:        conflict (replace,     done or failed
//	                          replaces it, starts later)  debounce: replaces it)
//	running / retry           duplicate, in progress      conflict               done or failed
//	done                      duplicate, stored result    conflict               the done TTL ends
//	failed for good           a new incarnation runs      a new incarnation      at once
//	inside a window / rule    throttled, retry after      throttled              the window ends
//
// Under the successor policy (Repeat), a repeat while the job runs or waits
// for a retry is kept as the key's one successor (StatusWaiting), in place
// of any that waited, and a worker starts it as the next incarnation when
// the run ends; once the key is done, other content starts at once.
//
// "Failed for good" is an archived task: its last attempt failed, or the
// worker refused it. Its record is failed, which never blocks a claim, and
// the producer swaps the archived task for the next incarnation in the
// insert's own script, so there is never both nor neither. Retries
// stay inside one incarnation; each incarnation has its own downstream key
// (Run.Downstream: "ns/id", then "ns/id#2"), so a downstream that cached the
// failed attempt's answer does not replay it. A done record refuses a repeat
// even when its asynq task was deleted; a completed task that outlived its
// done record does not. No key is refused without a live or done job behind
// it, except by a window, which says when it ends.
//
// Leases run on Redis's clock alone: a running record lives lease + grace
// (FailedTTL), and its lease is live while its PTTL exceeds the grace. Extend
// pushes the PTTL.
//
// # Tokens and clocks
//
// A record's first token is the claiming worker's clock in µs, strictly
// increasing within the process; every later claim of the record takes
// max(stored + 1, its own clock), so within a record's life tokens always
// grow. Across the record's expiry (or Forget) they grow as long as worker
// clocks disagree by less than the record lived (at least lease + grace,
// an hour by default). Clock skew beyond that can make a later token smaller
// than a forgotten one; that matters only to a downstream that orders tokens.
// It can never let a stale holder write: the compare-and-set matches token
// and owner together. The owner names one process start (host/pid/boot id,
// or the boot id plus an asynq task id), within which tokens are strictly
// increasing, so no two such holds of a key are ever equal. An owner shared
// by processes (an API delivery id) adds only the chance that two clocks
// yield the same µs for the same key across an expiry. Skew cannot stretch or shorten a lease
// either: lease ends are Redis's TTLs. The worker's clock stamps only
// first-seen, updated and completed times.
//
// # Re-entrant claims
//
// A claim made by delivery id (Store.Claim) is re-entrant for id: when its
// reply was lost (the record says running, owned by id, with a live lease),
// the same delivery claims again at once with a fresh token, fencing out the
// lost one; any other delivery still sees InProgress. The middleware names a
// delivery by the process's boot id and the asynq task id, and refuses a
// re-entry while the key is running in this process, so a redelivery that
// overlaps a live run never takes it over.
//
// # Round trips per task
//
// On a Server a task costs the worker two Redis round trips, as with bare
// asynq, on Redis Cluster too: the claim of a new key runs in the call of
// asynq's dequeue and Complete in its acknowledgement (join.go). Where that
// does not apply (a key with a running or failed record, an asynq the
// library did not verify, on Cluster a task outside its key's home queue,
// a Middleware on an asynq server of your own) the claim
// (one SET NX PX GET) and Complete are calls of their own: four round trips.
// The heartbeat extends every live lease of the process in one pipelined
// round trip per tick.
//
// TTLs: a running record lives lease + FailedTTL, a done record ResultTTL (1 h
// by default) and then, to DoneTTL (24 h), a compact mark of tens of bytes
// that still answers a repeat (a duplicate without its result, or a conflict),
// a failed record FailedTTL (1 h). A failed record is visible to
// Status but never blocks a Claim. Windows (Reserve) live exactly their window.
// Nothing grows forever.
//
// # The guarantee and its limits
//
// asynq delivers at least once. The record turns that into "the handler's
// effect happens once" provided: the handler is done when Complete succeeds;
// a crash after the side effect but before Complete lets the next delivery run
// the handler again once the lease ends, so handlers pass the key (from
// RunFromContext: Run.Downstream) downstream as an idempotency key or Message-ID, where the
// downstream deduplicates. Retries of one incarnation share that key; the
// next incarnation (header onceq-inc "2", after a job failed for good) gets
// "key#2", so the downstream does not replay the answer that failed. Redis is the source of truth: on a failover that
// loses acknowledged writes (asynchronous replication), a claim or completion
// can be lost and a job can run twice; run Redis with AOF and noeviction.
//
// # The asynq it runs on
//
// The insert guard, the join and the fast recoverer stand in for scripts of
// asynq's and read its keys and task messages. A release of this package is
// verified against named asynq releases (v0.26.0), and NewProducer and
// NewServer check, in your build, that the linked asynq is one of them: its
// module version, and the scripts its own client sends to insert a task.
// Otherwise they return an error naming the linked and the verified
// releases, unless AllowUnverifiedAsynq is set (ProducerOptions,
// MiddlewareOptions): then they run without the guard (a key that failed for
// good stays refused by its archived task; Repeat's replace and debounce
// fail), without the join (four round trips per task) and without the fast
// recoverer (asynq's own takes a killed worker's tasks back in 1-2
// minutes), and the Observer hears what is off, once. The guard is a go-redis
// hook on the Producer's client: it sees an insert however it is sent, one
// command, a pipeline or a transaction, and refuses one it cannot vouch for.
package dedup
