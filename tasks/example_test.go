package tasks_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// Invoice is your own task's payload.
type Invoice struct {
	InvoiceID string `json:"invoice_id"`
	Amount    int64  `json:"amount"`
	TraceID   string `json:"trace_id,omitempty" dedup:"volatile"` // not part of the fingerprint
}

// Enqueue your own task type: declare it once with Define, add it to a
// catalog, and every way in (Build from JSON, the HTTP API's route, batch
// files) keys it the same. The same invoice twice is a duplicate; the same
// invoice id with another amount is a conflict, not a duplicate.
func ExampleDefine() {
	invoices := tasks.Define(tasks.Spec[Invoice]{
		Type:    "invoice:send",
		Route:   "invoices", // POST /v1/invoices in producer serve
		KeyRule: "`invoice_id`",
		ID:      func(i Invoice) string { return i.InvoiceID },
		Validate: func(i Invoice) error {
			if i.InvoiceID == "" || i.Amount <= 0 {
				return fmt.Errorf("%w: invoice_id and a positive amount are required", tasks.ErrInvalid)
			}
			return nil
		},
		Handler: func(d tasks.Deps) asynq.Handler {
			return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return nil })
		},
	})
	catalog, _ := tasks.NewCatalog(tasks.Windows{}, append(tasks.Builtin(), invoices.Kind())...)

	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store, _ := dedup.NewRedisStore(rdb, dedup.Options{})
	producer := tasks.NewProducer(rdb, store, tasks.ProducerOptions{})

	// Workers register every handler of the same catalog:
	//	catalog.Register(mux, tasks.Deps{...})
	ctx := context.Background()
	for _, payload := range []string{
		`{"invoice_id":"inv-1","amount":4200,"trace_id":"a"}`,
		`{"amount":4200,"invoice_id":"inv-1","trace_id":"b"}`,
		`{"invoice_id":"inv-1","amount":9900}`,
	} {
		job, err := catalog.Build("invoice:send", []byte(payload), "")
		if err != nil {
			panic(err)
		}
		out, err := producer.Enqueue(ctx, job)
		if err != nil {
			panic(err)
		}
		fmt.Println(out.Decision, out.Key)
	}
	// Output:
	// enqueued invoice:send/inv-1
	// duplicate invoice:send/inv-1
	// conflict invoice:send/inv-1
}
