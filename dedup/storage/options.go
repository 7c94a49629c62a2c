package storage

import "time"

// Options configure a Store: the Redis one (dedup.NewRedisStore) and any
// other (the test kit's in-memory one).
type Options struct {
	// DoneTTL is how long a done record and its result are kept, so later
	// deliveries are acknowledged as duplicates. Default: 24h.
	DoneTTL time.Duration
	// ResultTTL is how long of the done TTL a done record keeps its full
	// form, result included; for the rest of the done TTL a compact mark
	// (tens of bytes) still answers repeats: a duplicate, "done; result no
	// longer kept", or a conflict. At or above the done TTL there is no
	// mark. Default: 1h.
	ResultTTL time.Duration
	// FailedTTL is how long a failed record stays visible to Status. It never
	// blocks a claim. It is also the grace a running record outlives its
	// lease by. Default: 1h.
	FailedTTL time.Duration
	// MaxResultBytes caps a stored result. Default: 64 KiB.
	MaxResultBytes int
	// Owner names this process in running records claimed without a
	// delivery. It must not contain '|'. Default:
	// hostname/pid/boot id, unique to this process start.
	Owner string
	// Observer sees every decision. Default: none.
	Observer Observer
}
