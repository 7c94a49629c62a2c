package observe

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// observe records v, with the trace id of ctx's span as an exemplar when
// that span is sampled, so a slow bucket leads to a trace that shows why.
// Without tracing there is no span and this is a plain Observe.
func observe(ctx context.Context, o prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if e, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(v)
}
