package dedup

import "github.com/onceq/onceq/dedup/storage"

// Key identifies one job: a namespace (the task type by default) and an id
// within it (a business key or a content hash). Its String, "namespace/id",
// is the idempotency key, and TaskID the asynq task id the Producer gives
// the job's task. Declared in package storage, which Stores speak.
type Key = storage.Key

// NewKey validates namespace and id: each non-empty printable UTF-8
// without '{' or '}' (a Redis Cluster hash tag) and at most 255 bytes, the
// namespace without '/'. Its error wraps storage.ErrInvalidKey.
func NewKey(namespace, id string) (Key, error) { return storage.NewKey(namespace, id) }

// ParseKey reads either form an operator may paste: the key "namespace/id"
// (Key.String) or the asynq task id the Producer gave its job (Key.TaskID).
func ParseKey(s string) (Key, error) { return storage.ParseKey(s) }

// Decision is what the library decided about a job: the Producer's answer
// to an enqueue (Outcome.Decision), a Store's to a claim.
type Decision = storage.Decision

// The decisions; see storage.Decision for each.
const (
	Enqueued   Decision = storage.Enqueued
	Acquired   Decision = storage.Acquired
	Duplicate  Decision = storage.Duplicate
	InProgress Decision = storage.InProgress
	Conflict   Decision = storage.Conflict
	Throttled  Decision = storage.Throttled
)

// Status is where a job is, in the one vocabulary the Producer, the CLI,
// GET /v1/jobs and the docs share.
type Status = storage.Status

// The statuses; see storage.Status for each.
const (
	StatusPending   Status = storage.StatusPending
	StatusScheduled Status = storage.StatusScheduled
	StatusRunning   Status = storage.StatusRunning
	StatusRetry     Status = storage.StatusRetry
	StatusDone      Status = storage.StatusDone
	StatusFailed    Status = storage.StatusFailed
	StatusArchived  Status = storage.StatusArchived
	StatusUnknown   Status = storage.StatusUnknown
	StatusWaiting   Status = storage.StatusWaiting
)

// Event is one decision, handed to the Observer: of a Store, the
// Middleware, the Producer or a Server.
type Event = storage.Event

// Observer sees every decision, synchronously: keep it cheap. Logging and
// metrics hang here.
type Observer = storage.Observer
