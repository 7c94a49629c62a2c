package observe_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/observe"
)

func TestObserverLogsAndCounts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := observe.NewMetrics(reg)
	core, logs := observer.New(zapcore.DebugLevel)
	obs := m.Observer(zap.New(core), "worker")
	k := dedup.Key{Namespace: "payment:charge", ID: "pmt-1"}
	ctx := context.Background()
	for _, d := range []dedup.Event{
		{Op: "claim", Key: k, Outcome: dedup.Acquired},
		{Op: "claim", Key: k, Outcome: "duplicate", Reason: "done at x"},
		{Op: "complete", Key: k, Outcome: "lease_lost"},
		{Op: "claim", Key: k, Outcome: "error", Reason: "connection refused"},
		{Op: "extend", Key: k, Outcome: "extended"},
	} {
		obs(ctx, d)
	}
	levels := map[string]zapcore.Level{}
	for _, e := range logs.All() {
		levels[e.ContextMap()["outcome"].(string)] = e.Level
		if e.ContextMap()["key"] != "pmt-1" || e.ContextMap()["namespace"] != "payment:charge" {
			t.Errorf("log line without key fields: %v", e.ContextMap())
		}
	}
	want := map[string]zapcore.Level{"acquired": zapcore.DebugLevel, "duplicate": zapcore.InfoLevel,
		"lease_lost": zapcore.InfoLevel, "error": zapcore.WarnLevel}
	if len(levels) != len(want) {
		t.Fatalf("logged %v, want %v (heartbeats are not logged)", levels, want)
	}
	for o, l := range want {
		if levels[o] != l {
			t.Errorf("%s logged at %v, want %v", o, levels[o], l)
		}
	}
	exp := `
# HELP onceq_lease_lost_total Claims a worker lost to another worker (its writes were fenced out).
# TYPE onceq_lease_lost_total counter
onceq_lease_lost_total{key_namespace="payment:charge"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "onceq_lease_lost_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "onceq_dedup_decisions_total"); n != 4 {
		t.Fatalf("%d decision series, want 4", n)
	}
}

// A failed liveness write is counted each time and logged at warn once per
// 10 s; a part that is off in this setup is an info line, never an error.
func TestObserverLivenessAndOff(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := observe.NewMetrics(reg)
	core, logs := observer.New(zapcore.DebugLevel)
	obs := m.Observer(zap.New(core), "worker")
	ctx := context.Background()
	for range 5 {
		obs(ctx, dedup.Event{Op: "liveness", Outcome: "error", Reason: "OOM command not allowed"})
	}
	obs(ctx, dedup.Event{Op: "recover", Outcome: "off", Reason: "on Redis Cluster"})
	exp := `
# HELP onceq_liveness_refresh_failures_total Failed writes of this worker's liveness key (Redis down or refusing writes); while they fail, other workers may take it for dead once writes come back.
# TYPE onceq_liveness_refresh_failures_total counter
onceq_liveness_refresh_failures_total 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "onceq_liveness_refresh_failures_total"); err != nil {
		t.Fatal(err)
	}
	var warns, infos int
	for _, e := range logs.All() {
		switch e.Level {
		case zapcore.WarnLevel:
			warns++
		case zapcore.InfoLevel:
			infos++
		}
	}
	if warns != 1 || infos != 1 || logs.Len() != 2 {
		t.Errorf("%d warn and %d info lines of %d, want one of each", warns, infos, logs.Len())
	}
	if n := testutil.CollectAndCount(reg, "onceq_dedup_decisions_total"); n != 0 {
		t.Errorf("%d decision series, want none: neither is a decision", n)
	}
}

func TestHandlerDuration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := observe.NewMetrics(reg)
	ok := m.HandlerDuration(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	bad := m.HandlerDuration(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("x") }))
	skip := m.HandlerDuration(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return asynq.SkipRetry }))
	task := asynq.NewTask("email:send", nil)
	_ = ok.ProcessTask(context.Background(), task)
	_ = bad.ProcessTask(context.Background(), task)
	_ = skip.ProcessTask(context.Background(), task)
	func() {
		defer func() { recover() }()
		m.HandlerDuration(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("boom") })).ProcessTask(context.Background(), task)
	}()
	if n := testutil.CollectAndCount(reg, "onceq_handler_duration_seconds"); n != 4 {
		t.Fatalf("%d handler series (ok, error, rejected, panic), want 4", n)
	}
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	log, err := observe.NewLogger("production", "info", &b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", zap.String("k", "v"))
	log.Debug("hidden")
	if !strings.HasPrefix(b.String(), "{") || !strings.Contains(b.String(), `"k":"v"`) || strings.Contains(b.String(), "hidden") {
		t.Fatalf("production log: %s", b.String())
	}
	if _, err := observe.NewLogger("production", "loud", &b); err == nil {
		t.Fatal("bad level accepted")
	}
}

// Zero gives every counter of a side a series before its first event.
func TestZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := observe.NewMetrics(reg)
	m.Zero("worker", []string{"email:send", "payment:charge"})
	exp := `
# HELP onceq_lease_lost_total Claims a worker lost to another worker (its writes were fenced out).
# TYPE onceq_lease_lost_total counter
onceq_lease_lost_total{key_namespace="email:send"} 0
onceq_lease_lost_total{key_namespace="payment:charge"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "onceq_lease_lost_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "onceq_dedup_decisions_total"); n != 22 {
		t.Fatalf("%d decision series, want 2 namespaces x 11 worker outcomes (orphaned and lease_expired among them)", n)
	}
}
