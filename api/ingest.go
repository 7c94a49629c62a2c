package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// Request bodies. They are the API's contract, kept apart from the task
// payloads so that a field added to a task is not accepted over HTTP by
// accident.
type (
	// PaymentRequest is the body of POST /v1/payments; Amount is in minor units.
	PaymentRequest struct {
		PaymentID   string `json:"payment_id"`
		Account     string `json:"account"`
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Description string `json:"description,omitempty"`
	}
	// EmailRequest is the body of POST /v1/emails.
	EmailRequest struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
		Body    string `json:"body"`
		ID      string `json:"id,omitempty"`
	}
	// ScanRequest is the body of POST /v1/scans.
	ScanRequest struct {
		Path   string `json:"path"`
		Mode   string `json:"mode,omitempty"`
		FileID string `json:"file_id,omitempty"`
	}
	// WebhookEvent is the body of POST /v1/webhooks/{source}. Attempt is the
	// sender's delivery count: it may change between redeliveries.
	WebhookEvent struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Data    json.RawMessage `json:"data,omitempty"`
		Attempt int             `json:"attempt,omitempty"`
	}
)

// route is one ingest endpoint: how its body becomes a Job.
type route struct {
	name string // the replay scope: "payments", "emails", "scans"
	typ  string // the task type, for decisions about bodies that are refused
	// job decodes body, builds its Job, and returns the decoded request,
	// from which the replay fingerprint is taken. key is the
	// Idempotency-Key, already scoped to the principal.
	job func(body []byte, key string) (tasks.Job, any, *response)
}

var payments = route{name: "payments", typ: tasks.TypePayment, job: func(body []byte, _ string) (tasks.Job, any, *response) {
	var p PaymentRequest
	if resp := decode(body, &p); resp != nil {
		return tasks.Job{}, nil, resp
	}
	// The job is keyed by payment_id whatever the header says: the header
	// scopes replays of this request, the payment id the charge itself.
	return built(p)(tasks.NewPayment(tasks.Payment{PaymentID: p.PaymentID, Account: p.Account,
		Amount: p.Amount, Currency: p.Currency, Description: p.Description}))
}}

var emails = route{name: "emails", typ: tasks.TypeEmail, job: func(body []byte, key string) (tasks.Job, any, *response) {
	var e EmailRequest
	if resp := decode(body, &e); resp != nil {
		return tasks.Job{}, nil, resp
	}
	id := e.ID
	if id == "" && key != "" {
		id = jobID(tasks.TypeEmail, key)
	}
	return built(e)(tasks.NewEmail(tasks.Email{ID: id, To: e.To, Subject: e.Subject, Body: e.Body}))
}}

var scans = route{name: "scans", typ: tasks.TypeScan, job: func(body []byte, _ string) (tasks.Job, any, *response) {
	var sr ScanRequest
	if resp := decode(body, &sr); resp != nil {
		return tasks.Job{}, nil, resp
	}
	// Scans are keyed by content: the header only scopes replays.
	return built(sr)(tasks.NewScan(tasks.Scan{Path: sr.Path, Mode: sr.Mode, FileID: sr.FileID}))
}}

// built finishes a route's job: a constructor's error is a 422, else the
// job goes with req, the decoded request.
func built(req any) func(tasks.Job, error) (tasks.Job, any, *response) {
	return func(j tasks.Job, err error) (tasks.Job, any, *response) {
		if err != nil {
			resp := invalid(err)
			return tasks.Job{}, nil, &resp
		}
		return j, req, nil
	}
}

// jobID makes an Idempotency-Key usable as a job id in namespace ns,
// hashing it when it is not (spaces, braces).
func jobID(ns, key string) string {
	if _, err := dedup.NewKey(ns, key); err == nil {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// ingest serves one bearer-authenticated ingest route.
func (s *server) ingest(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if resp := checkJSON(r); resp != nil {
			resp.write(w)
			return
		}
		body, resp := s.readBody(w, r)
		if resp != nil {
			resp.write(w)
			return
		}
		key, resp := idempotencyKey(r)
		if resp != nil {
			resp.write(w)
			return
		}
		// A key the job takes as its id is the client's: scoped so that
		// another principal's same header names another job.
		scoped := key
		if key != "" {
			scoped = principal(r.Context()) + ":" + key
		}
		s.submit(w, r, rt.name, rt.typ, key, func() (tasks.Job, any, *response) {
			return rt.job(body, scoped)
		})
	})
}

// submit builds the job, then enqueues it at most once per Idempotency-Key.
// Invalid bodies are refused before anything touches Redis.
func (s *server) submit(w http.ResponseWriter, r *http.Request, name, typ, key string,
	build func() (tasks.Job, any, *response)) {
	j, req, resp := build()
	if resp != nil {
		s.opts.Observer(r.Context(), dedup.Decision{Op: dedup.OpEnqueue, Key: dedup.Key{Namespace: typ},
			// Not the detail: it may quote the payload (an address), and logs never do.
			Outcome: dedup.OutcomeBadPayload, Reason: fmt.Sprintf("%d %s", resp.Status, http.StatusText(resp.Status))})
		resp.write(w)
		return
	}
	// Detached from the client: a disconnect must not cut an enqueue in
	// half; the time-out still bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.opts.Timeout)
	defer cancel()
	fp, err := fingerprint(r.Method, name, req)
	if err != nil { // our own request types always marshal
		problem(http.StatusInternalServerError, probInternal, "fingerprinting the request failed").write(w)
		return
	}
	out := s.once(ctx, name, key, fp, func(ctx context.Context) response {
		return s.enqueue(ctx, j)
	})
	if out.settle != nil {
		out.settle()
	}
	out.write(w)
}

// Accepted is the body of a 202 (decision "enqueued") or of a 200
// (decision "duplicate": the job was accepted before).
type Accepted struct {
	Decision tasks.Decision `json:"decision"`
	Key      string         `json:"key"`
	TaskID   string         `json:"task_id,omitempty"`
	Queue    string         `json:"queue,omitempty"`
	// State of the task; "completed" for a duplicate whose job is done.
	State string `json:"state,omitempty"`
	// Result of a duplicate whose job is done: its JSON, or a string.
	Result any    `json:"result,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (s *server) enqueue(ctx context.Context, j tasks.Job) response {
	out, err := s.opts.Producer.Enqueue(ctx, j)
	if err != nil {
		s.opts.Observer(ctx, dedup.Decision{Op: dedup.OpEnqueue, Key: j.Key, Outcome: dedup.OutcomeError, Reason: err.Error()})
		s.opts.Log.Warn("api: enqueue failed", zap.String("key", j.Key.String()), zap.Error(err))
		return unavailable(outcomeUnknown)
	}
	a := Accepted{Decision: out.Decision, Key: out.Key, TaskID: out.TaskID, Queue: out.Queue, State: out.State}
	var resp response
	switch out.Decision {
	case tasks.Enqueued:
		// The owner write overlaps the replay record's: one round trip
		// less. It ends before the client hears of the job. Should it fail,
		// the job is enqueued and replays stay right; only GET /v1/jobs
		// then shows the job to no one.
		owned := make(chan error, 1)
		go func() { owned <- s.setOwner(ctx, j.Key, principal(ctx)) }()
		resp = jsonResponse(http.StatusAccepted, a)
		resp.settle = func() {
			if err := <-owned; err != nil {
				s.opts.Log.Warn("api: recording the job's owner failed", zap.String("key", j.Key.String()), zap.Error(err))
			}
		}
	case tasks.Duplicate:
		mine, err := s.owns(ctx, j.Key, principal(ctx))
		if err != nil {
			s.opts.Log.Warn("api: reading the job's owner failed", zap.String("key", j.Key.String()), zap.Error(err))
			return unavailable(outcomeUnknown)
		}
		if !mine {
			// A global business key (a payment id) that another client
			// used: deduplicated, but its task, state and result are not
			// this caller's to see.
			return jsonResponse(http.StatusOK, Accepted{Decision: out.Decision, Key: out.Key})
		}
		a.Reason, a.Result = out.Reason, result(out.Result)
		resp = jsonResponse(http.StatusOK, a)
	case tasks.Throttled:
		s.opts.Observer(ctx, dedup.Decision{Op: dedup.OpEnqueue, Key: j.Key, Outcome: dedup.OutcomeThrottled, Reason: out.Reason})
		// Not out.Reason: it names the job that holds the window, which
		// may be another client's.
		return problemOf(Problem{Type: ProblemType + probThrottled.slug, Title: probThrottled.title,
			Status: http.StatusTooManyRequests, Key: out.Key, RetryAfter: seconds(out.RetryAfter),
			Detail: "a rate rule refused the job; retry after the given seconds"})
	default:
		return problem(http.StatusInternalServerError, probInternal, "unknown producer decision")
	}
	resp.Header["Location"] = JobPath(out.Key)
	return resp
}

// JobPath is where GET /v1/jobs answers for key ("namespace/id").
func JobPath(key string) string { return "/v1/jobs/" + url.PathEscape(key) }

// result presents a stored result: its JSON when it is JSON, else a string.
func result(b []byte) any {
	switch {
	case len(b) == 0:
		return nil
	case json.Valid(b):
		return json.RawMessage(b)
	}
	return string(b)
}
