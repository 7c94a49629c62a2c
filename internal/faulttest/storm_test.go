package faulttest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/peertest"
	"github.com/onceq/onceq/tasks"
)

// A duplicate storm: three producer processes send every job several times,
// concurrently, while a plain asynq client delivers each job once more behind
// the producers' backs, and three workers consume. Each job's effect happens
// once, and the books balance: the producers enqueue one task per key and
// block the rest, and the workers acknowledge every extra delivery as a
// duplicate. It runs twice: against the counting gateway and SMTP server of
// this package, and through the real clients (stripe-go to stripe-mock,
// go-mail to Mailpit), counted at peers that deduplicate nothing.
func TestDuplicateStorm(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	t.Run("counting peers", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		storm(t, r, countingPeers{r})
	})
	t.Run("real clients", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		storm(t, r, newClientPeers(t))
	})
}

func storm(t *testing.T, r *rig, peers effectCounter) {
	const (
		payments  = 40
		emails    = 40
		producers = 3
		copies    = 3 // of each job, per producer
	)
	extra := peers.vars()
	extra["ONCEQ_LEASE"], extra["ONCEQ_CONCURRENCY"] = "4s", "8"
	vars := r.workerVars(extra)
	var workers []*worker
	for _, name := range []string{"worker-a", "worker-b", "worker-c"} {
		workers = append(workers, startWorker(t, name, vars))
	}

	type line struct {
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
		Key     string          `json:"idempotency_key,omitempty"`
	}
	var lines []line
	for i := range payments {
		p, _ := json.Marshal(tasks.Payment{PaymentID: fmt.Sprintf("storm-p-%d", i), Account: fmt.Sprintf("acct-storm-%d", i), Amount: int64(1000 + i), Currency: "EUR"})
		lines = append(lines, line{Type: tasks.TypePayment, Payload: p})
	}
	for i := range emails {
		e, _ := json.Marshal(tasks.Email{To: fmt.Sprintf("storm-%d@example.com", i), Subject: "storm", Body: "once"})
		lines = append(lines, line{Type: tasks.TypeEmail, Payload: e, Key: fmt.Sprintf("storm-e-%d", i)})
	}
	catalog, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]dedup.Job, len(lines))
	for i, l := range lines {
		j, err := catalog.Build(l.Type, l.Payload, l.Key, "")
		if err != nil {
			t.Fatal(err)
		}
		jobs[i] = j
	}

	_, producerBin := binaries(t)
	pvars := map[string]string{"ONCEQ_REDIS_URL": "redis://" + r.redis.Addr, "ONCEQ_ENV": "development"}
	type tally struct{ enqueued, blocked, failed int }
	results := make([]tally, producers)
	var wg sync.WaitGroup
	start := time.Now()
	for p := range producers {
		var in strings.Builder
		order := make([]int, 0, copies*len(lines))
		for range copies {
			for i := range lines {
				order = append(order, i)
			}
		}
		rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			b, _ := json.Marshal(lines[i])
			in.Write(append(b, '\n'))
		}
		wg.Go(func() {
			out, err := runProducer(producerBin, pvars, in.String(), "batch")
			if err != nil {
				t.Errorf("producer %d: %v\n%s", p, err, out)
				return
			}
			summary := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
			if _, err := fmt.Sscanf(summary, "batch: %d enqueued, %d blocked, %d failed",
				&results[p].enqueued, &results[p].blocked, &results[p].failed); err != nil {
				t.Errorf("producer %d summary %q: %v", p, summary, err)
			}
		})
	}
	// Deliveries the producers never see: a plain asynq client enqueuing each
	// job once more without its task id.
	for _, j := range jobs {
		r.redeliver(j)
	}
	raw := len(jobs)
	wg.Wait()
	if t.Failed() {
		return
	}

	keys := make([]dedup.Key, len(jobs))
	for i, j := range jobs {
		keys[i] = j.Key
	}
	settle := eventually(t, 3*time.Minute, "every job done", r.settled(keys...))

	var sum tally
	for _, x := range results {
		sum.enqueued += x.enqueued
		sum.blocked += x.blocked
		sum.failed += x.failed
	}
	sent := producers * copies * len(lines)
	var workerDups float64
	for _, w := range workers {
		workerDups += metricSum(w.metrics(), "onceq_dedup_decisions_total", map[string]string{"side": "worker", "outcome": "duplicate"})
	}
	t.Logf("storm: %d keys, %d sent by %d producers (%d enqueued, %d blocked, %d failed), %d raw redeliveries, %v worker-side duplicates; all done %s after the start (%s after the producers)",
		len(jobs), sent, producers, sum.enqueued, sum.blocked, sum.failed, raw, workerDups,
		time.Since(start).Round(time.Millisecond), settle.Round(time.Millisecond))
	// A raw delivery races the producers: where a worker claims it first,
	// every producer's send of that key is blocked and the raw delivery is
	// the one that runs. Either way a key is enqueued by the producers at
	// most once, and each producer enqueue meets exactly one extra delivery
	// at the workers: the raw one, or its own if the raw one ran first.
	if sum.enqueued > len(jobs) || sum.enqueued+sum.blocked != sent || sum.failed != 0 {
		t.Errorf("producers: %d enqueued, %d blocked, %d failed; want at most %d enqueued (one per key) and %d in all", sum.enqueued, sum.blocked, sum.failed, len(jobs), sent)
	}
	if int(workerDups) != sum.enqueued {
		t.Errorf("workers acknowledged %v duplicates, want %d (one per key the producers enqueued)", workerDups, sum.enqueued)
	}
	if blocked := sum.blocked + int(workerDups); blocked != sent+raw-len(jobs) {
		t.Errorf("blocked %d in all, want every send but one per key: %d", blocked, sent+raw-len(jobs))
	}
	for _, j := range jobs {
		switch j.Task.Type() {
		case tasks.TypePayment:
			if n := peers.charges(j.Key); n != 1 {
				t.Errorf("%s charged %d times, want 1", j.Key, n)
			}
		case tasks.TypeEmail:
			if n := peers.emails(j.Key); n != 1 {
				t.Errorf("%s delivered %d times, want 1", j.Key, n)
			}
		}
	}
	if p, e := peers.totals(); p != payments || e != emails {
		t.Errorf("downstream saw %d charges and %d emails, want %d and %d", p, e, payments, emails)
	}
}

// effectCounter counts effects where they land.
type effectCounter interface {
	vars() map[string]string // worker variables pointing at the peers
	charges(k dedup.Key) int
	emails(k dedup.Key) int
	totals() (charges, emails int)
}

// countingPeers are the rig's own gateway (charges it created) and
// SMTP server.
type countingPeers struct{ r *rig }

func (c countingPeers) vars() map[string]string { return map[string]string{} }
func (c countingPeers) charges(k dedup.Key) int { return c.r.gw.Charges(k.String()) }
func (c countingPeers) emails(k dedup.Key) int  { return c.r.smtp.Count(tasks.MessageID(k.String())) }
func (c countingPeers) totals() (int, int)      { return c.r.gw.Total(), c.r.smtp.Total() }

// clientPeers are stripe-mock behind a recording proxy and Mailpit: every
// POST and every message counts, since neither deduplicates anything.
type clientPeers struct {
	t      *testing.T
	stripe *peertest.StripePeer
	mail   *peertest.Mailpit
}

func newClientPeers(t *testing.T) clientPeers {
	return clientPeers{t: t, stripe: peertest.NewStripePeer(t, peertest.StripeMock(t)),
		mail: peertest.StartMailpit(t, peertest.MailpitOptions{})}
}

func (c clientPeers) vars() map[string]string {
	return map[string]string{"ONCEQ_GATEWAY_URL": "", "ONCEQ_STRIPE_KEY": peertest.StripeMockKey,
		"ONCEQ_STRIPE_URL": c.stripe.URL, "ONCEQ_SMTP_ADDR": c.mail.SMTPAddr}
}
func (c clientPeers) charges(k dedup.Key) int {
	return c.stripe.Posts("/v1/payment_intents", k.String())
}
func (c clientPeers) emails(k dedup.Key) int { return c.mail.Count(c.t, tasks.MessageID(k.String())) }
func (c clientPeers) totals() (int, int) {
	return len(c.stripe.Requests()), len(c.mail.Messages(c.t))
}
