package tasks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// TypeWebhook processes one event accepted by the ingest API.
const TypeWebhook = "webhook:process"

var sourceRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// Webhook is the payload of TypeWebhook. Attempt and ReceivedAt change with
// every redelivery by the sender, so they are not part of the fingerprint.
// Body is the sender's signed body, any JSON object, every member kept in
// order (whitespace compacted when the payload is marshalled); senders
// change delivery metadata in it between redeliveries (onceq's attempt,
// Stripe's pending_webhooks), so the fingerprint covers the event's source,
// id, type and data alone (webhookPrint), wherever the data came in: the
// sender's body over HTTP, or Data from a batch line. An event with a Body
// takes its data from the body's "data" member; Data is for producers that
// build the payload themselves.
type Webhook struct {
	Source     string          `json:"source"`
	EventID    string          `json:"event_id"`
	Type       string          `json:"type"`
	Data       json.RawMessage `json:"data"`
	Body       json.RawMessage `json:"body,omitempty" dedup:"volatile"`
	Attempt    int             `json:"attempt,omitempty" dedup:"volatile"`
	ReceivedAt string          `json:"received_at,omitempty" dedup:"volatile"`
}

// data is the event's data: Data, or else the "data" member of Body.
func (wh Webhook) data() json.RawMessage {
	// A payload decoded from JSON has "data":null beside its body.
	if (len(wh.Data) > 0 && string(wh.Data) != "null") || len(wh.Body) == 0 {
		return wh.Data
	}
	var b struct {
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(wh.Body, &b) != nil {
		return nil
	}
	return b.Data
}

func (wh Webhook) checkEnvelope() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypeWebhook, dedup.ErrInvalid}, a...)...)
	}
	switch {
	case !sourceRE.MatchString(wh.Source):
		return fail("source %q does not match %s", wh.Source, sourceRE)
	case wh.EventID == "":
		return fail("event_id is empty")
	case wh.Type == "" && len(wh.Body) == 0:
		// A sender's body without a type is routed nowhere: ignored, not refused.
		return fail("type is empty")
	case len(wh.Type) > 255 || !printable(wh.Type):
		return fail("type is not printable UTF-8 of at most 255 bytes")
	case len(wh.Data) > 0 && !json.Valid(wh.Data):
		return fail("data is not valid JSON")
	case len(wh.Body) > 0 && (!json.Valid(wh.Body) || bytes.TrimLeft(wh.Body, " \t\r\n")[0] != '{'):
		return fail("body is not a JSON object")
	}
	// Any other event id is the sender's to choose (Standard Webhooks
	// allows any webhook-id): HashID maps one a key cannot hold as given to
	// "~k" and its SHA-256, here and in the routed jobs' keys.
	return nil
}

// route checks wh and returns the follow-up job its event type calls for,
// built by emails. routed is false for a type no route takes: such events
// are acknowledged and ignored, so they are valid whatever their data.
// skipped says why a routed event makes no follow-up job (its data lacks
// what the job needs): it is still processed, once. Only an envelope or
// data that is not the JSON it should be is an error.
func (wh Webhook) route(emails *dedup.Typed[Email]) (job dedup.Job, routed bool, skipped string, err error) {
	if err := wh.checkEnvelope(); err != nil {
		return dedup.Job{}, false, "", err
	}
	switch wh.Type {
	case EventUserCreated:
		job, skipped, err = wh.welcome(emails)
		return job, true, skipped, err
	}
	return dedup.Job{}, false, "", nil
}

// webhookPrint is what an event's fingerprint covers.
func (wh Webhook) webhookPrint() any {
	return struct {
		Source  string          `json:"source"`
		EventID string          `json:"event_id"`
		Type    string          `json:"type"`
		Data    json.RawMessage `json:"data"`
	}{wh.Source, wh.EventID, wh.Type, wh.data()}
}

// webhookID is the key id of an event: a sender's event id is unique per
// sender only.
func (wh Webhook) webhookID() string { return wh.Source + ":" + wh.EventID }

// webhookSpec is the webhook:process declaration. Its Validate refuses what
// the handler would archive: a bad envelope, and the data of an event type
// it routes that cannot make its follow-up job; both run route. The key is the source plus
// the sender's event id, both from the signed body: a redelivery is a
// duplicate whatever its Idempotency-Key, and two senders never collide.
func webhookSpec(emails *dedup.Typed[Email], replay map[string]time.Duration) dedup.Spec[Webhook] {
	return dedup.Spec[Webhook]{
		// Key: source:event_id, the event id from the signed body (attempt, received_at left out).
		Type:        TypeWebhook,
		ID:          Webhook.webhookID,
		HashID:      true, // a sender's event id may hold anything
		Fingerprint: Webhook.webhookPrint,
		Prepare: func(wh *Webhook) {
			if len(wh.Data) == 0 {
				// With a Body, the data stays in it: one copy of the sender's bytes.
				wh.Data = nil // marshals as null; an empty RawMessage does not marshal
			}
		},
		Validate: func(wh Webhook) error {
			_, _, _, err := wh.route(emails)
			return err
		},
		Rules: func(wh Webhook) ([]*dedup.Rule, error) {
			if r := wh.replayRule(replay[wh.Source]); r != nil {
				return []*dedup.Rule{r}, nil
			}
			return nil, nil
		},
		WriteResult: true, // what the event was routed to, on the dashboard
	}
}

// replayRule holds a sender's body for window from its first acceptance:
// the same body under another event id (another type where the id covers
// it) is throttled, and so is the same event once its key has forgotten it
// (OutlastsKey), while a redelivery the key still knows is its duplicate.
// None without a window or a body. The body is hashed compacted, as the
// payload carries it, so every copy of what the sender signed agrees.
func (wh Webhook) replayRule(window time.Duration) *dedup.Rule {
	var body bytes.Buffer
	if window <= 0 || json.Compact(&body, wh.Body) != nil || body.Len() == 0 {
		return nil
	}
	sum := sha256.Sum256(body.Bytes())
	return &dedup.Rule{Key: dedup.Key{Namespace: "webhook:replay", ID: wh.Source + ":" + hex.EncodeToString(sum[:])},
		Window: window, OutlastsKey: true}
}

func webhookHandler(d Deps) asynq.Handler {
	return WebhookHandler{Enqueuer: d.Enqueuer, Emails: d.emails, Log: d.Log}
}

// NewWebhook validates w and returns its Job under the default windows.
func NewWebhook(w Webhook) (dedup.Job, error) { j := Webhooks.Job(w); return j, j.Err }

// Event types WebhookHandler routes.
const EventUserCreated = "user.created"

// UserCreated is the data of a user.created event.
type UserCreated struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
	Name   string `json:"name"`
}

// WebhookResult is the webhook handler's result: the event id it
// processed; Routed, Outcome and TaskID for a routed event, or
// WelcomeEmail "skipped: <why>" when its data makes no welcome email;
// Ignored and Type for one no route takes.
type WebhookResult struct {
	Processed    string         `json:"processed"`
	Routed       string         `json:"routed,omitempty"`
	Outcome      dedup.Decision `json:"outcome,omitempty"`
	TaskID       string         `json:"task_id,omitempty"`
	WelcomeEmail string         `json:"welcome_email,omitempty"`
	Ignored      bool           `json:"ignored,omitempty"`
	Type         string         `json:"type,omitempty"`
}

// WebhookHandler routes TypeWebhook events by type to follow-up jobs.
type WebhookHandler struct {
	Enqueuer Enqueuer
	// Emails builds the welcome emails it enqueues. Default: Emails.
	Emails *dedup.Typed[Email]
	Log    *zap.Logger
}

// ProcessTask implements asynq.Handler.
func (h WebhookHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	return dedup.Handle(Webhooks, h.route).ProcessTask(ctx, t)
}

func (h WebhookHandler) route(ctx context.Context, wh Webhook) (WebhookResult, error) {
	emails := h.Emails
	if emails == nil {
		emails = Emails
	}
	job, routed, skipped, err := wh.route(emails)
	if err != nil {
		return WebhookResult{}, err
	}
	key := downstream(ctx)
	log := logger(h.Log).With(zap.String("key", key), zap.String("event_type", wh.Type))
	if !routed {
		// Acknowledge what nobody routes: a retry would not change the answer.
		log.Debug("webhook ignored")
		return WebhookResult{Processed: wh.EventID, Ignored: true, Type: wh.Type}, nil
	}
	if skipped != "" {
		log.Info("webhook processed without its follow-up", zap.String("skipped", skipped))
		return WebhookResult{Processed: wh.EventID, WelcomeEmail: "skipped: " + skipped}, nil
	}
	if h.Enqueuer == nil {
		return WebhookResult{}, errors.New("tasks: webhook handler has no Enqueuer")
	}
	out, err := h.Enqueuer.Enqueue(ctx, job)
	if err != nil {
		return WebhookResult{}, fmt.Errorf("tasks: %s: enqueue %s: %w", TypeWebhook, job.Task.Type(), err)
	}
	log.Debug("webhook routed", zap.String("routed", job.Task.Type()), zap.String("outcome", string(out.Decision)))
	return WebhookResult{Processed: wh.EventID, Routed: job.Task.Type(), Outcome: out.Decision, TaskID: out.TaskID}, nil
}

// welcome is the welcome email of a user.created event, keyed by source and
// event id so a redelivered event does not welcome twice and two senders
// never collide; skipped says why there is none (no data, no usable
// email): the event is still processed. Data that is not an object of
// the right types is an error.
func (wh Webhook) welcome(emails *dedup.Typed[Email]) (job dedup.Job, skipped string, err error) {
	fail := func(err error) (dedup.Job, string, error) {
		return dedup.Job{}, "", fmt.Errorf("tasks: %s: %s data: %w", TypeWebhook, EventUserCreated, err)
	}
	data := wh.data()
	if len(data) == 0 || string(data) == "null" {
		return dedup.Job{}, "no data", nil
	}
	var u UserCreated
	// Not strict: senders add fields to their events, and that must not
	// refuse them. Wrong types still fail.
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&u); err != nil {
		return fail(fmt.Errorf("%w: %v", dedup.ErrInvalid, err))
	}
	if u.Email == "" {
		return dedup.Job{}, "no email", nil
	}
	subject, greeting := "Welcome", "Hi,"
	if u.Name != "" {
		subject, greeting = "Welcome, "+u.Name, "Hi "+u.Name+","
	}
	// Emails.Job refuses a bad address or a name that would break the subject.
	j := emails.Job(Email{
		ID:      "welcome-" + wh.webhookID(),
		To:      u.Email,
		Subject: subject,
		Body:    greeting + "\n\nwelcome aboard: your account is ready.\n",
	})
	if j.Err != nil {
		return dedup.Job{}, "email not usable: " + j.Err.Error(), nil
	}
	return j, "", nil
}
