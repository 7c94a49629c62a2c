package tasks_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// countingGateway charges nothing and counts the charges asked for.
type countingGateway struct{ n atomic.Int64 }

func (g *countingGateway) Charge(_ context.Context, key string, p tasks.Payment) (tasks.Charge, error) {
	g.n.Add(1)
	return tasks.Charge{ChargeID: "ch_" + key, Status: "succeeded", Amount: p.Amount, Currency: p.Currency}, nil
}

// A payment enqueued by plain asynq code (no onceq task id, no key header)
// gets the key the Producer gives the same payment: its payment_id. So it
// and the Producer's job run the handler once in total.
func TestPlainAsynqEnqueueAgreesOnKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	dups := make(chan dedup.Key, 4)
	store, err := dedup.NewRedisStore(rdb, storage.Options{Observer: func(_ context.Context, d dedup.Event) {
		if d.Op == "claim" && d.Outcome == "duplicate" {
			dups <- d.Key
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	ran := make(chan struct{}, 4)
	mux := asynq.NewServeMux()
	mux.Use(func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			runs.Add(1)
			defer func() { ran <- struct{}{} }()
			return next.ProcessTask(ctx, t)
		})
	})
	gw := &countingGateway{}
	catalog.Register(mux, tasks.Deps{Gateway: gw})
	srv, err := dedup.NewServer(rdb, store, asynq.Config{Concurrency: 2,
		Queues:            map[string]int{tasks.QueueCritical: 1, tasks.QueueDefault: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.ErrorLevel}, dedup.MiddlewareOptions{Catalog: catalog.Catalog})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })

	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { client.Close() })
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	payment := func(id string) (dedup.Job, *asynq.Task) {
		// An account per payment: the rate rule is not this test's subject,
		// and the first Producer job may be enqueued (its record was not yet
		// done) and hold the rule.
		j, err := testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: id, Account: "acct-" + id, Amount: 500, Currency: "EUR"}))
		if err != nil {
			t.Fatal(err)
		}
		plain := []byte(`{"payment_id":"` + id + `","account":"acct-` + id + `","amount":500,"currency":"EUR"}`)
		return j, asynq.NewTask(tasks.TypePayment, plain)
	}
	workerDuplicate := func(want dedup.Key) {
		t.Helper()
		select {
		case k := <-dups:
			if k != want {
				t.Fatalf("duplicate under %v, want %v", k, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the second job of %v was never answered as a duplicate; handler runs %d", want, runs.Load())
		}
	}

	// Plain asynq first, then the Producer: whether the Producer sees the
	// done record itself or the worker answers, nothing runs again.
	j, plain := payment("pmt-plain-1")
	if _, err := client.Enqueue(plain); err != nil {
		t.Fatal(err)
	}
	wait(t, ran, "the plain asynq task to run")
	out, err := producer.Enqueue(ctx, j)
	switch {
	case err != nil:
		t.Fatal(err)
	case out.Decision == dedup.Enqueued:
		workerDuplicate(j.Key)
	case out.Decision != dedup.Duplicate || out.Key != j.Key.String():
		t.Fatalf("producer after the plain run: %+v, want enqueued or a duplicate of %v", out, j.Key)
	}

	// The Producer first, then plain asynq: the worker answers the duplicate.
	j, plain = payment("pmt-plain-2")
	if out, err := producer.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("producer: %+v %v", out, err)
	}
	wait(t, ran, "the producer's task to run")
	if _, err := client.Enqueue(plain); err != nil {
		t.Fatal(err)
	}
	workerDuplicate(j.Key)

	if runs.Load() != 2 || gw.n.Load() != 2 {
		t.Fatalf("handler ran %d times, gateway charged %d; want 2 and 2, one per payment", runs.Load(), gw.n.Load())
	}
}

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A plain payload the catalog refuses is a bad payload at the middleware:
// the handler never runs, asynq archives it.
func TestPlainAsynqEnqueueInvalidIsBadPayload(t *testing.T) {
	t.Parallel()
	store, err := dedup.NewRedisStore(redistest.Client(t), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, mw := catalogMiddleware(t, store)
	t.Cleanup(func() { mw.Shutdown(context.Background()) })
	runs := 0
	h := mw.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil }))
	bad := asynq.NewTask(tasks.TypePayment, []byte(`{"payment_id":"pmt-bad","account":"a","amount":0,"currency":"EUR"}`))
	if err := h.ProcessTask(context.Background(), bad); !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, dedup.ErrInvalid) || runs != 0 {
		t.Fatalf("invalid plain payment: %v, handler runs %d; want a skip-retry ErrInvalid and no run", err, runs)
	}
}

// catalogMiddleware is the built-in catalog and the middleware that knows
// its types, as cmd/worker wires them.
func catalogMiddleware(t *testing.T, store storage.Store) (*tasks.Catalog, *dedup.Middleware) {
	t.Helper()
	catalog, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := dedup.NewMiddleware(store, dedup.MiddlewareOptions{Catalog: catalog.Catalog})
	if err != nil {
		t.Fatal(err)
	}
	return catalog, mw
}
