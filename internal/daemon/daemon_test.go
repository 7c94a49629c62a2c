package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/admin"
	"github.com/onceq/onceq/internal/daemon"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func newDaemon(t *testing.T, o daemon.Options) (*daemon.Daemon, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	o.Log = zap.New(core)
	d, err := daemon.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(5 * time.Second) })
	return d, logs
}

func logged(logs *observer.ObservedLogs, part string) bool {
	for _, e := range logs.All() {
		if strings.Contains(e.Message, part) {
			return true
		}
	}
	return false
}

// ONCEQ_REDIS_PASSWORD without a URL authenticates against the default
// address: one connection rule for every daemon. The log names the Redis
// but never the password.
func TestPasswordWithoutURL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--appendonly", "yes")
	if err := srv.Client(t).ConfigSet(t.Context(), "requirepass", "s3cret-pw").Err(); err != nil {
		t.Fatal(err)
	}
	d, logs := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{Password: "s3cret-pw",
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}, DefaultAddr: srv.Addr})
	if err := d.WaitRedis(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := d.Redis.Set(t.Context(), "probe", "1", time.Minute).Err(); err != nil {
		t.Fatalf("write with the password: %v", err)
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "s3cret") {
			t.Fatalf("password logged: %v", e)
		}
	}
	if !strings.Contains(d.Where, srv.Addr) || !strings.Contains(d.Where, "with password") {
		t.Fatalf("where %q", d.Where)
	}
	if logged(logs, "persists nothing") {
		t.Fatal("persistence warning with AOF on")
	}
}

// Redis down at start: the daemon keeps retrying and /readyz says it is
// waiting, instead of exiting (a crash loop in Kubernetes); when Redis
// comes, it proceeds. A Redis without AOF or RDB gets a warning.
func TestWaitsForRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--appendonly", "no", "--save", "")
	srv.Stop()
	d, logs := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + srv.Addr,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}})
	adm, err := d.Listen(config.Admin{Addr: "127.0.0.1:0"}, http.NewServeMux(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- d.WaitRedis(t.Context()) }()

	deadline := time.Now().Add(30 * time.Second)
	for !logged(logs, "redis not reachable; retrying") {
		if time.Now().After(deadline) {
			t.Fatal("no retry logged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get(t, "http://"+adm.Addr()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting: waiting for Redis") {
		t.Fatalf("readyz while Redis is down: %d %q", code, body)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitRedis did not return after Redis came up")
	}
	d.SetReady(nil)
	if code, body := get(t, "http://"+adm.Addr()+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz with Redis up: %d %q", code, body)
	}
	if !logged(logs, "persists nothing") {
		t.Fatal("no warning about a Redis without AOF or RDB")
	}
	d.Shutdown(5 * time.Second)
	if err := d.Redis.Ping(context.Background()).Err(); err == nil {
		t.Fatal("redis client still open after Shutdown")
	}
}

// WaitRedis gives up only when its context ends.
func TestWaitRedisCancelled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Stop()
	d, _ := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + srv.Addr,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	if err := d.WaitRedis(ctx); err == nil || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("WaitRedis after cancel: %v", err)
	}
}

// Shutdown runs the stops in reverse order of registration.
func TestShutdownOrder(t *testing.T) {
	t.Parallel()
	d, _ := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://127.0.0.1:1",
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}})
	var order []string
	for _, n := range []string{"server", "store", "asynq"} {
		d.OnStop(n, func(context.Context) error { order = append(order, n); return nil })
	}
	d.Shutdown(time.Second)
	if strings.Join(order, ",") != "asynq,store,server" {
		t.Fatalf("order %v", order)
	}
	if err := d.Ready(context.Background()); err == nil || err.Error() != "shutting down" {
		t.Fatalf("ready after shutdown: %v", err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// onceq_build_info is exported with the build's version, for alerts and
// dashboards that compare pods during a rollout.
func TestBuildInfo(t *testing.T) {
	d, _ := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + redistest.Client(t).Options().Addr}})
	mfs, err := d.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "onceq_build_info" && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge().GetValue() == 1 {
			return
		}
	}
	t.Fatal("no onceq_build_info 1 in the registry")
}

// A Redis that answers PING but refuses writes (here NOREPLICAS: it wants a
// replica it does not have) makes the daemon not ready, and /readyz says
// why; it said ready. Writes accepted again: ready again.
func TestNotReadyWhileWritesRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	d, _ := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + srv.Addr}})
	if err := d.WaitRedis(t.Context()); err != nil {
		t.Fatal(err)
	}
	d.SetReady(nil)
	mux := http.NewServeMux()
	admin.Routes(mux, admin.Options{Ready: d.Ready})
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz %d %q, want ready", code, body)
	}
	rdb := srv.Client(t)
	if err := rdb.ConfigSet(t.Context(), "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "redis refuses writes (NOREPLICAS)") {
		t.Fatalf("/readyz %d %q while Redis refuses writes", code, body)
	}
	if up := redisUp(t, d); up != 0 {
		t.Errorf("onceq_redis_up %v while Redis refuses writes, want 0", up)
	}
	if err := rdb.ConfigSet(t.Context(), "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz %d %q once writes are accepted again", code, body)
	}
	if up := redisUp(t, d); up != 1 {
		t.Errorf("onceq_redis_up %v with writes accepted, want 1", up)
	}
	srv.Stop()
	if up := redisUp(t, d); up != 0 {
		t.Errorf("onceq_redis_up %v with Redis stopped, want 0", up)
	}
}

// redisUp is d's onceq_redis_up, as a scrape reads it.
func redisUp(t *testing.T, d *daemon.Daemon) float64 {
	t.Helper()
	mfs, err := d.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "onceq_redis_up" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no onceq_redis_up in the registry")
	return -1
}

// Redis's default persistence, RDB snapshots without AOF, is warned about:
// 20 of 20 jobs ran again after such a Redis restarted. AOF is not.
func TestRDBOnlyWarning(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--appendonly", "no", "--save", "3600 1"}, true},
		{[]string{"--appendonly", "yes", "--save", "3600 1"}, false},
	} {
		srv := redistest.Start(t, c.args...)
		d, logs := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + srv.Addr}})
		if err := d.WaitRedis(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := logged(logs, "RDB snapshots only"); got != c.warn {
			t.Errorf("%v: RDB-only warning %v, want %v", c.args, got, c.warn)
		}
	}
}

// NoRetries gives a client that re-sends nothing; by default go-redis's
// retries stay.
func TestNoRetries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, no := range []bool{false, true} {
		d, _ := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + srv.Addr}, NoRetries: no})
		c, ok := d.Redis.(*redis.Client)
		if !ok {
			t.Fatalf("client %T, want *redis.Client", d.Redis)
		}
		// go-redis keeps -1 (none) as 0 once normalised; its default is 3.
		if got := c.Options().MaxRetries; (got == 0) != no {
			t.Errorf("NoRetries %v: MaxRetries %d", no, got)
		}
	}
}

// A worker that cannot write its liveness key is not ready, though Redis
// takes the probe's write, and /readyz names Redis's refusal.
func TestNotReadyWithoutLiveness(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	d, _ := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + srv.Addr}})
	if err := d.WaitRedis(t.Context()); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t)
	rdb.ConfigSet(t.Context(), "maxmemory", "1")
	oom := rdb.Set(t.Context(), "k", "v", 0).Err() // as the worker's refresh got it
	rdb.ConfigSet(t.Context(), "maxmemory", "0")
	if oom == nil {
		t.Fatal("no OOM error under maxmemory 1")
	}
	var live atomic.Pointer[error]
	live.Store(&oom)
	d.SetReady(func() error {
		if err := live.Load(); err != nil {
			return fmt.Errorf("%w: %w", admin.ErrNoLiveness, *err)
		}
		return nil
	})
	mux := http.NewServeMux()
	admin.Routes(mux, admin.Options{Ready: d.Ready})
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot keep its liveness key (OOM)") {
		t.Fatalf("/readyz %d %q, want not ready: no liveness key (OOM)", code, body)
	}
	live.Store(nil)
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz %d %q once the key is written again", code, body)
	}
}

// A second daemon on the worker's embedded Redis (producer serve beside
// the worker, as the README runs them) says it is the embedded one, not
// that miniredis has no CONFIG command.
func TestSecondDaemonOnTheEmbeddedRedis(t *testing.T) {
	t.Parallel()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	first, logs := newDaemon(t, daemon.Options{Name: "worker", Embedded: true, DefaultAddr: addr})
	if err := first.WaitRedis(t.Context()); err != nil || !logged(logs, "IN-MEMORY") {
		t.Fatalf("embedded start: %v, logs %v", err, logs.All())
	}
	second, logs := newDaemon(t, daemon.Options{Name: "api", DefaultAddr: addr})
	if err := second.WaitRedis(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !logged(logs, "embedded IN-MEMORY Redis") || logged(logs, "could not read") {
		t.Fatalf("second daemon logged %v", logs.All())
	}
}

// An optional dependency's /readyz line says what is known: "not checked
// yet" until its first check answers, "unreachable" once one failed, and
// nothing once one succeeded.
func TestOptionalSaysWhatIsKnown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	d, _ := newDaemon(t, daemon.Options{Name: "test", Redis: config.Redis{URL: "redis://" + srv.Addr}})
	answers := make(chan error)
	stop := d.Optional("postgres", []string{"order:fulfil"}, func(ctx context.Context) error {
		select {
		case err := <-answers:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	defer stop()
	want := func(line string) {
		t.Helper()
		for range 200 { // the checker's loop takes the answer, then records it
			if got := strings.Join(d.Degraded(), "\n"); got == line {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("Degraded %q, want %q", d.Degraded(), line)
	}
	want("postgres not checked yet: not ready: order:fulfil")
	answers <- fmt.Errorf("connection refused")
	want("postgres unreachable: not ready: order:fulfil")
	answers <- nil
	want("")
}
