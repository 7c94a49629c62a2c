package config

import (
	"fmt"
	"strings"
	"time"
)

// Postgres says where the ledger of transactional tasks (order:fulfil)
// lives. Every binary embeds it: the worker runs those tasks, and status
// reads report the ledger's state for them.
type Postgres struct {
	// URL of the application's Postgres (postgres:// or a key=value DSN,
	// as pgx parses it). Secret: it usually carries a password. Empty means
	// not configured: transactional tasks are refused.
	// Default: "".
	URL string `envconfig:"ONCEQ_POSTGRES_URL" secret:"true" desc:"secret: Postgres URL of the ledger and of transactional tasks (order:fulfil); empty: those tasks are refused"`

	// MaxConns caps the connection pool. A transactional task holds one
	// connection from its start to its commit, so the worker needs at least
	// ONCEQ_CONCURRENCY; status reads need one or two.
	// Default: 0 (the worker: ONCEQ_CONCURRENCY+2; the producer and API: 4).
	MaxConns int32 `envconfig:"ONCEQ_POSTGRES_MAX_CONNS" default:"0" desc:"Postgres pool size; 0: ONCEQ_CONCURRENCY+2 on the worker, 4 elsewhere"`

	// Ledger records transactional tasks in the ledger. false commits their
	// rows without it (Redis-only deduplication: a crash after the commit or
	// a Redis that forgot runs them again); it exists to measure the ledger.
	// Default: true.
	Ledger bool `envconfig:"ONCEQ_POSTGRES_LEDGER" default:"true" desc:"record transactional tasks in the Postgres ledger; false: Redis-only deduplication (at-least-once), for comparison"`

	// Retention is how long a done ledger row is kept (a failed one: since
	// its last attempt): the worker deletes older ones at start and hourly.
	// A job delivered or enqueued again after that runs again, so keep it
	// beyond any redelivery the application can produce; it must be at least
	// ONCEQ_DONE_TTL.
	// Default: 720h (30 days).
	Retention time.Duration `envconfig:"ONCEQ_POSTGRES_RETENTION" default:"720h" desc:"how long done and failed Postgres ledger rows are kept; the worker deletes older ones at start and hourly"`
}

// Configured reports whether a Postgres URL was given.
func (p Postgres) Configured() bool { return p.URL != "" }

func (p Postgres) validate() error {
	if p.MaxConns < 0 {
		return fmt.Errorf("config: ONCEQ_POSTGRES_MAX_CONNS must not be negative, got %d", p.MaxConns)
	}
	if p.Retention <= 0 {
		return fmt.Errorf("config: ONCEQ_POSTGRES_RETENTION must be positive, got %s", p.Retention)
	}
	if p.URL != "" && !strings.HasPrefix(p.URL, "postgres://") && !strings.HasPrefix(p.URL, "postgresql://") && !strings.Contains(p.URL, "=") {
		return fmt.Errorf("config: ONCEQ_POSTGRES_URL must be a postgres:// URL or a key=value DSN (value not shown: secret)")
	}
	return nil
}

// PoolSize is the pool's cap for a process running concurrency
// transactional tasks at once (0 for processes that only read status).
func (p Postgres) PoolSize(concurrency int) int32 {
	switch {
	case p.MaxConns > 0:
		return p.MaxConns
	case concurrency > 0:
		return int32(concurrency) + 2
	}
	return 4
}
