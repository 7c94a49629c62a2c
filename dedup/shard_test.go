package dedup_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// shardedInvoices is the invoice type on queue "default" over shards.
func shardedInvoices(shards int) *dedup.Typed[Invoice] {
	return dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", Shards: shards, ID: func(i Invoice) string { return i.ID }})
}

// startSharded runs a Server of the catalog of kind on rdb, counting runs
// per key, and returns a Producer on the same catalog. The server looks at
// empty queues every check (asynq's TaskCheckInterval; 0: its 1s).
func startSharded(t *testing.T, rdb redis.UniversalClient, kind *dedup.Typed[Invoice], conc int, check time.Duration) (*dedup.Producer, *sync.Map) {
	t.Helper()
	ctx := context.Background()
	catalog, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dedup.NewServer(rdb, nil, asynq.Config{Concurrency: conc, TaskCheckInterval: check,
		LogLevel: asynq.WarnLevel}, dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	var runs sync.Map
	if err := srv.Start(dedup.Handle(kind, func(ctx context.Context, i Invoice) (string, error) {
		n, _ := runs.LoadOrStore(i.ID, new(int64))
		*n.(*int64)++ // one key runs at a time: its claim
		return "sent " + i.ID, nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(ctx) })
	return oncetest.NewProducer(t, rdb, nil, dedup.ProducerOptions{Catalog: catalog}), &runs
}

// A queue over 4 shards on a real redis-server: jobs go to the shard their
// key hashes to, the Server consumes all four, and Status and Wait find
// every job where it is, under another shard count too.
func TestShardedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	invoices := shardedInvoices(4)
	if want := []string{"default.0", "default.1", "default.2", "default.3"}; !slices.Equal(invoices.Queues, want) {
		t.Fatalf("Kind.Queues = %q, want %q", invoices.Queues, want)
	}
	producer, runs := startSharded(t, rdb, invoices, 10, 10*time.Millisecond)

	const n = 60
	perShard := map[string]int{}
	var jobs []dedup.Job
	for i := range n {
		j := invoices.Job(Invoice{ID: fmt.Sprintf("inv-%d", i), Amount: int64(i)})
		out, err := producer.Enqueue(ctx, j)
		if err != nil || out.Decision != dedup.Enqueued || out.Queue != j.Queue {
			t.Fatalf("enqueue %s: %+v (%v)", j.Key, out, err)
		}
		perShard[out.Queue]++
		jobs = append(jobs, j)
	}
	for _, q := range invoices.Queues {
		if perShard[q] == 0 {
			t.Errorf("no job went to shard %s: %v", q, perShard)
		}
	}
	if len(perShard) != 4 {
		t.Errorf("jobs went to %v, want the 4 shards only", perShard)
	}
	for _, j := range jobs {
		st, err := producer.Wait(ctx, j, 10*time.Second)
		if err != nil || st.State != dedup.StatusDone {
			t.Fatalf("wait %s: %s (%v)", j.Key, st.State, err)
		}
		st, err = producer.Status(ctx, j.Key)
		// The record answers: asynq deleted the completed task.
		if err != nil || !st.Processed || st.Queue != nil || st.Result.String() != fmt.Sprintf("%q", "sent "+j.Key.ID) {
			t.Fatalf("status %s: %+v (%v), want done, from the record alone", j.Key, st, err)
		}
		again, err := producer.Enqueue(ctx, j)
		if err != nil || again.Decision != dedup.Duplicate || again.Queue != j.Queue {
			t.Fatalf("repeat %s: %+v (%v)", j.Key, again, err)
		}
	}
	runs.Range(func(k, v any) bool {
		if *v.(*int64) != 1 {
			t.Errorf("%s ran %d times", k, *v.(*int64))
		}
		return true
	})

	// Under another shard count the computed shard is wrong for most keys;
	// a done job is still answered from its record.
	other, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{Catalog: mustCatalog(t, shardedInvoices(3).Kind)})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs[:8] {
		if st, err := other.Status(ctx, j.Key); err != nil || !st.Processed {
			t.Fatalf("status of %s under 3 shards: %+v (%v)", j.Key, st, err)
		}
	}

	// A job given a queue of its own stays there: no shard, no worker.
	// Status falls back to every queue and finds it, and so does a
	// Producer under another shard count.
	aside := invoices.Job(Invoice{ID: "inv-aside"})
	aside.Queue = "aside"
	if out, err := producer.Enqueue(ctx, aside); err != nil || out.Queue != "aside" {
		t.Fatalf("enqueue aside: %+v (%v)", out, err)
	}
	for _, p := range []*dedup.Producer{producer, other} {
		if st, err := p.Status(ctx, aside.Key); err != nil || st.State != dedup.StatusPending || st.Queue == nil || *st.Queue != "aside" {
			t.Fatalf("status aside: %+v (%v)", st, err)
		}
	}
	// The logical queue itself holds nothing: asynq never saw it.
	qs, err := asynq.NewInspectorFromRedisClient(rdb).Queues()
	if err != nil || slices.Contains(qs, "default") {
		t.Fatalf("asynq's queues %q (%v), want the shards and aside, not default", qs, err)
	}
}

// Kinds on one queue agree on its shard count.
func TestCatalogShardsAgree(t *testing.T) {
	t.Parallel()
	type Note struct {
		ID string `json:"id"`
	}
	notes := dedup.Define(dedup.Spec[Note]{Type: "note:send", Shards: 2, ID: func(n Note) string { return n.ID }})
	if _, err := dedup.NewCatalog(shardedInvoices(4).Kind, notes.Kind); err == nil || !strings.Contains(err.Error(), "shard") {
		t.Fatalf("catalog of 4 and 2 shards on default: %v, want refused", err)
	}
	if _, err := dedup.NewCatalog(shardedInvoices(2).Kind, notes.Kind); err != nil {
		t.Fatal(err)
	}
}

func mustCatalog(t *testing.T, kinds ...*dedup.Kind) *dedup.Catalog {
	t.Helper()
	c, err := dedup.NewCatalog(kinds...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
