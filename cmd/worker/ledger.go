package main

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/tasks"
)

// openLedger connects the Postgres ledger and migrates the ledger's and the
// transactional tasks' tables. Without ONCEQ_POSTGRES_URL it returns nil and
// transactional tasks are refused.
func openLedger(ctx context.Context, cfg config.Worker, log *zap.Logger, observe onceq.Observer) (*pgledger.Ledger, func(), error) {
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
	log.Info("postgres ledger ready", zap.Int32("max_conns", l.Pool().Config().MaxConns),
		zap.Duration("retention", cfg.Postgres.Retention))
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { pruneLedger(pctx, l, cfg.Postgres.Retention, time.Hour, log) })
	return l, func() { stop(); wg.Wait(); l.Close() }, nil
}

// pruneLedger deletes done ledger rows older than retention, now and then
// every interval until ctx ends: the worker is the rows' owner that deletes
// them (config.Postgres.Retention). Every worker pod prunes; the deletes
// are idempotent.
func pruneLedger(ctx context.Context, l *pgledger.Ledger, retention, every time.Duration, log *zap.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		n, err := l.Prune(ctx, time.Now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("postgres ledger: pruning old rows failed; trying again later", zap.Error(err))
		case n > 0:
			log.Info("postgres ledger: pruned done rows", zap.Int64("rows", n), zap.Duration("older_than", retention))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
