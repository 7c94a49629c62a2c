package faulttest

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// rig is one scenario's world: its own Redis (one redis-server, or a
// Cluster of three masters), the downstreams that count effects, and the
// test's own view of Redis.
type rig struct {
	t       *testing.T
	redis   *redistest.Server   // the one server; nil on Cluster
	cluster []*redistest.Server // the Cluster's masters; nil on one server
	rdb     redis.UniversalClient
	store   storage.Store
	prod    *dedup.Producer
	client  *asynq.Client
	insp    *asynq.Inspector
	gw      *Gateway
	smtp    *SMTPServer
}

// newRig starts a rig on a redis-server of its own; redisArgs are extra
// redis-server arguments.
func newRig(t *testing.T, redisArgs ...string) *rig {
	t.Helper()
	binaries(t) // build before the clocks of the scenario start
	srv := redistest.Start(t, redisArgs...)
	r := rigOn(t, srv.Client(t))
	r.redis = srv
	return r
}

// newClusterRig starts a rig on a 3-master Redis Cluster of its own;
// redisArgs are extra arguments for each master.
func newClusterRig(t *testing.T, redisArgs ...string) *rig {
	t.Helper()
	binaries(t)
	masters := redistest.StartClusterServers(t, redisArgs...)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrsOf(masters)})
	t.Cleanup(func() { rdb.Close() })
	r := rigOn(t, rdb)
	r.cluster = masters
	return r
}

// topologies are the Redis deployments a scenario meant for both runs on,
// as subtests named for them.
var topologies = []struct {
	name   string
	newRig func(t *testing.T, redisArgs ...string) *rig
}{{"redis", newRig}, {"cluster", newClusterRig}}

func rigOn(t *testing.T, rdb redis.UniversalClient) *rig {
	t.Helper()
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw := NewGateway()
	t.Cleanup(gw.Close)
	smtp, err := NewSMTPServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(smtp.Close)
	return &rig{t: t, rdb: rdb, store: store,
		prod:   oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{}),
		client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		gw: gw, smtp: smtp}
}

func addrsOf(servers []*redistest.Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// redisVars point a binary at this rig's Redis, as config/redis.go reads it.
func (r *rig) redisVars() map[string]string {
	if r.cluster != nil {
		return map[string]string{"ONCEQ_REDIS_CLUSTER_NODES": strings.Join(addrsOf(r.cluster), ",")}
	}
	return map[string]string{"ONCEQ_REDIS_URL": "redis://" + r.redis.Addr}
}

// workerVars points a worker at this rig's Redis and downstreams; extra wins.
func (r *rig) workerVars(extra map[string]string) map[string]string {
	v := r.redisVars()
	v["ONCEQ_GATEWAY_URL"] = r.gw.URL
	v["ONCEQ_SMTP_ADDR"] = r.smtp.Addr
	maps.Copy(v, extra)
	return v
}

// restartRedis kills every server of the rig's Redis (SIGKILL) at once and
// starts them again on their ports and directories: with AOF, the data
// comes back; a Cluster's masters rejoin with their slots.
func (r *rig) restartRedis() {
	r.t.Helper()
	servers := r.cluster
	if servers == nil {
		servers = []*redistest.Server{r.redis}
	}
	for _, s := range servers {
		s.Stop()
	}
	time.Sleep(time.Second)
	for _, s := range servers {
		if err := s.Restart(); err != nil {
			r.t.Fatalf("restart redis: %v", err)
		}
	}
	if r.cluster != nil {
		redistest.WaitCluster(r.t, 30*time.Second, r.cluster...)
	}
}

func (r *rig) payment(id string, amount int64) dedup.Job {
	r.t.Helper()
	j, err := testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: id, Account: "acct-" + id, Amount: amount, Currency: "EUR"}))
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

func (r *rig) email(id, to string) dedup.Job {
	r.t.Helper()
	j, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: id, To: to, Subject: "faulttest " + id, Body: "Hello from " + id}))
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

// enqueue submits jobs through the Producer; each must be accepted.
func (r *rig) enqueue(jobs ...dedup.Job) {
	r.t.Helper()
	for _, j := range jobs {
		o, err := r.prod.Enqueue(context.Background(), j)
		if err != nil || o.Decision != dedup.Enqueued {
			r.t.Fatalf("enqueue %s: %+v %v", j.Key, o, err)
		}
	}
}

// redeliver enqueues j again without its task id: a second delivery of the
// same job, which at-least-once delivery allows and only the worker-side
// record can stop.
func (r *rig) redeliver(j dedup.Job) *asynq.TaskInfo {
	r.t.Helper()
	info, err := r.client.Enqueue(j.Task, asynq.Queue(j.Queue), asynq.MaxRetry(max(j.MaxRetry, 10)), asynq.Retention(time.Hour))
	if err != nil {
		r.t.Fatalf("redeliver %s: %v", j.Key, err)
	}
	return info
}

func (r *rig) status(k dedup.Key) storage.Record {
	r.t.Helper()
	rec, err := r.store.Status(context.Background(), k)
	if err != nil {
		r.t.Fatalf("status %s: %v", k, err)
	}
	return rec
}

// queueLoad sums every queue's tasks by state.
type queueLoad struct{ active, pending, scheduled, retry, completed, archived int }

func (q queueLoad) idle() bool { return q.active+q.pending+q.scheduled+q.retry == 0 }

func (q queueLoad) String() string {
	return fmt.Sprintf("active %d, pending %d, scheduled %d, retry %d, completed %d, archived %d",
		q.active, q.pending, q.scheduled, q.retry, q.completed, q.archived)
}

func (r *rig) load() (queueLoad, error) {
	var q queueLoad
	names, err := r.insp.Queues()
	if err != nil {
		return q, err
	}
	for _, n := range names {
		info, err := r.insp.GetQueueInfo(n)
		if err != nil {
			return q, err
		}
		q.active += info.Active
		q.pending += info.Pending
		q.scheduled += info.Scheduled
		q.retry += info.Retry
		q.completed += info.Completed
		q.archived += info.Archived
	}
	return q, nil
}

// settled is a condition for eventually: every key done, no task left to run.
func (r *rig) settled(keys ...dedup.Key) func() (bool, string) {
	return func() (bool, string) {
		for _, k := range keys {
			rec, err := r.store.Status(context.Background(), k)
			if err != nil {
				return false, err.Error()
			}
			if rec.State != dedup.StatusDone {
				return false, fmt.Sprintf("%s is %s (attempts %d, error %q)", k, rec.State, rec.Attempts, rec.Error)
			}
		}
		q, err := r.load()
		if err != nil {
			return false, err.Error()
		}
		if !q.idle() || q.archived != 0 {
			return false, q.String()
		}
		running, err := r.running()
		if err != nil || len(running) > 0 {
			return false, fmt.Sprintf("running records %v (%v)", running, err)
		}
		return true, ""
	}
}

// running lists the idempotency records, of any key, still in state running.
func (r *rig) running() ([]string, error) {
	ctx := context.Background()
	var out []string
	names, err := r.keys(ctx, "onceq:*:rec")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		// The record's layout is the store's business: ask it.
		_, name, _ := strings.Cut(n, "}:") // onceq:{<home>}:<key>:rec
		name = strings.TrimSuffix(name, ":rec")
		k, err := dedup.ParseKey(name)
		if err != nil {
			return nil, err
		}
		rec, err := r.store.Status(ctx, k)
		if err != nil {
			return nil, err
		}
		if rec.State == dedup.StatusRunning {
			out = append(out, n)
		}
	}
	return out, nil
}

// keys lists the keys matching pattern on every master.
func (r *rig) keys(ctx context.Context, pattern string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		err := c.ForEachMaster(ctx, scan)
		return out, err
	case *redis.Client:
		err := scan(ctx, c)
		return out, err
	}
	return nil, fmt.Errorf("faulttest: cannot scan a %T", r.rdb)
}

// eventually polls cond until it holds, failing the test after within; it
// returns how long that took.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for {
		ok, detail := cond()
		if ok {
			return time.Since(start)
		}
		last = detail
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s; last: %s", what, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitClosed(t *testing.T, within time.Duration, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(within):
		t.Fatalf("%s: not within %s", what, within)
	}
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// metricSum adds up the samples of name in Prometheus text whose labels
// include every label in want.
func metricSum(text, name string, want map[string]string) float64 {
	var sum float64
	for line := range strings.SplitSeq(text, "\n") {
		m := sampleRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || m[1] != name {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if v, err := strconv.ParseFloat(m[3], 64); match && err == nil {
			sum += v
		}
	}
	return sum
}
