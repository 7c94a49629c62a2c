package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/faulttest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/pgledger/pgtest"
	"github.com/onceq/onceq/tasks"
)

// withPassword puts a password into a trust-auth URL: Postgres ignores it,
// and the logs must never show it.
func withPassword(t *testing.T, u string) string {
	t.Helper()
	return strings.Replace(u, "postgres@", "postgres:hunter2-not-logged@", 1)
}

// With ONCEQ_POSTGRES_URL the worker migrates the ledger and the order
// tables and runs order:fulfil under the ledger.
func TestOrderThroughWorker(t *testing.T) {
	dbURL := withPassword(t, pgtest.New(t))
	srv := redistest.Start(t)
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_POSTGRES_URL"] = dbURL
	w := startWorker(t, cfg)
	e := newEnv(t, srv.Client(t))
	j, _ := e.enqueued(t)(testenv.Job(tasks.Orders.Job(tasks.Order{OrderID: "ord-w-1", Customer: "c1",
		Lines: []tasks.OrderLine{{SKU: "A", Qty: 1}, {SKU: "B", Qty: 2}}})))
	e.waitState(t, j.Key, dedup.StatusDone)
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var shipments, done int
	if err := conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM order_shipments WHERE order_id = 'ord-w-1'),
		(SELECT count(*) FROM onceq_ledger WHERE key = $1 AND state = 'done')`, j.Key.String()).Scan(&shipments, &done); err != nil {
		t.Fatal(err)
	}
	if shipments != 2 || done != 1 {
		t.Fatalf("%d shipments, %d done ledger rows; want 2 and 1", shipments, done)
	}
	if strings.Contains(w.logs.String(), "hunter2") {
		t.Fatalf("the Postgres password is in the log:\n%s", w.logs)
	}
}

// Postgres is optional: unreachable at start, the worker still starts and
// sends email, and only order:fulfil is not ready (readyz line, metric, a
// warn line). Once Postgres answers the tables are migrated and orders run;
// cut off again while running, only orders stop again. It used to exit 1.
func TestPostgresUnreachable(t *testing.T) {
	db, err := url.Parse(pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faulttest.NewProxy(db.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	proxy.Cut()
	db.Host = proxy.Addr
	db.User = url.UserPassword("postgres", "hunter2-not-logged")

	srv := redistest.Start(t)
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_POSTGRES_URL"] = db.String()
	w := startWorker(t, cfg)
	e := newEnv(t, srv.Client(t))
	readyz := "http://" + w.admin + "/readyz"
	const degraded = "postgres unreachable: not ready: order:fulfil"

	mail, _ := e.enqueued(t)(testenv.Job(tasks.Emails.Job(tasks.Email{ID: "pg-down-1", To: "ada@example.com", Subject: "Hi", Body: "."})))
	e.waitState(t, mail.Key, dedup.StatusDone)
	if n := outboxCount(t, cfg["ONCEQ_OUTBOX_DIR"]); n != 1 {
		t.Fatalf("%d emails sent with Postgres down, want 1", n)
	}
	// Ready throughout (200); the Postgres line names the outage once the
	// first check has failed ("not checked yet" before).
	waitBody(t, readyz, func(b string) bool { return strings.Contains(b, degraded) })
	get(t, readyz, http.StatusOK)
	if m := get(t, "http://"+w.admin+"/metrics", http.StatusOK); !strings.Contains(m, `onceq_dependency_up{dependency="postgres"} 0`) {
		t.Fatalf("no onceq_dependency_up 0 for postgres in /metrics")
	}

	proxy.Restore()
	waitBody(t, readyz, func(b string) bool { return !strings.Contains(b, degraded) })
	order, _ := e.enqueued(t)(testenv.Job(tasks.Orders.Job(tasks.Order{OrderID: "ord-pg-1", Customer: "c1",
		Lines: []tasks.OrderLine{{SKU: "A", Qty: 1}}})))
	e.waitState(t, order.Key, dedup.StatusDone)

	proxy.Cut()
	waitBody(t, readyz, func(b string) bool { return strings.Contains(b, degraded) })
	mail, _ = e.enqueued(t)(testenv.Job(tasks.Emails.Job(tasks.Email{ID: "pg-down-2", To: "ada@example.com", Subject: "Hi", Body: "."})))
	e.waitState(t, mail.Key, dedup.StatusDone)

	logs := w.logs.String()
	if strings.Count(logs, "postgres unreachable") < 2 || !strings.Contains(logs, "postgres reachable") {
		t.Errorf("want a line for each outage and for the recovery:\n%s", logs)
	}
	if strings.Contains(logs, "hunter2") {
		t.Errorf("the password leaked:\n%s", logs)
	}
}

// waitBody polls url until its body satisfies ok.
func waitBody(t *testing.T, url string, ok func(string) bool) {
	t.Helper()
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); ok(body) {
			return
		}
	}
	t.Fatalf("%s never answered as wanted; last: %q", url, body)
}

// The worker owns the ledger's rows: at start (and hourly) it deletes done
// and failed rows older than ONCEQ_POSTGRES_RETENTION, and only those.
func TestWorkerPrunesLedger(t *testing.T) {
	dbURL := pgtest.New(t)
	ctx := context.Background()
	l, err := pgledger.Open(ctx, dbURL, 2, pgledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	old, recent := dedup.Key{Namespace: tasks.TypeOrder, ID: "prune-old"}, dedup.Key{Namespace: tasks.TypeOrder, ID: "prune-recent"}
	for _, k := range []dedup.Key{old, recent} {
		if _, err := l.Run(ctx, k, "", func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	failed := dedup.Key{Namespace: tasks.TypeOrder, ID: "prune-failed"}
	l.Run(ctx, failed, "", func(context.Context, pgx.Tx) ([]byte, error) { return nil, errors.New("rolled back") })
	if _, err := l.Pool().Exec(ctx, `UPDATE onceq_ledger SET completed_at = now() - interval '31 days' WHERE key = $1`, old.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `UPDATE onceq_ledger SET updated_at = now() - interval '31 days' WHERE key = $1`, failed.String()); err != nil {
		t.Fatal(err)
	}

	srv := redistest.Start(t)
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_POSTGRES_URL"] = dbURL // default retention: 30 days
	w := startWorker(t, cfg)
	state := func(k dedup.Key) dedup.Status {
		r, err := l.Status(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return r.State
	}
	for deadline := time.Now().Add(10 * time.Second); state(old) != dedup.StatusUnknown || state(failed) != dedup.StatusUnknown; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("31-day-old rows are still there (done: %v, failed: %v):\n%s", state(old), state(failed), w.logs)
		}
	}
	if s := state(recent); s != dedup.StatusDone {
		t.Fatalf("the recent row: %v, want done (kept)", s)
	}
	if !strings.Contains(w.logs.String(), "pruned done rows") {
		t.Fatalf("no log line for the pruned row:\n%s", w.logs)
	}
}

// ONCEQ_OUTBOX=on: the worker relays a job an application committed with
// pgledger.EnqueueTx, and runs it.
func TestWorkerRelaysOutbox(t *testing.T) {
	dbURL := pgtest.New(t)
	srv := redistest.Start(t)
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_POSTGRES_URL"] = dbURL
	cfg["ONCEQ_OUTBOX"] = "on"
	w := startWorker(t, cfg)
	// The worker migrates Postgres once it answers, after start-up (an
	// optional dependency): the outbox table is there only then.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(w.logs.String(), "postgres ledger ready"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ledger never ready:\n%s", w.logs)
		}
	}
	e := newEnv(t, srv.Client(t))
	j, err := testenv.Job(tasks.Orders.Job(tasks.Order{OrderID: "ord-outbox-1", Customer: "c1",
		Lines: []tasks.OrderLine{{SKU: "A", Qty: 1}}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := pgledger.EnqueueTx(ctx, tx, j)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, j.Key, dedup.StatusDone)
}
