package main

import (
	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/tasks"
)

// withLedger makes status reads of the transactional types consult the
// Postgres ledger, their source of truth, when one is configured; it
// returns the ledger (nil without one) for the caller to close. Nothing is
// dialled here: a Postgres that does not answer fails only the reads that
// need it.
func withLedger(pg config.Postgres, store storage.Store) (storage.Store, *pgledger.Ledger, error) {
	if !pg.Configured() {
		return store, nil, nil
	}
	l, err := pgledger.Connect(pg.URL, pg.PoolSize(0), pgledger.Options{})
	if err != nil {
		return nil, nil, err
	}
	return pgledger.StatusStore{Store: store, Ledger: l, Namespaces: tasks.Transactional}, l, nil
}
