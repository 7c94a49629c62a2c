package faulttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/daemon"
	"github.com/onceq/onceq/internal/testenv"
)

// A bounded stream of payments through a Sentinel-managed master, a forced
// failover and a kill -9 of the (new) master, with and without
// ONCEQ_REDIS_MIN_REPLICAS. Counted at the gateway: accepted jobs that never
// ran (lost), jobs whose handler ran twice, and double charges. Asserted:
// no double charge in either mode (the gateway dedups by key) and, with
// WAIT, no lost accepted job; the rest is printed.
func TestSentinelFailover(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	for _, mode := range []struct {
		name        string
		minReplicas int
	}{{"async", 0}, {"wait", 1}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			sentinelStream(t, mode.name, mode.minReplicas)
		})
	}
}

func sentinelStream(t *testing.T, mode string, minReplicas int) {
	r := newRig(t, "--appendonly", "yes")
	host, port, _ := net.SplitHostPort(r.redis.Addr)
	replica := redistest.Start(t, "--appendonly", "yes", "--replicaof", host, port)
	nodes := map[string]*redistest.Server{r.redis.Addr: r.redis, replica.Addr: replica}
	sentinels := startSentinels(t, r.redis.Addr, 3)
	url := "redis-sentinel://" + strings.Join(sentinels, ",") + "/mymaster"

	rc := config.Redis{URL: url, MinReplicas: minReplicas, WaitTimeout: time.Second,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	rdb, err := daemon.Client(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, "worker-"+mode, r.workerVars(map[string]string{
		"ONCEQ_REDIS_URL": url, "ONCEQ_REDIS_MIN_REPLICAS": strconv.Itoa(minReplicas),
		"ONCEQ_CONCURRENCY": "10", "ONCEQ_LEASE": "10s",
	}))

	const n = 200
	sent := make([]dedup.Job, 0, n)
	var accepted []dedup.Job
	var faults sync.WaitGroup
	for i := range n {
		switch i {
		case 60:
			faults.Go(func() {
				err := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]}).Failover(context.Background(), "mymaster").Err()
				t.Logf("%s: forced failover at job %d: %v", mode, i, err)
			})
		case 140:
			addr := masterAddr(t, sentinels[0])
			srv := nodes[addr]
			if srv == nil {
				t.Fatalf("master %s is none of ours", addr)
			}
			srv.Stop()
			t.Logf("%s: kill -9 of master %s at job %d", mode, addr, i)
			// It comes back in the role Sentinel last wrote to its
			// redis.conf, as a deployed node does: from its first
			// command line, a promoted replica would replicate its own
			// replica, and Sentinel finds no replica good to promote.
			faults.Go(func() {
				time.Sleep(3 * time.Second)
				if err := srv.Restart(); err != nil {
					t.Errorf("restart %s: %v", addr, err)
				}
			})
		}
		j := r.payment(fmt.Sprintf("sen-%s-%03d", mode, i), int64(100+i))
		sent = append(sent, j)
		for try := 0; try < 50; try++ { // a client retrying until it gets an answer
			o, err := prod.Enqueue(context.Background(), j)
			if err == nil {
				if o.Decision == dedup.Enqueued || o.Decision == dedup.Duplicate {
					accepted = append(accepted, j)
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(15 * time.Millisecond)
	}
	faults.Wait()

	// asynq recovers tasks of a lost dequeue after 1-2 minutes.
	ran := func() (bool, string) {
		missing := 0
		for _, j := range accepted {
			if r.gw.Posts(j.Key.String()) == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d accepted jobs not run yet", missing)
	}
	deadline := time.Now().Add(150 * time.Second)
	for ok, _ := ran(); !ok && time.Now().Before(deadline); ok, _ = ran() {
		time.Sleep(500 * time.Millisecond)
	}
	var lost, twice, charged2 int
	for _, j := range accepted {
		k := j.Key.String()
		switch p := r.gw.Posts(k); {
		case p == 0:
			lost++
		case p > 1:
			twice++
		}
		if r.gw.Charges(k) > 1 {
			charged2++
		}
	}
	t.Logf("sentinel %s (ONCEQ_REDIS_MIN_REPLICAS=%d): %d sent, %d accepted, %d accepted but never ran, %d ran twice, %d charged twice",
		mode, minReplicas, len(sent), len(accepted), lost, twice, charged2)
	if charged2 > 0 {
		t.Errorf("%d payments charged twice", charged2)
	}
	if minReplicas > 0 && lost > 0 {
		t.Errorf("with WAIT, %d accepted jobs were lost", lost)
	}
}

// startSentinels runs n Sentinels watching master, stopped (by pid) when
// the test ends, and returns their addresses once they see each other.
func startSentinels(t *testing.T, master string, n int) []string {
	t.Helper()
	host, port, _ := net.SplitHostPort(master)
	var addrs []string
	for i := range n {
		p := testenv.FreePort(t)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 2\n"+
			"sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n"+
			"sentinel parallel-syncs mymaster 1\n", p, dir, host, port)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("redis-server", conf, "--sentinel")
		log, _ := os.Create(filepath.Join(dir, "sentinel.log"))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("sentinel %d: %v", i, err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	eventually(t, 30*time.Second, "sentinels to find each other and the replica", func() (bool, string) {
		for _, a := range addrs {
			sc := redis.NewSentinelClient(&redis.Options{Addr: a})
			m, err := sc.Master(context.Background(), "mymaster").Result()
			sc.Close()
			if err != nil {
				return false, err.Error()
			}
			if m["num-other-sentinels"] != strconv.Itoa(n-1) || m["num-slaves"] != "1" {
				return false, fmt.Sprintf("%s sees %s other sentinels, %s replicas", a, m["num-other-sentinels"], m["num-slaves"])
			}
		}
		return true, ""
	})
	return addrs
}

func masterAddr(t *testing.T, sentinel string) string {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(a[0], a[1])
}
