package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testenv"
)

// served is `producer serve` running in the test's process, configured by
// the environment the test set.
type served struct {
	addr string          // the host:port it listens on
	logs *testenv.Buffer // its log lines
	// stop ends it and returns how serve ended; the test's cleanup calls
	// it too.
	stop func() error
}

// startServe starts serve and waits until it listens.
func startServe(t *testing.T) served {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	logs := &testenv.Buffer{}
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- serveWith(ctx, nil, io.Discard, logs, serveHooks{ready: func(addr string) { ready <- addr }})
	}()
	var ended error
	stopped := false
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case ended = <-done:
			case <-time.After(15 * time.Second):
				t.Error("serve did not stop within 15s of cancellation")
			}
		}
		return ended
	}
	select {
	case addr := <-ready:
		t.Cleanup(func() { stop() })
		return served{addr: addr, logs: logs, stop: stop}
	case err := <-done:
		cancel()
		t.Fatalf("serve ended early: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("serve not ready\n%s", logs.String())
	}
	return served{}
}
