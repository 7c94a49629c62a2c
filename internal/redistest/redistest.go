// Package redistest starts real redis-server processes for tests: one per
// test package, on a free loopback port, never touching a server it did not
// start. Without redis-server (and without ONCEQ_TEST_REDIS_URL) tests skip
// with a clear message, unless ONCEQ_REQUIRE_REDIS=1 makes that a failure.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/internal/redisproc"
)

// Databases is how many logical databases a started server has; each test
// that asks for a client gets its own, so parallel tests never share keys.
const Databases = 1024

// Server is a redis-server process this package started; Addr, Stop and
// Restart come from redisproc.
type Server struct{ *redisproc.Server }

var (
	shared    *Server
	sharedErr error
	once      sync.Once
	nextDB    atomic.Int64
)

// Main runs the package's tests and stops the shared server afterwards.
// Use it from TestMain: os.Exit(redistest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		shared.Stop()
		os.RemoveAll(shared.Dir)
	}
	return code
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" {
		t.Fatalf("redistest: real Redis required (ONCEQ_REQUIRE_REDIS=1) but %s", why)
	}
	t.Skipf("redistest: skipping, %s (install redis-server or set ONCEQ_TEST_REDIS_URL)", why)
}

// Client returns a client on a fresh, empty database of the package's shared
// server, closed when the test ends. With ONCEQ_TEST_REDIS_URL set, it uses
// that server instead and flushes nothing: tests must use unique keys there.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	if url := os.Getenv("ONCEQ_TEST_REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("redistest: ONCEQ_TEST_REDIS_URL: %v", err)
		}
		return client(t, opt)
	}
	once.Do(func() {
		if _, err := exec.LookPath("redis-server"); err != nil {
			sharedErr = fmt.Errorf("no redis-server on PATH")
			return
		}
		dir, err := os.MkdirTemp("", "onceq-redistest-")
		if err != nil {
			sharedErr = err
			return
		}
		var p *redisproc.Server
		if p, sharedErr = redisproc.Start(dir, "--databases", strconv.Itoa(Databases)); sharedErr == nil {
			shared = &Server{p}
		}
	})
	if sharedErr != nil {
		unavailable(t, sharedErr.Error())
	}
	db := int(nextDB.Add(1))
	if db >= Databases {
		t.Fatalf("redistest: more than %d clients in one package", Databases-1)
	}
	c := client(t, &redis.Options{Addr: shared.Addr, DB: db})
	if err := c.FlushDB(context.Background()).Err(); err != nil { // our own server
		t.Fatalf("redistest: flush db %d: %v", db, err)
	}
	return c
}

func client(t testing.TB, opt *redis.Options) *redis.Client {
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		unavailable(t, fmt.Sprintf("%s does not answer: %v", opt.Addr, err))
	}
	return c
}

// Start starts a dedicated server for a test that stops or restarts it,
// stopped when the test ends. args are extra redis-server arguments
// (e.g. "--appendonly", "yes").
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "no redis-server on PATH")
	}
	p, err := redisproc.Start(t.TempDir(), args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Server{p}
}

// Client returns a client on db 0 of this server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	return client(t, &redis.Options{Addr: s.Addr})
}

// StartCluster starts a Redis Cluster of three masters on free loopback
// ports, stopped when the test ends, and returns their addresses.
func StartCluster(t testing.TB) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		unavailable(t, "no redis-cli on PATH to create a cluster")
	}
	var addrs []string
	for range 3 {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: create cluster: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("redistest: cluster not ok on %s: %v %s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs
}
