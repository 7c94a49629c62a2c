package k8s_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/testenv"
)

// The real worker binary, run with the dev overlay's environment (ConfigMap
// and Secret, as envFrom gives it to the pod) against a real redis-server,
// becomes ready, serves the queue metric KEDA scales on, and drains on
// SIGTERM with exit 0 well inside the manifest's grace period.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "cmd", "worker")); err != nil {
		t.Fatalf("cmd/worker missing: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "./cmd/worker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/worker: %v\n%s", err, out)
	}

	m := overlay(t, "dev")
	w := findWorkload(t, m, "Deployment", "onceq-worker")
	grace := time.Duration(*w.pod.Spec.TerminationGracePeriodSeconds) * time.Second
	env := envOf(t, m, onceqContainer(t, w)).vars

	redis := redistest.Start(t)
	adminAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	// What differs from the pod: loopback addresses and writable temp dirs.
	env["ONCEQ_ADMIN_ADDR"] = adminAddr
	env["ONCEQ_REDIS_URL"] = "redis://" + redis.Addr + "/0"
	env["ONCEQ_OUTBOX_DIR"] = t.TempDir()
	env["ONCEQ_SCAN_ROOT"] = t.TempDir()
	token := env["ONCEQ_ADMIN_TOKEN"]
	if token == "" {
		t.Fatal("dev Secret has no ONCEQ_ADMIN_TOKEN")
	}

	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir()
	cmd.Env = processEnv(env)
	var logs testenv.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // ErrProcessDone once it has exited
		<-exited
	})

	base := "http://" + adminAddr
	if err := waitReady(base+"/readyz", 30*time.Second, exited); err != nil {
		t.Fatalf("worker not ready: %v\nworker output:\n%s", err, logs.String())
	}
	if code := get(t, base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", code)
	}

	// A queue must exist for onceq_queue_size to have samples; a task far
	// in the future creates one without running anything.
	client := asynq.NewClientFromRedisClient(redis.Client(t))
	if _, err := client.Enqueue(asynq.NewTask("k8s:probe", nil), asynq.Queue("low"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if code := get(t, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token = %d, want 401", code)
	}
	metrics := getBody(t, base+"/metrics", token)
	if want := `onceq_queue_size{queue="low",state="pending"}`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s, which the KEDA trigger scales on", want)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("worker exited with %v after SIGTERM, want 0\nworker output:\n%s", waitErr, logs.String())
		}
		t.Logf("worker drained in %s (grace period %s)", time.Since(start).Round(time.Millisecond), grace)
	case <-time.After(grace):
		t.Fatalf("worker still running %s after SIGTERM: the kubelet would SIGKILL it\nworker output:\n%s", grace, logs.String())
	}
}

// processEnv is the test process's environment without any ONCEQ_ variable
// (config rejects unknown ones, and CI sets some), plus env.
func processEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.Prefix+"_") {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func waitReady(url string, bound time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(bound)
	c := &http.Client{Timeout: 2 * time.Second}
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("worker exited before it was ready")
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(errors.New("timed out after "+bound.String()), last)
}

func get(t *testing.T, url, token string) int {
	t.Helper()
	resp := request(t, url, token)
	resp.Body.Close()
	return resp.StatusCode
}

func getBody(t *testing.T, url, token string) string {
	t.Helper()
	resp := request(t, url, token)
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s", url, resp.Status)
	}
	return b.String()
}

func request(t *testing.T, url, token string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
