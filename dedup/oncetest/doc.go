// Package oncetest is onceq's test kit: an in-memory Store, the contract
// suite every Store must pass, and helpers that check a handler of your own
// runs once under onceq.
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
// RequireOnce delivers one task to your asynq handler several times at
// once, through onceq's Middleware on a fresh Store, with asynq's retries
// of failed and panicked runs, and fails the test unless the handler
// succeeded exactly once. It returns the job's record, whose Result is what
// every later delivery is answered with.
package oncetest
