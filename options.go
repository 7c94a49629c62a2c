package onceq

import (
	"context"
	"errors"
	"fmt"
	"time"
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

func (o StoreOptions) withDefaults() (StoreOptions, error) {
	if o.DoneTTL == 0 {
		o.DoneTTL = 24 * time.Hour
	}
	if o.FailedTTL == 0 {
		o.FailedTTL = time.Hour
	}
	if o.MaxResultBytes == 0 {
		o.MaxResultBytes = 64 << 10
	}
	if o.Owner == "" {
		o.Owner = bootOwner
	}
	if o.Observer == nil {
		o.Observer = func(context.Context, Event) {}
	}
	switch {
	case o.DoneTTL < time.Millisecond:
		return o, errors.New("onceq: DoneTTL must be at least 1ms")
	case o.FailedTTL < time.Millisecond:
		return o, errors.New("onceq: FailedTTL must be at least 1ms")
	case checkField("owner", o.Owner) != nil:
		return o, fmt.Errorf("onceq: %w", checkField("Owner", o.Owner))
	case o.MaxResultBytes < 0:
		return o, errors.New("onceq: MaxResultBytes must not be negative")
	}
	return o, nil
}
