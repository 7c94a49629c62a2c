package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
)

// httpc is the tests' client for admin endpoints; TestMain closes its idle
// connections before looking for leaks.
var httpc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}

// built holds the worker and producer binaries, built once per test run.
var built struct {
	once     sync.Once
	dir      string
	worker   string
	producer string
	err      error
}

// binaries builds cmd/worker and cmd/producer from the module root on first
// use; a run that skips every scenario builds nothing.
func binaries(t *testing.T) (worker, producer string) {
	t.Helper()
	built.once.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			built.err = err
			return
		}
		if built.dir, err = os.MkdirTemp("", "onceq-faulttest-"); err != nil {
			built.err = err
			return
		}
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", built.dir+string(filepath.Separator), "./cmd/worker", "./cmd/producer")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built.worker = filepath.Join(built.dir, "worker")
		built.producer = filepath.Join(built.dir, "producer")
		t.Logf("built worker and producer in %s", time.Since(start).Round(time.Millisecond))
	})
	if built.err != nil {
		t.Fatalf("faulttest: %v", built.err)
	}
	return built.worker, built.producer
}

func removeBinaries() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// worker is one cmd/worker process.
type worker struct {
	t     *testing.T
	name  string
	admin string // host:port of the admin server
	log   string // path of its stdout+stderr
	cmd   *exec.Cmd
	done  chan struct{} // closed when it has exited
	err   error         // Wait's result, once done is closed
}

// startWorker runs the worker binary with vars over the fault-test defaults
// and waits until /readyz answers 200. Its log is printed if the test fails.
func startWorker(t *testing.T, name string, vars map[string]string) *worker {
	t.Helper()
	bin, _ := binaries(t)
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		env := map[string]string{
			"ONCEQ_EMBEDDED":   "never",
			"ONCEQ_ENV":        "development",
			"ONCEQ_LOG_LEVEL":  "info",
			"ONCEQ_OUTBOX_DIR": filepath.Join(dir, "outbox"),
			"ONCEQ_SCAN_ROOT":  dir,
			"ONCEQ_ADMIN_ADDR": "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		}
		maps.Copy(env, vars)
		w := &worker{t: t, name: name, admin: env["ONCEQ_ADMIN_ADDR"],
			log: filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, attempt)), done: make(chan struct{})}
		logf, err := os.Create(w.log)
		if err != nil {
			t.Fatal(err)
		}
		w.cmd = exec.Command(bin)
		w.cmd.Env = testenv.ChildEnv(env)
		w.cmd.Stdout, w.cmd.Stderr = logf, logf
		if err := w.cmd.Start(); err != nil {
			logf.Close()
			t.Fatalf("start %s: %v", name, err)
		}
		go func() { w.err = w.cmd.Wait(); logf.Close(); close(w.done) }()
		t.Cleanup(w.cleanup)
		err = w.waitReady(30 * time.Second)
		if err == nil {
			return w
		}
		// The probed admin port can be taken before the worker binds it.
		if attempt < 3 && w.exited() && strings.Contains(w.logText(), "address already in use") {
			continue
		}
		t.Fatalf("%s not ready: %v\n%s", name, err, w.logTail())
	}
}

func (w *worker) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		code, _ := w.get("/readyz")
		if code == http.StatusOK {
			return nil
		}
		if w.exited() {
			return fmt.Errorf("exited: %v", w.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no 200 from /readyz within %s (last %d)", within, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get fetches an admin path; code 0 means no answer.
func (w *worker) get(path string) (int, string) {
	resp, err := httpc.Get("http://" + w.admin + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metrics is the worker's /metrics text.
func (w *worker) metrics() string {
	w.t.Helper()
	code, body := w.get("/metrics")
	if code != http.StatusOK {
		w.t.Fatalf("%s /metrics: %d %s", w.name, code, body)
	}
	return body
}

func (w *worker) pid() int { return w.cmd.Process.Pid }

// owner is how the worker names itself in idempotency records.
func (w *worker) owner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, w.pid())
}

// owns reports whether a record's owner is this worker process: records
// name host/pid/boot id, then the asynq task id of the delivery.
func (w *worker) owns(rec storage.Record) bool {
	return strings.HasPrefix(rec.Owner, w.owner()+"/")
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to go.
func (w *worker) kill() {
	w.t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		w.t.Fatalf("kill %s: %v", w.name, err)
	}
	<-w.done
}

// term sends SIGTERM and returns how long the process took to exit.
func (w *worker) term(within time.Duration) time.Duration {
	w.t.Helper()
	return w.signal(syscall.SIGTERM, within)
}

// signal sends sig and returns how long the process took to exit.
func (w *worker) signal(sig syscall.Signal, within time.Duration) time.Duration {
	w.t.Helper()
	start := time.Now()
	if err := w.cmd.Process.Signal(sig); err != nil {
		w.t.Fatalf("%s %s: %v", sig, w.name, err)
	}
	select {
	case <-w.done:
		return time.Since(start)
	case <-time.After(within):
		w.t.Fatalf("%s still running %s after %s\n%s", w.name, within, sig, w.logTail())
		return 0
	}
}

func (w *worker) cleanup() {
	if !w.exited() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(15 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.done
		}
	}
	if w.t.Failed() || os.Getenv("FAULTTEST_SHOW_LOGS") == "1" {
		w.t.Logf("---- %s log (%s) ----\n%s", w.name, w.log, w.logTail())
	}
}

func (w *worker) logText() string {
	b, _ := os.ReadFile(w.log)
	return string(b)
}

// logTail is the end of the log, enough to see what went wrong.
func (w *worker) logTail() string {
	const max = 48 << 10
	s := w.logText()
	if len(s) > max {
		s = "...\n" + s[len(s)-max:]
	}
	return s
}

// runProducer runs the producer CLI bin with vars and stdin, returning
// stdout. Safe to call from any goroutine.
func runProducer(bin string, vars map[string]string, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = testenv.ChildEnv(vars)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("producer %v: %w\nstderr:\n%s", args, err, stderr.String())
	}
	return stdout.String(), nil
}
