package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/pgledger/pgtest"
	"github.com/onceq/onceq/tasks"
)

// ledgerRun is what one mode of the scenario counted in Postgres.
type ledgerRun struct {
	jobs, shipped, doubled, missing int
	kills, killsInTx                int
}

func (r ledgerRun) String() string {
	return fmt.Sprintf("%d orders: %d shipped exactly once, %d more than once, %d never; %d kills -9, %d with a transaction open",
		r.jobs, r.shipped-r.doubled, r.doubled, r.missing, r.kills, r.killsInTx)
}

// Workers running order:fulfil are killed with -9 at random moments while
// their transactions are open (before the rows, between rows and commit,
// just after the commit and before asynq's ack), then Redis is restarted
// empty: queue, claims and done records gone, as a failover to a replica
// that lagged or a restart without AOF would leave it. The application
// enqueues every order again, and one more kill during that leaves a task
// to asynq's recoverer. With the Postgres ledger every order has its rows
// exactly once and none is lost; the same run with Redis-only deduplication
// ships orders twice, and both counts are printed. About 2-3 minutes.
func TestKillNineTransactionalRedisForgets(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	var withLedger, redisOnly ledgerRun
	t.Run("modes", func(t *testing.T) {
		t.Run("ledger", func(t *testing.T) { t.Parallel(); withLedger = killTransactional(t, true) })
		t.Run("redis-only", func(t *testing.T) { t.Parallel(); redisOnly = killTransactional(t, false) })
	})
	if t.Failed() {
		return
	}
	t.Logf("exactly-once counts: with the Postgres ledger: %v", withLedger)
	t.Logf("exactly-once counts: Redis-only dedup:         %v", redisOnly)
	if withLedger.doubled != 0 || withLedger.missing != 0 {
		t.Errorf("with the ledger: %v, want every order exactly once", withLedger)
	}
	// The comparison must be able to see doubles, or the first line proves nothing.
	if redisOnly.doubled == 0 {
		t.Errorf("Redis-only: %v, want some orders shipped twice (the run did not stress what the ledger fixes)", redisOnly)
	}
}

func killTransactional(t *testing.T, ledger bool) ledgerRun {
	const (
		waves     = 5
		perWave   = 60
		lines     = 3
		readyWait = 30 * time.Second
	)
	r := newRig(t)
	dbURL := pgtest.New(t)
	u, _ := url.Parse(dbURL)
	db := strings.TrimPrefix(u.Path, "/")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	vars := r.workerVars(map[string]string{
		"ONCEQ_CONCURRENCY":     "8",
		"ONCEQ_POSTGRES_URL":    dbURL,
		"ONCEQ_POSTGRES_LEDGER": strconv.FormatBool(ledger),
		"ONCEQ_LOG_LEVEL":       "warn",
	})

	var jobs []dedup.Job
	order := func(i int) dedup.Job {
		o := tasks.Order{OrderID: fmt.Sprintf("ord-%04d", i), Customer: "cust-" + strconv.Itoa(i%7)}
		for l := range lines {
			o.Lines = append(o.Lines, tasks.OrderLine{SKU: fmt.Sprintf("SKU-%d", l), Qty: 1 + l})
		}
		j, err := testenv.Job(tasks.Orders.Job(o))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	// openTx: a worker backend inside a transaction on this mode's database.
	openTx := func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`, db).Scan(&n)
		return err == nil && n > 0
	}

	var run ledgerRun
	w := startWorker(t, "worker-0", vars)
	// kill waits for a transaction in flight, then kills within a few ms of it.
	kill := func() {
		deadline := time.Now().Add(10 * time.Second)
		for !openTx() && time.Now().Before(deadline) {
		}
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		inTx := openTx()
		w.kill()
		run.kills++
		if inTx {
			run.killsInTx++
		}
	}
	for wave := range waves {
		for i := range perWave {
			j := order(wave*perWave + i)
			jobs = append(jobs, j)
			r.enqueue(j)
		}
		kill()
		w = startWorker(t, fmt.Sprintf("worker-%d", wave+1), vars)
	}

	shipped := func() (perOrder map[string]int, err error) {
		rows, err := pool.Query(ctx, `SELECT order_id, count(*) FROM order_shipments GROUP BY order_id`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		perOrder = map[string]int{}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return nil, err
			}
			perOrder[id] = n
		}
		return perOrder, rows.Err()
	}
	// Some orders ship before Redis forgets, or the Redis-only run has
	// nothing to ship twice: the kills land within milliseconds of a
	// worker's first transaction, so the waves alone may commit none.
	eventually(t, readyWait, "some orders shipped before Redis forgets", func() (bool, string) {
		per, err := shipped()
		if err != nil {
			return false, err.Error()
		}
		return len(per) >= perWave/2, fmt.Sprintf("%d orders shipped", len(per))
	})

	// Redis forgets everything: the killed workers' active tasks, pending
	// ones, every claim and done record.
	r.redis.Stop()
	if err := r.redis.Restart(); err != nil {
		t.Fatalf("restart redis: %v", err)
	}
	eventually(t, readyWait, w.name+" ready on the empty Redis", func() (bool, string) {
		code, body := w.get("/readyz")
		return code == http.StatusOK, body
	})
	// The application enqueues again what it cannot see completed. Halfway,
	// one more kill: its task stays active in Redis, and comes back only
	// through asynq's recoverer (1-2 minutes), to a claim whose lease ran out.
	for i, j := range jobs {
		if i == len(jobs)/2 {
			kill()
			w = startWorker(t, "worker-last", vars)
		}
		for try := 0; ; try++ {
			o, err := r.prod.Enqueue(ctx, j)
			// A duplicate on a retry: the failed call had been written
			// (the empty Redis knows no other source of this job).
			if err == nil && (o.Decision == dedup.Enqueued || o.Decision == dedup.Duplicate && try > 0) {
				break
			}
			if try > 50 {
				t.Fatalf("re-enqueue %s: %+v %v", j.Key, o, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// asynq's recoverer runs every minute and takes leases expired >= 30 s
	// ago; then the first retry waits 15-44 s.
	settled := eventually(t, 4*time.Minute, "every order shipped and the queues idle", func() (bool, string) {
		per, err := shipped()
		if err != nil {
			return false, err.Error()
		}
		q, err := r.load()
		if err != nil {
			return false, err.Error()
		}
		return len(per) == len(jobs) && q.idle(), fmt.Sprintf("%d of %d orders shipped; %v", len(per), len(jobs), q)
	})
	per, err := shipped()
	if err != nil {
		t.Fatal(err)
	}
	run.jobs = len(jobs)
	for _, j := range jobs {
		n := per[j.Key.ID]
		switch {
		case n == 0:
			run.missing++
		case n > lines:
			run.doubled++
			run.shipped++
		default:
			run.shipped++
		}
		if n%lines != 0 {
			t.Errorf("%s: %d shipment rows, not a multiple of its %d lines: a partial transaction committed", j.Key, n, lines)
		}
	}
	if ledger {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM onceq_ledger WHERE state = 'done'`).Scan(&done); err != nil || done != len(jobs) {
			t.Errorf("ledger: %d done rows (%v), want %d", done, err, len(jobs))
		}
	}
	t.Logf("%s: %v; settled %s after the re-enqueue", map[bool]string{true: "ledger", false: "redis-only"}[ledger],
		run, settled.Round(time.Second))
	return run
}
