package tracing

import (
	"context"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/dedup"
)

// Attributes of the enqueue and delivery spans.
const (
	attrKey         = attribute.Key("onceq.key")
	attrNamespace   = attribute.Key("onceq.namespace")
	attrOutcome     = attribute.Key("onceq.outcome")
	attrAttempt     = attribute.Key("onceq.attempt")
	attrIncarnation = attribute.Key("onceq.incarnation")
	// attrLink on a repeat's link to the job it met: "duplicate" or
	// "conflict", what the repeat is of that job.
	attrLink = attribute.Key("onceq.link")
)

var system = semconv.MessagingSystemKey.String("asynq")

// Enqueue is dedup.ProducerOptions.Trace: a producer span per Enqueue, whose
// context the task carries; a Duplicate or Conflict links to the trace of
// the job it met (from that task's headers, which the Producer reads anyway;
// a done job's task is there only where asynq keeps it: Spec.WriteResult).
func (t *Tracing) Enqueue() func(context.Context, dedup.Job) (context.Context, map[string]string, func(dedup.Outcome, map[string]string, error)) {
	if t == nil {
		return nil
	}
	return func(ctx context.Context, j dedup.Job) (context.Context, map[string]string, func(dedup.Outcome, map[string]string, error)) {
		ctx, span := t.tracer.Start(ctx, "enqueue "+j.Task.Type(), trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(system, semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(j.Queue),
				attrKey.String(j.Key.String()), attrNamespace.String(j.Key.Namespace)))
		headers := map[string]string{}
		t.prop.Inject(ctx, propagation.MapCarrier(headers))
		return ctx, headers, func(o dedup.Outcome, met map[string]string, err error) {
			defer span.End()
			if err != nil {
				span.SetAttributes(attrOutcome.String("error"))
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				return
			}
			span.SetAttributes(attrOutcome.String(string(o.Decision)), semconv.MessagingMessageID(o.TaskID))
			if o.Incarnation > 0 {
				span.SetAttributes(attrIncarnation.Int(o.Incarnation))
			}
			t.linkMet(span, o.Decision, met)
		}
	}
}

// Deliver is dedup.MiddlewareOptions.Trace: a consumer span per delivery,
// continuing the trace in the task's headers, with the key, namespace,
// dedup outcome, attempt (asynq's, 1 for the first delivery) and
// incarnation. A delivery refused as a duplicate or conflict links to the
// trace of the task its key names, when that is another task and asynq
// still has it: one read through insp, on that path only.
func (t *Tracing) Deliver(insp *asynq.Inspector) func(context.Context, *asynq.Task) (context.Context, func(dedup.Run, dedup.Decision, error)) {
	if t == nil {
		return nil
	}
	return func(ctx context.Context, task *asynq.Task) (context.Context, func(dedup.Run, dedup.Decision, error)) {
		queue, _ := asynq.GetQueueName(ctx)
		id, _ := asynq.GetTaskID(ctx)
		retried, _ := asynq.GetRetryCount(ctx)
		parent := t.prop.Extract(ctx, propagation.MapCarrier(task.Headers()))
		ctx, span := t.tracer.Start(parent, "process "+task.Type(), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(system, semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName(queue),
				semconv.MessagingMessageID(id), attrNamespace.String(task.Type()), attrAttempt.Int(retried+1)))
		return ctx, func(r dedup.Run, d dedup.Decision, err error) {
			defer span.End()
			outcome := string(d)
			switch {
			case r.Key == (dedup.Key{}):
				outcome = "bad_payload"
			case d == "":
				outcome = "error" // the claim failed: Redis trouble
			}
			span.SetAttributes(attrOutcome.String(outcome))
			if r.Key != (dedup.Key{}) {
				span.SetAttributes(attrKey.String(r.Key.String()), attrIncarnation.Int(r.Incarnation))
			}
			if (d == dedup.Duplicate || d == dedup.Conflict) && insp != nil && r.Key.TaskID() != id {
				if info, ierr := insp.GetTaskInfo(queue, r.Key.TaskID()); ierr == nil {
					t.linkMet(span, d, info.Headers)
				}
			}
			if err != nil && d != dedup.InProgress { // in progress is a wait, not a failure
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
		}
	}
}

// linkMet links span to the trace in the headers of the task a repeat met.
func (t *Tracing) linkMet(span trace.Span, d dedup.Decision, met map[string]string) {
	if len(met) == 0 {
		return
	}
	sc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(met)))
	if sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrLink.String(string(d))}})
	}
}
