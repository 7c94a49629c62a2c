// Command gorun is a daemon's signal handling alone, for the test that
// runs it under `go run` and ends go run.
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
	fmt.Println("ready", os.Getpid())
	<-ctx.Done()
	fmt.Println("drained:", context.Cause(ctx))
}
