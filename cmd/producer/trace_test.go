package main

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/otlptest"
	"github.com/onceq/onceq/internal/testenv"
)

// One payment through `producer serve` and the worker binary, both sending
// to a collector stand-in: the API's request, its enqueue, the worker's
// delivery and the charge at the gateway are spans of one trace, the
// delivery with its dedup outcome. The same payment posted again is a
// duplicate whose enqueue span links to the first's.
func TestTraceFromAPIToGateway(t *testing.T) {
	c := otlptest.Start(t)
	for k, v := range c.Env() {
		t.Setenv(k, v)
	}
	t.Setenv("OTEL_SERVICE_NAME", "") // each daemon names itself
	opt := redistest.Client(t).Options()
	redisURL := fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB)
	t.Setenv("ONCEQ_REDIS_URL", redisURL)
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")

	worker := startWorkerBinary(t, map[string]string{"ONCEQ_REDIS_URL": redisURL})
	defer worker()
	addr := startServe(t).addr

	payment := `{"payment_id":"pmt-trace-1","account":"acct-1","amount":4200,"currency":"EUR"}`
	for i, want := range []int{http.StatusAccepted, http.StatusOK} {
		resp, err := http.Post("http://"+addr+"/v1/payments", "application/json", strings.NewReader(payment))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %d: %d %s, want %d", i+1, resp.StatusCode, b, want)
		}
	}

	// The delivery span ends after the charge inside it, so it may be
	// exported in a later batch: wait for all four.
	spans := c.Wait(t, func(s []otlptest.Span) bool {
		return find(s, "onceq-api", "SPAN_KIND_PRODUCER", "enqueued") != nil &&
			find(s, "onceq-worker", "SPAN_KIND_CONSUMER", "acquired") != nil &&
			find(s, "onceq-worker", "SPAN_KIND_CLIENT", "") != nil &&
			find(s, "onceq-api", "SPAN_KIND_PRODUCER", "duplicate") != nil
	})
	enq := find(spans, "onceq-api", "SPAN_KIND_PRODUCER", "enqueued")
	run := find(spans, "onceq-worker", "SPAN_KIND_CONSUMER", "acquired")
	charge := find(spans, "onceq-worker", "SPAN_KIND_CLIENT", "")
	repeat := find(spans, "onceq-api", "SPAN_KIND_PRODUCER", "duplicate")
	request := byID(spans, enq.ParentID)
	if request == nil || request.Kind != "SPAN_KIND_SERVER" || request.Service != "onceq-api" {
		t.Fatalf("the enqueue's parent is not the API's request span:\n%s", otlptest.Describe(spans))
	}
	for _, s := range []*otlptest.Span{enq, run, charge} {
		if s.TraceID != request.TraceID {
			t.Errorf("span %q of %s is in trace %s, not the request's %s", s.Name, s.Service, s.TraceID, request.TraceID)
		}
	}
	if run.ParentID != enq.SpanID || charge.ParentID != run.SpanID {
		t.Errorf("want request > enqueue > delivery > charge:\n%s", otlptest.Describe(spans))
	}
	if run.Attrs["onceq.key"] != "payment:charge/pmt-trace-1" || run.Attrs["onceq.namespace"] != "payment:charge" ||
		run.Attrs["onceq.attempt"] != "1" || run.Attrs["onceq.incarnation"] != "1" {
		t.Errorf("delivery attributes: %v", run.Attrs)
	}
	if repeat.TraceID == enq.TraceID || len(repeat.Links) != 1 || repeat.Links[0].SpanID != enq.SpanID || repeat.Links[0].TraceID != enq.TraceID {
		t.Errorf("the duplicate's enqueue (trace %s) links to %v, want the first's %s/%s", repeat.TraceID, repeat.Links, enq.TraceID, enq.SpanID)
	}
}

func find(spans []otlptest.Span, service, kind, outcome string) *otlptest.Span {
	for i, s := range spans {
		if s.Service == service && s.Kind == kind && s.Attrs["onceq.outcome"] == outcome {
			return &spans[i]
		}
	}
	return nil
}

func byID(spans []otlptest.Span, id string) *otlptest.Span {
	for i, s := range spans {
		if s.SpanID == id {
			return &spans[i]
		}
	}
	return nil
}

// startWorkerBinary builds and runs cmd/worker with this process's OTEL_*
// variables and vars, waits for /readyz and returns its stop (SIGTERM, wait).
func startWorkerBinary(t *testing.T, vars map[string]string) func() {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "worker")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/worker")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/worker: %v\n%s", err, out)
	}
	admin := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	env := map[string]string{"ONCEQ_EMBEDDED": "never", "ONCEQ_OUTBOX_DIR": filepath.Join(dir, "outbox"),
		"ONCEQ_SCAN_ROOT": dir, "ONCEQ_ADMIN_ADDR": admin}
	for k, v := range vars {
		env[k] = v
	}
	cmd := exec.Command(bin)
	cmd.Env = testenv.ChildEnv(env)
	var logs testenv.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop
			}
		}
		select {
		case <-exited:
			t.Fatalf("worker exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("worker not ready within 30s:\n%s", logs.String())
		}
	}
}

// The CLI's enqueues are spans too, their context on the task.
func TestTraceFromCLI(t *testing.T) {
	c := otlptest.Start(t)
	for k, v := range c.Env() {
		t.Setenv(k, v)
	}
	t.Setenv("OTEL_SERVICE_NAME", "")
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	if out, err := cli(t, "", "email", "--to", "ada@example.com", "--subject", "Hi", "--body", "."); err != nil {
		t.Fatalf("email: %v\n%s", err, out)
	}
	// The command flushed its spans before it returned.
	spans := c.Spans()
	enq := find(spans, "onceq-producer", "SPAN_KIND_PRODUCER", "enqueued")
	if enq == nil {
		t.Fatalf("no enqueue span from the CLI:\n%s", otlptest.Describe(spans))
	}
	tasks, err := asynq.NewInspectorFromRedisClient(srv.Client(t)).ListPendingTasks("default")
	if err != nil || len(tasks) != 1 {
		t.Fatalf("pending: %v, %v", tasks, err)
	}
	if want := "00-" + enq.TraceID + "-" + enq.SpanID + "-01"; tasks[0].Headers["traceparent"] != want {
		t.Errorf("the task carries traceparent %q, want %q", tasks[0].Headers["traceparent"], want)
	}
}
