package tasks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

func payment(t *testing.T, id, account string, amount int64) dedup.Job {
	t.Helper()
	return mustJob(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: id, Account: account, Amount: amount, Currency: "EUR"})))
}

// A payment id reused with other content is a conflict, not a duplicate:
// the caller never gets the other payment's state or result, and the
// refused job leaves no rate window on its account and amount.
func TestConflictIsNotADuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, store, d := newProducer(t, rdb)
	first := payment(t, "pmt-20260628-001", "acct-42", 12500)
	enqueue(t, p, first, dedup.Enqueued)
	c, err := store.Claim(ctx, first.Key, first.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatal(c, err)
	}
	if err := store.Complete(ctx, c.Hold, []byte(`{"charge_id":"ch_1"}`), 0); err != nil {
		t.Fatal(err)
	}

	reused := enqueue(t, p, payment(t, "pmt-20260628-001", "acct-evil", 999999), dedup.Conflict)
	if len(reused.Result) != 0 || reused.State == dedup.StatusDone || !strings.Contains(reused.Reason, "other content") {
		t.Fatalf("conflict carries the other job's outcome: %+v", reused)
	}
	if last := d.got[len(d.got)-1]; last.Outcome != "conflict" {
		t.Fatalf("observed %+v, want a conflict decision", last)
	}
	// The genuine payment on the refused account and amount goes through.
	enqueue(t, p, payment(t, "pmt-20260628-002", "acct-evil", 999999), dedup.Enqueued)
	// The same content again is still a duplicate, with its result.
	if dup := enqueue(t, p, first, dedup.Duplicate); string(dup.Result) != `{"charge_id":"ch_1"}` {
		t.Fatalf("duplicate %+v", dup)
	}
}

// A refused duplicate takes no window: resubmitting an accepted payment
// after its rate window ended must not re-arm the window against the next
// genuine payment on that account and amount. On miniredis so time can jump.
func TestRefusedDuplicateTakesNoWindow(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	p, _, _ := newProducer(t, rdb)
	enqueue(t, p, payment(t, "pmt-1", "acct-1", 4200), dedup.Enqueued)
	mr.FastForward(tasks.DefaultPaymentRateWindow + time.Second)
	enqueue(t, p, payment(t, "pmt-1", "acct-1", 4200), dedup.Duplicate)
	enqueue(t, p, payment(t, "pmt-2", "acct-1", 4200), dedup.Enqueued)
}

// A job refused by its second rule gives back what its first rule took.
func TestRefusedByWindowGivesBackRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, store, _ := newProducer(t, rdb)
	j := payment(t, "pmt-w", "acct-w", 7)
	rate := j.Rules[0]
	j.Rules = append(j.Rules, &dedup.Rule{Key: dedup.Key{Namespace: "test_window", ID: "w"}, Window: time.Minute})
	if r, err := store.Reserve(ctx, j.Rules[1].Key, time.Minute, "someone-else"); err != nil || !r.Reserved {
		t.Fatal(r, err)
	}
	enqueue(t, p, j, dedup.Throttled)
	if r, err := store.Reserve(ctx, rate.Key, time.Minute, "probe"); err != nil || !r.Reserved {
		t.Fatalf("rate window left behind by a refused job: %+v %v", r, err)
	}
}
