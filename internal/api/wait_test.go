package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// Prefer: wait=N on a payment with a worker running answers 200 with the
// stored result; without a worker, 202 once the wait is over.
func TestPreferWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waited := func(body, key string) reply {
		return e.do(req{path: paymentPath, body: body, header: map[string]string{"Idempotency-Key": key, "Prefer": "wait=1"}})
	}
	// No worker yet: the job waits in its queue, the answer is 202.
	r := waited(paymentBody("pmt-wait-0", "acct-w0", 100), "w-0")
	if r.Status != http.StatusAccepted || r.Header.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("no worker: %d %v %s", r.Status, r.Header, r.Body)
	}

	mw, err := dedup.NewMiddleware(e.jobs, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := asynq.NewServerFromRedisClient(e.rdb, asynq.Config{Concurrency: 2, LogLevel: asynq.ErrorLevel,
		Queues: map[string]int{tasks.QueueCritical: 1, tasks.QueueDefault: 1}})
	mux := asynq.NewServeMux()
	mux.Use(mw.Wrap)
	mux.HandleFunc(tasks.TypePayment, func(ctx context.Context, _ *asynq.Task) error {
		dedup.SetResult(ctx, []byte(`{"id":"ch_wait","status":"succeeded"}`))
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); _ = mw.Shutdown(context.Background()) })

	r = e.do(req{path: paymentPath, body: paymentBody("pmt-wait-1", "acct-w1", 100),
		header: map[string]string{"Idempotency-Key": "w-1", "Prefer": "respond-async, wait=5"}})
	var a struct {
		Decision string          `json:"decision"`
		State    string          `json:"state"`
		Result   json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK || a.Decision != "enqueued" || a.State != "done" || string(a.Result) != `{"id":"ch_wait","status":"succeeded"}` {
		t.Fatalf("with a worker: %d %s", r.Status, r.Body)
	}
	// Without the preference the route does not wait: 202.
	if r := e.post(paymentPath, paymentBody("pmt-wait-2", "acct-w2", 100), "w-2"); r.Status != http.StatusAccepted || r.Header.Get("Preference-Applied") != "" {
		t.Fatalf("without Prefer: %d %s", r.Status, r.Body)
	}
}
