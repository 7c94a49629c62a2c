package config

import (
	"fmt"
	"time"
)

// Dedup holds the idempotency engine's timings and limits. Every binary
// embeds it: the producer needs the windows, the worker the lease and TTLs,
// and status reads need both.
type Dedup struct {
	// Lease is how long a claim stays valid without a heartbeat. Keep it
	// above asynq's own 30s task lease, so a claim never lapses while asynq
	// still considers the task owned; only values under 1s are rejected.
	// Default: 60s.
	Lease time.Duration `envconfig:"ONCEQ_LEASE" default:"60s" desc:"idempotency claim lease, renewed by heartbeat; keep above asynq's 30s lease"`

	// DoneTTL is how long a completed record and its result are kept, and
	// so how long a redelivery is recognised as a duplicate.
	// Default: 24h.
	DoneTTL time.Duration `envconfig:"ONCEQ_DONE_TTL" default:"24h" desc:"how long done records and their results are kept"`

	// ResultTTL is how long of the done TTL a done record keeps its full
	// form with the result; for the rest of it a compact mark of tens of
	// bytes still refuses repeats ("done; result no longer kept"). At or
	// above ONCEQ_DONE_TTL there is no mark.
	// Default: 1h.
	ResultTTL time.Duration `envconfig:"ONCEQ_RESULT_TTL" default:"1h" desc:"how long a done record keeps its result; a compact mark refuses repeats for the rest of the done TTL"`

	// FailedTTL is how long a failed record stays visible to status
	// queries; it never blocks the next claim.
	// Default: 1h.
	FailedTTL time.Duration `envconfig:"ONCEQ_FAILED_TTL" default:"1h" desc:"how long failed records stay visible"`

	// MaxResultBytes caps a handler result stored with a done record.
	// Default: 65536.
	MaxResultBytes int `envconfig:"ONCEQ_MAX_RESULT_BYTES" default:"65536" desc:"largest handler result stored with a done record, in bytes"`

	// UniqueWindow is how long after completion a producer still rejects a
	// duplicate enqueue (asynq task Retention).
	// Default: 24h.
	UniqueWindow time.Duration `envconfig:"ONCEQ_UNIQUE_WINDOW" default:"24h" desc:"default unique window: duplicates rejected until this long after completion"`

	// PaymentIDWindow is the unique window of payment ids.
	// Default: 24h.
	PaymentIDWindow time.Duration `envconfig:"ONCEQ_PAYMENT_ID_WINDOW" default:"24h" desc:"how long a payment id is refused again after completion"`

	// PaymentIDScope says whose a payment id is: "global", one charge
	// whoever sends it (a second client's request under it is refused with
	// 409 payment-id-held), or "client", each API client's own, for
	// clients that are separate tenants. Producers, the API and status
	// reads must agree.
	// Default: global.
	PaymentIDScope string `envconfig:"ONCEQ_PAYMENT_ID_SCOPE" default:"global" desc:"whose a payment id is: global (one charge whoever sends it) or client (each API client's own, for separate tenants)"`

	// PaymentRateWindow throttles the same account, currency and amount
	// under another payment id.
	// Default: 60s.
	PaymentRateWindow time.Duration `envconfig:"ONCEQ_PAYMENT_RATE_WINDOW" default:"60s" desc:"same account, currency and amount under another payment id is throttled this long"`

	// ScanWindow refuses a second scan of one file_id, in any mode.
	// Default: 30s.
	ScanWindow time.Duration `envconfig:"ONCEQ_SCAN_WINDOW" default:"30s" desc:"an identical scan, or another of the same file_id, is throttled this long; also the scan's unique window"`

	// OnRepeat overrides task types' policies for a repeated key: a comma
	// list of TYPE=POLICY, POLICY one of reject, replace, debounce:D/M
	// (tasks.ParseRepeats reads it when the catalog is built).
	// Default: every type rejects.
	OnRepeat string `envconfig:"ONCEQ_ON_REPEAT" desc:"TYPE=POLICY,... for a repeated key: reject, replace, successor or debounce:DELAY/MAXWAIT (e.g. email:send=replace)"`

	// QueueShards spreads every task type's queue over this many asynq
	// queues, <queue>.0 to <queue>.<n-1> (dedup.Spec.Shards): producers put
	// a job in the shard its key hashes to, workers consume every shard of
	// the queues they serve. Producers, the API and workers must agree on
	// it. 1 keeps each queue one asynq queue; on Redis Cluster the keys'
	// homes already spread every queue over the masters (docs/scaling.md).
	// Default: 1.
	QueueShards int `envconfig:"ONCEQ_QUEUE_SHARDS" default:"1" desc:"asynq queues each queue is spread over (<queue>.0 ... <queue>.<n-1>), 1 to 256; every binary must agree; on Cluster leave 1 (homes spread every queue)"`

	// KeepCompleted keeps the task types' completed tasks in asynq for
	// the unique window, with their results, for the dashboard's Completed
	// tab (dedup.Spec.WriteResult): about 700 B more per remembered job,
	// for the whole window. false: asynq deletes a task as it completes
	// and the done record (then its compact mark) alone answers repeats
	// and status. Producers and workers should agree.
	// Default: false.
	KeepCompleted bool `envconfig:"ONCEQ_KEEP_COMPLETED" default:"false" desc:"keep completed tasks and their results in asynq for the dashboard for the unique window (about 700 B per job more); false keeps the done record and its compact mark alone"`
}

// MaxQueueShards bounds ONCEQ_QUEUE_SHARDS: each shard is one more queue
// every worker polls.
const MaxQueueShards = 256

func (d Dedup) validate() error {
	for _, c := range []struct {
		key string
		v   time.Duration
	}{
		{"ONCEQ_LEASE", d.Lease},
		{"ONCEQ_DONE_TTL", d.DoneTTL},
		{"ONCEQ_RESULT_TTL", d.ResultTTL},
		{"ONCEQ_FAILED_TTL", d.FailedTTL},
		{"ONCEQ_UNIQUE_WINDOW", d.UniqueWindow},
		{"ONCEQ_PAYMENT_ID_WINDOW", d.PaymentIDWindow},
		{"ONCEQ_PAYMENT_RATE_WINDOW", d.PaymentRateWindow},
		{"ONCEQ_SCAN_WINDOW", d.ScanWindow},
	} {
		// Redis TTLs have second resolution; below that a record would
		// expire at once or never be written with a TTL at all.
		if c.v < time.Second {
			return fmt.Errorf("config: %s must be at least 1s, got %s", c.key, c.v)
		}
	}
	// A unique window shorter than the done record would make the producer
	// accept ("enqueued") a job that the worker then skips as a duplicate.
	for _, c := range []struct {
		key string
		v   time.Duration
	}{{"ONCEQ_UNIQUE_WINDOW", d.UniqueWindow}, {"ONCEQ_PAYMENT_ID_WINDOW", d.PaymentIDWindow}} {
		if c.v < d.DoneTTL {
			return fmt.Errorf("config: %s %s is shorter than ONCEQ_DONE_TTL %s: the producer would accept a job "+
				"the worker then skips as a duplicate; raise %s or lower ONCEQ_DONE_TTL", c.key, c.v, d.DoneTTL, c.key)
		}
	}
	if d.PaymentIDScope != "global" && d.PaymentIDScope != "client" {
		return fmt.Errorf("config: ONCEQ_PAYMENT_ID_SCOPE must be global or client, got %q", d.PaymentIDScope)
	}
	if d.MaxResultBytes < 1 {
		return fmt.Errorf("config: ONCEQ_MAX_RESULT_BYTES must be at least 1, got %d", d.MaxResultBytes)
	}
	if d.QueueShards < 1 || d.QueueShards > MaxQueueShards {
		return fmt.Errorf("config: ONCEQ_QUEUE_SHARDS must be 1 to %d, got %d", MaxQueueShards, d.QueueShards)
	}
	return nil
}
