package pgledger_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/pgledger"
)

// Order is your own task's payload.
type Order struct {
	OrderID string `json:"order_id"`
	Lines   int    `json:"lines"`
}

// Shipment is the handler's result, stored with the ledger row.
type Shipment struct {
	ID string `json:"id"`
}

// A transactional handler: its statements on tx commit together with the
// ledger's record of the run, so the effect happens once even when Redis
// forgets the job (a restart without persistence, a failover). The same
// order enqueued again after that is answered from the ledger; the handler
// does not run twice.
//
// It needs a Postgres (DATABASE_URL), so go test compiles it and runs it
// only where a test database is at hand (example_run_test.go). It prints:
//
//	shipping ord-1, 3 lines
//	done {"id":"shp-ord-1"}
//	after Redis forgot: done {"id":"shp-ord-1"}, 1 shipment row
func ExampleHandle() {
	ctx := context.Background()
	ledger, err := pgledger.Open(ctx, os.Getenv("DATABASE_URL"), 8, pgledger.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	if _, err := ledger.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS shipments (order_id text PRIMARY KEY, lines int NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	orders := dedup.Define(dedup.Spec[Order]{Type: "order:fulfil", ID: func(o Order) string { return o.OrderID }})
	catalog, _ := dedup.NewCatalog(orders.Kind)
	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{Catalog: catalog})
	mux := asynq.NewServeMux()
	mux.Handle(orders.Type, pgledger.Handle(ledger, orders, func(ctx context.Context, tx pgx.Tx, o Order) (Shipment, error) {
		fmt.Printf("shipping %s, %d lines\n", o.OrderID, o.Lines)
		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id, lines) VALUES ($1, $2)`, o.OrderID, o.Lines)
		return Shipment{ID: "shp-" + o.OrderID}, err
	}))
	if err := srv.Start(mux); err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown(ctx)

	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	job := orders.Job(Order{OrderID: "ord-1", Lines: 3})
	if _, err := producer.Enqueue(ctx, job); err != nil {
		log.Fatal(err)
	}
	st, _ := producer.Wait(ctx, job, 10*time.Second)
	fmt.Printf("%s %s\n", st.State, st.Result)

	rdb.FlushDB(ctx) // Redis forgets the job, its record and its result
	if _, err := producer.Enqueue(ctx, job); err != nil {
		log.Fatal(err)
	}
	st, _ = producer.Wait(ctx, job, 10*time.Second)
	var rows int
	if err := ledger.Pool().QueryRow(ctx, `SELECT count(*) FROM shipments WHERE order_id = $1`, "ord-1").Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after Redis forgot: %s %s, %d shipment row\n", st.State, st.Result, rows)
}
