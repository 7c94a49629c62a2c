package tasks

import (
	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgledger"
)

// Deps are what the handlers need from the process that runs them.
type Deps struct {
	Mailer   Mailer
	From     string
	Scanner  *Scanner
	Gateway  *GatewayClient
	Enqueuer Enqueuer // webhook routing enqueues follow-up jobs
	// Ledger runs transactional tasks (order:fulfil); nil refuses them.
	Ledger *pgledger.Ledger
	Log    *zap.Logger
}

// Register puts every handler of the catalog on mux.
func Register(mux *asynq.ServeMux, d Deps) {
	log := logger(d.Log)
	mux.Handle(TypeEmail, EmailHandler{Mailer: d.Mailer, From: d.From, Log: log.Named(TypeEmail)})
	mux.Handle(TypeScan, ScanHandler{Scanner: d.Scanner, Log: log.Named(TypeScan)})
	mux.Handle(TypePayment, PaymentHandler{Gateway: d.Gateway, Log: log.Named(TypePayment)})
	mux.Handle(TypeWebhook, WebhookHandler{Enqueuer: d.Enqueuer, Log: log.Named(TypeWebhook)})
	mux.Handle(TypeOrder, orderHandler(d))
}

// TypeOptions is the dedup middleware's view of the catalog: volatile fields
// for tasks enqueued without onceq's headers, and which results are copied to
// asynq for the dashboard (the verdicts and charges operators look up).
func TypeOptions() map[string]dedup.TypeOptions {
	return map[string]dedup.TypeOptions{
		TypeEmail:   {Volatile: dedup.VolatileFields(Email{})},
		TypeScan:    {Volatile: dedup.VolatileFields(Scan{}), WriteResult: true},
		TypePayment: {Volatile: dedup.VolatileFields(Payment{}), WriteResult: true},
		TypeWebhook: {Volatile: dedup.VolatileFields(Webhook{})},
		TypeOrder:   {WriteResult: true},
	}
}

// Queues onceq's catalog uses, for servers and dashboards.
const (
	QueueCritical = "critical"
	QueueDefault  = "default"
	QueueLow      = "low"
)
