package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

type traceKey struct{}

type delivered struct {
	header   string // the task's traceparent
	run      dedup.Run
	decision dedup.Decision
	err      error
}

// The hooks a tracer hangs on: the Producer's headers travel on the task,
// the delivery's context reaches the handler, end learns the run and the
// decision, and a repeat's end gets the headers of the task it met.
func TestTraceHooks(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	// The type keeps its completed tasks (WriteResult), so the repeat meets
	// the first's task whether or not its acknowledgement has come yet; a
	// type that does not keep them meets no headers once it has.
	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }, WriteResult: true})
	catalog, err := dedup.NewCatalog(invoices.Kind)
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan delivered, 4)
	srv, err := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{Catalog: catalog,
		Trace: func(ctx context.Context, task *asynq.Task) (context.Context, func(dedup.Run, dedup.Decision, error)) {
			d := delivered{header: task.Headers()["traceparent"]}
			return context.WithValue(ctx, traceKey{}, "span"), func(r dedup.Run, dec dedup.Decision, err error) {
				d.run, d.decision, d.err = r, dec, err
				deliveries <- d
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(dedup.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
		if ctx.Value(traceKey{}) != "span" {
			t.Error("the handler's context is not the one Trace returned")
		}
		return "sent", nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(ctx) })

	type ended struct {
		out dedup.Outcome
		met map[string]string
	}
	enqueues := make(chan ended, 2)
	parent := "00-first"
	producer := oncetest.NewProducer(t, rdb, nil, dedup.ProducerOptions{
		Trace: func(ctx context.Context, j dedup.Job) (context.Context, map[string]string, func(dedup.Outcome, map[string]string, error)) {
			return ctx, map[string]string{"traceparent": parent}, func(o dedup.Outcome, met map[string]string, err error) {
				if err != nil {
					t.Error(err)
				}
				enqueues <- ended{o, met}
			}
		}})
	job := invoices.Job(Invoice{ID: "inv-1"})
	if _, err := producer.Enqueue(ctx, job); err != nil {
		t.Fatal(err)
	}
	if e := <-enqueues; e.out.Decision != dedup.Enqueued || e.met != nil {
		t.Fatalf("first enqueue ended with %s, met %v", e.out.Decision, e.met)
	}
	first := next(t, deliveries)
	if first.header != "00-first" || first.decision != dedup.Acquired || first.run.Key != job.Key || first.run.Incarnation != 1 || first.err != nil {
		t.Fatalf("first delivery: %+v", first)
	}

	parent = "00-repeat"
	if _, err := producer.Enqueue(ctx, job); err != nil {
		t.Fatal(err)
	}
	if e := <-enqueues; e.out.Decision != dedup.Duplicate || e.met["traceparent"] != "00-first" {
		t.Fatalf("repeat ended with %s, met %v; want a duplicate that met the first's headers", e.out.Decision, e.met)
	}

	// Plain asynq code enqueues the same invoice: the worker refuses it.
	plain := asynq.NewTaskWithHeaders(invoices.Type, job.Task.Payload(), map[string]string{"traceparent": "00-plain"})
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(plain); err != nil {
		t.Fatal(err)
	}
	dup := next(t, deliveries)
	if dup.header != "00-plain" || dup.decision != dedup.Duplicate || dup.run.Key != job.Key {
		t.Fatalf("plain repeat's delivery: %+v", dup)
	}
}

func next(t *testing.T, c <-chan delivered) delivered {
	t.Helper()
	select {
	case d := <-c:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery ended within 30s")
	}
	return delivered{}
}
