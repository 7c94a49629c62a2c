package tasks

import (
	"context"
	"errors"
	"maps"
	"net/http/httptest"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// incarnation is task t as the producer sends the n-th incarnation of its key.
func incarnation(t *asynq.Task, n string) *asynq.Task {
	h := map[string]string{dedup.HeaderIncarnation: n}
	maps.Copy(h, t.Headers())
	return asynq.NewTaskWithHeaders(t.Type(), t.Payload(), h)
}

func TestTaskKeyIncarnation(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"source":"s","event_id":"e","type":"t","data":null}`)
	plain := asynq.NewTask(TypeWebhook, payload)
	claimed, _ := dedup.NewKey(TypeWebhook, "claimed")
	inMW := dedup.WithIncarnation(dedup.WithKey(context.Background(), claimed), 3)
	for _, tt := range []struct {
		name string
		ctx  context.Context
		task *asynq.Task
		want string
	}{
		{"the middleware's incarnation", inMW, incarnation(plain, "5"), "webhook:process/claimed#3"},
		{"the middleware's key, the header's incarnation", dedup.WithKey(context.Background(), claimed), incarnation(plain, "4"),
			"webhook:process/claimed#4"},
		{"outside the middleware, from the header", context.Background(), incarnation(plain, "2"), "webhook:process/s:e#2"},
		{"no header: the first", context.Background(), plain, "webhook:process/s:e"},
	} {
		if got, err := taskKey(tt.ctx, tt.task, "s:e", nil); err != nil || got != tt.want {
			t.Errorf("%s: taskKey = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	_, err := taskKey(context.Background(), incarnation(plain, "0"), "s:e", nil)
	if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, ErrInvalid) || !errors.Is(err, dedup.ErrBadIncarnation) {
		t.Errorf("a garbled incarnation: %v, want a skip-retry ErrInvalid", err)
	}
}

// The next incarnation of a payment is a new request to the gateway (its
// Idempotency-Key is key#2), and its retries replay it.
func TestPaymentIncarnationIdempotencyKey(t *testing.T) {
	t.Parallel()
	ledger := &Ledger{Token: "tok"}
	srv := httptest.NewServer(ledger)
	t.Cleanup(srv.Close)
	h := PaymentHandler{Gateway: &GatewayClient{URL: srv.URL, Token: "tok"}}
	job := mustJob(t)(NewPayment(validPayment()))
	second := incarnation(job.Task, "2")
	for _, task := range []*asynq.Task{job.Task, second, second} {
		if _, err := h.process(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	if ledger.Charges("payment:charge/pay_1") != 1 || ledger.Charges("payment:charge/pay_1#2") != 1 || ledger.Total() != 2 {
		t.Errorf("ledger: %d, %d charges under key and key#2, %d total; want 1, 1, 2",
			ledger.Charges("payment:charge/pay_1"), ledger.Charges("payment:charge/pay_1#2"), ledger.Total())
	}
}

func TestEmailIncarnationMessageID(t *testing.T) {
	t.Parallel()
	mailer := &fakeMailer{}
	h := EmailHandler{Mailer: mailer, From: "onceq@example.com"}
	job := mustJob(t)(NewEmail(Email{ID: "welcome-1", To: "bob@example.com", Subject: "Hi", Body: "hello"}))
	first, err := h.process(context.Background(), job.Task)
	if err != nil {
		t.Fatal(err)
	}
	next, err := h.process(context.Background(), incarnation(job.Task, "2"))
	if err != nil {
		t.Fatal(err)
	}
	if first.MessageID != MessageID("email:send/welcome-1") || next.MessageID != MessageID("email:send/welcome-1#2") {
		t.Errorf("Message-IDs %s, %s; want those of key and key#2", first.MessageID, next.MessageID)
	}
}

func TestSMSIncarnationFile(t *testing.T) {
	t.Parallel()
	h := SMSHandler{Dir: t.TempDir()}
	j := mustJob(t)(SMSes.Job(SMS{ID: "otp-1", To: "+4915112345678", Body: "hi"}, "", Windows{}))
	first, err := h.process(context.Background(), j.Task)
	if err != nil {
		t.Fatal(err)
	}
	next, err := h.process(context.Background(), incarnation(j.Task, "2"))
	if err != nil {
		t.Fatal(err)
	}
	if first.File == next.File || first.MessageID == next.MessageID {
		t.Errorf("incarnations 1 and 2 share the outbox message %s", first.File)
	}
}
