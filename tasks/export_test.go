package tasks

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"maps"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// The task headers the Producer writes: the wire format between producer
// and worker, which these tests pin.
const (
	HeaderKey         = "onceq-key"
	HeaderFingerprint = "onceq-fp"
	HeaderIncarnation = "onceq-inc"
)

// ContentID is the id of a job keyed by its content: "~" and the hex
// SHA-256 of its canonical payload.
func ContentID(sum [32]byte) string { return "~" + hex.EncodeToString(sum[:]) }

// process runs fn as its handler does (dedup.Handle: decode, validate,
// run) on task and returns fn's result, which outside the middleware is
// recorded nowhere.
func process[P, R any](ctx context.Context, kind *dedup.Typed[P], fn func(context.Context, P) (R, error), task *asynq.Task) (R, error) {
	var got R
	err := dedup.Handle(kind, func(ctx context.Context, p P) (R, error) {
		r, err := fn(ctx, p)
		got = r
		return r, err
	}).ProcessTask(ctx, task)
	return got, err
}

func (h EmailHandler) process(ctx context.Context, t *asynq.Task) (EmailResult, error) {
	return process(ctx, Emails, h.send, t)
}

func (h SMSHandler) process(ctx context.Context, t *asynq.Task) (SMSResult, error) {
	return process(ctx, SMSes, h.send, t)
}

func (h ScanHandler) process(ctx context.Context, t *asynq.Task) (ScanResult, error) {
	return process(ctx, Scans, h.scan, t)
}

func (h PaymentHandler) process(ctx context.Context, t *asynq.Task) (Charge, error) {
	return process(ctx, Payments, h.charge, t)
}

func (h WebhookHandler) process(ctx context.Context, t *asynq.Task) (WebhookResult, error) {
	return process(ctx, Webhooks, h.route, t)
}

// behindMiddleware is h behind onceq's middleware on an in-memory Redis,
// so the key the middleware claims (from the task's headers) is the run's.
func behindMiddleware(t *testing.T, h asynq.Handler) asynq.Handler {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
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
	return mw.Wrap(h)
}

// keyed is task under the header key k, as a producer that chose k sends it.
func keyed(task *asynq.Task, k dedup.Key) *asynq.Task {
	h := maps.Clone(task.Headers())
	h[HeaderKey] = k.String()
	return asynq.NewTaskWithHeaders(task.Type(), task.Payload(), h)
}

// newJob is j and its error, for mustJob.
func newJob(j dedup.Job) (dedup.Job, error) { return j, j.Err }

// buildJob is kind's Job of p under the Idempotency-Key explicit, as a
// catalog builds it from a request.
func buildJob[P any](kind *dedup.Typed[P], p P, explicit string) (dedup.Job, error) {
	if explicit == "" || !kind.HeaderKey { // the key is not the request's to choose
		j := kind.Job(p)
		return j, j.Err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return dedup.Job{}, err
	}
	c, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		return dedup.Job{}, err
	}
	return c.Build(kind.Type, b, explicit, "")
}
