package daemon

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testenv"
)

// One test owns the process's signals: SIGHUP begins a drain, a second
// signal forces the exit.
func TestSignalContext(t *testing.T) {
	exited := make(chan int, 1)
	var stderr testenv.Buffer
	ctx, stop := SignalContext(context.Background(), &stderr, func(code int) { exited <- code })
	defer stop()

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGHUP did not end the context")
	}
	if cause := context.Cause(ctx); cause == nil || cause.Error() != "received hangup" {
		t.Fatalf("cause %v, want received hangup", cause)
	}
	select {
	case code := <-exited:
		t.Fatalf("exit(%d) after one signal", code)
	default:
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != ForcedExitCode {
			t.Fatalf("exit(%d), want %d", code, ForcedExitCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second signal did not force the exit")
	}
	var line struct{ Msg, Signal string }
	if err := json.Unmarshal([]byte(stderr.String()), &line); err != nil || line.Signal != "terminated" ||
		line.Msg != "signal received again: exiting now without draining" {
		t.Fatalf("stderr %q, want one JSON line naming the signal (%v)", stderr.String(), err)
	}
}

// go run's end drains but never counts as a signal: a group kill
// delivers it and SIGTERM in either order, and the drain must not be cut
// short; the second drain signal forces the exit, whenever go run ended.
func TestGoRunEndIsNoSecondSignal(t *testing.T) {
	for _, tc := range []struct {
		signals []os.Signal
		want    []action
	}{
		{[]os.Signal{syscall.SIGTERM, goRunEnded}, []action{drain, drain}},
		{[]os.Signal{goRunEnded, syscall.SIGTERM}, []action{drain, drain}},
		{[]os.Signal{goRunEnded, syscall.SIGTERM, syscall.SIGHUP}, []action{drain, drain, force}},
		{[]os.Signal{syscall.SIGTERM, goRunEnded, syscall.SIGINT}, []action{drain, drain, force}},
		{[]os.Signal{syscall.SIGINT, syscall.SIGTERM}, []action{drain, force}},
	} {
		var st drainState
		var got []action
		for _, sig := range tc.signals {
			got = append(got, st.next(sig))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: %v, want %v", tc.signals, got, tc.want)
		}
	}
}
