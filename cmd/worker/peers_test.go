package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/peertest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

const intents = "/v1/payment_intents"

func stripeWorker(t *testing.T) (env, *peertest.StripePeer) {
	t.Helper()
	peer := peertest.NewStripePeer(t, peertest.StripeMock(t))
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_STRIPE_KEY"] = peertest.StripeMockKey
	cfg["ONCEQ_STRIPE_URL"] = peer.URL
	startWorker(t, cfg)
	return e, peer
}

// A payment through the worker and stripe-go reaches stripe-mock once, with
// the onceq key as Idempotency-Key; a second delivery and a second enqueue
// send nothing.
func TestStripePaymentOnce(t *testing.T) {
	e, peer := stripeWorker(t)
	j, _ := e.enqueued(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-stripe-1", Account: "pm_card_visa", Amount: 1999, Currency: "EUR"})))
	rec := e.waitState(t, j.Key, dedup.StatusDone)
	var c tasks.Charge
	if err := json.Unmarshal(rec.Result, &c); err != nil || !strings.HasPrefix(c.ChargeID, "pi_") || c.Status == "" ||
		c.Amount != 1999 || c.Currency != "EUR" {
		t.Fatalf("stored result %s; want the PaymentIntent's id and status", rec.Result)
	}
	if n := peer.Posts(intents, j.Key.String()); n != 1 || len(peer.Requests()) != 1 {
		t.Fatalf("stripe-mock got %d POSTs with Idempotency-Key %s, %d requests in all; want 1, 1", n, j.Key, len(peer.Requests()))
	}
	if got := peer.Requests()[0].Form.Get("metadata[onceq_payment_id]"); got != "pmt-stripe-1" {
		t.Errorf("metadata payment id = %q", got)
	}

	// At-least-once delivery hands the task over again: not sent again.
	info, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	done := e.waitTask(t, j.Queue, info.ID, asynq.TaskStateCompleted)
	if string(done.Result) != string(rec.Result) {
		t.Errorf("duplicate's result %s, want the stored %s", done.Result, rec.Result)
	}
	again, err := e.producer.Enqueue(context.Background(), j)
	if err != nil || again.Decision != dedup.Duplicate {
		t.Fatalf("second enqueue: %+v %v", again, err)
	}
	if n := len(peer.Requests()); n != 1 {
		t.Fatalf("stripe-mock got %d requests after the duplicates, want 1", n)
	}
}

// Stripe's rate limit and 5xx are retried by asynq under the same key; the
// PaymentIntent is created on the third POST and recorded once.
func TestStripeRateLimitRetriedWithSameKey(t *testing.T) {
	e, peer := stripeWorker(t)
	peer.FailNext(429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`)
	peer.FailNext(500, `{"error":{"type":"api_error","message":"Something went wrong on Stripe's end."}}`)
	j, _ := e.enqueued(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-retry-1", Account: "pm_card_visa", Amount: 700, Currency: "GBP"})))
	rec := e.waitState(t, j.Key, dedup.StatusDone)
	reqs := peer.Requests()
	if rec.Attempts != 3 || len(reqs) != 3 || peer.Posts(intents, j.Key.String()) != 3 {
		t.Fatalf("attempts %d, %d requests, %d with the key; want 3, 3, 3: %+v", rec.Attempts, len(reqs), peer.Posts(intents, j.Key.String()), reqs)
	}
	if reqs[0].Status != 429 || reqs[1].Status != 500 || reqs[2].Status != 200 {
		t.Errorf("answers %d, %d, %d; want 429, 500, 200", reqs[0].Status, reqs[1].Status, reqs[2].Status)
	}
}

// The issue that started this: a gateway answering as Stripe does,
// {"id": ...} with 200, was refused as "not a charge", retried and archived
// while the money had moved. It is one charge.
func TestGenericGatewayIDAnswerIsACharge(t *testing.T) {
	var posts atomic.Int64
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
	}))
	t.Cleanup(gw.Close)
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_GATEWAY_URL"] = gw.URL
	startWorker(t, cfg)

	j, o := e.enqueued(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-generic-1", Account: "acct-7", Amount: 100, Currency: "EUR"})))
	rec := e.waitState(t, j.Key, dedup.StatusDone)
	e.waitTask(t, j.Queue, o.TaskID, asynq.TaskStateCompleted)
	if rec.Attempts != 1 || posts.Load() != 1 || !strings.Contains(string(rec.Result), `"id":"ch_1"`) {
		t.Fatalf("attempts %d, %d POSTs, result %s; want 1, 1, ch_1", rec.Attempts, posts.Load(), rec.Result)
	}
}

// A declined card is archived at once, never retried, and both the task
// and the record say why in Stripe's words.
func TestStripeDeclineArchivedWithoutRetry(t *testing.T) {
	e, peer := stripeWorker(t)
	j, o := e.enqueued(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-declined-1", Account: "pm_card_visa_chargeDeclined", Amount: 500, Currency: "USD"})))
	archived := e.waitTask(t, j.Queue, o.TaskID, asynq.TaskStateArchived)
	if archived.Retried != 0 || !strings.Contains(archived.LastErr, "card_declined") || !strings.Contains(archived.LastErr, "generic_decline") {
		t.Fatalf("archived task: retried %d, last error %q; want 0 retries and Stripe's codes", archived.Retried, archived.LastErr)
	}
	rec := e.waitState(t, j.Key, dedup.StatusFailed)
	if rec.Attempts != 1 || !strings.Contains(rec.Error, "402 card_error card_declined") {
		t.Fatalf("record: attempts %d, error %q", rec.Attempts, rec.Error)
	}
	if n := peer.Posts(intents, j.Key.String()); n != 1 {
		t.Fatalf("stripe got %d POSTs for the declined payment, want 1", n)
	}
}

// Email through a real SMTP server (Mailpit, which keeps duplicates):
// delivered twice, it arrives once, with the Message-ID derived from the key.
func TestEmailThroughSMTPOnce(t *testing.T) {
	mp := peertest.StartMailpit(t, peertest.MailpitOptions{})
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_SMTP_ADDR"] = mp.SMTPAddr
	startWorker(t, cfg)

	j, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: "welcome-42", To: "ada@example.com", Subject: "Welcome", Body: "Hello Ada"}))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		info, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue), asynq.Retention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	for _, id := range ids {
		e.waitTask(t, j.Queue, id, asynq.TaskStateCompleted)
	}
	want := tasks.MessageID(j.Key.String())
	msgs := mp.Messages(t)
	if len(msgs) != 1 || mp.Count(t, want) != 1 {
		t.Fatalf("Mailpit has %d messages, %d with %s; want 1, 1: %+v", len(msgs), mp.Count(t, want), want, msgs)
	}
	if msgs[0].Subject != "Welcome" || msgs[0].To[0].Address != "ada@example.com" || msgs[0].From.Address != "onceq@localhost" {
		t.Errorf("Mailpit saw %+v", msgs[0])
	}
	if n := outboxCount(t, cfg["ONCEQ_OUTBOX_DIR"]); n != 0 {
		t.Errorf("%d messages went to the outbox with SMTP configured", n)
	}
}
