package tasks_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/tasks"
)

// failForGood runs j's key as a worker whose last attempt failed would:
// the record released as failed, the task archived by asynq.
func failForGood(t *testing.T, store storage.Store, insp *asynq.Inspector, j dedup.Job, cause string) {
	t.Helper()
	ctx := context.Background()
	c, err := store.Claim(ctx, j.Key, j.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatal(c, err)
	}
	if err := store.Release(ctx, c.Hold, cause); err != nil {
		t.Fatal(err)
	}
	if err := insp.ArchiveTask(j.Queue, j.Key.TaskID()); err != nil {
		t.Fatal(err)
	}
}

func queueInfo(t *testing.T, insp *asynq.Inspector, q string) *asynq.QueueInfo {
	t.Helper()
	info, err := insp.GetQueueInfo(q)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// A payment declined for good frees its id: the same id, corrected, is
// the key's second incarnation, replacing the archived task in one step.
func TestFailedForGoodFreesTheKey(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, store, _ := newProducer(t, rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	first := payment(t, "pmt-fail-1", "acct-1", 4200)
	if o := enqueue(t, p, first, dedup.Enqueued); o.Incarnation != 1 {
		t.Fatalf("first enqueue: %+v", o)
	}
	failForGood(t, store, insp, first, "stripe: 402 card_error card_declined")

	fixed := payment(t, "pmt-fail-1", "acct-2", 4200) // another card: other content
	o := enqueue(t, p, fixed, dedup.Enqueued)
	if o.Incarnation != 2 || o.TaskID != first.Key.TaskID() {
		t.Fatalf("after the decline: %+v", o)
	}
	if q := queueInfo(t, insp, first.Queue); q.Archived != 0 || q.Pending != 1 {
		t.Fatalf("queue after the new incarnation: %d archived, %d pending; want 0 and 1", q.Archived, q.Pending)
	}
	info, err := insp.GetTaskInfo(first.Queue, first.Key.TaskID())
	if err != nil {
		t.Fatal(err)
	}
	if info.Headers[tasks.HeaderIncarnation] != "2" || string(info.Payload) != string(fixed.Task.Payload()) {
		t.Fatalf("the pending task is %s with headers %v; want the corrected payload as incarnation 2", info.Payload, info.Headers)
	}
	st, err := p.Status(context.Background(), first.Key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Incarnation != 2 || len(st.EarlierFailures) != 1 || st.EarlierFailures[0] == "" || st.State != dedup.StatusPending {
		t.Fatalf("status %+v; want pending incarnation 2 naming the first failure", st)
	}
	// While incarnation 2 waits, a repeat of it is a duplicate, and the
	// first content is a conflict again: only a failure frees the key.
	enqueue(t, p, fixed, dedup.Duplicate)
	enqueue(t, p, first, dedup.Conflict)
}

// A type that keeps failed keys refuses them for the unique window.
func TestKeepFailedRefusesTheKey(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, store, _ := newProducer(t, rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	j := payment(t, "pmt-keep-1", "acct-1", 4200)
	j.KeepFailed = true
	enqueue(t, p, j, dedup.Enqueued)
	failForGood(t, store, insp, j, "declined")
	if o := enqueue(t, p, j, dedup.Duplicate); o.State != dedup.StatusArchived {
		t.Fatalf("kept failed key: %+v", o)
	}
}

// Many producers at once meet one archived task: exactly one of them
// starts incarnation 2, and the queue holds one task of the key.
func TestNewIncarnationIsAtomic(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, store, _ := newProducer(t, rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	j := payment(t, "pmt-race-1", "acct-1", 4200)
	enqueue(t, p, j, dedup.Enqueued)
	failForGood(t, store, insp, j, "declined")

	const n = 16
	outs := make([]dedup.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], errs[i] = p.Enqueue(context.Background(), j) })
	}
	wg.Wait()
	enq := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch outs[i].Decision {
		case dedup.Enqueued:
			enq++
		case dedup.Duplicate:
		default:
			t.Fatalf("concurrent repeat %d: %+v", i, outs[i])
		}
	}
	q := queueInfo(t, insp, j.Queue)
	if enq != 1 || q.Pending != 1 || q.Archived != 0 {
		t.Fatalf("%d enqueued, %d pending, %d archived; want 1, 1, 0", enq, q.Pending, q.Archived)
	}
}

// A done job whose task was deleted (the dashboard's delete) is still
// done: the producer says duplicate, with the result, as the worker would.
func TestDeletedDoneTaskIsADuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, store, _ := newProducer(t, rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	j := payment(t, "pmt-deleted-1", "acct-1", 4200)
	enqueue(t, p, j, dedup.Enqueued)
	c, err := store.Claim(ctx, j.Key, j.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatal(c, err)
	}
	if err := store.Complete(ctx, c.Hold, []byte(`{"id":"ch_1"}`), 0); err != nil {
		t.Fatal(err)
	}
	if err := insp.DeleteTask(j.Queue, j.Key.TaskID()); err != nil {
		t.Fatal(err)
	}
	o := enqueue(t, p, j, dedup.Duplicate)
	if o.State != dedup.StatusDone || string(o.Result) != `{"id":"ch_1"}` {
		t.Fatalf("deleted done task: %+v", o)
	}
	if q := queueInfo(t, insp, j.Queue); q.Pending != 0 {
		t.Fatalf("%d pending tasks, want none", q.Pending)
	}
}

func catalogWith(t *testing.T, typ, policy string) *tasks.Catalog {
	t.Helper()
	r, err := tasks.ParseRepeats(typ + "=" + policy)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tasks.NewCatalog(tasks.Windows{OnRepeat: r})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func build(t *testing.T, c *tasks.Catalog, typ, payload string) dedup.Job {
	t.Helper()
	j, err := c.Build(typ, []byte(payload), "", "")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// replace: a repeat with other content swaps the pending job; the same
// content is a duplicate.
func TestReplacePolicy(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, _, _ := newProducer(t, rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	c := catalogWith(t, tasks.TypeEmail, "replace")
	a := build(t, c, tasks.TypeEmail, `{"id":"e-1","to":"a@x.io","subject":"Hi","body":"first"}`)
	b := build(t, c, tasks.TypeEmail, `{"id":"e-1","to":"a@x.io","subject":"Hi","body":"second"}`)
	if o := enqueue(t, p, a, dedup.Enqueued); o.Replaced {
		t.Fatalf("first enqueue says it replaced: %+v", o)
	}
	if o := enqueue(t, p, b, dedup.Enqueued); !o.Replaced {
		t.Fatalf("second body: %+v, want it to say it replaced the first", o)
	}
	enqueue(t, p, b, dedup.Duplicate)
	info, err := insp.GetTaskInfo(a.Queue, a.Key.TaskID())
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Payload) != string(b.Task.Payload()) || info.Headers[tasks.HeaderFingerprint] != b.Fingerprint {
		t.Fatalf("pending task %s, want the second body", info.Payload)
	}
	if q := queueInfo(t, insp, a.Queue); q.Pending != 1 {
		t.Fatalf("%d pending, want 1", q.Pending)
	}
	// Without the policy the same repeat is a conflict.
	plain := build(t, catalogWith(t, tasks.TypeSMS, "reject"), tasks.TypeEmail, `{"id":"e-1","to":"a@x.io","subject":"Hi","body":"third"}`)
	enqueue(t, p, plain, dedup.Conflict)
}

// debounce:D/M: every repeat swaps the payload and starts it D after
// itself, but never later than M after the first.
func TestDebouncePolicy(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, _, _ := newProducer(t, rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	c := catalogWith(t, tasks.TypeEmail, "debounce:2s/3s")
	mail := func(body string) dedup.Job {
		return build(t, c, tasks.TypeEmail, `{"id":"d-1","to":"a@x.io","subject":"Hi","body":"`+body+`"}`)
	}
	start := time.Now()
	for _, body := range []string{"one", "two", "three"} {
		enqueue(t, p, mail(body), dedup.Enqueued)
	}
	q := queueInfo(t, insp, tasks.QueueDefault)
	if q.Scheduled != 1 || q.Pending != 0 {
		t.Fatalf("%d scheduled, %d pending; want one scheduled job", q.Scheduled, q.Pending)
	}
	info, err := insp.GetTaskInfo(tasks.QueueDefault, mail("x").Key.TaskID())
	if err != nil {
		t.Fatal(err)
	}
	// asynq keeps process-at in whole seconds.
	if string(info.Payload) != string(mail("three").Task.Payload()) ||
		info.NextProcessAt.Before(start.Add(time.Second)) || info.NextProcessAt.After(start.Add(4*time.Second)) {
		t.Fatalf("scheduled %s at %v (start %v); want the last body about 2s on", info.Payload, info.NextProcessAt, start)
	}
}

// The record's done TTL, not asynq's retention, says how long done lasts:
// a completed task that outlived its record (asynq's janitor removes
// expired ones only every few seconds) no longer holds the key.
func TestCompletedTaskOutlivingItsRecordFreesTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, _, _ := newProducer(t, rdb)
	short, err := dedup.NewRedisStore(rdb, storage.Options{DoneTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	j := payment(t, "pmt-retained-1", "acct-1", 4200)
	j.WriteResult = true // kept for the dashboard (ONCEQ_KEEP_COMPLETED)
	enqueue(t, p, j, dedup.Enqueued)

	mw, err := dedup.NewMiddleware(short, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 4)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, LogLevel: asynq.ErrorLevel,
		Queues: map[string]int{j.Queue: 1}})
	mux := asynq.NewServeMux()
	mux.Use(mw.Wrap)
	mux.HandleFunc(tasks.TypePayment, func(context.Context, *asynq.Task) error { ran <- struct{}{}; return nil })
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); _ = mw.Shutdown(ctx) }()
	<-ran
	insp := asynq.NewInspectorFromRedisClient(rdb)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := short.Status(ctx, j.Key)
		info, ierr := insp.GetTaskInfo(j.Queue, j.Key.TaskID())
		if err == nil && rec.State == dedup.StatusUnknown && ierr == nil && info.State == asynq.TaskStateCompleted {
			break // the record is gone, the task is still retained
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %+v (%v), task %+v (%v)", rec, err, info, ierr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	enqueue(t, p, j, dedup.Enqueued)
	<-ran
	// The scan type's done record lasts its scan window, not 24 h.
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	if ttl := doneTTLs(c)[tasks.TypeScan]; ttl != tasks.DefaultFileScanWindow {
		t.Fatalf("scan done TTL %v, want %v", ttl, tasks.DefaultFileScanWindow)
	}
}

// successor, as ONCEQ_ON_REPEAT spells it: while the job has not started a
// repeat with other content replaces it, as replace does (the library's
// successor tests run the rest against a worker).
func TestSuccessorPolicyFromConfig(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p, _, _ := newProducer(t, rdb)
	c := catalogWith(t, tasks.TypeEmail, "successor")
	a := build(t, c, tasks.TypeEmail, `{"id":"s-1","to":"a@x.io","subject":"Hi","body":"first"}`)
	b := build(t, c, tasks.TypeEmail, `{"id":"s-1","to":"a@x.io","subject":"Hi","body":"second"}`)
	if a.Repeat.Policy != "successor" {
		t.Fatalf("job's policy %q, want successor", a.Repeat.Policy)
	}
	enqueue(t, p, a, dedup.Enqueued)
	if o := enqueue(t, p, b, dedup.Enqueued); !o.Replaced || o.State != dedup.StatusPending {
		t.Fatalf("second body: %+v, want it to replace the pending first", o)
	}
	enqueue(t, p, b, dedup.Duplicate)
}
