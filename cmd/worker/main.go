// Command worker is the onceq worker daemon: asynq handlers inside the
// idempotency middleware, plus an admin server with health, metrics and the
// asynqmon dashboard. Configuration comes from ONCEQ_* variables (--help).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/onceq/onceq/internal/daemon"
)

func main() {
	ctx, stop := daemon.SignalContext(context.Background(), os.Stderr, os.Exit)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
