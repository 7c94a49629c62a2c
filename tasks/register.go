package tasks

import (
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup/pgledger"
)

// Deps are what the handlers need from the process that runs them.
type Deps struct {
	Mailer   Mailer
	From     string
	Scanner  *Scanner
	Gateway  Gateway
	Enqueuer Enqueuer // webhook routing enqueues follow-up jobs
	// OutboxDir is where file-backed senders (the mail outbox, the SMS
	// outbox) write. Default: "outbox".
	OutboxDir string
	// Windows of jobs handlers enqueue; Catalog.Register sets it.
	Windows Windows
	// Ledger runs transactional tasks (order:fulfil); nil refuses them.
	Ledger *pgledger.Ledger
	Log    *zap.Logger
}

// Queues onceq's catalog uses, for servers and dashboards.
const (
	QueueCritical = "critical"
	QueueDefault  = "default"
	QueueLow      = "low"
)
