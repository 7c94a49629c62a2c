// Package oncetest is the library's test kit: an in-memory Store, the
// contract suite every Store must pass, helpers that check a handler of your
// own has its effect once, and an in-memory Enqueuer for the code that
// enqueues.
//
// # The in-memory Store
//
// Store (NewStore) is a storage.Store with the Redis store's semantics, no Redis
// needed: the same claim outcomes, fencing tokens, re-entrant claims, done
// and failed TTLs, result limit, windows and Observer events. Every entry
// expires. On a Clock (NewStoreWithClock) leases and TTLs end when the test
// advances the clock, so a test of lease expiry does not wait for it:
//
//	clock := oncetest.NewClock(time.Now())
//	store, _ := oncetest.NewStoreWithClock(storage.Options{}, clock.Now)
//	...
//	clock.Advance(time.Minute) // the crashed worker's lease is over
//
// It lives in one process: use it in tests and examples, not between
// workers.
//
// # The contract suite
//
// TestStore runs the Store contract against any implementation; the Redis store
// (on a real redis-server) and Store both pass it:
//
//	func TestMyStore(t *testing.T) {
//		oncetest.TestStore(t, func(t *testing.T, opts storage.Options) (storage.Store, error) {
//			return newMyStore(t, opts)
//		})
//	}
//
// # Testing your handlers
//
// RequireOnce delivers a job, built by your Spec and so keyed as in
// production, to your asynq handler several times at once, through the
// Middleware on a fresh Store, with asynq's retries of failed and panicked
// runs, and fails the test unless its effect happened exactly once. The
// handler (or the fake of its downstream) reports each effect with Effect:
// a handler that acts, fails and acts again on its retry fails the test,
// though it returned nil only once. RequireOnceWith takes a task built by
// plain asynq code, keyed by your worker's Catalog.
//
// # Testing the code that enqueues
//
// Enqueuer is an in-memory stand-in for dedup.Producer: the same answers
// within a key's first life (enqueued, duplicate, conflict, throttled),
// what it accepted kept for RequireEnqueued and RequireNotEnqueued, no
// Redis needed. NewProducer builds a real Producer in a test, on a Redis
// such as redistest's.
package oncetest
