package pgledger_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/pgledger/pgtest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// newLedger opens a migrated ledger on a throwaway database with an
// application table effects(key, n) for the handlers under test.
func newLedger(t testing.TB, opts pgledger.Options) (*pgledger.Ledger, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	l, err := pgledger.Open(ctx, pgtest.New(t), 16, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	pool := l.Pool()
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (key text NOT NULL, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return l, pool
}

func effects(t *testing.T, pool *pgxpool.Pool, key string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
