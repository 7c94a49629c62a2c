// Package peertest starts the real downstream servers that onceq's tests
// charge and mail through: Stripe's own API test server (stripe-mock) and
// Mailpit, an SMTP server that records every message it receives and
// deduplicates nothing. Both are `go install`ed binaries (.ci/run installs
// them); without one, tests skip with a clear message, unless
// ONCEQ_REQUIRE_REDIS=1 (set by CI) makes that a failure, as for Redis.
package peertest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Pinned versions, the ones .ci/run installs.
const (
	StripeMockVersion = "v0.203.0"
	MailpitVersion    = "v1.33.1"
)

// binary finds name on PATH, else where `go install` puts it by default.
func binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("GOPATH"); d != "" {
		dirs = append(dirs, filepath.Join(filepath.SplitList(d)[0], "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s on PATH or in the Go bin directory", name)
}

func unavailable(t testing.TB, why, install string) {
	t.Helper()
	if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" {
		t.Fatalf("peertest: real peers required (ONCEQ_REQUIRE_REDIS=1) but %s", why)
	}
	t.Skipf("peertest: skipping, %s (%s)", why, install)
}

// process is a peer binary we started; it dies with the test binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	logs *lockedLines
}

// startProcess runs path with args and waits until a line of its output
// satisfies ready (which returns what the caller wants from that line).
func startProcess(path string, args []string, ready func(line string) (string, bool), timeout time.Duration) (*process, string, error) {
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = dieWithParent()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	p := &process{cmd: cmd, done: make(chan struct{}), logs: &lockedLines{}}
	go func() {
		cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.logs.add(line)
			if v, ok := ready(line); ok && !sent {
				found <- v
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case v := <-found:
		return p, v, nil
	case <-p.done:
		return nil, "", fmt.Errorf("%s exited at start: %s", filepath.Base(path), p.logs)
	case <-time.After(timeout):
		p.stop()
		return nil, "", fmt.Errorf("%s not ready in %s: %s", filepath.Base(path), timeout, p.logs)
	}
}

func (p *process) stop() {
	p.cmd.Process.Kill()
	<-p.done
}

// lockedLines keeps the last lines a process printed, for error messages.
type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > 50 {
		l.lines = l.lines[len(l.lines)-50:]
	}
}

func (l *lockedLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
