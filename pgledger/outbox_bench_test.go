package pgledger_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/pgledger"
)

// The cost of EnqueueTx inside an application's transaction, against a
// plain INSERT of a row of the same size in the same place. Each op runs
// both transactions, alternating which goes first, so a load that drifts
// on a shared machine hits both alike: BEGIN, the order row, then the job
// (EnqueueTx, or the plain INSERT), COMMIT. Reports the median of each and
// the median of the paired ratios.
//
//	go test -run '^$' -bench 'EnqueueTx' -benchtime 2000x ./pgledger/
func BenchmarkEnqueueTx(b *testing.B) {
	w := newOutboxWorld(b)
	ctx := context.Background()
	if _, err := w.pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY);
		CREATE TABLE plain_jobs (id bigserial PRIMARY KEY, key text NOT NULL, payload bytea NOT NULL, headers jsonb NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	// With synchronous_commit off the commit's fsync, which dominates on
	// a shared disk, is out of the comparison.
	for _, commit := range []string{"on", "off"} {
		b.Run("sync-commit="+commit, func(b *testing.B) {
			var plain, outbox, ratio []float64
			for b.Loop() {
				i := int(benchSeq.Add(1))
				var p, o time.Duration
				for _, enqueue := range []bool{i%2 == 0, i%2 != 0} {
					start := time.Now()
					benchTx(b, w, commit, enqueue, i)
					if enqueue {
						o = time.Since(start)
					} else {
						p = time.Since(start)
					}
				}
				plain, outbox = append(plain, us(p)), append(outbox, us(o))
				ratio = append(ratio, us(o)/us(p))
			}
			b.ReportMetric(median(plain), "plain-insert-us")
			b.ReportMetric(median(outbox), "EnqueueTx-us")
			b.ReportMetric(median(ratio), "EnqueueTx/plain")
		})
	}
}

// benchSeq numbers the jobs of every benchmark run (-count repeats a
// sub-benchmark on one database), so no two share a key.
var benchSeq atomic.Int64

// benchTx is one application transaction: the order row and its job.
func benchTx(b *testing.B, w *outboxWorld, commit string, enqueue bool, i int) {
	ctx := context.Background()
	j := charges.Job(Charge{ID: fmt.Sprintf("%s-%v-%d", commit, enqueue, i), Amount: i})
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = `+commit); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, j.Key.ID); err != nil {
			return err
		}
		if enqueue {
			_, err := pgledger.EnqueueTx(ctx, tx, j)
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO plain_jobs (key, payload, headers) VALUES ($1, $2, $3)`,
			j.Key.String(), j.Task.Payload(), j.Task.Headers())
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// Relay throughput: b.N committed jobs moved into asynq by one relay, or
// two side by side; reports jobs/s.
//
//	go test -run '^$' -bench 'RelayThroughput' -benchtime 5000x ./pgledger/
func BenchmarkRelayThroughput(b *testing.B) {
	for _, relays := range []int{1, 2} {
		b.Run(fmt.Sprintf("relays=%d", relays), func(b *testing.B) {
			w := newOutboxWorld(b)
			ctx := context.Background()
			// Fill the outbox untimed, 500 jobs per transaction.
			for start := 0; start < b.N; start += 500 {
				err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
					for i := start; i < min(start+500, b.N); i++ {
						if _, err := pgledger.EnqueueTx(ctx, tx, charges.Job(Charge{ID: fmt.Sprintf("tp-%d", i), Amount: i})); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			rs := make([]*pgledger.Relay, relays)
			for i := range rs {
				r, err := pgledger.NewRelay(w.pool, pgledger.RelayOptions{Producer: w.prod})
				if err != nil {
					b.Fatal(err)
				}
				rs[i] = r
			}
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, r := range rs {
				wg.Go(func() {
					for {
						n, err := r.Move(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if n == 0 {
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

// Commit-to-handler-start latency with NOTIFY (the relay's polling set to
// an hour, so only NOTIFY wakes it): each op commits one job and waits for
// its handler to start. Reports p50 and p99 of commit to enqueued (the
// relay's part) and of commit to handler start, under asynq's default
// TaskCheckInterval (1s: an idle server looks for work once a second) and
// under 10ms.
//
//	go test -run '^$' -bench 'CommitToHandler' -benchtime 200x ./pgledger/
func BenchmarkCommitToHandler(b *testing.B) {
	for _, check := range []time.Duration{0, 10 * time.Millisecond} {
		name := "asynq-check=default"
		if check > 0 {
			name = "asynq-check=" + check.String()
		}
		b.Run(name, func(b *testing.B) {
			w := newOutboxWorld(b)
			ctx := context.Background()
			var (
				mu       sync.Mutex
				enqueued = map[string]time.Time{}
			)
			started := make(chan string, 1)
			srv, err := dedup.NewServer(w.rdb, nil, asynq.Config{Concurrency: 4, TaskCheckInterval: check,
				Queues: map[string]int{"default": 1}, LogLevel: asynq.ErrorLevel}, dedup.MiddlewareOptions{})
			if err != nil {
				b.Fatal(err)
			}
			mux := asynq.NewServeMux()
			mux.Handle(charges.Type, dedup.Handle(charges, func(ctx context.Context, c Charge) (string, error) {
				started <- c.ID
				return "", nil
			}))
			if err := srv.Start(mux); err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown(ctx)
			r, err := pgledger.NewRelay(w.pool, pgledger.RelayOptions{Producer: w.prod, Poll: time.Hour,
				Observer: func(_ context.Context, e dedup.Event) {
					mu.Lock()
					enqueued[e.Key.ID] = time.Now()
					mu.Unlock()
				}})
			if err != nil {
				b.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() { r.Run(rctx) })
			defer func() { stop(); wg.Wait() }()
			w.waitListening(b)

			var toEnqueue, toStart []time.Duration
			for b.Loop() {
				i := int(benchSeq.Add(1))
				id := fmt.Sprintf("lat-%d", i)
				tx, err := w.pool.Begin(ctx)
				if err == nil {
					_, err = pgledger.EnqueueTx(ctx, tx, charges.Job(Charge{ID: id, Amount: i}))
				}
				// From the application's COMMIT call, its round trip included.
				committed := time.Now()
				if err == nil {
					err = tx.Commit(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
				if got := <-started; got != id {
					b.Fatalf("handler started %s, want %s", got, id)
				}
				toStart = append(toStart, time.Since(committed))
				mu.Lock()
				toEnqueue = append(toEnqueue, enqueued[id].Sub(committed))
				mu.Unlock()
			}
			for _, m := range []struct {
				name string
				d    []time.Duration
			}{{"enqueued", toEnqueue}, {"handler", toStart}} {
				slices.Sort(m.d)
				b.ReportMetric(ms(m.d[len(m.d)/2]), m.name+"-p50-ms")
				b.ReportMetric(ms(m.d[len(m.d)*99/100]), m.name+"-p99-ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
