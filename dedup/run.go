package dedup

import (
	"context"

	"github.com/hibiken/asynq"
)

// Run is what the middleware knows of the delivery a handler runs.
type Run struct {
	// Key is the job's idempotency key, as the middleware claimed it.
	Key Key
	// Fingerprint of the job's content ("" when the task carries none).
	Fingerprint string
	// Incarnation is which life of the key the job is: 1, or more after
	// earlier jobs of the key failed for good. Retries keep it.
	Incarnation int
	// Attempt counts the runs of the key's record: 1 for the first. A
	// failed record is kept for the store's FailedTTL, so the first run of a
	// later incarnation may count on from the failed one's.
	Attempt int
	// Downstream is the key to pass downstream (a gateway's
	// Idempotency-Key, a Message-ID), so a crash between the effect and
	// the completion does not double the effect where the downstream
	// dedups: the key for the first incarnation, "namespace/id#n" from the
	// second on, so a new incarnation is a new request and not a replay of
	// the one that failed for good (payment:charge/pmt-1#2).
	Downstream string
}

type runKey struct{}

func withRun(ctx context.Context, r Run) context.Context {
	return context.WithValue(ctx, runKey{}, r)
}

// RunFromContext returns the run the middleware (or Handle, outside it)
// put in a handler's ctx.
func RunFromContext(ctx context.Context) (Run, bool) {
	r, ok := ctx.Value(runKey{}).(Run)
	return r, ok
}

// runOf is the one key rule of the worker: the key and fingerprint the
// producer put on t (its task id or header), else the type's key rule
// (o.Key: what the type's Spec gives the payload), else the content hash;
// with the incarnation from t's header. An error is a bad payload.
func runOf(ctx context.Context, t *asynq.Task, o typeOptions) (Run, error) {
	ns := t.Type()
	k, fp, ok, err := taskKeyOf(ctx, t, ns)
	switch {
	case ok:
	case o.Key != nil:
		k, fp, err = o.Key(t.Payload())
	default:
		k, fp, err = derive(ns, t.Payload(), "", o.Volatile)
	}
	if err != nil {
		return Run{}, err
	}
	n, err := parseIncarnation(t.Headers())
	if err != nil {
		return Run{}, err
	}
	return Run{Key: k, Fingerprint: fp, Incarnation: n, Attempt: 1, Downstream: downstream(k, n)}, nil
}
