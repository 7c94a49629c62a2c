package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/pgledger/pgtest"
)

// checkout commits each order with its payment job and touches no Redis;
// an order placed again commits nothing (exit 3); `status` says outbox
// until `producer relay` moves the payments into asynq.
func TestCheckoutThenRelay(t *testing.T) {
	dbURL := pgtest.New(t)
	t.Setenv("ONCEQ_POSTGRES_URL", dbURL)
	t.Setenv("ONCEQ_REDIS_URL", "redis://127.0.0.1:1") // nothing there: checkout must not need it
	orders := `{"order_id":"ord-1","account":"acct-1","amount":4200,"currency":"EUR"}
{"order_id":"ord-2","account":"acct-2","amount":990,"currency":"EUR"}
{"order_id":"ord-1","account":"acct-1","amount":4200,"currency":"EUR"}
`
	out, err := cli(t, orders, "checkout")
	if exitCode(err) != exitDuplicate || !strings.Contains(out, "ord-1 committed with payment:charge/pay-ord-1: outbox") ||
		!strings.Contains(out, "ord-1: not placed (the order exists)") {
		t.Fatalf("checkout: %v (exit %d)\n%s", err, exitCode(err), out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var orderRows, jobRows int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM shop_orders), (SELECT count(*) FROM onceq_outbox)`).Scan(&orderRows, &jobRows); err != nil || orderRows != 2 || jobRows != 2 {
		t.Fatalf("%d orders, %d outbox rows (%v); want 2 and 2", orderRows, jobRows, err)
	}
	if _, err := cli(t, `{"order_id":"ord-3","amount":-5}`, "checkout"); exitCode(err) != exitUsage {
		t.Fatalf("invalid order: %v, want exit %d", err, exitUsage)
	}

	rdb := redistest.Client(t)
	opt := rdb.Options()
	t.Setenv("ONCEQ_REDIS_URL", fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB))
	if out, err := cli(t, "", "status", "payment:charge/pay-ord-2"); err != nil || !strings.Contains(out, `"state": "outbox"`) {
		t.Fatalf("status before the relay: %v\n%s", err, out)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var logs bytes.Buffer
	wg.Go(func() {
		if err := run(rctx, []string{"relay"}, strings.NewReader(""), &bytes.Buffer{}, &logs); err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	insp := asynq.NewInspectorFromRedisClient(rdb)
	deadline := time.Now().Add(30 * time.Second)
	for {
		k, _ := dedup.NewKey("payment:charge", "pay-ord-2")
		info, err := insp.GetTaskInfo("critical", k.TaskID())
		if err == nil && info.State == asynq.TaskStatePending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment not relayed: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	wg.Wait()
}
