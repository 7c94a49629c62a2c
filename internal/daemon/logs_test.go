package daemon_test

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/testenv"
)

// Both daemons, in production mode, through a 10 s Redis outage and a
// failed start: every line either writes parses as JSON. go-redis's own
// logger, Go's standard log and the fatal start-up error wrote plain text.
func TestEveryLogLineIsJSON(t *testing.T) {
	bin := buildDaemons(t)
	srv := redistest.Start(t)
	redisURL := "redis://" + srv.Addr + "/0"

	workerAdmin := loopback(t)
	worker := startDaemon(t, filepath.Join(bin, "worker"), nil, map[string]string{
		"ONCEQ_REDIS_URL": redisURL, "ONCEQ_ADMIN_ADDR": workerAdmin,
		"ONCEQ_OUTBOX_DIR": t.TempDir(), "ONCEQ_SCAN_ROOT": t.TempDir(), "ONCEQ_SHUTDOWN_TIMEOUT": "2s",
		"ONCEQ_LOG_LEVEL": "debug", // go-redis's lines are debug
	})
	apiAddr := loopback(t)
	api := startDaemon(t, filepath.Join(bin, "producer"), []string{"serve"}, map[string]string{
		"ONCEQ_REDIS_URL": redisURL, "ONCEQ_API_ADDR": apiAddr, "ONCEQ_LOG_LEVEL": "debug",
	})
	for _, url := range []string{"http://" + workerAdmin + "/readyz", "http://" + apiAddr + "/readyz"} {
		waitStatus(t, url, http.StatusOK)
	}

	srv.Stop()
	outage := time.Now()
	for _, url := range []string{"http://" + workerAdmin + "/readyz", "http://" + apiAddr + "/readyz"} {
		waitStatus(t, url, http.StatusServiceUnavailable)
	}
	time.Sleep(10*time.Second - time.Since(outage)) // the outage's length, not a margin
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"http://" + workerAdmin + "/readyz", "http://" + apiAddr + "/readyz"} {
		waitStatus(t, url, http.StatusOK)
	}
	worker.stop(t)
	api.stop(t)

	// A start that fails: the reason is a JSON line too.
	for _, d := range []*daemonProc{
		startDaemon(t, filepath.Join(bin, "worker"), nil, map[string]string{"ONCEQ_CONCURRENCY": "many"}),
		startDaemon(t, filepath.Join(bin, "producer"), []string{"serve"}, map[string]string{"ONCEQ_API_ADDR": "nowhere"}),
	} {
		if err := d.wait(); err == nil {
			t.Errorf("%s started with a bad configuration", d.name)
		}
		if !strings.Contains(d.out.String(), `"level":"error"`) {
			t.Errorf("%s: no error line for its failed start:\n%s", d.name, d.out.String())
		}
		checkJSON(t, d)
	}
	for _, d := range []*daemonProc{worker, api} {
		checkJSON(t, d)
	}
	if !strings.Contains(worker.out.String()+api.out.String(), `"logger":"redis"`) {
		t.Errorf("no line from go-redis's logger during the outage; the test did not exercise it")
	}
}

type daemonProc struct {
	name   string
	cmd    *exec.Cmd
	out    *testenv.Buffer
	exited chan struct{}
	err    error
}

func buildDaemons(t *testing.T, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	args := append(append([]string{"build", "-o", dir + string(filepath.Separator)}, flags...), "./cmd/worker", "./cmd/producer")
	build := exec.Command("go", args...)
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

func loopback(t *testing.T) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
}

func startDaemon(t *testing.T, bin string, args []string, env map[string]string) *daemonProc {
	t.Helper()
	d := &daemonProc{name: filepath.Base(bin) + " " + strings.Join(args, " "), cmd: exec.Command(bin, args...),
		out: &testenv.Buffer{}, exited: make(chan struct{})}
	d.cmd.Dir = t.TempDir()
	d.cmd.Env = testenv.ChildEnv(env)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.cmd.Process.Kill(); <-d.exited })
	return d
}

func (d *daemonProc) wait() error { <-d.exited; return d.err }

func (d *daemonProc) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.wait(); err != nil {
		t.Errorf("%s: exit %v after SIGTERM\n%s", d.name, err, d.out.String())
	}
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered %d (last: %v)", url, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkJSON(t *testing.T, d *daemonProc) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(d.out.String()))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Errorf("%s: line %d is not JSON: %q", d.name, n, sc.Text())
		}
	}
	if n == 0 {
		t.Errorf("%s wrote nothing", d.name)
	}
}

// Both binaries say which build they are, as the image build stamps it.
func TestVersionStamped(t *testing.T) {
	bin := buildDaemons(t, "-ldflags", "-X github.com/onceq/onceq/internal/version.version=v9.8.7 -X github.com/onceq/onceq/internal/version.commit=0123456789abcdef")
	for _, name := range []string{"worker", "producer"} {
		out, err := exec.Command(filepath.Join(bin, name), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "v9.8.7 (0123456789ab)") {
			t.Errorf("%s --version: %v %q, want the stamped version and commit", name, err, out)
		}
	}
}
