package tasks_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// decisions records what the producer observed; producers may be called
// from many goroutines.
type decisions struct {
	mu  sync.Mutex
	got []dedup.Event
}

func (d *decisions) observe(_ context.Context, x dedup.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, x)
}

func newProducer(t *testing.T, rdb redis.UniversalClient) (*dedup.Producer, storage.Store, *decisions) {
	t.Helper()
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := &decisions{}
	return oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{Observer: d.observe}), store, d
}

// mustJob(t)(tasks.NewX(...)) fails the test on a constructor error.
func mustJob(t *testing.T) func(dedup.Job, error) dedup.Job {
	return func(j dedup.Job, err error) dedup.Job {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
}

func enqueue(t *testing.T, p *dedup.Producer, j dedup.Job, want dedup.Decision) dedup.Outcome {
	t.Helper()
	o, err := p.Enqueue(context.Background(), j)
	if err != nil {
		t.Fatalf("enqueue %s: %v", j.Key, err)
	}
	if o.Decision != want {
		t.Fatalf("enqueue %s: %s (%s), want %s", j.Key, o.Decision, o.Reason, want)
	}
	return o
}

func TestWelcomeEmailTwice(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, _, d := newProducer(t, rdb)
	welcome := func() dedup.Job {
		return mustJob(t)(testenv.Job(tasks.Emails.Job(tasks.Email{To: "ada@example.com", Subject: "Welcome", Body: "Hi Ada", TraceID: time.Now().String()})))
	}
	first := enqueue(t, p, welcome(), dedup.Enqueued)
	second := enqueue(t, p, welcome(), dedup.Duplicate)
	if first.TaskID != taskIDOf(t, first.Key) || second.TaskID != first.TaskID || second.State != "pending" || second.Reason != "already accepted: pending" {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	if n, _ := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo(tasks.QueueDefault); n.Pending != 1 {
		t.Fatalf("%d pending tasks, want 1", n.Pending)
	}
	if len(d.got) != 2 || d.got[0].Outcome != "enqueued" || d.got[1].Outcome != "duplicate" {
		t.Fatalf("decisions %+v", d.got)
	}
}

// The seed's payment rules: the same payment id within 24 h is a duplicate,
// reported "already processed: done" once it ran; the same account and
// amount under another payment id within 60 s is throttled.
func TestPaymentRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, store, _ := newProducer(t, rdb)
	pay := func(id string, amount int64) dedup.Job {
		return mustJob(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: id, Account: "acct-1", Amount: amount, Currency: "EUR"})))
	}
	j := pay("pmt-20260628-001", 4200)
	enqueue(t, p, j, dedup.Enqueued)

	// A worker runs it (as the middleware would).
	c, err := store.Claim(ctx, j.Key, j.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatal(c, err)
	}
	if err := store.Complete(ctx, c.Hold, []byte(`{"charge_id":"ch_1"}`), 0); err != nil {
		t.Fatal(err)
	}
	dup := enqueue(t, p, pay("pmt-20260628-001", 4200), dedup.Duplicate)
	if dup.State != dedup.StatusDone || !strings.Contains(dup.Reason, "already processed: done") || string(dup.Result) != `{"charge_id":"ch_1"}` {
		t.Fatalf("duplicate payment: %+v", dup)
	}
	th := enqueue(t, p, pay("pmt-20260628-002", 4200), dedup.Throttled)
	if th.RetryAfter <= 0 || th.RetryAfter > tasks.DefaultPaymentRateWindow {
		t.Fatalf("throttled retry after %v", th.RetryAfter)
	}
	enqueue(t, p, pay("pmt-20260628-003", 4300), dedup.Enqueued) // another amount is another rule key
}

func TestScanJobs(t *testing.T) {
	t.Parallel()
	p, _, _ := newProducer(t, redistest.Client(t))
	scan := func(mode string) dedup.Job {
		return mustJob(t)(testenv.Job(tasks.Scans.Job(tasks.Scan{Path: "document.pdf", Mode: mode})))
	}
	enqueue(t, p, scan("malware"), dedup.Enqueued)
	enqueue(t, p, scan("full"), dedup.Enqueued) // different content: both run
	// The same scan inside the scan window is throttled, not a duplicate:
	// the window, not the job, refuses it.
	again := enqueue(t, p, scan("malware"), dedup.Throttled)
	if again.RetryAfter <= 0 || again.RetryAfter > tasks.DefaultFileScanWindow || again.TaskID != "" {
		t.Fatalf("identical scan inside the window: %+v", again)
	}
}

// The 30 s window on file_scan/file-123, on miniredis so time can jump: the
// window is plain Redis commands, not the point of a real-Redis test.
func TestFileScanWindow(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	p, _, _ := newProducer(t, rdb)
	scan := func(path string) dedup.Job {
		return mustJob(t)(testenv.Job(tasks.Scans.Job(tasks.Scan{Path: path, FileID: "file-123"})))
	}
	first := enqueue(t, p, scan("a.pdf"), dedup.Enqueued)
	inside := enqueue(t, p, scan("b.pdf"), dedup.Throttled)
	// A window refusal names no job: the caller could not read it anyway.
	if inside.TaskID != "" || strings.Contains(inside.Reason, first.Key) || inside.RetryAfter <= 0 || inside.RetryAfter > tasks.DefaultFileScanWindow {
		t.Fatalf("inside the window: %+v", inside)
	}
	mr.FastForward(tasks.DefaultFileScanWindow + time.Second)
	enqueue(t, p, scan("b.pdf"), dedup.Enqueued)
	// a.pdf's job has not run yet: once no window holds, its repeat meets
	// the pending job itself, a duplicate.
	mr.FastForward(tasks.DefaultFileScanWindow + time.Second)
	if dup := enqueue(t, p, scan("a.pdf"), dedup.Duplicate); dup.State != dedup.StatusPending {
		t.Fatalf("repeat of a pending scan after the window: %+v", dup)
	}
}

// A failed enqueue frees the windows it took, so the client's retry is not
// refused by its own first attempt.
func TestFailedEnqueueFreesWindow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	p, store, _ := newProducer(t, rdb)
	j := mustJob(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-x", Account: "acct-2", Amount: 100, Currency: "USD"})))
	// Make asynq's enqueue fail while the window reserve succeeds: a key of
	// the wrong type where asynq pushes pending tasks.
	if err := rdb.Set(context.Background(), "asynq:{critical}:pending", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(context.Background(), j); err == nil {
		t.Fatal("enqueue into a broken queue succeeded")
	}
	r, err := store.Reserve(context.Background(), j.Rules[0].Key, time.Minute, "probe")
	if err != nil || !r.Reserved {
		t.Fatalf("rate window still held after a failed enqueue: %+v %v", r, err)
	}
}

// The catalog's windows (ONCEQ_UNIQUE_WINDOW, ONCEQ_PAYMENT_ID_WINDOW) reach
// asynq as the task's retention.
func TestUniqueWindowOption(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, _, _ := newProducer(t, rdb)
	cat, err := tasks.NewCatalog(tasks.Windows{Unique: 90 * time.Minute, PaymentID: 48 * time.Hour, KeepCompleted: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ, payload string
		want         time.Duration
	}{
		{tasks.TypeEmail, `{"id":"w-1","to":"a@example.com","subject":"s","body":"b"}`, 90 * time.Minute},
		{tasks.TypePayment, `{"payment_id":"p-1","account":"a","amount":1,"currency":"EUR"}`, 48 * time.Hour},
	} {
		o := enqueue(t, p, mustJob(t)(cat.Build(c.typ, []byte(c.payload), "", "")), dedup.Enqueued)
		info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo(o.Queue, o.TaskID)
		if err != nil || info.Retention != c.want {
			t.Fatalf("%s: retention %v (%v), want %v", c.typ, info.Retention, err, c.want)
		}
	}
}

// The default policy sends the key as the task id only; without a unique
// window the key header goes along, so a worker still finds the key.
func TestProducerKeyHeaderOnlyWithoutTaskID(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, _, _ := newProducer(t, rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, unique := range []time.Duration{tasks.DefaultUniqueWindow, 0} {
		j := mustJob(t)(testenv.Job(tasks.Emails.Job(tasks.Email{To: "ada@example.com", Subject: "Hi", Body: unique.String()})))
		j.Unique = unique
		o := enqueue(t, p, j, dedup.Enqueued)
		info, err := insp.GetTaskInfo(j.Queue, o.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		key, hasKey := info.Headers[tasks.HeaderKey]
		if wantKey := unique == 0; hasKey != wantKey || hasKey && key != j.Key.String() ||
			info.Headers[tasks.HeaderFingerprint] != j.Fingerprint || (unique > 0) != (o.TaskID == j.Key.TaskID()) {
			t.Errorf("unique %v: task %s headers %v; want key header %v", unique, o.TaskID, info.Headers, wantKey)
		}
	}
}

// taskIDOf is the asynq task id the producer gives the job with key k.
func taskIDOf(t *testing.T, key string) string {
	t.Helper()
	k, err := dedup.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return k.TaskID()
}
