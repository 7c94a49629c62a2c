// Package tracing follows a onceq job with OpenTelemetry: from the enqueue
// (the Producer, the API) through the asynq task's headers to the worker's
// delivery, and on to its downstream calls. It plugs into the library's
// hooks (dedup.ProducerOptions.Trace, dedup.MiddlewareOptions.Trace), so
// the library itself links no tracing code.
//
// It is configured by the standard OTEL_* variables and is off, at no cost,
// when they name no exporter or endpoint (see New).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// scope names the instrumentation in every span.
const scope = "github.com/onceq/onceq/internal/observe/tracing"

// Options configures New.
type Options struct {
	// Service is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES says otherwise. Required.
	Service string
	// Log gets the SDK's own errors (a collector that does not answer).
	// Default: none.
	Log *zap.Logger
}

// Tracing is one process's tracer provider. A nil *Tracing is tracing
// turned off: its hooks are nil and its wrappers return what they wrap.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New starts tracing as the OTEL_* variables say, or returns nil (off) when
// OTEL_TRACES_EXPORTER is unset or "none" and no OTLP endpoint variable is
// set, or OTEL_SDK_DISABLED is true. Spans go over OTLP/HTTP protobuf
// (otlptracehttp, which reads OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS,
// _TIMEOUT, _COMPRESSION and their _TRACES_ forms itself); the sampler is
// the SDK's from OTEL_TRACES_SAMPLER and _ARG (default: parent-based, always
// on); batching follows OTEL_BSP_*. Trace context travels as W3C
// traceparent and tracestate. Only the exporter and protocol are read here,
// to refuse at start-up what this build does not link (the console
// exporter, gRPC) rather than drop spans silently.
func New(ctx context.Context, o Options) (*Tracing, error) {
	on, err := enabled(os.Getenv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	// Later sources win: the variables over the default service name.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(o.Service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if o.Log != nil {
		// The SDK's errors otherwise go to the standard logger, not JSON.
		log := o.Log.Named("otel")
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", zap.Error(err)) }))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tp: tp, tracer: tp.Tracer(scope), prop: propagation.TraceContext{}}, nil
}

// enabled says whether the variables ask for traces, and refuses an
// exporter or protocol this build lacks.
func enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	named := false
	for _, e := range strings.Split(getenv("OTEL_TRACES_EXPORTER"), ",") {
		switch e = strings.TrimSpace(e); e {
		case "", "none":
		case "otlp":
			named = true
		default:
			return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q: this build exports traces over otlp only (or none)", e)
		}
	}
	if !named && getenv("OTEL_TRACES_EXPORTER") != "" {
		return false, nil // "none"
	}
	if !named && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return false, nil
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return false, fmt.Errorf("tracing: OTLP protocol %q: this build sends http/protobuf only (port 4318)", protocol)
	}
	return true, nil
}

// Shutdown flushes the spans not yet exported; call it last.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// TracerProvider is for adapters that start spans of their own (SMTP).
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return noop.NewTracerProvider()
	}
	return t.tp
}

// Transport gives each request through rt a client span and the trace
// context in its headers (a gateway, Stripe).
func (t *Tracing) Transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.prop))
}

// Handler gives each request to h a server span, continuing the caller's
// trace context.
func (t *Tracing) Handler(h http.Handler, operation string) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, operation, otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.prop))
}
