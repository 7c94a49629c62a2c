package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/onceq/onceq/tasks/gateway"
	"github.com/onceq/onceq/tasks/outbox"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

type worker struct {
	admin string
	logs  *testenv.Buffer
	stop  func() error
}

// startWorker runs the worker through runWith, as main does, with env set
// and asynq's retry back-off cut to 50ms.
func startWorker(t *testing.T, env map[string]string) *worker {
	t.Helper()
	return startWorkerWith(t, env, hooks{})
}

// startWorkerWith is startWorker with hooks beyond the test defaults.
func startWorkerWith(t *testing.T, env map[string]string, h hooks) *worker {
	t.Helper()
	h.env = env
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	logs := &testenv.Buffer{}
	go func() {
		h.retryDelay = func(int, error, *asynq.Task) time.Duration { return 50 * time.Millisecond }
		h.delayedTaskCheck = 50 * time.Millisecond
		h.ready = func(addr string) { ready <- addr }
		done <- runWith(ctx, nil, io.Discard, logs, h)
	}()
	w := &worker{logs: logs}
	select {
	case w.admin = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("worker exited at start: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("worker not ready in 30s:\n%s", logs)
	}
	var once sync.Once
	var stopErr error
	w.stop = func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	t.Cleanup(func() {
		if err := w.stop(); err != nil {
			t.Errorf("worker stop: %v", err)
		}
	})
	return w
}

func baseEnv(t *testing.T, redisAddr string) map[string]string {
	return map[string]string{
		"ONCEQ_REDIS_URL":        "redis://" + redisAddr,
		"ONCEQ_ADMIN_ADDR":       "127.0.0.1:0",
		"ONCEQ_OUTBOX_DIR":       filepath.Join(t.TempDir(), "outbox"),
		"ONCEQ_SCAN_ROOT":        t.TempDir(),
		"ONCEQ_LOG_LEVEL":        "debug",
		"ONCEQ_SHUTDOWN_TIMEOUT": "2s",
		"ONCEQ_CONCURRENCY":      "4",
		// The tests read results off completed tasks, as the dashboard does.
		"ONCEQ_KEEP_COMPLETED": "true",
	}
}

type env struct {
	rdb      *redis.Client
	store    storage.Store
	producer *dedup.Producer
	client   *asynq.Client
	insp     *asynq.Inspector
}

func newEnv(t *testing.T, rdb *redis.Client) env {
	t.Helper()
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return env{rdb: rdb, store: store, producer: oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{}),
		client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb)}
}

// enqueued enqueues the job a constructor built, failing t unless both
// succeed and the job is enqueued: e.enqueued(t)(testenv.Job(tasks.Payments.Job(...))).
func (e env) enqueued(t *testing.T) func(dedup.Job, error) (dedup.Job, dedup.Outcome) {
	return func(j dedup.Job, err error) (dedup.Job, dedup.Outcome) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		j.WriteResult = true // as the worker's ONCEQ_KEEP_COMPLETED (baseEnv)
		o, err := e.producer.Enqueue(context.Background(), j)
		if err != nil || o.Decision != dedup.Enqueued {
			t.Fatalf("enqueue %v: %+v %v", j.Key, o, err)
		}
		return j, o
	}
}

func (e env) waitState(t *testing.T, k dedup.Key, want dedup.Status) storage.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r, err := e.store.Status(context.Background(), k)
		if err == nil && r.State == want {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, _ := e.store.Status(context.Background(), k)
	t.Fatalf("%v never reached %s: %+v", k, want, r)
	return r
}

func (e env) waitTask(t *testing.T, queue, id string, want asynq.TaskState) *asynq.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var info *asynq.TaskInfo
	for time.Now().Before(deadline) {
		var err error
		if info, err = e.insp.GetTaskInfo(queue, id); err == nil && info.State == want {
			return info
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("task %s never reached %v: %+v", id, want, info)
	return nil
}

func outboxCount(t *testing.T, dir string) int {
	t.Helper()
	n, err := outbox.Mailer{Dir: dir}.Count()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The same email delivered twice under two task ids is sent once; the second
// delivery gets the first one's result.
func TestSameEmailTwiceOneSend(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	cfg := baseEnv(t, srv.Addr)
	w := startWorker(t, cfg)

	j, err := testenv.Job(tasks.Emails.Job(tasks.Email{To: "ada@example.com", Subject: "Welcome", Body: "Hello"}))
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rec := e.waitState(t, j.Key, dedup.StatusDone)
	second, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	info := e.waitTask(t, j.Queue, second.ID, asynq.TaskStateCompleted)
	e.waitTask(t, j.Queue, first.ID, asynq.TaskStateCompleted)
	if n := outboxCount(t, cfg["ONCEQ_OUTBOX_DIR"]); n != 1 {
		t.Fatalf("%d emails sent, want 1", n)
	}
	if string(info.Result) != string(rec.Result) || !strings.Contains(string(rec.Result), tasks.MessageID(j.Key.String())) {
		t.Fatalf("replayed result %q, stored %q", info.Result, rec.Result)
	}
	if r, _ := e.store.Status(context.Background(), j.Key); r.Attempts != 1 {
		t.Fatalf("attempts %d, want 1", r.Attempts)
	}
	// One info line for the run; the duplicate never ran and is a decision.
	if n := strings.Count(w.logs.String(), `"msg":"task finished"`); n != 1 ||
		!strings.Contains(w.logs.String(), `"key":"`+j.Key.String()+`","outcome":"ok","attempt":1`) {
		t.Fatalf("%d task lines, want 1 for %s:\n%s", n, j.Key, w.logs)
	}
}

// flakyGateway fails the first n charges with 503, then serves the built-in gateway.
type flakyGateway struct {
	server *gateway.Server
	fail   atomic.Int64
	calls  atomic.Int64
}

func (f *flakyGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	if f.fail.Add(-1) >= 0 {
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	f.server.ServeHTTP(w, r)
}

// A payment whose gateway fails twice is charged once, on the third attempt.
func TestPaymentRetriedThenOneCharge(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	gw := &flakyGateway{server: &gateway.Server{}}
	gw.fail.Store(2)
	hs := httptest.NewServer(gw)
	t.Cleanup(hs.Close)
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_GATEWAY_URL"] = hs.URL
	startWorker(t, cfg)

	j, o := e.enqueued(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-20260628-001", Account: "acct-1", Amount: 4200, Currency: "EUR"})))
	rec := e.waitState(t, j.Key, dedup.StatusDone)
	if rec.Attempts != 3 || gw.calls.Load() != 3 || gw.server.Charges(j.Key.String()) != 1 {
		t.Fatalf("attempts %d, gateway calls %d, charges %d; want 3, 3, 1", rec.Attempts, gw.calls.Load(), gw.server.Charges(j.Key.String()))
	}
	e.waitTask(t, j.Queue, o.TaskID, asynq.TaskStateCompleted)

	// The seed: the same payment id again is refused as already processed.
	again, err := e.producer.Enqueue(context.Background(), j)
	if err != nil || again.Decision != dedup.Duplicate || again.State != dedup.StatusDone ||
		!strings.Contains(again.Reason, "already processed: done") || !bytes.Equal(again.Result, rec.Result) {
		t.Fatalf("second enqueue: %+v %v", again, err)
	}
}

// A worker crashed between the gateway call and Complete: its lease runs out,
// the next delivery runs the handler again, and the gateway, keyed by the
// idempotency key, charges once.
func TestPaymentCrashBetweenChargeAndComplete(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	gw := &gateway.Server{}
	hs := httptest.NewServer(gw)
	t.Cleanup(hs.Close)
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_GATEWAY_URL"] = hs.URL
	ctx := context.Background()

	p := tasks.Payment{PaymentID: "pmt-crash-1", Account: "acct-9", Amount: 990, Currency: "USD"}
	j, err := testenv.Job(tasks.Payments.Job(p))
	if err != nil {
		t.Fatal(err)
	}
	// The crashed worker: claimed with a short lease, charged, never completed.
	c, err := e.store.Claim(ctx, j.Key, j.Fingerprint, 300*time.Millisecond, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	gc := &gateway.Client{URL: hs.URL, HTTP: hs.Client()}
	charge, err := gc.Charge(ctx, j.Key.String(), p)
	if err != nil {
		t.Fatal(err)
	}

	startWorker(t, cfg)
	if _, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue)); err != nil {
		t.Fatal(err)
	}
	rec := e.waitState(t, j.Key, dedup.StatusDone)
	if gw.Charges(j.Key.String()) != 1 || rec.Attempts != 2 {
		t.Fatalf("charges %d, attempts %d; want 1, 2", gw.Charges(j.Key.String()), rec.Attempts)
	}
	if !strings.Contains(string(rec.Result), charge.ChargeID) {
		t.Fatalf("result %s does not name the original charge %s", rec.Result, charge.ChargeID)
	}
	// Fencing: the crashed worker waking up cannot record anything.
	if err := e.store.Complete(ctx, c.Hold, []byte("stale"), 0); err == nil {
		t.Fatal("stale completion accepted")
	}
}

// The same key with another payload is archived at once, never retried.
func TestMismatchArchivedWithoutRetry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	cfg := baseEnv(t, srv.Addr)
	startWorker(t, cfg)

	j, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: "welcome-7", To: "bob@example.com", Subject: "Hi", Body: "one"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue)); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, j.Key, dedup.StatusDone)
	other, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: "welcome-7", To: "bob@example.com", Subject: "Hi", Body: "two"}))
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.client.Enqueue(other.Task, asynq.Queue(other.Queue), asynq.MaxRetry(5))
	if err != nil {
		t.Fatal(err)
	}
	archived := e.waitTask(t, other.Queue, info.ID, asynq.TaskStateArchived)
	if archived.Retried != 0 || !strings.Contains(archived.LastErr, "different payload") {
		t.Fatalf("archived task: retried %d, last error %q", archived.Retried, archived.LastErr)
	}
	if n := outboxCount(t, cfg["ONCEQ_OUTBOX_DIR"]); n != 1 {
		t.Fatalf("%d emails sent, want 1", n)
	}
}

// A webhook redelivered with a new attempt number (volatile) and without
// onceq's headers, as a plain asynq client would send it: one effect.
func TestWebhookAttemptFieldIsVolatile(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_LEASE"] = "4s" // concurrent duplicates come back after about a second
	startWorker(t, cfg)

	var infos []*asynq.TaskInfo
	for attempt := 1; attempt <= 3; attempt++ {
		payload := []byte(`{"source":"crm","event_id":"evt-1","type":"user.created","attempt":` + string(rune('0'+attempt)) +
			`,"data":{"user_id":"u1","email":"new@example.com","name":"New"}}`)
		info, err := e.client.Enqueue(asynq.NewTask(tasks.TypeWebhook, payload), asynq.Queue(tasks.QueueDefault), asynq.Retention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	for _, info := range infos {
		e.waitTask(t, info.Queue, info.ID, asynq.TaskStateCompleted)
	}
	// The one routed welcome email is sent once.
	deadline := time.Now().Add(30 * time.Second)
	for outboxCount(t, cfg["ONCEQ_OUTBOX_DIR"]) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // give a wrong second email every chance to show up
	if n := outboxCount(t, cfg["ONCEQ_OUTBOX_DIR"]); n != 1 {
		t.Fatalf("%d welcome emails, want 1", n)
	}
}

// The dashboard answers its API with onceq's queues, and the metrics count
// the decisions.
func TestAdminDashboardAndMetrics(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	cfg := baseEnv(t, srv.Addr)
	w := startWorker(t, cfg)

	j, _ := testenv.Job(tasks.Emails.Job(tasks.Email{To: "c@example.com", Subject: "S", Body: "B"}))
	if _, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue)); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, j.Key, dedup.StatusDone)
	if _, err := e.client.Enqueue(j.Task, asynq.Queue(j.Queue)); err != nil {
		t.Fatal(err)
	}

	body := get(t, "http://"+w.admin+"/monitoring/api/queues", http.StatusOK)
	var qs struct {
		Queues []struct {
			Queue string `json:"queue"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(body), &qs); err != nil || len(qs.Queues) == 0 || qs.Queues[0].Queue != tasks.QueueDefault {
		t.Fatalf("dashboard queues: %s (%v)", body, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := get(t, "http://"+w.admin+"/metrics", http.StatusOK)
		if strings.Contains(m, `onceq_dedup_decisions_total{key_namespace="email:send",outcome="duplicate",side="worker"} 1`) &&
			strings.Contains(m, `onceq_queue_size{queue="default",state="pending"}`) &&
			strings.Contains(m, `onceq_queue_processed_total{queue="default"} 2`) &&
			strings.Contains(m, `onceq_queue_failed_total{queue="default"} 0`) &&
			strings.Contains(m, `onceq_queue_paused{queue="default"} 0`) &&
			strings.Contains(m, `onceq_queue_latency_seconds{queue="default"} 0`) &&
			// Started at zero: a configured queue asynq never saw, a counter
			// before its first event.
			strings.Contains(m, `onceq_queue_size{queue="low",state="pending"} 0`) &&
			strings.Contains(m, `onceq_blocked_keys{queue="low"} 0`) &&
			strings.Contains(m, `onceq_lease_lost_total{key_namespace="payment:charge"} 0`) &&
			!strings.Contains(m, `{namespace="`) && !strings.Contains(m, `,namespace="`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed the duplicate:\n%s", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := e.insp.PauseQueue(tasks.QueueDefault); err != nil {
		t.Fatal(err)
	}
	if m := get(t, "http://"+w.admin+"/metrics", http.StatusOK); !strings.Contains(m, `onceq_queue_paused{queue="default"} 1`) {
		t.Fatalf("paused queue not shown paused:\n%s", m)
	}
	if !strings.Contains(w.logs.String(), `"outcome": "duplicate"`) && !strings.Contains(w.logs.String(), `"outcome":"duplicate"`) {
		t.Fatalf("duplicate decision not logged:\n%s", w.logs)
	}
	get(t, "http://"+w.admin+"/healthz", http.StatusOK)
	get(t, "http://"+w.admin+"/readyz", http.StatusOK)
	// Tokenless on loopback: a page that pointed its own name here reaches
	// no route, the dashboard's least of all.
	testenv.RequireRebindRefused(t, http.MethodGet, "http://"+w.admin+"/monitoring/api/queues")
}

// With no Redis configured and nothing on the default address, the worker
// runs on an in-memory Redis, says so, and processes tasks.
func TestEmbeddedDefault(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	cfg := baseEnv(t, "")
	delete(cfg, "ONCEQ_REDIS_URL")
	w := startWorkerWith(t, cfg, hooks{defaultRedisAddr: addr})
	if !strings.Contains(w.logs.String(), "NOTHING IS DURABLE") {
		t.Fatalf("no durability warning:\n%s", w.logs)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb)
	j, _ := testenv.Job(tasks.Emails.Job(tasks.Email{To: "d@example.com", Subject: "S", Body: "B"}))
	if o, err := e.producer.Enqueue(context.Background(), j); err != nil || o.Decision != dedup.Enqueued {
		t.Fatalf("enqueue on embedded: %+v %v", o, err)
	}
	e.waitState(t, j.Key, dedup.StatusDone)
	if o, _ := e.producer.Enqueue(context.Background(), j); o.Decision != dedup.Duplicate {
		t.Fatalf("second enqueue on embedded: %+v", o)
	}
	get(t, "http://"+w.admin+"/monitoring/api/queues", http.StatusOK)
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, want)
	}
	return string(b)
}

// An evicting Redis could drop dedup records silently: with
// ONCEQ_MAXMEMORY_CHECK=refuse the worker will not start on one, with the
// default it starts and warns.
func TestEvictingRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	cfg := baseEnv(t, srv.Addr)
	cfg["ONCEQ_MAXMEMORY_CHECK"] = "refuse"
	logs := &testenv.Buffer{}
	err := runWith(context.Background(), nil, io.Discard, logs, hooks{env: cfg})
	if err == nil || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("refuse mode on an evicting Redis: %v", err)
	}

	cfg["ONCEQ_MAXMEMORY_CHECK"] = "warn"
	w := startWorker(t, cfg)
	if !strings.Contains(w.logs.String(), "not noeviction") {
		t.Fatalf("no eviction warning:\n%s", w.logs)
	}
}
