// Command gorun is a daemon's signal handling alone, for the test that
// runs it under `go run` and ends go run.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/onceq/onceq/internal/daemon"
)

func main() {
	ctx, stop := daemon.SignalContext(context.Background(), os.Stderr, os.Exit)
	defer stop()
	fmt.Println("ready", os.Getpid())
	<-ctx.Done()
	// A drain takes a while; a second signal in it would exit at once,
	// and this line would never come.
	time.Sleep(500 * time.Millisecond)
	fmt.Println("drained:", context.Cause(ctx))
}
