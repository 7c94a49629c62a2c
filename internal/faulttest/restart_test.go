package faulttest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// Redis (AOF, fsync always) is killed and restarted while producers enqueue
// and two workers process. Every acknowledged enqueue has its effect exactly
// once; producers that saw an error retry with the same key and learn from a
// duplicate that the lost reply had in fact been written; the workers keep
// running and become ready again by themselves.
func TestRedisRestartUnderLoad(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	// Redis is down for this long plus its start-up. The worker's dedup
	// middleware tries a failed Complete four times (1.5 s of back-off, about
	// 2.5-3 s with go-redis's own dial retries) and then gives up: a longer
	// outage can re-run a handler whose effect already happened, which the
	// gateway absorbs and SMTP does not.
	const outage = time.Second
	r := newRig(t, "--appendonly", "yes", "--appendfsync", "always")
	vars := r.workerVars(map[string]string{"ONCEQ_CONCURRENCY": "8"})
	workers := []*worker{startWorker(t, "worker-a", vars), startWorker(t, "worker-b", vars)}

	var (
		mu        sync.Mutex
		acked     []dedup.Job
		errs      atomic.Int64 // failed Enqueue calls
		lostAcks  atomic.Int64 // retries answered "duplicate": the failed call had been written
		abandoned []string
	)
	// The producers' own client does not retry, so the outage reaches them
	// as errors and they must retry themselves, as an application would.
	prdb := redis.NewClient(&redis.Options{Addr: r.redis.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { prdb.Close() })
	pstore, err := dedup.NewRedisStore(prdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := dedup.NewProducer(prdb, pstore, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("aof-%d-%d", g, i)
				var (
					j   dedup.Job
					err error
				)
				if i%2 == 0 {
					j, err = testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: id, Account: "acct-" + id, Amount: int64(100 + i), Currency: "EUR"}))
				} else {
					j, err = testenv.Job(tasks.Emails.Job(tasks.Email{ID: id, To: id + "@example.com", Subject: "faulttest " + id, Body: "Hello"}))
				}
				if err != nil {
					t.Errorf("job %s: %v", id, err)
					return
				}
				ok := false
				for try := 0; try < 300 && !ok; try++ {
					o, err := prod.Enqueue(context.Background(), j)
					switch {
					case err != nil:
						errs.Add(1)
						time.Sleep(50 * time.Millisecond)
					case o.Decision == dedup.Enqueued:
						ok = true
					case o.Decision == dedup.Duplicate && try > 0:
						lostAcks.Add(1)
						ok = true
					default:
						t.Errorf("enqueue %s: %+v", j.Key, o)
						return
					}
				}
				mu.Lock()
				if ok {
					acked = append(acked, j)
				} else {
					abandoned = append(abandoned, j.Key.String())
				}
				mu.Unlock()
				time.Sleep(15 * time.Millisecond)
			}
		})
	}

	time.Sleep(3 * time.Second)
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	r.redis.Stop() // SIGKILL
	down := time.Now()
	probe := make(chan int, 1)
	go func() { // readiness while Redis is down; it may answer only once Redis is back
		time.Sleep(outage / 4)
		code, _ := workers[0].get("/readyz")
		probe <- code
	}()
	time.Sleep(outage)
	if err := r.redis.Restart(); err != nil {
		t.Fatalf("restart redis: %v", err)
	}
	restarted := time.Now()
	t.Logf("redis restart: killed after %d acknowledged enqueues, back %s later; /readyz during the outage: %d",
		before, restarted.Sub(down).Round(time.Millisecond), <-probe)
	for _, w := range workers {
		eventually(t, 30*time.Second, w.name+" ready again", func() (bool, string) {
			code, body := w.get("/readyz")
			return code == http.StatusOK, body
		})
		t.Logf("redis restart: %s /readyz 200 again %s after the restart", w.name, time.Since(restarted).Round(time.Millisecond))
	}
	time.Sleep(4 * time.Second)
	stop()
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(abandoned) > 0 {
		t.Fatalf("enqueues never acknowledged: %v", abandoned)
	}
	for _, w := range workers {
		if w.exited() {
			t.Fatalf("%s exited after the restart: %v", w.name, w.err)
		}
	}

	keys := make([]dedup.Key, len(acked))
	for i, j := range acked {
		keys[i] = j.Key
	}
	settle := eventually(t, 4*time.Minute, "every acknowledged job done", r.settled(keys...))
	t.Logf("redis restart: %d jobs acknowledged, %d failed enqueue calls retried, %d lost replies caught as duplicates; settled %s after the load",
		len(acked), errs.Load(), lostAcks.Load(), settle.Round(time.Second))

	var payments, emails int
	var reruns []string
	for _, j := range acked {
		// A lost claim reply, a failed run or a lost completion: the record
		// says how often a handler was started, the downstream how often it acted.
		if rec := r.status(j.Key); rec.Attempts > 1 {
			calls := fmt.Sprintf("%d gateway calls", r.gw.Posts(j.Key.String()))
			if j.Task.Type() == tasks.TypeEmail {
				calls = fmt.Sprintf("%d messages", r.smtp.Count(tasks.MessageID(j.Key.String())))
			}
			reruns = append(reruns, fmt.Sprintf("%s (%d claims, %s)", j.Key, rec.Attempts, calls))
		}
		switch j.Task.Type() {
		case tasks.TypePayment:
			payments++
			if n := r.gw.Charges(j.Key.String()); n != 1 {
				t.Errorf("%s charged %d times, want 1", j.Key, n)
			}
		case tasks.TypeEmail:
			emails++
			if n := r.smtp.Count(tasks.MessageID(j.Key.String())); n != 1 {
				t.Errorf("%s delivered %d times, want 1", j.Key, n)
			}
		}
	}
	if r.gw.Total() != payments || r.smtp.Total() != emails {
		t.Errorf("downstream saw %d charges and %d emails for %d payments and %d emails", r.gw.Total(), r.smtp.Total(), payments, emails)
	}
	t.Logf("redis restart: %d jobs claimed more than once %v", len(reruns), reruns)
	if errs.Load() == 0 {
		t.Log("redis restart: no producer saw the outage (it fell between calls)")
	}
}
