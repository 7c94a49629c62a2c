package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/onceq/onceq/pgledger/pgtest"
)

// A smoke run of bench -pg: every side processes its tasks and is reported.
func TestPGSmoke(t *testing.T) {
	pgtest.New(t) // skips without Postgres (fails under ONCEQ_REQUIRE_REDIS=1)
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("ONCEQ_REQUIRE_REDIS") != "1" {
		t.Skip("no redis-server")
	}
	var out bytes.Buffer
	if err := runPG(context.Background(), []string{"-n", "50", "-rounds", "1", "-c", "4", "-postgres-url", pgtest.AdminURL()}, &out); err != nil {
		t.Fatal(err)
	}
	for _, side := range []string{pgBare, pgRedis, pgTx, pgLedger} {
		if !strings.Contains(out.String(), "\n"+side+" ") {
			t.Errorf("no line for %s:\n%s", side, out.String())
		}
	}
}
