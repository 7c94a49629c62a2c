package dedup

import (
	"context"
	"time"

	"github.com/onceq/onceq/dedup/internal/storerule"
)

// StoreOptions configures a RedisStore.
type StoreOptions struct {
	// DoneTTL is how long a done record and its result are kept, so later
	// deliveries are acknowledged as duplicates. Default: 24h.
	DoneTTL time.Duration
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

// withDefaults applies the defaults every Store shares (storerule) and
// checks the options.
func (o StoreOptions) withDefaults() (StoreOptions, error) {
	r, err := storerule.Options{DoneTTL: o.DoneTTL, FailedTTL: o.FailedTTL,
		MaxResultBytes: o.MaxResultBytes, Owner: o.Owner}.WithDefaults()
	if err != nil {
		return o, err
	}
	o.DoneTTL, o.FailedTTL, o.MaxResultBytes, o.Owner = r.DoneTTL, r.FailedTTL, r.MaxResultBytes, r.Owner
	if o.Observer == nil {
		o.Observer = func(context.Context, Event) {}
	}
	return o, nil
}
