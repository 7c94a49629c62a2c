package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// Task headers set by every constructor. They travel with the asynq task so a
// worker knows the key and fingerprint the producer decided on, including an
// explicit key (an Idempotency-Key header) that the payload alone cannot show.
// The Producer leaves the key header out when the task id carries the key.
const (
	HeaderKey         = dedup.HeaderKey
	HeaderFingerprint = dedup.HeaderFingerprint
)

// ErrInvalid is wrapped by every constructor and handler error caused by a
// payload that can never succeed (bad address, traversal path, bad amount).
// Handlers also wrap asynq.SkipRetry with it, so asynq archives the task.
var ErrInvalid = errors.New("invalid payload")

// ErrMalformed is wrapped by Decode's errors: the payload is not the
// expected JSON at all (syntax, unknown field, wrong type), as opposed to
// well-formed JSON whose content is refused. It wraps ErrInvalid.
var ErrMalformed = fmt.Errorf("%w: malformed JSON", ErrInvalid)

// newJob marshals payload and builds its Job with the key and fingerprint
// dedup.Derive gives it; the fingerprint is fpOf's instead when fpOf is
// not nil.
func newJob(typ string, payload, fpOf any, explicit, queue string) (Job, error) {
	b, err := marshal(payload)
	if err != nil {
		return Job{}, fmt.Errorf("tasks: new %s: %w: %v", typ, ErrInvalid, err)
	}
	key, fp, err := dedup.Derive(typ, b, explicit, dedup.VolatileFields(payload))
	if err != nil {
		return Job{}, fmt.Errorf("tasks: new %s: %w: %w", typ, ErrInvalid, err)
	}
	if fpOf != nil {
		pb, err := marshal(fpOf)
		if err != nil {
			return Job{}, fmt.Errorf("tasks: new %s: %w: %v", typ, ErrInvalid, err)
		}
		if _, fp, err = dedup.Derive(typ, pb, key.ID, nil); err != nil {
			return Job{}, fmt.Errorf("tasks: new %s: %w: %w", typ, ErrInvalid, err)
		}
	}
	task := asynq.NewTaskWithHeaders(typ, b, map[string]string{
		HeaderKey:         key.String(),
		HeaderFingerprint: fp,
	})
	return Job{Task: task, Key: key, Fingerprint: fp, Queue: queue, Unique: DefaultUniqueWindow}, nil
}

// leanTask is j's task as the Producer sends it under j.Key.TaskID()
// (holder is j.Key.String()): without HeaderKey when the worker reads the
// same key from the task id (dedup.TaskKey), which saves encoding, storing
// and decoding it per task. Every valid key comes back from its task id
// (dedup's FuzzTaskID), so a valid key stands in for decoding the id on each
// enqueue. The Job keeps the header, so its task enqueued some other way
// still carries its key. A rebuilt task has no per-task asynq options;
// constructors set none.
func leanTask(j Job, holder string) *asynq.Task {
	h := j.Task.Headers()
	if k, err := dedup.ParseKey(holder); err != nil || k != j.Key || k.Namespace != j.Task.Type() || h[HeaderKey] != holder {
		return j.Task
	}
	lean := make(map[string]string, len(h))
	for name, v := range h {
		if name != HeaderKey {
			lean[name] = v
		}
	}
	return asynq.NewTaskWithHeaders(j.Task.Type(), j.Task.Payload(), lean)
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

// taskKey returns the key to pass downstream (dedup.Key.Downstream): the
// key the middleware claimed; outside the middleware, the one the producer
// put on the task (task id or header); else the one the constructor would
// derive; with the incarnation the middleware read, else the task's
// HeaderIncarnation. So the downstream key is the same however the handler
// is run: one per incarnation, kept by its retries.
func taskKey(ctx context.Context, t *asynq.Task, explicit string, volatile []string) (string, error) {
	k, ok := dedup.KeyFromContext(ctx)
	if !ok {
		var err error
		if k, err = ownKey(ctx, t, explicit, volatile); err != nil {
			return "", err
		}
	}
	n, ok := dedup.IncarnationFromContext(ctx)
	if !ok {
		var err error
		if n, err = dedup.Incarnation(t.Headers()); err != nil {
			return "", permanent(fmt.Errorf("tasks: %s: %w: %w", t.Type(), ErrInvalid, err))
		}
	}
	return k.Downstream(n), nil
}

// ownKey is the key of t read or derived without the middleware.
func ownKey(ctx context.Context, t *asynq.Task, explicit string, volatile []string) (dedup.Key, error) {
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
