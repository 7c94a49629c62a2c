package main

import (
	"context"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/pgledger"
)

// withLedger makes status reads of store consult the Postgres ledger, the
// source of truth for transactional tasks, when one is configured.
func withLedger(ctx context.Context, pg config.Postgres, store onceq.Store) (onceq.Store, func(), error) {
	if !pg.Configured() {
		return store, func() {}, nil
	}
	l, err := pgledger.Open(ctx, pg.URL, pg.PoolSize(0), pgledger.Options{})
	if err != nil {
		return nil, nil, err
	}
	return pgledger.StatusStore{Store: store, Ledger: l}, l.Close, nil
}
