package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/pgledger"
)

// Charge is the outbox tests' payload; Window names a rate rule's key.
type Charge struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
	Window string `json:"window,omitempty"`
}

func chargeSpec(typ string, repeat dedup.Repeat) *dedup.Typed[Charge] {
	return dedup.Define(dedup.Spec[Charge]{Type: typ, ID: func(c Charge) string { return c.ID }, Repeat: repeat,
		Rules: func(c Charge) ([]*dedup.Rule, error) {
			if c.Window == "" {
				return nil, nil
			}
			return []*dedup.Rule{{Key: dedup.Key{Namespace: "charge:window", ID: c.Window}, Window: time.Minute}}, nil
		}})
}

var (
	charges   = chargeSpec("charge:once", dedup.Repeat{})
	replaced  = chargeSpec("charge:replace", dedup.Repeat{Policy: "replace"})
	debounced = chargeSpec("charge:debounce", dedup.Repeat{Policy: "debounce", Delay: time.Millisecond, MaxWait: time.Second})
)

// outboxWorld is a ledger's database, a real Redis and a Producer whose
// status reads go through the ledger (StatusStore).
type outboxWorld struct {
	l     *pgledger.Ledger
	pool  *pgxpool.Pool
	rdb   *redis.Client
	store storage.Store
	prod  *dedup.Producer
	insp  *asynq.Inspector
	seen  *events
}

// events records observer events, safe across relays' goroutines.
type events struct {
	mu sync.Mutex
	ev []dedup.Event
}

func (e *events) observe(_ context.Context, ev dedup.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

// count is how many events of key (any, when zero) had outcome.
func (e *events) count(k dedup.Key, outcome dedup.Decision) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.ev {
		if ev.Outcome == outcome && (k == dedup.Key{} || ev.Key == k) {
			n++
		}
	}
	return n
}

func newOutboxWorld(t testing.TB) *outboxWorld {
	t.Helper()
	l, pool := newLedger(t, pgledger.Options{})
	rdb := redistest.Client(t)
	rs, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := pgledger.StatusStore{Store: rs, Ledger: l}
	w := &outboxWorld{l: l, pool: pool, rdb: rdb, store: store, insp: asynq.NewInspectorFromRedisClient(rdb), seen: &events{}}
	w.prod = oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{Observer: w.seen.observe})
	return w
}

func (w *outboxWorld) relay(t *testing.T, opts pgledger.RelayOptions) *pgledger.Relay {
	t.Helper()
	opts.Producer = w.prod
	r, err := pgledger.NewRelay(w.pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// commit runs EnqueueTx for j in a transaction of its own that commits.
func (w *outboxWorld) commit(t *testing.T, j dedup.Job) dedup.Outcome {
	t.Helper()
	var out dedup.Outcome
	err := pgx.BeginFunc(context.Background(), w.pool, func(tx pgx.Tx) (err error) {
		out, err = pgledger.EnqueueTx(context.Background(), tx, j)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (w *outboxWorld) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM onceq_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (w *outboxWorld) status(t *testing.T, k dedup.Key) dedup.JobStatus {
	t.Helper()
	st, err := w.prod.Status(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (w *outboxWorld) move(t *testing.T, r *pgledger.Relay) int {
	t.Helper()
	n, err := r.Move(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func job(t *testing.T, typ *dedup.Typed[Charge], c Charge) dedup.Job {
	t.Helper()
	j := typ.Job(c)
	if j.Err != nil {
		t.Fatal(j.Err)
	}
	return j
}

// The order row and its job commit together: before the relay moves it the
// job's status is outbox (Producer.Status through StatusStore, as `producer
// status` and GET /v1/jobs read it); after, it is a pending asynq task with
// the job's key as task id, and the row is gone.
func TestEnqueueTxCommitThenRelay(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	ctx := context.Background()
	if _, err := w.pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	j := job(t, charges, Charge{ID: "pay-1", Amount: 100})
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('ord-1')`); err != nil {
			return err
		}
		out, err := pgledger.EnqueueTx(ctx, tx, j)
		if err == nil && (out.Decision != dedup.Enqueued || out.State != pgledger.StatusOutbox || out.TaskID != j.Key.TaskID()) {
			t.Errorf("EnqueueTx: %+v, want enqueued into the outbox", out)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := w.status(t, j.Key); st.State != pgledger.StatusOutbox || !st.Known {
		t.Fatalf("status after commit: %+v, want outbox", st)
	}
	if n := w.move(t, w.relay(t, pgledger.RelayOptions{})); n != 1 {
		t.Fatalf("relay moved %d rows, want 1", n)
	}
	info, err := w.insp.GetTaskInfo(j.Queue, j.Key.TaskID())
	if err != nil || info.State != asynq.TaskStatePending || string(info.Payload) != string(j.Task.Payload()) {
		t.Fatalf("asynq task after the move: %+v %v, want pending with the job's payload", info, err)
	}
	if st := w.status(t, j.Key); st.State != dedup.StatusPending {
		t.Fatalf("status after the move: %+v, want pending", st)
	}
	if n := w.rows(t); n != 0 {
		t.Fatalf("%d outbox rows after the move, want 0 (the relay deletes them)", n)
	}
}

// A rolled-back transaction leaves no row, so no relay ever enqueues it.
func TestEnqueueTxRollbackLeavesNoJob(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	ctx := context.Background()
	j := job(t, charges, Charge{ID: "pay-rollback", Amount: 100})
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := pgledger.EnqueueTx(ctx, tx, j); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("EnqueueTx: %+v %v", out, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := w.move(t, w.relay(t, pgledger.RelayOptions{})); n != 0 {
		t.Fatalf("relay moved %d rows of a rolled-back transaction", n)
	}
	if st := w.status(t, j.Key); st.Known {
		t.Fatalf("status of a rolled-back job: %+v, want unknown", st)
	}
	// The key is free: the next committed job of it is accepted.
	if out := w.commit(t, j); out.Decision != dedup.Enqueued {
		t.Fatalf("after the rollback: %+v, want enqueued", out)
	}
}

// EnqueueTx answers inside the transaction what the outbox and the ledger
// know, under each repeat policy.
func TestEnqueueTxDecisions(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	ctx := context.Background()
	a, other := Charge{ID: "pay-a", Amount: 100}, Charge{ID: "pay-a", Amount: 999}

	for _, c := range []struct {
		typ          *dedup.Typed[Charge]
		second, want dedup.Decision
		rows         int
	}{
		{charges, dedup.Duplicate, dedup.Conflict, 1},
		{replaced, dedup.Duplicate, dedup.Enqueued, 2},
		{debounced, dedup.Enqueued, dedup.Enqueued, 3},
	} {
		before := w.rows(t)
		if out := w.commit(t, job(t, c.typ, a)); out.Decision != dedup.Enqueued {
			t.Fatalf("%s first: %+v", c.typ.Type, out)
		}
		if out := w.commit(t, job(t, c.typ, a)); out.Decision != c.second {
			t.Fatalf("%s same content again: %+v, want %s", c.typ.Type, out, c.second)
		} else if out.Decision == dedup.Duplicate && out.State != pgledger.StatusOutbox {
			t.Fatalf("%s duplicate: %+v, want state outbox", c.typ.Type, out)
		}
		if out := w.commit(t, job(t, c.typ, other)); out.Decision != c.want {
			t.Fatalf("%s other content: %+v, want %s", c.typ.Type, out, c.want)
		}
		if n := w.rows(t) - before; n != c.rows {
			t.Fatalf("%s: %d outbox rows, want %d", c.typ.Type, n, c.rows)
		}
	}

	// Done in the ledger: a duplicate with the stored result, or a conflict.
	done := job(t, charges, Charge{ID: "pay-done", Amount: 5})
	if _, err := w.l.Run(ctx, done.Key, done.Fingerprint, func(context.Context, pgx.Tx) ([]byte, error) {
		return []byte(`{"charged":5}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	if out := w.commit(t, done); out.Decision != dedup.Duplicate || out.State != dedup.StatusDone || string(out.Result) != `{"charged":5}` {
		t.Fatalf("done in the ledger: %+v, want a duplicate with the result", out)
	}
	if out := w.commit(t, job(t, charges, Charge{ID: "pay-done", Amount: 6})); out.Decision != dedup.Conflict {
		t.Fatalf("done in the ledger, other content: %+v, want conflict", out)
	}
}

// Transactions racing with one key: exactly one is accepted, the rest are
// duplicates, and the outbox holds one row.
func TestEnqueueTxConcurrentSameKey(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	j := job(t, charges, Charge{ID: "pay-race", Amount: 100})
	var accepted, dups atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			err := pgx.BeginFunc(context.Background(), w.pool, func(tx pgx.Tx) error {
				out, err := pgledger.EnqueueTx(context.Background(), tx, j)
				switch {
				case err != nil:
				case out.Decision == dedup.Enqueued:
					accepted.Add(1)
				case out.Decision == dedup.Duplicate:
					dups.Add(1)
				}
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if accepted.Load() != 1 || dups.Load() != 7 || w.rows(t) != 1 {
		t.Fatalf("accepted %d, duplicates %d, %d rows; want 1, 7, 1", accepted.Load(), dups.Load(), w.rows(t))
	}
}

// Bad input is an error that says what is wrong, and writes nothing.
func TestEnqueueTxBadInput(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	ctx := context.Background()
	invalid := dedup.Define(dedup.Spec[Charge]{Type: "charge:strict", ID: func(c Charge) string { return c.ID },
		Validate: func(c Charge) error {
			if c.Amount <= 0 {
				return fmt.Errorf("amount %d: %w", c.Amount, dedup.ErrInvalid)
			}
			return nil
		}}).Job(Charge{ID: "x", Amount: -1})
	good := job(t, charges, Charge{ID: "pay-ok", Amount: 1})
	noQueue, noUnique := good, good
	noQueue.Queue, noUnique.Unique = "", 0
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		for name, c := range map[string]struct {
			tx pgx.Tx
			j  dedup.Job
		}{
			"invalid payload":  {tx, invalid},
			"no task":          {tx, dedup.Job{Key: good.Key, Queue: "default"}},
			"no queue":         {tx, noQueue},
			"no unique window": {tx, noUnique},
			"no transaction":   {nil, good},
			"zero key":         {tx, dedup.Job{Task: good.Task, Queue: "default"}},
		} {
			if out, err := pgledger.EnqueueTx(ctx, c.tx, c.j); err == nil {
				t.Errorf("%s: %+v, want an error", name, out)
			} else if name == "invalid payload" && !errors.Is(err, dedup.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		return nil
	})
	if err != nil || w.rows(t) != 0 {
		t.Fatalf("%v, %d rows; want none", err, w.rows(t))
	}
	if _, err := pgledger.NewRelay(w.pool, pgledger.RelayOptions{}); err == nil {
		t.Fatal("NewRelay without a Producer accepted")
	}
	if _, err := pgledger.NewRelay(w.pool, pgledger.RelayOptions{Producer: w.prod, Batch: -1}); err == nil {
		t.Fatal("NewRelay with Batch -1 accepted")
	}
}

// A job's own asynq options and its Spec's WriteResult survive the outbox:
// the task the relay enqueues is scheduled when the job asked (from
// EnqueueTx, not from the move), with its timeout, deadline and retries,
// and keeps its completed copy for the unique window. An option the
// Producer refuses (asynq.Unique) is refused before anything is written.
func TestEnqueueTxKeepsAsynqOptions(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	kept := dedup.Define(dedup.Spec[Charge]{Type: "charge:kept", ID: func(c Charge) string { return c.ID },
		Unique: 2 * time.Hour, WriteResult: true})
	deadline := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	j := job(t, kept, Charge{ID: "opt-1", Amount: 1}).With(asynq.ProcessIn(time.Hour), asynq.Timeout(42*time.Second),
		asynq.Deadline(deadline), asynq.MaxRetry(0))
	committed := time.Now()
	w.commit(t, j)
	if n := w.move(t, w.relay(t, pgledger.RelayOptions{})); n != 1 {
		t.Fatalf("relay moved %d rows, want 1", n)
	}
	info, err := w.insp.GetTaskInfo(j.Queue, j.Key.TaskID())
	if err != nil {
		t.Fatal(err)
	}
	if info.State != asynq.TaskStateScheduled || info.NextProcessAt.Before(committed.Add(time.Hour-time.Second)) ||
		info.NextProcessAt.After(committed.Add(time.Hour+time.Minute)) {
		t.Errorf("task %v at %v, want scheduled an hour from the commit (%v)", info.State, info.NextProcessAt, committed)
	}
	if info.Timeout != 42*time.Second || !info.Deadline.Equal(deadline) || info.MaxRetry != 0 || info.Retention != 2*time.Hour {
		t.Errorf("task timeout %v deadline %v max retry %d retention %v; want 42s, %v, 0, 2h",
			info.Timeout, info.Deadline, info.MaxRetry, info.Retention, deadline)
	}

	err = pgx.BeginFunc(context.Background(), w.pool, func(tx pgx.Tx) error {
		_, err := pgledger.EnqueueTx(context.Background(), tx, job(t, kept, Charge{ID: "opt-2"}).With(asynq.Unique(time.Minute)))
		return err
	})
	if err == nil {
		t.Fatal("EnqueueTx took asynq.Unique, which the Producer refuses")
	}
}
