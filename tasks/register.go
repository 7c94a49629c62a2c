package tasks

import (
	"context"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/pgledger"
)

// Deps are what the handlers need from the process that runs them.
type Deps struct {
	Mailer    Mailer
	From      string
	SMSSender SMSSender
	Scanner   *Scanner
	Gateway   Gateway
	Enqueuer  Enqueuer // webhook routing enqueues follow-up jobs
	// Ledger runs transactional tasks (order:fulfil); nil refuses them.
	Ledger *pgledger.Ledger
	Log    *zap.Logger
	// emails builds the jobs webhook routing enqueues, under the catalog's
	// windows; Catalog.Register sets it.
	emails *dedup.Typed[Email]
}

// Queues onceq's catalog uses, for servers and dashboards.
const (
	QueueCritical = "critical"
	QueueDefault  = "default"
	QueueLow      = "low"
)

// Enqueuer is what handlers that fan out (webhook routing) need of the
// Producer.
type Enqueuer interface {
	Enqueue(ctx context.Context, j dedup.Job, opts ...asynq.Option) (dedup.Outcome, error)
}
