// Package observe logs and counts what onceq decides: every deduplication
// decision (through a dedup.Observer), handler durations, and queue sizes.
package observe

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// Metrics are onceq's Prometheus collectors.
type Metrics struct {
	decisions *prometheus.CounterVec
	leaseLost *prometheus.CounterVec
	handler   *prometheus.HistogramVec
}

// NewMetrics registers onceq's collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_dedup_decisions_total",
			Help: "Deduplication decisions by side (producer, worker, api), key namespace and outcome.",
		}, []string{"side", "namespace", "outcome"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_lease_lost_total",
			Help: "Claims a worker lost to another worker (its writes were fenced out).",
		}, []string{"namespace"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "onceq_handler_duration_seconds",
			Help:    "Handler run time by task type and outcome (ok, error, panic); duplicates never run.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"type", "outcome"}),
	}
	reg.MustRegister(m.decisions, m.leaseLost, m.handler)
	return m
}

// Observer logs and counts every decision of one side. Decisions that stop
// or delay a job are logged once at info, errors at warn, the hot path
// (claims, completions) at debug. Payloads are never logged.
func (m *Metrics) Observer(log *zap.Logger, side string) dedup.Observer {
	return func(ctx context.Context, d dedup.Decision) {
		if d.Op == dedup.OpExtend && d.Outcome == dedup.OutcomeExtended {
			return // heartbeats: neither news nor a decision
		}
		m.decisions.WithLabelValues(side, d.Key.Namespace, string(d.Outcome)).Inc()
		if d.Outcome == dedup.OutcomeLeaseLost {
			m.leaseLost.WithLabelValues(d.Key.Namespace).Inc()
		}
		lvl := zap.DebugLevel
		switch {
		case d.Outcome == dedup.OutcomeError:
			lvl = zap.WarnLevel
		case d.Outcome.Blocks():
			lvl = zap.InfoLevel
		}
		if ce := log.Check(lvl, "dedup decision"); ce != nil {
			ce.Write(zap.String("side", side), zap.String("op", string(d.Op)),
				zap.String("namespace", d.Key.Namespace), zap.String("key", d.Key.ID),
				zap.String("outcome", string(d.Outcome)), zap.String("reason", d.Reason))
		}
	}
}

// HandlerDuration is an asynq middleware timing the handler it wraps. Put it
// inside the dedup middleware so only real runs are timed.
func (m *Metrics) HandlerDuration(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) (err error) {
		start := time.Now()
		outcome := "panic"
		defer func() {
			m.handler.WithLabelValues(t.Type(), outcome).Observe(time.Since(start).Seconds())
		}()
		err = next.ProcessTask(ctx, t)
		outcome = runOutcome(err)
		return err
	})
}

// runOutcome names how a handler run ended: ok, rejected (not retried) or error.
func runOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, asynq.SkipRetry):
		return "rejected"
	}
	return "error"
}
