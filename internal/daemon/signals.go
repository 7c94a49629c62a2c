package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
)

// Shutdown signals. SIGHUP drains like SIGTERM: onceq has nothing to
// reload, and a hangup comes from a closing terminal or a supervisor that
// wants the process gone; dying at once (Go's default) would cut handlers off
// mid-effect and leave their claims to expire, so their jobs ran again
// minutes later and effects doubled where the downstream does not dedup.
var drainSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// goRunEnded is the signal the kernel sends when go run, the parent, ends.
const goRunEnded = syscall.SIGUSR1

// drainState counts the drain signals a process received: the first
// drains, the second forces the exit. go run's end drains but never counts,
// before or after the first (a group kill delivers it and SIGTERM in
// either order).
type drainState struct{ signals int }

type action int

const (
	drain action = iota
	force
)

func (st *drainState) next(sig os.Signal) action {
	if sig == goRunEnded {
		return drain
	}
	if st.signals++; st.signals == 1 {
		return drain
	}
	return force
}

func drainCause(sig os.Signal) error {
	if sig == goRunEnded {
		return errors.New("go run, which started this process, has ended")
	}
	return fmt.Errorf("received %s", sig)
}

// ForcedExitCode is the exit status after a second signal cut the drain short.
const ForcedExitCode = 2

// SignalContext returns a context that ends, with the signal as its cause,
// at the first SIGINT, SIGTERM or SIGHUP (under `go run`, also when go run
// is ended: it passes no signal on). A second one means "now": it
// logs a line to stderr (in the shape ONCEQ_ENV asks for) and calls exit(ForcedExitCode) without draining
// (claims of running handlers then wait out their lease). exit is os.Exit
// outside tests.
func SignalContext(parent context.Context, stderr io.Writer, exit func(int)) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, drainSignals...)
	// The end of go run comes as a signal of its own: a kill of the whole
	// process group (go run and the daemon both get SIGTERM) must not
	// count it as the second signal that cuts the drain short.
	orphaned := make(chan os.Signal, 1)
	signal.Notify(orphaned, goRunEnded)
	if !followGoRun(goRunEnded) {
		signal.Stop(orphaned)
	}
	stopped := make(chan struct{})
	go func() {
		var st drainState
		for {
			var sig os.Signal
			select {
			case sig = <-ch:
			case sig = <-orphaned:
			case <-stopped:
				return
			}
			switch st.next(sig) {
			case drain:
				cancel(drainCause(sig))
			case force:
				earlyLogger(stderr, config.Environ()).Warn("signal received again: exiting now without draining",
					zap.String("signal", sig.String()))
				exit(ForcedExitCode)
				return
			}
		}
	}()
	var once bool
	return ctx, func() {
		if !once {
			once = true
			signal.Stop(ch)
			signal.Stop(orphaned)
			close(stopped)
		}
		cancel(context.Canceled)
	}
}
