package libtest

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// The middleware's heartbeat goroutine ends with Shutdown.
func TestMiddlewareLeavesNoGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer rdb.Close()
	s, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := dedup.NewMiddleware(s, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ok := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error { dedup.SetResult(ctx, []byte("ok")); return nil })
	if err := m.Wrap(ok).ProcessTask(context.Background(), asynq.NewTask("t", []byte(`{"id":"leak"}`))); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The middleware's heartbeat ends with RequireOnce.
func TestRequireOnceLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ok := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error { dedup.SetResult(ctx, []byte("ok")); return nil })
	oncetest.RequireOnceWith(t, dedup.MiddlewareOptions{}, ok, asynq.NewTask("t", []byte(`{"id":"leak"}`)), 3)
}
