package config

import (
	"strings"
	"testing"
)

func TestPostgresURLIsASecret(t *testing.T) {
	t.Setenv("ONCEQ_POSTGRES_URL", "postgres://app:hunter2@db:5432/app")
	w, err := LoadWorkerFrom(Environ())
	if err != nil {
		t.Fatal(err)
	}
	if !w.Postgres.Configured() || !w.Postgres.Ledger {
		t.Fatalf("%+v: want configured, ledger on by default", w.Postgres)
	}
	for k, v := range w.Redacted() {
		if strings.Contains(v, "hunter2") {
			t.Fatalf("Redacted()[%s] = %q shows the password", k, v)
		}
	}
	if got := w.Redacted()["ONCEQ_POSTGRES_URL"]; got != "***" {
		t.Fatalf("redacted ONCEQ_POSTGRES_URL = %q, want ***", got)
	}
}

func TestPostgresBadValues(t *testing.T) {
	for name, env := range map[string][2]string{
		"empty secret":   {"ONCEQ_POSTGRES_URL", ""},
		"not a URL":      {"ONCEQ_POSTGRES_URL", "mysql://root:hunter2@db/app"},
		"negative pool":  {"ONCEQ_POSTGRES_MAX_CONNS", "-1"},
		"ledger garbage": {"ONCEQ_POSTGRES_LEDGER", "maybe"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(env[0], env[1])
			_, err := LoadWorkerFrom(Environ())
			if err == nil {
				t.Fatalf("%s=%q accepted", env[0], env[1])
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error shows the secret: %v", err)
			}
		})
	}
}

func TestPostgresPoolSize(t *testing.T) {
	for _, c := range []struct {
		max         int32
		concurrency int
		want        int32
	}{{0, 10, 12}, {0, 0, 4}, {30, 10, 30}} {
		if got := (Postgres{MaxConns: c.max}).PoolSize(c.concurrency); got != c.want {
			t.Errorf("MaxConns %d, concurrency %d: pool %d, want %d", c.max, c.concurrency, got, c.want)
		}
	}
}
