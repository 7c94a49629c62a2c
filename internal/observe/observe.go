// Package observe logs and counts what onceq decides: every deduplication
// decision (through a dedup.Observer), handler durations, and queue sizes.
package observe

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// keyNamespace labels an idempotency key's namespace. Not "namespace":
// Prometheus renames that to exported_namespace on every Kubernetes target.
const keyNamespace = "key_namespace"

// Metrics are onceq's Prometheus collectors.
type Metrics struct {
	decisions *prometheus.CounterVec
	leaseLost *prometheus.CounterVec
	handler   *prometheus.HistogramVec
	depUp     *prometheus.GaugeVec
	build     *prometheus.GaugeVec
	liveFail  prometheus.Counter
	// liveWarned is when a failed liveness write was last logged (Unix ns).
	liveWarned atomic.Int64
}

// liveWarnEvery bounds the warn lines of failed liveness writes: the
// refresh retries every third of the TTL while Redis refuses writes.
const liveWarnEvery = 10 * time.Second

// NewMetrics registers onceq's collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_dedup_decisions_total",
			Help: "Deduplication decisions by side (producer, worker, api), key namespace and outcome.",
		}, []string{"side", keyNamespace, "outcome"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_lease_lost_total",
			Help: "Claims a worker lost to another worker (its writes were fenced out).",
		}, []string{keyNamespace}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "onceq_handler_duration_seconds",
			Help:    "Handler run time by task type and outcome (ok, error, panic); duplicates never run.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"type", "outcome"}),
		depUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "onceq_dependency_up",
			Help: "1 while an optional dependency (postgres) answers; its task types are not ready while 0.",
		}, []string{"dependency"}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "onceq_build_info",
			Help: "1, labelled with the running build's version and commit.",
		}, []string{"version", "commit"}),
		liveFail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceq_liveness_refresh_failures_total",
			Help: "Failed writes of this worker's liveness key (Redis down or refusing writes); while they fail, other workers may take it for dead once writes come back.",
		}),
	}
	reg.MustRegister(m.decisions, m.leaseLost, m.handler, m.depUp, m.build, m.liveFail)
	return m
}

// Build exports onceq_build_info for version and commit.
func (m *Metrics) Build(version, commit string) { m.build.WithLabelValues(version, commit).Set(1) }

// DependencyUp sets whether the optional dependency name answers.
func (m *Metrics) DependencyUp(name string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.depUp.WithLabelValues(name).Set(v)
}

// sideOutcomes are the outcomes each side reports, started at zero so that
// rate() and alerts see a series before the first event.
var sideOutcomes = map[string][]dedup.Decision{
	"worker": {dedup.Acquired, dedup.Duplicate, dedup.InProgress, dedup.Conflict,
		storage.Completed, storage.Released, storage.LeaseLost, storage.BadPayload, storage.Orphaned, storage.LeaseExpired, storage.Errored},
	"producer": {dedup.Enqueued, dedup.Duplicate, dedup.Conflict, dedup.Throttled, storage.Reset, storage.Errored},
	// The API's own: Idempotency-Key claims (namespace "http") and refusals
	// before the Producer (a type's namespace).
	"api": {dedup.Acquired, dedup.Duplicate, dedup.InProgress, dedup.Conflict, storage.BadPayload, storage.Errored},
}

// Zero starts the counters of side for each key namespace at zero (the
// worker's lease-lost count among them).
func (m *Metrics) Zero(side string, namespaces []string) {
	for _, ns := range namespaces {
		for _, o := range sideOutcomes[side] {
			m.decisions.WithLabelValues(side, ns, string(o))
		}
		if side == "worker" {
			m.leaseLost.WithLabelValues(ns)
		}
	}
}

// Observer logs and counts every decision of one side. Decisions that stop
// or delay a job are logged once at info, errors at warn, the hot path
// (claims, completions) at debug. Payloads are never logged. A failed
// liveness write is counted on its own and logged at warn at most every
// 10 s; a part that is off in this setup is one info line.
func (m *Metrics) Observer(log *zap.Logger, side string) dedup.Observer {
	return func(ctx context.Context, d dedup.Event) {
		switch {
		case d.Op == "extend" && d.Outcome == storage.Extended:
			return // heartbeats: neither news nor a decision
		case d.Op == "liveness":
			m.liveFail.Inc()
			now := time.Now().UnixNano()
			if last := m.liveWarned.Load(); now-last >= int64(liveWarnEvery) && m.liveWarned.CompareAndSwap(last, now) {
				log.Warn("liveness key not written", zap.String("side", side), zap.String("reason", d.Reason))
			}
			return
		case d.Outcome == storage.Off:
			log.Info("off in this setup", zap.String("side", side), zap.String("op", d.Op), zap.String("reason", d.Reason))
			return
		}
		m.decisions.WithLabelValues(side, d.Key.Namespace, string(d.Outcome)).Inc()
		if d.Outcome == storage.LeaseLost {
			m.leaseLost.WithLabelValues(d.Key.Namespace).Inc()
		}
		lvl := zap.DebugLevel
		switch {
		case d.Outcome == storage.Errored, d.Op == "reset", d.Op == "purge":
			lvl = zap.WarnLevel // an operator's reset or purge is audited
		case blocks(d.Outcome):
			lvl = zap.InfoLevel
		}
		if ce := log.Check(lvl, "dedup decision"); ce != nil {
			ce.Write(zap.String("side", side), zap.String("op", string(d.Op)),
				zap.String("namespace", d.Key.Namespace), zap.String("key", d.Key.ID),
				zap.String("outcome", string(d.Outcome)), zap.String("reason", d.Reason))
		}
	}
}

// blocks reports whether an outcome stops or delays a job: those are the
// decisions worth an info line, the rest are the hot path.
func blocks(outcome dedup.Decision) bool {
	switch outcome {
	case dedup.Duplicate, dedup.InProgress, dedup.Conflict, storage.LeaseLost, dedup.Throttled,
		storage.BadPayload, storage.Orphaned, storage.LeaseExpired:
		return true
	}
	return false
}

// HandlerDuration is an asynq middleware timing the handler it wraps. Put it
// inside the dedup middleware so only real runs are timed.
func (m *Metrics) HandlerDuration(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) (err error) {
		start := time.Now()
		outcome := "panic"
		defer func() {
			observe(ctx, m.handler.WithLabelValues(t.Type(), outcome), time.Since(start).Seconds())
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
