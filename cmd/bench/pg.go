package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/pgledger"
)

// Sides of the transactional comparison (bench -pg).
const (
	pgBare     = "asynq"           // no-op handler
	pgRedis    = "onceq"           // no-op handler in the Redis middleware
	pgTx       = "onceq+tx"        // middleware + one INSERT in a transaction, no ledger
	pgLedger   = "onceq+tx+ledger" // middleware + the same INSERT under the ledger
	pgDefaultN = 2000
)

// runPG measures transactional processing (`bench -pg`): the same tasks
// through bare asynq, the Redis middleware, a plain Postgres transaction
// and the ledger, in rotating order per round, on its own redis-server and
// a throwaway database.
func runPG(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench -pg", flag.ContinueOnError)
	n := fs.Int("n", pgDefaultN, "tasks per side per round")
	rounds := fs.Int("rounds", 3, "rounds (sides rotate their order)")
	conc := fs.Int("c", 10, "asynq concurrency (and pool size - 2)")
	pgURL := fs.String("postgres-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "database to create the throwaway bench database from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "onceq-bench-pg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Launch(dir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4 * *conc})
	defer rdb.Close()

	dbURL, drop, err := benchDatabase(ctx, *pgURL)
	if err != nil {
		return err
	}
	defer drop()
	ledger, err := pgledger.Open(ctx, dbURL, int32(*conc+2), pgledger.Options{})
	if err != nil {
		return err
	}
	defer ledger.Close()
	if _, err := ledger.Pool().Exec(ctx, `CREATE TABLE bench_effects (key text NOT NULL, n int NOT NULL)`); err != nil {
		return err
	}
	plain := pgledger.New(ledger.Pool(), pgledger.Options{NoRecord: true})
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		return err
	}

	sides := []string{pgBare, pgRedis, pgTx, pgLedger}
	rates := map[string][]float64{}
	for r := range *rounds {
		order := append(slices.Clone(sides[r%len(sides):]), sides[:r%len(sides)]...)
		for _, side := range order {
			var l *pgledger.Ledger
			switch side {
			case pgTx:
				l = plain
			case pgLedger:
				l = ledger
			}
			rate, err := pgRound(ctx, rdb, store, l, side, fmt.Sprintf("pg-%s-%d", side, r), *n, *conc)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", side, r, err)
			}
			rates[side] = append(rates[side], rate)
		}
	}
	fmt.Fprintf(out, "transactional processing: N=%d per side, %d rounds, concurrency %d (medians, tasks/s)\n", *n, *rounds, *conc)
	fmt.Fprintf(out, "%-18s %10s %10s %10s\n", "side", "tasks/s", "vs asynq", "vs onceq")
	base, red := pgMedian(rates[pgBare]), pgMedian(rates[pgRedis])
	for _, s := range sides {
		m := pgMedian(rates[s])
		fmt.Fprintf(out, "%-18s %10.0f %10.2f %10.2f\n", s, m, m/base, m/red)
	}
	return nil
}

// pgRound enqueues n tasks on a fresh queue, then times one server
// processing all of them.
func pgRound(ctx context.Context, rdb *redis.Client, store storage.Store, l *pgledger.Ledger, side, queue string, n, conc int) (float64, error) {
	client := asynq.NewClientFromRedisClient(rdb)
	for i := range n {
		// The task id carries the key, as the Producer sends it.
		key := dedup.Key{Namespace: "bench:pg", ID: fmt.Sprintf("%s-%d", queue, i)}
		t := asynq.NewTask("bench:pg", []byte(`{"i":`+fmt.Sprint(i)+`}`))
		if _, err := client.EnqueueContext(ctx, t, asynq.Queue(queue), asynq.TaskID(key.TaskID())); err != nil {
			return 0, err
		}
	}
	var count atomic.Int64
	done := make(chan struct{})
	tick := func() {
		if count.Add(1) == int64(n) {
			close(done)
		}
	}
	var h asynq.Handler = asynq.HandlerFunc(func(context.Context, *asynq.Task) error { tick(); return nil })
	if l != nil {
		h = l.Handler(pgledger.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, t *asynq.Task) ([]byte, error) {
			run, _ := dedup.RunFromContext(ctx)
			_, err := tx.Exec(ctx, `INSERT INTO bench_effects (key, n) VALUES ($1, 1)`, run.Key.String())
			if err == nil {
				defer tick()
			}
			return nil, err
		}))
	}
	mux := asynq.NewServeMux()
	mux.Handle("bench:pg", h)
	srv, err := newServer(side != pgBare, nil, rdb, store, asynq.Config{
		Concurrency: conc, Queues: map[string]int{queue: 1}, TaskCheckInterval: 10 * time.Millisecond,
		Logger: quietLogger{w: io.Discard}, LogLevel: asynq.ErrorLevel,
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return 0, err
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		err = fmt.Errorf("only %d of %d tasks in 5m", count.Load(), n)
	case <-ctx.Done():
		err = ctx.Err()
	}
	elapsed := time.Since(start)
	_ = srv.Shutdown(context.Background())
	return float64(n) / elapsed.Seconds(), err
}

// benchDatabase creates onceq_bench_<random> next to base and returns its
// URL and a func that drops it.
func benchDatabase(ctx context.Context, base string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "onceq_bench_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	drop := func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn.Exec(c, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		conn.Close(c)
	}
	u, err := url.Parse(base)
	if err != nil {
		drop()
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

func pgMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
