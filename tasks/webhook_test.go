package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// fakeEnqueuer records Jobs and enqueues each key once, like the Producer.
type fakeEnqueuer struct {
	err  error
	mu   sync.Mutex
	jobs []dedup.Job
	seen map[string]bool
}

func (f *fakeEnqueuer) Enqueue(_ context.Context, j dedup.Job, _ ...asynq.Option) (dedup.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return dedup.Outcome{}, f.err
	}
	f.jobs = append(f.jobs, j)
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	d := dedup.Enqueued
	if f.seen[j.Key.String()] {
		d = dedup.Duplicate
	}
	f.seen[j.Key.String()] = true
	return dedup.Outcome{Decision: d, Key: j.Key.String(), TaskID: j.Key.String(), Queue: j.Queue}, nil
}

func userCreated(eventID string, data string) Webhook {
	return Webhook{Source: "auth0", EventID: eventID, Type: EventUserCreated, Data: json.RawMessage(data)}
}

const userData = `{"user_id":"u1","email":"ann@example.com","name":"Ann","plan":"pro"}`

func TestNewWebhook(t *testing.T) {
	t.Parallel()
	valid := userCreated("evt_1", userData)
	with := func(f func(*Webhook)) Webhook { w := valid; f(&w); return w }
	tests := []struct {
		name    string
		webhook Webhook
		idem    string
		wantKey string
		wantErr string
	}{
		{"source and event id", valid, "", "webhook:process/auth0:evt_1", ""},
		{"an Idempotency-Key never replaces the signed id", valid, "idem-9", "webhook:process/auth0:evt_1", ""},
		{"unknown type without data", with(func(w *Webhook) { w.Type, w.Data = "invoice.paid", nil }), "", "webhook:process/auth0:evt_1", ""},
		{"unknown type with any data", with(func(w *Webhook) { w.Type, w.Data = "invoice.paid", json.RawMessage(`[1]`) }), "", "webhook:process/auth0:evt_1", ""},
		// Data that lacks what the welcome email needs is still an event,
		// processed once with the reason recorded; only data of the wrong
		// JSON type is invalid.
		{"user.created without data", with(func(w *Webhook) { w.Data = nil }), "", "webhook:process/auth0:evt_1", ""},
		{"user.created with null data", with(func(w *Webhook) { w.Data = json.RawMessage(`null`) }), "", "webhook:process/auth0:evt_1", ""},
		{"user.created without user_id", with(func(w *Webhook) { w.Data = json.RawMessage(`{"email":"ann@example.com"}`) }), "", "webhook:process/auth0:evt_1", ""},
		{"user.created without email", with(func(w *Webhook) { w.Data = json.RawMessage(`{"user_id":"u1"}`) }), "", "webhook:process/auth0:evt_1", ""},
		{"user.created with a bad email", with(func(w *Webhook) { w.Data = json.RawMessage(`{"user_id":"u1","email":"ann"}`) }), "", "webhook:process/auth0:evt_1", ""},
		{"user.created name injects a header", with(func(w *Webhook) {
			w.Data = json.RawMessage(`{"user_id":"u1","email":"ann@example.com","name":"Ann\r\nBcc: eve@example.com"}`)
		}), "", "webhook:process/auth0:evt_1", ""},
		{"user.created data an array", with(func(w *Webhook) { w.Data = json.RawMessage(`[1,2]`) }), "", "", "user.created data"},
		{"user.created with user_id a number", with(func(w *Webhook) { w.Data = json.RawMessage(`{"user_id":5,"email":"ann@example.com"}`) }), "", "", "user_id"},
		{"source with upper case", with(func(w *Webhook) { w.Source = "Auth0" }), "", "", "source"},
		{"source too long", with(func(w *Webhook) { w.Source = strings.Repeat("a", 65) }), "", "", "source"},
		{"source with slash", with(func(w *Webhook) { w.Source = "a/b" }), "", "", "source"},
		{"empty source", with(func(w *Webhook) { w.Source = "" }), "", "", "source"},
		{"empty event id", with(func(w *Webhook) { w.EventID = "" }), "", "", "event_id is empty"},
		// Any id a sender may choose: one a key cannot hold is hashed.
		{"event id with space", with(func(w *Webhook) { w.EventID = "evt 1" }), "idem-9", "webhook:process/" + hashedID("auth0:evt 1"), ""},
		{"event id with brace", with(func(w *Webhook) { w.EventID = "{evt}" }), "", "webhook:process/" + hashedID("auth0:{evt}"), ""},
		{"empty type", with(func(w *Webhook) { w.Type = "" }), "", "", "type is empty"},
		{"data not JSON", with(func(w *Webhook) { w.Data = json.RawMessage(`{"a":`) }), "", "", "data"},
		{"user.created data in the sender's body", with(func(w *Webhook) {
			w.Data, w.Body = nil, json.RawMessage(`{"id":"evt_1","type":"user.created","extra":1,"data":`+userData+`}`)
		}), "", "webhook:process/auth0:evt_1", ""},
		{"user.created body data beside a decoded data:null", with(func(w *Webhook) {
			w.Data, w.Body = json.RawMessage(`null`), json.RawMessage(`{"data":`+userData+`}`)
		}), "", "webhook:process/auth0:evt_1", ""},
		{"a sender's body without a type", with(func(w *Webhook) { w.Type, w.Data, w.Body = "", nil, json.RawMessage(`{"test":1}`) }), "", "webhook:process/auth0:evt_1", ""},
		{"user.created body without data", with(func(w *Webhook) { w.Data, w.Body = nil, json.RawMessage(`{"id":"evt_1"}`) }), "", "webhook:process/auth0:evt_1", ""},
		{"user.created body data of the wrong type", with(func(w *Webhook) {
			w.Data, w.Body = nil, json.RawMessage(`{"data":{"email":7}}`)
		}), "", "", "email"},
		{"unknown type, any body", with(func(w *Webhook) { w.Type, w.Data, w.Body = "push", nil, json.RawMessage(`{"ref":"x"}`) }), "", "webhook:process/auth0:evt_1", ""},
		{"body an array", with(func(w *Webhook) { w.Body = json.RawMessage(`[1]`) }), "", "", "JSON object"},
		{"body not JSON", with(func(w *Webhook) { w.Body = json.RawMessage(`{"a":`) }), "", "", "JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := buildJob(Webhooks, tt.webhook, tt.idem)
			if tt.wantErr != "" {
				if !errors.Is(err, dedup.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewWebhook = %v; want dedup.ErrInvalid mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewWebhook: %v", err)
			}
			checkJob(t, j, TypeWebhook, "default")
			if j.Key.String() != tt.wantKey {
				t.Errorf("Key = %v, want %s", j.Key, tt.wantKey)
			}
		})
	}
}

// hashedID is the key id dedup gives a caller id a key cannot hold as
// given (Spec.HashID): "~k" and its hex SHA-256.
func hashedID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "~k" + hex.EncodeToString(sum[:])
}

func TestWebhookKeys(t *testing.T) {
	t.Parallel()
	must := mustJob(t)
	a := must(NewWebhook(userCreated("evt_1", userData)))
	redelivered := userCreated("evt_1", `{ "plan":"pro", "name":"Ann", "email":"ann@example.com", "user_id":"u1" }`)
	redelivered.Attempt, redelivered.ReceivedAt = 3, "2025-01-01T00:00:00Z"
	b := must(NewWebhook(redelivered))
	if a.Key != b.Key || a.Fingerprint != b.Fingerprint {
		t.Errorf("a redelivery (attempt, received_at, data spelling) changed key %v->%v or fingerprint", a.Key, b.Key)
	}
	changed := must(NewWebhook(userCreated("evt_1", `{"user_id":"u2","email":"bo@example.com"}`)))
	if changed.Key != a.Key || changed.Fingerprint == a.Fingerprint {
		t.Errorf("same event id, other data: key %v vs %v, fingerprint equal %v; want one key, a mismatch", changed.Key, a.Key, changed.Fingerprint == a.Fingerprint)
	}
	if c := must(NewWebhook(userCreated("evt_2", userData))); c.Key == a.Key {
		t.Errorf("another event id kept key %v", c.Key)
	}
}

func TestWebhookHandlerRoutesUserCreated(t *testing.T) {
	t.Parallel()
	enq := &fakeEnqueuer{}
	h := WebhookHandler{Enqueuer: enq}
	must := mustJob(t)
	first := must(NewWebhook(userCreated("evt_1", userData)))
	redelivered := userCreated("evt_1", userData)
	redelivered.Attempt = 2
	second := must(NewWebhook(redelivered))

	res, err := h.process(context.Background(), first.Task)
	if err != nil {
		t.Fatal(err)
	}
	if res != (WebhookResult{Processed: "evt_1", Routed: TypeEmail, Outcome: dedup.Enqueued, TaskID: "email:send/welcome-auth0:evt_1"}) {
		t.Errorf("result = %+v", res)
	}
	if len(enq.jobs) != 1 {
		t.Fatalf("enqueued %d jobs, want 1", len(enq.jobs))
	}
	j := enq.jobs[0]
	checkJob(t, j, TypeEmail, "default")
	var e Email
	if err := json.Unmarshal(j.Task.Payload(), &e); err != nil {
		t.Fatal(err)
	}
	if e.ID != "welcome-auth0:evt_1" || e.To != "ann@example.com" || e.Subject != "Welcome, Ann" || !strings.Contains(e.Body, "Hi Ann,") {
		t.Errorf("welcome email = %+v", e)
	}

	// The same event again, even under another idempotency key, welcomes once.
	res, err = h.process(context.Background(), second.Task)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != dedup.Duplicate || len(enq.jobs) != 2 || enq.jobs[1].Key != j.Key {
		t.Errorf("redelivery: result %+v, jobs %d; want the same email key, a duplicate", res, len(enq.jobs))
	}
	if err := h.ProcessTask(context.Background(), first.Task); err != nil {
		t.Errorf("ProcessTask: %v", err)
	}
}

func TestWebhookHandlerIgnoresUnknownTypes(t *testing.T) {
	t.Parallel()
	enq := &fakeEnqueuer{}
	w := userCreated("evt_5", `{"anything":true}`)
	w.Type = "invoice.paid"
	res, err := WebhookHandler{Enqueuer: enq}.process(context.Background(), mustJob(t)(NewWebhook(w)).Task)
	if err != nil || res != (WebhookResult{Processed: "evt_5", Ignored: true, Type: "invoice.paid"}) {
		t.Fatalf("unknown type: %+v, %v; want ignored, nil", res, err)
	}
	if len(enq.jobs) != 0 {
		t.Errorf("enqueued %d jobs for an unknown type", len(enq.jobs))
	}
}

func TestWebhookHandlerFailures(t *testing.T) {
	t.Parallel()
	// Built past the constructor, which refuses most of them: the handler's
	// guard must still archive them.
	task := func(data string) *asynq.Task {
		w := userCreated("evt_1", data)
		if data == "" {
			w.Data = nil
		}
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		return asynq.NewTask(TypeWebhook, b)
	}
	tests := []struct {
		name string
		enq  *fakeEnqueuer
		task *asynq.Task
		skip bool
	}{
		{"data is an array", &fakeEnqueuer{}, task(`[1,2]`), true},
		{"user_id a number", &fakeEnqueuer{}, task(`{"user_id":5,"email":"ann@example.com"}`), true},
		{"unknown payload field", &fakeEnqueuer{}, asynq.NewTask(TypeWebhook, []byte(`{"source":"a","event_id":"e","type":"t","data":null,"extra":1}`)), true},
		{"bad source past the constructor", &fakeEnqueuer{}, asynq.NewTask(TypeWebhook, []byte(`{"source":"A B","event_id":"e","type":"t","data":null}`)), true},
		{"enqueue fails", &fakeEnqueuer{err: errors.New("redis down")}, task(userData), false},
	}
	for _, tt := range tests {
		err := WebhookHandler{Enqueuer: tt.enq}.ProcessTask(context.Background(), tt.task)
		if err == nil || errors.Is(err, asynq.SkipRetry) != tt.skip {
			t.Errorf("%s: err = %v, want an error with SkipRetry = %v", tt.name, err, tt.skip)
		}
		if len(tt.enq.jobs) != 0 {
			t.Errorf("%s: enqueued %d jobs", tt.name, len(tt.enq.jobs))
		}
	}
}

// An event whose data makes no welcome email is processed, once, and its
// result says why nothing followed: not refused, not retried.
func TestWebhookHandlerSkipsWhatItCannotFollowUp(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, data, want string }{
		{"no data", ``, "skipped: no data"},
		{"null data", `null`, "skipped: no data"},
		{"the seed's event: a name, no email", `{"name":"Alice"}`, "skipped: no email"},
		{"no email", `{"user_id":"u1","name":"Ann"}`, "skipped: no email"},
		{"bad email", `{"user_id":"u1","email":"ann"}`, "skipped: email not usable"},
		{"name injects a header", `{"user_id":"u1","email":"ann@example.com","name":"Ann\r\nBcc: eve@example.com"}`, "skipped: email not usable"},
	} {
		w := userCreated("evt_123", tt.data)
		if tt.data == "" {
			w.Data = nil
		}
		enq := &fakeEnqueuer{}
		res, err := WebhookHandler{Enqueuer: enq}.process(context.Background(), mustJob(t)(NewWebhook(w)).Task)
		if err != nil || res.Processed != "evt_123" || !strings.HasPrefix(res.WelcomeEmail, tt.want) || res.Routed != "" {
			t.Errorf("%s: %+v, %v; want processed evt_123, welcome_email %q…", tt.name, res, err, tt.want)
		}
		if len(enq.jobs) != 0 {
			t.Errorf("%s: enqueued %d jobs", tt.name, len(enq.jobs))
		}
	}
	b, err := json.Marshal(WebhookResult{Processed: "evt_123", WelcomeEmail: "skipped: no email"})
	if err != nil || string(b) != `{"processed":"evt_123","welcome_email":"skipped: no email"}` {
		t.Errorf("result JSON = %s, %v", b, err)
	}
}

// One event, whether its data came inside the sender's body (HTTP) or as
// Data (a batch line), is one job with one fingerprint: not a conflict.
func TestWebhookFingerprintWhereverTheDataCame(t *testing.T) {
	t.Parallel()
	must := mustJob(t)
	line := must(NewWebhook(userCreated("evt_9", userData)))
	body := userCreated("evt_9", "")
	body.Data = nil
	body.Body = json.RawMessage(`{"id":"evt_9","type":"user.created","pending_webhooks":3,"data":` + userData + `}`)
	http := must(NewWebhook(body))
	if http.Key != line.Key || http.Fingerprint != line.Fingerprint {
		t.Fatalf("HTTP %v %s, batch line %v %s: want one key and fingerprint", http.Key, http.Fingerprint, line.Key, line.Fingerprint)
	}
	body.Body = json.RawMessage(`{"id":"evt_9","type":"user.created","data":{"user_id":"u2","email":"bo@example.com"}}`)
	if other := must(NewWebhook(body)); other.Fingerprint == line.Fingerprint {
		t.Fatal("other data inside the body kept the fingerprint")
	}
}
