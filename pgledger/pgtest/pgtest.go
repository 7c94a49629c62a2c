// Package pgtest gives each test a throwaway Postgres database on the
// machine's server (127.0.0.1:5432, database test, trust auth; another with
// ONCEQ_TEST_POSTGRES_URL), dropped when the test ends. Without a server the
// test skips, unless ONCEQ_REQUIRE_REDIS=1 (set by CI) makes that a failure.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the machine's test database, used to create the others.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// AdminURL is the database New creates databases from.
func AdminURL() string {
	if u := os.Getenv("ONCEQ_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// New creates an empty database onceq_test_<random> and returns its URL;
// the database is dropped (its connections ended) when t ends.
func New(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := AdminURL()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		unavailable(t, "no Postgres at "+redact(base)+": "+err.Error())
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	name := "onceq_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { drop(t, base, name) })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func drop(t testing.TB, base, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Errorf("pgtest: drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop %s: %v", name, err)
	}
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" {
		t.Fatalf("pgtest: real Postgres required (ONCEQ_REQUIRE_REDIS=1) but %s", why)
	}
	t.Skipf("pgtest: skipping, %s (start Postgres or set ONCEQ_TEST_POSTGRES_URL)", why)
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
