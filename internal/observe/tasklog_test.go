package observe_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/observe"
)

// One info line per finished task with type, key, outcome, attempt and
// duration; failures at warn with the error; ONCEQ_TASK_LOG=false keeps
// only the failures.
func TestTaskLog(t *testing.T) {
	t.Parallel()
	task := asynq.NewTaskWithHeaders("email:send", []byte(`{}`), map[string]string{"onceq-key": "email:send/w-1"})
	boom := errors.New("smtp down")
	for _, every := range []bool{true, false} {
		core, logs := observer.New(zapcore.DebugLevel)
		log := zap.New(core)
		ok := behindMiddleware(t, observe.TaskLog(log, every)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
		failing := behindMiddleware(t, observe.TaskLog(log, every)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return boom })))
		if err := ok.ProcessTask(context.Background(), task); err != nil {
			t.Fatal(err)
		}
		if err := failing.ProcessTask(context.Background(), task); !errors.Is(err, boom) {
			t.Fatalf("the error was not passed on: %v", err)
		}
		entries := logs.AllUntimed()
		want := 1
		if every {
			want = 2
		}
		if len(entries) != want {
			t.Fatalf("every=%v: %d lines, want %d: %+v", every, len(entries), want, entries)
		}
		if every {
			info := entries[0]
			f := info.ContextMap()
			if info.Level != zapcore.InfoLevel || f["type"] != "email:send" || f["key"] != "email:send/w-1" ||
				f["outcome"] != "ok" || f["attempt"] != int64(1) || f["incarnation"] != int64(1) || f["duration"] == nil {
				t.Fatalf("info line %+v %v", info.Entry, f)
			}
		}
		warn := entries[len(entries)-1]
		if f := warn.ContextMap(); warn.Level != zapcore.WarnLevel || f["outcome"] != "error" || f["error"] != "smtp down" {
			t.Fatalf("failure line %+v %v", warn.Entry, f)
		}
	}
}

// The incarnation is the run's: the middleware reads it from the header.
func TestTaskLogIncarnation(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	h := behindMiddleware(t, observe.TaskLog(zap.New(core), true)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	task := asynq.NewTaskWithHeaders("payment:charge", nil, map[string]string{"onceq-key": "payment:charge/pmt-1", "onceq-inc": "3"})
	if err := h.ProcessTask(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	if entries := logs.TakeAll(); len(entries) != 1 || entries[0].ContextMap()["incarnation"] != int64(3) {
		t.Errorf("%+v, want incarnation 3", entries)
	}
}

// behindMiddleware is h behind onceq's middleware on an in-memory Redis.
func behindMiddleware(t *testing.T, h asynq.Handler) asynq.Handler {
	t.Helper()
	_, wrapped := behindMiddlewareStore(t, h)
	return wrapped
}

// behindMiddlewareStore is behindMiddleware with the store, for a test
// that plays another worker.
func behindMiddlewareStore(t *testing.T, h asynq.Handler) (storage.Store, asynq.Handler) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := dedup.NewMiddleware(store, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Shutdown(context.Background()) })
	return store, mw.Wrap(h)
}

// A worker fenced out (another took its key over while its handler ran)
// records nothing: its line says lease_lost, at warn, not ok.
func TestTaskLogLeaseLost(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	k := dedup.Key{Namespace: "email:send", ID: "w-2"}
	var store storage.Store
	store, h := behindMiddlewareStore(t, observe.TaskLog(zap.New(core), true)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		// The takeover a recoverer makes after this worker's lease ran out.
		if err := store.Forget(ctx, k); err != nil {
			return err
		}
		c, err := store.Claim(ctx, k, "", time.Minute, "")
		if err != nil || c.Outcome != dedup.Acquired {
			t.Errorf("takeover claim: %+v %v", c, err)
		}
		return nil
	})))
	task := asynq.NewTaskWithHeaders(k.Namespace, []byte(`{}`), map[string]string{"onceq-key": k.String()})
	if err := h.ProcessTask(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	entries := logs.TakeAll()
	if len(entries) != 1 {
		t.Fatalf("%d lines, want 1: %+v", len(entries), entries)
	}
	if f := entries[0].ContextMap(); entries[0].Level != zapcore.WarnLevel || f["outcome"] != "lease_lost" || f["key"] != k.String() {
		t.Fatalf("fenced-out line %+v %v, want outcome lease_lost at warn", entries[0].Entry, f)
	}
}
