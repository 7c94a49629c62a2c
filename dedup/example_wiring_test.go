package dedup_test

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// Wiring mistakes are refused at start-up, not found when a task waits
// forever or fails as "handler not found": a catalog type on a queue the
// server does not serve, and one without a handler on the ServeMux.
func ExampleNewServer_wiring() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", Queue: "billing", ID: func(i Invoice) string { return i.ID }})
	thumbnails := dedup.Define(dedup.Spec[Invoice]{Type: "thumbnail:make"})
	catalog, _ := dedup.NewCatalog(invoices.Kind, thumbnails.Kind)

	_, err := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{Catalog: catalog})
	fmt.Println(err)

	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{Queues: map[string]int{"billing": 2, "default": 1}},
		dedup.MiddlewareOptions{Catalog: catalog})
	mux := asynq.NewServeMux()
	mux.Handle(invoices.Type, dedup.Handle(invoices, func(context.Context, Invoice) (string, error) { return "sent", nil }))
	fmt.Println(srv.Start(mux))
	// Output:
	// dedup: new server: catalog types on queues this server does not serve: invoice:send on billing (asynq.Config.Queues: default)
	// dedup: start: catalog types without a handler on the ServeMux: thumbnail:make
}
