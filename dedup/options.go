package dedup

import (
	"context"

	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// withDefaults applies the defaults every Store shares (storerule) and
// checks the options.
func withDefaults(o storage.Options) (storage.Options, error) {
	r, err := storerule.Options{DoneTTL: o.DoneTTL, ResultTTL: o.ResultTTL, FailedTTL: o.FailedTTL,
		MaxResultBytes: o.MaxResultBytes, Owner: o.Owner}.WithDefaults()
	if err != nil {
		return o, err
	}
	o.DoneTTL, o.ResultTTL, o.FailedTTL, o.MaxResultBytes, o.Owner = r.DoneTTL, r.ResultTTL, r.FailedTTL, r.MaxResultBytes, r.Owner
	if o.Observer == nil {
		o.Observer = func(context.Context, storage.Event) {}
	}
	return o, nil
}
