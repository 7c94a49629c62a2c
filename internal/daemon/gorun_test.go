package daemon_test

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGTERM to `go run ./cmd/worker` reaches the worker: go run passes no
// signal on and dies, and without the parent-death signal the worker would
// run on, re-parented, holding its ports. SIGTERM to the whole process
// group (a supervisor's, or the docs test's) drains once: go run's end is
// not taken for a second signal.
func TestSIGTERMToGoRunReachesTheDaemon(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	t.Parallel()
	for _, tc := range []struct {
		name  string
		want  []string // either, in the order the two signals land
		group bool
	}{
		{"go run alone", []string{"drained: go run, which started this process, has ended"}, false},
		{"the process group", []string{"drained: received terminated", "drained: go run, which started this process, has ended"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("go", "run", "./testdata/gorun")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			// A pipe of our own, which Wait does not close: the daemon
			// writes on after go run has gone.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			cmd.Stdout = w
			err = cmd.Start()
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(r)
			if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ready ") {
				t.Fatalf("first line %q, %v", lines.Text(), lines.Err())
			}
			child, err := strconv.Atoi(strings.TrimPrefix(lines.Text(), "ready "))
			if err != nil {
				t.Fatal(err)
			}
			// The daemon is ours: end it by its id should the test fail.
			stuck := time.AfterFunc(time.Minute, func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			defer stuck.Stop()
			pid := cmd.Process.Pid
			if tc.group {
				pid = -pid
			}
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			// The daemon holds the pipe after go run is gone; its next line
			// comes only if it drained.
			if !lines.Scan() || !slices.Contains(tc.want, lines.Text()) {
				t.Fatalf("the daemon said %q (%v); want one of %q", lines.Text(), lines.Err(), tc.want)
			}
		})
	}
}
