package dedup_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/redistest"
)

// A task enqueued the Producer's way, with the key as its asynq task id and
// no key header, runs under that key: the worker reads it from the task id.
func TestMiddlewareKeyFromTaskID(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	s, _ := newStore(t, rdb, dedup.Options{})
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

// A record written by an older worker holds the hex fingerprint; a newer
// producer's task carries base64url. Same payload: no Mismatch, it runs.
func TestMiddlewareAcceptsOldFingerprintSpelling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), dedup.Options{})
	payload := []byte(`{"payment_id":"pmt-9","amount":100}`)
	k, fp, err := dedup.Derive("payment:charge", payload, "pmt-9", nil)
	if err != nil {
		t.Fatal(err)
	}
	canon, _ := dedup.Canonical(payload)
	sum := sha256.Sum256(canon)
	old := hex.EncodeToString(sum[:])
	flipped := old[:63] + map[bool]string{true: "1", false: "0"}[old[63] == '0']
	if !dedup.SameFingerprint(old, fp) || dedup.SameFingerprint(flipped, fp) {
		t.Fatalf("SameFingerprint(%s | %s, %s) is wrong", old, flipped, fp)
	}
	c, err := s.Claim(ctx, k, old, time.Minute) // the old worker, which then failed
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatal(c, err)
	}
	if err := s.Release(ctx, c.Hold, "boom"); err != nil {
		t.Fatal(err)
	}
	m := newMiddleware(t, s, dedup.MiddlewareOptions{})
	var e effect
	task := asynq.NewTaskWithHeaders("payment:charge", payload, map[string]string{dedup.HeaderKey: k.String(), dedup.HeaderFingerprint: fp})
	if err := m.Wrap(e.handler("ok")).ProcessTask(ctx, task); err != nil {
		t.Fatalf("retry with the new fingerprint spelling: %v", err)
	}
	if e.n.Load() != 1 {
		t.Fatalf("effect ran %d times, want 1", e.n.Load())
	}
	// Another payload under the same key is still a mismatch.
	other := asynq.NewTaskWithHeaders("payment:charge", payload, map[string]string{dedup.HeaderKey: k.String(), dedup.HeaderFingerprint: "x" + fp[1:]})
	if err := m.Wrap(e.handler("ok")).ProcessTask(ctx, other); err == nil || e.n.Load() != 1 {
		t.Fatalf("other fingerprint: %v, effect %d; want a mismatch and no run", err, e.n.Load())
	}
}

func TestParseFingerprint(t *testing.T) {
	t.Parallel()
	fp, err := dedup.Hash([]byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(`{"a":1}`))
	for _, s := range []string{fp, hex.EncodeToString(sum[:])} {
		if got, err := dedup.ParseFingerprint(s); err != nil || got != sum {
			t.Errorf("ParseFingerprint(%s) = %x, %v; want %x", s, got, err, sum)
		}
	}
	for _, bad := range []string{"", "fp1", fp[:42], fp + "A", "!" + fp[1:], "g" + hex.EncodeToString(sum[:])[1:]} {
		if _, err := dedup.ParseFingerprint(bad); err == nil {
			t.Errorf("ParseFingerprint(%q) accepted", bad)
		}
	}
	if dedup.SameFingerprint("fp1", "fp2") || !dedup.SameFingerprint("fp1", "fp1") {
		t.Error("SameFingerprint on non-fingerprints must compare strings")
	}
}
