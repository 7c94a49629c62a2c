package dedup_test

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// Wrap puts a plain asynq handler of your own inside the idempotency record.
// asynq delivers at least once: the same task delivered twice runs once, and
// the second delivery is acknowledged with the stored result. A task without
// onceq's headers is keyed by its payload's "id" (or "dedup_key"), else by
// its content hash; give the middleware a Catalog for your types' own rules.
// NewServer does this wrapping for a whole asynq server.
func ExampleMiddleware_Wrap() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	store, _ := dedup.NewRedisStore(rdb, storage.Options{})
	mw, _ := dedup.NewMiddleware(store, dedup.MiddlewareOptions{})
	defer mw.Shutdown(context.Background())

	sendInvoice := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		run, _ := dedup.RunFromContext(ctx)
		fmt.Println("sending with Message-ID", run.Downstream)
		dedup.SetResult(ctx, []byte(`{"sent":true}`))
		return nil
	})
	handler := mw.Wrap(sendInvoice)

	task := asynq.NewTask("invoice:send", []byte(`{"id":"inv-1","to":"ada@example.com"}`))
	for delivery := 1; delivery <= 2; delivery++ {
		err := handler.ProcessTask(context.Background(), task)
		fmt.Println("delivery", delivery, "error:", err)
	}
	rec, _ := store.Status(context.Background(), dedup.Key{Namespace: "invoice:send", ID: "inv-1"})
	fmt.Println(rec.State, rec.Attempts, string(rec.Result))
	// Output:
	// sending with Message-ID invoice:send/inv-1
	// delivery 1 error: <nil>
	// delivery 2 error: <nil>
	// done 1 {"sent":true}
}
