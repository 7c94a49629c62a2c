// Package redistest starts real redis-server processes for tests: a shared
// one per test package with a fresh database per test, or one of a test's
// own, or a Cluster of three, each on a free loopback port, never touching a
// server it did not start. Lua, WAIT, OOM and replication behave as in
// production, which an embedded Redis cannot promise. Without redis-server
// on PATH (and without ONCEQ_TEST_REDIS_URL) tests skip with a clear
// message, unless ONCEQ_REQUIRE_REDIS=1 makes that a failure.
package redistest

import (
	"context"
	"flag"
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
)

// Databases is how many logical databases a started server has; each test
// that asks for a client gets its own, so parallel tests never share keys.
const Databases = 1024

var (
	shared    *Server
	sharedURL *redis.Options // ONCEQ_TEST_REDIS_URL instead of shared
	sharedErr error
	once      sync.Once
	nextDB    atomic.Int64
)

// Main runs the package's tests and stops the shared server afterwards.
// Use it from TestMain: os.Exit(redistest.Main(m)). Example functions
// need a server (Shared) and cannot skip: without one, and unless
// ONCEQ_REQUIRE_REDIS=1, Main runs only tests and fuzz targets (when -run
// was not given), and says so; the tests that need Redis skip themselves.
func Main(m *testing.M) int {
	flag.Parse()
	if sharedServer(); sharedErr != nil && os.Getenv("ONCEQ_REQUIRE_REDIS") != "1" {
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			flag.Set("test.run", "^(Test|Fuzz)")
		}
		fmt.Fprintf(os.Stderr, "redistest: %v: examples left out, tests that need Redis skip\n", sharedErr)
	}
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

// sharedServer starts the package's shared server once: the one at
// ONCEQ_TEST_REDIS_URL when set, else a redis-server of its own.
func sharedServer() {
	once.Do(func() {
		if url := os.Getenv("ONCEQ_TEST_REDIS_URL"); url != "" {
			sharedURL, sharedErr = redis.ParseURL(url)
			if sharedErr != nil {
				sharedErr = fmt.Errorf("ONCEQ_TEST_REDIS_URL: %w", sharedErr)
			}
			return
		}
		if _, err := exec.LookPath("redis-server"); err != nil {
			sharedErr = fmt.Errorf("no redis-server on PATH")
			return
		}
		dir, err := os.MkdirTemp("", "onceq-redistest-")
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = Launch(dir, "--databases", strconv.Itoa(Databases))
	})
}

// Client returns a client on a fresh, empty database of the package's shared
// server, closed when the test ends. With ONCEQ_TEST_REDIS_URL set, it uses
// that server instead and flushes nothing: tests must use unique keys there.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c, err := newShared()
	if err != nil {
		unavailable(t, err.Error())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Shared is Client for code without a testing.TB, such as an Example
// function: a client on a fresh, empty database of the package's shared
// server (Main stops it). It panics when there is none: Main leaves the
// examples out then.
func Shared() *redis.Client {
	c, err := newShared()
	if err != nil {
		panic("redistest: " + err.Error())
	}
	return c
}

func newShared() (*redis.Client, error) {
	sharedServer()
	if sharedErr != nil {
		return nil, sharedErr
	}
	if sharedURL != nil {
		c := redis.NewClient(sharedURL)
		if err := c.Ping(context.Background()).Err(); err != nil {
			c.Close()
			return nil, fmt.Errorf("%s does not answer: %w", sharedURL.Addr, err)
		}
		return c, nil
	}
	db := int(nextDB.Add(1))
	if db >= Databases {
		return nil, fmt.Errorf("more than %d clients in one package", Databases-1)
	}
	c := redis.NewClient(&redis.Options{Addr: shared.Addr, DB: db})
	if err := c.FlushDB(context.Background()).Err(); err != nil { // our own server
		c.Close()
		return nil, fmt.Errorf("flush db %d: %w", db, err)
	}
	return c, nil
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
	s, err := Launch(t.TempDir(), args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
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
	var addrs []string
	for _, s := range StartClusterServers(t) {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// StartClusterServers is StartCluster for a test that stops or restarts
// masters: it returns the three servers. args are extra redis-server
// arguments (e.g. "--appendonly", "yes"). A master restarted in place
// (Restart) rejoins the Cluster with its slots: nodes.conf sits in its
// directory.
func StartClusterServers(t testing.TB, args ...string) []*Server {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		unavailable(t, "no redis-cli on PATH to create a cluster")
	}
	var servers []*Server
	var addrs []string
	for range 3 {
		s := Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}, args...)...)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr)
	}
	create := append([]string{"--cluster", "create"}, addrs...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", create...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: create cluster: %v\n%s", err, out)
	}
	WaitCluster(t, 20*time.Second, servers...)
	return servers
}

// WaitCluster waits until every one of servers says cluster_state:ok, as
// after creating the Cluster or restarting masters, failing the test after
// within.
func WaitCluster(t testing.TB, within time.Duration, servers ...*Server) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("redistest: cluster not ok on %s: %v %s", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
}
