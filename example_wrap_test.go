package onceq_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
)

// Wrap puts a plain asynq handler of your own inside the idempotency record.
// asynq delivers at least once: the same task delivered twice runs once, and
// the second delivery is acknowledged with the stored result. A task without
// onceq's headers is keyed by its payload's "id" (or "dedup_key"), else by
// its content hash; give the middleware a Catalog for your types' own rules.
// NewServer does this wrapping for a whole asynq server.
func ExampleMiddleware_Wrap() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store, _ := onceq.NewRedisStore(rdb, onceq.StoreOptions{})
	mw, _ := onceq.NewMiddleware(store, onceq.MiddlewareOptions{})
	defer mw.Shutdown(context.Background())

	sendInvoice := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		run, _ := onceq.RunFromContext(ctx)
		fmt.Println("sending with Message-ID", run.Downstream)
		onceq.SetResult(ctx, []byte(`{"sent":true}`))
		return nil
	})
	handler := mw.Wrap(sendInvoice)

	task := asynq.NewTask("invoice:send", []byte(`{"id":"inv-1","to":"ada@example.com"}`))
	for delivery := 1; delivery <= 2; delivery++ {
		err := handler.ProcessTask(context.Background(), task)
		fmt.Println("delivery", delivery, "error:", err)
	}
	rec, _ := store.Status(context.Background(), onceq.Key{Namespace: "invoice:send", ID: "inv-1"})
	fmt.Println(rec.State, rec.Attempts, string(rec.Result))
	// Output:
	// sending with Message-ID invoice:send/inv-1
	// delivery 1 error: <nil>
	// delivery 2 error: <nil>
	// done 1 {"sent":true}
}
