package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgledger"
	"github.com/onceq/onceq/tasks"
)

// openLedger connects the Postgres ledger and migrates the ledger's and the
// transactional tasks' tables. Without ONCEQ_POSTGRES_URL it returns nil and
// transactional tasks are refused.
func openLedger(ctx context.Context, cfg config.Worker, log *zap.Logger, observe dedup.Observer) (*pgledger.Ledger, func(), error) {
	if !cfg.Postgres.Configured() {
		log.Info("no ONCEQ_POSTGRES_URL: transactional tasks are refused", zap.String("type", tasks.TypeOrder))
		return nil, func() {}, nil
	}
	l, err := pgledger.Open(ctx, cfg.Postgres.URL, cfg.Postgres.PoolSize(cfg.Concurrency),
		pgledger.Options{NoRecord: !cfg.Postgres.Ledger, Observer: observe})
	if err != nil {
		return nil, nil, err
	}
	if err := pgledger.Migrate(ctx, l.Pool(), "order", tasks.OrderMigrations); err != nil {
		l.Close()
		return nil, nil, err
	}
	if !cfg.Postgres.Ledger {
		log.Warn("ONCEQ_POSTGRES_LEDGER=false: transactional tasks are deduplicated by Redis only (at-least-once)")
	}
	log.Info("postgres ledger ready", zap.Int32("max_conns", l.Pool().Config().MaxConns))
	return l, l.Close, nil
}
