package oncetest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// NewProducer is dedup.NewProducer for a test: t fails when the Producer
// cannot be built (an asynq the library did not verify, say).
func NewProducer(t testing.TB, rdb redis.UniversalClient, store storage.Store, opts dedup.ProducerOptions) *dedup.Producer {
	t.Helper()
	p, err := dedup.NewProducer(rdb, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
