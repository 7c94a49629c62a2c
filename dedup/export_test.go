package dedup

import (
	"bytes"
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/storage"
)

// Internals the external tests of this package exercise, under the names
// they had before they became internal.

const (
	HeaderKey         = headerKey
	HeaderFingerprint = headerFingerprint
	HeaderIncarnation = headerIncarnation
	MaxDepth          = maxDepth
	MaxIDLen          = storage.MaxIDLen
)

var (
	CallerID          = callerID
	Derive            = derive
	Incarnation       = parseIncarnation
	IsFailure         = isFailure
	RetryDelay        = retryDelay
	TaskKey           = taskKeyOf
	RedisKey          = keyOf
	HomeQueues        = homeQueuesOf
	VolatileFields    = volatileOf
	ErrBadIncarnation = errBadIncarnation
	ErrBadPayload     = errBadPayload
	ErrInProgress     = errInProgress
	ErrInvalidKey     = storage.ErrInvalidKey
	ErrMismatch       = ErrConflict
)

type (
	InProgressError = inProgressError
	TypeOptions     = typeOptions
)

// WithTypes returns o with per-type options set directly, as a Catalog
// would set them.
func WithTypes(o MiddlewareOptions, types map[string]TypeOptions) MiddlewareOptions {
	o.types = types
	return o
}

// KeyFromContext is the run's key.
func KeyFromContext(ctx context.Context) (Key, bool) {
	r, ok := RunFromContext(ctx)
	return r.Key, ok
}

// DownstreamKey is the run's downstream key.
func DownstreamKey(ctx context.Context) (string, bool) {
	r, ok := RunFromContext(ctx)
	return r.Downstream, ok
}

// IncarnationFromContext is the run's incarnation.
func IncarnationFromContext(ctx context.Context) (int, bool) {
	r, ok := RunFromContext(ctx)
	return r.Incarnation, ok
}

// WithKey is a run of k's first incarnation.
func WithKey(ctx context.Context, k Key) context.Context {
	return withRun(ctx, Run{Key: k, Incarnation: 1, Attempt: 1, Downstream: downstream(k, 1)})
}

// Canonical returns the canonical JSON of a JSON document (see canon).
func Canonical(data []byte, volatile ...string) ([]byte, error) {
	c := getCanon()
	defer putCanon(c)
	if err := c.run(data, volatile, false); err != nil {
		return nil, err
	}
	return bytes.Clone(c.out), nil
}

// Hash is the fingerprint of a payload.
func Hash(data []byte, volatile ...string) (string, error) {
	c := getCanon()
	defer putCanon(c)
	if err := c.run(data, volatile, false); err != nil {
		return "", err
	}
	return c.fingerprint(), nil
}

// Downstream is k's downstream key for incarnation n.
func Downstream(k Key, n int) string { return downstream(k, n) }

// BootOwner names this process, as the middleware's deliveries do.
var BootOwner = bootOwner

// RecoverTask runs the fast recoverer's step on the active task id of
// queue if it finds it orphaned: "retried", "archived", or "" when it finds
// it not orphaned or another step came first.
func RecoverTask(ctx context.Context, rdb redis.UniversalClient, queue, id string) (string, error) {
	os, err := findOrphans(ctx, rdb, queue, time.Time{})
	if err != nil {
		return "", err
	}
	for _, o := range os {
		if o.id == id {
			return recoverOrphan(ctx, rdb, o, time.Hour)
		}
	}
	return "", nil
}

// ForgetJoinScripts makes srv's join know none of asynq's dequeue scripts
// (dequeue) or acknowledgement scripts (ack), as if asynq sent others.
// Call it before Start.
func ForgetJoinScripts(srv *Server, dequeue, ack bool) {
	if dequeue {
		srv.mw.join.dequeues = false
	}
	if ack {
		srv.mw.join.acks = nil
	}
}

// GuardEnqueues hooks rdb so that inserts under GuardEnqueue run behind
// their guard, and returns it: the client to give asynq.
func GuardEnqueues(rdb redis.UniversalClient) redis.UniversalClient {
	asynqwire.Intercept(rdb)
	return rdb
}

// GuardEnqueue returns a ctx for one insert of the job keyed k through rdb.
func GuardEnqueue(ctx context.Context, rdb redis.UniversalClient, k Key, fp string, replace ...string) (context.Context, *enqueueGuard) {
	_, cluster := rdb.(*redis.ClusterClient)
	return guardEnqueue(ctx, k, fp, cluster, replace...)
}
