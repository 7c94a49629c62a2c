package dedup_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// racingStore answers its first Status with what the record held before
// the job ran, as a read that crossed the worker's completion would: run
// completes the job in between.
type racingStore struct {
	storage.Store
	run  func()
	done bool
}

func (s *racingStore) Status(ctx context.Context, k dedup.Key) (storage.Record, error) {
	rec, err := s.Store.Status(ctx, k)
	if !s.done {
		s.done = true
		s.run()
	}
	return rec, err
}

// gate holds every command of the client it hooks, once shut, until open
// is closed.
type gate struct {
	shut atomic.Bool
	open chan struct{}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if g.shut.Load() {
			<-g.open
		}
		return next(ctx, cmd)
	}
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// completionRace sets up a job whose completion lands between a Producer's
// read of its record and its read of the task. The Producer's own client
// is held at gate until the job is done.
func completionRace(t *testing.T, id string) (*dedup.Producer, dedup.Job, *gate) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	job := invoices.Job(Invoice{ID: id})
	srv, _ := dedup.NewServer(rdb, store, asynq.Config{}, dedup.MiddlewareOptions{})
	t.Cleanup(func() { srv.Shutdown(ctx) })
	insp := asynq.NewInspectorFromRedisClient(rdb)
	g := &gate{open: make(chan struct{})}
	rs := &racingStore{Store: store, run: func() {
		defer close(g.open)
		if err := srv.Start(dedup.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
			return "sent " + i.ID, nil
		})); err != nil {
			t.Error(err)
			return
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if info, err := insp.GetTaskInfo(job.Queue, job.Key.TaskID()); err == nil && info.State == asynq.TaskStateCompleted {
				return
			}
		}
		t.Error("the job did not complete")
	}}
	prdb := redis.NewClient(rdb.Options())
	t.Cleanup(func() { prdb.Close() })
	prdb.AddHook(g)
	producer, err := dedup.NewProducer(prdb, rs, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Enqueue(ctx, job); err != nil {
		t.Fatal(err)
	}
	return producer, job, g
}

// A job that completes between Wait's two reads is reported done with its
// result, never done without it.
func TestWaitAcrossCompletion(t *testing.T) {
	t.Parallel()
	producer, job, _ := completionRace(t, "inv-wait-race")
	st, err := producer.Wait(context.Background(), job, 10*time.Second)
	if err != nil || st.State != dedup.StatusDone || st.Result == nil {
		t.Fatalf("Wait: %s, result %v (%v); want done with its result", st.State, st.Result, err)
	}
}

// Status reads the task and the record side by side; a record read before
// the worker recorded completion is read again once the task is seen done.
func TestStatusAcrossCompletion(t *testing.T) {
	t.Parallel()
	producer, job, g := completionRace(t, "inv-status-race")
	g.shut.Store(true) // the task is read only after the job is done
	st, err := producer.Status(context.Background(), job.Key)
	if err != nil || st.State != dedup.StatusDone || st.Result == nil {
		t.Fatalf("Status: %s, result %v (%v); want done with its result", st.State, st.Result, err)
	}
}

// Wait with a context that ended returns its error, as Status does, not an
// unknown status; with one that ends while it waits, the same. Its own
// timeout is no error: the status says where the job is.
func TestWaitHonoursTheContext(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	p := oncetest.NewProducer(t, rdb, nil, dedup.ProducerOptions{})
	kind := dedup.Define(dedup.Spec[note]{Type: "wait:ctx", ID: func(n note) string { return n.ID }})
	job := kind.Job(note{ID: "w-1"})
	if _, err := p.Enqueue(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if st, err := p.Wait(cancelled, job, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %+v %v, want context.Canceled", st, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if st, err := p.Wait(short, job, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context ending while waiting: %+v %v, want context.DeadlineExceeded", st, err)
	}
	if st, err := p.Wait(context.Background(), job, 50*time.Millisecond); err != nil || st.State != dedup.StatusPending {
		t.Errorf("Wait's own timeout: %+v %v, want pending and no error", st, err)
	}
}
