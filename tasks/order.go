package tasks

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/pgledger"
)

// TypeOrder fulfils an order: one shipment row per order line in the
// application's Postgres, written in the ledger's transaction, so an order
// ships once however often the task is delivered.
const TypeOrder = "order:fulfil"

const (
	// OrderMaxRetry is the asynq MaxRetry of orders.
	OrderMaxRetry = 10

	maxOrderLines = 100
	maxSKUBytes   = 64
	maxLineQty    = 10_000
)

// ErrNoPostgres: a transactional task reached a worker without
// ONCEQ_POSTGRES_URL. It wraps asynq.SkipRetry: the task is archived, visible
// in the dashboard, and can be re-run from there once Postgres is configured.
var ErrNoPostgres = errors.New("tasks: transactional task needs ONCEQ_POSTGRES_URL")

// Order is the payload of TypeOrder.
type Order struct {
	OrderID  string      `json:"order_id"`
	Customer string      `json:"customer"`
	Lines    []OrderLine `json:"lines"`
}

// OrderLine is one SKU and quantity to ship.
type OrderLine struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

func (o Order) validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypeOrder, dedup.ErrInvalid}, a...)...)
	}
	if _, err := dedup.NewKey(TypeOrder, o.OrderID); err != nil {
		return fail("order_id: %v", err)
	}
	switch {
	case o.Customer == "" || !printable(o.Customer):
		return fail("customer is empty or not printable UTF-8")
	case len(o.Lines) == 0 || len(o.Lines) > maxOrderLines:
		return fail("%d lines, want 1..%d", len(o.Lines), maxOrderLines)
	}
	for i, l := range o.Lines {
		switch {
		case l.SKU == "" || len(l.SKU) > maxSKUBytes || !utf8.ValidString(l.SKU) || !printable(l.SKU):
			return fail("line %d: sku must be 1..%d printable bytes", i, maxSKUBytes)
		case l.Qty < 1 || l.Qty > maxLineQty:
			return fail("line %d: qty %d not in 1..%d", i, l.Qty, maxLineQty)
		}
	}
	return nil
}

// Transactional are the types that run under the Postgres ledger: the ones
// a Postgres that does not answer makes not ready, and the only ones whose
// status the ledger holds.
var Transactional = []string{TypeOrder}

// orderSpec is the order:fulfil declaration: keyed by order_id, run under the
// Postgres ledger (Deps.Ledger), refused where there is none.
func orderSpec(Windows) dedup.Spec[Order] {
	return dedup.Spec[Order]{
		// Key: order_id (required); runs under the Postgres ledger.
		Type:        TypeOrder,
		ID:          func(o Order) string { return o.OrderID },
		Validate:    Order.validate,
		MaxRetry:    OrderMaxRetry,
		WriteResult: true,
	}
}

// OrderMigrations create the application tables OrderHandler writes; apply
// them with pgledger.Migrate under the set name "order".
var OrderMigrations = []pgledger.Migration{{Version: 1, Name: "shipments", SQL: `
CREATE TABLE IF NOT EXISTS order_shipments (
    id         bigserial   PRIMARY KEY,
    order_id   text        NOT NULL,
    customer   text        NOT NULL,
    sku        text        NOT NULL,
    qty        integer     NOT NULL CHECK (qty > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS order_shipments_order_id ON order_shipments (order_id);`}}

// Fulfilment is the result of TypeOrder.
type Fulfilment struct {
	OrderID     string  `json:"order_id"`
	ShipmentIDs []int64 `json:"shipment_ids"`
}

// OrderHandler writes one shipment per line. Nothing in the table stops a
// second run from shipping again: only the ledger's transaction does.
type OrderHandler struct {
	Log *zap.Logger
}

// Fulfil ships o in tx (pgledger.Handle commits it with the ledger's row).
func (h OrderHandler) Fulfil(ctx context.Context, tx pgx.Tx, o Order) (Fulfilment, error) {
	skus, qtys := make([]string, len(o.Lines)), make([]int32, len(o.Lines))
	for i, l := range o.Lines {
		skus[i], qtys[i] = l.SKU, int32(l.Qty)
	}
	rows, err := tx.Query(ctx, `INSERT INTO order_shipments (order_id, customer, sku, qty)
		SELECT $1, $2, s.sku, s.qty FROM unnest($3::text[], $4::integer[]) AS s(sku, qty)
		RETURNING id`, o.OrderID, o.Customer, skus, qtys)
	if err != nil {
		return Fulfilment{}, fmt.Errorf("tasks: %s %s: %w", TypeOrder, o.OrderID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return Fulfilment{}, fmt.Errorf("tasks: %s %s: %w", TypeOrder, o.OrderID, err)
	}
	logger(h.Log).Debug("order shipped", zap.String("order_id", o.OrderID), zap.Int("shipments", len(ids)))
	return Fulfilment{OrderID: o.OrderID, ShipmentIDs: ids}, nil
}

// orderHandler is TypeOrder's asynq handler: under the ledger when there is
// one, else a refusal that archives the task instead of retrying it forever.
func orderHandler(d Deps) asynq.Handler {
	if d.Ledger == nil {
		return asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			return fmt.Errorf("%w: %s: %w", ErrNoPostgres, TypeOrder, asynq.SkipRetry)
		})
	}
	return pgledger.Handle(d.Ledger, Orders, OrderHandler{Log: logger(d.Log).Named(TypeOrder)}.Fulfil)
}
