package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// A task enqueued the Producer's way, with the key as its asynq task id and
// no key header, runs under that key: the worker reads it from the task id.
func TestMiddlewareKeyFromTaskID(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	s, _ := newStore(t, rdb, storage.Options{})
	m := newMiddleware(t, s, dedup.MiddlewareOptions{})
	payload := []byte(`{"to":"a@x"}`) // no id: a derived key would be its hash
	_, fp, err := dedup.Derive("email:send", payload, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	task := asynq.NewTaskWithHeaders("email:send", payload, map[string]string{dedup.HeaderFingerprint: fp})
	const queue = "taskkey"
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(task, asynq.Queue(queue),
		asynq.TaskID(dedup.Key{Namespace: "email:send", ID: "welcome-1"}.TaskID()), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got := make(chan dedup.Key, 1)
	mux := asynq.NewServeMux()
	mux.Use(m.Wrap)
	mux.HandleFunc("email:send", func(ctx context.Context, _ *asynq.Task) error {
		k, _ := dedup.KeyFromContext(ctx)
		got <- k
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{queue: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case k := <-got:
		if k.String() != "email:send/welcome-1" {
			t.Fatalf("handler ran under %v, want the task id's key email:send/welcome-1", k)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the task never ran")
	}
}

func TestTaskKey(t *testing.T) {
	t.Parallel()
	hdr := map[string]string{dedup.HeaderKey: "payment:charge/pmt-1", dedup.HeaderFingerprint: "fp1"}
	k, fp, ok, err := dedup.TaskKey(context.Background(), asynq.NewTaskWithHeaders("payment:charge", nil, hdr), "payment:charge")
	if !ok || err != nil || k.String() != "payment:charge/pmt-1" || fp != "fp1" {
		t.Fatalf("from the header: %v %q %v %v", k, fp, ok, err)
	}
	// Outside an asynq server there is no task id; nothing to read.
	if _, _, ok, _ := dedup.TaskKey(context.Background(), asynq.NewTask("payment:charge", nil), "payment:charge"); ok {
		t.Fatal("a task without header or task id yielded a key")
	}
}
