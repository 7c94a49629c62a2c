package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/pgledger/pgtest"
	"github.com/onceq/onceq/tasks"
)

func validOrder() tasks.Order {
	return tasks.Order{OrderID: "ord-1001", Customer: "cust-7",
		Lines: []tasks.OrderLine{{SKU: "SKU-RED-M", Qty: 2}, {SKU: "SKU-BLUE-L", Qty: 1}}}
}

func TestNewOrder(t *testing.T) {
	t.Parallel()
	with := func(f func(*tasks.Order)) tasks.Order { o := validOrder(); f(&o); return o }
	for _, c := range []struct {
		name    string
		order   tasks.Order
		wantErr string
	}{
		{"valid", validOrder(), ""},
		{"no order id", with(func(o *tasks.Order) { o.OrderID = "" }), "order_id"},
		{"brace in order id", with(func(o *tasks.Order) { o.OrderID = "o{1}" }), "order_id"},
		{"no customer", with(func(o *tasks.Order) { o.Customer = "" }), "customer"},
		{"no lines", with(func(o *tasks.Order) { o.Lines = nil }), "0 lines"},
		{"zero qty", with(func(o *tasks.Order) { o.Lines[0].Qty = 0 }), "qty 0"},
		{"sku with newline", with(func(o *tasks.Order) { o.Lines[1].SKU = "a\nb" }), "sku"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := testenv.Job(tasks.Orders.Job(c.order))
			if c.wantErr == "" {
				if err != nil || j.Key.String() != "order:fulfil/"+c.order.OrderID || j.Task.Type() != tasks.TypeOrder {
					t.Fatalf("NewOrder: %+v %v", j.Key, err)
				}
				return
			}
			if !errors.Is(err, dedup.ErrInvalid) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("NewOrder: %v, want ErrInvalid mentioning %q", err, c.wantErr)
			}
		})
	}
}

// Through the catalog's mux behind the real middleware, on real Redis and
// Postgres: the order ships one row per line, a redelivery after Redis
// forgot the job ships nothing more and replays the same shipment ids.
func TestOrderShipsOnceWhateverRedisForgets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ledger, err := pgledger.Open(ctx, pgtest.New(t), 4, pgledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	pool := ledger.Pool()
	if err := pgledger.Migrate(ctx, pool, "order", tasks.OrderMigrations); err != nil {
		t.Fatal(err)
	}
	store, err := dedup.NewRedisStore(redistest.Client(t), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := dedup.NewMiddleware(store, dedup.MiddlewareOptions{Catalog: catalog.Catalog})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Shutdown(ctx)
	mux := asynq.NewServeMux()
	mux.Use(mw.Wrap)
	catalog.Register(mux, tasks.Deps{Ledger: ledger})

	j, err := testenv.Job(tasks.Orders.Job(validOrder()))
	if err != nil {
		t.Fatal(err)
	}
	results := make([]tasks.Fulfilment, 2)
	for i := range results {
		if i == 1 {
			if err := store.Forget(ctx, j.Key); err != nil {
				t.Fatal(err)
			}
		}
		if err := mux.ProcessTask(ctx, j.Task); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
		rec, err := store.Status(ctx, j.Key)
		if err != nil || rec.State != dedup.StatusDone {
			t.Fatalf("delivery %d: record %+v %v, want done", i+1, rec, err)
		}
		if err := json.Unmarshal(rec.Result, &results[i]); err != nil {
			t.Fatalf("delivery %d: result %s: %v", i+1, rec.Result, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM order_shipments WHERE order_id = 'ord-1001'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(results[0].ShipmentIDs) != 2 {
		t.Fatalf("%d shipment rows, first result %+v; want 2 and 2", n, results[0])
	}
	if !slices.Equal(results[0].ShipmentIDs, results[1].ShipmentIDs) {
		t.Fatalf("redelivery result %+v, want the first run's %+v", results[1], results[0])
	}
}

// Without Postgres the task is refused for good (archived), not retried.
func TestOrderRefusedWithoutPostgres(t *testing.T) {
	t.Parallel()
	catalog, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	mux := asynq.NewServeMux()
	catalog.Register(mux, tasks.Deps{})
	j, err := testenv.Job(tasks.Orders.Job(validOrder()))
	if err != nil {
		t.Fatal(err)
	}
	err = mux.ProcessTask(context.Background(), j.Task)
	if !errors.Is(err, tasks.ErrNoPostgres) || !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("order without Postgres: %v, want ErrNoPostgres and SkipRetry", err)
	}
}

func TestJobForOrder(t *testing.T) {
	t.Parallel()
	catalog, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := catalog.Build(tasks.TypeOrder, []byte(`{"order_id":"ord-9","customer":"c","lines":[{"sku":"A","qty":1}]}`), "", "")
	if err != nil || j.Key.String() != "order:fulfil/ord-9" {
		t.Fatalf("JobFor: %v %v", j.Key, err)
	}
	// An Idempotency-Key never changes an order's key: order_id is it.
	if j, err := catalog.Build(tasks.TypeOrder, []byte(`{"order_id":"ord-9","customer":"c","lines":[{"sku":"A","qty":1}]}`), "other", ""); err != nil || j.Key.String() != "order:fulfil/ord-9" {
		t.Fatalf("Build with an Idempotency-Key: %v %v, want the order_id key", j.Key, err)
	}
}
