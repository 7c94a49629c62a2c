// Command worker is the onceq worker daemon: asynq handlers inside the
// idempotency middleware, plus an admin server with health, metrics and the
// asynqmon dashboard. Configuration comes from ONCEQ_* variables (--help).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
