package onceq_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
)

// Wrap your own asynq handler in one call. A task delivered twice (asynq is
// at least once) runs once; the second delivery is acknowledged with the
// stored result. In a server, onceq.ServerConfig adds the two asynq.Config
// hooks the middleware needs:
//
//	srv := asynq.NewServer(redisOpt, onceq.ServerConfig(asynq.Config{Concurrency: 10}))
//	srv.Run(mw.Wrap(handler))
func ExampleMiddleware_Wrap() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store, _ := onceq.NewRedisStore(rdb, onceq.StoreOptions{})
	mw, _ := onceq.NewMiddleware(store, onceq.MiddlewareOptions{})
	defer mw.Shutdown(context.Background())

	sendInvoice := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		key, _ := onceq.KeyFromContext(ctx) // pass it downstream as the Idempotency-Key
		fmt.Println("sending", key)
		onceq.SetResult(ctx, []byte(`{"sent":true}`))
		return nil
	})
	handler := mw.Wrap(sendInvoice)

	// A task enqueued by plain asynq code: the key is the payload's "id".
	task := asynq.NewTask("invoice:send", []byte(`{"id":"inv-1","to":"ada@example.com"}`))
	for delivery := 1; delivery <= 2; delivery++ {
		err := handler.ProcessTask(context.Background(), task)
		fmt.Println("delivery", delivery, "error:", err)
	}
	rec, _ := store.Status(context.Background(), onceq.Key{Namespace: "invoice:send", ID: "inv-1"})
	fmt.Println(rec.State, string(rec.Result))
	// Output:
	// sending invoice:send/inv-1
	// delivery 1 error: <nil>
	// delivery 2 error: <nil>
	// done {"sent":true}
}
