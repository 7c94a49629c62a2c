package main

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/daemon"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/tasks"
)

// openLedger connects the Postgres ledger. Without ONCEQ_POSTGRES_URL it
// returns nil and transactional tasks are refused. A Postgres that does not
// answer, at start or later, makes only the transactional types not ready
// (daemon.Optional): their tasks fail and retry while every other type runs.
// Once it answers, the ledger's and the tasks' tables are migrated and
// pruning starts.
func openLedger(cfg config.Worker, log *zap.Logger, observe dedup.Observer, d *daemon.Daemon) (*pgledger.Ledger, func(), error) {
	if !cfg.Postgres.Configured() {
		log.Info("no ONCEQ_POSTGRES_URL: transactional tasks are refused", zap.Strings("types", tasks.Transactional))
		return nil, func() {}, nil
	}
	l, err := pgledger.Connect(cfg.Postgres.URL, cfg.Postgres.PoolSize(cfg.Concurrency),
		pgledger.Options{NoRecord: !cfg.Postgres.Ledger, Observer: observe})
	if err != nil {
		return nil, nil, err
	}
	if !cfg.Postgres.Ledger {
		log.Warn("ONCEQ_POSTGRES_LEDGER=false: transactional tasks are deduplicated by Redis only (at-least-once)")
	}
	pctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	migrated := false // the watch runs check from one goroutine
	stopWatch := d.Optional("postgres", tasks.Transactional, func(ctx context.Context) error {
		if migrated {
			return l.Pool().Ping(ctx)
		}
		if err := l.Setup(ctx); err != nil {
			return err
		}
		if err := pgledger.Migrate(ctx, l.Pool(), "order", tasks.OrderMigrations); err != nil {
			return err
		}
		migrated = true
		log.Info("postgres ledger ready", zap.Int32("max_conns", l.Pool().Config().MaxConns),
			zap.Duration("retention", cfg.Postgres.Retention))
		wg.Go(func() { pruneLedger(pctx, l, cfg.Postgres.Retention, time.Hour, log) })
		return nil
	})
	return l, func() { stopWatch(); stop(); wg.Wait(); l.Close() }, nil
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
