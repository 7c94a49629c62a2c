// Command producer enqueues onceq tasks (email, scan, payment, batch), asks
// whether a job already ran (status), and serves the HTTP ingest API (serve).
// Configuration comes from ONCEQ_* variables (--help).
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
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	if err != nil && err.Error() != "" {
		fmt.Fprintln(os.Stderr, "producer:", err)
	}
	stop()
	os.Exit(exitCode(err))
}
