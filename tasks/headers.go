package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// Task headers. Every constructor sets the fingerprint; the key travels as
// the asynq task id, and the Producer adds the key header only when it does
// not use the key as the task id. So a worker knows the key and fingerprint
// the producer decided on, including an explicit key (an Idempotency-Key
// header) that the payload alone cannot show.
const (
	HeaderKey         = dedup.HeaderKey
	HeaderFingerprint = dedup.HeaderFingerprint
)

// ErrInvalid is wrapped by every constructor and handler error caused by a
// payload that can never succeed (bad address, traversal path, bad amount).
// Handlers also wrap asynq.SkipRetry with it, so asynq archives the task.
var ErrInvalid = errors.New("invalid payload")

// newJob marshals payload and builds its Job with the key and fingerprint
// dedup.Derive gives it.
func newJob(typ string, payload any, explicit, queue string) (Job, error) {
	b, err := marshal(payload)
	if err != nil {
		return Job{}, fmt.Errorf("tasks: new %s: %w: %v", typ, ErrInvalid, err)
	}
	key, fp, err := dedup.Derive(typ, b, explicit, dedup.VolatileFields(payload))
	if err != nil {
		return Job{}, fmt.Errorf("tasks: new %s: %w: %w", typ, ErrInvalid, err)
	}
	task := asynq.NewTaskWithHeaders(typ, b, map[string]string{HeaderFingerprint: fp})
	return Job{Task: task, Key: key, Fingerprint: fp, Queue: queue, Unique: DefaultUniqueWindow}, nil
}

// withKeyHeader returns j's task with the key in HeaderKey when the task id
// will not carry it (no unique window, or a key outside the task type's
// namespace), which dedup.TaskKey reads; else the task as it is. A rebuilt
// task loses per-task asynq options; constructors set none.
func withKeyHeader(j Job) *asynq.Task {
	h := j.Task.Headers()
	if (j.Unique > 0 && j.Key.Namespace == j.Task.Type()) || h[HeaderKey] != "" {
		return j.Task
	}
	with := make(map[string]string, len(h)+1)
	maps.Copy(with, h)
	with[HeaderKey] = j.Key.String()
	return asynq.NewTaskWithHeaders(j.Task.Type(), j.Task.Payload(), with)
}

// marshal is json.Marshal without HTML escaping, so payloads read naturally in
// the dashboard ("<" stays "<" in an email body).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decodePayload decodes a task payload strictly into v. A payload that does
// not decode will not decode on retry either, so the error skips retries.
func decodePayload(t *asynq.Task, v any) error {
	if err := Decode(t.Payload(), v); err != nil {
		return fmt.Errorf("tasks: %s: decode payload: %w: %w", t.Type(), err, asynq.SkipRetry)
	}
	return nil
}

// withResult runs a handler's process and hands its result, as JSON, to the
// dedup middleware, which stores it and replays it to duplicates.
func withResult[R any](ctx context.Context, t *asynq.Task, process func(context.Context, *asynq.Task) (R, error)) error {
	res, err := process(ctx, t)
	if err != nil {
		return err
	}
	b, err := marshal(res)
	if err != nil {
		return err
	}
	dedup.SetResult(ctx, b)
	return nil
}

// permanent marks err as one asynq must not retry.
func permanent(err error) error {
	return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
}

// taskKey returns the idempotency key to pass downstream: the one the
// middleware claimed; outside the middleware, the one the producer put on
// the task (task id or header); else the one the constructor would derive.
// So the downstream key is the same however the handler is run.
func taskKey(ctx context.Context, t *asynq.Task, explicit string, volatile []string) (dedup.Key, error) {
	if k, ok := dedup.KeyFromContext(ctx); ok {
		return k, nil
	}
	// A header from another namespace could steer the downstream key onto
	// another task's effects; ignore it and derive instead.
	if k, _, ok, err := dedup.TaskKey(ctx, t, t.Type()); ok && err == nil && k.Namespace == t.Type() {
		return k, nil
	}
	k, _, err := dedup.Derive(t.Type(), t.Payload(), explicit, volatile)
	if err != nil {
		return dedup.Key{}, permanent(fmt.Errorf("tasks: %s: %w: %w", t.Type(), ErrInvalid, err))
	}
	return k, nil
}

func logger(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}
