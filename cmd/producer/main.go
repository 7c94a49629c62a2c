// Command producer enqueues onceq tasks (email, scan, payment, batch), asks
// whether a job already ran (status), and serves the HTTP ingest API (serve).
// Configuration comes from ONCEQ_* variables (--help).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/internal/daemon"
)

func main() {
	ctx, stop := daemon.SignalContext(context.Background(), os.Stderr, os.Exit)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	switch {
	case err == nil || err.Error() == "":
	case len(os.Args) > 1 && os.Args[1] == "serve":
		// A daemon's lines are all JSON in production; the other commands
		// answer a person.
		daemon.Fail(os.Stderr, config.Environ(), "api", err)
	default:
		fmt.Fprintln(os.Stderr, "producer:", err)
	}
	stop()
	os.Exit(exitCode(err))
}
