package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/pgledger"
)

// Behind the real middleware on a real Redis: after the job committed, Redis
// forgetting everything (restart without persistence) does not make it run
// again; the redelivery is acknowledged with the ledger's result, which the
// middleware records in Redis again. Status through StatusStore reads the
// ledger when Redis knows nothing.
func TestHandlerBehindMiddlewareRedisForgets(t *testing.T) {
	t.Parallel()
	var seen []dedup.Event
	l, pool := newLedger(t, pgledger.Options{Observer: func(_ context.Context, d dedup.Event) { seen = append(seen, d) }})
	store, err := dedup.NewRedisStore(redistest.Client(t), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := dedup.NewMiddleware(store, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Shutdown(context.Background())
	runs := 0
	h := mw.Wrap(l.Handler(pgledger.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, t *asynq.Task) ([]byte, error) {
		runs++
		run, _ := dedup.RunFromContext(ctx)
		return insertEffect(run.Key, `{"lines":2}`)(ctx, tx)
	})))
	k := key(t, "forget-1")
	task := asynq.NewTaskWithHeaders("order:fulfil", []byte(`{"order_id":"forget-1"}`),
		map[string]string{"onceq-key": k.String(), "onceq-fp": "fp"})
	ctx := context.Background()

	if err := h.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if err := store.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	st := pgledger.StatusStore{Store: store, Ledger: l}
	if rec, err := st.Status(ctx, k); err != nil || rec.State != dedup.StatusDone || string(rec.Result) != `{"lines":2}` {
		t.Fatalf("status with Redis empty: %+v %v, want done from the ledger", rec, err)
	}
	if err := h.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || effects(t, pool, k.String()) != 1 {
		t.Fatalf("handler ran %d times, %d effect rows; want 1 and 1", runs, effects(t, pool, k.String()))
	}
	rec, err := store.Status(ctx, k)
	if err != nil || rec.State != dedup.StatusDone || string(rec.Result) != `{"lines":2}` {
		t.Fatalf("Redis record after the redelivery: %+v %v, want done with the ledger's result", rec, err)
	}
	if len(seen) != 1 || seen[0].Outcome != "duplicate" || seen[0].Key != k {
		t.Fatalf("ledger decisions %+v, want one duplicate of %s", seen, k)
	}
}

// While a claim runs in Redis and the ledger has nothing committed,
// StatusStore reports the Redis record (running, with its lease).
func TestStatusStoreRunningFromRedis(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t, pgledger.Options{})
	store, err := dedup.NewRedisStore(redistest.Client(t), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := key(t, "running-1")
	ctx := context.Background()
	st := pgledger.StatusStore{Store: store, Ledger: l}
	if rec, err := st.Status(ctx, k); err != nil || rec.State != dedup.StatusUnknown {
		t.Fatalf("unknown key: %+v %v, want absent", rec, err)
	}
	if _, err := store.Claim(ctx, k, "", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Status(ctx, k); err != nil || rec.State != dedup.StatusRunning {
		t.Fatalf("claimed key: %+v %v, want running", rec, err)
	}
}
