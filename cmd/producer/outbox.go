package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/observe"
	"github.com/onceq/onceq/internal/strictjson"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/tasks"
)

// shopMigrations are the checkout demo's table: the application's own
// order rows, beside which its payment jobs commit.
var shopMigrations = []pgledger.Migration{{Version: 1, Name: "orders", SQL: `
CREATE TABLE IF NOT EXISTS shop_orders (
    order_id   text        PRIMARY KEY,
    account    text        NOT NULL,
    amount     bigint      NOT NULL,
    currency   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);`}}

// shopOrder is one line of `producer checkout`'s input.
type shopOrder struct {
	OrderID  string `json:"order_id"`
	Account  string `json:"account"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// paymentID is the payment job's business key: one payment per order.
func (o shopOrder) paymentID() string { return "pay-" + o.OrderID }

// checkout is the outbox's demo application: each input line is one
// transaction that writes the order row and its payment:charge job
// (pgledger.EnqueueTx), so the payment exists if and only if the order
// does. It needs Postgres only; a relay (a worker with ONCEQ_OUTBOX=on, or
// `producer relay`) enqueues the payments.
func checkout(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if slices.ContainsFunc(args, isHelp) {
		fmt.Fprintln(stdout, commandHelp["checkout"])
		return nil
	}
	if len(args) != 0 {
		return usageErr("checkout takes no arguments; it reads JSON lines from stdin")
	}
	cfg, catalog, err := load()
	if err != nil {
		return err
	}
	if !cfg.Postgres.Configured() {
		return usageErr("checkout writes orders to Postgres: set ONCEQ_POSTGRES_URL")
	}
	l, err := pgledger.Open(ctx, cfg.Postgres.URL, 2, pgledger.Options{})
	if err != nil {
		return err
	}
	defer l.Close()
	if err := pgledger.Migrate(ctx, l.Pool(), "shop", shopMigrations); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdin)
	repeats := 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var o shopOrder
		if err := strictjson.Decode([]byte(line), &o); err != nil {
			return fmt.Errorf("checkout: line %d: %w", n, err)
		}
		p, _ := json.Marshal(tasks.Payment{PaymentID: o.paymentID(), Account: o.Account, Amount: o.Amount, Currency: o.Currency})
		j, err := catalog.Build(tasks.TypePayment, p, "", "")
		if err != nil {
			return fmt.Errorf("checkout: line %d: %w", n, err)
		}
		placed, out, err := placeOrder(ctx, l, o, j)
		switch {
		case err != nil:
			return fmt.Errorf("checkout: line %d: order %s: %w", n, o.OrderID, err)
		case !placed:
			repeats++
			fmt.Fprintf(stdout, "%s: not placed (%s); nothing committed\n", o.OrderID, out.Reason)
		default:
			fmt.Fprintf(stdout, "%s committed with %s: %s\n", o.OrderID, out.Key, out.State)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("checkout: reading stdin: %w", err)
	}
	if repeats > 0 {
		return &exitErr{code: exitDuplicate}
	}
	return nil
}

// errNotPlaced rolls back an order whose row or payment exists already.
var errNotPlaced = errors.New("not placed")

// placeOrder writes o's row and its payment job j in one transaction; an
// order placed before, or a payment the outbox or ledger holds, commits
// nothing.
func placeOrder(ctx context.Context, l *pgledger.Ledger, o shopOrder, j dedup.Job) (bool, dedup.Outcome, error) {
	var out dedup.Outcome
	err := pgx.BeginFunc(ctx, l.Pool(), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO shop_orders (order_id, account, amount, currency) VALUES ($1, $2, $3, $4)
			ON CONFLICT (order_id) DO NOTHING`, o.OrderID, o.Account, o.Amount, o.Currency)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			out.Reason = "the order exists"
			return errNotPlaced
		}
		if out, err = pgledger.EnqueueTx(ctx, tx, j); err != nil {
			return err
		}
		if out.Decision != dedup.Enqueued {
			return errNotPlaced
		}
		return nil
	})
	if errors.Is(err, errNotPlaced) {
		return false, out, nil
	}
	return err == nil, out, err
}

// relay runs an outbox relay as a process of its own until ctx ends.
func relay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if slices.ContainsFunc(args, isHelp) {
		fmt.Fprintln(stdout, commandHelp["relay"])
		return nil
	}
	if len(args) != 0 {
		return usageErr("relay takes no arguments")
	}
	cfg, catalog, err := load()
	if err != nil {
		return err
	}
	if !cfg.Postgres.Configured() {
		return usageErr("relay moves jobs out of the Postgres outbox: set ONCEQ_POSTGRES_URL")
	}
	log, err := observe.NewLogger(cfg.Log.Env, cfg.Log.Level, stderr)
	if err != nil {
		return err
	}
	defer log.Sync()
	return connected(ctx, cfg, catalog, func(p *dedup.Producer, _ redis.UniversalClient) error {
		l, err := pgledger.Open(ctx, cfg.Postgres.URL, 4, pgledger.Options{})
		if err != nil {
			return err
		}
		defer l.Close()
		r, err := pgledger.NewRelay(l.Pool(), pgledger.RelayOptions{Producer: p, Observer: relayLog(log)})
		if err != nil {
			return err
		}
		log.Info("outbox relay started")
		return r.Run(ctx)
	})
}

// relayLog logs what stops or delays a move; moves themselves at debug.
func relayLog(log *zap.Logger) dedup.Observer {
	return func(_ context.Context, e dedup.Event) {
		lvl := zap.DebugLevel
		switch e.Outcome {
		case storage.Errored, dedup.Conflict:
			lvl = zap.WarnLevel
		case dedup.Throttled:
			lvl = zap.InfoLevel
		}
		if ce := log.Check(lvl, "outbox relay"); ce != nil {
			ce.Write(zap.String("key", e.Key.String()), zap.String("outcome", string(e.Outcome)), zap.String("reason", e.Reason))
		}
	}
}
