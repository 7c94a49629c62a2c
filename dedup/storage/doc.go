// Package storage is the contract between the library (package dedup) and
// the store that keeps its idempotency records and windows: what a Store
// implementer needs, and the words both sides share. An application passes
// nil for the Redis store on its client, or dedup.NewRedisStore's for other
// TTLs; the test kit (dedup/oncetest) has an in-memory Store and the
// contract suite every Store passes.
//
// Key, Decision, Status, Event and Observer are declared here because a
// Store speaks them; package dedup names them too, as aliases.
package storage
