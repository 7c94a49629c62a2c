package pgledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/pgledger"
)

// runRelays runs n relays until the test ends.
func (w *outboxWorld) runRelays(t *testing.T, n int, opts pgledger.RelayOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		r := w.relay(t, opts)
		wg.Go(func() { r.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Three relays side by side on 300 committed jobs: every job is enqueued
// once, and no relay ever moves a row another already moved (which the
// Producer would answer as a duplicate).
func TestRelaysSideBySideEnqueueEachOnce(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	const n = 300
	w.runRelays(t, 3, pgledger.RelayOptions{Batch: 7, Poll: 5 * time.Millisecond})
	for i := range n {
		w.commit(t, job(t, charges, Charge{ID: fmt.Sprintf("side-%03d", i), Amount: i}))
	}
	waitFor(t, "the outbox drained", func() bool { return w.rows(t) == 0 })
	if e, d := w.seen.count(dedup.Key{}, "enqueued"), w.seen.count(dedup.Key{}, "duplicate"); e != n || d != 0 {
		t.Fatalf("producer saw %d enqueued, %d duplicates; want %d and 0", e, d, n)
	}
	q, err := w.insp.GetQueueInfo("default")
	if err != nil || q.Pending != n {
		t.Fatalf("queue %+v %v, want %d pending", q, err, n)
	}
}

// A relay killed after its enqueues but before its delete commits leaves
// the rows; the next relay's move is a duplicate (the key is the task id),
// so the row goes and one task exists.
func TestRelayRepeatedMoveIsDuplicate(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	j := job(t, charges, Charge{ID: "crash-1", Amount: 1})
	w.commit(t, j)
	if o, err := w.prod.Enqueue(context.Background(), j); err != nil || o.Decision != dedup.Enqueued {
		t.Fatalf("the dead relay's enqueue: %+v %v", o, err)
	}
	seen := &events{}
	if n := w.move(t, w.relay(t, pgledger.RelayOptions{Observer: seen.observe})); n != 1 {
		t.Fatalf("moved %d, want 1", n)
	}
	if w.rows(t) != 0 || seen.count(j.Key, "duplicate") != 1 {
		t.Fatalf("%d rows, relay events %+v; want 0 rows and one duplicate", w.rows(t), seen.ev)
	}
	if tasks, err := w.insp.ListPendingTasks("default"); err != nil || len(tasks) != 1 {
		t.Fatalf("pending tasks %d %v, want 1", len(tasks), err)
	}
}

// Jobs of one key are enqueued in commit order: while the key's first job
// waits on a rate rule, its second (under replace, with other content and
// a free window) stays in the outbox; once the first moves, the second
// replaces it, so the task is the last one committed.
func TestRelayKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	ctx := context.Background()
	held := dedup.Key{Namespace: "charge:window", ID: "busy"}
	rs, err := dedup.NewRedisStore(w.rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := rs.Reserve(ctx, held, time.Minute, "someone/else"); err != nil || !res.Reserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	first := job(t, replaced, Charge{ID: "order-1", Amount: 1, Window: "busy"})
	second := job(t, replaced, Charge{ID: "order-1", Amount: 2})
	w.commit(t, first)
	w.commit(t, second)

	r := w.relay(t, pgledger.RelayOptions{})
	w.move(t, r)
	if st := w.status(t, first.Key); st.State != pgledger.StatusOutbox || w.rows(t) != 2 {
		t.Fatalf("while the first is throttled: %+v, %d rows; want outbox, both rows kept", st, w.rows(t))
	}
	if n := w.move(t, r); n != 0 {
		t.Fatalf("moved %d rows while the key's first waits, want 0", n)
	}
	var why string
	if err := w.pool.QueryRow(ctx, `SELECT last_error FROM onceq_outbox ORDER BY id LIMIT 1`).Scan(&why); err != nil || why == "" {
		t.Fatalf("throttled row's last_error %q %v, want the reason", why, err)
	}

	if err := rs.Unreserve(ctx, held, "someone/else"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE onceq_outbox SET available_at = now()`); err != nil {
		t.Fatal(err) // the window's RetryAfter was a minute
	}
	for w.move(t, r) > 0 {
	}
	info, err := w.insp.GetTaskInfo("default", first.Key.TaskID())
	if err != nil || string(info.Payload) != string(second.Task.Payload()) || w.rows(t) != 0 {
		t.Fatalf("task %+v %v, %d rows; want the second job's payload, no rows", info, err, w.rows(t))
	}
}

// waitListening waits for a relay's LISTEN: its first pass happens at
// start, and a row committed before it listens proves nothing.
func (w *outboxWorld) waitListening(t testing.TB) {
	t.Helper()
	waitFor(t, "the relay listening", func() bool {
		var n int
		w.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN onceq_outbox'`).Scan(&n)
		return n >= 1
	})
}

// NOTIFY wakes a relay whose polling would not come for an hour.
func TestRelayWokenByNotify(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	ctx := context.Background()
	// The commit notifies: a listener of the test's own hears it.
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN onceq_outbox"); err != nil {
		t.Fatal(err)
	}
	w.commit(t, job(t, charges, Charge{ID: "notify-0", Amount: 1}))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if n, err := conn.Conn().WaitForNotification(wctx); err != nil || n.Channel != "onceq_outbox" {
		t.Fatalf("notification after the commit: %+v %v", n, err)
	}
	if _, err := conn.Exec(ctx, "UNLISTEN *"); err != nil {
		t.Fatal(err)
	}
	conn.Release()

	w.runRelays(t, 1, pgledger.RelayOptions{Poll: time.Hour})
	w.waitListening(t)
	// Two in a row: the second cannot ride the wake-up the relay gives
	// itself when it starts listening.
	for _, id := range []string{"notify-1", "notify-2"} {
		j := job(t, charges, Charge{ID: id, Amount: 1})
		w.commit(t, j)
		waitFor(t, id+" moved on NOTIFY", func() bool { return w.status(t, j.Key).State == dedup.StatusPending })
	}
}

// A row that arrives without a notification (a relay that was not
// listening then, a lost connection) is moved by polling.
func TestRelayPollsWithoutNotify(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	ctx := context.Background()
	j := job(t, charges, Charge{ID: "poll-1", Amount: 1})
	w.commit(t, j)
	// EnqueueTx's row, set aside, to come back without its NOTIFY.
	if _, err := w.pool.Exec(ctx, `CREATE TABLE saved AS SELECT * FROM onceq_outbox; DELETE FROM onceq_outbox`); err != nil {
		t.Fatal(err)
	}
	w.runRelays(t, 1, pgledger.RelayOptions{Poll: 20 * time.Millisecond})
	w.waitListening(t)
	if _, err := w.pool.Exec(ctx, `INSERT INTO onceq_outbox SELECT * FROM saved`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the job moved by polling", func() bool { return w.status(t, j.Key).State == dedup.StatusPending })
}

// With Redis gone the move fails: the row stays, with the error, and the
// next relay moves it once Redis is back.
func TestRelayRedisDownKeepsRow(t *testing.T) {
	t.Parallel()
	w := newOutboxWorld(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	rs, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := dedup.NewProducer(rdb, rs, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := pgledger.NewRelay(w.pool, pgledger.RelayOptions{Producer: prod, Retry: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	j := job(t, charges, Charge{ID: "down-1", Amount: 1})
	w.commit(t, j)
	srv.Stop()
	if _, err := r.Move(context.Background()); err == nil {
		t.Fatal("move with Redis down: no error")
	}
	var attempts int
	var why string
	if err := w.pool.QueryRow(context.Background(), `SELECT attempts, last_error FROM onceq_outbox`).Scan(&attempts, &why); err != nil || attempts != 1 || why == "" {
		t.Fatalf("row after the failed move: attempts %d, error %q, %v", attempts, why, err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the move after Redis came back", func() bool {
		r.Move(context.Background())
		return w.rows(t) == 0
	})
	if info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo("default", j.Key.TaskID()); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("task %+v %v, want pending", info, err)
	}
}
