package tasks

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/internal/testenv"
)

// incarnation is task t as the producer sends the n-th incarnation of its key.
func incarnation(t *asynq.Task, n string) *asynq.Task {
	h := map[string]string{HeaderIncarnation: n}
	maps.Copy(h, t.Headers())
	return asynq.NewTaskWithHeaders(t.Type(), t.Payload(), h)
}

// The next incarnation of a payment is a new request to the gateway (its
// Idempotency-Key is key#2), and its retries replay it.
func TestPaymentIncarnationIdempotencyKey(t *testing.T) {
	t.Parallel()
	gw := &fakeGateway{}
	h := PaymentHandler{Gateway: gw}
	job := mustJob(t)(testenv.Job(Payments.Job(validPayment())))
	second := incarnation(job.Task, "2")
	for _, task := range []*asynq.Task{job.Task, second, second} {
		if _, err := h.process(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	if gw.Charges("payment:charge/pay_1") != 1 || gw.Charges("payment:charge/pay_1#2") != 1 || gw.Total() != 2 {
		t.Errorf("gateway: %d, %d charges under key and key#2, %d total; want 1, 1, 2",
			gw.Charges("payment:charge/pay_1"), gw.Charges("payment:charge/pay_1#2"), gw.Total())
	}
}

func TestEmailIncarnationMessageID(t *testing.T) {
	t.Parallel()
	mailer := &fakeMailer{}
	h := EmailHandler{Mailer: mailer, From: "onceq@example.com"}
	job := mustJob(t)(testenv.Job(Emails.Job(Email{ID: "welcome-1", To: "bob@example.com", Subject: "Hi", Body: "hello"})))
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

func TestSMSIncarnationKey(t *testing.T) {
	t.Parallel()
	sender := &fakeSMS{}
	h := SMSHandler{Sender: sender}
	j := mustJob(t)(newJob(SMSes.Job(SMS{ID: "otp-1", To: "+4915112345678", Body: "hi"})))
	first, err := h.process(context.Background(), j.Task)
	if err != nil {
		t.Fatal(err)
	}
	next, err := h.process(context.Background(), incarnation(j.Task, "2"))
	if err != nil {
		t.Fatal(err)
	}
	if first.MessageID == next.MessageID || !slices.Equal(sender.keys, []string{"sms:send/otp-1", "sms:send/otp-1#2"}) {
		t.Errorf("incarnations 1 and 2: messages %s, %s under keys %q; want two, under key and key#2", first.MessageID, next.MessageID, sender.keys)
	}
}
