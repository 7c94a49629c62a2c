package dedup_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// Scan asks for a file to be scanned.
type Scan struct {
	Path string `json:"path"`
}

// A time window throttles an identical repeat for a while from first
// acceptance, whatever became of the job: the same scan within 30 s is
// Throttled with a RetryAfter, never a duplicate; another file is not held
// up.
func ExampleSpec_window() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	scans := dedup.Define(dedup.Spec[Scan]{Type: "scan:file", Window: 30 * time.Second})
	for _, path := range []string{"inbox/a.pdf", "inbox/a.pdf", "inbox/b.pdf"} {
		out, err := producer.Enqueue(ctx, scans.Job(Scan{Path: path}))
		if err != nil {
			panic(err)
		}
		fmt.Println(path, out.Decision, out.RetryAfter.Round(time.Second))
	}
	// Output:
	// inbox/a.pdf enqueued 0s
	// inbox/a.pdf throttled 30s
	// inbox/b.pdf enqueued 0s
}

// A rate rule is a window on a key of its own: a second payment of the same
// amount to the same account within a minute is Throttled, though its
// payment id is new. Rules are taken only by accepted jobs.
func ExampleRule() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	payments := dedup.Define(dedup.Spec[Payment]{
		Type: "payment:charge",
		ID:   func(p Payment) string { return p.PaymentID },
		Rules: func(p Payment) ([]*dedup.Rule, error) {
			same := p.Account + ":" + p.Currency + ":" + strconv.FormatInt(p.Amount, 10)
			return []*dedup.Rule{{Key: dedup.Key{Namespace: "payment:rate", ID: same}, Window: time.Minute}}, nil
		},
	})
	for _, p := range []Payment{
		{PaymentID: "pmt-1", Account: "acct-1", Amount: 4200, Currency: "EUR"},
		{PaymentID: "pmt-2", Account: "acct-1", Amount: 4200, Currency: "EUR"},
		{PaymentID: "pmt-3", Account: "acct-1", Amount: 1000, Currency: "EUR"},
	} {
		out, err := producer.Enqueue(ctx, payments.Job(p))
		if err != nil {
			panic(err)
		}
		fmt.Println(out.Key, out.Decision)
		if out.Decision == dedup.Throttled {
			fmt.Printf("  retry in %v: %s\n", out.RetryAfter.Round(time.Second), out.Reason)
		}
	}
	// Output:
	// payment:charge/pmt-1 enqueued
	// payment:charge/pmt-2 throttled
	//   retry in 1m0s: payment:rate/acct-1:EUR:4200 is inside its 1m0s window
	// payment:charge/pmt-3 enqueued
}
