package pgledger_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/pgledger/pgtest"
)

// Pods starting together each migrate: every change applies once, and a
// second round changes nothing.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ms, err := pgledger.LedgerMigrations()
	if err != nil || len(ms) == 0 {
		t.Fatalf("embedded migrations: %v %v", ms, err)
	}
	// A second set, as an application task's schema would be.
	app := []pgledger.Migration{
		{Version: 2, Name: "seq", SQL: `CREATE SEQUENCE app_seq`}, // not idempotent on its own
		{Version: 1, Name: "table", SQL: `CREATE TABLE app_rows (id int)`},
	}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 8 {
			wg.Go(func() { errs <- pgledger.Migrate(ctx, pool, "ledger", ms) })
			wg.Go(func() { errs <- pgledger.Migrate(ctx, pool, "app", app) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM onceq_migrations`).Scan(&n); err != nil || n != len(ms)+len(app) {
		t.Fatalf("onceq_migrations has %d rows (%v), want %d", n, err, len(ms)+len(app))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO onceq_ledger (key, state) VALUES ('a/b', 'done')`); err != nil {
		t.Fatalf("ledger table: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO onceq_ledger (key, state) VALUES ('a/c', 'bogus')`); err == nil {
		t.Fatal("the ledger accepted state 'bogus'")
	}
}

func TestMigrateRejectsDuplicateVersions(t *testing.T) {
	t.Parallel()
	err := pgledger.Migrate(context.Background(), nil, "x", []pgledger.Migration{{Version: 1}, {Version: 1}})
	if err == nil {
		t.Fatal("two migrations with version 1 accepted")
	}
}
