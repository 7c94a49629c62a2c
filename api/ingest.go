package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// build turns a request body into its Job through the catalog, the one
// place that knows every task type's payload, key rule and windows. key is
// the request's Idempotency-Key; the type's rule says whether it is part of
// the job key (emails, SMS: when the payload names no id) or only scopes
// replays of this request (payments, scans).
func (s *server) build(typ string, body []byte, key string) (tasks.Job, *response) {
	j, err := s.opts.Catalog.Build(typ, body, key)
	if err != nil {
		resp := refused(err)
		return tasks.Job{}, &resp
	}
	return j, nil
}

// ingest serves the bearer-authenticated ingest route of one task type.
func (s *server) ingest(k *tasks.Kind) http.Handler {
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
		// A retry whose volatile fields changed (a trace id) is the same request.
		s.submit(w, r, k.Route, k.Type, key, body, k.Volatile(), func(key string) (tasks.Job, *response) {
			return s.build(k.Type, body, key)
		})
	})
}

// submit builds the job, then enqueues it at most once per Idempotency-Key.
// Invalid bodies are refused before anything touches Redis.
func (s *server) submit(w http.ResponseWriter, r *http.Request, name, typ, key string, body []byte,
	volatile []string, build func(key string) (tasks.Job, *response)) {
	j, resp := build(key)
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
	fp := fingerprint(r.Method, name, body, volatile...)
	s.once(ctx, name, key, fp, func(ctx context.Context) response {
		return s.enqueue(ctx, j)
	}).write(w)
}

// Accepted is the body of a 202 (decision "enqueued") or of a 200
// (decision "duplicate": the job was accepted before).
type Accepted struct {
	Decision tasks.Decision `json:"decision"`
	Key      string         `json:"key"`
	TaskID   string         `json:"task_id,omitempty"`
	Queue    string         `json:"queue,omitempty"`
	// State of the job (tasks.Status): "done" for a duplicate whose job ran.
	State tasks.Status `json:"state,omitempty"`
	// Result of a duplicate whose job is done: its JSON, or a string.
	Result any    `json:"result,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (s *server) enqueue(ctx context.Context, j tasks.Job) response {
	out, err := s.opts.Producer.Enqueue(ctx, j)
	if err != nil {
		s.opts.Observer(ctx, dedup.Decision{Op: dedup.OpEnqueue, Key: j.Key, Outcome: dedup.OutcomeError, Reason: err.Error()})
		s.opts.Log.Warn("api: enqueue failed", zap.String("key", j.Key.String()), zap.Error(err))
		return unavailable()
	}
	a := Accepted{Decision: out.Decision, Key: out.Key, TaskID: out.TaskID, Queue: out.Queue, State: out.State}
	var resp response
	switch out.Decision {
	case tasks.Enqueued:
		resp = jsonResponse(http.StatusAccepted, a)
	case tasks.Duplicate:
		a.Reason, a.Result = out.Reason, result(out.Result)
		resp = jsonResponse(http.StatusOK, a)
	case tasks.Conflict:
		// The IETF Idempotency-Key draft answers a key reused with another
		// payload 422; a business key reused with other content is the same
		// mistake one level down. 409 stays "the first request is in flight".
		return problemOf(Problem{Type: ProblemType + probConflict.slug, Title: probConflict.title,
			Status: http.StatusUnprocessableEntity, Key: out.Key,
			Detail: "the job key was accepted before with other content; nothing was enqueued: " + out.Reason})
	case tasks.Throttled:
		s.opts.Observer(ctx, dedup.Decision{Op: dedup.OpEnqueue, Key: j.Key, Outcome: dedup.OutcomeThrottled, Reason: out.Reason})
		return problemOf(Problem{Type: ProblemType + probThrottled.slug, Title: probThrottled.title,
			Status: http.StatusTooManyRequests, Key: out.Key, RetryAfter: seconds(out.RetryAfter),
			Detail: "a rate rule refused the job: " + out.Reason})
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
