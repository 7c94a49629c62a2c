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
}

func (d Dedup) validate() error {
	for _, c := range []struct {
		key string
		v   time.Duration
	}{
		{"ONCEQ_LEASE", d.Lease},
		{"ONCEQ_DONE_TTL", d.DoneTTL},
		{"ONCEQ_FAILED_TTL", d.FailedTTL},
		{"ONCEQ_UNIQUE_WINDOW", d.UniqueWindow},
	} {
		// Redis TTLs have second resolution; below that a record would
		// expire at once or never be written with a TTL at all.
		if c.v < time.Second {
			return fmt.Errorf("config: %s must be at least 1s, got %s", c.key, c.v)
		}
	}
	if d.MaxResultBytes < 1 {
		return fmt.Errorf("config: ONCEQ_MAX_RESULT_BYTES must be at least 1, got %d", d.MaxResultBytes)
	}
	return nil
}
