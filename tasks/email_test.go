package tasks

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
)

func TestNewEmail(t *testing.T) {
	t.Parallel()
	valid := Email{To: "Bob <bob@example.com>", Subject: "Hello", Body: "Hi Bob"}
	with := func(f func(*Email)) Email { e := valid; f(&e); return e }
	tests := []struct {
		name    string
		email   Email
		wantErr string // "" for success
	}{
		{"valid", valid, ""},
		{"valid with id and trace", with(func(e *Email) { e.ID, e.TraceID = "welcome-1", "t-1" }), ""},
		{"subject at limit", with(func(e *Email) { e.Subject = strings.Repeat("s", MaxSubjectBytes) }), ""},
		{"empty to", with(func(e *Email) { e.To = "" }), "to is empty"},
		{"bad to", with(func(e *Email) { e.To = "not an address" }), "to "},
		{"two recipients", with(func(e *Email) { e.To = "a@example.com, b@example.com" }), "to "},
		{"to injects header", with(func(e *Email) { e.To = "bob@example.com\r\nBcc: eve@example.com" }), "CR or LF"},
		{"subject injects header", with(func(e *Email) { e.Subject = "hi\r\nBcc: eve@example.com" }), "CR or LF"},
		{"subject with bare LF", with(func(e *Email) { e.Subject = "hi\nthere" }), "CR or LF"},
		{"subject too long", with(func(e *Email) { e.Subject = strings.Repeat("s", MaxSubjectBytes+1) }), "over 998"},
		{"body too long", with(func(e *Email) { e.Body = strings.Repeat("b", MaxBodyBytes+1) }), "body is"},
		{"invalid UTF-8", with(func(e *Email) { e.Body = "\xff" }), "UTF-8"},
		{"subject only", with(func(e *Email) { e.Body = "" }), ""},
		{"body only", with(func(e *Email) { e.Subject = "" }), ""},
		{"neither subject nor body", with(func(e *Email) { e.Subject, e.Body = "", "" }), "subject and body are both empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := testenv.Job(Emails.Job(tt.email))
			if tt.wantErr != "" {
				if !errors.Is(err, dedup.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewEmail = %v; want dedup.ErrInvalid mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewEmail: %v", err)
			}
			checkJob(t, j, TypeEmail, "default")
		})
	}
}

// checkJob asserts what every constructor guarantees.
// fakeMailer records what the email handler hands its Mailer. Recipients
// starting with "reject" are refused for good, "busy" for now. The adapters
// are tested in tasks/smtp (against Mailpit) and tasks/outbox.
type fakeMailer struct {
	mu   sync.Mutex
	msgs []Message
}

func (f *fakeMailer) Send(ctx context.Context, m Message) error {
	switch {
	case strings.HasPrefix(m.To, "reject"):
		return fmt.Errorf("fake: 550 no such user: %w", ErrRejected)
	case strings.HasPrefix(m.To, "busy"):
		return errors.New("fake: 451 try again later")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, m)
	return nil
}

func (f *fakeMailer) Messages() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.msgs...)
}

func checkJob(t *testing.T, j dedup.Job, typ, queue string) {
	t.Helper()
	if j.Task == nil || j.Task.Type() != typ {
		t.Fatalf("task = %v, want type %s", j.Task, typ)
	}
	unique := DefaultUniqueWindow
	if typ == TypeScan {
		unique = DefaultFileScanWindow // a scan's unique window is its scan window
	}
	if j.Queue != queue || j.Unique != unique || j.Key.Namespace != typ || j.Fingerprint == "" {
		t.Errorf("job queue=%q unique=%v key=%v fp=%q; want %s, %v, namespace %s, a fingerprint",
			j.Queue, j.Unique, j.Key, j.Fingerprint, queue, unique, typ)
	}
	h := j.Task.Headers()
	if h[HeaderKey] != j.Key.String() || h[HeaderFingerprint] != j.Fingerprint {
		t.Errorf("headers %v, want %s=%s and %s=%s", h, HeaderKey, j.Key, HeaderFingerprint, j.Fingerprint)
	}
	if k, err := dedup.ParseKey(j.Key.TaskID()); err != nil || k != j.Key {
		t.Errorf("task id %q reads back as %v, want %v", j.Key.TaskID(), k, j.Key)
	}
	if !json.Valid(j.Task.Payload()) {
		t.Errorf("payload is not JSON: %q", j.Task.Payload())
	}
}

// mustJob(t)(NewX(...)) fails t on a constructor error.
func mustJob(t *testing.T) func(dedup.Job, error) dedup.Job {
	return func(j dedup.Job, err error) dedup.Job {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
}

func TestEmailKeyStability(t *testing.T) {
	t.Parallel()
	base := Email{To: "bob@example.com", Subject: "Hi", Body: "body"}
	a := mustJob(t)(testenv.Job(Emails.Job(base)))
	traced := base
	traced.TraceID = "trace-2"
	b := mustJob(t)(testenv.Job(Emails.Job(traced)))
	if a.Key != b.Key || a.Fingerprint != b.Fingerprint {
		t.Errorf("trace_id changed the key or fingerprint: %v/%s vs %v/%s", a.Key, a.Fingerprint, b.Key, b.Fingerprint)
	}
	other := base
	other.Body = "another body"
	c := mustJob(t)(testenv.Job(Emails.Job(other)))
	if c.Key == a.Key || c.Fingerprint == a.Fingerprint {
		t.Errorf("a different body kept key %v or fingerprint %s", c.Key, c.Fingerprint)
	}
	sum, err := base64.RawURLEncoding.DecodeString(a.Fingerprint)
	if err != nil || len(sum) != 32 {
		t.Fatalf("fingerprint %q: %v", a.Fingerprint, err)
	}
	if a.Key.ID != ContentID([32]byte(sum)) {
		t.Errorf("without an id the key id should be the content hash: %v vs %s", a.Key, a.Fingerprint)
	}

	// With a business id, the id is the key; the fingerprint still tells payloads apart.
	base.ID, other.ID = "welcome-7", "welcome-7"
	d, e := mustJob(t)(testenv.Job(Emails.Job(base))), mustJob(t)(testenv.Job(Emails.Job(other)))
	if d.Key.String() != "email:send/welcome-7" || d.Key != e.Key || d.Fingerprint == e.Fingerprint {
		t.Errorf("keys %v, %v fingerprints %s, %s; want one key email:send/welcome-7, two fingerprints", d.Key, e.Key, d.Fingerprint, e.Fingerprint)
	}
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	k1, _ := dedup.NewKey(TypeEmail, "a")
	k2, _ := dedup.NewKey(TypeEmail, "b")
	id := MessageID(k1.String())
	if !regexp.MustCompile(`^<[0-9a-f]{32}@onceq>$`).MatchString(id) {
		t.Errorf("MessageID = %q, want <32 hex@onceq>", id)
	}
	if MessageID(k1.String()) != id || MessageID(k2.String()) == id {
		t.Errorf("MessageID is not a function of the key alone")
	}
	if _, err := mail.ParseAddress("x " + id); err != nil {
		t.Errorf("MessageID %q does not parse as an addr-spec in angle brackets: %v", id, err)
	}
}

func TestEmailHandlerSendsWithKeyDerivedMessageID(t *testing.T) {
	t.Parallel()
	mailer := &fakeMailer{}
	h := EmailHandler{Mailer: mailer, From: "onceq@example.com"}
	job := mustJob(t)(testenv.Job(Emails.Job(Email{To: "bob@example.com", Subject: "Hi", Body: "hello", TraceID: "t"})))
	claimed, _ := dedup.NewKey(TypeEmail, "claimed-by-middleware")

	tests := []struct {
		name string
		ctx  context.Context
		task *asynq.Task
		key  dedup.Key
	}{
		{"key from the headers", context.Background(), job.Task, job.Key},
		// A task built without the constructor's headers derives the same key.
		{"key derived from the payload", context.Background(), asynq.NewTask(TypeEmail, job.Task.Payload()), job.Key},
	}
	for i, tt := range tests {
		res, err := h.process(tt.ctx, tt.task)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		want := MessageID(tt.key.String())
		if res.MessageID != want || res.To != "bob@example.com" {
			t.Errorf("%s: result %+v, want message_id %s", tt.name, res, want)
		}
		msgs := mailer.Messages()
		if len(msgs) != i+1 {
			t.Fatalf("%s: mailer got %d messages, want %d", tt.name, len(msgs), i+1)
		}
		if got := msgs[i]; got.MessageID != want || got.From != "onceq@example.com" || got.To != "bob@example.com" ||
			got.Subject != "Hi" || got.Body != "hello" {
			t.Errorf("%s: sent %+v, want Message-ID %q from onceq@example.com", tt.name, got, want)
		}
	}
	// Behind the middleware the key it claimed is the one sent downstream.
	if err := behindMiddleware(t, h).ProcessTask(context.Background(), keyed(job.Task, claimed)); err != nil {
		t.Fatal(err)
	}
	if msgs := mailer.Messages(); len(msgs) != len(tests)+1 || msgs[len(tests)].MessageID != MessageID(claimed.String()) {
		t.Errorf("behind the middleware: sent %+v, want Message-ID %q", msgs, MessageID(claimed.String()))
	}
	if err := h.ProcessTask(context.Background(), job.Task); err != nil {
		t.Errorf("ProcessTask: %v", err)
	}
}

func TestEmailHandlerFailures(t *testing.T) {
	t.Parallel()
	mailer := &fakeMailer{}
	h := EmailHandler{Mailer: mailer, From: "onceq@example.com"}
	job := func(to string) *asynq.Task {
		return mustJob(t)(testenv.Job(Emails.Job(Email{To: to, Subject: "Hi", Body: "b"}))).Task
	}
	tests := []struct {
		name string
		task *asynq.Task
		skip bool
	}{
		{"unknown field", asynq.NewTask(TypeEmail, []byte(`{"to":"bob@example.com","subject":"s","body":"b","cc":"x"}`)), true},
		{"not JSON", asynq.NewTask(TypeEmail, []byte(`{"to":`)), true},
		{"trailing data", asynq.NewTask(TypeEmail, []byte(`{"to":"bob@example.com","subject":"s","body":"b"} {}`)), true},
		{"empty past the constructor", asynq.NewTask(TypeEmail, []byte(`{"to":"bob@example.com","subject":"","body":""}`)), true},
		{"header injection past the constructor", asynq.NewTask(TypeEmail, []byte(`{"to":"bob@example.com","subject":"s\r\nBcc: eve@example.com","body":"b"}`)), true},
		{"recipient rejected (550)", job("reject@example.com"), true},
		{"recipient busy (451)", job("busy@example.com"), false},
	}
	for _, tt := range tests {
		err := h.ProcessTask(context.Background(), tt.task)
		if err == nil {
			t.Errorf("%s: ProcessTask succeeded, want an error", tt.name)
			continue
		}
		if errors.Is(err, asynq.SkipRetry) != tt.skip {
			t.Errorf("%s: SkipRetry = %v, want %v (err: %v)", tt.name, !tt.skip, tt.skip, err)
		}
	}
	if n := len(mailer.Messages()); n != 0 {
		t.Errorf("mailer got %d messages, want 0", n)
	}
}
