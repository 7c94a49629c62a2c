package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/observe/tracing"
	"github.com/onceq/onceq/internal/otlptest"
)

type invoice struct {
	ID string `json:"id"`
}

// start sends this process's spans to a new collector.
func start(t *testing.T) (*tracing.Tracing, *otlptest.Collector) {
	t.Helper()
	c := otlptest.Start(t)
	for k, v := range c.Env() {
		t.Setenv(k, v)
	}
	tr, err := tracing.New(t.Context(), tracing.Options{Service: "test"})
	if err != nil || tr == nil {
		t.Fatalf("tracing.New = %v, %v", tr, err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr, c
}

func TestOffWithoutVariables(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	tr, err := tracing.New(t.Context(), tracing.Options{Service: "test"})
	if err != nil || tr != nil {
		t.Fatalf("tracing.New without variables = %v, %v; want off", tr, err)
	}
	if tr.Enqueue() != nil || tr.Deliver(nil) != nil {
		t.Error("tracing off still hooks the library")
	}
	if rt := tr.Transport(http.DefaultTransport); rt != http.DefaultTransport {
		t.Error("tracing off wraps the transport")
	}
}

// One job's spans share its trace, with the dedup outcome; a repeat refused
// by the producer, and one refused by the worker, each link to the
// original's trace (a completed original's while asynq keeps its task:
// WriteResult).
func TestSpansAndDuplicateLinks(t *testing.T) {
	tr, c := start(t)
	ctx := t.Context()
	rdb := redistest.Client(t)
	invoices := dedup.Define(dedup.Spec[invoice]{Type: "invoice:send", ID: func(i invoice) string { return i.ID }, WriteResult: true})
	catalog, err := dedup.NewCatalog(invoices.Kind)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{Catalog: catalog,
		Trace: tr.Deliver(asynq.NewInspectorFromRedisClient(rdb))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(dedup.Handle(invoices, func(context.Context, invoice) (string, error) { return "sent", nil })); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{Trace: tr.Enqueue()})
	if err != nil {
		t.Fatal(err)
	}

	job := invoices.Job(invoice{ID: "inv-1"})
	if out, err := producer.Enqueue(ctx, job); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("enqueue: %+v, %v", out, err)
	}
	if st, err := producer.Wait(ctx, job, 30*time.Second); err != nil || st.State != dedup.StatusDone {
		t.Fatalf("wait: %+v, %v", st, err)
	}
	if out, err := producer.Enqueue(ctx, job); err != nil || out.Decision != dedup.Duplicate {
		t.Fatalf("repeat: %+v, %v", out, err)
	}
	// Plain asynq code enqueues the same invoice in a trace of its own.
	plain := asynq.NewTaskWithHeaders(invoices.Type, job.Task.Payload(),
		map[string]string{"traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"})
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(plain); err != nil {
		t.Fatal(err)
	}

	spans := c.Wait(t, func(s []otlptest.Span) bool {
		return count(s, "enqueue invoice:send") == 2 && count(s, "process invoice:send") == 2
	})
	var enq, run, repeat, refused otlptest.Span
	for _, s := range spans {
		switch {
		case s.Name == "enqueue invoice:send" && s.Attrs["onceq.outcome"] == "enqueued":
			enq = s
		case s.Name == "enqueue invoice:send" && s.Attrs["onceq.outcome"] == "duplicate":
			repeat = s
		case s.Name == "process invoice:send" && s.Attrs["onceq.outcome"] == "acquired":
			run = s
		case s.Name == "process invoice:send" && s.Attrs["onceq.outcome"] == "duplicate":
			refused = s
		}
	}
	if enq.SpanID == "" || run.SpanID == "" || repeat.SpanID == "" || refused.SpanID == "" {
		t.Fatalf("missing spans:\n%s", otlptest.Describe(spans))
	}
	if run.TraceID != enq.TraceID || run.ParentID != enq.SpanID || run.Kind != "SPAN_KIND_CONSUMER" || enq.Kind != "SPAN_KIND_PRODUCER" {
		t.Errorf("the run does not continue the enqueue's trace:\n%s", otlptest.Describe([]otlptest.Span{enq, run}))
	}
	for k, want := range map[string]string{"onceq.key": "invoice:send/inv-1", "onceq.namespace": "invoice:send",
		"onceq.attempt": "1", "onceq.incarnation": "1"} {
		if run.Attrs[k] != want {
			t.Errorf("run's %s = %q, want %q", k, run.Attrs[k], want)
		}
	}
	for name, s := range map[string]otlptest.Span{"producer's repeat": repeat, "worker's refusal": refused} {
		if s.TraceID == enq.TraceID {
			t.Errorf("%s is in the original's trace; want a trace of its own", name)
		}
		if len(s.Links) != 1 || s.Links[0].TraceID != enq.TraceID || s.Links[0].SpanID != enq.SpanID || s.Links[0].Attrs["onceq.link"] != "duplicate" {
			t.Errorf("%s links to %v, want the original's enqueue span %s/%s", name, s.Links, enq.TraceID, enq.SpanID)
		}
	}
	if refused.TraceID != "0123456789abcdef0123456789abcdef" {
		t.Errorf("the plain task's delivery is in trace %s, not the one its headers carry", refused.TraceID)
	}
}

// Downstream requests get a client span and carry the trace context.
func TestTransport(t *testing.T) {
	tr, c := start(t)
	got := make(chan string, 1)
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Traceparent") }))
	defer peer.Close()
	ctx, end := tr.Deliver(nil)(t.Context(), asynq.NewTask("t", nil))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, peer.URL, nil)
	resp, err := (&http.Client{Transport: tr.Transport(http.DefaultTransport)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	end(dedup.Run{}, "", nil)
	header := <-got
	spans := c.Wait(t, func(s []otlptest.Span) bool { return len(s) == 2 })
	var parent, client otlptest.Span
	for _, s := range spans {
		if s.Kind == "SPAN_KIND_CLIENT" {
			client = s
		} else {
			parent = s
		}
	}
	if client.ParentID != parent.SpanID || client.TraceID != parent.TraceID {
		t.Fatalf("the request's span is not the delivery's child:\n%s", otlptest.Describe(spans))
	}
	if want := "00-" + client.TraceID + "-" + client.SpanID + "-01"; header != want {
		t.Errorf("the peer got traceparent %q, want %q", header, want)
	}
}

func count(spans []otlptest.Span, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name == name {
			n++
		}
	}
	return n
}
