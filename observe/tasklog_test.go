package observe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/observe"
)

// One info line per finished task with type, key, outcome, attempt and
// duration; failures at warn with the error; ONCEQ_TASK_LOG=false keeps
// only the failures.
func TestTaskLog(t *testing.T) {
	t.Parallel()
	task := asynq.NewTaskWithHeaders("email:send", []byte(`{}`), map[string]string{dedup.HeaderKey: "email:send/w-1"})
	boom := errors.New("smtp down")
	for _, every := range []bool{true, false} {
		core, logs := observer.New(zapcore.DebugLevel)
		log := zap.New(core)
		ok := observe.TaskLog(log, every)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
		failing := observe.TaskLog(log, every)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return boom }))
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

// The incarnation comes from the middleware's context, else the header.
func TestTaskLogIncarnation(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	h := observe.TaskLog(zap.New(core), true)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	hdr := func(v string) map[string]string {
		return map[string]string{dedup.HeaderKey: "payment:charge/pmt-1", dedup.HeaderIncarnation: v}
	}
	for _, tt := range []struct {
		ctx  context.Context
		task *asynq.Task
		want int64
	}{
		{context.Background(), asynq.NewTaskWithHeaders("payment:charge", nil, hdr("3")), 3},
		{dedup.WithIncarnation(context.Background(), 2), asynq.NewTaskWithHeaders("payment:charge", nil, hdr("3")), 2},
		{context.Background(), asynq.NewTaskWithHeaders("payment:charge", nil, hdr("x")), 0},
	} {
		if err := h.ProcessTask(tt.ctx, tt.task); err != nil {
			t.Fatal(err)
		}
		entries := logs.TakeAll()
		if len(entries) != 1 || entries[0].ContextMap()["incarnation"] != tt.want {
			t.Errorf("%v: %+v, want incarnation %d", tt.task.Headers(), entries, tt.want)
		}
	}
}
