package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Values of Worker.Embedded.
const (
	EmbeddedAuto  = "auto"  // start an in-memory Redis when none is configured or answering
	EmbeddedNever = "never" // always use the configured (or default) Redis
)

// Values of Worker.MaxmemoryPolicy.
const (
	MaxmemoryWarn   = "warn"   // log a warning and run
	MaxmemoryRefuse = "refuse" // exit: evicted keys would lose idempotency records
)

// Values of Worker.Outbox.
const (
	OutboxOn  = "on"  // the worker runs an outbox relay
	OutboxOff = "off" // it does not
)

// Worker is the configuration of cmd/worker.
type Worker struct {
	Redis
	Log
	Dedup
	Postgres
	Admin
	Tasks

	// Queues maps asynq queue names to weights. Names must not hold { or }
	// (Redis Cluster hash tags).
	// Default: critical:6,default:3,low:1.
	Queues map[string]int `envconfig:"ONCEQ_QUEUES" default:"critical:6,default:3,low:1" desc:"queue:weight pairs the worker serves"`

	// StrictPriority drains higher-weight queues first instead of sampling
	// by weight.
	// Default: false.
	StrictPriority bool `envconfig:"ONCEQ_STRICT_PRIORITY" default:"false" desc:"serve queues in strict weight order"`

	// Concurrency is how many tasks run at once.
	// Default: 10.
	Concurrency int `envconfig:"ONCEQ_CONCURRENCY" default:"10" desc:"tasks processed concurrently"`

	// ShutdownTimeout is how long SIGTERM waits for running tasks before
	// they are cut off and their claims released. Keep the Kubernetes
	// terminationGracePeriodSeconds longer.
	// Default: 25s.
	ShutdownTimeout time.Duration `envconfig:"ONCEQ_SHUTDOWN_TIMEOUT" default:"25s" desc:"grace for running tasks on SIGTERM; keep below the pod's termination grace period"`

	// Embedded is "auto" (start an in-memory Redis on 127.0.0.1:6379 when
	// Redis is not configured and nothing answers there) or "never".
	// Default: auto.
	Embedded string `envconfig:"ONCEQ_EMBEDDED" default:"auto" desc:"auto: start an in-memory, non-durable Redis when none is configured or answering; never"`

	// MaxmemoryPolicy says what to do when Redis's maxmemory-policy is not
	// noeviction: "warn" or "refuse" to start.
	// Default: warn.
	MaxmemoryPolicy string `envconfig:"ONCEQ_MAXMEMORY_CHECK" default:"warn" desc:"when Redis maxmemory-policy is not noeviction: warn or refuse"`

	// Liveness is how long the worker's liveness key lives unless refreshed
	// (every third of it); other workers recover the tasks of a worker
	// whose key has been gone that long. 0 turns it off: asynq's recoverer
	// alone (1-2 minutes).
	// Default: 3s.
	Liveness time.Duration `envconfig:"ONCEQ_LIVENESS" default:"3s" desc:"liveness key TTL; other workers recover a gone worker's tasks after it (0s: off, asynq's recoverer alone)"`

	// Outbox runs a relay of the Postgres outbox in the worker: "on" moves
	// jobs that applications committed with pgledger.EnqueueTx into asynq,
	// deleting each row once moved; "off" leaves that to other relays
	// (`producer relay`). Any number of relays run side by side. Needs
	// ONCEQ_POSTGRES_URL.
	// Default: off.
	Outbox string `envconfig:"ONCEQ_OUTBOX" default:"off" desc:"on: relay jobs committed to the Postgres outbox (pgledger.EnqueueTx) into asynq; needs ONCEQ_POSTGRES_URL"`

	// TaskLog logs one info line per finished task (type, key, outcome,
	// attempt, duration); failures are logged at warn either way.
	// Default: true.
	TaskLog bool `envconfig:"ONCEQ_TASK_LOG" default:"true" desc:"log one info line per finished task; failures are logged at warn regardless"`
}

func (w Worker) validate() error {
	for _, v := range []func() error{w.Redis.validate, w.Log.validate, w.Dedup.validate, w.Postgres.validate, w.Admin.validate, w.Tasks.validate} {
		if err := v(); err != nil {
			return err
		}
	}
	if err := checkQueues(w.Queues); err != nil {
		return err
	}
	if w.Concurrency < 1 {
		return fmt.Errorf("config: ONCEQ_CONCURRENCY must be at least 1, got %d", w.Concurrency)
	}
	if w.Postgres.Retention < w.Dedup.DoneTTL {
		return fmt.Errorf("config: ONCEQ_POSTGRES_RETENTION %s is shorter than ONCEQ_DONE_TTL %s: the ledger would forget a job Redis still remembers", w.Postgres.Retention, w.Dedup.DoneTTL)
	}
	if w.ShutdownTimeout <= 0 {
		return fmt.Errorf("config: ONCEQ_SHUTDOWN_TIMEOUT must be positive, got %s", w.ShutdownTimeout)
	}
	if w.Liveness != 0 && w.Liveness < 300*time.Millisecond {
		return fmt.Errorf("config: ONCEQ_LIVENESS must be 0s (off) or at least 300ms, got %s", w.Liveness)
	}
	switch {
	case w.Outbox != OutboxOn && w.Outbox != OutboxOff:
		return fmt.Errorf("config: ONCEQ_OUTBOX must be %q or %q, got %q", OutboxOn, OutboxOff, w.Outbox)
	case w.Outbox == OutboxOn && !w.Postgres.Configured():
		return errors.New("config: ONCEQ_OUTBOX=on needs ONCEQ_POSTGRES_URL: the outbox is a table in the application's Postgres")
	}
	if w.Embedded != EmbeddedAuto && w.Embedded != EmbeddedNever {
		return fmt.Errorf("config: ONCEQ_EMBEDDED must be %q or %q, got %q", EmbeddedAuto, EmbeddedNever, w.Embedded)
	}
	if w.MaxmemoryPolicy != MaxmemoryWarn && w.MaxmemoryPolicy != MaxmemoryRefuse {
		return fmt.Errorf("config: ONCEQ_MAXMEMORY_CHECK must be %q or %q, got %q", MaxmemoryWarn, MaxmemoryRefuse, w.MaxmemoryPolicy)
	}
	return nil
}

func checkQueues(q map[string]int) error {
	if len(q) == 0 {
		return errors.New("config: ONCEQ_QUEUES must name at least one queue")
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case strings.TrimSpace(name) == "":
			return errors.New("config: ONCEQ_QUEUES has an empty queue name")
		case strings.TrimSpace(name) != name:
			return fmt.Errorf("config: ONCEQ_QUEUES: queue name %q has surrounding spaces", name)
		case strings.ContainsAny(name, "{}"):
			return fmt.Errorf("config: ONCEQ_QUEUES: queue name %q must not contain { or }", name)
		case q[name] < 1:
			return fmt.Errorf("config: ONCEQ_QUEUES: queue %q needs a weight of at least 1, got %d", name, q[name])
		}
	}
	return nil
}
