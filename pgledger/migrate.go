package pgledger

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned schema change of a set.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// migrateLock is the advisory lock every onceq migration takes, so pods
// starting together apply each change once, one after the other.
const migrateLock int64 = 0x6f6e636571 // "onceq"

// LedgerMigrations are the ledger's own schema changes, from migrations/.
func LedgerMigrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("pgledger: migration file %q is not NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	return ms, nil
}

// Migrate applies the migrations of set that are not applied yet, in
// version order, in one transaction under a transaction-level advisory
// lock: safe to run from every pod at start-up, and a no-op once applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, set string, ms []Migration) error {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return fmt.Errorf("pgledger: migrate %s: version %d twice", set, ms[i].Version)
		}
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return fmt.Errorf("pgledger: migrate %s: lock: %w", set, err)
		}
		// Created under the lock: two concurrent CREATE TABLE IF NOT EXISTS can collide.
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS onceq_migrations (
			set_name   text        NOT NULL,
			version    integer     NOT NULL,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (set_name, version))`); err != nil {
			return fmt.Errorf("pgledger: migrate %s: %w", set, err)
		}
		rows, err := tx.Query(ctx, `SELECT version FROM onceq_migrations WHERE set_name = $1`, set)
		if err != nil {
			return fmt.Errorf("pgledger: migrate %s: %w", set, err)
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return fmt.Errorf("pgledger: migrate %s: %w", set, err)
		}
		for _, m := range ms {
			if slices.Contains(applied, int32(m.Version)) {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("pgledger: migrate %s %04d_%s: %w", set, m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO onceq_migrations (set_name, version, name) VALUES ($1, $2, $3)`,
				set, m.Version, m.Name); err != nil {
				return fmt.Errorf("pgledger: migrate %s: %w", set, err)
			}
		}
		return nil
	})
}
