package oncetest_test

import (
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
)

// The in-memory Store passes the contract suite RedisStore passes.
func TestMemoryStore(t *testing.T) {
	t.Parallel()
	oncetest.TestStore(t, func(t *testing.T, opts dedup.StoreOptions) (dedup.Store, error) {
		s, err := oncetest.NewStore(opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}
