package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
)

// fakeGateway charges once per key and answers a key it has seen with the
// first charge, replayed, as a gateway with Idempotency-Key semantics does.
// The HTTP client and the built-in gateway are tested in tasks/gateway.
type fakeGateway struct {
	mu      sync.Mutex
	charges map[string]Charge
}

func (f *fakeGateway) Charge(ctx context.Context, key string, p Payment) (Charge, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.charges[key]; ok {
		c.Replayed = true
		return c, nil
	}
	if f.charges == nil {
		f.charges = map[string]Charge{}
	}
	c := Charge{ChargeID: fmt.Sprintf("ch_%d", len(f.charges)+1), Status: "succeeded", Amount: p.Amount, Currency: p.Currency}
	f.charges[key] = c
	return c, nil
}

// Charges is how many charges the gateway made for key: 0 or 1.
func (f *fakeGateway) Charges(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.charges[key]; ok {
		return 1
	}
	return 0
}

// Total is how many charges the gateway made.
func (f *fakeGateway) Total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.charges)
}

func validPayment() Payment {
	return Payment{PaymentID: "pay_1", Account: "acct_42", Amount: 500, Currency: "EUR", Description: "order 7"}
}

func TestNewPayment(t *testing.T) {
	t.Parallel()
	with := func(f func(*Payment)) Payment { p := validPayment(); f(&p); return p }
	tests := []struct {
		name     string
		payment  Payment
		wantRate string
		wantErr  string
	}{
		{"valid", validPayment(), "payment:rate/acct_42:EUR:500", ""},
		{"max amount", with(func(p *Payment) { p.Amount = MaxAmount }), "payment:rate/acct_42:EUR:1000000000000", ""},
		{"account with space is hashed", with(func(p *Payment) { p.Account = "ACME Corp" }), "payment:rate/~k", ""},
		{"account with brace is hashed", with(func(p *Payment) { p.Account = "a{b}" }), "payment:rate/~k", ""},
		{"empty payment id", with(func(p *Payment) { p.PaymentID = "" }), "", "payment_id"},
		{"payment id with brace", with(func(p *Payment) { p.PaymentID = "p{1}" }), "", "payment_id"},
		{"empty account", with(func(p *Payment) { p.Account = "" }), "", "account is empty"},
		{"account with newline", with(func(p *Payment) { p.Account = "a\nb" }), "", "printable"},
		{"zero amount", with(func(p *Payment) { p.Amount = 0 }), "", "amount 0"},
		{"negative amount", with(func(p *Payment) { p.Amount = -5 }), "", "amount -5"},
		{"amount over max", with(func(p *Payment) { p.Amount = MaxAmount + 1 }), "", "amount"},
		{"lowercase currency", with(func(p *Payment) { p.Currency = "eur" }), "", "currency"},
		{"four letters", with(func(p *Payment) { p.Currency = "EURO" }), "", "currency"},
		{"two letters", with(func(p *Payment) { p.Currency = "EU" }), "", "currency"},
		{"description too long", with(func(p *Payment) { p.Description = strings.Repeat("d", 1025) }), "", "description"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := testenv.Job(Payments.Job(tt.payment))
			if tt.wantErr != "" {
				if !errors.Is(err, dedup.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewPayment = %v; want dedup.ErrInvalid mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPayment: %v", err)
			}
			checkJob(t, j, TypePayment, "critical")
			if j.Key.String() != "payment:charge/"+tt.payment.PaymentID {
				t.Errorf("Key = %v, want payment:charge/%s", j.Key, tt.payment.PaymentID)
			}
			if j.MaxRetry != PaymentMaxRetry || len(j.Rules) != 1 {
				t.Fatalf("MaxRetry = %d, Rules = %v; want %d and the rate rule alone", j.MaxRetry, j.Rules, PaymentMaxRetry)
			}
			if j.Rules[0] == nil || !strings.HasPrefix(j.Rules[0].Key.String(), tt.wantRate) || j.Rules[0].Window != DefaultPaymentRateWindow {
				t.Fatalf("Rate = %+v, want key %s... for %v", j.Rules[0], tt.wantRate, DefaultPaymentRateWindow)
			}
			if _, err := dedup.ParseKey(j.Rules[0].Key.String()); err != nil {
				t.Errorf("rate key %q is not a valid key: %v", j.Rules[0].Key, err)
			}
		})
	}
}

func TestPaymentKeys(t *testing.T) {
	t.Parallel()
	must := mustJob(t)
	a := must(testenv.Job(Payments.Job(validPayment())))
	more := validPayment()
	more.Amount = 501
	b := must(testenv.Job(Payments.Job(more)))
	if a.Key != b.Key || a.Fingerprint == b.Fingerprint || a.Rules[0].Key == b.Rules[0].Key {
		t.Errorf("same payment id, other amount: keys %v/%v fps equal=%v rates %v/%v; want one key, two fingerprints, two rate keys",
			a.Key, b.Key, a.Fingerprint == b.Fingerprint, a.Rules[0].Key, b.Rules[0].Key)
	}
	again := validPayment()
	again.PaymentID = "pay_2"
	c := must(testenv.Job(Payments.Job(again)))
	if c.Key == a.Key || c.Rules[0].Key != a.Rules[0].Key {
		t.Errorf("other payment id, same charge: keys %v/%v rates %v/%v; want two keys, one rate key", a.Key, c.Key, a.Rules[0].Key, c.Rules[0].Key)
	}
	spaced := validPayment()
	spaced.Account = "ACME Corp"
	other := validPayment()
	other.Account = "ACME Inc"
	if must(testenv.Job(Payments.Job(spaced))).Rules[0].Key == must(testenv.Job(Payments.Job(other))).Rules[0].Key {
		t.Errorf("two hashed accounts share a rate key")
	}
}

func TestPaymentHandler(t *testing.T) {
	t.Parallel()
	gw := &fakeGateway{}
	h := PaymentHandler{Gateway: gw}
	job := mustJob(t)(testenv.Job(Payments.Job(validPayment())))

	first, err := h.process(context.Background(), job.Task)
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	// A redelivery (crash after the charge, before Complete): no second charge.
	second, err := h.process(context.Background(), job.Task)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if first.ChargeID == "" || second.ChargeID != first.ChargeID || first.Replayed || !second.Replayed {
		t.Errorf("charges %+v then %+v; want one charge id, the second replayed", first, second)
	}
	if first.Amount != 500 || first.Currency != "EUR" || first.Status != "succeeded" {
		t.Errorf("charge = %+v", first)
	}
	if n := gw.Charges("payment:charge/pay_1"); n != 1 || gw.Total() != 1 {
		t.Errorf("gateway: %d charges for the key, %d total; want 1, 1", n, gw.Total())
	}

	// The key the middleware claimed is the one sent downstream.
	claimed, _ := dedup.NewKey(TypePayment, "claimed")
	if err := behindMiddleware(t, h).ProcessTask(context.Background(), keyed(job.Task, claimed)); err != nil {
		t.Fatal(err)
	}
	if gw.Charges("payment:charge/claimed") != 1 || gw.Total() != 2 {
		t.Errorf("the claimed key was not used as Idempotency-Key")
	}
	if err := h.ProcessTask(context.Background(), job.Task); err != nil || gw.Total() != 2 {
		t.Errorf("ProcessTask = %v with %d charges; want nil, 2", err, gw.Total())
	}

	bad := []*asynq.Task{
		asynq.NewTask(TypePayment, []byte(`{"payment_id":"p","account":"a","amount":1.5,"currency":"EUR"}`)),
		asynq.NewTask(TypePayment, []byte(`{"payment_id":"p","account":"a","amount":0,"currency":"EUR"}`)),
		asynq.NewTask(TypePayment, []byte(`{"payment_id":"p","account":"a","amount":1,"currency":"EUR","tip":5}`)),
	}
	for _, task := range bad {
		if err := h.ProcessTask(context.Background(), task); !errors.Is(err, asynq.SkipRetry) {
			t.Errorf("ProcessTask(%s) = %v, want SkipRetry", task.Payload(), err)
		}
	}
	if gw.Total() != 2 {
		t.Errorf("bad payloads reached the gateway: %d charges", gw.Total())
	}
}
