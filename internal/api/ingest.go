package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/httpidem"
	"github.com/onceq/onceq/tasks"
)

// build turns a request body into its Job through the catalog, the one
// place that knows every task type's payload, key rule and windows. key is
// the request's Idempotency-Key; the type's rule says whether it is part of
// the job key (emails, SMS: when the payload names no id) or only scopes
// replays of this request (payments, scans).
func (s *server) build(typ string, body []byte, key, scope string) (dedup.Job, *response) {
	j, err := s.opts.Catalog.Build(typ, body, key, scope)
	if err != nil {
		resp := refused(err)
		return dedup.Job{}, &resp
	}
	return j, nil
}

// ingest serves the bearer-authenticated ingest route of one task type.
func (s *server) ingest(k *dedup.Kind, route string) http.Handler {
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
		// The job lives in the caller's scope unless its type is Global:
		// another client's same id, header key or content is another job,
		// and no id a caller can type reaches into another's scope. The
		// one caller of a server shares the CLI's scope (keyScope).
		s.submit(w, r, route, k.Type, key, body, func() (dedup.Job, *response) {
			return s.build(k.Type, body, key, keyScope(r.Context()))
		})
	})
}

// submit builds the job, then enqueues it at most once per Idempotency-Key.
// Invalid bodies are refused before anything touches Redis. raw, when not
// nil, is all that build reads besides the key and the caller (an ingest
// body): a replay of the same bytes under the same key takes the
// fingerprint it had (fingerprints) and is answered without decoding.
func (s *server) submit(w http.ResponseWriter, r *http.Request, name, typ, key string, raw []byte,
	build func() (dedup.Job, *response)) {
	wait := preferWait(r)
	scope := principal(r.Context()) + "/" + name
	var j dedup.Job
	fp, known := "", false
	if raw != nil && key != "" && wait == 0 {
		fp, known = s.fingerprints.get(scope, key, raw, time.Now())
	}
	if !known {
		var resp *response
		if j, resp = build(); resp != nil {
			s.opts.Observer(r.Context(), dedup.Event{Op: "enqueue", Key: dedup.Key{Namespace: typ},
				// Not the detail: it may quote the payload (an address), and logs never do.
				Outcome: "bad_payload", Reason: fmt.Sprintf("%d %s", resp.Status, http.StatusText(resp.Status))})
			resp.write(w)
			return
		}
		// The job's fingerprint is taken from the decoded, validated
		// payload (volatile fields left out), so equal meaning is the same
		// request whatever the key order or spacing of the body.
		fp = fingerprint(r.Method, name, j.Key.String(), j.Fingerprint)
		if raw != nil && key != "" {
			s.fingerprints.put(scope, key, raw, fp, time.Now())
		}
	}
	// Detached from the client: a disconnect must not cut an enqueue in
	// half; the time-out still bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.opts.Timeout)
	defer cancel()
	// A fresh answer goes out before its replay is stored and the job's
	// owner recorded: both writes overlap the response, two round trips
	// for a first request instead of three (Handler.Drain waits for them).
	// Unless Prefer: wait holds it back.
	var send func(httpidem.Response)
	if wait == 0 {
		send = func(resp httpidem.Response) { resp.Flush(w) }
	}
	out, sent := s.once(ctx, name, key, fp, func(ctx context.Context) response {
		if known { // the replay was not in memory after all: build it now
			var resp *response
			if j, resp = build(); resp != nil {
				return *resp
			}
		}
		return s.enqueue(ctx, j)
	}, send)
	if sent {
		if out.settle != nil {
			s.tails.Go(out.settle) // the connection serves the client's next request meanwhile
		}
		return
	}
	if out.settle != nil {
		out.settle()
	}
	if wait > 0 && out.accepted != nil && out.accepted.State != dedup.StatusDone {
		out = s.wait(r.Context(), j, out, wait)
	}
	out.write(w)
}

// maxWait bounds Prefer: wait, so a request cannot hold a connection for long.
const maxWait = 60 * time.Second

// preferWait reads RFC 7240's "Prefer: wait=N" (seconds), capped at maxWait;
// 0 without it.
func preferWait(r *http.Request) time.Duration {
	for _, h := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(h, ",") {
			name, v, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(v), `"`))
			if err == nil && n > 0 {
				return min(time.Duration(n)*time.Second, maxWait)
			}
		}
	}
	return 0
}

// wait answers a job this caller may read, accepted now or before, once it
// finishes: 200 with its result when it is done within wait, else the job's
// state as of then, 202. The stored replay stays the first answer, and so
// is the answer when the job's state cannot be read.
func (s *server) wait(ctx context.Context, j dedup.Job, first response, wait time.Duration) response {
	st, err := s.opts.Producer.Wait(ctx, j, wait)
	if err != nil {
		s.opts.Log.Warn("api: waiting for the job failed", zap.String("key", j.Key.String()), zap.Error(err))
		return first
	}
	a, status := *first.accepted, http.StatusAccepted
	a.State = st.State
	if st.State == dedup.StatusDone {
		status, a.Result = http.StatusOK, st.Result
	}
	resp := jsonResponse(status, a)
	resp.Header["Location"] = JobPath(a.Key)
	resp.Header["Preference-Applied"] = "wait=" + strconv.Itoa(int(wait/time.Second))
	return resp
}

// Accepted is the body of a 202 (decision "enqueued") or of a 200
// (decision "duplicate": the job was accepted before).
type Accepted struct {
	Decision dedup.Decision `json:"decision"`
	Key      string         `json:"key"`
	TaskID   string         `json:"task_id,omitempty"`
	Queue    string         `json:"queue,omitempty"`
	// State of the job (dedup.Status): "done" for a duplicate whose job ran.
	State dedup.Status `json:"state,omitempty"`
	// Result of a duplicate whose job is done: its JSON, or a string.
	Result any    `json:"result,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (s *server) enqueue(ctx context.Context, j dedup.Job) response {
	out, err := s.opts.Producer.Enqueue(dedup.WithSource(ctx, source(ctx)), j)
	if err != nil {
		s.unsure.add(principal(ctx), j.Key)
		s.opts.Observer(ctx, dedup.Event{Op: "enqueue", Key: j.Key, Outcome: "error", Reason: err.Error()})
		s.opts.Log.Warn("api: enqueue failed", zap.String("key", j.Key.String()), zap.Error(err))
		return unavailable(outcomeUnknown)
	}
	a := Accepted{Decision: out.Decision, Key: out.Key, TaskID: out.TaskID, Queue: out.Queue, State: out.State}
	if out.Decision == dedup.Duplicate || out.Decision == dedup.Conflict {
		// Another client's job (a global id: a payment's) gets one answer
		// after the same owner read (a caller who reads every job needs
		// none), a duplicate or a conflict alike:
		// neither the status nor the time taken tells a right guess at its
		// content from a wrong one.
		mine, err := readsAll(ctx), error(nil)
		if !mine {
			mine, err = s.owns(ctx, j.Key, principal(ctx))
		}
		if err != nil {
			s.opts.Log.Warn("api: reading the job's owner failed", zap.String("key", j.Key.String()), zap.Error(err))
			return unavailable(outcomeUnknown)
		}
		if !mine {
			return foreign(j.Key, strings.HasPrefix(principal(ctx), webhookPrefix))
		}
	}
	var resp response
	switch out.Decision {
	case dedup.Enqueued:
		// The owner write overlaps the response and the replay record's
		// write. Until it lands, GET /v1/jobs on this process waits for it
		// (settling). Should it fail, the job is enqueued and replays stay
		// right; only GET /v1/jobs then shows the job to no one.
		owned, settled := make(chan error, 1), s.settling.add(j.Key)
		go func() {
			// Past the handler's return: its ctx is cancelled then.
			bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
			defer cancel()
			owned <- s.setOwner(bg, j.Key, principal(ctx))
		}()
		resp = jsonResponse(http.StatusAccepted, a)
		resp.accepted = &a
		resp.settle = func() {
			defer settled()
			if err := <-owned; err != nil {
				s.opts.Log.Warn("api: recording the job's owner failed", zap.String("key", j.Key.String()), zap.Error(err))
			}
		}
	case dedup.Duplicate:
		a.Reason, a.Result = out.Reason, result(out.Result)
		resp = jsonResponse(http.StatusOK, a)
		resp.accepted = &a
	case dedup.Conflict:
		// The IETF Idempotency-Key draft answers a key reused with another
		// payload 422; a business key reused with other content is the same
		// mistake one level down. 409 stays "the first request is in flight".
		return problemOf(Problem{Type: ProblemType + probConflict.slug, Title: probConflict.title,
			Status: http.StatusUnprocessableEntity, Key: out.Key,
			Detail: "the job key was accepted before with other content; nothing was enqueued"})
	case dedup.Throttled:
		// Counted and logged by the Producer, like every enqueue decision.
		// Not out.Reason: it names the job that holds the window, which
		// may be another client's.
		return problemOf(Problem{Type: ProblemType + probThrottled.slug, Title: probThrottled.title,
			Status: http.StatusTooManyRequests, Key: out.Key, RetryAfter: seconds(out.RetryAfter),
			Detail: "a time window or rate rule refused the job; retry after the given seconds"})
	default:
		return problem(http.StatusInternalServerError, probInternal, "unknown producer decision")
	}
	resp.Header["Location"] = JobPath(out.Key)
	return resp
}

// foreign answers a request for a key that another caller holds: nothing
// was enqueued, and nothing of that job is told, not even whether this
// request's content matched it. A client's global id (a payment id) is a
// 409, so that a client reading only the status knows nothing was done. A
// webhook's event that an operator enqueued (a batch file) is the same
// event: its sender gets a 2xx, as for any duplicate, or it would retry
// and in the end disable the endpoint.
func foreign(key dedup.Key, webhook bool) response {
	if webhook {
		resp := jsonResponse(http.StatusOK, Accepted{Decision: dedup.Duplicate, Key: key.String(),
			Reason: "already accepted by another caller; nothing was enqueued"})
		resp.NoReplay = true
		return resp
	}
	k := probIDHeld
	if key.Namespace == tasks.TypePayment {
		k = probPaymentIDHeld
	}
	resp := problemOf(Problem{Type: ProblemType + k.slug, Title: k.title, Status: http.StatusConflict, Key: key.String(),
		Detail: "this id is held by another client's job; nothing was enqueued"})
	resp.NoReplay = true
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
