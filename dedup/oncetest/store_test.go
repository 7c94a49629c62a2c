package oncetest_test

import (
	"testing"

	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/storage"
)

// The in-memory Store passes the contract suite RedisStore passes.
func TestMemoryStore(t *testing.T) {
	t.Parallel()
	oncetest.TestStore(t, func(t *testing.T, opts storage.Options) (storage.Store, error) {
		s, err := oncetest.NewStore(opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}
