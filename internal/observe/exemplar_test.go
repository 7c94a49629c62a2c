package observe_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/internal/observe"
)

// A run inside a sampled span leaves its trace id on the handler histogram.
func TestHandlerDurationExemplar(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := observe.NewMetrics(reg)
	h := m.HandlerDuration(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	tid := trace.TraceID{1, 2, 3}
	// The unsampled run comes second: were it kept, it would replace the
	// sampled one's exemplar in their bucket.
	for i, flags := range []trace.TraceFlags{trace.FlagsSampled, 0} {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3 + byte(i)}, SpanID: trace.SpanID{1}, TraceFlags: flags})
		if err := h.ProcessTask(trace.ContextWithSpanContext(context.Background(), sc), asynq.NewTask("email:send", nil)); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var exemplars []string
	for _, f := range families {
		if f.GetName() != "onceq_handler_duration_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, b := range mt.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					exemplars = append(exemplars, l.GetName()+"="+l.GetValue())
				}
			}
		}
	}
	if want := "trace_id=" + tid.String(); len(exemplars) != 1 || exemplars[0] != want {
		t.Fatalf("exemplars %v, want the sampled run's alone: %s", exemplars, want)
	}
}
