package onceq_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
)

// The middleware's heartbeat goroutine ends with Shutdown.
func TestMiddlewareLeavesNoGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer rdb.Close()
	s, err := onceq.NewRedisStore(rdb, onceq.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := onceq.NewMiddleware(s, onceq.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var e effect
	if err := m.Wrap(e.handler("ok")).ProcessTask(context.Background(), asynq.NewTask("t", []byte(`{"id":"leak"}`))); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
