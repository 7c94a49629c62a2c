// Command worker is the onceq worker daemon: asynq handlers inside the
// idempotency middleware, plus an admin server with health, metrics and the
// asynqmon dashboard. Configuration comes from ONCEQ_* variables (--help).
package main

import (
	"context"
	"os"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/internal/daemon"
)

func main() {
	ctx, stop := daemon.SignalContext(context.Background(), os.Stderr, os.Exit)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		daemon.Fail(os.Stderr, config.Environ(), "worker", err)
		os.Exit(1)
	}
}
